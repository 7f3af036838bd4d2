"""A run that loses its files (issue 22, item 4): run.json, or the whole run folder, removed while
`python -m agentrl train` runs. The run ends `failed` saying what was removed and at which step,
the rows the store took stay, `train` exits non-zero (never "succeeded; ingested 0 rows"), and the
run can be deleted; before, it stayed `running` in the store for good.

A real `train` subprocess (the tabular preset with a step delay); `ingest` during the run stands
for the dashboard; the files are removed as a person would.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from agentrl.record.rundir import list_run_dirs
from agentrl.store import curation, queries
from agentrl.store.ingest import Ingestor, connect
from helpers import REPO_ROOT, agentrl, ok, wait_for


def start_train(runs_dir) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("AGENTRL_RUNS_DIR", None)
    return subprocess.Popen([sys.executable, "-m", "agentrl", "train", "--preset", "refund-outcome", "--step-delay", "0.3",
                             "--runs-dir", str(runs_dir), "--quiet"], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def stored(runs_dir, run_id: str) -> tuple[dict | None, int]:
    con = connect(runs_dir)
    try:
        return queries.get_run(con, run_id), con.execute("SELECT count(*) FROM steps WHERE run_id = ?", [run_id]).fetchone()[0]
    finally:
        con.close()


def train_until_the_store_holds_steps(runs_dir) -> tuple[subprocess.Popen, str, int]:
    """A run started and a few of its steps ingested while it runs (as the dashboard does)."""
    train = start_train(runs_dir)
    runs = wait_for(lambda: list_run_dirs(runs_dir), timeout=60)
    assert runs, train.stderr
    run = runs[0]
    assert wait_for(lambda: len(list((run.root / "chunks").glob("*.commit"))) >= 4, timeout=60)
    ok(agentrl("ingest", "--runs-dir", runs_dir))
    run_row, steps = stored(runs_dir, run.run_id)
    assert run_row["status"] == "running" and steps >= 1
    return train, run.run_id, steps


def ended(train: subprocess.Popen) -> tuple[int, str, str]:
    out, err = train.communicate(timeout=120)
    return train.returncode, out, err


def deleted(runs_dir, run_id: str) -> None:
    con = connect(runs_dir)
    try:
        curation.delete_run(con, runs_dir, run_id)  # the Runs page's Delete
        assert queries.get_run(con, run_id) is None and queries.step_metrics(con, run_id).empty
    finally:
        con.close()
    assert not (runs_dir / run_id).exists()


@pytest.mark.slow
def test_a_run_whose_run_json_is_removed_ends_failed_keeps_its_rows_and_can_be_deleted(tmp_path):
    runs_dir = tmp_path / "runs"
    train, run_id, steps_before = train_until_the_store_holds_steps(runs_dir)
    (runs_dir / run_id / "run.json").unlink()

    code, out, err = ended(train)
    assert code != 0 and "succeeded" not in out and "Traceback" not in err, (out, err)
    assert re.search(rf"run {run_id} failed \(run\.json was removed at step \d+\)", out), out
    run, steps = stored(runs_dir, run_id)
    assert run["status"] == "failed" and re.fullmatch(r"run\.json was removed at step \d+", run["error"]), run
    assert steps >= steps_before  # what it committed stays (and what it committed after, too)
    deleted(runs_dir, run_id)


@pytest.mark.slow
def test_a_run_whose_folder_is_removed_ends_failed_keeps_its_rows_and_can_be_deleted(tmp_path):
    runs_dir = tmp_path / "runs"
    train, run_id, steps_before = train_until_the_store_holds_steps(runs_dir)
    os.rename(runs_dir / run_id, tmp_path / "bin")  # moved to the bin, then emptied
    shutil.rmtree(tmp_path / "bin")

    code, out, err = ended(train)
    assert code != 0 and "succeeded" not in out and "Traceback" not in err, (out, err)
    assert f"run {run_id} failed (the run folder was removed while it ran)" in out, out
    assert not (runs_dir / run_id).exists()  # nothing of it was made again
    run, steps = stored(runs_dir, run_id)
    assert run["status"] == "failed" and run["error"] == f"the run folder was removed at step {steps_before}", run
    assert steps == steps_before
    deleted(runs_dir, run_id)


def test_the_stores_ingest_ends_a_running_run_whose_files_are_gone_and_keeps_its_rows(pair_store, tmp_path):
    con, runs_dir, ids = pair_store
    for run_id in ids.values():
        con.execute("UPDATE runs SET status = 'running', ended_at = NULL WHERE run_id = ?", [run_id])
    (runs_dir / ids["outcome"] / "run.json").unlink()
    shutil.move(runs_dir / ids["guarded"], tmp_path / "elsewhere")
    Ingestor(con, runs_dir, log=lambda message: None).ingest()
    outcome, guarded = queries.get_run(con, ids["outcome"]), queries.get_run(con, ids["guarded"])
    assert (outcome["status"], outcome["error"]) == ("failed", "run.json was removed at step 30")
    assert (guarded["status"], guarded["error"]) == ("failed", "the run folder was removed at step 30")
    assert len(queries.step_metrics(con, ids["guarded"])) == 30  # its rows stay
    for run_id in ids.values():
        curation.delete_run(con, runs_dir, run_id)
        assert queries.get_run(con, run_id) is None


@pytest.mark.slow
def test_launch_wait_ends_when_the_run_folder_is_removed_instead_of_waiting_for_good(tmp_path):
    runs_dir = tmp_path / "runs"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("AGENTRL_RUNS_DIR", None)
    launch = subprocess.Popen([sys.executable, "-m", "agentrl", "launch", "--preset", "refund-outcome", "--step-delay", "0.3",
                               "--runs-dir", str(runs_dir), "--wait"], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    runs = wait_for(lambda: list_run_dirs(runs_dir), timeout=60)
    assert runs
    assert wait_for(lambda: len(list((runs[0].root / "chunks").glob("*.commit"))) >= 3, timeout=60)
    os.rename(runs[0].root, tmp_path / "bin")
    code, out, err = ended(launch)
    assert code != 0 and "Traceback" not in err, (out, err)
    assert f"run {runs[0].run_id} failed: the run folder was removed while it ran" in out, out
