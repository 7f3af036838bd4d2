"""Reading a run's own files strictly: run.json, status.json and launch.json, checked field by field.

Run folder -> **runfiles** -> launcher (liveness), store (ingest), `runs`. A run's files are
written by its process and by the launcher, but anyone can damage one (an editor, a disk error,
a copy cut short). Each reader asks here, and a file that is not what the writer writes raises
one `RunFileError` that names the file's path and what is wrong with it; the caller skips that
run and carries on with the others: one broken run costs that run only.

A missing file is not an error here (a run being created has no status yet): the readers return
None for it, and the caller decides what absence means.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

from agentrl.record.rundir import STATUSES, RunDir

INT32_MAX = 2**31 - 1
PID_MAX = 2**31 - 1  # pid_t
LAUNCH_FILE = "launch.json"


class RunFileError(ValueError):
    """A run file that cannot be read as written; the message names its path and the fault."""

    def __init__(self, path: Path, detail: str):
        self.path = Path(path)
        self.detail = detail.removeprefix(":").strip()  # what is wrong, without the path
        super().__init__(f"{path}{detail}")


def _load(path: Path) -> dict[str, Any] | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise RunFileError(path, " is a directory, not a file") from None
    except OSError as error:
        raise RunFileError(path, f" cannot be read: {error.strerror or error}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RunFileError(path, f" is not UTF-8 text (byte {error.start})") from None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise RunFileError(path, f" is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}") from None
    except ValueError as error:  # NaN or Infinity
        raise RunFileError(path, f": {error}") from None
    if not isinstance(value, dict):
        raise RunFileError(path, f" must hold a JSON object, not {_type(value)}")
    return value


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def _check(path: Path, data: dict, key: str, ok, want: str) -> None:
    if key in data and data[key] is not None and not ok(data[key]):
        raise RunFileError(path, f": {key!r} must be {want}, not {json.dumps(data[key])[:80]}")


def _int(low: int, high: int):
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _timestamp(v) -> bool:
    if not isinstance(v, str):
        return False
    try:
        datetime.fromisoformat(v)
    except ValueError:
        return False
    return True


def _str(v) -> bool:
    return isinstance(v, str)


def read_status(run: RunDir) -> dict[str, Any] | None:
    """status.json, checked: None when it does not exist yet; RunFileError when it is damaged."""
    path = run.status_path
    data = _load(path)
    if data is None:
        return None
    if data.get("status") not in STATUSES:
        raise RunFileError(path, f": 'status' must be one of {list(STATUSES)}, not {json.dumps(data.get('status'))[:80]}")
    _check(path, data, "pid", _int(1, PID_MAX), "a process id (a positive integer)")
    _check(path, data, "create_time", _number, "a process create time (seconds since the epoch)")
    _check(path, data, "step", _int(0, INT32_MAX), "a step number (a non-negative integer)")
    _check(path, data, "total_steps", _int(0, INT32_MAX), "a non-negative integer")
    _check(path, data, "exit_code", _int(-255, 255), "an exit code")
    for key in ("started_at", "ended_at"):
        _check(path, data, key, _timestamp, "an ISO timestamp")
    _check(path, data, "error", _str, "a string")
    return data


def read_meta(run: RunDir) -> dict[str, Any] | None:
    """run.json, checked: None when it does not exist; RunFileError when it is damaged."""
    path = run.meta_path
    data = _load(path)
    if data is None:
        return None
    for key in ("run_id", "name", "kind", "scorer"):
        _check(path, data, key, _str, "a string")
    _check(path, data, "created_at", _timestamp, "an ISO timestamp")
    _check(path, data, "total_steps", _int(0, INT32_MAX), "a non-negative integer")
    _check(path, data, "config", lambda v: isinstance(v, dict), "an object of settings")
    _check(path, data, "record_schema_version", _int(1, INT32_MAX), "a positive integer")
    return data


def read_launch(run: RunDir) -> dict[str, Any] | None:
    """launch.json (the launcher's record of the process it started), checked like status.json."""
    path = run.root / LAUNCH_FILE
    data = _load(path)
    if data is None:
        return None
    _check(path, data, "pid", _int(1, PID_MAX), "a process id (a positive integer)")
    _check(path, data, "create_time", _number, "a process create time (seconds since the epoch)")
    return data
