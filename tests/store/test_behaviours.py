"""Behaviours in the store: every trajectory gets one at ingest (its calls', or the one its writer
gave), ingest tallies them per step in the same transaction, an older store gets them when it is
opened, deleting a run removes them, and a run built to have an unverified behaviour shows it
while a reviewed one does not.

Runs are recorded through `agentrl.init` (a script run: no decision points, no gym) and ingested
into a real DuckDB file.
"""

from __future__ import annotations

import pytest

import agentrl
import helpers
from agentrl.analysis import behaviours
from agentrl.review import reviews
from agentrl.store import queries
from agentrl.store.ingest import connect, ingest_once

HONEST, SHORTCUT, FLAGGED = (list(a) for a in (helpers.HONEST, helpers.SHORTCUT, helpers.FLAGGED))
record, shortcut_spreads = helpers.record_script_run, helpers.shortcut_spreads


def test_every_trajectory_gets_its_calls_as_behaviour_and_a_given_one_is_kept(runs_dir):
    with agentrl.init(name="given", runs_dir=runs_dir) as run:
        run.log_trajectories(1, [
            {"traj_idx": 0, "task_id": "a", "reward": 1.0, "actions": ["lookup", "refund"]},
            {"traj_idx": 1, "task_id": "a", "reward": 0.0, "actions": []},
            {"traj_idx": 2, "task_id": "a", "reward": 0.5, "actions": ["write_file"], "behaviour": "writes src/a.py; tests unchanged"},
        ])
        run.log_step(1, {})
    ingest_once(runs_dir)
    con = connect(runs_dir)
    try:
        got = con.execute("SELECT traj_idx, behaviour FROM trajectories ORDER BY traj_idx").fetchall()
        assert got == [(0, "lookup > refund"), (1, "(no tool calls)"), (2, "writes src/a.py; tests unchanged")]
        tallies = con.execute("SELECT behaviour, n, reward_total FROM step_behaviours ORDER BY behaviour").fetchall()
        assert tallies == [("(no tool calls)", 1, 0.0), ("lookup > refund", 1, 1.0), ("writes src/a.py; tests unchanged", 1, 0.5)]
    finally:
        con.close()


def test_step_tallies_per_behaviour_count_reward_flags_and_success(runs_dir):
    run_id = record(runs_dir, "tallies", shortcut_spreads(shortcut_from=1, steps=2))
    ingest_once(runs_dir)
    con = connect(runs_dir)
    try:
        rows = con.execute("SELECT step, behaviour, n, round(reward_total, 6), flagged, success FROM step_behaviours "
                           "WHERE run_id = ? AND step = 1 ORDER BY behaviour", [run_id]).fetchall()
        assert rows == [(1, " > ".join(FLAGGED), 1, 0.85, 1, 1), (1, " > ".join(HONEST), 3, 2.4, 0, 3),
                        (1, " > ".join(SHORTCUT), 4, 3.6, 0, 4)]
    finally:
        con.close()


def test_an_unflagged_high_reward_shortcut_is_unverified_until_reviewed(runs_dir):
    run_id = record(runs_dir, "shortcut", shortcut_spreads())
    ingest_once(runs_dir)
    con = connect(runs_dir)
    try:
        table = behaviours.behaviour_table(con, run_id, last=5).set_index("behaviour")
        shortcut, honest, flagged = (" > ".join(a) for a in (SHORTCUT, HONEST, FLAGGED))
        assert table.loc[shortcut, "first_step"] == 4
        assert table.loc[shortcut, "share"] == 0.5  # 4 of 8 in each of the last 5 steps
        assert abs(table.loc[shortcut, "mean_reward"] - 0.9) < 1e-9
        assert table.loc[shortcut, "high_reward"] and table.loc[shortcut, "unverified"]
        assert not table.loc[honest, "high_reward"]  # 0.8 is under the top quarter's cut (0.9)
        assert table.loc[flagged, "flagged_share"] == 1.0 and not table.loc[flagged, "unverified"]
        member = queries.behaviour_members(con, run_id, shortcut).iloc[0]
        reviews.record_review(con, run_id, int(member.step), int(member.traj_idx), "approve", "alice", "fine")
        table = behaviours.behaviour_table(con, run_id, last=5).set_index("behaviour")
        assert table.loc[shortcut, "reviewed"] and not table["unverified"].any()
    finally:
        con.close()


def test_a_run_without_a_shortcut_has_no_unverified_behaviour_once_its_top_behaviour_is_reviewed(runs_dir):
    run_id = record(runs_dir, "honest", [[(HONEST, 0.8, False)] * 7 + [(["finish"], -0.05, False)]] * 6)
    ingest_once(runs_dir)
    con = connect(runs_dir)
    try:
        table = behaviours.behaviour_table(con, run_id).set_index("behaviour")
        assert list(table.index[table["unverified"]]) == [" > ".join(HONEST)]
        member = queries.behaviour_members(con, run_id, " > ".join(HONEST)).iloc[0]
        reviews.record_review(con, run_id, int(member.step), int(member.traj_idx), "approve", "alice", "")
        assert not behaviours.behaviour_table(con, run_id)["unverified"].any()
    finally:
        con.close()


def _reopened_as_older(runs_dir, con, migration: str, *statements: str):
    """The store made into what an agentrl before `migration` left (by `statements`), closed and opened again."""
    for statement in statements:
        con.execute(statement)
    con.execute("DELETE FROM store_migrations WHERE name = ?", [migration])
    con.close()
    return connect(runs_dir)


def test_an_older_store_gets_behaviours_and_their_tallies_when_opened(runs_dir):
    run_id = record(runs_dir, "older", shortcut_spreads(steps=3))
    ingest_once(runs_dir)
    reopened = _reopened_as_older(runs_dir, connect(runs_dir), "behaviours",  # what an older agentrl's store holds
                                  "UPDATE trajectories SET behaviour = NULL", "DROP TABLE step_behaviours")
    try:
        assert queries.migration_applied(reopened, "behaviours")
        assert reopened.execute("SELECT count(*) FROM trajectories WHERE behaviour IS NULL").fetchone()[0] == 0
        assert reopened.execute("SELECT sum(n) FROM step_behaviours WHERE run_id = ?", [run_id]).fetchone()[0] == 24
        assert all(name == numbered for *_, name, numbered in _named_tallies(reopened))
    finally:
        reopened.close()


def _named_tallies(con) -> list[tuple]:
    """Every `step_behaviours` row with the name its number stands for (None where it has none)."""
    return con.execute("SELECT s.run_id, s.step, s.behaviour, c.behaviour FROM step_behaviours s "
                       "LEFT JOIN behaviour_names c USING (code) ORDER BY ALL").fetchall()


def test_every_step_tally_carries_its_behaviours_number_and_a_later_name_gets_a_new_one(runs_dir):
    first = record(runs_dir, "first", shortcut_spreads(steps=2, shortcut_from=3))  # no shortcut yet
    ingest_once(runs_dir)
    con = connect(runs_dir)
    try:
        before = dict(con.execute("SELECT behaviour, code FROM behaviour_names").fetchall())
        assert " > ".join(SHORTCUT) not in before
    finally:
        con.close()
    second = record(runs_dir, "second", shortcut_spreads(steps=2, shortcut_from=1))
    ingest_once(runs_dir)
    con = connect(runs_dir)
    try:
        after = dict(con.execute("SELECT behaviour, code FROM behaviour_names").fetchall())
        assert {name: after[name] for name in before} == before  # never renumbered
        assert after[" > ".join(SHORTCUT)] == max(before.values()) + 1
        assert len(set(after.values())) == len(after)
        tallies = _named_tallies(con)
        assert {run for run, *_ in tallies} == {first, second}
        assert all(name == numbered for *_, name, numbered in tallies)
    finally:
        con.close()


def test_an_older_store_gets_its_behaviours_numbers_when_opened(runs_dir):
    record(runs_dir, "older", shortcut_spreads(steps=3))
    ingest_once(runs_dir)
    con = connect(runs_dir)
    expected = [row[:3] for row in _named_tallies(con)]
    shares = queries.behaviour_step_shares(con, [r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()], keep=2)
    reopened = _reopened_as_older(runs_dir, con, "behaviour_codes",  # what a store made before the numbers holds
                                  "ALTER TABLE step_behaviours DROP COLUMN code", "DROP TABLE behaviour_names")
    try:
        assert queries.migration_applied(reopened, "behaviour_codes")
        tallies = _named_tallies(reopened)
        assert [row[:3] for row in tallies] == expected and all(row[2] == row[3] for row in tallies)
        again = queries.behaviour_step_shares(reopened, list(shares["run_id"].unique()), keep=2)
        assert again.equals(shares)
    finally:
        reopened.close()


def test_the_onsets_behaviour_columns_leave_out_behaviours_the_runs_list_did_not_have_yet(runs_dir):
    """The run's behaviour list and its step tallies are two reads: an ingest that commits in
    between (a run that just started, shown on the Runs page) gives tallies of behaviours the list
    lacks. They are left out, and the onset is still computed."""
    from agentrl.monitor import store_onset

    run_id = record(runs_dir, "racing", shortcut_spreads(steps=5))  # the shortcut from step 4
    ingest_once(runs_dir)
    con = connect(runs_dir)
    try:
        all_names, everything = queries.monitor_behaviour_columns(con, run_id)
        shortcut = " > ".join(SHORTCUT)
        con.execute("DELETE FROM run_behaviours WHERE run_id = ? AND behaviour = ?", [run_id, shortcut])
        names, cols = queries.monitor_behaviour_columns(con, run_id)
        assert names == [name for name in all_names if name != shortcut]
        kept = everything["code"] != all_names.index(shortcut)
        assert len(cols["step"]) == int(kept.sum()) > 0
        assert [names[c] for c in cols["code"]] == [all_names[c] for c in everything["code"][kept]]
        store_onset(con, run_id)
        con.execute("DELETE FROM run_behaviours WHERE run_id = ?", [run_id])  # none listed yet
        names, cols = queries.monitor_behaviour_columns(con, run_id)
        assert names == [] and len(cols["step"]) == 0
        store_onset(con, run_id)
    finally:
        con.close()


def test_deleting_a_run_removes_its_behaviour_tallies(runs_dir):
    run_id = record(runs_dir, "gone", shortcut_spreads(steps=2))
    ingest_once(runs_dir)
    con = connect(runs_dir)
    try:
        assert queries.delete_run_rows(con, run_id)["step_behaviours"] == 4  # two behaviours in each of two steps
        assert con.execute("SELECT count(*) FROM step_behaviours").fetchone()[0] == 0
    finally:
        con.close()


def test_found_divergence_ranks_the_state_where_two_script_runs_choose_differently(runs_dir):
    honest = record(runs_dir, "a", [[(HONEST, 0.8, False)] * 8] * 3)
    hacked = record(runs_dir, "b", [[(HONEST, 0.8, False)] * 2 + [(["lookup", "refund", "finish"], 0.85, True)] * 6] * 3)
    ingest_once(runs_dir)
    con = connect(runs_dir)
    try:
        found = behaviours.run_divergence(con, honest, hacked, last=5)
        top = found.iloc[0]
        assert top.state == "lookup" and top.visits_a == 24 and top.visits_b == 24
        assert top.probs_a == {"request_approval": 1.0} and top.probs_b == {"request_approval": 0.25, "refund": 0.75}
        assert abs(top.js - behaviours.js_bits(top.probs_a, top.probs_b)) < 1e-12 and top.js > 0.4
        assert found.set_index("state").loc["(start)", "js"] == 0.0  # both start with lookup
    finally:
        con.close()


def test_js_bits_is_zero_for_equal_distributions_and_one_for_disjoint_ones():
    assert behaviours.js_bits({"a": 0.5, "b": 0.5}, {"b": 0.5, "a": 0.5}) == 0.0
    assert abs(behaviours.js_bits({"a": 1.0}, {"b": 1.0}) - 1.0) < 1e-12


def test_behaviour_shares_thinned_keep_the_first_and_last_step_and_sum_to_one(runs_dir):
    run_id = record(runs_dir, "long", shortcut_spreads(steps=12))
    ingest_once(runs_dir)
    con = connect(runs_dir)
    try:
        whole = queries.behaviour_step_shares(con, [run_id])
        thin = queries.behaviour_step_shares(con, [run_id], max_steps=4)
        assert sorted(whole["step"].unique()) == list(range(1, 13))
        assert sorted(thin["step"].unique()) == [1, 5, 9, 12]
        assert (thin.groupby("step")["share"].sum().round(9) == 1.0).all()
    finally:
        con.close()


def test_runs_of_different_lengths_keep_the_steps_each_keeps_alone(runs_dir):
    """Two runs thinned to the same first step and stride but ending at different steps: each
    keeps its own evenly spaced steps and its own last, picked together or alone, lumped or not."""
    short = record(runs_dir, "short", shortcut_spreads(steps=12))  # 4 points: steps 1, 4, 7, 10 and 12
    long = record(runs_dir, "long", shortcut_spreads(steps=13))  # steps 1, 4, 7, 10 and 13
    ingest_once(runs_dir)
    con = connect(runs_dir)
    try:
        for keep in (None, 2):
            together = queries.behaviour_step_shares(con, [short, long], max_steps=5, keep=keep)
            for run_id, steps in ((short, [1, 4, 7, 10, 12]), (long, [1, 4, 7, 10, 13])):
                alone = queries.behaviour_step_shares(con, [run_id], max_steps=5, keep=keep)
                assert sorted(alone["step"].unique()) == steps
                mine = together[together["run_id"] == run_id].reset_index(drop=True)
                assert mine[["step", "behaviour", "n"]].equals(alone[["step", "behaviour", "n"]].reset_index(drop=True))
    finally:
        con.close()


def test_behaviour_shares_lumped_in_sql_are_what_lump_shares_draws(runs_dir):
    first = record(runs_dir, "lumped", shortcut_spreads(steps=12))
    second = record(runs_dir, "other", shortcut_spreads(steps=12))
    ingest_once(runs_dir)
    con = connect(runs_dir)
    try:
        for keep in (1, 2, 8):
            lumped = queries.behaviour_step_shares(con, [first, second], max_steps=5, keep=keep)
            for run_id in (first, second):
                expected = behaviours.lump_shares(queries.behaviour_step_shares(con, [run_id], max_steps=5), keep)
                got = lumped[lumped["run_id"] == run_id][["step", "behaviour", "share"]].reset_index(drop=True)
                assert got[["step", "behaviour"]].equals(expected[["step", "behaviour"]].reset_index(drop=True))
                assert got["share"].tolist() == pytest.approx(expected["share"].tolist(), abs=1e-12)
        assert "(other)" in set(queries.behaviour_step_shares(con, [first], keep=1)["behaviour"])
    finally:
        con.close()


def test_rebuild_recreates_the_behaviours_their_tallies_and_what_was_reviewed(runs_dir):
    from agentrl.store.health import rebuild

    run_id = record(runs_dir, "rebuilt", shortcut_spreads())
    ingest_once(runs_dir)
    con = connect(runs_dir)
    try:
        member = queries.behaviour_members(con, run_id, " > ".join(SHORTCUT)).iloc[0]
        reviews.record_review(con, run_id, int(member.step), int(member.traj_idx), "approve", "alice", "")
        before = behaviours.behaviour_table(con, run_id)
        tallies = con.execute("SELECT * FROM step_behaviours ORDER BY ALL").fetchall()
    finally:
        con.close()
    rebuild(runs_dir)
    con = connect(runs_dir)
    try:
        assert con.execute("SELECT * FROM step_behaviours ORDER BY ALL").fetchall() == tallies
        after = behaviours.behaviour_table(con, run_id)
        assert after.drop(columns=["held_out_success"]).equals(before.drop(columns=["held_out_success"]))
        assert after.set_index("behaviour").loc[" > ".join(SHORTCUT), "reviewed"]
    finally:
        con.close()
