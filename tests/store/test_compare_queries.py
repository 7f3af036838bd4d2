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


def test_newest_pair_is_the_newest_launch_of_both_scorers_with_every_seed_not_a_later_lone_run(pair_store):
    """Issue 29, item 6: the default pairs runs launched together (one click: a launch group), so
    an extra outcome run started later alone, with an equal config, is no partner."""
    from agentrl.config import load_preset
    from agentrl.launcher import create_run, new_launch_group, seed_configs
    from agentrl.store.ingest import Ingestor

    con, runs_dir, _ = pair_store
    group = new_launch_group()
    launched = {preset: [create_run(runs_dir, c, group).run_id for c in seed_configs(load_preset(preset), 2)]
                for preset in ("refund-guarded", "refund-outcome")}  # the guarded seeds first, on purpose
    lone = create_run(runs_dir, load_preset("refund-outcome")).run_id  # newer, alone, its config equal to the preset's
    Ingestor(con, runs_dir).ingest()
    assert queries.newest_pair(con) == launched["refund-outcome"] + launched["refund-guarded"]  # outcome first, by seed
    assert lone not in queries.newest_pair(con)
    configs = queries.run_configs(con, launched["refund-outcome"])
    assert configs["launch_group"].tolist() == [group, group] and configs["name"].str.endswith(("-seed7", "-seed8")).all()


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
    from agentrl.engines.tabular.engine import run_tabular
    from agentrl.launcher import create_run
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


# --- per-step aggregates and thinned series (issue 15: Compare costs the same for 20 runs as for 2) ---

UNNESTED_COMPONENTS = """
    SELECT run_id, step, component, avg(value) AS value
    FROM (SELECT run_id, step, unnest(map_keys(components)) AS component, unnest(map_values(components)) AS value
          FROM trajectories WHERE list_contains(?, run_id))
    GROUP BY ALL ORDER BY run_id, step, component
"""


def test_reward_components_kept_at_ingest_equal_the_mean_over_every_trajectory(pair_store):
    con, _, ids = pair_store
    runs = [ids["outcome"], ids["guarded"]]
    kept = queries.reward_components_for_runs(con, runs)
    direct = con.execute(UNNESTED_COMPONENTS, [runs]).df()
    assert len(kept) == len(direct) > 0
    assert kept[["run_id", "step", "component"]].values.tolist() == direct[["run_id", "step", "component"]].values.tolist()
    assert kept["value"].tolist() == pytest.approx(direct["value"].tolist(), abs=1e-12)


def test_a_store_made_before_step_components_gets_them_when_it_is_opened(pair_store):
    from agentrl.store.ingest import connect

    con, runs_dir, ids = pair_store
    runs = [ids["outcome"], ids["guarded"]]
    expected = queries.reward_components_for_runs(con, runs)
    con.execute("DROP TABLE step_components")  # what an older agentrl's store lacks
    con.execute("DELETE FROM store_migrations")
    con.close()
    reopened = connect(runs_dir)
    try:
        assert queries.migration_applied(reopened, "step_components")
        assert queries.reward_components_for_runs(reopened, runs).equals(expected)
    finally:
        reopened.close()


@pytest.mark.parametrize("max_steps", [2, 7, 1000])
def test_thinned_series_keep_each_runs_first_and_last_step_and_at_most_max_steps(pair_store, max_steps):
    con, _, ids = pair_store
    runs = [ids["outcome"], ids["guarded"]]
    full = queries.action_probs_for_runs(con, runs, "known_high")
    thin = queries.action_probs_for_runs(con, runs, "known_high", max_steps=max_steps)
    components = queries.reward_components_for_runs(con, runs, max_steps=max_steps)
    everything = queries.reward_components_for_runs(con, runs)
    for frame, whole in ((thin, full), (components, everything)):
        for run_id in runs:
            steps = sorted(set(frame[frame["run_id"] == run_id]["step"]))
            all_steps = sorted(set(whole[whole["run_id"] == run_id]["step"]))
            assert len(steps) <= max_steps and steps[0] == all_steps[0] and steps[-1] == all_steps[-1]
            assert len(steps) == len(all_steps) if max_steps >= len(all_steps) else len(steps) >= max_steps // 2
    # A kept step is the whole step: every action, the same probabilities.
    merged = thin.merge(full, on=["run_id", "step", "action"], suffixes=("", "_full"))
    assert len(merged) == len(thin) and (merged["prob"] == merged["prob_full"]).all()


def test_the_distributions_at_one_step_are_that_steps_rows_of_the_whole_history(pair_store):
    con, _, ids = pair_store
    runs = [ids["outcome"], ids["guarded"]]
    full = queries.action_probs_for_runs(con, runs, "known_high")
    for step in (0, 13, 30):
        at = queries.action_probs_at_step(con, runs, "known_high", step)
        assert at.values.tolist() == full[full["step"] == step].values.tolist()
    with pytest.raises(ValueError, match="max_steps"):
        queries.action_probs_for_runs(con, runs, "known_high", max_steps=1)
