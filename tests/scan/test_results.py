"""A scanner over a stored run: results per trajectory and version in `scan_results`, written once
per version (a rescan of the same rule keeps them, a changed rule reopens them), and the hit rate
per step beside the violation rate."""

from __future__ import annotations

import json

from expense_runs import BATCH, SCANNERS_JSON, SHORTCUTS

from agentrl.scan import load_scanner, regex_scanner
from agentrl.scan.results import scan_run
from agentrl.store import queries
from agentrl.store.db import connect


def test_results_are_stored_per_trajectory_and_version_and_a_changed_rule_reopens_them(expense_run, tmp_path):
    runs_dir, run_id = expense_run
    con = connect(runs_dir)
    try:
        scanner = load_scanner(f"{SCANNERS_JSON}:forced_approval")
        first = scan_run(con, run_id, scanner)
        again = scan_run(con, run_id, scanner)
        assert (first.scanned, first.hits, again.scanned, again.kept) == (24, 12, 0, 24)
        stored = queries.scan_results(con, run_id, "forced_approval", scanner.version)
        hits = {int(r.traj_idx) for r in stored[stored["hit"]].itertuples()}
        assert hits == {i for i, (_, kind) in enumerate(BATCH) if kind in SHORTCUTS}
        row = stored[(stored["step"] == 1) & (stored["traj_idx"] == 5)].iloc[0]  # forced after a failed check: the call is item 6
        assert list(row["refs"]) == [6] and row["explanation"] == "approved with force=true: the receipt check was skipped"
        changed = regex_scanner("forced_approval", '"force": (true|1)', ["arguments"])
        assert scan_run(con, run_id, changed).scanned == 24
        assert set(queries.latest_scanners(con, run_id)["version"]) == {changed.version}
        rates = queries.scan_hit_rates(con, [run_id])
        assert rates["hit_rate"].tolist() == [0.5, 0.5, 0.5] and rates["scanned"].tolist() == [8, 8, 8]
    finally:
        con.close()


def test_the_command_prints_hits_with_the_cited_items_and_json_rows_with_every_column(expense_run, capsys):
    from agentrl.cli import main

    runs_dir, run_id = expense_run
    assert main(["scan", run_id, "--scanner", "builtin:repeated_call", "--json", "--runs-dir", str(runs_dir)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 24 and set(rows[0]) >= {"run_id", "step", "traj_idx", "scanner", "version", "value", "explanation", "refs"}
    assert main(["scan", run_id, "--scanner", f"{SCANNERS_JSON}:forced_approval", "--runs-dir", str(runs_dir)]) == 0
    out = capsys.readouterr().out
    assert "forced_approval v" in out and "12 of 24 trajectories hit" in out and "1/5  items 6  approved with force=true" in out
    assert main(["scan", run_id, "--scanner", "nowhere.py:x", "--runs-dir", str(runs_dir)]) == 2
    assert capsys.readouterr().err == "error: scanner file 'nowhere.py' does not exist\n"
    assert main(["scan", run_id, "--runs-dir", str(runs_dir)]) == 2
    assert "give --scanner PATH:NAME" in capsys.readouterr().err
