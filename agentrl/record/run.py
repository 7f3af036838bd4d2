"""The one record writer: a `Run` owns a run's folder, its status, its chunks and its hardware samples.

Run process (every engine, and a user's own script through `agentrl.init`) -> **Run** -> chunks ->
store. An engine opens a `Run` around its work, logs typed rows (`agentrl.record.rows`) with
`log_*`, calls `step_done` after each step, and ends it with `finish(status)`. A user's script
does the same with plain values: `log_step(step, metrics)`, `log_trajectories(step, rows)`,
`log_evals(step, rows)` with records or dicts.

The caller never waits on the disk, and pays microseconds per row: a dict row's keys are checked
in the call, its values in the flusher thread (`agentrl.record.rows`), where a row that does not
fit is left out and its `RecordError` is raised by the caller's next call (or by `finish`). The
flusher also fills in the columns a step row leaves out from the trajectories logged for that
step, samples the process tree and refreshes status.json. On close the last hardware sample
is written, everything is flushed, and then the final status is recorded, also when the work
raised or the disk filled: the last flush happens before the terminal status, which ingest
relies on.

No signal handler is installed unless asked (`handle_signals`, our engines in a process of their
own): Ctrl-C in a user's loop raises KeyboardInterrupt as always, and the run is marked
`cancelled` on its way out (`with` block, or at interpreter exit). A run started by the script
engine (`supervised`) leaves its process fields and final status to that engine and reports
its own outcome as `reported_status`.

Where the chunks go, run.json and status.json kept (and published beside chunks behind an object
store, `s3://...`), and waiting for storage that stops answering: `agentrl.record.upkeep`.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping

import psutil

from agentrl.record.chunks import ChunkWriter
from agentrl.record.hardware import ProcessTreeSampler
from agentrl.record.rows import (
    FIELD_NAMES,
    RECORD_TYPES,
    REQUIRED_FIELDS,
    STEP_FIELDS_IN_METRICS,
    ActionProbRecord,
    BudgetRecord,
    HardwareRecord,
    LadderLabelRecord,
    LadderPolicyRecord,
    RecordError,
    StepRecord,
    TrajectoryRecord,
    check_shape,
    normalize,
)
from agentrl.record.metrics import flat_metrics
from agentrl.record.runinfo import SavedDict
from agentrl.record.steplog import StepLog, step_number
from agentrl.record.stopping import RunCancelled, StopFlag, StopInterrupts  # noqa: F401 - RunCancelled re-exported
from agentrl.record.tally import TRAJ_INDEX, StepTally
from agentrl.record.rundir import STATUS_WORDS, TERMINAL_STATUSES, RunDir, iso, utc_now
from agentrl.record.upkeep import RunUpkeep

logger = logging.getLogger(__name__)

# Per table: (keys a dict row may have, keys it must have), and the same when the call gives the step.
_KEYS = {table: (frozenset(names) | {"run_id"}, frozenset(REQUIRED_FIELDS[table])) for table, names in FIELD_NAMES.items()}
_KEYS_STEP_GIVEN = {table: (allowed, required - {"step"}) for table, (allowed, required) in _KEYS.items()}


class Run(StepLog, StopInterrupts, RunUpkeep):
    """One run's writer; use it as a context manager around the run's work, or end it with `finish`.

    `handle_signals=True` (our engines, in a process of their own) turns SIGTERM/SIGINT into a
    stop request honoured between steps; a user's own script keeps its own handlers.
    `supervised=True`: the script engine that started this process owns the run's lifecycle.
    `close_at_exit=True` (`agentrl.init`): a run still open when the interpreter exits is closed
    then, `cancelled` after Ctrl-C, `failed` after an uncaught exception. `hardware=False`: no
    samples of this process (rows imported from another time). `chunks_url`: write the chunks
    under `<chunks_url>/<run_id>/` (any fsspec URL or a shared folder; default
    `$AGENTRL_CHUNKS_URL`, else the run folder's chunks/), recorded in run.json for the store.
    """

    def __init__(self, run_dir: RunDir, total_steps: int | None = None, step_delay: float = 0.0,
                 handle_signals: bool = False, before_close: Callable[[Run], None] | None = None,
                 flush_interval: float | None = None, supervised: bool = False, close_at_exit: bool = False,
                 hardware: bool = True, chunks_url: str | None = None, config_key: str = "config",
                 continues: bool = False):
        self.dir = run_dir
        self.run_id = run_dir.run_id
        meta = run_dir.meta() or {}
        self.name: str = meta.get("name") or self.run_id
        self.project: str | None = meta.get("project")
        self.tags: list[str] = list(meta.get("tags") or [])
        self.notes: str | None = meta.get("notes")
        # run.config and run.summary: dicts that keep run.json up to date (agentrl.record.runinfo)
        self.config = SavedDict(meta.get(config_key) or {}, lambda values: run_dir.update_meta(**{config_key: dict(values)}))
        self.summary = SavedDict(meta.get("summary") or {}, lambda values: run_dir.update_meta(summary=dict(values)))
        self.total_steps = total_steps
        self.step_delay = step_delay
        self.supervised = supervised
        self.stop = StopFlag(run_dir)
        if handle_signals:
            self.stop.install()
        self.sampler = ProcessTreeSampler() if hardware else None  # None: rows of another time (an import)
        self.step = 0
        self.peak_rss_bytes = 0
        self.gpu_peak_bytes: int | None = None  # the GPUs' measured peak, summed over the training processes
        self.status = "failed"  # until the work says otherwise
        self.error: str | None = None
        self.before_close = before_close  # last rows the work writes, e.g. a measured budget
        self._in_before_close = False
        self._finished = False
        self._started = time.monotonic()
        self._status_step = -1
        self._status_lock = threading.Lock()
        self._closed = False
        self._refused: list[RecordError] = []  # rows the flusher left out, not yet raised to the caller
        self._refused_total = 0
        self._refused_lock = threading.Lock()
        self._files_lock = threading.Lock()  # the caller's step and the flusher's tick both look for run.json
        self._meta: dict | None = None
        self._tallies: dict[int, StepTally] = {}
        self._last_step = 0  # the highest step whose row was handed to the writer
        self._open_step: int | None = None  # a step `log` keeps open for more metrics ...
        self._open_metrics: dict = {}  # ... and what it has so far
        self._open_implicit = False  # it was opened by log(commit=False) without a step
        self._step_lock = threading.RLock()  # guards the open step
        # A script's own run (agentrl.init, not under the script engine, which stops its command itself)
        self._interrupt_on_stop = close_at_exit and not supervised
        self._stop_seen_at: float | None = None
        self._cancel_pending = False
        # First the writer, which claims the folder: a second writer fails here, before it touches the status.
        kwargs = {} if flush_interval is None else {"interval": flush_interval}
        folder, record = self._place_chunks(run_dir, chunks_url)  # sets chunks_location, and _published behind a URL
        self.writer = ChunkWriter(run_dir.root, on_flush=self._tick, run_id=self.run_id, prepare=self._prepare,
                                  hold_steps=True, folder=folder, on_storage=self._storage_changed,
                                  **kwargs)  # a step's rows land in the commit of its `steps` row
        self._record_place(run_dir, record)  # run.json says where the chunks go, before the first flush lands
        if continues:  # a resumed run: its steps go on from the last one it recorded
            last = (run_dir.status() or {}).get("step")
            self.step = self._last_step = last if last.__class__ is int and last > 0 else 0
        if supervised:
            fields = {"writer_pid": os.getpid(), "step": self.step}
        else:
            fields = {"status": "running", "pid": os.getpid(), "create_time": psutil.Process().create_time(),
                      "started_at": iso(utc_now()), "step": self.step, "error": None, "ended_at": None}
        run_dir.update_status(**fields, total_steps=total_steps if total_steps is not None else (run_dir.status() or {}).get("total_steps"))
        self._publish_status()
        if close_at_exit:
            atexit.register(self._close_at_exit)


    # -- what a run logs ------------------------------------------------------------------------

    def log_rows(self, table: str, rows: Iterable, step: int | None = None) -> None:
        """Rows of any chunk table, as records or dicts of their fields. A record was checked when
        it was made; a dict's keys are checked here and its values in the flusher (a wrong value
        is raised by the next call, after that call's own rows are taken). `step` fills a dict
        row's step and must equal a row's own."""
        if self._closed and not self._in_before_close:  # `before_close` writes the run's last rows
            raise self._finished_error()
        if self._cancel_pending:
            raise self._cancelled()
        if table not in RECORD_TYPES:
            raise RecordError(f"no table {table!r}; the tables are {', '.join(RECORD_TYPES)} "
                              "(to log metrics, pass a dict: run.log({'loss': 0.25}))")
        record_type = RECORD_TYPES[table]
        allowed, required = _KEYS[table] if step is None else _KEYS_STEP_GIVEN[table]
        buffered = []
        for row in rows:
            if row.__class__ is dict and row.keys() <= allowed and required <= row.keys():
                row = dict(row)  # the caller may reuse its dict; the values are read at the flush
                if step is not None and row.setdefault("step", step) != step:
                    raise RecordError(f"{table}: a row of step {row['step']!r} was logged as step {step}")
            elif row.__class__ is not record_type or (step is not None and row.step != step):
                check_shape(table, row, step)  # raises what is wrong, or passes a dict subclass
                row = {**row, "step": step} if step is not None else dict(row)
            buffered.append(row)
        self.writer.append(table, buffered)
        if self._refused:  # an earlier row's fault, raised once this call's own rows are taken
            self._raise_refused()

    def log_trajectories(self, step_or_rows: int | Iterable, rows: Iterable | None = None) -> None:
        """`log_trajectories(step, rows)`: a step's trajectories (TrajectoryRecord or dicts of its
        fields; `traj_idx`, `task_id` and `reward` are required). Log them before the step itself,
        so its row can take its rates from them. `log_trajectories(records)` takes typed rows that
        carry their step."""
        if rows is None:
            self.log_rows("trajectories", step_or_rows)
        else:
            self.log_rows("trajectories", rows, step=step_number(step_or_rows))

    def log_step(self, step: int | StepRecord, metrics: Mapping | None = None) -> None:
        """A finished step: `log_step(step, metrics)` with a dict of numbers by name, or a
        StepRecord. Log it after its other rows, so a visible step has them all.

        Metrics named like a column of `steps` (success_rate, violation_rate, duplicate_rate,
        mean_reward, vetoed, updates, clipped, transitions) fill that column; the rest go to the
        step's metrics map (None and NaN left out). Columns neither gives are taken from the
        trajectories logged for this step: mean reward, vetoed, transitions, and the rate of each
        flag (success, violation, duplicate_effect) the rows set."""
        if self._closed:
            raise self._finished_error()
        if self._cancel_pending:
            raise self._cancelled()
        if isinstance(step, StepRecord):
            if metrics is not None:
                raise RecordError("log_step(StepRecord) takes no metrics; put them in its `metrics` field")
            record = step
            if record.ts is None or record.elapsed_s is None:
                record = dataclasses.replace(record, ts=record.ts or utc_now(), elapsed_s=record.elapsed_s
                                             if record.elapsed_s is not None else time.monotonic() - self._started)
            with self._step_lock:
                self._emit_open_step()
                self.writer.append("steps", [record])
            number = record.step
        else:
            number = step if step.__class__ is int else step_number(step)
            if metrics is not None and not isinstance(metrics, Mapping):
                raise RecordError(f"steps: metrics must be a dict of numbers by name, not {type(metrics).__name__}")
            # The metrics are copied (the caller may reuse its dict) and checked in the flusher.
            metrics = dict(metrics) if metrics else {}
            with self._step_lock:
                if self._open_step is not None:  # a step `log` left open: this one merges into it or follows it
                    if self._open_step == number:
                        metrics = {**self._open_metrics, **metrics}
                        self._open_step, self._open_metrics = None, {}
                    else:
                        self._emit_open_step()
                self.writer.append("steps", [{"step": number, "metrics": metrics,
                                              "ts": utc_now(), "elapsed_s": time.monotonic() - self._started}])
        self.step = number
        if number > self._last_step:
            self._last_step = number
        self.writer.flush_soon()
        if self._refused:  # an earlier row's fault, raised once this step is taken
            self._raise_refused()

    def log_action_probs(self, step: int, state: str, distribution: Mapping[str, float]) -> None:
        self.writer.append("action_probs", [ActionProbRecord(step, state, action, float(p)) for action, p in distribution.items()])

    def log_evals(self, step_or_rows: int | Iterable, rows: Iterable | None = None) -> None:
        """`log_evals(step, rows)`: greedy evaluation episodes (EvalRecord or dicts with split,
        task_id, actions, success, violation); `log_evals(records)` takes typed rows."""
        if rows is None:
            self.log_rows("evals", step_or_rows)
        else:
            self.log_rows("evals", rows, step=step_number(step_or_rows))

    def log_ladder(self, stage: str, table: Mapping[str, Mapping[str, float]], labels: Iterable[tuple[str, str]] = ()) -> None:
        """A rung of the imitation ladder: the policy at every state, and the labels that made it."""
        self.writer.append("imitation_policy", [LadderPolicyRecord(stage, state, action, float(p))
                                                for state, dist in table.items() for action, p in dist.items()])
        self.writer.append("imitation_labels", [LadderLabelRecord(stage, i, state, action)
                                                for i, (state, action) in enumerate(labels)])

    def log_budget(self, rows: Iterable[BudgetRecord]) -> None:
        self.log_rows("budgets", rows)

    def step_done(self, step: int) -> None:
        """A step's rows are logged: ask for them to reach the store soon, then pause `step_delay`
        in short slices so a stop request is honoured promptly."""
        self.step = step
        self._check_files()
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

    @property
    def closed(self) -> bool:
        return self._closed

    def stop_requested(self) -> bool:
        """True once someone asked this run to stop (Cancel on the Live page): a loop that checks it
        between steps ends cleanly, and `finish('cancelled')` records why."""
        return self.stop()

    # -- from the flusher thread ----------------------------------------------------------------

    def _prepare(self, pending: dict[str, list]) -> dict[str, list]:
        """Each dict row checked and made a tuple; a step row completed from its trajectories
        (which are prepared first). A row that does not fit is left out and its error kept for
        the caller's next call."""
        prepared = {}
        for table in sorted(pending, key=lambda t: t != "trajectories"):
            kept = []
            for row in pending[table]:
                if row.__class__ is dict:
                    try:
                        if table == "steps":
                            row = self._complete_step(row)
                        values = normalize(table, row)
                    except RecordError as error:
                        self._refuse(error, row)
                        continue
                    if table == "trajectories":
                        self._tally(values, row.keys())
                    kept.append(values)
                else:
                    if table == "trajectories" and row.__class__ is TrajectoryRecord:
                        self._tally(tuple(getattr(row, name) for name in FIELD_NAMES["trajectories"]), TRAJ_INDEX)
                    elif table == "steps" and row.__class__ is StepRecord:
                        self._forget_tallies(row.step)
                    kept.append(row)
            if kept:
                prepared[table] = kept
        return prepared

    def _tally(self, values: tuple, given: Iterable[str]) -> None:
        step = values[TRAJ_INDEX["step"]]
        tally = self._tallies.get(step)
        if tally is None:
            tally = self._tallies[step] = StepTally()
        tally.add(values, given)

    def _forget_tallies(self, step: int) -> None:
        """A step row was written: its tally, and any older one, will not be asked for again."""
        for done in [s for s in self._tallies if s <= step]:
            del self._tallies[done]

    def _complete_step(self, row: dict) -> dict:
        """A dict step row with its metrics cleaned, metric names that are columns moved to them,
        and the columns neither gave filled from its trajectories."""
        row = dict(row)
        metrics, bad = flat_metrics(row.pop("metrics", None) or {})
        for name in STEP_FIELDS_IN_METRICS:
            if name in metrics:
                value = metrics.pop(name)
                row.setdefault(name, value)
        row["metrics"] = metrics
        if bad:  # the step keeps every metric that fits; what did not is said on the next call
            with self._refused_lock:
                self._refused.append(RecordError(f"steps: {bad[0]} (logged with step {row.get('step')})"
                                                 + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")))
        step = row.get("step")
        if step.__class__ is int:
            tally = self._tallies.get(step)
            if tally is not None:
                tally.fill(row)
            self._forget_tallies(step)
        return row

    def _refuse(self, error: RecordError, row: dict) -> None:
        step = row.get("step")
        where = f" (logged with step {step})" if step is not None else ""
        with self._refused_lock:
            self._refused.append(RecordError(f"{error}{where}; that row was not recorded"))
            self._refused_total += 1

    def _raise_refused(self) -> None:
        if self._refused:  # read without the lock: the common case is an empty list
            with self._refused_lock:
                refused, self._refused = self._refused, []
            if refused:
                more = len(refused) - 1
                raise RecordError(str(refused[0]) + (f" (and {more} more rows like it)" if more else ""))

    def sample_hardware(self) -> None:
        if self.sampler is None:
            return
        sample = self.sampler.sample()
        self.peak_rss_bytes = max(self.peak_rss_bytes, sample["rss_bytes"] or 0)
        self.writer.append("hardware", [HardwareRecord(ts=utc_now(), step=self.step, **sample)])

    # -- the end ----------------------------------------------------------------------------------

    @property
    def id(self) -> str:
        """The run's id (wandb's and Trackio's name for it): its folder's name, and `run_id` in the store."""
        return self.run_id

    def finish(self, status: str | None = None, error: str | None = None, *, exit_code: int | None = None,
               quiet: bool | None = None) -> None:
        """End the run: flush everything, then record `status` and `error`. `status`: succeeded
        (the default), failed or cancelled, or wandb's words for them (finished, crashed, killed);
        `exit_code` (wandb's): 0 succeeded, anything else failed. Finishing twice does nothing.
        Raises RecordError afterwards if rows were left out since the last call."""
        if exit_code is not None:
            if exit_code.__class__ is not int:
                raise ValueError(f"finish(exit_code={exit_code!r}): an int, 0 for success")
            if status is None:
                status = "succeeded" if exit_code == 0 else "failed"
            if exit_code != 0 and error is None:
                error = f"exit code {exit_code}"
        status = STATUS_WORDS.get(status, status) if status is not None else "succeeded"
        if status not in TERMINAL_STATUSES:
            raise ValueError(f"finish(status={status!r}): use one of {list(TERMINAL_STATUSES)} "
                             f"(or {', '.join(w for w in STATUS_WORDS if w not in TERMINAL_STATUSES)})")
        if self._closed:
            return
        self.status, self.error, self._finished = status, error, True
        self.close()
        self._raise_refused()

    def close(self) -> None:
        with self._status_lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self._close_at_exit)
        self._check_files()
        errors = []
        with self._step_lock:  # the step `log` kept open for more metrics
            self._emit_open_step()
        if self.summary:
            try:
                self.dir.update_meta(summary=dict(self.summary))
            except (OSError, TypeError, ValueError) as error:
                errors.append(f"the summary could not be written: {error}")
        for last in (self.sample_hardware, (lambda: self.before_close(self)) if self.before_close else None):
            if last is None:
                continue
            self._in_before_close = True
            try:
                last()
            except Exception as error:  # telemetry must not turn a finished run into a failed one
                errors.append(f"{type(error).__name__}: {error}")
            finally:
                self._in_before_close = False
        try:
            self.writer.close()  # the last flush happens before the terminal status (ingest relies on it)
        except BaseException as error:
            # Rows that could not be written (a full disk): the run did not record everything.
            self.status = "failed"
            self.error = (self.error + "; " if self.error else "") + f"the last rows could not be written: {error}"
        if self.stop.lost is not None:  # whatever the work said: its files went away under it
            self.status = "failed"
            self.error = self.stop.lost + (f"; {self.error}" if self.error else "")
        if self._refused_total:
            errors.append(f"{self._refused_total} rows did not fit their tables and were not recorded")
        fields = dict(error=self.error, step=self.step)
        fields.update({"reported_status": self.status} if self.supervised else {"status": self.status, "ended_at": iso(utc_now())})
        if errors and self.status != "failed":
            fields["warnings"] = errors
        try:
            self.dir.update_status(**fields)
        except OSError as error:  # nothing more can be recorded; say it where a person looks
            logger.error("agentrl: cannot write the final status of %s: %s", self.run_id, error)
        else:
            if self.stop.lost is not None:
                self._put_back_meta()
        for _ in range(30):  # the end, after the last commit: what a head elsewhere waits for
            if self._publish_status():
                break
            time.sleep(1.0)
        else:
            logger.error("agentrl: cannot publish the final status of %s to %s", self.run_id, self.chunks_location)

    def _close_at_exit(self) -> None:
        """The interpreter is exiting with the run still open (no `finish`, no `with`)."""
        if self._closed:
            return
        last = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)  # an uncaught exception
        if last is not None:
            self._fail_with(type(last), last)
        elif not self._finished:
            self.status = "succeeded"
        self.close()

    def _fail_with(self, exc_type: type, exc: BaseException) -> None:
        if issubclass(exc_type, KeyboardInterrupt):
            self.status, self.error = "cancelled", ("cancelled; a stop was asked for (agentrl cancel or the Live page)"
                                                    if self._stop_seen_at is not None else "interrupted (Ctrl-C)")
        else:
            self.status, self.error = "failed", f"{exc_type.__name__}: {exc}"

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self._closed:
            return False
        if exc is not None:
            self._fail_with(exc_type, exc)
        elif not self._finished:
            self.status = "succeeded"  # the block ended normally without saying otherwise
        self.close()
        if exc is None:
            self._raise_refused()
        return False  # the exception, if any, goes on

