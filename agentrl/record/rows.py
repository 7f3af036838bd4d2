"""The record types a run writes, one per chunk table, and their Arrow schemas (RECORD_SCHEMA_VERSION).

Run (any engine, or a user's own script through `agentrl.init`) -> **rows** -> chunks -> store.
Each table's row is a frozen dataclass whose fields are the table's columns; the Arrow schema of
the table is derived from the annotations (an `int` is int32 unless annotated `Int64`), so a
column added here, and in `schemas/store.sql`, is the whole migration. A row checks its own
types and ranges when it is made, so a value the store cannot hold fails in the caller, at the
step that produced it, never later in a flush.

`run_id` is not a field: the writer adds it. `StepRecord.from_trajectories` computes a step's
rates from its trajectory rows: every engine's success, violation and duplicate rates, mean
reward, veto count and transitions come from this one function.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any

import pyarrow as pa

RECORD_SCHEMA_VERSION = 2
"""Version of the record format, written into every run's run.json. 1: per-table chunk folders
(read by the store, never written); 2: one commit per flush (see `agentrl.record.chunks`)."""

Int64 = Annotated[int, "int64"]
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class RecordError(TypeError):
    """A row that does not fit its table; the message names the table, the field and the value."""


_CHECKS: dict[type, list] = {}  # record type -> [(field name, check)], filled below


def _validate(self) -> None:
    for name, check in _CHECKS[type(self)]:
        check(getattr(self, name))


def record(cls):
    """A frozen, slotted dataclass whose instances check their fields against the table's schema."""
    cls.__post_init__ = _validate  # set before `dataclass` reads the class, so its __init__ calls it
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


def _scalar_test(arrow_kind: pa.DataType):
    """A fast predicate for one value of an Arrow scalar type, and what it expects in words."""
    if pa.types.is_boolean(arrow_kind):
        return (lambda v: v.__class__ is bool), "a bool"
    if pa.types.is_integer(arrow_kind):
        low, high = (INT32_MIN, INT32_MAX) if arrow_kind.equals(pa.int32()) else (INT64_MIN, INT64_MAX)
        return (lambda v: isinstance(v, int) and v.__class__ is not bool and low <= v <= high), f"an int between {low} and {high}"
    if pa.types.is_floating(arrow_kind):
        return (lambda v: isinstance(v, (int, float)) and v.__class__ is not bool), "a number"
    if pa.types.is_string(arrow_kind):
        return (lambda v: isinstance(v, str)), "a str"
    if pa.types.is_timestamp(arrow_kind):
        return (lambda v: isinstance(v, datetime)), "a datetime"
    raise TypeError(f"no check for {arrow_kind}")


def _checker(table: str, name: str, arrow_type: pa.DataType, nullable: bool):
    """A function that raises RecordError when a value does not fit the column (fast when it fits)."""
    if pa.types.is_list(arrow_type):
        item_ok, item_what = _scalar_test(arrow_type.value_type)
        ok = lambda v: isinstance(v, (list, tuple)) and all(map(item_ok, v))  # noqa: E731
        what = f"a list, each item {item_what}"
    elif pa.types.is_map(arrow_type):
        key_ok, key_what = _scalar_test(arrow_type.key_type)
        value_ok, value_what = _scalar_test(arrow_type.item_type)
        ok = lambda v: isinstance(v, dict) and all(map(key_ok, v.keys())) and all(map(value_ok, v.values()))  # noqa: E731
        what = f"a dict, each key {key_what} and each value {value_what}"
    else:
        ok, what = _scalar_test(arrow_type)

    def check(value) -> None:
        if value is None:
            if not nullable:
                raise RecordError(f"{table}.{name} must be given, not None")
        elif not ok(value):
            raise RecordError(f"{table}.{name} must be {what}, not {value!r:.80}")

    return check


def _install_checks(record_type: type) -> None:
    table = TABLE_OF[record_type]
    hints = typing.get_type_hints(record_type, include_extras=True)
    checks = []
    for f in dataclasses.fields(record_type):
        arrow_type, nullable = _arrow_type(hints[f.name])
        # Fields filled in by the writer (ts, elapsed_s of a step) may be None until then.
        checks.append((f.name, _checker(table, f.name, arrow_type, nullable or f.default is None)))
    _CHECKS[record_type] = checks


for _record_type in RECORD_TYPES.values():
    _install_checks(_record_type)


def as_record(table: str, row: Any):
    """A row of `table` from a record or a plain dict of its fields (unknown keys are an error)."""
    record_type = RECORD_TYPES[table]
    if isinstance(row, record_type):
        return row
    if isinstance(row, dict):
        try:
            return record_type(**{k: v for k, v in row.items() if k != "run_id"})
        except TypeError as error:
            raise RecordError(f"{table}: {error}") from None
    raise RecordError(f"{table} rows must be {record_type.__name__} or dict, not {type(row).__name__}")


def to_arrow(table: str, rows: typing.Sequence[Any], run_id: str | None = None) -> pa.Table:
    """Rows (records or dicts) of `table` as an Arrow table of its schema.

    Records get `run_id`; dict rows may carry their own `run_id` (the store's tests and
    benchmarks build chunks that way). Maps become lists of (key, value) pairs, Arrow's map form.
    """
    schema = TABLE_SCHEMAS[table]
    columns: dict[str, list] = {name: [] for name in schema.names}
    for row in rows:
        if isinstance(row, dict):
            get = row.get
            own_run = row.get("run_id")
        else:
            get = lambda name, _row=row: getattr(_row, name, None)  # noqa: E731
            own_run = None
        for name in schema.names:
            columns[name].append(get(name))
        if run_id is not None or own_run is None:
            columns["run_id"][-1] = run_id if run_id is not None else own_run
    arrays = {}
    for f in schema:
        values = columns[f.name]
        if pa.types.is_map(f.type):
            values = [None if v is None else list(v.items()) for v in values]
        arrays[f.name] = pa.array(values, type=f.type)
    return pa.table(arrays, schema=schema)


def finite(metrics: dict[str, Any]) -> dict[str, float]:
    """The numeric, finite entries of a metrics dict (the MAP column holds doubles; NaN is dropped)."""
    out = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            out[str(key)] = float(value)
    return out
