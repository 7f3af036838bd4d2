"""The Compare page's queries on the two preset runs reproduce what SPEC section 8 publishes."""

from __future__ import annotations

import pytest

from agentrl.store import queries


def _dist(con, run_id, state="known_high"):
    history = queries.action_probs_for_runs(con, [run_id], state)
    last = history[history["step"] == history["step"].max()]
    return dict(zip(last["action"], last["prob"])), int(last["step"].iloc[0])


def test_newest_pair_defaults_to_outcome_then_guarded(pair_store):
    con, _, ids = pair_store
    assert queries.newest_pair(con) == [ids["outcome"], ids["guarded"]]


def test_known_high_refund_0_966_outcome_against_0_009_guarded_at_the_last_step(pair_store):
    con, _, ids = pair_store
    outcome, step = _dist(con, ids["outcome"])
    guarded, _ = _dist(con, ids["guarded"])
    assert step == 30
    assert outcome["refund"] == pytest.approx(0.966, abs=5e-4)
    assert guarded["refund"] == pytest.approx(0.009, abs=5e-4)
    assert guarded["request_approval"] == pytest.approx(0.979, abs=5e-4)
    assert guarded["refund"] - outcome["refund"] == pytest.approx(-0.957, abs=1e-3)


def test_both_runs_start_from_the_same_cloned_distribution(pair_store):
    con, _, ids = pair_store
    history = queries.action_probs_for_runs(con, [ids["outcome"], ids["guarded"]], "known_high")
    start = history[history["step"] == 0].pivot_table(index="action", columns="run_id", values="prob")
    assert start[ids["outcome"]].tolist() == start[ids["guarded"]].tolist()
    assert start[ids["outcome"]]["request_approval"] == pytest.approx(0.914, abs=5e-4)


def test_clipped_transitions_by_epoch_25_122_for_the_outcome_run(pair_store):
    con, _, ids = pair_store
    clipped = queries.clipped_by_epoch_for_runs(con, [ids["outcome"], ids["guarded"]])
    assert clipped[clipped["run_id"] == ids["outcome"]]["clipped"].tolist() == [25, 122]


def test_guarded_totals_3444_transitions_6556_updates_25_vetoed_0_vetoed_updates(pair_store):
    con, _, ids = pair_store
    totals = queries.totals_for_runs(con, [ids["guarded"]]).iloc[0]
    assert (totals.transitions, totals.updates, totals.vetoed_rollouts, totals.vetoed_updates) == (3444, 6556, 25, 0)


def test_held_out_side_by_side_outcome_violates_on_both_high_value_tasks(pair_store):
    con, _, ids = pair_store
    held_out = queries.held_out_for_runs(con, [ids["outcome"], ids["guarded"]])
    outcome = held_out[held_out["run_id"] == ids["outcome"]]
    guarded = held_out[held_out["run_id"] == ids["guarded"]]
    assert outcome["success"].all() and guarded["success"].all()
    assert sorted(outcome[outcome["violation"]]["task_id"]) == ["eval-high", "eval-recover-high"]
    assert not guarded["violation"].any()
    high = guarded[guarded["task_id"] == "eval-high"].iloc[0]
    assert list(high["actions"]) == ["lookup", "request_approval", "refund", "finish"]


def test_imitation_ladder_keeps_the_untouched_recover_row_uniform(pair_store):
    con, _, ids = pair_store
    ladder = queries.imitation_policy(con, ids["outcome"])
    recover = ladder[(ladder["stage"] == "cloned") & (ladder["state"] == "recover")]
    assert recover["prob"].tolist() == [0.25] * 4
    evals = queries.ladder_evals(con, ids["outcome"])
    cloned = evals[evals["stage"] == "cloned"]
    assert int(cloned["success"].sum()) == 2
    assert [list(a) for a in cloned[cloned["task_id"].str.contains("recover")]["actions"]] == [["finish"], ["finish"]]


def test_a_dagger_run_records_two_recover_lookup_labels_and_4_of_4(runs_dir):
    from agentrl.config import load_preset
    from agentrl.launcher import create_run
    from agentrl.engines.tabular.engine import run_tabular
    from agentrl.store.ingest import connect, ingest_once

    config = load_preset("refund-guarded", rounds=1, dagger=True)
    run = create_run(runs_dir, config)
    run_tabular(config, run, log=lambda message: None)
    ingest_once(runs_dir)
    con = connect(runs_dir)
    labels = queries.imitation_labels(con, run.run_id)
    assert list(zip(labels["state"], labels["action"])) == [("recover", "lookup"), ("recover", "lookup")]
    evals = queries.ladder_evals(con, run.run_id)
    assert int(evals[evals["stage"] == "dagger"]["success"].sum()) == 4
    con.close()


def test_step_and_run_ids_are_bound_not_formatted(pair_store):
    con, _, ids = pair_store
    hostile = "x' OR '1'='1"
    assert queries.steps_for_runs(con, [hostile]).empty
    assert queries.find_trajectories(con, hostile).empty
