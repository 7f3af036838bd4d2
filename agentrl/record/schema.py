"""Typed records a run emits: the Arrow schema of every chunk table (RECORD_SCHEMA_VERSION).

Sits between the run process and the store: `chunks.ChunkWriter` validates rows against these
schemas when it flushes, ingest inserts them BY NAME into the tables of `schemas/store.sql`, so
a column added here and there is the whole migration.
"""

from __future__ import annotations

import pyarrow as pa

RECORD_SCHEMA_VERSION = 1

_ts = pa.timestamp("us")  # naive UTC
_components = pa.map_(pa.string(), pa.float64())

TABLE_SCHEMAS: dict[str, pa.Schema] = {
    "steps": pa.schema(
        [
            ("run_id", pa.string()),
            ("step", pa.int32()),
            ("ts", _ts),
            ("elapsed_s", pa.float64()),
            ("success_rate", pa.float64()),
            ("violation_rate", pa.float64()),
            ("duplicate_rate", pa.float64()),
            ("mean_reward", pa.float64()),
            ("vetoed", pa.int32()),
            ("vetoed_updates", pa.int32()),
            ("updates", pa.int32()),
            ("clipped", pa.int32()),
            ("clipped_by_epoch", pa.list_(pa.int32())),
            ("transitions", pa.int32()),
            ("metrics", _components),
        ]
    ),
    "trajectories": pa.schema(
        [
            ("run_id", pa.string()),
            ("step", pa.int32()),
            ("traj_idx", pa.int32()),
            ("task_id", pa.string()),
            ("amount", pa.int32()),
            ("states", pa.list_(pa.string())),
            ("actions", pa.list_(pa.string())),
            ("behavior_logps", pa.list_(pa.float64())),
            ("advantages", pa.list_(pa.float64())),
            ("reward", pa.float64()),
            ("components", _components),
            ("success", pa.bool_()),
            ("violation", pa.bool_()),
            ("duplicate_effect", pa.bool_()),
            ("eligible", pa.bool_()),
            ("vetoed", pa.bool_()),
            ("updated", pa.bool_()),
            ("prompt", pa.string()),
            ("completion", pa.string()),
            ("verifier_reason", pa.string()),
        ]
    ),
    "action_probs": pa.schema(
        [
            ("run_id", pa.string()),
            ("step", pa.int32()),
            ("state", pa.string()),
            ("action", pa.string()),
            ("prob", pa.float64()),
        ]
    ),
    "evals": pa.schema(
        [
            ("run_id", pa.string()),
            ("step", pa.int32()),
            ("split", pa.string()),
            ("task_id", pa.string()),
            ("actions", pa.list_(pa.string())),
            ("success", pa.bool_()),
            ("violation", pa.bool_()),
        ]
    ),
    # The imitation ladder (SPEC section 5): the cloned policy's table over every state, and
    # after a DAgger round the refitted table and the labels it added.
    "imitation_policy": pa.schema(
        [
            ("run_id", pa.string()),
            ("stage", pa.string()),
            ("state", pa.string()),
            ("action", pa.string()),
            ("prob", pa.float64()),
        ]
    ),
    "imitation_labels": pa.schema(
        [
            ("run_id", pa.string()),
            ("stage", pa.string()),
            ("idx", pa.int32()),
            ("state", pa.string()),
            ("action", pa.string()),
        ]
    ),
    "hardware": pa.schema(
        [
            ("run_id", pa.string()),
            ("ts", _ts),
            ("step", pa.int32()),
            ("rss_bytes", pa.int64()),
            ("cpu_percent", pa.float64()),
            ("gpu_allocated_bytes", pa.int64()),
            ("gpu_reserved_bytes", pa.int64()),
            ("gpu_total_bytes", pa.int64()),
            ("sys_available_bytes", pa.int64()),
        ]
    ),
    "budgets": pa.schema(
        [
            ("run_id", pa.string()),
            ("component", pa.string()),
            ("bytes", pa.int64()),
            ("source", pa.string()),
        ]
    ),
}

CHUNK_TABLES: tuple[str, ...] = tuple(TABLE_SCHEMAS)


def to_arrow(table: str, rows: list[dict]) -> pa.Table:
    """Rows (dicts) to an Arrow table of `table`'s schema; a missing column becomes null.

    Maps are passed as dicts and become lists of (key, value) pairs, which is Arrow's map form.
    """
    schema = TABLE_SCHEMAS[table]
    columns = {}
    for field in schema:
        values = [row.get(field.name) for row in rows]
        if pa.types.is_map(field.type):
            values = [None if v is None else list(v.items()) for v in values]
        columns[field.name] = pa.array(values, type=field.type)
    return pa.table(columns, schema=schema)
