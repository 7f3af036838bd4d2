"""The dashboard's ingest loop: a daemon thread that ticks every `interval` seconds, sooner when woken.

Chunks -> store (**loop**: when) -> pages. The tick itself is the caller's (it reconciles run
liveness, then ingests); `agentrl.store.maintenance` runs the store's upkeep (checkpoints,
compaction) in a thread of its own, so neither waits on the other's slow work.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from agentrl.store.db import StoreError

logger = logging.getLogger(__name__)


class BackgroundIngest:
    """The dashboard's ingest loop: `tick()` every `interval` seconds in a daemon thread, and at
    once when `wake()` (polled every `poll` seconds in between) says something new was committed.

    `tick` is given by the caller (it reconciles run liveness, then ingests), so this class
    only owns the thread and remembers the last error for the UI to show. `wake` is cheap by
    contract, such as `agentrl.store.watch.CommitWatch(runs_dir).changed`.
    """

    def __init__(self, tick: Callable[[], object], interval: float = 0.5, wake: Callable[[], bool] | None = None,
                 poll: float = 0.02):
        self.tick = tick
        self.interval = interval
        self.wake = wake
        self.poll = poll
        self.last_error: str | None = None
        self.last_tick_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="agentrl-ingest", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
                self.last_error = None
            except Exception as error:  # keep the loop alive; the UI shows the message
                # A StoreError is already one line saying what to do; anything else keeps its type.
                self.last_error = str(error) if isinstance(error, StoreError) else f"{type(error).__name__}: {error}"
                logger.warning("agentrl ingest loop: %s", self.last_error)
            self.last_tick_at = time.time()
            self._wait()

    def _wait(self) -> None:
        """Until the next regular tick, or sooner when `wake` says so."""
        if self.wake is None:
            self._stop.wait(self.interval)
            return
        deadline = time.monotonic() + self.interval
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or self._stop.wait(min(self.poll, left)):
                return
            try:
                if self.wake():
                    return
            except Exception as error:  # a failing watch must not stop ingest: fall back to the clock
                logger.warning("agentrl ingest wake-up: %s: %s", type(error).__name__, error)
                self.wake = None
                self._stop.wait(max(0.0, deadline - time.monotonic()))
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
