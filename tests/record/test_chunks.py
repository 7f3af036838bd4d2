"""Tests of agentrl/record/chunks.py: the chunk protocol.

A run hands rows to the store only through commits, so these pin what readers rely on: a writer
flushes on its own about once a second, a commit is visible whole or not at all (every table of
a flush, or none), a resumed writer never reuses a number, the caller never writes to disk, and
rows a failed flush could not write are kept for the next one.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import wait_for
from agentrl.record.chunks import CHUNKS_DIR, FLUSH_ROWS, ChunkWriter, FlushError, chunk_files, list_commits, sweep_uncommitted
from agentrl.record.rows import CHUNK_TABLES, TABLE_SCHEMAS, ActionProbRecord, EvalRecord, StepRecord, TrajectoryRecord, to_arrow
from agentrl.record.rundir import utc_now


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    path = tmp_path / "runs" / "20260101-000000-test-0000"
    path.mkdir(parents=True)
    return path


def step_row(step: int) -> StepRecord:
    return StepRecord(step=step, ts=utc_now(), elapsed_s=0.0, success_rate=0.5, clipped_by_epoch=[0, 1], metrics={"kl": 0.1})


def trajectory_row(step: int, i: int) -> TrajectoryRecord:
    return TrajectoryRecord(step=step, traj_idx=i, task_id=f"t{i % 4}", states=["start", "known_high"],
                            actions=["lookup", "refund"], reward=1.0, components={"outcome": 1.0, "penalty": 0.0},
                            success=True)


def test_writer_flushes_about_every_second_without_being_asked(run_dir):
    writer = ChunkWriter(run_dir)
    try:
        writer.append("steps", step_row(1))
        # The interval is 1 s; allow a loaded machine plenty of slack, but never call flush().
        files = wait_for(lambda: chunk_files(run_dir, "steps"), timeout=10.0)
        assert files, "no commit appeared although the writer flushes every second"
        assert pq.read_table(files[0]).num_rows == 1
        writer.append("steps", step_row(2))
        assert wait_for(lambda: len(chunk_files(run_dir, "steps")) == 2, timeout=10.0)
    finally:
        writer.close()


def test_flush_soon_writes_without_waiting_for_the_interval(run_dir):
    writer = ChunkWriter(run_dir, interval=3600)
    try:
        writer.append("steps", step_row(1))
        writer.flush_soon()
        assert wait_for(lambda: chunk_files(run_dir, "steps"), timeout=10.0)
    finally:
        writer.close()


def test_close_flushes_what_is_left(run_dir):
    writer = ChunkWriter(run_dir, interval=3600)
    writer.append("trajectories", [trajectory_row(1, i) for i in range(3)])
    assert chunk_files(run_dir, "trajectories") == []
    writer.close()
    (path,) = chunk_files(run_dir, "trajectories")
    assert pq.read_table(path).num_rows == 3
    assert pq.read_table(path).column("run_id").to_pylist() == [run_dir.name] * 3


def test_one_flush_is_one_commit_of_every_table_it_holds(run_dir):
    writer = ChunkWriter(run_dir, interval=3600)
    writer.append("trajectories", [trajectory_row(1, i) for i in range(4)])
    writer.append("action_probs", ActionProbRecord(1, "s", "a", 1.0))
    writer.append("evals", EvalRecord(1, "held_out", "t", ["a"], True, False))
    writer.append("steps", step_row(1))
    marker = writer.flush()
    writer.close()
    (commit,) = list_commits(run_dir)
    assert commit.marker == marker
    assert sorted(commit.files) == ["action_probs", "evals", "steps", "trajectories"]


def test_table_files_without_their_commit_marker_are_invisible_and_swept(run_dir):
    """A run killed after writing a flush's table files but before its marker leaves rows no reader may see."""
    writer = ChunkWriter(run_dir, interval=3600)
    writer.append("steps", step_row(1))
    writer.flush()
    writer.close()
    folder = run_dir / CHUNKS_DIR
    # What a kill mid-flush leaves: the table files of flush 1, a temporary file, no marker.
    pq.write_table(to_arrow("trajectories", [trajectory_row(2, 0)], run_id="r"), folder / "00000001.trajectories.parquet")
    pq.write_table(to_arrow("steps", [step_row(2)], run_id="r"), folder / "00000001.steps.parquet")
    (folder / ".00000001.commit.tmp").write_text("{")
    assert [c.number for c in list_commits(run_dir)] == [0]
    assert len(chunk_files(run_dir, "steps")) == 1 and chunk_files(run_dir, "trajectories") == []
    removed = sweep_uncommitted(run_dir)
    assert sorted(p.name for p in removed) == [".00000001.commit.tmp", "00000001.steps.parquet", "00000001.trajectories.parquet"]
    assert sorted(p.name for p in folder.iterdir()) == ["00000000.commit", "00000000.steps.parquet"]


def test_commits_appear_only_whole_while_a_writer_flushes(run_dir):
    """A reader listing commits while a writer flushes in a loop can read every file of every commit it sees."""
    writer = ChunkWriter(run_dir, interval=3600)
    done = threading.Event()
    writer_errors: list[BaseException] = []

    def write_loop():
        try:
            for step in range(1, 101):
                # Big enough that a write takes measurable time, so a torn file would be seen.
                writer.append("trajectories", [trajectory_row(step, i) for i in range(200)])
                writer.append("steps", step_row(step))
                writer.flush()
        except BaseException as error:  # reported by the test thread
            writer_errors.append(error)
        finally:
            done.set()

    thread = threading.Thread(target=write_loop)
    thread.start()
    seen: set[int] = set()
    try:
        while not done.is_set() or not seen:
            for commit in list_commits(run_dir):
                if commit.number in seen:
                    continue
                assert sorted(commit.files) == ["steps", "trajectories"]
                for table, path in commit.files.items():
                    data = pq.read_table(path)  # raises on a torn file
                    assert data.schema.equals(TABLE_SCHEMAS[table])
                seen.add(commit.number)
    finally:
        thread.join(timeout=120)
        writer.close()
    assert not writer_errors, writer_errors
    assert [c.number for c in list_commits(run_dir)] == list(range(100))


def test_resumed_writer_never_reuses_a_commit_number(run_dir):
    first = ChunkWriter(run_dir, interval=3600)
    for step in range(1, 4):
        first.append("steps", step_row(step))
        first.flush()
    first.close()
    before = {p.name: p.read_bytes() for p in (run_dir / CHUNKS_DIR).iterdir()}
    second = ChunkWriter(run_dir, interval=3600)
    second.append("steps", step_row(4))
    second.close()
    assert [c.number for c in list_commits(run_dir)] == [0, 1, 2, 3]
    for name, content in before.items():
        assert (run_dir / CHUNKS_DIR / name).read_bytes() == content, f"{name} was overwritten"


def test_commit_numbers_keep_their_order_past_eight_digits(run_dir):
    folder = run_dir / CHUNKS_DIR
    folder.mkdir()
    for number in (99_999_999, 100_000_000):
        name = f"{number:08d}"
        pq.write_table(to_arrow("steps", [step_row(1)], run_id="r"), folder / f"{name}.steps.parquet")
        (folder / f"{name}.commit").write_text('{"tables": {"steps": 1}}')
    writer = ChunkWriter(run_dir, interval=3600)
    writer.append("steps", step_row(2))
    marker = writer.flush()
    writer.close()
    assert marker.name == "100000001.commit"
    assert [c.number for c in list_commits(run_dir)] == [99_999_999, 100_000_000, 100_000_001]


def test_a_large_buffer_is_flushed_by_the_flusher_not_the_caller(run_dir):
    writer = ChunkWriter(run_dir, interval=3600)
    try:
        writer.append("action_probs", [ActionProbRecord(1, "s", "a", 0.5)] * FLUSH_ROWS)
        # The caller returned without writing; the flusher writes it promptly.
        (path,) = wait_for(lambda: chunk_files(run_dir, "action_probs"), timeout=10.0)
        assert pq.read_table(path).num_rows == FLUSH_ROWS
    finally:
        writer.close()


def test_flush_latencies_are_recorded_per_commit(run_dir):
    writer = ChunkWriter(run_dir, interval=3600)
    writer.append("steps", step_row(1))
    writer.append("trajectories", trajectory_row(1, 0))
    writer.close()
    assert len(writer.flush_latencies_s) == 1
    assert all(0 <= s < 60 for s in writer.flush_latencies_s)


def test_a_failing_flusher_surfaces_on_the_next_append(run_dir):
    def broken_sampler():
        raise OSError("disk on fire")

    writer = ChunkWriter(run_dir, interval=0.05, on_flush=broken_sampler)

    def append_fails() -> str | None:
        try:
            writer.append("steps", step_row(1))
        except FlushError as error:
            return str(error)
        return None

    assert "disk on fire" in (wait_for(append_fails, timeout=10.0) or "")
    with pytest.raises(FlushError, match="disk on fire"):
        writer.close()


def test_rows_a_failed_flush_could_not_write_are_kept_for_the_next(run_dir, monkeypatch):
    import agentrl.record.chunks as chunks

    writer = ChunkWriter(run_dir, interval=3600)
    writer.append("steps", step_row(1))
    real = chunks._write_atomic
    monkeypatch.setattr(chunks, "_write_atomic", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with pytest.raises(OSError, match="No space left"):
        writer.flush()
    monkeypatch.setattr(chunks, "_write_atomic", real)
    writer.append("steps", step_row(2))
    writer.close()
    (path,) = chunk_files(run_dir, "steps")
    assert pq.read_table(path).column("step").to_pylist() == [1, 2]


def test_empty_buffers_write_no_commit(run_dir):
    writer = ChunkWriter(run_dir, interval=3600)
    assert writer.flush() is None
    writer.close()
    assert list_commits(run_dir) == []
    for table in CHUNK_TABLES:
        assert chunk_files(run_dir, table) == []


@pytest.mark.parametrize("table", CHUNK_TABLES)
def test_to_arrow_fills_missing_optional_columns_with_nulls(table):
    schema = TABLE_SCHEMAS[table]
    data = to_arrow(table, [{"run_id": "r"}, {"run_id": "r2"}])
    assert data.schema.equals(schema)
    assert data.column("run_id").to_pylist() == ["r", "r2"]
    for name in schema.names:
        if name != "run_id":
            assert data.column(name).null_count == 2, name


def test_to_arrow_keeps_given_values_and_maps():
    rows = [trajectory_row(3, 0), {"run_id": "r", "step": 3, "traj_idx": 1, "task_id": "t1"}]
    data = to_arrow("trajectories", rows, run_id="r")
    assert data.column("components").to_pylist()[0] == [("outcome", 1.0), ("penalty", 0.0)]
    assert data.column("components").to_pylist()[1] is None
    assert data.column("actions").to_pylist() == [["lookup", "refund"], None]
    assert data.column("prompt").null_count == 2
    assert data.column("step").type == pa.int32()


def test_a_flush_between_a_steps_rows_and_its_step_row_holds_that_step_back(run_dir):
    """Issue 12, finding 4: a timed flush that fell between `log_trajectories` and `log_step` made
    a step's trajectories visible without its steps row (96-128 orphan rows in 3 of 26 kills)."""
    with ChunkWriter(run_dir, interval=3600, hold_steps=True) as writer:
        writer.append("action_probs", [ActionProbRecord(0, "known_high", "refund", 0.1)])  # the starting policy
        writer.append("trajectories", [trajectory_row(1, i) for i in range(3)])
        writer.append("action_probs", [ActionProbRecord(1, "known_high", "refund", 0.2)])
        writer.flush()  # the flusher's timer fires here, before the step is logged
        (first,) = list_commits(run_dir)
        assert set(first.files) == {"action_probs"}
        assert pq.read_table(first.files["action_probs"]).column("step").to_pylist() == [0]

        writer.append("steps", [step_row(1)])
        writer.append("trajectories", [trajectory_row(2, 0)])  # the next step has begun
        writer.flush()
        second = list_commits(run_dir)[1]
        assert set(second.files) == {"steps", "trajectories", "action_probs"}
        assert pq.read_table(second.files["trajectories"]).column("step").to_pylist() == [1, 1, 1]
    # Closing writes what is left, step row or not: nothing is lost.
    last = list_commits(run_dir)[-1]
    assert pq.read_table(last.files["trajectories"]).column("step").to_pylist() == [2]


def test_without_hold_steps_every_buffered_row_is_flushed(run_dir):
    with ChunkWriter(run_dir, interval=3600) as writer:
        writer.append("trajectories", [trajectory_row(1, 0)])
        writer.flush()
        assert "trajectories" in list_commits(run_dir)[0].files
