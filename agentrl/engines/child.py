"""A run's child process as an engine supervises it: waited on, stopped in escalating steps once
the run is cancelled, and the run's end recorded.

Engine (script, trl across processes) -> **child** -> the command / `accelerate launch`. Each
engine names its own steps (the script engine: SIGINT, then SIGKILL; `accelerate launch`: SIGTERM,
then SIGKILL to the whole tree) and what a stop request does first (the trl engine writes the
stop file its rank 0 reads).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentrl.record.rundir import RunDir, iso, utc_now

POLL_S = 0.1


@dataclass(frozen=True)
class Escalation:
    """One step of stopping a child: `after_s` seconds after the stop request, log `message`, then `act`."""

    after_s: float
    message: str
    act: Callable[[subprocess.Popen], None]


def wait_for_child(child: subprocess.Popen, run_dir: RunDir, signalled: list[int], log: Callable[[str], None],
                   escalations: Sequence[Escalation], on_stop: Callable[[], float] = lambda: 0.0) -> int:
    """The child's exit code. Once a stop is asked for (a signal to this process, in `signalled`,
    or the run's stop file), `on_stop()` runs once and returns how many seconds to count as already
    waited (a head start to the escalations), then each escalation acts once when its time comes."""
    asked = None
    done: set[int] = set()
    while True:
        try:
            return child.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            pass
        if asked is None and (signalled or run_dir.stop_requested()):
            asked = time.monotonic() - on_stop()
        if asked is None:
            continue
        waited = time.monotonic() - asked
        for index, step in enumerate(escalations):
            if waited >= step.after_s and index not in done:
                done.add(index)
                log(step.message)
                step.act(child)


def end_run(run_dir: RunDir, status: str, error: str | None, code: int | None, log: Callable[[str], None]) -> str:
    """Write the run's final status, with its reason and the child's exit code; returns the status."""
    run_dir.update_status(status=status, ended_at=iso(utc_now()), error=error, exit_code=code)
    log(f"{status}" + (f": {error}" if error else ""))
    return status
