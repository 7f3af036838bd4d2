"""The real thing: `streamlit run app.py` on a free local port, driven by headless Chromium.

Launch a run from the Launch page, open Live, and watch the charts draw and the step counter
advance. A screenshot of the Live page is saved under the test's temporary directory.
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest
from browsing import first_step, running_dashboard, step_counter, wait_idle

pytestmark = pytest.mark.browser


def test_launch_a_run_and_watch_it_live(dashboard, page, tmp_path):
    base_url, runs_dir = dashboard

    page.goto(f"{base_url}/Launch")
    page.get_by_role("button", name="Start run").wait_for(timeout=60_000)
    step_delay = page.get_by_role("spinbutton", name="Step delay (s)")
    step_delay.fill("1")  # 30 rounds x 1 s: the counter moves for 30 s, however loaded the machine
    step_delay.press("Tab")
    page.get_by_role("button", name="Start run").click()
    page.get_by_text("Started").wait_for(timeout=60_000)
    assert len([p for p in runs_dir.iterdir() if p.is_dir()]) == 1

    page.get_by_role("link", name="Watch it live").click()
    page.wait_for_url(re.compile(r".*/Live\?run="), timeout=60_000)
    # Plotly draws SVG: wait for a line path inside the success chart.
    page.locator(".js-plotly-plot .scatterlayer path.js-line").first.wait_for(timeout=60_000)

    # A marker in the page's JS state: a full reload would wipe it, a fragment refresh keeps it.
    page.evaluate("window.__agentrl_marker = 42")
    first = first_step(page, timeout_s=30)
    assert first is not None, "the step counter never showed a step"
    advanced = first
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and advanced[0] <= first[0]:
        time.sleep(0.5)
        advanced = step_counter(page) or advanced
    assert advanced[0] > first[0], f"the step counter stayed at {first}"
    assert advanced[1] == 30
    assert page.evaluate("window.__agentrl_marker") == 42, "the Live page reloaded instead of refreshing itself"
    charts = page.locator(".js-plotly-plot")
    assert charts.count() >= 2
    drawn = page.locator(".js-plotly-plot .scatterlayer path.js-line, .js-plotly-plot .barlayer path")
    assert drawn.count() > 0
    assert page.locator('[data-testid="stException"]').count() == 0
    # Local-first: the dashboard asks nothing of any other host (no fonts, icons or telemetry).
    assert page.external_requests == []
    page.locator(".js-plotly-plot .scatterlayer path.js-line").first.wait_for(timeout=10_000)
    page.screenshot(path=str(tmp_path / "live.png"), full_page=True)
    assert (tmp_path / "live.png").stat().st_size > 10_000


def _review_tab(browser, url: str, reviewer: str):
    tab = browser.new_page(viewport={"width": 1400, "height": 2400})
    tab.goto(url)
    tab.get_by_role("button", name="Approve").wait_for(timeout=60_000)
    name = tab.get_by_role("textbox", name="Reviewer")
    name.fill(reviewer)
    name.press("Enter")
    wait_idle(tab)
    return tab


def test_two_sessions_approve_then_the_guarded_run_is_promoted(trained_pair, browser, tmp_path):
    from agentrl.store import queries
    from agentrl.store.ingest import connect

    runs_dir, ids = trained_pair
    run_id = ids["guarded"]
    with running_dashboard(tmp_path, runs_dir) as base_url:
        url = f"{base_url}/Review?run={run_id}"
        alice = _review_tab(browser, url, "alice")
        bob = _review_tab(browser, url, "bob")
        # Both sessions have the same top trajectory open; both approvals are recorded, in order.
        alice.get_by_role("button", name="Approve").click()
        alice.get_by_text("Approved step").wait_for(timeout=60_000)
        bob.get_by_role("button", name="Approve").click()
        bob.get_by_text("Approved step").wait_for(timeout=60_000)
        first_approved = bob.get_by_text("Approved step").inner_text()

        # Alice works through the unreviewed trajectories, approving the top one four times: every
        # high-reward behaviour of the last 5 steps is then reviewed (the gate's coverage check).
        alice.reload()
        alice.get_by_role("button", name="Approve").wait_for(timeout=60_000)
        alice.get_by_role("textbox", name="Reviewer").fill("alice")
        alice.get_by_role("textbox", name="Reviewer").press("Enter")
        wait_idle(alice)
        alice.get_by_role("combobox", name="verdict").click()
        alice.get_by_role("option", name="unreviewed").click()
        wait_idle(alice)
        for _ in range(4):
            alice.get_by_role("button", name="Approve").click()
            wait_idle(alice)
            alice.get_by_text("Approved step").wait_for(timeout=60_000)

        alice.get_by_role("tab", name="Promotion gate").click()
        alice.get_by_text("The gate passes").wait_for(timeout=60_000)
        alice.get_by_role("button", name="Promote").click()
        alice.get_by_text("Promoted (record").wait_for(timeout=60_000)
        assert alice.locator('[data-testid="stException"]').count() == 0
        alice.screenshot(path=str(tmp_path / "review.png"), full_page=True)

    con = connect(runs_dir)
    reviews = queries.reviews_for_run(con, run_id)
    first = reviews[(reviews["step"] == reviews.iloc[0]["step"]) & (reviews["traj_idx"] == reviews.iloc[0]["traj_idx"])]
    assert first["reviewer"].tolist()[:2] == ["alice", "bob"], first_approved
    assert first["review_id"].is_monotonic_increasing
    assert len(reviews) == 6
    promotions = queries.promotions(con, run_id)
    assert promotions["decision"].tolist() == ["promote"] and promotions["gate_passed"].tolist() == [True]
    assert promotions["decided_by"].tolist() == ["alice"]
    assert (runs_dir / run_id / "bundle" / "manifest.json").is_file()
    con.close()


# 12 of the preset's 60 steps in the suite; AGENTRL_LM_PAIR_STEPS=60 runs the whole preset (the README's figure).
LM_PAIR_STEPS = int(os.environ.get("AGENTRL_LM_PAIR_STEPS", "12"))


def test_the_lm_pair_launched_from_the_dashboard_runs_live_to_completion(dashboard, page, tmp_path):
    """Issue 4's acceptance: the lm-refund preset pair, started from Launch, trains live (the
    counter advances on the Live page) and both runs succeed, the guarded one with vetoes and a
    zero audit counter."""
    from agentrl.store import queries
    from agentrl.store.ingest import connect

    base_url, runs_dir = dashboard
    page.goto(f"{base_url}/Launch")
    page.get_by_role("combobox", name="Preset").wait_for(timeout=60_000)
    page.get_by_role("combobox", name="Preset").click()
    page.get_by_role("option", name="lm-refund-outcome").click()
    page.get_by_text("Memory budget").wait_for(timeout=60_000)
    # Enough steps to watch it train live and to see the guard veto; the pair's learning figures
    # come from benchmarks/lm_pair.py.
    steps = page.get_by_label("Optimiser steps", exact=True)
    steps.fill(str(LM_PAIR_STEPS))
    steps.press("Tab")
    wait_idle(page)
    started = time.monotonic()
    page.get_by_role("button", name="Start outcome-vs-guarded pair").click()
    page.wait_for_url(re.compile(r".*/Compare\?run=.*&run="), timeout=60_000)

    first = first_step(page, timeout_s=120)
    assert first is not None and first[1] == LM_PAIR_STEPS, f"the LM run never showed a step ({first})"
    statuses = []
    deadline = time.monotonic() + 280 + 5 * LM_PAIR_STEPS
    while time.monotonic() < deadline:
        statuses = [json.loads(p.read_text()).get("status") for p in sorted(runs_dir.glob("*/status.json"))]
        if len(statuses) == 2 and all(s in ("succeeded", "failed", "cancelled") for s in statuses):
            break
        time.sleep(1)
    wall = time.monotonic() - started
    assert statuses == ["succeeded", "succeeded"], statuses
    last = step_counter(page)
    assert last is not None and last[0] > first[0], "the Live page did not follow the run"
    assert page.locator('[data-testid="stException"]').count() == 0
    page.screenshot(path=str(tmp_path / "lm-live.png"), full_page=True)
    print(f"LM pair from the dashboard: both succeeded in {wall:.0f}s")
    # The dashboard holds the store; read the run folders' facts through a copy of the store file.
    import shutil

    copy = tmp_path / "store-copy"
    copy.mkdir()
    for _ in range(20):  # the dashboard ingests the last chunks within a tick of the end
        time.sleep(0.5)
    shutil.copy(runs_dir / "agentrl.duckdb", copy / "agentrl.duckdb")
    wal = runs_dir / "agentrl.duckdb.wal"
    if wal.exists():
        shutil.copy(wal, copy / "agentrl.duckdb.wal")
    con = connect(copy)
    runs = queries.list_runs(con).set_index("scorer")
    guarded = queries.run_totals(con, runs.loc["guarded", "run_id"])
    assert guarded["steps"] == LM_PAIR_STEPS and guarded["vetoed_rollouts"] > 0 and guarded["vetoed_updates"] == 0
    con.close()
