"""Tests of agentrl/chunks.py and the Arrow side of agentrl/records.py: the chunk protocol.

A run hands rows to the store only through chunk files, so these pin what readers rely on: a
writer flushes on its own about once a second, a chunk is visible whole or not at all, a
resumed writer never overwrites a chunk, and the steps chunk of a flush lands after the rows
it summarises.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import wait_for
from agentrl.record.chunks import CHUNK_GLOB, FLUSH_ROWS, ChunkWriter, chunk_files
from agentrl.record.schema import CHUNK_TABLES, TABLE_SCHEMAS, to_arrow
from agentrl.record.rundir import utc_now


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    path = tmp_path / "runs" / "20260101-000000-test-0000"
    path.mkdir(parents=True)
    return path



def step_row(step: int, run_id: str = "r") -> dict:
    return {"run_id": run_id, "step": step, "ts": utc_now(), "success_rate": 0.5, "clipped_by_epoch": [0, 1],
            "metrics": {"kl": 0.1}}


def trajectory_row(step: int, i: int, run_id: str = "r") -> dict:
    return {"run_id": run_id, "step": step, "traj_idx": i, "task_id": f"t{i % 4}", "states": ["start", "known_high"],
            "actions": ["lookup", "refund"], "reward": 1.0, "components": {"outcome": 1.0, "penalty": 0.0},
            "success": True}


def test_writer_flushes_about_every_second_without_being_asked(run_dir):
    writer = ChunkWriter(run_dir)
    try:
        writer.append("steps", step_row(1))
        started = time.monotonic()
        # The interval is 1 s; allow a loaded machine plenty of slack, but never call flush().
        files = wait_for(lambda: chunk_files(run_dir, "steps"), timeout=5.0)
        assert files, "no chunk appeared within 5 s although the writer flushes every second"
        assert time.monotonic() - started < 5.0
        assert pq.read_table(files[0]).num_rows == 1
        writer.append("steps", step_row(2))
        assert wait_for(lambda: len(chunk_files(run_dir, "steps")) == 2, timeout=5.0)
    finally:
        writer.close()


def test_close_flushes_what_is_left(run_dir):
    writer = ChunkWriter(run_dir, interval=3600)
    writer.append("trajectories", [trajectory_row(1, i) for i in range(3)])
    assert chunk_files(run_dir, "trajectories") == []
    writer.close()
    (path,) = chunk_files(run_dir, "trajectories")
    assert pq.read_table(path).num_rows == 3


def test_temporary_files_never_match_the_chunk_glob(run_dir):
    folder = run_dir / "steps"
    folder.mkdir()
    # The name a writer uses while it is still writing part 0.
    (folder / ".part-00000.parquet.tmp").write_bytes(b"PAR1 half a file")
    assert chunk_files(run_dir, "steps") == []
    assert not list(folder.glob(CHUNK_GLOB))


def test_files_appear_only_whole_while_a_writer_flushes(run_dir):
    """A reader listing chunks while a writer flushes in a loop can read every file it sees."""
    writer = ChunkWriter(run_dir, interval=3600)
    done = threading.Event()
    writer_errors: list[BaseException] = []

    def write_loop():
        try:
            for step in range(1, 151):
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
    seen: set[Path] = set()
    reads = 0
    try:
        while not done.is_set() or reads == 0:
            for table in ("trajectories", "steps"):
                for path in chunk_files(run_dir, table):
                    assert not path.name.startswith("."), path
                    if path in seen:
                        continue
                    data = pq.read_table(path)  # raises on a torn file
                    assert data.schema.equals(TABLE_SCHEMAS[table])
                    seen.add(path)
                    reads += 1
    finally:
        thread.join(timeout=60)
        writer.close()
    assert not writer_errors, writer_errors
    assert len(chunk_files(run_dir, "steps")) == 150
    assert len(chunk_files(run_dir, "trajectories")) == 150
    assert reads > 0


def test_resumed_writer_never_reuses_a_part_number(run_dir):
    first = ChunkWriter(run_dir, interval=3600)
    for step in range(1, 4):
        first.append("steps", step_row(step))
        first.flush()
    first.close()
    names_before = {p.name: p.read_bytes() for p in chunk_files(run_dir, "steps")}
    assert sorted(names_before) == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]

    second = ChunkWriter(run_dir, interval=3600)
    second.append("steps", step_row(4))
    second.append("trajectories", trajectory_row(4, 0))
    second.close()
    after = chunk_files(run_dir, "steps")
    assert [p.name for p in after][-1] == "part-00003.parquet"
    for name, content in names_before.items():
        assert (run_dir / "steps" / name).read_bytes() == content, f"{name} was overwritten"
    # Part numbers are per table: the first trajectories chunk is part 0.
    assert [p.name for p in chunk_files(run_dir, "trajectories")] == ["part-00000.parquet"]


def test_resumed_writer_continues_after_the_highest_part_past_five_digits(run_dir):
    # A long run (one flush a second for ~28 hours) passes part 99999; the name gets a sixth
    # digit and no longer sorts last as text.
    folder = run_dir / "steps"
    folder.mkdir()
    for part in (99_998, 99_999, 100_000):
        pq.write_table(to_arrow("steps", [step_row(part)]), folder / f"part-{part:05d}.parquet")
    before = (folder / "part-100000.parquet").read_bytes()
    writer = ChunkWriter(run_dir, interval=3600)
    writer.append("steps", step_row(100_001))
    (written,) = writer.flush()
    writer.close()
    assert written.name == "part-100001.parquet"
    assert (folder / "part-100000.parquet").read_bytes() == before


def test_steps_chunk_is_written_last_in_a_flush(run_dir):
    """A visible steps row implies its trajectories, probabilities and evals are visible too."""
    writer = ChunkWriter(run_dir, interval=3600)
    writer.append("trajectories", [trajectory_row(1, i) for i in range(4)])
    writer.append("action_probs", {"run_id": "r", "step": 1, "state": "s", "action": "a", "prob": 1.0})
    writer.append("evals", {"run_id": "r", "step": 1, "split": "held_out", "task_id": "t", "actions": ["a"]})
    writer.append("steps", step_row(1))
    written = writer.flush()
    writer.close()
    assert [p.parent.name for p in written][-1] == "steps"
    assert sorted(p.parent.name for p in written) == ["action_probs", "evals", "steps", "trajectories"]


def test_a_large_buffer_is_flushed_at_once(run_dir):
    writer = ChunkWriter(run_dir, interval=3600)
    try:
        writer.append("action_probs", [{"run_id": "r", "step": 1, "state": "s", "action": "a", "prob": 0.5}] * FLUSH_ROWS)
        (path,) = chunk_files(run_dir, "action_probs")
        assert pq.read_table(path).num_rows == FLUSH_ROWS
    finally:
        writer.close()


def test_flush_latencies_are_recorded_per_chunk(run_dir):
    writer = ChunkWriter(run_dir, interval=3600)
    writer.append("steps", step_row(1))
    writer.append("trajectories", trajectory_row(1, 0))
    writer.close()
    assert len(writer.flush_latencies_s) == 2
    assert all(0 <= s < 10 for s in writer.flush_latencies_s)


def test_a_failing_flusher_surfaces_on_the_next_append(run_dir):
    def broken_sampler():
        raise OSError("disk on fire")

    writer = ChunkWriter(run_dir, interval=0.05, on_flush=broken_sampler)

    def append_fails() -> str | None:
        try:
            writer.append("steps", step_row(1))
        except RuntimeError as error:
            return str(error)
        return None

    assert "disk on fire" in (wait_for(append_fails, timeout=5.0) or "")
    with pytest.raises(RuntimeError, match="disk on fire"):
        writer.close()


@pytest.mark.parametrize("table", CHUNK_TABLES)
def test_to_arrow_fills_missing_optional_columns_with_nulls(table):
    schema = TABLE_SCHEMAS[table]
    data = to_arrow(table, [{"run_id": "r"}, {"run_id": "r2"}])
    assert data.schema.equals(schema)
    assert data.num_rows == 2
    assert data.column("run_id").to_pylist() == ["r", "r2"]
    for name in schema.names:
        if name != "run_id":
            assert data.column(name).null_count == 2, name


def test_to_arrow_keeps_given_values_and_maps():
    rows = [trajectory_row(3, 0), {"run_id": "r", "step": 3, "traj_idx": 1, "task_id": "t1"}]
    data = to_arrow("trajectories", rows)
    assert data.column("components").to_pylist()[0] == [("outcome", 1.0), ("penalty", 0.0)]
    assert data.column("components").to_pylist()[1] is None
    assert data.column("actions").to_pylist() == [["lookup", "refund"], None]
    assert data.column("prompt").null_count == 2
    assert data.column("step").type == pa.int32()


def test_empty_tables_write_no_chunk(run_dir):
    writer = ChunkWriter(run_dir, interval=3600)
    assert writer.flush() == []
    writer.close()
    for table in CHUNK_TABLES:
        assert chunk_files(run_dir, table) == []
