"""`agentrl.Api`: read runs from a notebook or a script, also while the dashboard holds the store.

Run process -> chunks + run.json -> **reader** -> DataFrames (beside the store, never through it).
DuckDB lets one process hold `agentrl.duckdb` (the dashboard), and refuses every other process,
read-only ones too. So `Api` never opens it: it reads what the store itself ingests, each run's
run.json and status.json and its committed chunk files (Parquet, written under a temporary name
and renamed, the commit marker last; see `agentrl.record.chunks`). What it returns is what the
runs have committed, and a run commits about once a second: at most a second old, whether a
dashboard runs or not. Decisions made on the dashboard (reviews, promotions) are not run data
and are not read here.

```python
api = agentrl.Api()                       # runs_dir: default $AGENTRL_RUNS_DIR, else runs/
api.runs()                                # one row per run: run_id, name, project, status, tags, notes, config, summary, ...
api.history(run_id)                       # one row per step, every metric a column (wandb's run.history())
api.trajectories(run_id)                  # one row per trajectory
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from agentrl.record.chunks import LEGACY_GLOB, list_commits
from agentrl.record.locations import chunk_folder
from agentrl.record.rows import TABLE_SCHEMAS, conform
from agentrl.record.rundir import RunDir, default_runs_dir, list_run_dirs
from agentrl.record.runfiles import RunFileError, read_meta, read_status

RUN_COLUMNS = ("run_id", "name", "project", "status", "tags", "notes", "config", "summary", "kind", "scorer", "step",
               "total_steps", "created_at", "started_at", "ended_at", "error")
STEP_COLUMNS = ("success_rate", "violation_rate", "duplicate_rate", "mean_reward", "vetoed", "vetoed_updates", "updates",
                "clipped", "transitions")


class ApiError(LookupError):
    """A run that is not there, or cannot be read; the message says which and why."""


class Api:
    """Runs of a runs directory as DataFrames, read from what each run committed."""

    def __init__(self, runs_dir: str | Path | None = None):
        self.runs_dir = Path(runs_dir) if runs_dir is not None else default_runs_dir()

    def runs(self, project: str | None = None) -> pd.DataFrame:
        """One row per run, newest first (only `project`'s when given): `RUN_COLUMNS`, with tags a
        list and config and summary dicts. A run whose files cannot be read is listed with status
        'unreadable' and the reason as its error."""
        rows = []
        for run in list_run_dirs(self.runs_dir):
            try:
                meta, status = read_meta(run) or {}, read_status(run) or {}
            except RunFileError as error:
                rows.append({"run_id": run.run_id, "status": "unreadable", "error": str(error)})
                continue
            if project is not None and meta.get("project") != project:
                continue
            rows.append({
                "run_id": run.run_id, "name": meta.get("name", run.run_id), "project": meta.get("project"),
                "status": status.get("status", "queued"), "tags": list(meta.get("tags") or []), "notes": meta.get("notes"),
                "config": meta.get("config") or {}, "summary": meta.get("summary") or {}, "kind": meta.get("kind"),
                "scorer": meta.get("scorer"), "step": status.get("step", 0), "total_steps": meta.get("total_steps"),
                "created_at": _timestamp(meta.get("created_at")), "started_at": _timestamp(status.get("started_at")),
                "ended_at": _timestamp(status.get("ended_at")), "error": status.get("error"),
            })
        return pd.DataFrame(rows, columns=list(RUN_COLUMNS))

    def history(self, run_id: str, keys: list[str] | None = None) -> pd.DataFrame:
        """The run's steps, one row per step in step order: `step`, `ts`, `elapsed_s`, the columns
        of `steps` it filled, and every metric it logged as a column of its own. `keys`: only these
        columns (with `step`). Rows of one step logged more than once are merged (the later wins)."""
        table = self._table(run_id, "steps")
        frame = table.drop_columns(["run_id", "metrics", "clipped_by_epoch"]).to_pandas()
        metrics = pd.DataFrame([dict(m) if m else {} for m in table.column("metrics").to_pylist()], index=frame.index)
        frame = pd.concat([frame, metrics[[c for c in metrics.columns if c not in frame.columns]]], axis=1)
        if len(frame):
            frame = frame.groupby("step", sort=True, as_index=False).last()
        # Columns of `steps` the run never filled (null, or the counters' default 0) are left out, as
        # wandb's history has only what was logged.
        frame = frame.drop(columns=[c for c in STEP_COLUMNS if c in frame.columns and not (frame[c].fillna(0) != 0).any()])
        if keys is not None:
            unknown = [k for k in keys if k not in frame.columns]
            if unknown and len(frame):
                raise ApiError(f"run {run_id} logged no {', '.join(map(repr, unknown))}; "
                               f"it has {', '.join(c for c in frame.columns if c != 'step')}")
            frame = frame[["step", *[k for k in keys if k in frame.columns and k != "step"]]]
        return frame.reset_index(drop=True)

    def trajectories(self, run_id: str, step: int | None = None) -> pd.DataFrame:
        """The run's trajectories (one row per sampled trajectory; lists and reward components as
        Python lists and dicts), in step order; only `step`'s when given."""
        table = self._table(run_id, "trajectories")
        frame = table.drop_columns(["run_id"]).to_pandas()
        for name in ("components", "extras"):
            frame[name] = [dict(v) if v is not None else None for v in table.column(name).to_pylist()]
        if step is not None:
            frame = frame[frame["step"] == step]
        return frame.sort_values(["step", "traj_idx"], kind="stable").reset_index(drop=True)

    def _table(self, run_id: str, table: str) -> pa.Table:
        """Every committed row of one of the run's tables, as the table's current schema."""
        run = self._run(run_id)
        meta = read_meta(run) or {}
        parts = []
        try:
            for commit in list_commits(run.root, folder=chunk_folder(run.root, meta)):
                if table in commit.files:
                    parts.append(conform(table, commit.read(table)))
        except OSError as error:
            raise ApiError(f"the chunks of run {run_id} cannot be read now: {error}") from None
        for path in sorted((run.root / table).glob(LEGACY_GLOB)):  # a record-schema-1 run
            parts.append(conform(table, pq.read_table(path)))
        return pa.concat_tables(parts) if parts else TABLE_SCHEMAS[table].empty_table()

    def _run(self, run_id: str) -> RunDir:
        if not isinstance(run_id, str) or not run_id or "/" in run_id or run_id in (".", ".."):
            raise ApiError(f"run ids are folder names, not {run_id!r:.80}")
        run = RunDir(self.runs_dir / run_id)
        if not run.meta_path.is_file():
            raise ApiError(f"no run {run_id!r} in {self.runs_dir}")
        return run


def _timestamp(value: Any) -> pd.Timestamp | None:
    try:
        return pd.Timestamp(value) if isinstance(value, str) else None
    except ValueError:
        return None
