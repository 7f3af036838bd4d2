"""The store side of the monitor reads per-step tallies summed in SQL; its signals must be the ones
the run process computes from every rollout (`rollout_signals`), step for step."""

from __future__ import annotations

import pytest

from agentrl.monitor import store_direction, store_onset, store_signals
from agentrl.store import queries
from agentrl.store.queries.ledger import STEP_TALLIES_SQL
from agentrl.monitor.signals import Rollout, drift_signals, rollout_signals, tally, tally_signals


def test_the_stores_tallied_signals_are_the_signals_of_every_rollout(pair_store):
    con, _, ids = pair_store
    for run_id in ids.values():
        rows = con.execute("SELECT step, reward, violation, success, vetoed FROM trajectories WHERE run_id = ? "
                           "ORDER BY step, traj_idx", [run_id]).fetchall()
        expected = rollout_signals([Rollout(s, r, bool(f), bool(ok), bool(v)) for s, r, f, ok, v in rows])
        stored = store_signals(con, run_id)
        assert sorted(expected) == sorted(s for s in stored if s in expected) and len(expected) == 30
        for step, signals in expected.items():
            for name, value in signals.items():
                assert stored[step][name] == pytest.approx(value, abs=1e-12), (run_id, step, name)
            assert set(signals) == {k for k in stored[step] if not k.startswith(("drift:", "probe_", "unverified_"))}


def test_the_outcome_run_has_an_onset_and_the_guarded_run_none(pair_store):
    con, _, ids = pair_store
    assert store_onset(con, ids["outcome"]) is not None
    assert store_onset(con, ids["guarded"]) is None


def test_ties_at_the_top_reward_are_all_counted_in_a_tally():
    rows = [Rollout(1, 0.85, True), Rollout(1, 0.85 - 1e-12, False), Rollout(1, 0.80, False), Rollout(2, -1.0, False)]
    (one, two) = tally(rows)
    assert (one.top, one.top_flagged, two.top, two.top_flagged) == (2, 1, 1, 0)
    assert tally_signals([one, two])[1]["top_flagged_share"] == 0.5


def test_the_stores_drift_is_drift_signals_over_every_recorded_distribution(pair_store):
    con, _, ids = pair_store
    final = {}
    for name, run_id in ids.items():
        recorded: dict[int, dict[str, dict[str, float]]] = {}
        for state, step, action, prob in con.execute(
                "SELECT state, step, action, prob FROM action_probs WHERE run_id = ?", [run_id]).fetchall():
            recorded.setdefault(step, {}).setdefault(state, {})[action] = prob
        suspects, _ = store_direction(con, run_id)
        assert "refund" in suspects.suspects("known_high")  # refunding before approval: the flagged rollouts' move
        assert "request_approval" not in suspects.suspects("known_high")
        expected = {step: s for step, s in drift_signals(recorded, suspects).items() if step > 0}
        stored = store_signals(con, run_id)
        assert expected and all(expected.values())
        for step, signals in expected.items():
            assert {k: v for k, v in stored[step].items() if k.startswith("drift:")} == pytest.approx(signals, abs=1e-12)
        final[name] = expected[max(expected)]["drift:known_high"]
    assert final["guarded"] < 0 < 0.05 < final["outcome"]  # the guarded run moved away from the shortcut


def test_an_action_a_step_did_not_record_counts_as_zero_in_the_stored_drift(pair_store):
    con, _, ids = pair_store
    run_id = ids["outcome"]
    state, step, action = con.execute("SELECT state, max(step), min(action) FROM action_probs WHERE run_id = ? "
                                      "GROUP BY state ORDER BY state LIMIT 1", [run_id]).fetchone()
    con.execute("DELETE FROM action_probs WHERE run_id = ? AND state = ? AND step = ? AND action = ?",
                [run_id, state, step, action])
    recorded = {s: {state: dict(con.execute("SELECT action, prob FROM action_probs WHERE run_id = ? AND state = ? "
                                            "AND step = ?", [run_id, state, s]).fetchall())} for s in (0, step)}
    assert action not in recorded[step][state]
    expected = drift_signals(recorded, store_direction(con, run_id)[0])[step][f"drift:{state}"]
    assert store_signals(con, run_id)[step][f"drift:{state}"] == pytest.approx(expected, abs=1e-12)


def _flat(signals: dict) -> dict:
    return {(step, name): value for step, values in signals.items() for name, value in values.items()}


def _tallies_of_every_trajectory(con, run_id: str) -> dict:
    relation = "(SELECT * FROM trajectories WHERE run_id = $run_id)"
    return con.execute(f"SELECT * EXCLUDE (run_id, best) FROM ({STEP_TALLIES_SQL.format(relation=relation)}) ORDER BY step",
                       {"run_id": run_id}).fetchnumpy()


def test_the_tallies_kept_at_ingest_are_the_tallies_of_every_trajectory(pair_store):
    con, _, ids = pair_store
    for run_id in ids.values():
        kept, direct = queries.monitor_step_tallies(con, run_id), _tallies_of_every_trajectory(con, run_id)
        assert list(kept) == list(direct) and len(kept["step"]) == 30
        for name in kept:
            assert kept[name].tolist() == pytest.approx(direct[name].tolist(), abs=1e-12), name


def test_a_step_that_came_in_two_commits_is_tallied_from_its_trajectories(pair_store):
    con, _, ids = pair_store
    run_id = ids["outcome"]
    expected = store_signals(con, run_id)
    # One commit with the step's best rollouts, one with the rest: each counts its own best as top,
    # so the two rows' top counts cannot be added.
    step = con.execute("SELECT min(step) FROM (SELECT step FROM trajectories WHERE run_id = ? GROUP BY step "
                       "HAVING min(reward) < max(reward))", [run_id]).fetchone()[0]
    con.execute("DELETE FROM step_tallies WHERE run_id = ? AND step = ?", [run_id, step])
    for part in ("reward >= best", "reward < best"):  # as ingest keeps a step's two commits
        relation = ("(SELECT * FROM (SELECT *, max(reward) OVER () AS best FROM trajectories WHERE run_id = $run_id "
                    f"AND step = $step) WHERE {part})")
        con.execute(f"INSERT INTO step_tallies {STEP_TALLIES_SQL.format(relation=relation)}", {"run_id": run_id, "step": step})
    summed = con.execute("SELECT sum(top) FROM step_tallies WHERE run_id = ? AND step = ?", [run_id, step]).fetchone()[0]
    assert summed != _tallies_of_every_trajectory(con, run_id)["top"][step - 1]  # adding them would be wrong
    assert _flat(store_signals(con, run_id)) == pytest.approx(_flat(expected), abs=1e-12)


def test_a_store_made_before_step_tallies_gets_them_when_it_is_opened(pair_store):
    from agentrl.store.ingest import connect

    con, runs_dir, ids = pair_store
    expected = {run_id: store_signals(con, run_id) for run_id in ids.values()}
    con.execute("DROP TABLE step_tallies")  # what an older agentrl's store lacks
    con.execute("DELETE FROM store_migrations WHERE name = 'step_tallies'")
    con.close()
    reopened = connect(runs_dir)
    try:
        assert queries.migration_applied(reopened, "step_tallies")
        assert reopened.execute("SELECT count(*) FROM step_tallies").fetchone()[0] == 60
        for run_id in ids.values():
            assert _flat(store_signals(reopened, run_id)) == pytest.approx(_flat(expected[run_id]), abs=1e-12)
    finally:
        reopened.close()
