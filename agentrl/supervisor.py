"""The supervisor: `agentrl train` runs the engine in a worker process and records how it ended.

Launch (the CLI, or the launcher's `python -m agentrl train ...`) -> **supervisor** -> run process.
A process killed with SIGKILL (by a person, the OOM killer or a crash) cannot write its own final
status, and only its parent can learn its exit status. So `train` forks: the worker does the run
(status.json holds the worker's pid), and the supervisor, a parent that does nothing else, waits
for it. When the worker dies without a terminal status, the supervisor writes one with the exit
code or signal ("killed by SIGKILL") and the last line the run printed, and removes what a flush
cut short left; a CLI-started run never stays "running", or "exit status unknown", after a kill.

Signals: Ctrl-C reaches both processes (the worker stops between steps, the supervisor waits);
SIGTERM, SIGINT or SIGHUP sent to the supervisor alone are passed on to the worker; and if the
supervisor itself is killed, the kernel sends the worker SIGTERM (PR_SET_PDEATHSIG), so the run
stops at its next step and records itself `cancelled` rather than running on unsupervised.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
from collections.abc import Callable

from agentrl.record.chunks import list_commits, sweep_uncommitted
from agentrl.record.rundir import TERMINAL_STATUSES, RunDir, iso, remove_run_dir, utc_now

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "the run process vanished without a final status (exit status unknown)"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the run process was killed by {name}"
    return f"the run process exited with code {code} without a final status"


def record_exit(run: RunDir, code: int | None, cancelled: bool = False) -> bool | None:
    """Give a run whose process has ended a terminal status, unless it wrote one itself; True when
    this call wrote it, None when it could not be written. Then remove what a flush cut short
    left (no writer runs any more)."""
    written: bool | None = False
    if not run.root.is_dir():  # removed under the run: nothing is written into it again
        return None
    if (run.status() or {}).get("status") not in TERMINAL_STATUSES:
        last = [line for line in run.tail_log(5) if line.strip()]
        detail = describe_exit(code)
        if last:
            detail += f"; last output: {last[-1][:300]}"
        try:
            run.update_status(status="cancelled" if cancelled else "failed", ended_at=iso(utc_now()),
                              error=detail, exit_code=code)
            written = True
        except OSError as error:  # a full or read-only disk: say it where a person looks
            written = None
            logger.error("agentrl: cannot record how run %s ended (%s): %s", run.run_id, detail, error)
    sweep_uncommitted(run.root)
    return written


def _die_with_parent(parent: int) -> None:
    """Ask the kernel for SIGTERM when the supervisor dies (Linux); elsewhere the worker runs on."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the request was made
        os.kill(os.getpid(), signal.SIGTERM)


def supervise(run: RunDir, work: Callable[[], object]) -> int:
    """Run `work()` in a forked worker and wait for it; returns the worker's exit code (negative:
    the signal that killed it), after recording a terminal status if the worker could not."""
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the worker
        code = 1
        try:
            _die_with_parent(parent)
            work()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        except KeyboardInterrupt:
            code = 130
        except OSError as error:  # the machine's fault (a full disk, a permission): one line, not a traceback
            logger.error("error: run %s: %s", run.run_id, error)
        except BaseException as error:
            logger.error("error: run %s failed: %s: %s", run.run_id, type(error).__name__, error, exc_info=True)
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)

    received: list[int] = []

    def forward(signum, frame):
        received.append(signum)
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        while True:
            try:
                _, wait_status = os.waitpid(pid, 0)
                break
            except ChildProcessError:
                wait_status = None
                break
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    code = os.waitstatus_to_exitcode(wait_status) if wait_status is not None else None
    recorded = record_exit(run, code, cancelled=bool(received) or run.stop_requested())
    if recorded is None and not run.root.is_dir():  # someone removed it while the run ran
        print(f"error: run {run.run_id}: its folder {run.root} was removed while it ran", file=sys.stderr, flush=True)
    elif recorded is None and not list_commits(run.root):
        # It could neither run nor say so (a full disk): leave no run folder that says nothing.
        remove_run_dir(run)
        logger.error("error: run %s could not start, and its folder %s was removed", run.run_id, run.root)
    return code if code is not None else 1
