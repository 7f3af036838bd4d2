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

A run whose chunks go to an object store (`s3://...`) publishes its run.json and status.json
there too and honours a `stop` file found there (`agentrl.record.published`), so a head that
shares nothing but the URL sees it and can cancel it. When that storage stops answering, the run
goes on, says in status.json (`waiting_for_storage`) and its log that it waits, and sends what it
kept once the storage answers.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping

import psutil

from agentrl.record.chunks import ChunkWriter
from agentrl.record.hardware import ProcessTreeSampler
from agentrl.record.locations import CHUNKS_URL_ENV, ChunkLocationError, check_chunks_url, folder_at, recorded_location, run_location
from agentrl.record.published import STOP_FILE, publish, publishes
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
    clean_metrics,
    normalize,
)
from agentrl.record.rundir import TERMINAL_STATUSES, RunDir, iso, utc_now


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


_TRAJ = {name: i for i, name in enumerate(FIELD_NAMES["trajectories"])}
# Per table: (keys a dict row may have, keys it must have), and the same when the call gives the step.
_KEYS = {table: (frozenset(names) | {"run_id"}, frozenset(REQUIRED_FIELDS[table])) for table, names in FIELD_NAMES.items()}
_KEYS_STEP_GIVEN = {table: (allowed, required - {"step"}) for table, (allowed, required) in _KEYS.items()}
_FLAGS = (("success", "success_rate"), ("violation", "violation_rate"), ("duplicate_effect", "duplicate_rate"))


class _StepTally:
    """What a step's trajectory rows add up to, gathered in the flusher for a step row that
    leaves its rates out (a user's `log_step(step, metrics)`)."""

    __slots__ = ("n", "reward", "vetoed", "transitions", "flags", "seen")

    def __init__(self):
        self.n, self.reward, self.vetoed, self.transitions = 0, 0.0, 0, 0
        self.flags = dict.fromkeys([name for name, _ in _FLAGS], 0)
        self.seen: set[str] = set()  # flags some row gave (a rate of flags nobody set would read 0%)

    def add(self, values: tuple, given: Iterable[str]) -> None:
        self.n += 1
        self.reward += values[_TRAJ["reward"]]
        self.vetoed += bool(values[_TRAJ["vetoed"]])
        self.transitions += len(values[_TRAJ["actions"]])
        for name, _ in _FLAGS:
            self.flags[name] += bool(values[_TRAJ[name]])
        self.seen.update(given)

    def fill(self, row: dict) -> None:
        row.setdefault("mean_reward", self.reward / self.n)
        row.setdefault("vetoed", self.vetoed)
        row.setdefault("transitions", self.transitions)
        for name, rate in _FLAGS:
            if name in self.seen:
                row.setdefault(rate, self.flags[name] / self.n)


class Run:
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
                 hardware: bool = True, chunks_url: str | None = None):
        self.dir = run_dir
        self.run_id = run_dir.run_id
        self.total_steps = total_steps
        self.step_delay = step_delay
        self.supervised = supervised
        self.stop = StopFlag(run_dir)
        if handle_signals:
            self.stop.install()
        self.sampler = ProcessTreeSampler() if hardware else None  # None: rows of another time (an import)
        self.step = 0
        self.peak_rss_bytes = 0
        self.status = "failed"  # until the work says otherwise
        self.error: str | None = None
        self.before_close = before_close  # last rows the work writes, e.g. a measured budget
        self._finished = False
        self._started = time.monotonic()
        self._status_step = -1
        self._status_lock = threading.Lock()
        self._closed = False
        self._refused: list[RecordError] = []  # rows the flusher left out, not yet raised to the caller
        self._refused_total = 0
        self._refused_lock = threading.Lock()
        self._tallies: dict[int, _StepTally] = {}
        # First the writer, which claims the folder: a second writer fails here, before it touches the status.
        kwargs = {} if flush_interval is None else {"interval": flush_interval}
        location, record = _chunk_location(run_dir, chunks_url)
        self.chunks_location = location  # None: the run folder's chunks/
        folder = folder_at(location) if location else None
        self._published = folder if publishes(location) else None  # run files beside the chunks, for a head elsewhere
        self.writer = ChunkWriter(run_dir.root, on_flush=self._tick, run_id=self.run_id, prepare=self._prepare,
                                  hold_steps=True, folder=folder, on_storage=self._storage_changed,
                                  **kwargs)  # a step's rows land in the commit of its `steps` row
        if record:  # before the first flush lands: the store reads run.json to find the chunks
            meta = run_dir.update_meta(chunks_url=location)
        if self._published is not None:
            publish(self._published, "run.json", meta if record else (run_dir.meta() or {}))
        if supervised:
            fields = {"writer_pid": os.getpid(), "step": 0}
        else:
            fields = {"status": "running", "pid": os.getpid(), "create_time": psutil.Process().create_time(),
                      "started_at": iso(utc_now()), "step": 0, "error": None}
        run_dir.update_status(**fields, total_steps=total_steps if total_steps is not None else (run_dir.status() or {}).get("total_steps"))
        self._publish_status()
        if close_at_exit:
            atexit.register(self._close_at_exit)

    # -- what a run logs ------------------------------------------------------------------------

    def log(self, table: str, rows: Iterable, step: int | None = None) -> None:
        """Rows of any chunk table, as records or dicts of their fields. A record was checked when
        it was made; a dict's keys are checked here and its values in the flusher (a wrong value
        is raised by the next call). `step` fills a dict row's step and must equal a row's own."""
        if self._refused:
            self._raise_refused()
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

    def log_trajectories(self, step_or_rows: int | Iterable, rows: Iterable | None = None) -> None:
        """`log_trajectories(step, rows)`: a step's trajectories (TrajectoryRecord or dicts of its
        fields; `traj_idx`, `task_id` and `reward` are required). Log them before the step itself,
        so its row can take its rates from them. `log_trajectories(records)` takes typed rows that
        carry their step."""
        if rows is None:
            self.log("trajectories", step_or_rows)
        else:
            self.log("trajectories", rows, step=_step_number(step_or_rows))

    def log_step(self, step: int | StepRecord, metrics: Mapping | None = None) -> None:
        """A finished step: `log_step(step, metrics)` with a dict of numbers by name, or a
        StepRecord. Log it after its other rows, so a visible step has them all.

        Metrics named like a column of `steps` (success_rate, violation_rate, duplicate_rate,
        mean_reward, vetoed, updates, clipped, transitions) fill that column; the rest go to the
        step's metrics map (None and NaN left out). Columns neither gives are taken from the
        trajectories logged for this step: mean reward, vetoed, transitions, and the rate of each
        flag (success, violation, duplicate_effect) the rows set."""
        if isinstance(step, StepRecord):
            if metrics is not None:
                raise RecordError("log_step(StepRecord) takes no metrics; put them in its `metrics` field")
            record = step
            if record.ts is None or record.elapsed_s is None:
                record = dataclasses.replace(record, ts=record.ts or utc_now(), elapsed_s=record.elapsed_s
                                             if record.elapsed_s is not None else time.monotonic() - self._started)
            self._raise_refused()
            self.writer.append("steps", [record])
            number = record.step
        else:
            if self._refused:
                self._raise_refused()
            number = step if step.__class__ is int else _step_number(step)
            if metrics is not None and not isinstance(metrics, Mapping):
                raise RecordError(f"steps: metrics must be a dict of numbers by name, not {type(metrics).__name__}")
            # The metrics are copied (the caller may reuse its dict) and checked in the flusher.
            self.writer.append("steps", [{"step": number, "metrics": dict(metrics) if metrics else {},
                                          "ts": utc_now(), "elapsed_s": time.monotonic() - self._started}])
        self.step = number
        self.writer.flush_soon()

    def log_action_probs(self, step: int, state: str, distribution: Mapping[str, float]) -> None:
        self.writer.append("action_probs", [ActionProbRecord(step, state, action, float(p)) for action, p in distribution.items()])

    def log_evals(self, step_or_rows: int | Iterable, rows: Iterable | None = None) -> None:
        """`log_evals(step, rows)`: greedy evaluation episodes (EvalRecord or dicts with split,
        task_id, actions, success, violation); `log_evals(records)` takes typed rows."""
        if rows is None:
            self.log("evals", step_or_rows)
        else:
            self.log("evals", rows, step=_step_number(step_or_rows))

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
                        self._tally(tuple(getattr(row, name) for name in FIELD_NAMES["trajectories"]), _TRAJ)
                    elif table == "steps" and row.__class__ is StepRecord:
                        self._forget_tallies(row.step)
                    kept.append(row)
            if kept:
                prepared[table] = kept
        return prepared

    def _tally(self, values: tuple, given: Iterable[str]) -> None:
        step = values[_TRAJ["step"]]
        tally = self._tallies.get(step)
        if tally is None:
            tally = self._tallies[step] = _StepTally()
        tally.add(values, given)

    def _forget_tallies(self, step: int) -> None:
        """A step row was written: its tally, and any older one, will not be asked for again."""
        for done in [s for s in self._tallies if s <= step]:
            del self._tallies[done]

    def _complete_step(self, row: dict) -> dict:
        """A dict step row with its metrics cleaned, metric names that are columns moved to them,
        and the columns neither gave filled from its trajectories."""
        row = dict(row)
        metrics = dict(row.pop("metrics", None) or {})
        for name in STEP_FIELDS_IN_METRICS:
            if name in metrics and name not in row:
                row[name] = metrics.pop(name)
        row["metrics"] = clean_metrics(metrics)
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

    def _tick(self) -> None:
        """Once a second, in the flusher: a hardware sample, status.json's step when it moved, and
        a look for a stop file beside published chunks."""
        self.sample_hardware()
        self._write_step()
        if (self._published is not None and not self.stop.signalled and self.writer.waiting_since is None
                and self._published.exists(STOP_FILE)):
            self.stop.signalled = True  # a cancel from a head that sees only the URL

    def _write_step(self) -> None:
        with self._status_lock:
            if self.step != self._status_step and not self._closed:
                self.dir.update_status(step=self.step)
                self._status_step = self.step
                self._publish_status()

    def _publish_status(self) -> bool:
        """Copy status.json beside the published chunks; False when storage does not answer now
        (the flusher says so, and the next tick or the end publishes it)."""
        if self._published is None:
            return True
        try:
            publish(self._published, "status.json", self.dir.status() or {})
            return True
        except OSError as error:
            self.writer.storage_failed(error)  # the run says it waits, as when a commit cannot be written
            return False

    def _storage_changed(self, error: OSError | None) -> None:
        """From the flusher: storage behind the chunks URL stopped answering (`error`), or is back (None)."""
        if error is not None:
            reason = " ".join(str(error).split())[:300]
            message = f"waiting for storage at {self.chunks_location}: {reason}; rows are kept and sent when it answers"
            print(f"agentrl: run {self.run_id} is {message}", flush=True)
            self.dir.update_status(waiting_for_storage=message)
        else:
            print(f"agentrl: run {self.run_id}: storage at {self.chunks_location} answers again; what was kept is sent",
                  flush=True)
            self.dir.update_status(waiting_for_storage=None)
            self._publish_status()

    # -- the end ----------------------------------------------------------------------------------

    def finish(self, status: str = "succeeded", error: str | None = None) -> None:
        """End the run: flush everything, then record `status` (succeeded, failed or cancelled)
        and `error`. Raises RecordError afterwards if rows were left out since the last call."""
        if status not in TERMINAL_STATUSES:
            raise ValueError(f"finish(status={status!r}): use one of {list(TERMINAL_STATUSES)}")
        self.status, self.error, self._finished = status, error, True
        self.close()
        self._raise_refused()

    def close(self) -> None:
        with self._status_lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self._close_at_exit)
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
        if self._refused_total:
            errors.append(f"{self._refused_total} rows did not fit their tables and were not recorded")
        fields = dict(error=self.error, step=self.step)
        fields.update({"reported_status": self.status} if self.supervised else {"status": self.status, "ended_at": iso(utc_now())})
        if errors and self.status != "failed":
            fields["warnings"] = errors
        try:
            self.dir.update_status(**fields)
        except OSError as error:  # nothing more can be recorded; say it where a person looks
            print(f"agentrl: cannot write the final status of {self.run_id}: {error}", flush=True)
        for _ in range(30):  # the end, after the last commit: what a head elsewhere waits for
            if self._publish_status():
                break
            time.sleep(1.0)
        else:
            print(f"agentrl: cannot publish the final status of {self.run_id} to {self.chunks_location}", flush=True)

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
            self.status, self.error = "cancelled", "interrupted (Ctrl-C)"
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


def _chunk_location(run_dir: RunDir, chunks_url: str | None) -> tuple[str | None, bool]:
    """Where this run's chunks go, and whether run.json must be told: the location run.json
    records (a run written before), else `<chunks_url or $AGENTRL_CHUNKS_URL>/<run_id>`, else None
    (the run folder's chunks/). A run asked to write elsewhere than it already does is refused."""
    recorded = recorded_location(run_dir.meta())
    base = chunks_url if chunks_url is not None else os.environ.get(CHUNKS_URL_ENV) or None
    wanted = run_location(check_chunks_url(base, reach=recorded is None), run_dir.run_id) if base else None
    if recorded is not None:
        if chunks_url is not None and wanted != recorded:
            raise ChunkLocationError(f"run {run_dir.run_id} already writes its chunks to {recorded!r}, not {wanted!r}; "
                                     "leave chunks_url out to go on writing there")
        return recorded, False
    return wanted, wanted is not None


def _step_number(step) -> int:
    if step.__class__ is not int:
        if isinstance(step, bool) or not hasattr(step, "__index__"):
            raise RecordError(f"step must be an int, not {step!r:.80}")
        step = int(step)
    return step
