"""`gate`, `review`, `promote` and `rollback` from the command line: the Review page's rules and
records (issue 13: everything the pages do, also from the command line)."""

from __future__ import annotations

from pathlib import Path

import json

import pytest

from agentrl.cli import main
from agentrl.store import queries
from agentrl.store.db import connect
from helpers import agentrl


def run(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def pair(trained_pair):
    runs_dir, ids = trained_pair
    return runs_dir, ids


def test_gate_prints_each_check_with_its_figure_and_the_sample_and_exits_1_on_failure(pair, capsys):
    runs_dir, ids = pair
    code, out, _ = run(capsys, "gate", ids["outcome"], "--runs-dir", runs_dir)
    assert code == 1
    assert "FAIL  zero held-out violations: 2 of 4 tasks violate" in out
    assert "the gate's sample: one trajectory per high-reward behaviour (1):" in out
    assert "gate fails; run state: not promoted" in out


def test_gate_json_has_every_check_and_exactly_the_sample_it_counted(pair, capsys):
    runs_dir, ids = pair
    code, out, _ = run(capsys, "gate", ids["guarded"], "--json", "--last-steps", "3", "--min-share", "0.1",
                       "--runs-dir", runs_dir)
    report = json.loads(out)
    assert code == 1 and report["passed"] is False and report["run_id"] == ids["guarded"]
    (failed,) = [c for c in report["checks"] if not c["passed"]]
    assert "behaviour" in failed["name"] and "≥ 10% of the top-reward quarter, last 3 steps" in failed["name"]
    assert failed["figure"] == "0 of 1 high-reward behaviours reviewed, 0 rejected behaviours taught"
    assert [r["behaviour"] for r in report["sample"]] == ["lookup > refund > finish"]
    member = queries.behaviour_members(connect(runs_dir), ids["guarded"], "lookup > refund > finish", since_step=27)
    assert (report["sample"][0]["step"], report["sample"][0]["traj_idx"]) in set(zip(member["step"], member["traj_idx"]))


def test_review_list_approve_reject_fixture_follow_the_pages_rules(pair, capsys):
    runs_dir, ids = pair
    code, out, _ = run(capsys, "review", "list", ids["outcome"], "--top", "3", "--json", "--runs-dir", runs_dir)
    rows = json.loads(out)
    assert code == 0 and len(rows) == 3 and all(r["violation"] for r in rows)  # violations first among equal rewards
    first = f"{rows[0]['step']}/{rows[0]['traj_idx']}"
    code, _, err = run(capsys, "review", "reject", ids["outcome"], first, "--reviewer", "alice", "--runs-dir", runs_dir)
    assert code == 2 and err.strip() == "error: a reject needs a note saying what is wrong with the trajectory"
    code, out, _ = run(capsys, "review", "reject", ids["outcome"], first, "--reviewer", "alice", "--note", "no approval",
                       "--runs-dir", runs_dir)
    assert code == 0 and out.startswith(f"rejected step {first.replace('/', ' #')}")
    code, _, _ = run(capsys, "review", "fixture", ids["outcome"], first, "--reviewer", "alice", "--note", "refund without approval",
                     "--runs-dir", runs_dir)
    assert code == 0
    second = f"{rows[1]['step']}/{rows[1]['traj_idx']}"
    code, _, err = run(capsys, "review", "reject", ids["outcome"], second, "--fixture", "--reviewer", "bob", "--runs-dir", runs_dir)
    assert code == 2 and err.strip() == "error: a reject needs a note saying what is wrong with the trajectory"
    code, out, _ = run(capsys, "review", "reject", ids["outcome"], second, "--fixture", "--reviewer", "bob", "--note", "same shortcut",
                       "--runs-dir", runs_dir)
    assert code == 0 and out.startswith(f"rejected step {second.replace('/', ' #')}") and "exploit fixture 2" in out
    code, out, _ = run(capsys, "review", "show", ids["outcome"], first, "--runs-dir", runs_dir)
    assert "violation=yes (!)" in out and "reject" in out and "alice" in out
    con = connect(runs_dir)
    try:
        # A fixture is a reject too: storing one appends the reject, with the fixture's note.
        assert queries.reviews_for_run(con, ids["outcome"])[["verdict", "reviewer", "note"]].values.tolist() == [
            ["reject", "alice", "no approval"], ["reject", "alice", "refund without approval"], ["reject", "bob", "same shortcut"]]
        fixtures = queries.all_fixtures(con)
        assert fixtures["note"].tolist() == ["refund without approval", "same shortcut"]
        assert fixtures["task"].tolist() == ["refund", "refund"]
        assert fixtures["behaviour"].tolist() == [queries.trajectory(con, ids["outcome"], r["step"], r["traj_idx"])["behaviour"]
                                                  for r in rows[:2]]
        # A refund run launched now lists both, with the gym states they went through.
        from agentrl.config import load_preset
        from agentrl.launcher import with_fixtures

        listed = with_fixtures(Path(runs_dir), load_preset("refund-guarded")).fixtures
        assert [(f.fixture_id, f.behaviour) for f in listed] == list(zip(fixtures["fixture_id"], fixtures["behaviour"]))
        assert all(f.states and f.states[0] == "start" for f in listed)
    finally:
        con.close()
    code, _, err = run(capsys, "review", "approve", ids["outcome"], "nope", "--runs-dir", runs_dir)
    assert code == 2 and "give STEP/IDX" in err


def test_promote_needs_a_passing_gate_or_an_override_and_rollback_needs_a_reason(pair, capsys):
    runs_dir, ids = pair
    code, _, err = run(capsys, "promote", ids["outcome"], "--by", "alice", "--runs-dir", runs_dir)
    assert code == 2 and "the gate fails" in err
    for row in queries.top_trajectories(connect(runs_dir), ids["guarded"], 5, 3).itertuples():
        assert run(capsys, "review", "approve", ids["guarded"], f"{row.step}/{row.traj_idx}", "--reviewer", "bob",
                   "--runs-dir", runs_dir)[0] == 0
    code, out, _ = run(capsys, "promote", ids["guarded"], "--by", "bob", "--runs-dir", runs_dir)
    assert code == 0 and out.startswith(f"promoted {ids['guarded']}")
    assert (runs_dir / ids["guarded"] / "bundle" / "manifest.json").is_file()
    code, _, err = run(capsys, "rollback", ids["guarded"], "--by", "bob", "--reason", " ", "--runs-dir", runs_dir)
    assert code == 2 and err.strip() == "error: a rollback needs a reason"
    code, out, _ = run(capsys, "rollback", ids["guarded"], "--by", "bob", "--reason", "regression", "--runs-dir", runs_dir)
    assert code == 0
    con = connect(runs_dir)
    try:
        assert queries.promotions(con, ids["guarded"])[["decision", "decided_by"]].values.tolist() == [
            ["promote", "bob"], ["rollback", "bob"]]
    finally:
        con.close()


def test_the_real_cli_names_an_unknown_run_in_one_line(pair):
    runs_dir, _ = pair
    result = agentrl("gate", "nope", "--runs-dir", runs_dir)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: no run 'nope' in the store; see `python -m agentrl runs`"
