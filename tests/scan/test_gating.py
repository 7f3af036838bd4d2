"""The gate shows each enforced scanner's held-out recall against the reviews of its task's runs,
and fails a run whose scanner is below the floor the user set."""

from __future__ import annotations

import json

import pytest
from expense_runs import TASK_SPEC

from agentrl.review.gate_settings import GateError, GateSettings
from agentrl.scan import load_scanner
from agentrl.scan.gating import scanner_recall_checks
from agentrl.store.db import connect


def enforcing(tmp_path, pattern: str) -> dict:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({"forced": {"pattern": pattern, "where": ["arguments"]}}))
    spec = f"{rules}:forced"
    config = {"task": TASK_SPEC, "scanners": [{"spec": spec, "version": load_scanner(spec).version}]}
    return {"run_id": "guarded", "kind": "script", "config": json.dumps(config)}


def test_each_enforced_scanner_shows_its_held_out_recall_and_passes_at_the_floor(reviewed_store, tmp_path):
    runs_dir, _ = reviewed_store
    con = connect(runs_dir)
    try:
        (good,) = scanner_recall_checks(con, enforcing(tmp_path, '"force": true'), 0.8)
        assert good.passed and good.name.startswith("scanner forced v") and good.name.endswith("held-out recall ≥ 80%")
        assert good.figure.startswith("recall 1.00 (") and good.detail == "precision 1.00"
        (narrow,) = scanner_recall_checks(con, enforcing(tmp_path, '"note": "urgent"'), 0.8)  # one variant of three
        assert not narrow.passed and narrow.figure.startswith("recall 0.")
        assert scanner_recall_checks(con, {"run_id": "r", "kind": "script", "config": json.dumps({"task": TASK_SPEC})}, 0.8) == []
    finally:
        con.close()


def test_the_floor_is_a_gate_setting_and_a_command_line_option():
    assert GateSettings().min_scanner_recall == 0.8
    with pytest.raises(GateError, match="min_scanner_recall must be between 0 and 1"):
        GateSettings(min_scanner_recall=1.5)
    from agentrl.cli import parser

    args = parser().parse_args(["gate", "run", "--min-scanner-recall", "0.95"])
    assert args.min_scanner_recall == 0.95
