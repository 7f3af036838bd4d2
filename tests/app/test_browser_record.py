"""Runs recorded from users' own code, in the real dashboard and headless Chromium: a TRL script's
run on Live and Review, and a user's command launched from Launch, then cancelled from Live.

The dashboard helpers (`_running_dashboard`, the `browser`, `dashboard` and `page` fixtures, the
step counter) are test_browser.py's, shared so both files drive the dashboard the same way.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from helpers import REPO_ROOT, wait_for
from browsing import first_step as _first_step, read_raw_transcript, running_dashboard as _running_dashboard, step_counter as _step_counter

pytestmark = pytest.mark.browser


@pytest.mark.slow
@pytest.mark.lm
def test_a_trl_scripts_run_shows_on_live_and_review(browser, tmp_path):  # noqa: F811 - the fixture
    runs_dir = tmp_path / "runs"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": str(REPO_ROOT)}
    env.pop("AGENTRL_RUN_DIR", None)
    result = subprocess.run([sys.executable, "examples/trl_grpo_script.py", "--steps", "2", "--runs-dir", str(runs_dir),
                             "--output-dir", str(tmp_path / "trl")], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (run_id,) = [p.name for p in runs_dir.iterdir() if p.is_dir()]

    with _running_dashboard(tmp_path, runs_dir) as base_url:
        tab = browser.new_page(viewport={"width": 1400, "height": 2000})
        # The engine-metrics panel is one of Live's panels drawn on demand; the URL names it.
        tab.goto(f"{base_url}/Live?run={run_id}&panels=Engine+metrics")
        tab.locator('[data-testid="stProgress"]').first.wait_for(timeout=60_000)
        assert wait_for(lambda: _step_counter(tab) == (2, 2), timeout=30), _step_counter(tab)
        assert "succeeded" in tab.locator('[data-testid="stProgress"]').first.inner_text()
        # TRL's own metrics, tools included, are offered as the run's engine metrics.
        tab.get_by_text("tools/call_frequency").first.wait_for(timeout=30_000)
        tab.locator(".js-plotly-plot").first.wait_for(timeout=30_000)
        assert tab.locator('[data-testid="stException"]').count() == 0
        tab.screenshot(path=str(tmp_path / "trl-live.png"), full_page=True)

        tab.goto(f"{base_url}/Review?run={run_id}")
        tab.get_by_role("button", name="Approve").wait_for(timeout=60_000)
        # The open trajectory's transcript: the completion with its tool calls. The conversation's table
        # is drawn on a canvas, so the text is read from the raw prompt and completion, opened as a person would.
        read_raw_transcript(tab, "-> lookup()")
        assert tab.get_by_text("amount None").count() == 0  # the script's task has no amount: none is said
        assert tab.locator('[data-testid="stException"]').count() == 0
        tab.screenshot(path=str(tmp_path / "trl-review.png"), full_page=True)


def test_a_users_command_launched_from_launch_is_cancelled_from_live(dashboard_with_scripts, page, tmp_path):  # noqa: F811
    base_url, runs_dir = dashboard_with_scripts
    page.goto(f"{base_url}/Launch")
    page.get_by_role("combobox", name="Preset").wait_for(timeout=60_000)
    page.get_by_role("combobox", name="Preset").click()
    page.get_by_role("option", name="script-custom-loop").click()
    command = page.get_by_role("textbox", name="Command")
    command.wait_for(timeout=60_000)
    assert command.input_value().splitlines() == ["python", "examples/custom_loop.py", "--steps", "40", "--step-seconds", "0.25"]
    # One argument per line: a long run, so it is still running when it is cancelled.
    command.fill("\n".join(["python", "examples/custom_loop.py", "--steps", "2000", "--step-seconds", "0.1"]))
    command.press("Tab")
    page.get_by_text("$ python examples/custom_loop.py --steps 2000 --step-seconds 0.1").wait_for(timeout=60_000)
    page.get_by_role("button", name="Start run").click()
    page.get_by_text("Started").wait_for(timeout=60_000)
    (run_dir,) = [p for p in runs_dir.iterdir() if p.is_dir()]
    assert json.loads((run_dir / "config.json").read_text())["command"][3] == "2000"

    page.get_by_role("link", name="Watch it live").click()
    page.wait_for_url(re.compile(r".*/Live\?run="), timeout=60_000)
    first = _first_step(page, timeout_s=60)
    assert first is not None, "the command's steps never showed on Live"
    page.get_by_role("button", name="Cancel run").click()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "cancelled" not in page.locator('[data-testid="stProgress"]').first.inner_text():
        time.sleep(0.5)
    assert "cancelled" in page.locator('[data-testid="stProgress"]').first.inner_text()
    status = json.loads((run_dir / "status.json").read_text())
    # The command stopped itself between steps (it asks run.stop_requested()); the engine ended the run.
    assert (status["status"], status["reported_status"], status["exit_code"]) == ("cancelled", "cancelled", 0)
    assert 0 < status["step"] < 2000
    assert page.locator('[data-testid="stException"]').count() == 0
