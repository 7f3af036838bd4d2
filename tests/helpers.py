"""Small helpers shared by the tests (pytest puts tests/ on sys.path)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def wait_for(predicate, timeout: float, interval: float = 0.05):
    """Poll `predicate` until it returns a truthy value or `timeout` seconds pass; returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


REPO_ROOT = Path(__file__).resolve().parent.parent


def agentrl(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m agentrl ARGS` from the repo root, offline, with no runs dir from the environment."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("AGENTRL_RUNS_DIR", None)
    return subprocess.run(
        [sys.executable, "-m", "agentrl", *map(str, args)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stderr
    return result


def store_rows(runs_dir, sql: str, params=()) -> list[tuple]:
    """Ingest what `runs_dir`'s runs have committed, then run one query on its store."""
    from agentrl.store.ingest import connect, ingest_once

    ingest_once(runs_dir)
    con = connect(runs_dir)
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


def fill_disk(folder) -> "Path":
    """A file in `folder` that takes every free byte of its file system (a full disk); delete it to free the space."""
    filler = Path(folder) / "filler"
    with open(filler, "wb", buffering=0) as handle:
        for size in (65536, 4096, 512, 1):  # down to the last partial block
            try:
                while handle.write(b"\0" * size):
                    pass
            except OSError:
                pass
    return filler
