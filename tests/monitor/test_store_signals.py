"""The store side of the monitor reads per-step tallies summed in SQL; its signals must be the ones
the run process computes from every rollout (`rollout_signals`), step for step."""

from __future__ import annotations

import pytest

from agentrl.monitor import store_onset, store_signals
from agentrl.monitor.signals import Rollout, rollout_signals, tally, tally_signals


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
            assert set(signals) == {k for k in stored[step] if not k.startswith(("drift:", "probe_"))}


def test_the_outcome_run_has_an_onset_and_the_guarded_run_none(pair_store):
    con, _, ids = pair_store
    assert store_onset(con, ids["outcome"]) is not None
    assert store_onset(con, ids["guarded"]) is None


def test_ties_at_the_top_reward_are_all_counted_in_a_tally():
    rows = [Rollout(1, 0.85, True), Rollout(1, 0.85 - 1e-12, False), Rollout(1, 0.80, False), Rollout(2, -1.0, False)]
    (one, two) = tally(rows)
    assert (one.top, one.top_flagged, two.top, two.top_flagged) == (2, 1, 1, 0)
    assert tally_signals([one, two])[1]["top_flagged_share"] == 0.5
