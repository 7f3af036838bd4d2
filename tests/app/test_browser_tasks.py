"""Bring your own task, in the real browser: the calendar-booking example from `examples/` is typed into
the Launch form (a bad path first: one error line, nothing can start), trains as an
outcome-vs-guarded pair, and its trajectories, reward components, flags and decision-point
distributions show on Live, Compare and Review. And the coding presets run to completion from the
dashboard. Reuses the dashboard and browser fixtures of test_browser.py."""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from browsing import read_raw_transcript, wait_idle as _wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.lm, pytest.mark.slow]

TERMINAL = ("succeeded", "failed", "cancelled")


def _statuses(runs_dir) -> dict[str, str]:
    return {p.parent.name: json.loads(p.read_text()).get("status") for p in sorted(runs_dir.glob("*/status.json"))}


def _wait_finished(runs_dir, count: int, timeout_s: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    statuses = {}
    while time.monotonic() < deadline:
        statuses = _statuses(runs_dir)
        if len(statuses) == count and all(s in TERMINAL for s in statuses.values()):
            break
        time.sleep(1)
    return statuses


def _field(page, label: str, value: str) -> None:
    box = page.get_by_label(label, exact=True)
    box.fill(value)
    box.press("Tab")
    _wait_idle(page)


def _no_exception(page) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0


def _launch_form(page, base_url: str, preset: str) -> None:
    """The Launch page with `preset` chosen and its preflight (the memory budget) shown."""
    page.goto(f"{base_url}/Launch")
    page.get_by_role("combobox", name="Preset").wait_for(timeout=60_000)
    page.get_by_role("combobox", name="Preset").click()
    page.get_by_role("option", name=preset).click()
    page.get_by_text("Memory budget").wait_for(timeout=60_000)


def test_the_example_task_trains_from_launch_and_shows_on_every_page(dashboard, page, tmp_path):
    base_url, runs_dir = dashboard
    _launch_form(page, base_url, "lm-refund-outcome")

    # Validated as typed: a task that is not there is one line, and nothing can start.
    _field(page, "Task", "examples/calendar_booking/nope.py:TASK")
    # The form names the field by its label: "Task: the file ... does not exist (you entered ...)".
    page.get_by_text("Task: the file 'examples/calendar_booking/nope.py' does not exist").first.wait_for(timeout=60_000)
    assert page.get_by_role("button", name="Start run").is_disabled()

    _field(page, "Task", "examples/calendar_booking/task.py:TASK")
    _field(page, "Name", "calendar")
    _field(page, "Optimiser steps", "4")
    _field(page, "Evaluate every N steps", "2")
    page.get_by_text("Memory budget").wait_for(timeout=60_000)
    page.get_by_role("button", name="Start outcome-vs-guarded pair").click()
    page.wait_for_url(re.compile(r".*/Compare\?run=.*&run="), timeout=60_000)  # a pair opens on Compare
    statuses = _wait_finished(runs_dir, 2, timeout_s=400)
    assert sorted(statuses.values()) == ["succeeded", "succeeded"], statuses
    guarded = next(run_id for run_id in statuses if "guarded" in run_id)
    config = json.loads((runs_dir / guarded / "config.json").read_text())
    assert config["task"].endswith("examples/calendar_booking/task.py:TASK") and config["rounds"] == 4

    page.goto(f"{base_url}/Live?run={guarded}&panels=Policy")  # the distribution is a panel drawn on demand
    page.get_by_text("Action distribution at slot taken").first.wait_for(timeout=60_000)
    page.get_by_text("booked").first.wait_for(timeout=60_000)  # a reward component's legend
    _no_exception(page)

    # Compare draws one view at a time; the URL names it (the default is Rates).
    page.goto(f"{base_url}/Compare")
    page.get_by_text("Violation rate").first.wait_for(timeout=60_000)
    _no_exception(page)
    page.goto(f"{base_url}/Compare?view=Action+distribution")
    page.get_by_text("Action distribution at slot taken, step").first.wait_for(timeout=60_000)
    _no_exception(page)
    page.goto(f"{base_url}/Compare?view=Reward+components")
    page.get_by_text("violation_penalty").first.wait_for(timeout=60_000)
    _no_exception(page)

    page.goto(f"{base_url}/Review?run={guarded}")
    page.get_by_role("button", name="Approve").wait_for(timeout=60_000)
    page.get_by_text("violation:").first.wait_for(timeout=60_000)  # the guard's flags
    read_raw_transcript(page, "check_slot", timeout_ms=60_000)  # the transcript
    page.get_by_role("tab", name="Promotion gate").click()
    page.get_by_text("The gate fails").first.wait_for(timeout=60_000)  # nothing reviewed yet
    _no_exception(page)
    page.screenshot(path=str(tmp_path / "calendar-review.png"), full_page=True)

    page.goto(f"{base_url}/Hardware")
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    _no_exception(page)


# 8 of the preset's 40 steps in the suite; AGENTRL_CODING_PAIR_STEPS=40 runs the whole preset pair
# from the dashboard (the README's figure; its learning curves come from benchmarks/lm_task_pair.py).
CODING_PAIR_STEPS = int(os.environ.get("AGENTRL_CODING_PAIR_STEPS", "8"))


def test_the_lm_coding_pair_runs_to_completion_from_the_dashboard(dashboard, page, tmp_path):
    base_url, runs_dir = dashboard
    _launch_form(page, base_url, "lm-coding-outcome")
    _field(page, "Optimiser steps", str(CODING_PAIR_STEPS))
    page.get_by_text("Memory budget").wait_for(timeout=60_000)
    started = time.monotonic()
    page.get_by_role("button", name="Start outcome-vs-guarded pair").click()
    page.wait_for_url(re.compile(r".*/Compare\?run=.*&run="), timeout=60_000)  # a pair opens on Compare
    statuses = _wait_finished(runs_dir, 2, timeout_s=600)
    wall = time.monotonic() - started
    assert sorted(statuses.values()) == ["succeeded", "succeeded"], statuses
    assert wall < 600, f"the coding pair took {wall:.0f}s"
    print(f"lm-coding pair of {CODING_PAIR_STEPS} steps from the dashboard: both succeeded in {wall:.0f}s")
    for run_id in statuses:
        assert json.loads((runs_dir / run_id / "config.json").read_text())["rounds"] == CODING_PAIR_STEPS
    page.goto(f"{base_url}/Compare?view=Action+distribution")  # the coding task's decision points
    page.get_by_text("after reading").first.wait_for(timeout=60_000)
    _no_exception(page)
