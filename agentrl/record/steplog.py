"""`Run.log(metrics, step=None)`: a step's metrics as wandb and Trackio take them, one row per step.

A user's script -> `agentrl.log` / `Run.log` -> **steplog** -> the writer. A step given
explicitly stays open, gathering further logs to it, until a later step is logged (or
`commit=True`, or the run ends); a step left out is the next one, written at once (`commit=False`
gathers one, as in wandb). The values are made plain in the caller (`agentrl.record.metrics`:
microseconds), so a value that is no number is named at once and the rest of the step kept.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from agentrl.record.metrics import flat_metrics
from agentrl.record.rows import RecordError
from agentrl.record.rundir import utc_now


class StepLog:
    """The wandb-style `log` of `agentrl.record.run.Run` (mixed in: it uses the run's writer, its
    `_open_step`, `_open_metrics`, `_open_implicit`, `_last_step`, `_step_lock` and `summary`)."""

    def log(self, metrics: Mapping | str, step: int | Iterable | None = None, *, commit: bool | None = None,
            **rows_step) -> None:
        """`run.log({"loss": 0.25, "reward": 0.8}, step=None)`: a step's metrics, as wandb and Trackio
        take them (`agentrl.record.metrics` says which values and names). `step` defaults to the
        step after the last one logged, and that step is written at once; a step given explicitly
        stays open, so further logs to it merge into it, until a later step is logged (or
        `commit=True`, or the run ends). A step below an open or written one is refused.
        `commit=False` without a step adds to the open step, as wandb's does.

        `run.log(table, rows, step=None)` (a table's name first) logs rows of that table: see `log_rows`."""
        if metrics.__class__ is str:
            return self.log_rows(metrics, step, **rows_step)
        if rows_step:
            raise TypeError(f"log() got unexpected keyword arguments {sorted(rows_step)}")
        if self._closed:
            raise self._finished_error()
        if self._cancel_pending:
            raise self._cancelled()
        values, bad = flat_metrics(metrics)
        with self._step_lock:  # threads logging at once must not interleave the open step
            open_step = self._open_step
            if step is None:
                # The next step, unless a log(commit=False) left one open to gather more (wandb's habit).
                if open_step is not None and not self._open_implicit:
                    self._emit_open_step()
                    open_step = None
                number = open_step if open_step is not None else self._last_step + 1
                self._open_implicit = commit is False
                commit = commit is not False
            else:
                number = step if step.__class__ is int else step_number(step)
                if open_step is not None and number > open_step:
                    self._emit_open_step()
                    open_step = None
                if number != open_step and (number <= self._last_step or (open_step is not None and number < open_step)):
                    latest = max(self._last_step, open_step or 0)
                    raise RecordError(f"steps: step {number} was logged after step {latest}; steps go forward, and a step "
                                      "takes further metrics only while it is the latest")
                commit = commit is True
                self._open_implicit = False
            if open_step is None:
                self._open_step, self._open_metrics = number, values
            else:
                self._open_metrics.update(values)
            dict.update(self.summary, values)  # the latest of each metric (written at the end)
            if commit:
                self._emit_open_step()
        if bad:
            raise RecordError(f"steps: {bad[0]}" + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
                              + f"; the other metrics of step {number} are recorded")
        if self._refused:
            self._raise_refused()

    def _emit_open_step(self) -> None:
        """The open step's row goes to the writer (its metrics checked and filled in the flusher)."""
        number, metrics = self._open_step, self._open_metrics
        if number is None:
            return
        self._open_step, self._open_metrics = None, {}
        self.writer.append("steps", [{"step": number, "metrics": metrics, "ts": utc_now(),
                                      "elapsed_s": time.monotonic() - self._started}])
        self.step = self._last_step = max(self._last_step, number)
        self.writer.flush_soon()

    def _finished_error(self) -> RecordError:
        return RecordError(f"run {self.run_id} is finished; nothing more can be logged to it "
                           f"(start another with agentrl.init, or continue it with agentrl.init(id={self.run_id!r}, resume='allow'))")


def step_number(step) -> int:
    if step.__class__ is not int:
        if isinstance(step, bool) or not hasattr(step, "__index__"):
            raise RecordError(f"step must be an int, not {step!r:.80}")
        step = int(step)
    return step
