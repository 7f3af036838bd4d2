"""Tests of agentrl/store.py: connect, and idempotent ingest of run chunks into DuckDB.

The store is the one place chunks meet the database, so these pin its promises: a chunk is
taken exactly once (across restarts too), a bad chunk is skipped and named without holding
back the rest, a held database fails with one clear line, a run killed with SIGKILL leaves
nothing torn and loses only its unflushed buffer, and a reader never errors while a run writes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import wait_for
from agentrl.store import queries
from agentrl.record.chunks import ChunkWriter, chunk_files, list_commits
from agentrl.launcher import Launcher
from agentrl.record.rows import CHUNK_TABLES, to_arrow
from agentrl.record.rundir import DB_FILENAME, create_run_dir, iso, list_run_dirs, utc_now
from agentrl.store.ingest import Ingestor, StoreLockedError, connect

PROJECT_ROOT = Path(__file__).resolve().parents[2]
GROUP_ROWS = 32  # trajectories per step of the refund presets: 4 tasks x group_size 8


# `runs_dir` (a folder that does not exist yet) comes from conftest.py.


@pytest.fixture
def con(runs_dir: Path):
    runs_dir.mkdir(parents=True, exist_ok=True)
    connection = connect(runs_dir)
    yield connection
    connection.close()


@pytest.fixture
def procs():
    """Subprocesses a test starts; killed and reaped at teardown whatever happened."""
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)



def make_run(runs_dir: Path, run_id: str = "20260101-000000-test-0000", steps: int = 3, status: str = "succeeded"):
    """A finished run folder with `steps` steps of chunks, one flush per step."""
    run = create_run_dir(runs_dir, run_id, {"run_id": run_id, "name": "test", "kind": "tabular", "scorer": "outcome",
                                            "created_at": iso(utc_now()), "total_steps": steps, "config": {}})
    writer = ChunkWriter(run.root, interval=3600)
    for step in range(1, steps + 1):
        writer.append("trajectories", [
            {"run_id": run_id, "step": step, "traj_idx": i, "task_id": f"t{i}", "states": ["start"],
             "actions": ["refund"], "reward": 1.0, "components": {"outcome": 1.0}, "success": True}
            for i in range(4)
        ])
        writer.append("action_probs", {"run_id": run_id, "step": step, "state": "known_high", "action": "refund", "prob": 1.0})
        writer.append("steps", {"run_id": run_id, "step": step, "ts": utc_now(), "success_rate": 1.0})
        writer.flush()
    writer.close()
    run.update_status(status=status, ended_at=iso(utc_now()))
    return run


def table_counts(con) -> dict[str, int]:
    return {table: con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in CHUNK_TABLES}


def chunk_row_counts(run_root: Path) -> dict[str, int]:
    return {table: sum(pq.read_table(p).num_rows for p in chunk_files(run_root, table)) for table in CHUNK_TABLES}


def start_train(runs_dir: Path, step_delay: float, procs: list) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrl", "train", "--preset", "refund-outcome", "--step-delay", str(step_delay),
         "--runs-dir", str(runs_dir), "--quiet"],
        cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )
    procs.append(proc)
    return proc


def the_run(runs_dir: Path, timeout: float = 30.0):
    runs = wait_for(lambda: list_run_dirs(runs_dir), timeout=timeout)
    assert runs, f"no run folder appeared in {runs_dir}"
    (run,) = runs
    return run


# --- idempotent ingest ----------------------------------------------------------------------


def test_ingest_is_idempotent_within_and_across_connections(runs_dir, con):
    run = make_run(runs_dir)
    expected = chunk_row_counts(run.root)
    first = Ingestor(con, runs_dir).ingest()
    n_files = len(list_commits(run.root))  # one commit per flush, every table of it in one transaction
    assert n_files == 3
    assert (first.files, first.rows) == (n_files, sum(expected.values()))
    assert table_counts(con) == expected

    again = Ingestor(con, runs_dir).ingest()  # a new Ingestor on the same connection
    assert (again.files, again.rows) == (0, 0)
    ingestor = Ingestor(con, runs_dir)
    ingestor.ingest()
    assert ingestor.ingest().files == 0
    assert table_counts(con) == expected

    con.close()
    reopened = connect(runs_dir)
    try:
        report = Ingestor(reopened, runs_dir).ingest()
        assert (report.files, report.rows) == (0, 0)
        assert table_counts(reopened) == expected
        paths = [r[0] for r in reopened.execute("SELECT path FROM ingested_files").fetchall()]
        assert len(paths) == len(set(paths)) == n_files
        assert sorted(paths) == sorted(f"{run.run_id}/chunks/{c.name}" for c in list_commits(run.root))
        assert reopened.execute("SELECT sum(rows) FROM ingested_files").fetchone()[0] == sum(expected.values())
    finally:
        reopened.close()


def test_a_stale_ingestor_neither_duplicates_nor_blames_a_taken_chunk(runs_dir, con):
    """Two Ingestors on one database (built before either ran): the second takes nothing twice."""
    run = make_run(runs_dir, status="running")
    first, messages = Ingestor(con, runs_dir), []
    second = Ingestor(con, runs_dir, log=messages.append)
    first.ingest()
    expected = table_counts(con)
    writer = ChunkWriter(run.root, interval=3600)
    writer.append("steps", {"run_id": run.run_id, "step": 4, "ts": utc_now()})
    writer.close()
    report = second.ingest()
    assert (report.files, report.rows, report.skipped, messages) == (1, 1, [], [])
    assert table_counts(con) == dict(expected, steps=expected["steps"] + 1)
    assert con.execute("SELECT count(*) FROM ingest_errors").fetchone()[0] == 0
    assert second.ingest().files == 0 and first.ingest().files == 0


def test_new_chunks_of_a_running_run_are_picked_up_incrementally(runs_dir, con):
    run = make_run(runs_dir, steps=2, status="running")
    ingestor = Ingestor(con, runs_dir)
    ingestor.ingest()
    assert con.execute("SELECT max(step) FROM steps").fetchone()[0] == 2
    writer = ChunkWriter(run.root, interval=3600)  # resumes at the next part numbers
    writer.append("steps", {"run_id": run.run_id, "step": 3, "ts": utc_now()})
    writer.close()
    report = ingestor.ingest()
    assert report.files == 1 and report.rows == 1
    assert [r[0] for r in con.execute("SELECT step FROM steps ORDER BY step").fetchall()] == [1, 2, 3]


def test_run_status_lands_in_the_runs_table(runs_dir, con):
    run = make_run(runs_dir, status="running")
    ingestor = Ingestor(con, runs_dir)
    ingestor.ingest()
    assert queries.get_run(con, run.run_id)["status"] == "running"
    run.update_status(status="failed", error="boom", ended_at=iso(utc_now()))
    ingestor.ingest()
    record = queries.get_run(con, run.run_id)
    assert record["status"] == "failed" and record["error"] == "boom"
    assert record["ended_at"] is not None
    # What the run pickers label each run with, read fresh; and the config the runs table shows.
    assert queries.run_statuses(con) == {run.run_id: "failed"}
    assert set(queries.config_texts(con, [run.run_id, "nope"])) == {run.run_id}


# --- bad chunks -----------------------------------------------------------------------------


def test_bad_chunks_are_skipped_named_and_not_retried_while_unchanged(runs_dir, con):
    run = make_run(runs_dir)
    good = chunk_row_counts(run.root)
    # Bad files in the record-schema-1 layout (one folder per table), which the store still reads.
    for table in ("steps", "trajectories", "action_probs"):
        (run.root / table).mkdir()
    garbage = run.root / "steps" / "part-00099.parquet"
    garbage.write_bytes(b"this is not parquet at all " * 10)
    wrong_columns = run.root / "trajectories" / "part-00098.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), wrong_columns)
    wrong_types = run.root / "action_probs" / "part-00097.parquet"
    pq.write_table(pa.table({"run_id": ["r"], "step": ["not a number"], "state": ["s"], "action": ["a"], "prob": [0.5]}),
                   wrong_types)
    bad = {garbage, wrong_columns, wrong_types}

    messages: list[str] = []
    report = Ingestor(con, runs_dir, log=messages.append).ingest()

    # The good files all went in.
    assert table_counts(con) == good
    assert report.rows == sum(good.values())
    # Each bad file is reported once, with its path and a reason.
    assert len(messages) == 3
    for path in bad:
        (line,) = [m for m in messages if str(path) in m]
        assert line.split(f"{path}: ", 1)[1].strip(), line
    assert "missing columns" in next(m for m in messages if str(wrong_columns) in m)
    assert {Path(p) for p, _ in report.skipped} == bad
    assert all(reason for _, reason in report.skipped)
    errors = dict(con.execute("SELECT path, error FROM ingest_errors").fetchall())
    assert set(errors) == {f"{run.run_id}/{p.parent.name}/{p.name}" for p in bad}
    assert all(errors.values())
    assert len(queries.ingest_errors(con)) == 3

    # Unchanged bad files are not retried: not by this Ingestor, nor by one built after a restart.
    messages.clear()
    ingestor = Ingestor(con, runs_dir, log=messages.append)
    assert ingestor.ingest().skipped == [] and messages == []
    con.close()
    reopened = connect(runs_dir)
    try:
        ingestor = Ingestor(reopened, runs_dir, log=messages.append)
        again = ingestor.ingest()
        assert (again.files, again.rows, again.skipped, messages) == (0, 0, [], [])

        # A bad file that is rewritten whole is tried again and taken. (An Ingestor stops scanning
        # a run once it has ended and been drained, so the retry is by the next Ingestor.)
        pq.write_table(to_arrow("steps", [{"run_id": run.run_id, "step": 7, "ts": utc_now()}]), garbage)
        os.utime(garbage, ns=(time.time_ns(), time.time_ns() + 1_000_000))
        fixed = Ingestor(reopened, runs_dir, log=messages.append).ingest()
        assert fixed.files == 1 and fixed.rows == 1
        assert reopened.execute("SELECT count(*) FROM steps WHERE step = 7").fetchone()[0] == 1
    finally:
        reopened.close()


def test_a_commit_with_one_bad_table_file_is_skipped_whole(runs_dir, con):
    """A step's rows become visible together or not at all: one unreadable file holds back its whole commit."""
    run = make_run(runs_dir, steps=2)
    (second,) = [c for c in list_commits(run.root) if c.number == 1]
    second.files["trajectories"].write_bytes(b"torn")
    messages: list[str] = []
    report = Ingestor(con, runs_dir, log=messages.append).ingest()
    assert report.files == 1 and len(report.skipped) == 1
    assert [r[0] for r in con.execute("SELECT DISTINCT step FROM steps").fetchall()] == [1]
    assert [r[0] for r in con.execute("SELECT DISTINCT step FROM trajectories").fetchall()] == [1]
    assert [r[0] for r in con.execute("SELECT DISTINCT step FROM action_probs").fetchall()] == [1]
    assert f"{run.run_id}/chunks/00000001.commit" in dict(con.execute("SELECT path, error FROM ingest_errors").fetchall())


def test_a_run_of_a_newer_record_schema_is_refused_with_one_message(runs_dir, con):
    from agentrl.record.rundir import write_json_atomic

    run = make_run(runs_dir)
    write_json_atomic(run.meta_path, {**run.meta(), "record_schema_version": 99})
    messages: list[str] = []
    report = Ingestor(con, runs_dir, log=messages.append).ingest()
    assert report.rows == 0 and con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    (line,) = messages
    assert "record schema 99" in line and "upgrade agentrl" in line


def test_a_run_of_record_schema_1_is_read(runs_dir, con):
    """Runs written before commits (one folder per table, no version in run.json) still ingest."""
    from agentrl.record.rundir import write_json_atomic

    run = make_run(runs_dir, steps=0)
    meta = run.meta()
    del meta["record_schema_version"]
    write_json_atomic(run.meta_path, meta)
    for table, rows in {"steps": [{"run_id": run.run_id, "step": 1, "ts": utc_now()}],
                        "trajectories": [{"run_id": run.run_id, "step": 1, "traj_idx": 0, "task_id": "t", "reward": 1.0}]}.items():
        (run.root / table).mkdir()
        pq.write_table(to_arrow(table, rows), run.root / table / "part-00000.parquet")
    report = Ingestor(con, runs_dir).ingest()
    assert report.rows == 2
    assert queries.get_run(con, run.run_id)["record_schema_version"] == 1


def test_cli_ingest_names_a_bad_chunk_once_and_ingests_the_rest(runs_dir):
    run = make_run(runs_dir)
    good_rows = sum(chunk_row_counts(run.root).values())
    (run.root / "steps").mkdir()
    garbage = run.root / "steps" / "part-00099.parquet"
    garbage.write_bytes(b"\x00garbage")
    result = subprocess.run([sys.executable, "-m", "agentrl", "ingest", "--runs-dir", str(runs_dir)],
                            cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    skip_lines = [line for line in result.stderr.splitlines() if str(garbage) in line]
    assert len(skip_lines) == 1, result.stderr
    assert f"ingested {good_rows} rows" in result.stdout


# --- the lock -------------------------------------------------------------------------------


def test_connect_on_a_held_database_raises_store_locked_and_cli_exits_2(runs_dir, procs):
    runs_dir.mkdir(parents=True)
    db = runs_dir / DB_FILENAME
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('ok', flush=True); "
                               "time.sleep(60)", str(db)],
        stdout=subprocess.PIPE, text=True,
    )
    procs.append(holder)
    assert holder.stdout.readline().strip() == "ok"

    # The CLI waits its default 5 s for the lock; run it while the in-process check goes on.
    cli = subprocess.Popen([sys.executable, "-m", "agentrl", "ingest", "--runs-dir", str(runs_dir)],
                           cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(cli)

    started = time.monotonic()
    with pytest.raises(StoreLockedError) as caught:
        connect(runs_dir, wait_s=0.3)
    assert time.monotonic() - started < 10
    message = str(caught.value)
    assert str(db) in message and "another process" in message
    assert "\n" not in message

    out, err = cli.communicate(timeout=60)
    assert cli.returncode == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert str(db) in lines[0]

    holder.kill()
    holder.wait(timeout=10)
    connect(runs_dir, wait_s=5).close()  # free again once the holder is gone


# --- a run killed with SIGKILL --------------------------------------------------------------


def test_sigkilled_run_leaves_no_torn_chunk_and_every_flushed_row_is_ingested_once(runs_dir, procs):
    proc = start_train(runs_dir, step_delay=0.3, procs=procs)
    run = the_run(runs_dir)

    def flushed_steps() -> int:
        total = 0
        for path in chunk_files(run.root, "steps"):
            total += pq.read_table(path).num_rows
        return total

    assert wait_for(lambda: flushed_steps() >= 3, timeout=60), proc.stderr.read() if proc.poll() is not None else ""
    assert proc.poll() is None, "the run ended before it could be killed; raise --step-delay"
    os.kill(run.status()["pid"], signal.SIGKILL)  # the worker, the process that writes the chunks
    assert proc.wait(timeout=30) == 3  # `train` reports the run failed

    # Nothing torn: every committed file is whole; what a flush cut short left has no commit.
    expected = {table: sum(pq.read_table(p).num_rows for p in chunk_files(run.root, table)) for table in CHUNK_TABLES}
    assert expected["steps"] >= 3

    # The run could not write a terminal status; its supervisor wrote one with the signal.
    assert run.status()["status"] == "failed" and "SIGKILL" in run.status()["error"]
    assert Launcher(runs_dir).reconcile() == []

    con = connect(runs_dir)
    try:
        report = Ingestor(con, runs_dir).ingest()
        assert report.skipped == []
        assert table_counts(con) == expected
        steps = [r[0] for r in con.execute("SELECT step FROM steps ORDER BY step").fetchall()]
        assert steps == list(range(1, len(steps) + 1))
        per_step = dict(con.execute("SELECT step, count(*) FROM trajectories GROUP BY step").fetchall())
        for step in steps:
            assert per_step.get(step) == GROUP_ROWS, (step, per_step)
        assert queries.get_run(con, run.run_id)["status"] == "failed"

        again = Ingestor(con, runs_dir).ingest()
        assert (again.files, again.rows) == (0, 0)
        assert table_counts(con) == expected
    finally:
        con.close()


# --- reading while a run writes -------------------------------------------------------------


def test_reader_never_errors_while_a_run_writes(runs_dir, procs):
    runs_dir.mkdir(parents=True)
    con = connect(runs_dir)  # held throughout, as the dashboard holds it
    try:
        proc = start_train(runs_dir, step_delay=0.05, procs=procs)
        ingestor = Ingestor(con, runs_dir)
        run = the_run(runs_dir)
        seen_steps: list[int] = []
        ticks = rows_while_running = 0
        deadline = time.monotonic() + 120
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the run did not finish within 120 s"
            report = ingestor.ingest()
            assert report.skipped == []
            rows_while_running += report.rows
            metrics = queries.step_metrics(con, run.run_id)
            queries.reward_components_per_step(con, run.run_id)
            queries.action_distribution(con, run.run_id, "known_high")
            runs = queries.list_runs(con)
            queries.progress(con, run.run_id)
            steps = len(metrics)
            assert list(metrics["step"]) == list(range(1, steps + 1))
            if steps:
                assert int(runs.loc[runs.run_id == run.run_id, "steps_done"].iloc[0]) == steps
                # A visible step has all of its trajectories with it.
                per_step = dict(con.execute("SELECT step, count(*) FROM trajectories WHERE run_id = ? GROUP BY step",
                                            [run.run_id]).fetchall())
                assert all(per_step.get(s) == GROUP_ROWS for s in metrics["step"]), per_step
            seen_steps.append(steps)
            ticks += 1
            time.sleep(0.05)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        # The run could not take the lock at its end; it says so instead of failing.
        assert "the store is open elsewhere" in out

        assert seen_steps == sorted(seen_steps), seen_steps
        assert ticks >= 3
        total = run.meta()["total_steps"]
        # The reader took chunks while the run was still alive, so the two really overlapped.
        # (Whether it also saw a step count part-way depends on the machine's load: the first
        # flush can take a second there, so that is not asserted.)
        assert rows_while_running > 0
        final = ingestor.ingest()
        assert final.skipped == []
        assert len(queries.step_metrics(con, run.run_id)) == total
        assert table_counts(con) == chunk_row_counts(run.root)
        record = queries.get_run(con, run.run_id)
        assert record["status"] == "succeeded"
        assert record["ended_at"] is not None and record["error"] is None
        assert ingestor.ingest().files == 0
    finally:
        con.close()


def test_a_finished_run_ingests_itself_when_the_store_is_free(runs_dir, procs):
    proc = start_train(runs_dir, step_delay=0.0, procs=procs)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    run = the_run(runs_dir)
    con = connect(runs_dir)
    try:
        assert table_counts(con) == chunk_row_counts(run.root)
        assert queries.get_run(con, run.run_id)["status"] == "succeeded"
        assert Ingestor(con, runs_dir).ingest().files == 0
    finally:
        con.close()


def test_a_backlog_goes_in_as_transactions_of_bounded_rows_and_every_run_of_a_tick_in_one(runs_dir, con, monkeypatch):
    import agentrl.store.ingest as ingest

    for k in range(3):
        make_run(runs_dir, run_id=f"20260101-00000{k}-test-0000", steps=6, status="running")
    ingestor = Ingestor(con, runs_dir)
    monkeypatch.setattr(ingest, "MAX_ROWS_PER_TRANSACTION", 12)  # two commits of 6 rows each
    report = ingestor.ingest()
    assert report.files == 18 and report.skipped == []
    assert len(ingestor.transaction_seconds) == 9  # 18 commits, two a transaction, across the three runs
    assert table_counts(con)["trajectories"] == 3 * 6 * 4
    monkeypatch.setattr(ingest, "MAX_ROWS_PER_TRANSACTION", 200_000)
    for k in range(3):  # one new commit in each of three runs: one transaction for the tick
        writer = ChunkWriter(runs_dir / f"20260101-00000{k}-test-0000", interval=3600)
        writer.append("steps", {"run_id": f"20260101-00000{k}-test-0000", "step": 7, "ts": utc_now()})
        writer.close()
    before = len(ingestor.transaction_seconds)
    assert ingestor.ingest().files == 3
    assert len(ingestor.transaction_seconds) == before + 1
