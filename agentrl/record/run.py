"""The one record writer: a `Run` owns a run's folder, its status, its chunks and its hardware samples.

Run process (every engine, and a user's own script through `agentrl.init`) -> **Run** -> chunks ->
store. An engine opens a `Run` around its work, logs typed rows (`agentrl.record.rows`) with
`log_*`, calls `step_done` after each step, and sets `run.status` when it finishes. The writer
stamps each step, samples the process tree and refreshes status.json from its flusher thread
(the caller never waits on the disk), and on exit writes the last hardware sample, flushes, and
records the final status, also when the engine raised or the disk filled: the last flush
happens before the terminal status, which ingest relies on.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping

import psutil

from agentrl.record.chunks import ChunkWriter
from agentrl.record.hardware import ProcessTreeSampler
from agentrl.record.rows import (
    ActionProbRecord,
    BudgetRecord,
    EvalRecord,
    HardwareRecord,
    LadderLabelRecord,
    LadderPolicyRecord,
    StepRecord,
    TrajectoryRecord,
    as_record,
)
from agentrl.record.rundir import RunDir, iso, utc_now


class StopFlag:
    """Set by SIGTERM/SIGINT (when the run installs handlers) or by the stop file; read between steps."""

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


class Run:
    """One run's writer; use it as a context manager around the run's work.

    `handle_signals=True` (our engines, in a process of their own) turns SIGTERM/SIGINT into a
    stop request honoured between steps; a user's own script keeps its own handlers.
    """

    def __init__(self, run_dir: RunDir, total_steps: int | None = None, step_delay: float = 0.0,
                 handle_signals: bool = False, before_close: Callable[[Run], None] | None = None,
                 flush_interval: float | None = None):
        self.dir = run_dir
        self.run_id = run_dir.run_id
        self.total_steps = total_steps
        self.step_delay = step_delay
        self.stop = StopFlag(run_dir)
        if handle_signals:
            self.stop.install()
        self.sampler = ProcessTreeSampler()
        self.step = 0
        self.peak_rss_bytes = 0
        self.status = "failed"  # until the work says otherwise
        self.error: str | None = None
        self.before_close = before_close  # last rows the work writes, e.g. a measured budget
        self._started = time.monotonic()
        self._status_step = -1
        self._status_lock = threading.Lock()
        self._closed = False
        run_dir.update_status(
            status="running", pid=os.getpid(), create_time=psutil.Process().create_time(),
            started_at=iso(utc_now()), step=0, total_steps=total_steps, error=None,
        )
        kwargs = {} if flush_interval is None else {"interval": flush_interval}
        # hold_steps: a step's rows reach the store in the commit of its `steps` row, never before it.
        self.writer = ChunkWriter(run_dir.root, on_flush=self._tick, run_id=self.run_id, hold_steps=True, **kwargs)

    # -- what a run logs ------------------------------------------------------------------------

    def log(self, table: str, rows: Iterable) -> None:
        """Rows of any chunk table, as records or dicts of their fields (checked here, in the caller)."""
        self.writer.append(table, [as_record(table, row) for row in rows])

    def log_trajectories(self, rows: Iterable[TrajectoryRecord]) -> None:
        self.log("trajectories", rows)

    def log_step(self, record: StepRecord) -> None:
        """A finished step; log it after its other rows, so a visible step has them all."""
        if record.ts is None or record.elapsed_s is None:
            record = dataclasses.replace(record, ts=record.ts or utc_now(),
                                         elapsed_s=record.elapsed_s if record.elapsed_s is not None else time.monotonic() - self._started)
        self.writer.append("steps", [record])
        self.step = record.step
        self.writer.flush_soon()

    def log_action_probs(self, step: int, state: str, distribution: Mapping[str, float]) -> None:
        self.writer.append("action_probs", [ActionProbRecord(step, state, action, float(p)) for action, p in distribution.items()])

    def log_evals(self, rows: Iterable[EvalRecord]) -> None:
        self.log("evals", rows)

    def log_ladder(self, stage: str, table: Mapping[str, Mapping[str, float]], labels: Iterable[tuple[str, str]] = ()) -> None:
        """A rung of the imitation ladder: the policy at every state, and the labels that made it."""
        self.writer.append("imitation_policy", [LadderPolicyRecord(stage, state, action, float(p))
                                                for state, dist in table.items() for action, p in dist.items()])
        self.writer.append("imitation_labels", [LadderLabelRecord(stage, i, state, action)
                                                for i, (state, action) in enumerate(labels)])

    def log_budget(self, rows: Iterable[BudgetRecord]) -> None:
        self.log("budgets", rows)

    def step_done(self, step: int) -> None:
        """A step's rows are logged: ask for them to reach the store soon, then pause `step_delay`
        in short slices so a stop request is honoured promptly."""
        self.step = step
        self.writer.flush_soon()
        deadline = time.monotonic() + self.step_delay
        while not self.stop():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(0.1, left))

    def start_clock(self) -> None:
        """Training starts now: steps' `elapsed_s` (and the Live page's ETA) count from here, not
        from loading a model or cloning a policy."""
        self._started = time.monotonic()

    def stop_requested(self) -> bool:
        return self.stop()

    # -- from the flusher thread ----------------------------------------------------------------

    def sample_hardware(self) -> None:
        sample = self.sampler.sample()
        self.peak_rss_bytes = max(self.peak_rss_bytes, sample["rss_bytes"] or 0)
        self.writer.append("hardware", [HardwareRecord(ts=utc_now(), step=self.step, **sample)])

    def _tick(self) -> None:
        """Once a second, in the flusher: a hardware sample, and status.json's step when it moved."""
        self.sample_hardware()
        self._write_step()

    def _write_step(self) -> None:
        with self._status_lock:
            if self.step != self._status_step and not self._closed:
                self.dir.update_status(step=self.step)
                self._status_step = self.step

    # -- the end ----------------------------------------------------------------------------------

    def finish(self, status: str = "succeeded", error: str | None = None) -> None:
        """Set the final status; it is written when the run closes."""
        self.status, self.error = status, error

    def close(self) -> None:
        errors = []
        for last in (self.sample_hardware, (lambda: self.before_close(self)) if self.before_close else None):
            if last is None:
                continue
            try:
                last()
            except Exception as error:  # telemetry must not turn a finished run into a failed one
                errors.append(f"{type(error).__name__}: {error}")
        try:
            self.writer.close()  # the last flush happens before the terminal status (ingest relies on it)
        except BaseException as error:
            # Rows that could not be written (a full disk): the run did not record everything.
            self.status = "failed"
            self.error = (self.error + "; " if self.error else "") + f"the last rows could not be written: {error}"
        with self._status_lock:
            self._closed = True
            fields = dict(status=self.status, ended_at=iso(utc_now()), error=self.error, step=self.step)
            if errors and self.status != "failed":
                fields["warnings"] = errors
            try:
                self.dir.update_status(**fields)
            except OSError as error:  # nothing more can be recorded; say it where a person looks
                print(f"agentrl: cannot write the final status of {self.run_id}: {error}", flush=True)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is not None:
            self.status = "cancelled" if exc_type is KeyboardInterrupt else "failed"
            self.error = f"{exc_type.__name__}: {exc}" if exc_type is not KeyboardInterrupt else "interrupted (Ctrl-C)"
        self.close()
        return False  # the exception, if any, goes on
