"""Import a Trackio project (its SQLite file) into agentrl's store, so a user moves with their history.

Trackio's `<project>.db` -> **trackio import** -> `Run` -> chunks -> store. Read with the standard
library, read-only (the project file is never changed, and Trackio itself is not imported):

- `configs`: each run's config (Trackio's own `_Created`, `_Username`, `_Group` go under `trackio`);
- `metrics`: one JSON object per logged step; numbers become the step's metrics (`reward` also
  its mean reward), and a `trackio.table` value (a GRPO completions table, as TRL logs it with
  `report_to="trackio"`) becomes the step's trajectories (`agentrl.integrations.completions`);
  images, histograms and other media are left out and counted.

A row agentrl cannot take is left out and counted, never the file: a step that is not a whole
number from 0 to 2^31-1 (NULL, 'abc', 2^40), metrics that are not JSON text (bytes that are not
UTF-8), a value too large for a float. A run whose rows the record still refuses is removed again
and named, and the project's other runs are imported.

Each Trackio run becomes one agentrl run of kind `script` with a run id made from the project,
the run's name and its Trackio id, so importing a project again adds only what is new: runs not
seen before, and the steps a run imported before has logged since (a run Trackio continued,
`resume="must"`), which continue that agentrl run.
Steps keep their numbers and times. System metrics (machine-wide, not the run's process tree)
are not imported.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agentrl.integrations.completions import completion_rows, reward_names
from agentrl.record.api import SCRIPT_KIND
from agentrl.record.checks import RecordError
from agentrl.record.run import Run
from agentrl.record.rundir import RunDir, create_run_dir, ensure_writable, iso, utc_now

TABLE_TYPE = "trackio.table"
SPECIALS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}  # how Trackio stores non-finite floats


class TrackioImportError(ValueError):
    """The file is not a Trackio project that can be read; the message says why."""


@dataclass
class TrackioStep:
    step: int
    timestamp: datetime | None
    metrics: dict[str, float] = field(default_factory=dict)
    tables: list[list[dict]] = field(default_factory=list)
    skipped: int = 0  # media and other values that are neither numbers nor tables


@dataclass
class TrackioRun:
    key: str  # Trackio's run id (or its name, in projects older than run ids)
    name: str
    config: dict[str, Any]
    created_at: datetime | None
    steps: list[TrackioStep]
    bad_rows: int = 0  # rows left out: a step that is not a whole number in range, or unreadable metrics


@dataclass
class ImportReport:
    imported: list[tuple[str, str, int, int]] = field(default_factory=list)  # (name, run id, steps, completions)
    already: list[tuple[str, str]] = field(default_factory=list)  # (name, run id)
    refused: list[tuple[str, str]] = field(default_factory=list)  # (name, why): runs the record refused, not imported
    followed: list[tuple[str, str, int, int]] = field(default_factory=list)  # (name, run id, new steps, completions)
    skipped_values: int = 0
    bad_rows: int = 0


def read_project(db_path: str | Path) -> list[TrackioRun]:
    """Every run of a Trackio project file, with its config and steps in order."""
    path = Path(db_path)
    if not path.is_file():
        raise TrackioImportError(f"{str(path)!r} is not a file; give the path of a Trackio project (<project>.db, by default "
                                 "in ~/.cache/huggingface/trackio)")
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as error:
        raise TrackioImportError(f"cannot open {str(path)!r}: {error}") from None
    try:
        tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "metrics" not in tables:
            raise TrackioImportError(f"{str(path)!r} has no metrics table; it is not a Trackio project")
        return list(_runs(con, tables))
    except sqlite3.DatabaseError as error:
        raise TrackioImportError(f"cannot read {str(path)!r}: {error}") from None
    finally:
        con.close()


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in con.execute(f"PRAGMA table_info({table})")}  # table names are ours, never input


def _runs(con: sqlite3.Connection, tables: set[str]) -> Iterator[TrackioRun]:
    key = "run_id" if "run_id" in _columns(con, "metrics") else "run_name"
    configs: dict[str, tuple[dict, datetime | None]] = {}
    if "configs" in tables:
        config_key = "run_id" if "run_id" in _columns(con, "configs") else "run_name"
        for run_key, text, created in con.execute(f"SELECT {config_key}, config, created_at FROM configs"):
            config = _json(text) or {}
            configs[run_key] = (config, _timestamp(config.get("_Created")) or _timestamp(created))
    runs: dict[str, TrackioRun] = {}
    query = f"SELECT {key}, run_name, step, timestamp, metrics FROM metrics ORDER BY {key}, step, id"
    for run_key, run_name, step, timestamp, payload in con.execute(query):
        run = runs.get(run_key)
        if run is None:
            config, created = configs.get(run_key, ({}, None))
            run = runs[run_key] = TrackioRun(str(run_key), str(run_name), config, created, [])
        step, values = _step(step), _json(payload)
        if step is None or values is None:
            run.bad_rows += 1
            continue
        if not run.steps or run.steps[-1].step != step:
            run.steps.append(TrackioStep(step, _timestamp(timestamp)))
        _add_values(run.steps[-1], values)
    yield from runs.values()


MAX_STEP = 2**31 - 1  # the store's step columns are INTEGER


def _step(value: Any) -> int | None:
    """A row's step as agentrl stores it, or None (NULL, text, a fraction, out of range)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_STEP:
        return value
    return None


def _add_values(step: TrackioStep, values: dict[str, Any]) -> None:
    for name, value in values.items():
        value = SPECIALS.get(value, value) if isinstance(value, str) else value
        if isinstance(value, bool):
            step.skipped += 1
        elif isinstance(value, (int, float)):
            try:
                step.metrics[name] = float(value)
            except OverflowError:  # an integer past any float
                step.skipped += 1
        elif isinstance(value, dict) and value.get("_type") == TABLE_TYPE and isinstance(value.get("_value"), list):
            step.tables.append([row for row in value["_value"] if isinstance(row, dict)])
        else:
            step.skipped += 1


def _json(value: Any) -> dict[str, Any] | None:
    """A JSON object stored as text; {} for none, None for what is not JSON text (not UTF-8, not JSON)."""
    if value is None or value == "" or value == b"":
        return {}
    try:
        if isinstance(value, (bytes, memoryview)):
            value = bytes(value).decode("utf-8")
        # Python's json (Trackio's) writes NaN and Infinity, which no run file may hold: kept as null
        parsed = json.loads(value, parse_constant=lambda name: None)
    except (TypeError, ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    return parsed if isinstance(parsed, dict) else {}


def _timestamp(value: Any) -> datetime | None:
    try:
        moment = datetime.fromisoformat(str(value))
    except (TypeError, ValueError):
        return None
    return moment.astimezone(timezone.utc).replace(tzinfo=None) if moment.tzinfo else moment


def run_id_for(project: str, run: TrackioRun) -> str:
    """Stable across imports: the same Trackio run always lands in the same agentrl run."""
    slug = re.sub(r"[^a-z0-9]+", "-", f"{project}-{run.name}".lower()).strip("-")[:50] or "run"
    return f"trackio-{slug}-{hashlib.sha1(f'{project}/{run.key}'.encode()).hexdigest()[:8]}"


def import_project(db_path: str | Path, runs_dir: Path) -> ImportReport:
    """Import every run of the project not imported before; see the module docstring."""
    project = Path(db_path).stem
    runs = read_project(db_path)
    ensure_writable(runs_dir)
    report = ImportReport()
    for run in runs:
        run_id = run_id_for(project, run)
        run_dir = RunDir(Path(runs_dir) / run_id)
        if run_dir.root.exists():
            last = _imported_through(run_dir)
            new = [s for s in run.steps if last is not None and s.step > last]
            if not new:
                report.already.append((run.name, run_id))
                continue
            completions = _write_steps(run_dir, run, new, continues=True)
            report.followed.append((run.name, run_id, len(new), completions))
            report.skipped_values += sum(s.skipped for s in new)
            continue
        report.bad_rows += run.bad_rows
        try:
            completions = _import_run(project, run, Path(runs_dir), run_id, str(Path(db_path).resolve()))
        except (RecordError, ValueError, TypeError, OverflowError) as error:  # a value the record cannot hold
            shutil.rmtree(Path(runs_dir) / run_id, ignore_errors=True)  # no half-imported run left behind
            report.refused.append((run.name, " ".join(str(error).split())[:300]))
            continue
        report.imported.append((run.name, run_id, len(run.steps), completions))
        report.skipped_values += sum(s.skipped for s in run.steps)
    return report


IMPORTED_STEP = "trackio_imported_step"  # run.json: the last Trackio step this run holds


def _imported_through(run_dir: RunDir) -> int | None:
    """The last Trackio step the agentrl run holds (runs imported before this was kept: status.json's
    step); None when it cannot be told, and nothing is added."""
    meta, status = run_dir.meta() or {}, run_dir.status() or {}
    last = meta.get(IMPORTED_STEP, status.get("step"))
    return last if isinstance(last, int) and not isinstance(last, bool) else None


def _import_run(project: str, run: TrackioRun, runs_dir: Path, run_id: str, source: str) -> int:
    config = {k: v for k, v in run.config.items() if not k.startswith("_")}
    trackio_fields = {k.lstrip("_").lower(): v for k, v in run.config.items() if k.startswith("_")}
    started = run.created_at or next((s.timestamp for s in run.steps if s.timestamp), None)
    meta = {"run_id": run_id, "name": run.name, "kind": SCRIPT_KIND, "scorer": "outcome",
            "created_at": iso(started), "total_steps": len(run.steps) or None,
            "config": {**config, "trackio": {"project": project, "run_id": run.key, "file": source, **trackio_fields}}}
    run_dir = create_run_dir(runs_dir, run_id, meta)
    return _write_steps(run_dir, run, run.steps, continues=False)


def _write_steps(run_dir: RunDir, run: TrackioRun, steps: list[TrackioStep], continues: bool) -> int:
    """Write `steps` of `run` into the agentrl run (continuing it when it holds earlier steps);
    returns how many completions became trajectories."""
    config = {k: v for k, v in run.config.items() if not k.startswith("_")}
    started = run.created_at or next((s.timestamp for s in run.steps if s.timestamp), None)
    completions = 0
    before = run_dir.status() or {}
    # The rows are from another process and time: no hardware samples of this one.
    with Run(run_dir, total_steps=len(run.steps) or None, hardware=False, continues=continues) as writer:
        for step in steps:
            rows = []
            names = reward_names(step.metrics)
            weights = _reward_weights(config, len(names))
            for table in step.tables:
                rows += completion_rows(step.step, table, names, weights)
            for i, row in enumerate(rows):
                row["traj_idx"] = i
            if rows:
                writer.log_trajectories(step.step, rows)
                completions += len(rows)
            metrics = dict(step.metrics)
            for key in ("reward", "train/reward"):
                if key in metrics:
                    metrics["mean_reward"] = metrics[key]
                    break
            elapsed = (step.timestamp - started).total_seconds() if step.timestamp and started else None
            writer.log_rows("steps", [{"step": step.step, "metrics": metrics, "ts": step.timestamp or started or utc_now(),
                                       "elapsed_s": elapsed}])
            writer.step = step.step
        writer.finish("succeeded")
    ended = next((s.timestamp for s in reversed(run.steps) if s.timestamp), None)
    run_dir.update_meta(**{IMPORTED_STEP: steps[-1].step if steps else before.get("step", 0)}, total_steps=len(run.steps) or None)
    run_dir.update_status(started_at=iso(started), ended_at=iso(ended or started), pid=None, create_time=None)
    return completions


def _reward_weights(config: dict, n: int) -> list[float] | None:
    """TRL's `reward_weights`, when the run's config carries them (report_to='trackio' logs TRL's arguments)."""
    for holder in (config, config.get("trainer") if isinstance(config.get("trainer"), dict) else {}):
        weights = holder.get("reward_weights")
        if isinstance(weights, list) and len(weights) == n and all(isinstance(w, (int, float)) for w in weights):
            return [float(w) for w in weights]
    return None
