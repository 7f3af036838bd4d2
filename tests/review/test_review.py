"""Reviews are appended, never updated; a reject needs a note; exploit fixtures are checked
against every scorer."""

from __future__ import annotations

import threading

import pytest

from agentrl.store import queries
from agentrl.review import reviews as review


def _top(con, run_id):
    return queries.find_trajectories(con, run_id, limit=1).iloc[0]


def test_approve_is_appended_with_reviewer_and_time(pair_store):
    con, _, ids = pair_store
    top = _top(con, ids["guarded"])
    review.record_review(con, ids["guarded"], top.step, top.traj_idx, "approve", "alice")
    history = queries.review_history(con, ids["guarded"], top.step, top.traj_idx)
    assert history[["verdict", "reviewer"]].values.tolist() == [["approve", "alice"]]
    assert history["reviewed_at"].notna().all()


def test_a_reject_without_a_note_is_refused_and_nothing_is_written(pair_store):
    con, _, ids = pair_store
    top = _top(con, ids["guarded"])
    with pytest.raises(review.ReviewError, match="reject needs a note"):
        review.record_review(con, ids["guarded"], top.step, top.traj_idx, "reject", "alice", "   ")
    assert queries.reviews_for_run(con, ids["guarded"]).empty


def test_a_decision_needs_a_reviewer_name(pair_store):
    con, _, ids = pair_store
    top = _top(con, ids["guarded"])
    with pytest.raises(review.ReviewError, match="reviewer name"):
        review.record_review(con, ids["guarded"], top.step, top.traj_idx, "approve", "")


def test_reviewing_a_trajectory_that_does_not_exist_is_refused(pair_store):
    con, _, ids = pair_store
    with pytest.raises(review.ReviewError, match="no trajectory 999"):
        review.record_review(con, ids["guarded"], 1, 999, "approve", "alice")


def test_a_later_verdict_supersedes_but_never_replaces_an_earlier_one(pair_store):
    con, _, ids = pair_store
    top = _top(con, ids["guarded"])
    review.record_review(con, ids["guarded"], top.step, top.traj_idx, "approve", "alice")
    review.record_review(con, ids["guarded"], top.step, top.traj_idx, "reject", "bob", "refunds twice")
    history = queries.review_history(con, ids["guarded"], top.step, top.traj_idx)
    assert history["verdict"].tolist() == ["approve", "reject"]
    found = queries.find_trajectories(con, ids["guarded"], verdict="reject")
    assert [(r.step, r.traj_idx, r.reviews) for r in found.itertuples()] == [(top.step, top.traj_idx, 2)]


def test_two_sessions_reviewing_the_same_trajectory_are_both_recorded_in_order(pair_store):
    con, _, ids = pair_store
    top = _top(con, ids["guarded"])
    barrier = threading.Barrier(2)

    def reviewer(name: str, count: int) -> None:
        cursor = con.cursor()  # each browser session gets its own cursor on the one connection
        barrier.wait()
        for i in range(count):
            review.record_review(cursor, ids["guarded"], top.step, top.traj_idx, "approve", name, f"{name} {i}")

    threads = [threading.Thread(target=reviewer, args=(name, 20)) for name in ("alice", "bob")]
    [t.start() for t in threads]
    [t.join() for t in threads]
    history = queries.review_history(con, ids["guarded"], top.step, top.traj_idx)
    assert len(history) == 40
    assert history["review_id"].is_monotonic_increasing
    for name in ("alice", "bob"):  # each session's own reviews keep their order
        notes = history[history["reviewer"] == name]["note"].tolist()
        assert notes == [f"{name} {i}" for i in range(20)]


def test_the_shortcut_fixture_is_eligible_under_outcome_and_vetoed_under_guarded(pair_store):
    con, _, ids = pair_store
    shortcut = queries.find_trajectories(con, ids["outcome"], flags={"violation": True}, limit=1).iloc[0]
    fixture_id = review.mark_exploit(con, ids["outcome"], shortcut.step, shortcut.traj_idx, "alice",
                                     "refunds a high-value order without approval")
    (outcome,) = review.check_fixtures(con, "outcome")
    (guarded,) = review.check_fixtures(con, "guarded")
    assert outcome.fixture_id == guarded.fixture_id == fixture_id
    assert outcome.eligible and not guarded.eligible
    assert guarded.reward < outcome.reward


def test_an_exploit_fixture_needs_a_note(pair_store):
    con, _, ids = pair_store
    top = _top(con, ids["outcome"])
    with pytest.raises(review.ReviewError, match="needs a note"):
        review.mark_exploit(con, ids["outcome"], top.step, top.traj_idx, "alice", "")
    assert queries.all_fixtures(con).empty
