"""The store's upkeep (agentrl/store/maintenance.py): DuckDB checkpoints kept out of ingest
transactions, nothing lost by a crash before one, and finished runs compacted by the thread.

DuckDB checkpoints by itself inside the commit that takes its write-ahead log past 16 MiB. These
tests ingest more than that in small commits and watch the real log file: it only grows while
ingest runs (no checkpoint inside a transaction), and it empties when maintenance checkpoints
between transactions. A process SIGKILLed with the log full loses nothing: DuckDB replays it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from agentrl.record.chunks import ChunkWriter, list_commits
from agentrl.record.rundir import create_run_dir, iso, utc_now
from agentrl.store.ingest import Ingestor, connect
from agentrl.store.maintenance import Maintenance, defer_checkpoints, wal_bytes
from helpers import REPO_ROOT, wait_for

DUCKDB_DEFAULT_THRESHOLD = 16 * 2**20  # DuckDB's checkpoint_threshold out of the box
ROWS = 300  # trajectories per commit, each with a 600-character prompt: ~0.2 MiB of log a commit
PROMPT = "x" * 600


def write_commits(run, first_step: int, commits: int) -> None:
    with ChunkWriter(run.root, interval=3600) as writer:
        for step in range(first_step, first_step + commits):
            writer.append("trajectories", [{"run_id": run.run_id, "step": step, "traj_idx": i, "task_id": "t",
                                            "reward": 1.0, "prompt": PROMPT, "components": {"outcome": 1.0}}
                                           for i in range(ROWS)])
            writer.append("steps", {"run_id": run.run_id, "step": step, "ts": utc_now()})
            writer.flush()


def new_run(runs_dir, status="running"):
    run_id = f"20260101-000000-{status}-0000"
    run = create_run_dir(runs_dir, run_id, {"run_id": run_id, "name": status, "kind": "script", "scorer": "outcome",
                                            "created_at": iso(utc_now()), "config": {}})
    run.update_status(status=status, pid=os.getpid())
    return run


def test_ingest_never_checkpoints_inside_a_transaction_and_maintenance_checkpoints_between_them(runs_dir):
    run = new_run(runs_dir)
    con = connect(runs_dir)
    try:
        ingestor = Ingestor(con, runs_dir)
        maintenance = Maintenance(ingestor, runs_dir, start=False, compact=False)  # the dashboard's settings
        logged = []
        for batch in range(8):
            write_commits(run, 1 + batch * 12, 12)
            assert ingestor.ingest().files == 12
            logged.append(wal_bytes(con))
        assert logged == sorted(logged), logged  # the log never shrank: no checkpoint ran inside an ingest
        assert logged[-1] > DUCKDB_DEFAULT_THRESHOLD, logged  # past where DuckDB would have checkpointed by itself
        seconds = maintenance.maybe_checkpoint()  # between transactions: the log is past wal_limit
        assert seconds is not None and maintenance.checkpoints[-1][1] == logged[-1]
        assert wal_bytes(con) < logged[0]
        assert con.execute("SELECT count(*) FROM trajectories").fetchone()[0] == 8 * 12 * ROWS
        assert maintenance.maybe_checkpoint() is None  # nothing to do with an empty log and a busy ingest
    finally:
        con.close()


CRASH_WITH_A_FULL_LOG = """
import os, signal, sys
from pathlib import Path
from agentrl.store.ingest import Ingestor, connect
from agentrl.store.maintenance import defer_checkpoints, wal_bytes

runs_dir = Path(sys.argv[1])
con = connect(runs_dir)
defer_checkpoints(con)
report = Ingestor(con, runs_dir).ingest()
print(report.files, report.rows, wal_bytes(con), flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no checkpoint, no close: only the log holds the rows
"""


def test_a_store_killed_before_its_deferred_checkpoint_loses_nothing(runs_dir):
    run = new_run(runs_dir, status="succeeded")
    write_commits(run, 1, 40)
    proc = subprocess.run([sys.executable, "-c", CRASH_WITH_A_FULL_LOG, str(runs_dir)], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    files, rows, logged = map(int, proc.stdout.split())
    assert (files, rows) == (40, 40 * (ROWS + 1)) and logged > 2**20
    assert os.path.getsize(runs_dir / "agentrl.duckdb.wal") >= logged  # the rows are in the log alone
    con = connect(runs_dir)  # DuckDB replays the log
    try:
        assert con.execute("SELECT count(*) FROM trajectories").fetchone()[0] == 40 * ROWS
        assert con.execute("SELECT count(*) FROM ingested_files").fetchone()[0] == 40
        again = Ingestor(con, runs_dir).ingest()
        assert (again.files, again.rows) == (0, 0)  # the ledger came back with the rows: nothing twice
    finally:
        con.close()


def test_the_maintenance_thread_compacts_a_finished_run_and_checkpoints_when_idle(runs_dir):
    run = new_run(runs_dir, status="succeeded")
    write_commits(run, 1, 10)
    con = connect(runs_dir)
    try:
        ingestor = Ingestor(con, runs_dir)
        defer_checkpoints(con)
        ingestor.ingest()
        ingestor.ingest()  # drained
        assert wal_bytes(con) > 0
        maintenance = Maintenance(ingestor, runs_dir, interval=0.05, idle_checkpoint_s=0.0, compact_after_s=0.0)
        try:
            assert wait_for(lambda: len(list_commits(run.root)) == 1, timeout=30)
            assert wait_for(lambda: maintenance.checkpoints, timeout=30)
        finally:
            maintenance.stop()
        assert maintenance.last_error is None
        (report,) = maintenance.compactions
        assert (report.commits, report.rows) == (10, 10 * (ROWS + 1))
        assert con.execute("SELECT count(*) FROM trajectories").fetchone()[0] == 10 * ROWS
        assert Ingestor(con, runs_dir).ingest().files == 0
    finally:
        con.close()


@pytest.mark.slow
def test_a_backlog_is_checkpointed_between_its_own_transactions_once_the_file_grows(runs_dir, monkeypatch):
    """Large appends go straight into the database file; a backlog of them is checkpointed between
    its transactions (so the blocks they free are reused), never inside one."""
    import agentrl.store.ingest as ingest
    from agentrl.bench.synth import Shape, write_run

    write_run(runs_dir, 0, Shape(runs=1, steps=400, per_step=1000, steps_per_commit=100))  # 4 commits of 100k rows
    monkeypatch.setattr(ingest, "MAX_ROWS_PER_TRANSACTION", 150_000)  # two commits a transaction
    con = connect(runs_dir)
    try:
        ingestor = Ingestor(con, runs_dir)
        maintenance = Maintenance(ingestor, runs_dir, start=False, compact=False, growth_limit=2**20)
        seen = []
        real = ingestor._commit

        def commit(loaded):  # what the log holds as each transaction starts and ends
            seen.append(("begin", wal_bytes(con)))
            real(loaded)
            seen.append(("end", len(maintenance.checkpoints)))

        ingestor._commit = commit
        assert ingestor.ingest().files == 4
        assert len(ingestor.transaction_seconds) == 2
        assert [kind for kind, _ in seen] == ["begin", "end", "begin", "end"]
        assert len(maintenance.checkpoints) >= 1  # the file grew past 1 MiB: checkpointed between transactions
        assert seen[1][1] == 0  # ... after the first transaction had ended, not during it
        assert con.execute("SELECT count(*) FROM trajectories").fetchone()[0] == 400_000
    finally:
        con.close()
