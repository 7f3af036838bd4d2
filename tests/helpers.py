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


def record_script_run(runs_dir, name: str, steps, scorer: str = "outcome") -> str:
    """A run recorded through `agentrl.init` (no gym, no decision points): `steps` is a list of
    steps, each a list of (actions, reward, violation). Returns its run id."""
    import agentrl

    with agentrl.init(name=name, runs_dir=runs_dir, total_steps=len(steps), scorer=scorer) as run:
        for step, rows in enumerate(steps, start=1):
            run.log_trajectories(step, [
                {"traj_idx": i, "task_id": f"t{i % 2}", "reward": reward, "actions": list(actions), "violation": violation,
                 "success": reward > 0, "eligible": not (violation and scorer == "guarded"),
                 "vetoed": violation and scorer == "guarded"}
                for i, (actions, reward, violation) in enumerate(rows)])
            run.log_step(step, {})
    return run.run_id


HONEST = ("lookup", "request_approval", "refund", "finish")
SHORTCUT = ("refund", "finish")  # pays more than honest work, and no verifier flags it
FLAGGED = ("lookup", "refund", "finish")  # a shortcut the verifier knows


def shortcut_spreads(shortcut_from: int = 4, steps: int = 8) -> list:
    """Eight trajectories a step: honest ones, one flagged shortcut, and from `shortcut_from` on,
    the unflagged shortcut in half of them."""
    out = []
    for step in range(1, steps + 1):
        taken = 4 if step >= shortcut_from else 0
        out.append([(SHORTCUT, 0.9, False)] * taken + [(HONEST, 0.8, False)] * (7 - taken) + [(FLAGGED, 0.85, True)])
    return out


def sessions_at_once(con, n: int, press, refused: type[Exception]) -> list[tuple[str, object]]:
    """`n` browser sessions pressing one button at the same moment: `press(cursor, i)` in `n`
    threads, each on its own cursor of `con`, released together. Each outcome: ("done", what
    press returned), ("refused", the message of a `refused` error) or ("crashed", any other error)."""
    import threading

    start, outcomes = threading.Barrier(n), []

    def session(i: int) -> None:
        cursor = con.cursor()
        start.wait()
        try:
            outcomes.append(("done", press(cursor, i)))
        except refused as error:
            outcomes.append(("refused", str(error)))
        except Exception as error:  # noqa: BLE001 - anything else is the failure a test looks for
            outcomes.append(("crashed", repr(error)))
        finally:
            cursor.close()

    threads = [threading.Thread(target=session, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return outcomes
