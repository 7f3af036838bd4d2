"""Tests of agentrl/export.py: a run's tables out of a real store file, and back in unchanged.

The store is made with `agentrl.store.connect` and a few rows of two runs; an export must carry
exactly one run's rows, keep list and map columns (typed in Parquet, JSON text in CSV), and fail
with one line on an unknown run, an unknown format or a folder it cannot write.
"""

from __future__ import annotations

import io
import json
from datetime import datetime
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow.parquet as pq
import pytest

from agentrl.store.export import ExportError, export_run, frame_to_bytes
from agentrl.record.rows import to_arrow
from agentrl.store.ingest import connect

TS = datetime(2025, 1, 2, 3, 4, 5)


def insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict]) -> None:
    data = to_arrow(table, rows)
    con.register("new_rows", data)
    con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM new_rows")
    con.unregister("new_rows")


def add_run(con: duckdb.DuckDBPyConnection, run_id: str, trajectories: int) -> None:
    con.execute(
        "INSERT INTO runs (run_id, name, kind, scorer, status, config, created_at) VALUES (?, ?, 'tabular', 'guarded', 'succeeded', ?, ?)",
        [run_id, run_id, json.dumps({"name": run_id, "rounds": 2}), TS],
    )
    insert(con, "steps", [{"run_id": run_id, "step": 1, "ts": TS, "success_rate": 0.5, "clipped_by_epoch": [1, 0], "metrics": {"kl": 0.01}}])
    insert(
        con,
        "trajectories",
        [
            {
                "run_id": run_id,
                "step": 1,
                "traj_idx": i,
                "task_id": f"t{i}",
                "states": ["start", "verified"],
                "actions": ["verify", "refund"],
                "behavior_logps": [-0.5, -1.25],
                "reward": 1.0 - i,
                "components": {"success": 1.0, "violation": -float(i)},
                "success": i == 0,
                "prompt": 'say "hi",\nthen stop',
            }
            for i in range(trajectories)
        ],
    )
    insert(con, "budgets", [{"run_id": run_id, "component": "weights", "bytes": 3_441_149_952, "source": "estimate"}])


@pytest.fixture
def con(runs_dir: Path):
    runs_dir.mkdir(parents=True)
    connection = connect(runs_dir)
    add_run(connection, "run-a", trajectories=3)
    add_run(connection, "run-b", trajectories=2)
    yield connection
    connection.close()


def test_parquet_export_round_trips_one_runs_rows(con, tmp_path):
    files = export_run(con, "run-a", tmp_path / "out")
    assert [path.name for path in files] == ["runs.parquet", "steps.parquet", "trajectories.parquet", "budgets.parquet"]
    trajectories = pq.read_table(tmp_path / "out" / "trajectories.parquet").to_pylist()
    assert len(trajectories) == 3
    assert {row["run_id"] for row in trajectories} == {"run-a"}
    first = trajectories[0]
    assert first["actions"] == ["verify", "refund"]
    assert first["behavior_logps"] == [-0.5, -1.25]
    assert dict(first["components"]) == {"success": 1.0, "violation": -0.0}
    assert first["prompt"] == 'say "hi",\nthen stop'
    steps = pq.read_table(tmp_path / "out" / "steps.parquet").to_pylist()
    assert steps[0]["clipped_by_epoch"] == [1, 0] and dict(steps[0]["metrics"]) == {"kl": 0.01}
    assert pq.read_table(tmp_path / "out" / "budgets.parquet").to_pylist()[0]["bytes"] == 3_441_149_952


def test_csv_export_writes_lists_and_maps_as_json(con, tmp_path):
    files = export_run(con, "run-b", tmp_path / "out", fmt="csv")
    assert [path.name for path in files] == ["runs.csv", "steps.csv", "trajectories.csv", "budgets.csv"]
    trajectories = pd.read_csv(tmp_path / "out" / "trajectories.csv")
    assert len(trajectories) == 2
    assert set(trajectories["run_id"]) == {"run-b"}
    assert json.loads(trajectories["actions"][1]) == ["verify", "refund"]
    assert json.loads(trajectories["components"][1]) == {"success": 1.0, "violation": -1.0}
    assert trajectories["prompt"][0] == 'say "hi",\nthen stop'
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert json.loads(runs["config"][0]) == {"name": "run-b", "rounds": 2}


def test_export_includes_tables_added_later_with_a_run_column(con, tmp_path):
    con.execute("CREATE TABLE later_notes (run_id VARCHAR, note VARCHAR, tags VARCHAR[])")
    con.execute("INSERT INTO later_notes VALUES ('run-a', 'fine', ['a', 'b']), ('run-b', 'no', [])")
    con.execute("CREATE TABLE later_fixtures (source_run_id VARCHAR, traj_idx INTEGER)")
    con.execute("INSERT INTO later_fixtures VALUES ('run-b', 1), ('run-a', 2)")
    files = export_run(con, "run-a", tmp_path / "out")
    assert [path.name for path in files][-2:] == ["later_fixtures.parquet", "later_notes.parquet"]
    assert pq.read_table(tmp_path / "out" / "later_notes.parquet").to_pylist() == [{"run_id": "run-a", "note": "fine", "tags": ["a", "b"]}]
    assert pq.read_table(tmp_path / "out" / "later_fixtures.parquet").to_pylist() == [{"source_run_id": "run-a", "traj_idx": 2}]


def test_store_bookkeeping_is_not_exported(con, tmp_path):
    con.execute("INSERT INTO ingested_files VALUES ('run-a/steps/part-00000.parquet', 'steps', 'run-a', 1, ?)", [TS])
    files = export_run(con, "run-a", tmp_path / "out")
    assert "ingested_files.parquet" not in [path.name for path in files]


def test_export_overwrites_an_earlier_export_and_leaves_no_partial_files(con, tmp_path):
    export_run(con, "run-a", tmp_path / "out")
    export_run(con, "run-a", tmp_path / "out")
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["budgets.parquet", "runs.parquet", "steps.parquet", "trajectories.parquet"]


def test_unknown_run_id_is_an_export_error(con, tmp_path):
    with pytest.raises(ExportError, match="unknown run id \"run-x' OR 1=1 --\""):
        export_run(con, "run-x' OR 1=1 --", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_unknown_format_is_an_export_error(con, tmp_path):
    with pytest.raises(ExportError, match="unknown export format 'xlsx'"):
        export_run(con, "run-a", tmp_path / "out", fmt="xlsx")
    with pytest.raises(ExportError, match="unknown export format"):
        frame_to_bytes(pd.DataFrame({"a": [1]}), "json")


def test_unwritable_out_dir_is_an_export_error(con, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(ExportError, match="cannot create export folder"):
        export_run(con, "run-a", blocker / "out")


def test_export_leaves_the_callers_connection_usable(con, tmp_path):
    export_run(con, "run-a", tmp_path / "out")
    con.execute("INSERT INTO budgets VALUES ('run-a', 'free', 1, 'estimate')")
    assert con.execute("SELECT count(*) FROM budgets WHERE run_id = ?", ["run-a"]).fetchone()[0] == 2


def test_frame_to_bytes_round_trips_a_queried_frame(con):
    df = con.execute("SELECT traj_idx, actions, components, prompt FROM trajectories WHERE run_id = ? ORDER BY traj_idx", ["run-a"]).df()
    from_parquet = pd.read_parquet(io.BytesIO(frame_to_bytes(df, "parquet")))
    assert len(from_parquet) == 3
    assert list(from_parquet["actions"][0]) == ["verify", "refund"]
    from_csv = pd.read_csv(io.BytesIO(frame_to_bytes(df, "csv")))
    assert list(from_csv["traj_idx"]) == [0, 1, 2]
    assert json.loads(from_csv["actions"][2]) == ["verify", "refund"]
    assert json.loads(from_csv["components"][2]) == {"success": 1.0, "violation": -2.0}
    assert from_csv["prompt"][0] == 'say "hi",\nthen stop'


def test_frame_to_bytes_falls_back_to_json_text_for_mixed_cells():
    df = pd.DataFrame({"mixed": [[1, 2], {"a": 1}, "plain"]})
    from_parquet = pd.read_parquet(io.BytesIO(frame_to_bytes(df, "parquet")))
    assert list(from_parquet["mixed"]) == ["[1, 2]", '{"a": 1}', "plain"]


def test_file_that_cannot_be_written_is_an_export_error(con, tmp_path):
    (tmp_path / "out" / "steps.parquet").mkdir(parents=True)  # a folder where the file should go
    with pytest.raises(ExportError, match="cannot write .*steps.parquet"):
        export_run(con, "run-a", tmp_path / "out")
    assert not [path for path in (tmp_path / "out").iterdir() if ".partial-" in path.name]
