"""The record types a run writes, one per chunk table, and their Arrow schemas (RECORD_SCHEMA_VERSION).

Run (any engine, or a user's own script through `agentrl.init`) -> **rows** -> chunks -> store.
Each table's row is a frozen dataclass whose fields are the table's columns; the Arrow schema of
the table is derived from the annotations (an `int` is int32 unless annotated `Int64`), so a
column added here, and in `schemas/store.sql`, is the whole migration (a new column must be
nullable with default None: chunks written before it are read with nulls, see `conform`). A row
checks its own types and ranges when it is made, so a value the store cannot hold fails in the
caller, at the step that produced it, never later in a flush.

The checks are compiled once per table (`agentrl.record.checks`). A typed record runs them when
it is made; a dict row is checked in two parts: its keys in the caller (`check_shape`, cheap),
its values where the writer buffers it off the caller's path (`normalize`, in the flusher), so
logging a step costs the caller microseconds; a wrong value there surfaces as the same
`RecordError` on the caller's next call. `to_arrow` turns records and normalized tuples into
Arrow.

`run_id` is not a field: the writer adds it. `StepRecord.from_trajectories` computes a step's
rates from its trajectory rows: every engine's success, violation and duplicate rates, mean
reward, veto count and transitions come from this one function.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import typing
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any

import pyarrow as pa

from agentrl.record.checks import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, RecordError, as_number, compile_checks  # noqa: F401 - re-exported

RECORD_SCHEMA_VERSION = 2
"""Version of the record format, written into every run's run.json. 1: per-table chunk folders
(read by the store, never written); 2: one commit per flush (see `agentrl.record.chunks`)."""

Int64 = Annotated[int, "int64"]


def _not_compiled(self) -> None:
    raise RuntimeError("record checks are compiled at import; this one was not")


def record(cls):
    """A frozen, slotted dataclass whose instances check their fields against the table's schema."""
    # Set before `dataclass` reads the class, so its __init__ calls it; the compiled check
    # replaces it once the table's schema is known (`agentrl.record.checks`).
    cls.__post_init__ = _not_compiled
    return dataclass(frozen=True, slots=True)(cls)


@record
class TrajectoryRecord:
    """One sampled trajectory (an episode or a completion) of a step."""

    step: int
    traj_idx: int  # position in the step's batch
    task_id: str
    reward: float
    success: bool = False
    violation: bool = False
    duplicate_effect: bool = False
    eligible: bool = True
    vetoed: bool = False
    updated: bool = False
    amount: int | None = None
    states: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    behavior_logps: list[float] | None = None  # log-probability of each action when sampled
    advantages: list[float] | None = None  # advantage of each turn
    components: dict[str, float] = field(default_factory=dict)  # every reward term by name
    prompt: str | None = None
    completion: str | None = None
    verifier_reason: str | None = None
    extras: dict[str, str] | None = None  # further columns a trainer logged per completion (TRL's log_extra), as text
    behaviour: str | None = None  # what it did (agentrl.record.behaviour); None: its tool calls, filled in at ingest


@record
class StepRecord:
    """One training step (a round of the tabular engine, an optimiser step of TRL)."""

    step: int
    success_rate: float | None = None
    violation_rate: float | None = None
    duplicate_rate: float | None = None
    mean_reward: float | None = None
    vetoed: int = 0  # vetoed rollouts
    vetoed_updates: int = 0  # audit: vetoed rollouts that got an update (must be 0)
    updates: int = 0
    clipped: int = 0
    clipped_by_epoch: list[int] = field(default_factory=list)
    transitions: int = 0
    metrics: dict[str, float] = field(default_factory=dict)  # everything else the engine logged
    ts: datetime | None = None  # set by the writer when None
    elapsed_s: float | None = None  # set by the writer when None

    @classmethod
    def from_trajectories(cls, step: int, trajectories: typing.Sequence[TrajectoryRecord], **counters: Any) -> StepRecord:
        """The step's rates from its trajectory rows (means over the batch), plus `counters`
        (updates, clipped, vetoed_updates, metrics, ...). `vetoed` and `transitions` are counted
        from the rows unless given."""
        n = len(trajectories)
        rate = (lambda flag: sum(1 for t in trajectories if getattr(t, flag)) / n) if n else (lambda flag: 0.0)
        counters.setdefault("vetoed", sum(1 for t in trajectories if t.vetoed))
        counters.setdefault("transitions", sum(len(t.actions) for t in trajectories))
        return cls(
            step=step, success_rate=rate("success"), violation_rate=rate("violation"),
            duplicate_rate=rate("duplicate_effect"),
            mean_reward=sum(t.reward for t in trajectories) / n if n else 0.0, **counters,
        )


@record
class ActionProbRecord:
    """The policy's probability of one action at one sensitive state (decision point)."""

    step: int
    state: str
    action: str
    prob: float


@record
class EvalRecord:
    """One greedy episode of an evaluation: held-out, exploit probes ('probe'), or an imitation rung."""

    step: int
    split: str
    task_id: str
    actions: list[str]
    success: bool
    violation: bool


@record
class LadderPolicyRecord:
    """A rung of the imitation ladder: the policy's probability of an action at a state."""

    stage: str
    state: str
    action: str
    prob: float


@record
class LadderLabelRecord:
    """A label a DAgger round added (the expert's action at a state the learner visited)."""

    stage: str
    idx: int
    state: str
    action: str


@record
class HardwareRecord:
    """A sample of the run's process tree (and GPU, when torch sees one)."""

    ts: datetime
    step: int
    rss_bytes: Int64 | None = None
    cpu_percent: float | None = None
    gpu_allocated_bytes: Int64 | None = None
    gpu_reserved_bytes: Int64 | None = None
    gpu_total_bytes: Int64 | None = None
    sys_available_bytes: Int64 | None = None


@record
class BudgetRecord:
    """One component of a memory budget: the estimate before the run, or what it measured."""

    component: str
    bytes: Int64
    source: str  # 'estimate' or 'measured'


@record
class EventRecord:
    """Something the run noticed about itself, such as a hacking onset (`agentrl.monitor`)."""

    step: int
    kind: str  # 'onset'
    signal: str
    value: float
    threshold: float
    message: str


RECORD_TYPES: dict[str, type] = {
    "steps": StepRecord,
    "trajectories": TrajectoryRecord,
    "action_probs": ActionProbRecord,
    "evals": EvalRecord,
    "imitation_policy": LadderPolicyRecord,
    "imitation_labels": LadderLabelRecord,
    "hardware": HardwareRecord,
    "budgets": BudgetRecord,
    "events": EventRecord,
}
TABLE_OF: dict[type, str] = {record_type: table for table, record_type in RECORD_TYPES.items()}
CHUNK_TABLES: tuple[str, ...] = tuple(RECORD_TYPES)


# --- schema and checks, derived from the annotations --------------------------------------------


def _arrow_type(annotation) -> tuple[pa.DataType, bool]:
    """(Arrow type, nullable) of a field annotation."""
    nullable = False
    if typing.get_origin(annotation) is typing.Union or type(annotation).__name__ == "UnionType":
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        nullable = True
        (annotation,) = args
    if typing.get_origin(annotation) is Annotated:
        base, *meta = typing.get_args(annotation)
        return (pa.int64() if "int64" in meta else _arrow_type(base)[0]), nullable
    if annotation is bool:
        return pa.bool_(), nullable
    if annotation is int:
        return pa.int32(), nullable
    if annotation is float:
        return pa.float64(), nullable
    if annotation is str:
        return pa.string(), nullable
    if annotation is datetime:
        return pa.timestamp("us"), nullable  # naive UTC
    origin = typing.get_origin(annotation)
    if origin is list:
        return pa.list_(_arrow_type(typing.get_args(annotation)[0])[0]), nullable
    if origin is dict:
        key, value = typing.get_args(annotation)
        return pa.map_(_arrow_type(key)[0], _arrow_type(value)[0]), nullable
    raise TypeError(f"no Arrow type for {annotation!r}")


def _schema(record_type: type) -> pa.Schema:
    hints = typing.get_type_hints(record_type, include_extras=True)
    fields = [pa.field("run_id", pa.string())]
    for f in dataclasses.fields(record_type):
        arrow_type, _ = _arrow_type(hints[f.name])
        fields.append(pa.field(f.name, arrow_type))
    return pa.schema(fields)


TABLE_SCHEMAS: dict[str, pa.Schema] = {table: _schema(record_type) for table, record_type in RECORD_TYPES.items()}


def _columns(record_type: type) -> dict[str, tuple[pa.DataType, bool]]:
    hints = typing.get_type_hints(record_type, include_extras=True)
    return {f.name: _arrow_type(hints[f.name]) for f in dataclasses.fields(record_type)}


_CHECKS = {table: compile_checks(table, record_type, _columns(record_type)) for table, record_type in RECORD_TYPES.items()}
FIELD_NAMES: dict[str, tuple[str, ...]] = {table: checks.names for table, checks in _CHECKS.items()}
REQUIRED_FIELDS: dict[str, frozenset[str]] = {table: checks.required for table, checks in _CHECKS.items()}


def normalize(table: str, row: Any, step: int | None = None) -> tuple | Any:
    """A row of `table` checked, as the writer buffers it: a record as it is, a dict as the tuple of
    its values in field order (defaults filled in). `step`, when given, fills a dict row's
    missing step and must equal a row's own. Raises RecordError naming the table, field and value."""
    record_type = RECORD_TYPES[table]
    if row.__class__ is record_type:
        if step is not None and "step" in FIELD_NAMES[table] and row.step != step:
            raise RecordError(f"{table}: a row of step {row.step!r} was logged as step {step}")
        return row
    if isinstance(row, dict):
        return _CHECKS[table].normalize(row, step)
    raise RecordError(f"{table} rows must be {record_type.__name__} or dict, not {type(row).__name__}")


def check_shape(table: str, row: Any, step: int | None = None) -> None:
    """The caller's share of a row's checks, cheap enough for every row of every step: a record of
    the table (checked when it was made), or a dict with only the table's fields and every
    required one (`step` may come from the call). Its values are checked by `normalize`, in the
    flusher. Raises RecordError naming what is wrong."""
    record_type = RECORD_TYPES[table]
    if row.__class__ is record_type:
        if step is not None and getattr(row, "step", step) != step:
            raise RecordError(f"{table}: a row of step {row.step!r} was logged as step {step}")
        return
    if not isinstance(row, dict):
        raise RecordError(f"{table} rows must be {record_type.__name__} or dict, not {type(row).__name__}")
    checks = _CHECKS[table]
    keys = row.keys()
    if not keys <= checks.allowed:
        checks.fail(row)
    if not checks.required <= keys:
        for name in sorted(checks.required - keys):
            if not (name == "step" and step is not None):
                checks.fail(row, name)


def as_record(table: str, row: Any):
    """A row of `table` from a record or a plain dict of its fields (unknown keys are an error)."""
    values = normalize(table, row)
    return values if isinstance(values, RECORD_TYPES[table]) else RECORD_TYPES[table](*values)


def to_arrow(table: str, rows: typing.Sequence[Any], run_id: str | None = None) -> pa.Table:
    """Rows of `table` as an Arrow table of its schema: records, the tuples `normalize` makes, or
    plain dicts (taken as they are: a missing key is a null).

    Records and tuples get `run_id`; dict rows may carry their own `run_id` (the store's tests and
    benchmarks build chunks that way). Maps become lists of (key, value) pairs, Arrow's map form.
    Runs in the flusher thread, off the caller's path.
    """
    schema = TABLE_SCHEMAS[table]
    names = FIELD_NAMES[table]
    record_type = RECORD_TYPES[table]
    values_of = operator.attrgetter(*names)
    tuples, run_ids = [], []
    for row in rows:
        if row.__class__ is tuple:
            tuples.append(row)
            run_ids.append(run_id)
        elif row.__class__ is record_type:
            tuples.append(values_of(row))
            run_ids.append(run_id)
        else:
            get = row.get
            tuples.append(tuple(get(name) for name in names))
            run_ids.append(run_id if run_id is not None else get("run_id"))
    columns = list(zip(*tuples)) if tuples else [()] * len(names)
    arrays = [pa.array(run_ids, type=pa.string())]
    for f, values in zip(list(schema)[1:], columns):
        if pa.types.is_map(f.type):
            values = [None if v is None else list(v.items()) for v in values]
        arrays.append(pa.array(values, type=f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def conform(table: str, data: pa.Table) -> pa.Table:
    """A chunk read back, as the table's current schema: its columns in order and cast, and a
    column added since it was written (nullable, default None) filled with nulls. Raises
    ValueError naming the columns a chunk lacks that cannot be null."""
    expected = TABLE_SCHEMAS[table]
    missing = [name for name in expected.names if name not in data.schema.names]
    required = [name for name in missing if name not in _ADDED_LATER[table]]
    if required:
        raise ValueError(f"missing columns {required}")
    for name in missing:
        data = data.append_column(expected.field(name), pa.nulls(data.num_rows, expected.field(name).type))
    return data.select(expected.names).cast(expected)


# Columns a chunk of an older writer may lack: every nullable field whose default is None.
_ADDED_LATER: dict[str, frozenset[str]] = {
    table: frozenset(f.name for f in dataclasses.fields(record_type) if f.default is None)
    for table, record_type in RECORD_TYPES.items()
}


STEP_FIELDS_IN_METRICS = ("success_rate", "violation_rate", "duplicate_rate", "mean_reward", "vetoed", "vetoed_updates",
                         "updates", "clipped", "transitions")
"""Keys of a step's metrics dict that are columns of `steps`, not entries of its `metrics` map."""


def clean_metrics(metrics: Any) -> dict[str, float]:
    """A step's metrics as the MAP column holds them: numbers (numpy scalars and 0-d tensors too) as
    floats; None, NaN and infinities left out (TRL logs None for a metric with no value). Raises
    RecordError naming the key of anything else."""
    if not isinstance(metrics, dict):
        raise RecordError(f"steps.metrics must be a dict of numbers by name, not {type(metrics).__name__}")
    out = {}
    for key, value in metrics.items():
        if value is None:
            continue
        if value.__class__ is not float:
            try:
                value = as_number(value)
            except ValueError:
                raise RecordError(f"steps.metrics[{key!r}] must be a number, not {value!r:.80}") from None
        if key.__class__ is not str:
            raise RecordError(f"steps.metrics keys must be str, not {key!r:.80}")
        if math.isfinite(value):
            out[key] = value
    return out


def finite(metrics: dict[str, Any]) -> dict[str, float]:
    """The numeric, finite entries of a metrics dict (the MAP column holds doubles; NaN is dropped)."""
    out = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            out[str(key)] = float(value)
    return out
