"""Tests of agentrl/record/rows.py: the typed, versioned record of a run.

Each table's Arrow schema is derived from its record type, a row that the store could not hold
is refused when it is made (in the caller, naming the field), and a step's rates come from its
trajectory rows in one place.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from agentrl.record.rows import (
    CHUNK_TABLES,
    RECORD_SCHEMA_VERSION,
    RECORD_TYPES,
    TABLE_SCHEMAS,
    HardwareRecord,
    RecordError,
    StepRecord,
    TrajectoryRecord,
    as_record,
    finite,
)
from agentrl.paths import SCHEMAS_DIR


def traj(i: int, **fields) -> TrajectoryRecord:
    return TrajectoryRecord(**{"step": 1, "traj_idx": i, "task_id": "t", "reward": 1.0, **fields})


def test_every_table_schema_has_the_run_id_then_the_record_fields():
    for table, record_type in RECORD_TYPES.items():
        names = TABLE_SCHEMAS[table].names
        assert names == ["run_id"] + [f.name for f in dataclasses.fields(record_type)], table


def test_every_chunk_table_and_column_exists_in_the_store_ddl():
    ddl = (SCHEMAS_DIR / "store.sql").read_text()
    for table in CHUNK_TABLES:
        assert f"CREATE TABLE IF NOT EXISTS {table} (" in ddl, table
        block = ddl.split(f"CREATE TABLE IF NOT EXISTS {table} (")[1].split(");")[0]
        for name in TABLE_SCHEMAS[table].names:
            assert name in block, f"{table}.{name} is in the record but not in schemas/store.sql"


def test_byte_counts_are_int64_and_other_ints_int32():
    assert TABLE_SCHEMAS["hardware"].field("rss_bytes").type == pa.int64()
    assert TABLE_SCHEMAS["budgets"].field("bytes").type == pa.int64()
    assert TABLE_SCHEMAS["trajectories"].field("amount").type == pa.int32()
    assert TABLE_SCHEMAS["steps"].field("metrics").type == pa.map_(pa.string(), pa.float64())


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"step": True}, "trajectories.step must be an int"),
        ({"amount": 3_000_000_000}, "trajectories.amount must be an int between -2147483648 and 2147483647"),
        ({"reward": "high"}, "trajectories.reward must be a number"),
        ({"components": {"outcome": "1"}}, "trajectories.components must be a dict"),
        ({"actions": "lookup"}, "trajectories.actions must be a list"),
        ({"task_id": None}, "trajectories.task_id must be given"),
        ({"success": 1}, "trajectories.success must be a bool"),
    ],
)
def test_a_row_the_store_cannot_hold_is_refused_when_made(fields, message):
    with pytest.raises(RecordError, match=message):
        traj(0, **fields)


def test_large_byte_counts_fit():
    HardwareRecord(ts=pa.scalar(0, pa.timestamp("us")).as_py(), step=0, rss_bytes=2**40)
    with pytest.raises(RecordError, match="rss_bytes"):
        HardwareRecord(ts=pa.scalar(0, pa.timestamp("us")).as_py(), step=0, rss_bytes=2**64)


def test_a_step_takes_its_rates_from_its_trajectories():
    rows = [traj(0, success=True, reward=1.0, actions=["a", "b"]), traj(1, violation=True, vetoed=True, reward=-1.0, actions=["a"]),
            traj(2, success=True, duplicate_effect=True, reward=0.5), traj(3, reward=0.0)]
    step = StepRecord.from_trajectories(7, rows, updates=9)
    assert (step.step, step.success_rate, step.violation_rate, step.duplicate_rate) == (7, 0.5, 0.25, 0.25)
    assert step.mean_reward == pytest.approx(0.125)
    assert (step.vetoed, step.transitions, step.updates) == (1, 3, 9)


def test_a_step_without_trajectories_has_zero_rates():
    step = StepRecord.from_trajectories(1, [])
    assert (step.success_rate, step.mean_reward, step.vetoed) == (0.0, 0.0, 0)


def test_dict_rows_become_records_and_unknown_fields_are_named():
    record = as_record("trajectories", {"run_id": "ignored", "step": 1, "traj_idx": 0, "task_id": "t", "reward": 0.0})
    assert isinstance(record, TrajectoryRecord)
    with pytest.raises(RecordError, match="unknown field\\(s\\) 'rewrd' \\(did you mean 'reward'\\?\\)"):
        as_record("trajectories", {"step": 1, "traj_idx": 0, "task_id": "t", "rewrd": 0.0})
    with pytest.raises(RecordError, match="must be TrajectoryRecord or dict"):
        as_record("trajectories", [1, 2])


def test_finite_keeps_numbers_and_drops_nan_and_text():
    assert finite({"kl": 0.5, "n": 3, "nan": float("nan"), "inf": float("inf"), "text": "x", "flag": True}) == {"kl": 0.5, "n": 3.0}


def test_the_record_version_is_written_into_every_new_run(tmp_path):
    from agentrl.record.rundir import new_run

    run = new_run(tmp_path / "runs", "v", "tabular", "outcome", {})
    assert run.meta()["record_schema_version"] == RECORD_SCHEMA_VERSION


def test_numpy_scalars_and_0d_arrays_become_plain_values_and_an_int_is_not_a_bool():
    import numpy as np

    row = traj(0, reward=np.float32(0.5), success=np.bool_(True), amount=np.int64(80), advantages=[np.float64(1.0)])
    assert (row.reward, row.success, row.amount, row.advantages) == (0.5, True, 80, [1.0])
    assert (type(row.reward), type(row.success), type(row.amount)) == (float, bool, int)
    assert traj(1, reward=np.array(2.0)).reward == 2.0
    with pytest.raises(RecordError, match="trajectories.success must be a bool, not 1"):
        traj(2, success=1)


def test_a_dict_row_normalizes_to_its_values_in_field_order_with_defaults():
    from agentrl.record.rows import FIELD_NAMES, normalize

    values = normalize("trajectories", {"traj_idx": 0, "task_id": "t", "reward": 1}, step=4)
    row = dict(zip(FIELD_NAMES["trajectories"], values))
    assert (row["step"], row["reward"], row["eligible"], row["actions"], row["extras"]) == (4, 1, True, [], None)
    with pytest.raises(RecordError, match="a row of step 3 was logged as step 4"):
        normalize("trajectories", {"step": 3, "traj_idx": 0, "task_id": "t", "reward": 1.0}, step=4)


def test_a_chunk_written_before_a_column_existed_is_read_with_nulls_in_it():
    from agentrl.record.rows import conform, to_arrow

    current = to_arrow("trajectories", [traj(0)], run_id="r")
    older = current.drop_columns(["extras", "verifier_reason"])
    read = conform("trajectories", older)
    assert read.schema.equals(TABLE_SCHEMAS["trajectories"])
    assert read.column("extras").to_pylist() == [None]
    with pytest.raises(ValueError, match=r"missing columns \['reward'\]"):
        conform("trajectories", current.drop_columns(["reward"]))
