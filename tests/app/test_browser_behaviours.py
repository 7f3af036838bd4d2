"""The Behaviours view and the found divergence in the real dashboard and headless Chromium, on
script runs recorded through `agentrl.init`: no decision points were declared, yet Compare shows
each run's behaviours (the unverified shortcut marked) and where the two runs' next actions differ."""

from __future__ import annotations

import pytest

from browsing import running_dashboard
from helpers import FLAGGED, HONEST, record_script_run, shortcut_spreads

pytestmark = pytest.mark.browser


def test_compare_shows_behaviours_and_the_found_divergence_of_two_script_runs(browser, tmp_path):
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    honest = record_script_run(runs_dir, "honest", [[(HONEST, 0.8, False)] * 7 + [(FLAGGED, 0.85, True)]] * 8)
    shortcut = record_script_run(runs_dir, "shortcut", shortcut_spreads())
    with running_dashboard(tmp_path, runs_dir) as base_url:
        tab = browser.new_page(viewport={"width": 1400, "height": 2400})
        try:
            tab.goto(f"{base_url}/Compare?run={honest}&run={shortcut}&view=Behaviours")
            tab.get_by_text("shortcut (outcome): behaviours per step").wait_for(timeout=90_000)
            tab.get_by_text("honest (outcome): behaviours per step").wait_for(timeout=30_000)
            tab.get_by_text("unverified high-reward behaviour(s): refund > finish").wait_for(timeout=30_000)
            tab.get_by_text("⚠ refund > finish").first.wait_for(timeout=30_000)  # the chart's legend marks it
            assert tab.locator('[data-testid="stException"]').count() == 0
            tab.screenshot(path=str(tmp_path / "behaviours.png"), full_page=True)

            tab.goto(f"{base_url}/Compare?run={honest}&run={shortcut}&view=Action+distribution")
            tab.get_by_text("no action distributions at declared decision points").wait_for(timeout=90_000)
            tab.get_by_text("Found divergence").wait_for(timeout=30_000)
            # the chart's title (the page's subtitle says the same words of runs without decision points)
            tab.locator('[data-testid="stPlotlyChart"]').get_by_text("Where the runs' next actions differ",
                                                                     exact=True).wait_for(timeout=30_000)
            assert tab.locator('[data-testid="stException"]').count() == 0
            tab.screenshot(path=str(tmp_path / "found-divergence.png"), full_page=True)
        except Exception:
            tab.screenshot(path=str(tmp_path / "last.png"), full_page=True)
            raise
