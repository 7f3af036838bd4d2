"""`python -m agentrl behaviours` and `python -m agentrl diff` on script runs (recorded through
`agentrl.init`, no decision points): the JSON shapes scripts rely on, the unverified marker, and
one clear line for bad input."""

from __future__ import annotations

import json

from agentrl.cli import main
from agentrl.store.ingest import ingest_once
from helpers import FLAGGED, HONEST, SHORTCUT, record_script_run, shortcut_spreads


def run(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_behaviours_json_lists_each_behaviour_with_its_figures_and_marks_the_shortcut_unverified(runs_dir, capsys):
    run_id = record_script_run(runs_dir, "shortcut", shortcut_spreads())
    ingest_once(runs_dir)  # a store to read (the commands then ingest whatever is new themselves)
    code, out, _ = run(capsys, "behaviours", run_id, "--json", "--runs-dir", runs_dir)
    rows = json.loads(out)
    assert code == 0
    for row in rows:
        assert {"behaviour", "first_step", "share", "mean_reward", "flagged_share", "reviewed", "unverified"} <= set(row)
    by = {r["behaviour"]: r for r in rows}
    shortcut = by[" > ".join(SHORTCUT)]
    assert (shortcut["first_step"], shortcut["share"], shortcut["reviewed"], shortcut["unverified"]) == (4, 0.5, False, True)
    assert by[" > ".join(FLAGGED)]["flagged_share"] == 1.0 and not by[" > ".join(FLAGGED)]["unverified"]
    assert sum(r["share"] for r in rows) == 1.0
    code, out, _ = run(capsys, "behaviours", run_id, "--last", "1", "--runs-dir", runs_dir)
    assert code == 0 and "UNVERIFIED" in out and "1 unverified" in out


def test_behaviours_of_an_unknown_run_or_a_bad_window_is_one_line(runs_dir, capsys):
    record_script_run(runs_dir, "any", [[(HONEST, 0.8, False)]])
    ingest_once(runs_dir)
    code, _, err = run(capsys, "behaviours", "nope", "--runs-dir", runs_dir)
    assert code == 2 and err.strip() == "error: no run 'nope' in the store; see `python -m agentrl runs`"
    code, _, err = run(capsys, "behaviours", "nope", "--last", "0", "--runs-dir", runs_dir)
    assert code == 2 and err.strip() == "error: --last must be at least 1, not 0"


def test_diff_json_ranks_the_state_where_the_runs_choose_differently_first(runs_dir, capsys):
    a = record_script_run(runs_dir, "a", [[(HONEST, 0.8, False)] * 8] * 3)
    b = record_script_run(runs_dir, "b", [[(HONEST, 0.8, False)] * 2 + [(FLAGGED, 0.85, True)] * 6] * 3)
    ingest_once(runs_dir)
    code, out, _ = run(capsys, "diff", a, b, "--json", "--runs-dir", runs_dir)
    rows = json.loads(out)
    assert code == 0 and rows[0]["state"] == "lookup"
    assert set(rows[0]) >= {"state", "js", "visits_a", "visits_b", "probs_a", "probs_b"}
    assert rows[0]["probs_a"] == {"request_approval": 1.0} and rows[0]["probs_b"] == {"request_approval": 0.25, "refund": 0.75}
    weighted = [r["js"] * r["weight"] for r in rows]
    assert weighted == sorted(weighted, reverse=True)
    code, out, _ = run(capsys, "diff", a, b, "--runs-dir", runs_dir)
    assert code == 0 and out.splitlines()[0].endswith("at lookup")
