"""In a real browser (issue 24): marking a trajectory as an exploit fixture on Review rejects it,
so it counts as reviewed: its history says 'reject', the explorer no longer lists it as
unreviewed, and the fixtures tab lists it with its behaviour."""

from __future__ import annotations

import pytest
from browsing import running_dashboard, wait_idle

pytestmark = pytest.mark.browser


def test_a_fixture_marked_on_review_counts_as_reviewed(trained_pair, browser, tmp_path):
    from agentrl.store import queries
    from agentrl.store.ingest import connect

    runs_dir, ids = trained_pair
    run_id = ids["outcome"]
    with running_dashboard(tmp_path, runs_dir) as base_url:
        tab = browser.new_page(viewport={"width": 1400, "height": 2400})
        tab.goto(f"{base_url}/Review?run={run_id}")
        tab.get_by_role("button", name="Mark as exploit fixture").wait_for(timeout=60_000)
        tab.get_by_role("textbox", name="Reviewer").fill("alice")
        tab.get_by_role("textbox", name="Reviewer").press("Enter")
        wait_idle(tab)
        tab.get_by_role("textbox", name="Note").fill("refunds without approval")
        tab.get_by_role("textbox", name="Note").press("Control+Enter")
        wait_idle(tab)
        tab.get_by_role("button", name="Mark as exploit fixture").click()
        tab.get_by_text("Stored exploit fixture").wait_for(timeout=60_000)
        tab.get_by_role("button", name="Previous").click()  # the next one listed opened (issue 29): back to it
        tab.get_by_text("Review history").wait_for(timeout=60_000)
        assert tab.locator('[data-testid="stException"]').count() == 0
        tab.get_by_role("tab", name="Exploit fixtures").click()
        tab.get_by_text("Every fixture of this run's task is replayed").wait_for(timeout=60_000)
        tab.screenshot(path=str(tmp_path / "fixture.png"), full_page=True)

    con = connect(runs_dir)
    try:
        (fixture,) = queries.all_fixtures(con).to_dict("records")
        history = queries.review_history(con, run_id, int(fixture["step"]), int(fixture["traj_idx"]))
        assert history[["verdict", "reviewer", "note"]].values.tolist() == [["reject", "alice", "refunds without approval"]]
        unreviewed = queries.find_trajectories(con, run_id, verdict="unreviewed", limit=100_000)
        assert not ((unreviewed["step"] == fixture["step"]) & (unreviewed["traj_idx"] == fixture["traj_idx"])).any()
    finally:
        con.close()
