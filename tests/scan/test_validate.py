"""A scanner scored against review decisions: rejects and fixtures positive, approvals negative, a
held-out split fixed by the trajectory's id, and no figure from too few labels."""

from __future__ import annotations

import json

import pytest
from expense_runs import BATCH, SCANNERS_JSON, SHORTCUTS

from agentrl.scan import load_scanner
from agentrl.scan.results import scan_run
from agentrl.scan.validate import MIN_PER_CLASS, figures, split_of, validate_run
from agentrl.store import queries
from agentrl.store.db import connect


def test_the_split_is_fixed_by_the_trajectory_id_and_holds_out_about_half():
    ids = [("run", step, idx) for step in range(1, 51) for idx in range(20)]
    assert [split_of(*i) for i in ids] == [split_of(*i) for i in ids]
    share = sum(split_of(*i) == "held_out" for i in ids) / len(ids)
    assert 0.45 < share < 0.55


def test_too_few_labels_give_no_figure_and_say_so():
    few = figures("s", "1", "held_out", [(True, True), (False, False)], unscanned=0)
    assert (few.precision, few.recall, few.f1) == (None, None, None)
    assert few.note == f"too few labels: 1 positives and 1 negatives; a figure needs {MIN_PER_CLASS} of each"
    enough = figures("s", "1", "dev", [(True, True)] * 3 + [(True, False)] + [(False, False)] * 2 + [(False, True)], 0)
    assert (enough.precision, enough.recall, round(enough.f1, 3)) == (0.75, 0.75, 0.75)


@pytest.fixture
def reviewed(reviewed_store):
    runs_dir, run_id = reviewed_store
    con = connect(runs_dir)
    scan_run(con, run_id, load_scanner(f"{SCANNERS_JSON}:forced_approval"))
    yield runs_dir, run_id, con
    con.close()  # closing twice is harmless; some tests close it early to run a command


def test_rejects_and_fixtures_are_positives_and_approvals_negatives(reviewed):
    _, run_id, con = reviewed
    labels = queries.review_labels(con, [run_id])
    assert len(labels) == 24 and labels["label"].sum() == 12
    assert labels[(labels["step"] == 1) & (labels["traj_idx"] == 4)]["source"].item() == "fixture"


def test_a_regex_scanner_is_scored_on_each_split_and_verify_beside_it(reviewed):
    _, run_id, con = reviewed
    found = {(v.scanner, v.split): v for v in validate_run(con, run_id)}
    held = found[("forced_approval", "held_out")]
    positives = sum(split_of(run_id, s, i) == "held_out" and BATCH[i][1] in SHORTCUTS for s in (1, 2, 3) for i in range(8))
    assert (held.precision, held.recall, held.f1, held.positives, held.negatives + held.positives) == (
        1.0, 1.0, 1.0, positives, sum(split_of(run_id, s, i) == "held_out" for s in (1, 2, 3) for i in range(8)))
    verify = found[("verify", "held_out")]
    assert verify.recall == 0.0 and verify.true_positives == 0 and verify.note == "no hits"  # verify misses the shortcut


def test_a_launched_config_records_each_scanners_version_and_held_out_figures(reviewed):
    from expense_runs import TASK_SPEC

    from agentrl.config import make_config
    from agentrl.scan.enforce import with_scanner_validation

    runs_dir, _, con = reviewed
    con.close()
    config = make_config(kind="trl", task=TASK_SPEC, scorer="guarded", scanners=[f"{SCANNERS_JSON}:forced_approval"])
    (spec,) = with_scanner_validation(runs_dir, config).scanners
    assert spec.version == load_scanner(spec.spec).version
    assert spec.validation["split"] == "held_out" and (spec.validation["recall"], spec.validation["precision"]) == (1.0, 1.0)


def test_the_validate_command_prints_every_column_of_the_interface(reviewed, capsys):
    from agentrl.cli import main

    runs_dir, run_id, con = reviewed
    con.close()  # the command opens the store itself
    assert main(["scan", run_id, "--validate", "--json", "--runs-dir", str(runs_dir)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["scanner"] for r in rows} == {"verify", "forced_approval"}
    assert set(rows[0]) >= {"scanner", "version", "precision", "recall", "f1", "positives", "negatives", "split"}
    assert main(["scan", run_id, "--validate", "--runs-dir", str(runs_dir)]) == 0
    header = capsys.readouterr().out.splitlines()[0].split()
    assert header == ["scanner", "version", "split", "precision", "recall", "f1", "positives", "negatives", "note"]
