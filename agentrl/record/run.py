"""What every engine's run process shares: the stop flag, the chunk writer with a hardware sample
on each flush, status.json from 'running' to its final status, and the pause after a step.

Run process (`runner`, `trl_runner`, `coding_runner`) -> **run session** -> chunks. An engine
opens a session, writes its rows through `session.writer`, calls `step_done` after each step,
and sets `session.status` when it finishes; the session writes the last hardware sample, closes
the writer (the last flush happens before the terminal status: ingest relies on it) and records
the final status, also when the engine raises.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Callable

import psutil

from agentrl.record.chunks import ChunkWriter
from agentrl.record.hardware import ProcessTreeSampler
from agentrl.record.rundir import RunDir, iso, utc_now


class StopFlag:
    """Set by SIGTERM/SIGINT or by the stop file; read between steps."""

    def __init__(self, run: RunDir):
        self.run = run
        self.signalled = False

    def __call__(self) -> bool:
        return self.signalled or self.run.stop_requested()

    def install(self) -> None:
        def handler(signum, frame):
            self.signalled = True

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)


class RunSession:
    """One run process's shared state; use as a context manager around the engine's work."""

    def __init__(self, run: RunDir, total_steps: int, before_close: Callable[["RunSession"], None] | None = None):
        self.run = run
        self.run_id = run.run_id
        self.stop = StopFlag(run)
        self.stop.install()
        self.sampler = ProcessTreeSampler()
        self.step = 0
        self.peak_rss_bytes = 0
        self.status = "failed"  # until the engine says otherwise
        self.error: str | None = None
        self.before_close = before_close  # last rows an engine writes, e.g. its measured budget
        self.writer = ChunkWriter(run.root, on_flush=self.sample_hardware)
        run.update_status(
            status="running", pid=os.getpid(), create_time=psutil.Process().create_time(),
            started_at=iso(utc_now()), step=0, total_steps=total_steps, error=None,
        )

    def sample_hardware(self) -> None:
        sample = self.sampler.sample()
        self.peak_rss_bytes = max(self.peak_rss_bytes, sample["rss_bytes"] or 0)
        self.writer.append("hardware", {"run_id": self.run_id, "ts": utc_now(), "step": self.step, **sample})

    def step_done(self, step: int, delay_s: float = 0.0) -> None:
        """A step's rows are written (its steps row last): flush them soon, report the step, and
        pause `delay_s` in short slices so a stop request is honoured promptly."""
        self.step = step
        self.writer.flush_soon()
        self.run.update_status(step=step)
        deadline = time.monotonic() + delay_s
        while time.monotonic() < deadline and not self.stop():
            time.sleep(min(0.1, deadline - time.monotonic()))

    def __enter__(self) -> "RunSession":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is not None:
            self.status = "failed"
            self.error = f"{exc_type.__name__}: {exc}"
        self.sample_hardware()
        try:
            if self.before_close is not None:
                self.before_close(self)
        finally:
            try:
                self.writer.close()  # the last flush happens before the terminal status (ingest relies on it)
            finally:
                self.run.update_status(status=self.status, ended_at=iso(utc_now()), error=self.error)
        return False  # the exception, if any, goes on
