"""The store side's fast path (the aggregates ingest keeps, `agentrl.monitor.columns`) against the
reference computation: every signal, the onset and the gate's report recomputed here from the
run's own trajectories with the per-step Python forms (`signals`, `onset`), on real trained runs
with rejected and approved reviews and an exploit fixture, and on a run whose steps' trajectories
came in more than one commit."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from agentrl.analysis import behaviours
from agentrl.monitor import ANY_STATE, store_direction, store_onset, store_signals
from agentrl.monitor.columns import code_rows, window_max, window_max_of
from agentrl.monitor.onset import detect_onset
from agentrl.monitor.signals import (Episode, Rollout, SuspectMap, drift_signals, merge, probe_signals, rollout_signals,
                                     unverified_signals, verified_at_start)
from agentrl.review.gate import evaluate_gate
from agentrl.review.reviews import mark_exploit, record_review
from agentrl.store import queries
from agentrl.store.ingest import Ingestor, connect

# --- the reference: every trajectory read, the per-step forms -------------------------------------


def _latest_verdicts(con, run_id: str) -> dict[tuple[int, int], str]:
    rows = con.execute("SELECT step, traj_idx, verdict FROM reviews WHERE run_id = ? ORDER BY review_id", [run_id]).fetchall()
    return {(step, idx): verdict for step, idx, verdict in rows}


def _fixture_behaviours(con, run_id: str) -> set[str]:
    from agentrl.monitor import _run_task

    return set(queries.monitor_fixture_behaviours(con, _run_task(con, run_id)))


def reference_signals(con, run_id: str) -> dict[int, dict[str, float]]:
    """`store_signals` as the run process would compute it from every stored row of the run."""
    rows = con.execute("SELECT step, traj_idx, reward, violation, success, vetoed, behaviour, states, actions "
                       "FROM trajectories WHERE run_id = ? ORDER BY step, traj_idx", [run_id]).fetchall()
    rollouts = [Rollout(s, r or 0.0, bool(f), bool(ok), bool(v)) for s, _, r, f, ok, v, *_ in rows]
    verdicts = _latest_verdicts(con, run_id)
    counts: dict[int, dict] = {}
    for step, _, _, flagged, _, _, behaviour, _, _ in rows:
        at = counts.setdefault(step, {None: 0})
        at[None] += 1
        at[behaviour] = at.get(behaviour, 0) + (0 if flagged else 1)
    first = min(counts)
    verified = verified_at_start({b: c for b, c in counts[first].items() if b is not None})
    verified |= {behaviour for step, idx, _, _, _, _, behaviour, _, _ in rows if verdicts.get((step, idx)) == "approve"}
    unverified = {b for at in counts.values() for b in at if b is not None} - verified
    fixtures = _fixture_behaviours(con, run_id)
    suspects = SuspectMap()
    for step, idx, _, flagged, _, _, behaviour, states, actions in rows:
        if actions:
            episode = Episode(step, behaviour, tuple(states or ()), tuple(actions), bool(flagged),
                              verdicts.get((step, idx)) == "reject")
            suspects.add(episode, episode.flagged or episode.rejected or behaviour in fixtures or behaviour in unverified)
    recorded: dict[int, dict[str, dict[str, float]]] = {}
    for state, step, action, prob in con.execute("SELECT state, step, action, prob FROM action_probs WHERE run_id = ?",
                                                 [run_id]).fetchall():
        recorded.setdefault(step, {}).setdefault(state, {})[action] = prob
    drift = {step: s for step, s in drift_signals(_zero_filled(recorded), suspects).items() if step > 0 and s}
    probes: dict[int, list[bool]] = {}
    for step, violation in con.execute("SELECT step, violation FROM evals WHERE run_id = ? AND split = 'probe'",
                                       [run_id]).fetchall():
        probes.setdefault(step, []).append(bool(violation))
    probed = {s: p for s, p in probe_signals(probes).items() if s > 0}
    return merge(rollout_signals(rollouts), unverified_signals(counts, verified), drift, probed)


def _zero_filled(recorded: dict) -> dict:
    """Every step's distribution over every action its state ever recorded (an action a step did
    not record reads 0, as the store's pivot does)."""
    actions: dict[str, set[str]] = {}
    for states in recorded.values():
        for state, dist in states.items():
            actions.setdefault(state, set()).update(dist)
    return {step: {state: {a: dist.get(a, 0.0) for a in sorted(actions[state])} for state, dist in states.items()}
            for step, states in recorded.items()}


def reference_table(con, run_id: str, last: int = behaviours.DEFAULT_LAST) -> pd.DataFrame:
    """`behaviour_table` from the per-run queries over `step_behaviours` and the trajectories."""
    end = int(con.execute("SELECT coalesce(max(step), 0) FROM step_behaviours WHERE run_id = ?", [run_id]).fetchone()[0])
    return behaviours.summarise(queries.behaviour_totals(con, run_id, end - last), queries.behaviour_window(con, run_id, end - last),
                                queries.behaviour_reviews(con, run_id), queries.held_out_evals(con, run_id))


def assert_same_signals(stored: dict, expected: dict) -> None:
    assert list(stored) == list(expected)
    for step, signals in expected.items():
        assert set(stored[step]) == set(signals), step
        for name, value in signals.items():
            # rewards, and the probabilities a drift sums, added in another order (a backfill's
            # threads do not keep the ingest's order: CI met a difference in the 17th digit)
            if name in ("flagged_share", "top_flagged_share", "hack_premium") or name.startswith("drift:"):
                assert stored[step][name] == pytest.approx(value, abs=1e-12), (step, name)
            else:  # counts and probabilities: the same floats
                assert stored[step][name] == value, (step, name)


# --- the trained pair, reviewed ------------------------------------------------------------------


def _review(con, run_id: str) -> dict[str, str]:
    """Reject unflagged trajectories of a common behaviour, approve a rare one, reject a flagged
    one, and make an exploit fixture of another flagged one: what each test's run carries."""
    rows = con.execute("SELECT step, traj_idx, behaviour, violation FROM trajectories WHERE run_id = ? "
                       "ORDER BY step, traj_idx", [run_id]).fetchall()
    by_behaviour: dict[str, list] = {}
    for step, idx, behaviour, violation in rows:
        by_behaviour.setdefault(behaviour, []).append((step, idx, violation))
    common = max(by_behaviour, key=lambda b: len(by_behaviour[b]))
    rare = min(by_behaviour, key=lambda b: (len(by_behaviour[b]), b))
    for step, idx, violation in [r for r in by_behaviour[common] if not r[2]][:4]:
        record_review(con, run_id, step, idx, "reject", "tester", "a shortcut")
    step, idx, _ = by_behaviour[rare][0]
    record_review(con, run_id, step, idx, "approve", "tester")
    flagged = [(s, i, b) for s, i, b, v in rows if v]
    record_review(con, run_id, flagged[0][0], flagged[0][1], "reject", "tester", "a shortcut")
    mark_exploit(con, run_id, flagged[-1][0], flagged[-1][1], "tester", "refunds before approval")
    return {"common": common, "rare": rare, "fixture": flagged[-1][2]}


def test_the_fast_path_gives_the_reference_signals_onset_and_behaviour_table_of_reviewed_runs(pair_store):
    con, _, ids = pair_store
    for run_id in ids.values():
        reviewed = _review(con, run_id)
        assert reviewed["common"] != reviewed["rare"]
        expected = reference_signals(con, run_id)
        assert_same_signals(store_signals(con, run_id), expected)
        assert store_onset(con, run_id) == detect_onset(expected)
        pd.testing.assert_frame_equal(behaviours.behaviour_table(con, run_id), reference_table(con, run_id))
    tables = behaviours.behaviour_tables(con, list(ids.values()))
    for run_id in ids.values():  # the runs read together give each run's own table
        pd.testing.assert_frame_equal(tables[run_id], reference_table(con, run_id))


def test_a_rejected_trajectory_makes_its_actions_suspect_in_the_fast_path_as_in_the_reference(pair_store):
    con, _, ids = pair_store
    run_id = ids["guarded"]
    unflagged = con.execute("SELECT step, traj_idx FROM trajectories WHERE run_id = ? AND NOT violation "
                            "AND len(actions) > 0 ORDER BY step, traj_idx", [run_id]).fetchall()
    before = store_direction(con, run_id)[0].counts
    for step, idx in unflagged[: len(unflagged) // 2]:
        record_review(con, run_id, step, idx, "reject", "tester", "a shortcut")
    assert store_direction(con, run_id)[0].counts != before  # the rejected uses count as suspect
    assert_same_signals(store_signals(con, run_id), reference_signals(con, run_id))


def test_the_gate_reports_the_reference_onset_and_coverage(pair_store):
    con, runs_dir, ids = pair_store
    run_id = ids["outcome"]
    _review(con, run_id)
    report = evaluate_gate(con, runs_dir, run_id)
    checks = {c.name: c for c in report.checks}
    onset = detect_onset(reference_signals(con, run_id))
    assert onset is not None and checks["no hacking onset"].figure == f"onset at step {onset.step}"
    assert checks["no hacking onset"].detail == onset.message
    table = reference_table(con, run_id)
    high = table[table["high_reward"]]
    coverage = next(c for name, c in checks.items() if name.startswith("every high-reward behaviour reviewed"))
    taught_rejected = table[(table["rejected"] > 0) & (table["taught"] > 0)]
    assert coverage.figure == (f"{int(high['reviewed'].sum())} of {len(high)} high-reward behaviours reviewed, "
                               f"{len(taught_rejected)} rejected behaviours taught")
    assert evaluate_gate(con, runs_dir, run_id).to_json() == report.to_json()


def test_a_store_made_before_the_behaviour_aggregates_gets_them_when_it_is_opened(pair_store):
    con, runs_dir, ids = pair_store
    for run_id in ids.values():
        _review(con, run_id)
    expected = {run_id: (store_signals(con, run_id), behaviours.behaviour_table(con, run_id)) for run_id in ids.values()}
    con.execute("DROP TABLE behaviour_actions")  # what an older agentrl's store lacks
    con.execute("DROP TABLE run_behaviours")
    con.execute("DELETE FROM store_migrations WHERE name IN ('behaviour_actions', 'run_behaviours')")
    con.close()
    reopened = connect(runs_dir)
    try:
        assert queries.migration_applied(reopened, "behaviour_actions") and queries.migration_applied(reopened, "run_behaviours")
        for run_id, (signals, table) in expected.items():
            assert_same_signals(store_signals(reopened, run_id), signals)
            pd.testing.assert_frame_equal(behaviours.behaviour_table(reopened, run_id), table)
            assert_same_signals(store_signals(reopened, run_id), reference_signals(reopened, run_id))
    finally:
        reopened.close()


def test_deleting_a_run_removes_its_behaviour_aggregates(pair_store):
    con, _, ids = pair_store
    run_id = ids["outcome"]
    deleted = queries.delete_run_rows(con, run_id)
    assert deleted["behaviour_actions"] > 0 and deleted["run_behaviours"] > 0
    for table in ("behaviour_actions", "run_behaviours"):
        assert con.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", [run_id]).fetchone()[0] == 0
        assert con.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", [ids["guarded"]]).fetchone()[0] > 0


# --- a run whose steps came in more than one commit ------------------------------------------------

STATES = ("start", "known_high", "approved")
ACTIONS = ("lookup", "refund", "request_approval", "finish")


def _commit(folder, number: int, tables: dict[str, list[dict]]) -> None:
    """One commit as a run writes it: its table files, then its marker."""
    import json

    import pyarrow.parquet as pq

    from agentrl.record.chunks import marker_name
    from agentrl.record.rows import to_arrow

    for table, rows in tables.items():
        pq.write_table(to_arrow(table, rows), folder / f"{number:08d}.{table}.parquet")
    (folder / marker_name(number)).write_text(json.dumps({"tables": {t: len(r) for t, r in tables.items()}}))


def _split_run(runs_dir) -> tuple[str, object]:
    """A run of 12 steps x 16 rollouts (states, actions, flags, probes, decision-point
    distributions), each step's rollouts in two commits, each commit taken on its own tick;
    returns (run id, the open store)."""
    from agentrl.record.chunks import CHUNKS_DIR
    from agentrl.record.rundir import create_run_dir, iso, utc_now

    rng = random.Random(7)
    run_id = "20260101-000000-split-0001"
    run = create_run_dir(runs_dir, run_id, {"run_id": run_id, "name": "split", "kind": "tabular", "scorer": "outcome",
                                            "created_at": iso(utc_now()), "total_steps": 12, "config": {}})
    run.update_status(status="running")
    folder = run.root / CHUNKS_DIR
    folder.mkdir()
    con = connect(runs_dir)
    ingestor = Ingestor(con, runs_dir)

    def probs(step: int, p: float) -> list[dict]:
        return [{"run_id": run_id, "step": step, "state": "known_high", "action": a, "prob": q}
                for a, q in (("refund", p), ("request_approval", (1 - p) / 2), ("finish", (1 - p) / 2))]

    number = 0
    _commit(folder, number, {"action_probs": probs(0, 0.2)})
    ingestor.ingest()
    for step in range(1, 13):
        rows = []
        for i in range(16):
            turns = rng.randint(1, 3)
            actions = [rng.choice(ACTIONS) for _ in range(turns)]
            states = [rng.choice(STATES) for _ in range(turns if i % 5 else turns + 1)]  # some do not line up
            shortcut = actions[-1] == "refund" and step > 4
            rows.append({"run_id": run_id, "step": step, "traj_idx": i, "task_id": f"t{i % 3}", "states": states,
                         "actions": actions, "reward": round(rng.random() + (0.5 if shortcut else 0.0), 3),
                         "violation": shortcut and rng.random() < 0.7, "success": rng.random() < 0.6})
        for part in (rows[:7], rows[7:]):  # the step's rollouts in two commits, taken on two ticks
            number += 1
            _commit(folder, number, {"trajectories": part})
            assert ingestor.ingest().files == 1
        tables = {"action_probs": probs(step, min(0.9, 0.2 + 0.06 * step)),
                  "steps": [{"run_id": run_id, "step": step, "ts": utc_now()}]}
        if step % 4 == 0:
            tables["evals"] = [{"run_id": run_id, "step": step, "split": "probe", "task_id": f"probe-{k}",
                                "actions": ["refund"], "success": True, "violation": k < step // 4} for k in range(3)]
        number += 1
        _commit(folder, number, tables)
        ingestor.ingest()
    return run_id, con


def test_a_run_whose_steps_came_in_two_commits_gives_the_reference_signals_and_table(runs_dir):
    run_id, con = _split_run(runs_dir)
    try:
        assert con.execute("SELECT count(*) > count(DISTINCT step) FROM step_tallies WHERE run_id = ?", [run_id]).fetchone()[0]
        split = con.execute("SELECT count(*) FROM run_behaviours WHERE run_id = ?", [run_id]).fetchone()[0]
        assert split > con.execute("SELECT count(DISTINCT behaviour) FROM run_behaviours WHERE run_id = ?", [run_id]).fetchone()[0]
        steps, _ = con.execute("SELECT max(step), 0 FROM trajectories WHERE run_id = ?", [run_id]).fetchone()
        record_review(con, run_id, steps, 3, "reject", "tester", "a shortcut")
        record_review(con, run_id, steps - 1, 4, "approve", "tester")
        expected = reference_signals(con, run_id)
        assert any("unverified_share" in s for s in expected.values()) and any("drift:known_high" in s for s in expected.values())
        assert_same_signals(store_signals(con, run_id), expected)
        assert store_onset(con, run_id) == detect_onset(expected)
        pd.testing.assert_frame_equal(behaviours.behaviour_table(con, run_id), reference_table(con, run_id))
        pd.testing.assert_frame_equal(behaviours.behaviour_table(con, run_id, last=1), reference_table(con, run_id, last=1))
    finally:
        con.close()


def test_a_run_whose_steps_came_in_two_commits_has_the_step_shares_lump_shares_draws(runs_dir):
    """The lumped step shares add each commit's part of a step (not summed per behaviour first):
    the same shares, to the rounding of the sums, as the whole step's, lumped by the page's code."""
    from agentrl.store import queries

    run_id, con = _split_run(runs_dir)
    try:
        whole = queries.behaviour_step_shares(con, [run_id])
        assert not whole.duplicated(["step", "behaviour"]).any()
        assert (whole.groupby("step")["share"].sum().round(9) == 1.0).all()
        for keep in (1, 2, 3, 8):
            lumped = queries.behaviour_step_shares(con, [run_id], keep=keep)
            expected = behaviours.lump_shares(whole, keep)
            assert lumped[["step", "behaviour"]].reset_index(drop=True).equals(expected[["step", "behaviour"]].reset_index(drop=True))
            assert lumped["share"].tolist() == pytest.approx(expected["share"].tolist(), abs=1e-12)
            totals = whole.groupby(["step"])["n"].sum()
            assert lumped.groupby("step")["n"].sum().equals(totals)
    finally:
        con.close()


# --- the column forms against their per-step forms --------------------------------------------------


def test_window_max_is_the_largest_window_sum_of_one_code_at_every_position():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n_pos, window, codes, n = int(rng.integers(1, 30)), int(rng.integers(1, 7)), int(rng.integers(1, 6)), int(rng.integers(0, 60))
        code, pos, count = rng.integers(0, codes, n), rng.integers(0, n_pos, n), rng.integers(0, 5, n)  # (code, pos) repeat
        best, present = window_max(code, pos, count, n_pos, window)
        for end in range(n_pos):
            sums: dict[int, int] = {}
            for c, p, k in zip(code.tolist(), pos.tolist(), count.tolist()):
                if end - window < p <= end:
                    sums[c] = sums.get(c, 0) + k
            assert bool(present[end]) == bool(sums) and (not sums or best[end] == max(sums.values()))


def test_the_window_max_of_some_codes_from_rows_made_ready_once_is_theirs_alone():
    """What a review recomputes (`window_max_of` the unverified behaviours, from rows made ready
    once) equals `window_max` of those codes' rows alone; counts too large to pack into one
    integer with the position take the argsort path and give the same."""
    rng = np.random.default_rng(1)
    for case in range(300):
        n_pos, window, codes, n = int(rng.integers(1, 30)), int(rng.integers(1, 7)), int(rng.integers(1, 8)), int(rng.integers(0, 80))
        code, pos = rng.integers(0, codes, n), rng.integers(0, n_pos, n)
        count = rng.integers(0, 5, n) if case % 3 else rng.integers(0, 1 << 60, n) // max(1, n)  # the last: no room to pack
        ready = code_rows(code, pos, count, n_pos, window)
        keep = rng.random(codes) < 0.6
        best, present = window_max_of(ready, keep)
        alone_best, alone_present = window_max(code[keep[code]], pos[keep[code]], count[keep[code]], n_pos, window)
        assert present.tolist() == alone_present.tolist()
        assert best.tolist() == alone_best.tolist()
        for end in range(n_pos):  # and against the definition
            sums: dict[int, int] = {}
            for c, p, k in zip(code.tolist(), pos.tolist(), count.tolist()):
                if keep[c] and end - window < p <= end:
                    sums[c] = sums.get(c, 0) + k
            assert bool(present[end]) == bool(sums) and (not sums or best[end] == max(sums.values()))


def test_the_suspect_map_counts_each_use_at_its_state_and_anywhere():
    from agentrl.monitor import suspect_map

    uses = [("known_high", "refund", 3, 4), (ANY_STATE, "refund", 1, 2), (None, "finish", 0, 1)]
    reviewed = [("reject", "b", False, ["known_high", "start"], ["refund", "lookup"]),
                ("reject", "a", False, None, ["refund"]), ("reject", "c", True, None, ["refund"]),
                ("approve", "d", False, None, ["refund"])]
    suspects = suspect_map(uses, reviewed, suspect={"a"})
    assert suspects.counts == {("known_high", "refund"): [4, 4], (ANY_STATE, "refund"): [1 + 4, 2 + 4],
                               (None, "finish"): [0, 1], ("start", "lookup"): [1, 0], (ANY_STATE, "lookup"): [1, 0]}
