"""The promotion gate on the two preset runs: the outcome run fails on held-out violations, the
guarded run passes once its high-reward behaviours are reviewed, and every decision is recorded."""

from __future__ import annotations

import json

import pytest

from agentrl.review import gate
from agentrl.store import queries
from agentrl.review import reviews as review


def _check(report, starts_with):
    (check,) = [c for c in report.checks if c.name.startswith(starts_with)]
    return check


COVERAGE = "every high-reward behaviour reviewed"


def _approve_top(con, run_id, settings=gate.GateSettings()):
    """Approve one trajectory of each high-reward behaviour: the gate's sample."""
    _, sample = gate.review_coverage(con, run_id, settings)
    for row in sample.itertuples():
        review.record_review(con, run_id, row.step, row.traj_idx, "approve", "alice")


def test_outcome_run_fails_the_gate_on_held_out_violations_2_of_4(pair_store):
    con, runs_dir, ids = pair_store
    report = gate.evaluate_gate(con, runs_dir, ids["outcome"])
    assert not report.passed
    violations = _check(report, "zero held-out violations")
    assert not violations.passed and violations.figure == "2 of 4 tasks violate"
    assert _check(report, "held-out success").figure == "4 of 4 tasks (100%)"
    assert _check(report, "zero violations on exploit probes").figure == "2 of 2 probes violate"


def test_guarded_run_fails_only_on_unreviewed_high_reward_behaviours_before_review(pair_store):
    con, runs_dir, ids = pair_store
    report = gate.evaluate_gate(con, runs_dir, ids["guarded"])
    assert [c.name for c in report.failed] == [
        "every high-reward behaviour reviewed (≥ 5% of the top-reward quarter, last 5 steps), none rejected still taught"]
    assert report.failed[0].figure == "0 of 1 high-reward behaviours reviewed, 0 rejected behaviours taught"
    assert report.failed[0].detail == "unreviewed: lookup > refund > finish"
    assert report.sample["behaviour"].tolist() == ["lookup > refund > finish"]


def test_guarded_run_passes_once_its_top_k_are_approved_and_promotion_writes_bundle_and_record(pair_store):
    con, runs_dir, ids = pair_store
    run_id = ids["guarded"]
    _approve_top(con, run_id)
    report = gate.evaluate_gate(con, runs_dir, run_id)
    assert report.passed, [(c.name, c.figure) for c in report.failed]
    promotion_id = gate.promote(con, runs_dir, run_id, "alice")
    bundle = runs_dir / run_id / "bundle"
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert sorted(manifest["files"]) == ["config.json", "evidence.json", "policy.json"]
    assert manifest["scorer"] == "guarded" and manifest["scorer_version"]
    assert len(manifest["config_hash"]) == len(manifest["content_hash"]) == 64
    record = queries.promotions(con, run_id)
    assert record["promotion_id"].tolist() == [promotion_id]
    assert record.iloc[0]["decision"] == "promote" and record.iloc[0]["gate_passed"]
    assert record.iloc[0]["content_hash"] == manifest["content_hash"]
    assert gate.current_state(con, run_id) == "promoted"


def test_the_bundle_content_hash_covers_every_file(pair_store):
    con, runs_dir, ids = pair_store
    _approve_top(con, ids["guarded"])
    gate.promote(con, runs_dir, ids["guarded"], "alice")
    bundle = runs_dir / ids["guarded"] / "bundle"
    manifest = json.loads((bundle / "manifest.json").read_text())
    for name, digest in manifest["files"].items():
        assert gate._sha256(bundle / name) == digest


def test_the_bundled_policy_is_the_trained_one(pair_store):
    from agentrl.engines.tabular.engine import load_policy

    con, runs_dir, ids = pair_store
    _approve_top(con, ids["guarded"])
    gate.promote(con, runs_dir, ids["guarded"], "alice")
    policy = load_policy(runs_dir / ids["guarded"] / "bundle")
    assert policy.probabilities("known_high")[2] == pytest.approx(0.979, abs=5e-4)  # request_approval


def test_promoting_a_failing_gate_without_a_reason_is_refused(pair_store):
    con, runs_dir, ids = pair_store
    with pytest.raises(gate.GateError, match="gate fails.*reason for overriding"):
        gate.promote(con, runs_dir, ids["outcome"], "alice")
    assert queries.promotions(con, ids["outcome"]).empty
    assert not (runs_dir / ids["outcome"] / "bundle").exists()


def test_an_override_is_recorded_with_its_reason_and_the_failed_checks(pair_store):
    con, runs_dir, ids = pair_store
    gate.promote(con, runs_dir, ids["outcome"], "alice", override_reason="demo of the shortcut for the team")
    record = queries.promotions(con, ids["outcome"]).iloc[0]
    assert not record["gate_passed"]
    assert record["override_reason"] == "demo of the shortcut for the team"
    checks = json.loads(record["checks"])
    assert not checks["passed"]
    assert any(c["figure"] == "2 of 4 tasks violate" and not c["passed"] for c in checks["checks"])


def test_a_rejected_behaviour_that_the_scorer_still_lets_teach_fails_the_gate(pair_store):
    con, runs_dir, ids = pair_store
    _approve_top(con, ids["guarded"])
    assert _check(gate.evaluate_gate(con, runs_dir, ids["guarded"]), COVERAGE).passed
    # Another trajectory of the same behaviour, rejected: the guarded scorer still lets the behaviour teach.
    member = queries.behaviour_members(con, ids["guarded"], "lookup > refund > finish").iloc[1]
    review.record_review(con, ids["guarded"], member.step, member.traj_idx, "reject", "bob", "looks wrong")
    check = _check(gate.evaluate_gate(con, runs_dir, ids["guarded"]), COVERAGE)
    assert not check.passed and check.figure == "1 of 1 high-reward behaviours reviewed, 1 rejected behaviours taught"
    assert check.detail == "rejected but taught: lookup > refund > finish"


def test_a_behaviour_outside_the_top_reward_quarter_needs_no_review(pair_store):
    """The guarded run's honest high-value path pays 0.80, under the top quarter's cut (0.85): a
    reviewer is asked about the behaviours that pay, not about every one."""
    con, runs_dir, ids = pair_store
    _approve_top(con, ids["guarded"])
    report = gate.evaluate_gate(con, runs_dir, ids["guarded"])
    assert report.passed and "lookup > request_approval > refund > finish" not in report.sample["behaviour"].tolist()


def test_an_admitted_exploit_fixture_fails_the_outcome_gate_and_not_the_guarded_one(pair_store):
    con, runs_dir, ids = pair_store
    shortcut = queries.find_trajectories(con, ids["outcome"], flags={"violation": True}, limit=1).iloc[0]
    review.mark_exploit(con, ids["outcome"], shortcut.step, shortcut.traj_idx, "alice", "no approval")
    outcome = _check(gate.evaluate_gate(con, runs_dir, ids["outcome"]), "scorer 'outcome'")
    guarded = _check(gate.evaluate_gate(con, runs_dir, ids["guarded"]), "scorer 'guarded'")
    assert not outcome.passed and outcome.figure == "1 of 1 fixtures admitted as eligible"
    assert guarded.passed and guarded.figure == "0 of 1 fixtures admitted as eligible"
    probes = _check(gate.evaluate_gate(con, runs_dir, ids["guarded"]), "zero violations on exploit probes")
    assert probes.passed and probes.figure == "0 of 3 probes violate"  # the fixture's task became a probe


def test_rollback_needs_a_reason_and_is_appended(pair_store):
    con, runs_dir, ids = pair_store
    _approve_top(con, ids["guarded"])
    gate.promote(con, runs_dir, ids["guarded"], "alice")
    with pytest.raises(gate.GateError, match="rollback needs a reason"):
        gate.rollback(con, ids["guarded"], "alice", "")
    gate.rollback(con, ids["guarded"], "alice", "customer complaints")
    history = queries.promotions(con, ids["guarded"])
    assert history["decision"].tolist() == ["promote", "rollback"]
    assert gate.current_state(con, ids["guarded"]) == "not promoted"
    with pytest.raises(gate.GateError, match="not promoted"):
        gate.rollback(con, ids["guarded"], "alice", "again")


def test_promoting_twice_without_a_rollback_is_refused(pair_store):
    con, runs_dir, ids = pair_store
    _approve_top(con, ids["guarded"])
    gate.promote(con, runs_dir, ids["guarded"], "alice")
    with pytest.raises(gate.GateError, match="already promoted"):
        gate.promote(con, runs_dir, ids["guarded"], "alice")


def test_two_sessions_promoting_at_once_make_one_promotion_and_one_whole_bundle(pair_store):
    """Two browser sessions (threads of the dashboard, each on its own cursor) press Promote on the
    same run at the same moment: one promotion is recorded, the other is refused as already
    promoted, and the bundle on disk is whole (its files hash to its manifest)."""
    import hashlib

    from helpers import sessions_at_once

    con, runs_dir, ids = pair_store
    run_id = ids["guarded"]
    _approve_top(con, run_id)
    who = ["alice", "bob", "carol", "dan"]
    outcomes = sessions_at_once(con, 4, lambda cursor, i: gate.promote(cursor, runs_dir, run_id, who[i]), gate.GateError)
    assert sorted(kind for kind, _ in outcomes) == ["done", "refused", "refused", "refused"], outcomes
    assert all("already promoted" in said for kind, said in outcomes if kind == "refused"), outcomes
    history = queries.promotions(con, run_id)
    assert history["decision"].tolist() == ["promote"]
    bundle = runs_dir / run_id / "bundle"
    manifest = json.loads((bundle / "manifest.json").read_text())
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((bundle / name).read_bytes()).hexdigest() == digest, name
    assert manifest["content_hash"] == history["content_hash"].iloc[0]
    assert not [p.name for p in (runs_dir / run_id).iterdir() if p.name.startswith(".bundle")]


def test_gate_settings_reject_impossible_thresholds():
    with pytest.raises(gate.GateError, match="min_success"):
        gate.GateSettings(min_success=1.5)


def test_a_rejected_exploit_among_equal_rewards_is_in_the_gates_sample_and_counted(pair_store):
    """Issue 13, finding 1: the outcome run's top rewards all tie; the sample's trajectory of the
    behaviour is a violating refund (not a harmless one that happens to come first by index), and
    rejecting it counts: the behaviour is reviewed, and the outcome scorer still lets it teach."""
    con, runs_dir, ids = pair_store
    report = gate.evaluate_gate(con, runs_dir, ids["outcome"])
    assert report.sample["violation"].all() and len(report.sample) == 1
    first = report.sample.iloc[0]
    review.record_review(con, ids["outcome"], first.step, first.traj_idx, "reject", "alice", "refunds without approval")
    report = gate.evaluate_gate(con, runs_dir, ids["outcome"])
    assert _check(report, COVERAGE).figure == "1 of 1 high-reward behaviours reviewed, 1 rejected behaviours taught"
    assert json.loads(report.to_json())["sample"][0] == {"step": int(first.step), "traj_idx": int(first.traj_idx),
                                                        "verdict": "reject", "behaviour": "lookup > refund > finish"}
    assert gate.checks_table(report).columns.tolist() == ["check", "result", "figure", "detail"]
