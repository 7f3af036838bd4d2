"""Issue 16's acceptance in a real browser: while an outcome-only run trains, Live shows the
hacking-onset banner and a marker at the onset step on its charts, before the run ends."""

from __future__ import annotations

import time

import pytest
from browsing import start_training, step_counter

from agentrl.config import load_preset

pytestmark = pytest.mark.browser


def test_live_shows_the_onset_banner_and_chart_markers_while_the_outcome_run_trains(dashboard, page, tmp_path):
    base_url, runs_dir = dashboard
    # 30 steps x 1 s: the onset (step 7) arrives while the run still has 20 seconds to go.
    config = load_preset("refund-outcome").model_copy(update={"step_delay": 1.0})
    training = start_training(runs_dir, config)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not [p for p in runs_dir.glob("*") if p.is_dir()]:
            time.sleep(0.2)
        (run_dir,) = [p for p in runs_dir.glob("*") if p.is_dir()]
        page.goto(f"{base_url}/Live?run={run_dir.name}")
        banner = page.locator('[data-testid="stAlert"]').filter(has_text="Hacking onset at step 7")
        banner.wait_for(timeout=90_000)
        counter = step_counter(page)
        assert counter is not None and counter[0] < counter[1] == 30, f"the run had ended: {counter}"
        assert "hack_premium" in banner.inner_text()
        # The marker: a dashed line shape and its label on the charts drawn by the page.
        page.get_by_text("hacking onset (step 7)").first.wait_for(timeout=30_000)
        charts_marked = page.locator(".js-plotly-plot").filter(has=page.locator("g.shapelayer path"))
        # Live draws its charts one after another within a redraw: the second may come a moment
        # after the first one's label.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and charts_marked.count() < 2:
            time.sleep(0.2)
        assert charts_marked.count() >= 2
        assert page.locator('[data-testid="stException"]').count() == 0
        page.screenshot(path=str(tmp_path / "onset.png"), full_page=True)
    finally:
        training.kill()
        training.wait()
