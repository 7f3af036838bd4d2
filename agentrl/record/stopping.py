"""Stopping a run: the stop request (the run's stop file, or a signal) and what it does to a script
that does not look for it.

Cancel (the Live page, `agentrl cancel`) -> the run's `stop` file -> **stopping** -> the run
process. An engine (and a loop that asks `run.stop_requested()`) ends between steps. A script's
own run (`agentrl.init`) that goes on logging `STOP_INTERRUPT_S` after the request is interrupted
as Ctrl-C would: SIGINT to its own process when Python's handler is in place, and `RunCancelled`
(a KeyboardInterrupt) from its next log call in any case, so it ends `cancelled` with its rows
flushed rather than being killed at the end of the grace period.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

from agentrl.record.rundir import RunDir

logger = logging.getLogger(__name__)

STOP_INTERRUPT_S = 2.0  # a script's own run that has not stopped this long after a stop request is interrupted


class RunCancelled(KeyboardInterrupt):
    """Raised by a log call of a script's own run that was asked to stop and did not: it ends the
    loop as Ctrl-C would, and the run is recorded `cancelled`."""


class StopFlag:
    """Set by SIGTERM/SIGINT (when the run installs handlers) or by the stop file; read between steps."""

    def __init__(self, run: RunDir):
        self.run = run
        self.signalled = False
        self.lost: str | None = None  # "run.json was removed at step 11": the run stops and ends failed

    def __call__(self) -> bool:
        return self.signalled or self.lost is not None or self.run.stop_requested()

    def install(self) -> None:
        def handler(signum, frame):
            self.signalled = True

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)


class StopInterrupts:
    """The `Run`'s share of stopping a script's own run (mixed into `agentrl.record.run.Run`, which
    sets `_interrupt_on_stop`, `_stop_seen_at` and `_cancel_pending`)."""

    def _watch_stop(self) -> None:
        """From the flusher, once a second: the first time a stop request is seen, start the clock."""
        if self._interrupt_on_stop and not self._closed and self._stop_seen_at is None and self.stop():
            self._stop_seen_at = time.monotonic()
            timer = threading.Timer(STOP_INTERRUPT_S, self._interrupt)
            timer.daemon = True
            timer.start()

    def _interrupt(self) -> None:
        """A stop asked for STOP_INTERRUPT_S ago and the loop still runs (it does not check
        `stop_requested`): interrupt it as Ctrl-C would, so it ends `cancelled` with its rows flushed."""
        if not self._closed:
            logger.warning("agentrl: run %s was asked to stop (agentrl cancel, or Cancel on the Live page); interrupting it",
                           self.run_id)
            self._cancel_pending = True  # the next log call raises RunCancelled ...
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                os.kill(os.getpid(), signal.SIGINT)  # ... or Ctrl-C's KeyboardInterrupt comes sooner

    def _cancelled(self) -> RunCancelled:
        self._cancel_pending = False
        return RunCancelled(f"run {self.run_id} was asked to stop (agentrl cancel, or Cancel on the Live page)")
