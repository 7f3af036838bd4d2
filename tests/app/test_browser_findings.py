"""Issue 13's findings that only a real browser shows: live charts that stay put and do not fade,
a finished run's page that sends nothing, Compare following a pair live side by side, and
decisions and new runs that reach an open tab without a reload."""

from __future__ import annotations

import contextlib
import time

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from browsing import (STEADINESS_JS, count_frames, first_step, record_frames, running_dashboard, start_training,
                      step_counter, wait_idle)

from agentrl.config import load_preset

pytestmark = pytest.mark.browser

CHART = '[data-testid="stPlotlyChart"]'


@contextlib.contextmanager
def _training(runs_dir, preset: str, timeout_s: float = 60, **settings):
    """A run of `preset` (with `settings`) training in its own process; yields its run id."""
    before = {p.name for p in runs_dir.iterdir() if p.is_dir()}
    trainer = start_training(runs_dir, load_preset(preset).model_copy(update=settings))
    try:
        deadline = time.monotonic() + timeout_s
        while not (new := {p.name for p in runs_dir.iterdir() if p.is_dir()} - before):
            if time.monotonic() > deadline:
                raise TimeoutError("the training run made no folder")
            time.sleep(0.2)
        yield new.pop()
    finally:
        trainer.kill()
        trainer.wait()


def _drawn(page, count: int, timeout_s: float = 60) -> None:
    page.wait_for_function(f"document.querySelectorAll('{CHART} .main-svg').length >= {count * 3}",
                           timeout=timeout_s * 1000)


def test_live_charts_update_in_place_without_fading_and_a_finished_run_sends_nothing(trained_pair, browser, tmp_path):
    """Finding 2: while a run trains, its charts never dim, can always be measured, and are
    redrawn at most every few seconds (not every refresh); a finished run's page is quiet."""
    runs_dir, ids = trained_pair
    with running_dashboard(tmp_path, runs_dir) as base_url:
        with _training(runs_dir, "refund-guarded", name="steady", rounds=400, step_delay=0.3) as run_id:
            tab = browser.new_page(viewport={"width": 1400, "height": 1600})
            tab.add_init_script(STEADINESS_JS)
            tab.goto(f"{base_url}/Live?run={run_id}")
            assert first_step(tab, timeout_s=60) is not None
            _drawn(tab, 2)
            time.sleep(1.0)
            tab.evaluate("window.__minOpacity = 1; window.__mounted = 0; window.__minVisible = Infinity")
            start = step_counter(tab)
            boxes, began = [], time.monotonic()
            deadline = began + 12.0
            while time.monotonic() < deadline:
                try:
                    boxes.append(tab.locator(CHART).first.bounding_box(timeout=5000))
                except PlaywrightTimeout:  # the tab was too busy to answer: counted as a miss
                    boxes.append(None)
                time.sleep(0.5)
            # A replaced chart can detach between finding it and measuring it, and a starved tab can
            # miss the 5 s; the finding was that no try ever succeeded in a two-minute run.
            measured = [box for box in boxes if box is not None]
            assert len(measured) >= len(boxes) / 2 and all(box["height"] > 200 for box in measured), boxes
            assert tab.evaluate("window.__minVisible") == 2, "a chart was missing from the page while it refreshed"
            assert step_counter(tab)[0] > start[0], "the run did not advance on the page"
            assert tab.evaluate("window.__minOpacity") >= 0.99, "a chart faded while the page refreshed"
            # Two charts redrawn every second would be ~24 new chart nodes in 12 s; every 3 s, ~8 (13
            # seen on a loaded machine, where a redraw waits for the tab). The bound is halfway: at
            # most one redraw a chart every 1.5 s.
            watched = time.monotonic() - began
            assert tab.evaluate("window.__mounted") <= 2 * watched / 1.5
            assert tab.locator('[data-testid="stException"]').count() == 0
            tab.screenshot(path=str(tmp_path / "live-steady.png"), full_page=True)

        quiet = browser.new_page(viewport={"width": 1400, "height": 1600})
        quiet.add_init_script(STEADINESS_JS)
        record_frames(quiet)
        quiet.goto(f"{base_url}/Live?run={ids['guarded']}")
        _drawn(quiet, 2)
        wait_idle(quiet)
        time.sleep(2.0)
        quiet.evaluate("window.__mounted = 0")
        assert count_frames(quiet, 5.0) == 0, "a finished run's page kept receiving data"
        assert quiet.evaluate("window.__mounted") == 0


def test_compare_follows_a_training_run_live_beside_a_finished_one(trained_pair, browser, tmp_path):
    """Finding 4: Compare refreshes while a picked run trains, the runs side by side."""
    runs_dir, ids = trained_pair
    with running_dashboard(tmp_path, runs_dir) as base_url:
        with _training(runs_dir, "refund-outcome", name="beside", rounds=200, step_delay=0.3) as run_id:
            tab = browser.new_page(viewport={"width": 1400, "height": 1600})
            tab.goto(f"{base_url}/Compare?run={run_id}&run={ids['guarded']}")
            bars = tab.locator('[data-testid="stProgress"]')
            bars.nth(1).wait_for(timeout=60_000)
            tab.evaluate("window.__agentrl_marker = 42")
            texts = lambda: [bars.nth(i).inner_text() for i in range(2)]  # noqa: E731
            first = texts()
            assert first[1].startswith("refund-guarded (guarded): step 30 of 30")
            boxes = [bars.nth(i).bounding_box() for i in range(2)]
            assert abs(boxes[0]["y"] - boxes[1]["y"]) < 5 and boxes[0]["x"] < boxes[1]["x"]  # side by side
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and texts()[0] == first[0]:
                time.sleep(0.5)
            assert texts()[0] != first[0], "Compare did not follow the training run"
            assert tab.evaluate("window.__agentrl_marker") == 42, "the page reloaded instead of refreshing itself"
            _drawn(tab, 2)


def test_a_decision_in_one_tab_and_a_new_run_reach_other_tabs_without_a_reload(trained_pair, browser, tmp_path):
    """Finding 9: Bob's open Review tab shows Alice's approval; the runs overview shows a run
    that started after it was opened."""
    runs_dir, ids = trained_pair
    with running_dashboard(tmp_path, runs_dir) as base_url:
        url = f"{base_url}/Review?run={ids['guarded']}"
        alice, bob = (browser.new_page(viewport={"width": 1400, "height": 2400}) for _ in range(2))
        for tab in (alice, bob):
            tab.goto(url)
            tab.get_by_role("button", name="Approve").wait_for(timeout=60_000)
            wait_idle(tab)
        bob.evaluate("window.__agentrl_marker = 42")
        assert bob.get_by_text("Review history").count() == 0
        alice.get_by_role("button", name="Approve").click()
        alice.get_by_text("Approved step").wait_for(timeout=60_000)
        bob.get_by_text("Review history").wait_for(timeout=15_000)
        assert bob.evaluate("window.__agentrl_marker") == 42

        home = browser.new_page(viewport={"width": 1400, "height": 1200})
        home.goto(base_url)
        running = home.locator('[data-testid="stMetric"]', has_text="running")
        running.wait_for(timeout=60_000)
        assert running.inner_text().split()[-1] == "0"
        home.evaluate("window.__agentrl_marker = 42")
        with _training(runs_dir, "refund-guarded", name="newcomer", rounds=100, step_delay=0.5):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and running.inner_text().split()[-1] != "1":
                time.sleep(0.5)
            assert running.inner_text().split()[-1] == "1", "the overview did not show the new run"
            assert home.evaluate("window.__agentrl_marker") == 42
