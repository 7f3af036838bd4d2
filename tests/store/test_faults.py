"""Fault injection on the record path: runs and ingest killed with SIGKILL at random moments.

The promises (README "Guarantees"): a step's rows become visible in every table together or not
at all, exactly once, however a run or an ingest dies; what a flush cut short leaves is removed
once no writer runs. Each kill is at a moment drawn from a seeded generator, so a failure can be
replayed; the long loops are marked `slow` (still run by `make test` and CI).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from agentrl.launcher import Launcher
from agentrl.record.chunks import CHUNKS_DIR, ChunkWriter, chunk_files, list_commits
from agentrl.record.rows import CHUNK_TABLES
from agentrl.record.rundir import RunDir, TERMINAL_STATUSES, create_run_dir, iso, list_run_dirs, utc_now
from agentrl.store.ingest import Ingestor, connect
from helpers import REPO_ROOT, agentrl, ok, wait_for

GROUP_ROWS = 32  # trajectories per step: 4 tasks x group size 8
ACTIONS = 4  # action_probs rows per step: one sensitive state x 4 actions
EVAL_EVERY = 5
EVAL_TASKS = 4


def committed_rows(runs_dir: Path) -> dict[str, int]:
    return {table: sum(pq.read_table(p).num_rows for run in list_run_dirs(runs_dir) for p in chunk_files(run.root, table))
            for table in CHUNK_TABLES}


def stored_rows(con) -> dict[str, int]:
    return {table: con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in CHUNK_TABLES}


def assert_every_step_whole_and_once(con, run_id: str, finished: bool) -> int:
    """Every visible step has all its rows, no row of an invisible step is there, nothing twice."""
    steps = [r[0] for r in con.execute("SELECT step FROM steps WHERE run_id = ? ORDER BY step", [run_id]).fetchall()]
    assert steps == list(range(1, len(steps) + 1)), steps  # each step once, none missing
    per_step = dict(con.execute("SELECT step, count(DISTINCT traj_idx) FROM trajectories WHERE run_id = ? GROUP BY step",
                                [run_id]).fetchall())
    total = con.execute("SELECT count(*) FROM trajectories WHERE run_id = ?", [run_id]).fetchone()[0]
    assert total == sum(per_step.values()), "a trajectory row is stored twice"
    assert per_step == {s: GROUP_ROWS for s in steps}, (run_id, per_step)
    probs = dict(con.execute("SELECT step, count(*) FROM action_probs WHERE run_id = ? GROUP BY step", [run_id]).fetchall())
    evals = dict(con.execute("SELECT step, count(*) FROM evals WHERE run_id = ? AND split = 'held_out' GROUP BY step",
                             [run_id]).fetchall())
    # Step 0 (the starting policy) has no steps row: its rows are whole, or not flushed yet.
    assert probs.pop(0, ACTIONS) == ACTIONS and evals.pop(0, EVAL_TASKS) == EVAL_TASKS, (run_id, probs, evals)
    assert probs == {s: ACTIONS for s in steps}, (run_id, probs)
    expected = {s: EVAL_TASKS for s in steps if s % EVAL_EVERY == 0}
    if finished:
        expected[steps[-1]] = EVAL_TASKS
    assert evals == expected, (run_id, evals, expected)
    return len(steps)


def leftovers(runs_dir: Path) -> list[str]:
    """Files in chunk folders that no commit names (what a flush cut short leaves)."""
    found = []
    for run in list_run_dirs(runs_dir):
        folder = run.root / CHUNKS_DIR
        named = {p.name for c in list_commits(run.root) for p in c.files.values()} | {c.name for c in list_commits(run.root)}
        found += [f"{run.run_id}/{n}" for n in os.listdir(folder) if n not in named] if folder.is_dir() else []
    return found


RUN_BATCHES = int(os.environ.get("AGENTRL_FAULT_BATCHES", "2"))  # 4 kills each; the README's figure is from 5
INGEST_KILLS = int(os.environ.get("AGENTRL_INGEST_KILLS", "5"))  # the README's figure is from 20


@pytest.mark.slow
def test_runs_sigkilled_at_random_moments_keep_every_flushed_step_whole_and_once(runs_dir, tmp_path):
    config = tmp_path / "long.json"
    # Long enough that every kill lands mid-run; a short step delay so flushes come often.
    config.write_text(json.dumps({"name": "killed", "rounds": 400, "step_delay": 0.01, "eval_every": EVAL_EVERY}))
    draw = random.Random(12)
    kills = 0
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("AGENTRL_RUNS_DIR", None)
    for batch in range(RUN_BATCHES):  # four runs at a time, each killed at its own moment
        procs = [subprocess.Popen([sys.executable, "-m", "agentrl", "train", "--config", str(config),
                                   "--runs-dir", str(runs_dir), "--quiet"], cwd=REPO_ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(4)]
        try:
            earlier = {run.run_id for run in list_run_dirs(runs_dir)}  # the batches before this one

            def writers(earlier=earlier):
                found = {}
                for run in list_run_dirs(runs_dir):
                    status = run.status() or {}
                    if status.get("status") == "running" and status.get("step", 0) >= 1 and run.run_id not in earlier:
                        found[run.run_id] = status["pid"]
                return found if len(found) == 4 else None

            pids = wait_for(writers, timeout=120)
            assert pids, f"batch {batch}: four runs did not start"
            for run_id, pid in pids.items():
                time.sleep(draw.uniform(0.0, 1.5))  # each kill at its own random moment of training
                assert (RunDir(runs_dir / run_id).status() or {}).get("status") == "running", "a run ended before its kill"
                os.kill(pid, signal.SIGKILL)
                kills += 1
        finally:
            for proc in procs:
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    assert kills == 4 * RUN_BATCHES

    # Once nothing writes them, the killed runs are failed and what a cut flush left is swept.
    Launcher(runs_dir).reconcile()
    runs = list_run_dirs(runs_dir)
    assert len(runs) == 4 * RUN_BATCHES
    assert {(r.status() or {}).get("status") for r in runs} == {"failed"}
    assert all("SIGKILL" in r.status()["error"] or "vanished" in r.status()["error"] for r in runs)
    ok(agentrl("ingest", "--runs-dir", runs_dir))
    assert leftovers(runs_dir) == []

    con = connect(runs_dir)
    try:
        committed = committed_rows(runs_dir)
        assert stored_rows(con) == committed  # every committed row, exactly once: 0 lost
        steps = [assert_every_step_whole_and_once(con, r.run_id, finished=False) for r in runs]
        assert all(n >= 1 for n in steps), steps  # every kill landed mid-training
        print(f"{kills} runs killed at random moments: {sum(steps)} steps and {sum(committed.values())} rows flushed, "
              f"all stored once, 0 lost, 0 steps split")
        again = Ingestor(con, runs_dir).ingest()
        assert (again.files, again.rows) == (0, 0)
    finally:
        con.close()


def _many_runs(runs_dir: Path, runs: int, steps: int) -> None:
    for r in range(runs):
        run_id = f"20260101-0000{r:02d}-ingest-0000"
        run = create_run_dir(runs_dir, run_id, {"run_id": run_id, "name": "ingest", "kind": "tabular",
                                                "scorer": "outcome", "created_at": iso(utc_now()), "config": {}})
        writer = ChunkWriter(run.root, interval=3600)
        for step in range(1, steps + 1):
            writer.append("trajectories", [{"step": step, "traj_idx": i, "task_id": "t", "reward": 1.0}
                                           for i in range(GROUP_ROWS)])
            writer.append("steps", [{"step": step, "ts": utc_now(), "success_rate": 1.0}])
            writer.flush()
        writer.close()
        run.update_status(status="succeeded", ended_at=iso(utc_now()))


@pytest.mark.slow
def test_ingest_sigkilled_mid_transaction_takes_every_commit_exactly_once(runs_dir):
    _many_runs(runs_dir, runs=8, steps=100)
    expected = committed_rows(runs_dir)
    draw = random.Random(20)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    interrupted = 0
    for _ in range(INGEST_KILLS):
        proc = subprocess.Popen([sys.executable, "-m", "agentrl", "ingest", "--runs-dir", str(runs_dir)],
                                cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # Kill once it holds the store (the database file exists and it has been working a little).
        wait_for(lambda: proc.poll() is not None or any(
            f.path.endswith("agentrl.duckdb") for f in _open_files(proc.pid)), timeout=60, interval=0.01)
        time.sleep(draw.uniform(0.0, 0.6))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            interrupted += 1
        proc.wait(timeout=60)
    assert interrupted >= INGEST_KILLS // 2, "too few kills landed before ingest finished; give it more chunks"
    ok(agentrl("ingest", "--runs-dir", runs_dir))
    con = connect(runs_dir)
    try:
        assert stored_rows(con) == expected
        duplicates = con.execute("SELECT count(*) FROM (SELECT run_id, step, traj_idx FROM trajectories "
                                 "GROUP BY ALL HAVING count(*) > 1)").fetchone()[0]
        assert duplicates == 0
        assert con.execute("SELECT count(*) FROM ingested_files").fetchone()[0] == 8 * 100
        print(f"ingest killed {interrupted} times of {INGEST_KILLS}: {sum(expected.values())} rows stored once, 0 lost, 0 twice")
    finally:
        con.close()


def _open_files(pid: int):
    try:
        return psutil.Process(pid).open_files()
    except psutil.Error:
        return []


# --- when what a cut flush left is swept ------------------------------------------------------


def _cut_flush(run: RunDir) -> list[Path]:
    """What a flush killed before its marker leaves: a table file of the next number and a temp file."""
    folder = run.root / CHUNKS_DIR
    folder.mkdir(exist_ok=True)
    number = max((c.number for c in list_commits(run.root)), default=-1) + 1
    orphan = folder / f"{number:08d}.trajectories.parquet"
    orphan.write_bytes(b"PAR1 half")
    temp = folder / f".{number:08d}.steps.parquet.tmp"
    temp.write_bytes(b"PAR1")
    return [orphan, temp]


def _run(runs_dir: Path, status: str, pid: int | None = None) -> RunDir:
    run_id = f"20260101-000000-{status}-0000"
    run = create_run_dir(runs_dir, run_id, {"run_id": run_id, "name": status, "config": {}})
    with ChunkWriter(run.root, interval=3600) as writer:
        writer.append("steps", [{"step": 1, "ts": utc_now()}])
    fields = {"status": status}
    if pid:
        fields.update(pid=pid, create_time=psutil.Process(pid).create_time())
    run.update_status(**fields)
    return run


def test_ingest_sweeps_a_cut_flush_of_an_ended_run_but_never_of_a_running_one(runs_dir):
    live = _run(runs_dir, "running", pid=os.getpid())
    ended = _run(runs_dir, "failed")
    live_files, ended_files = _cut_flush(live), _cut_flush(ended)
    con = connect(runs_dir)
    try:
        report = Ingestor(con, runs_dir).ingest()
        assert report.skipped == []
        assert all(p.exists() for p in live_files)  # its writer may be finishing this very flush
        assert not any(p.exists() for p in ended_files)
        assert stored_rows(con)["steps"] == 2
    finally:
        con.close()


def test_reconcile_sweeps_a_cut_flush_when_it_finds_the_run_dead(runs_dir):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    run = _run(runs_dir, "running", pid=child.pid)
    child.wait()
    files = _cut_flush(run)
    assert Launcher(runs_dir).reconcile() == [run.run_id]
    assert run.status()["status"] in TERMINAL_STATUSES
    assert not any(p.exists() for p in files)
    assert len(list_commits(run.root)) == 1  # the committed flush stays
