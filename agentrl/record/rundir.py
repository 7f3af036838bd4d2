"""The on-disk layout of a runs directory and of one run's folder.

```
<runs_dir>/agentrl.duckdb            the store (dashboard-owned; an index rebuilt from what follows)
<runs_dir>/decisions.jsonl           every review, fixture, promotion and run note (agentrl.store.decisions)
<runs_dir>/decisions.jsonl.torn      the bytes of log lines cut short (a full disk mid-write), set aside
<runs_dir>/<run_id>/run.json         who the run is: id, name, kind, scorer, config, created_at
<runs_dir>/<run_id>/status.json      where it is: status, pid, create_time, step, ended_at, error
<runs_dir>/<run_id>/stop             a cancel request (its presence is the request)
<runs_dir>/<run_id>/stdout.log       everything the run process printed
<runs_dir>/<run_id>/chunks/NNNNNNNN.<table>.parquet, NNNNNNNN.commit   chunks (see chunks.py)
```

JSON files are written to a temporary name and renamed into place, so a reader sees the old
file or the new one, never half of one (on a full disk, where there is no room for a second
copy, status.json is rewritten in place rather than left saying `running`). A run folder that
cannot be set up is removed, never left half made. Both the run process and the launcher use
this module; neither opens the database. Readers that must not trust a file read it through
`agentrl.record.runfiles`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import tempfile
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RUNS_DIR_ENV = "AGENTRL_RUNS_DIR"
RUN_DIR_ENV = "AGENTRL_RUN_DIR"  # set by the script engine: `agentrl.init()` in its command writes into this run
SUPERVISOR_ENV = "AGENTRL_RUN_SUPERVISOR"  # the pid of the engine process that owns that run's lifecycle
DB_FILENAME = "agentrl.duckdb"
TERMINAL_STATUSES = ("succeeded", "failed", "cancelled")
STATUSES = ("queued", "running") + TERMINAL_STATUSES
# Run.finish(status): wandb's words (and a few obvious ones) for the three terminal statuses
STATUS_WORDS = {"finished": "succeeded", "success": "succeeded", "done": "succeeded", "crashed": "failed",
                "error": "failed", "killed": "cancelled", "canceled": "cancelled", "stopped": "cancelled"}


class RunsDirError(OSError):
    """The runs directory cannot be used; the message says which path and why."""


def default_runs_dir() -> Path:
    """`$AGENTRL_RUNS_DIR`, else `runs/` in the current directory."""
    return Path(os.environ.get(RUNS_DIR_ENV) or "runs")


def ensure_writable(runs_dir: Path) -> Path:
    """Create `runs_dir` if needed and prove it writable, before anything starts."""
    runs_dir = Path(runs_dir)
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=runs_dir, prefix=".write-test-"):
            pass
    except OSError as error:
        raise RunsDirError(f"runs directory {str(runs_dir)!r} cannot be written: {error.strerror or error}") from None
    return runs_dir


def utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def iso(ts: datetime | None) -> str | None:
    return None if ts is None else ts.isoformat(timespec="microseconds")


def new_run_id(name: str) -> str:
    """Sortable by creation time, readable, unique: 20261129-113000-refund-outcome-3fa2."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40] or "run"
    return f"{utc_now():%Y%m%d-%H%M%S}-{slug}-{secrets.token_hex(2)}"


def temporary_name(path: Path) -> Path:
    """Where `path` is written before it is renamed into place: a name of this process and thread.
    The thread too: a run's flusher thread and its main thread both write status.json, and with
    one temporary name the second writer's rename found the first had taken its file."""
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    tmp = temporary_name(path)
    try:
        with open(tmp, "w") as handle:
            json.dump(payload, handle, indent=2, default=str)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()  # a full disk must not also collect half-written temporary files
        raise


def _write_json_in_place(path: Path, payload: dict[str, Any]) -> None:
    """Overwrite a small file in place: on a full disk its own blocks are the room left."""
    text = json.dumps(payload, indent=2, default=str)
    with open(path, "r+" if path.exists() else "w") as handle:
        handle.truncate(0)
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


_update_locks: dict[str, threading.RLock] = {}
_update_locks_guard = threading.Lock()


def _update_lock(path: Path) -> threading.RLock:
    """One lock for each file this process updates: read, change and write are one step for its
    threads. Reentrant: a user's signal handler that finishes the run interrupts its own thread,
    perhaps mid-update, and must not wait for itself."""
    key = os.path.abspath(path)
    with _update_locks_guard:
        return _update_locks.setdefault(key, threading.RLock())


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


@dataclass(frozen=True)
class RunDir:
    """Paths of one run's folder."""

    root: Path

    @property
    def run_id(self) -> str:
        return self.root.name

    @property
    def meta_path(self) -> Path:
        return self.root / "run.json"

    @property
    def status_path(self) -> Path:
        return self.root / "status.json"

    @property
    def stop_path(self) -> Path:
        return self.root / "stop"

    @property
    def log_path(self) -> Path:
        return self.root / "stdout.log"

    def meta(self) -> dict[str, Any] | None:
        return read_json(self.meta_path)

    def status(self) -> dict[str, Any] | None:
        return read_json(self.status_path)

    def update_meta(self, **fields: Any) -> dict[str, Any]:
        """Add to run.json (a run recorded from a user's script says its config and length once it knows them)."""
        with _update_lock(self.meta_path):
            meta = self.meta() or {}
            meta.update(fields)
            write_json_atomic(self.meta_path, meta)
        return meta

    def update_status(self, **fields: Any) -> dict[str, Any]:
        # Under a lock: the flusher thread's step update read the status, the main thread wrote
        # `running`, and the step update then wrote back `queued` (a lost update, not only a race).
        with _update_lock(self.status_path):
            status = self.status() or {}
            status.update(fields)
            try:
                write_json_atomic(self.status_path, status)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                # A full disk has no room for a second copy; a final status must still be written.
                _write_json_in_place(self.status_path, status)
        return status

    def stop_requested(self) -> bool:
        return self.stop_path.exists()

    def request_stop(self) -> None:
        self.stop_path.write_text(iso(utc_now()) or "")

    def tail_log(self, lines: int = 20) -> list[str]:
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - 16_384))
                text = handle.read().decode("utf-8", errors="replace")
        except OSError:
            return []
        return text.splitlines()[-lines:]


def create_run_dir(runs_dir: Path, run_id: str, meta: dict[str, Any]) -> RunDir:
    """Make the run's folder and write run.json (with the record schema version) and a `queued` status.json."""
    from agentrl.record.rows import RECORD_SCHEMA_VERSION

    meta = {**meta, "record_schema_version": RECORD_SCHEMA_VERSION}
    run = RunDir(Path(runs_dir) / run_id)
    try:
        run.root.mkdir(parents=True, exist_ok=False)
    except FileExistsError:
        raise RunsDirError(f"run folder {str(run.root)!r} already exists; choose another run id") from None
    except OSError as error:
        raise RunsDirError(f"cannot create run folder {str(run.root)!r}: {error.strerror or error}") from None
    try:
        write_json_atomic(run.meta_path, meta)
        write_json_atomic(run.status_path, {"status": "queued", "step": 0})
    except OSError as error:
        remove_run_dir(run)  # never leave a run folder that says nothing
        raise RunsDirError(f"cannot write run folder {str(run.root)!r}: {error.strerror or error}") from None
    return run


def remove_run_dir(run: RunDir) -> None:
    """Remove a run folder that could not be set up (nothing of it was ever run)."""
    shutil.rmtree(run.root, ignore_errors=True)


def new_run(runs_dir: Path, name: str, kind: str, scorer: str, config: dict[str, Any],
            total_steps: int | None = None, run_id: str | None = None, **labels: Any) -> RunDir:
    """A new run's folder: run.json (who it is, with its config, and `labels` such as project,
    tags and notes) and a `queued` status.json. `run_id`: the id a launcher elsewhere gave it."""
    ensure_writable(runs_dir)
    run_id = run_id or new_run_id(name)
    meta = {"run_id": run_id, "name": name, "kind": kind, "scorer": scorer, "created_at": iso(utc_now()),
            "total_steps": total_steps, "config": config, **labels}
    return create_run_dir(Path(runs_dir), run_id, meta)


def list_run_dirs(runs_dir: Path) -> list[RunDir]:
    """Every folder of `runs_dir` holding a run.json, newest id first."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        return []
    found = [RunDir(p) for p in runs_dir.iterdir() if p.is_dir() and (p / "run.json").is_file()]
    return sorted(found, key=lambda r: r.run_id, reverse=True)
