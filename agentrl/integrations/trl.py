"""`AgentrlCallback`: record any TRL `GRPOTrainer` run in agentrl, with two lines in the script.

A user's TRL script -> **callback** -> `agentrl.init` -> `Run` -> chunks -> store -> pages.

```python
from agentrl.integrations.trl import AgentrlCallback

trainer = GRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(..., log_completions=True),
                      callbacks=[AgentrlCallback(runs_dir="runs")])
```

What it records, from what TRL hands every callback (never from the trainer's private state):
- `on_train_begin`: the run (its name, TRL's arguments and the model's name as its config, the
  number of steps);
- `on_log`: every metric TRL logged for the step (`reward`, `reward_std`, `rewards/<func>/mean`,
  `kl`, `entropy`, `clip_ratio/*`, `tools/*`, ...) into the step's metrics, `reward` also as
  its mean reward;
- each completion of the step with its per-function rewards, advantage and `log_extra` columns,
  from the table TRL writes to `output_dir/completions/completions_NNNNN.parquet` when
  `log_completions=True` (see `agentrl.integrations.completions`). TRL writes that file just
  after the callbacks' `on_log`, so a step is recorded at the next event (the next step's
  `on_step_begin`, or `on_train_end`), its trajectories first and then its step row;
- a stop request (Cancel on the dashboard) ends training after the current step
  (`control.should_training_stop`), and the run is `cancelled`.

TRL 1.16 cannot write its completions table when a tool takes no arguments (pyarrow cannot
store the empty `arguments` struct, and training stops with ArrowNotImplementedError). For such
tools keep `log_completions=False` and let the callback see each completion through the reward
functions instead: `reward_funcs=callback.track([f, g])` returns them unchanged in what they
compute and return (same names, so TRL's metrics keep theirs), and records each call's prompts,
completions, values and `log_extra` columns. TRL's advantage is not among what a reward function
sees, so those rows have none.

Only the main process records (`state.is_world_process_zero`). Given `run=`, the callback writes
into a run its caller opened and leaves its end to the caller; subclasses may override
`trajectories`, `step_row`, `before_step_row` and `step_recorded` (our own engine's veto
counters, probes and step delay).
Importing this module imports transformers; agentrl's record does not import torch.
"""

from __future__ import annotations

import functools
import inspect
import math
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from agentrl.integrations.completions import completion_rows, reward_names
from agentrl.record.api import init
from agentrl.record.rows import StepRecord
from agentrl.record.run import Run

COMPLETIONS_DIR = "completions"


class AgentrlCallback(TrainerCallback):
    """Records a TRL run into agentrl's store: its config, each step's metrics, each completion."""

    def __init__(self, runs_dir: str | Path | None = None, name: str | None = None, config: dict | None = None,
                 scorer: str = "outcome", run: Run | None = None):
        self.runs_dir, self.name, self.config, self.scorer = runs_dir, name, config, scorer
        self.run = run
        self._owns_run = run is None
        self._pending: dict[int, dict[str, Any]] = {}  # step -> its logs, until its completions are on disk
        self._stopped = False
        self._completions: Path | None = None
        self._weights: list[float] | None = None
        self._tracked: dict[str, Any] = {}  # the batch the `track`ed reward functions saw last
        self._tracked_lock = threading.Lock()

    # -- TRL's events ---------------------------------------------------------------------------

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not state.is_world_process_zero:
            return
        if self.run is None or (self._owns_run and self.run.closed):  # (a second train() is a new run)
            self._stopped = False
            config = {"trainer": args.to_dict(), "model": _model_name(model), **(self.config or {})}
            self.run = init(name=self.name or getattr(args, "run_name", None) or Path(args.output_dir).name, config=config,
                            runs_dir=self.runs_dir, total_steps=state.max_steps or None, scorer=self.scorer)
        self.run.start_clock()
        if getattr(args, "log_completions", False):
            self._completions = Path(args.output_dir) / COMPLETIONS_DIR
        self._weights = list(args.reward_weights) if getattr(args, "reward_weights", None) else None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.run is None or not state.is_world_process_zero or not logs:
            return
        if "train_runtime" in logs:  # the summary after the last step, not a step
            return
        self._record_ready()
        self._pending.setdefault(state.global_step, {}).update(logs)
        if self._completions is None:  # no table will follow: record the step now
            self._record_ready()

    def on_step_begin(self, args, state, control, **kwargs):
        if self.run is not None and state.is_world_process_zero:
            self._record_ready()  # TRL wrote the previous step's completions after its on_log

    def on_step_end(self, args, state, control, **kwargs):
        if self.run is not None and state.is_world_process_zero and self.run.stop_requested():
            self._stopped = True
            control.should_training_stop = True
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self.run is None or not state.is_world_process_zero:
            return
        self._record_ready()
        if self._owns_run:
            self.run.finish("cancelled" if self._stopped and state.global_step < state.max_steps else "succeeded")

    # -- completions seen through the reward functions ------------------------------------------

    def track(self, reward_funcs: Sequence[Callable] | Callable) -> list[Callable]:
        """`reward_funcs`, each wrapped to record what TRL gives and what it returns (for a run whose
        completions TRL cannot write itself; see the module's docstring). The values are returned
        as they are."""
        funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        return [self._tracking(func) for func in funcs]

    def _tracking(self, func: Callable) -> Callable:
        name = getattr(func, "__name__", type(func).__name__)

        def begin(kwargs: dict) -> dict:
            """Find (or start) the batch this call belongs to: every reward function of one batch
            gets the same `completions` list. Returns the kwargs to call `func` with."""
            completions = kwargs.get("completions")
            with self._tracked_lock:
                if self._tracked.get("source") is not completions:
                    self._tracked = {"source": completions, "prompts": list(kwargs.get("prompts") or []),
                                     "completions": list(completions or []), "rewards": {}, "extras": {}}
                batch = self._tracked
            log_extra = kwargs.get("log_extra")
            if log_extra is None:
                return kwargs

            def log_and_keep(column: str, values: list) -> None:
                batch["extras"][column] = list(values)
                log_extra(column, values)

            return {**kwargs, "log_extra": log_and_keep}

        def finish(kwargs: dict, values) -> None:
            with self._tracked_lock:
                if self._tracked.get("source") is kwargs.get("completions"):
                    self._tracked["rewards"][name] = [None if v is None else float(v) for v in values]

        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def tracked_async(*args, **kwargs):
                values = await func(*args, **begin(kwargs))
                finish(kwargs, values)
                return values
            return tracked_async

        @functools.wraps(func)
        def tracked(*args, **kwargs):
            values = func(*args, **begin(kwargs))
            finish(kwargs, values)
            return values
        return tracked

    def _tracked_table(self) -> list[dict]:
        """The completions the tracked reward functions saw since the last step, as TRL's table rows."""
        with self._tracked_lock:
            batch, self._tracked = self._tracked, {}
        if not batch.get("completions"):
            return []
        rows = []
        for i, (prompt, completion) in enumerate(zip(batch["prompts"], batch["completions"])):
            row = {"prompt": prompt, "completion": completion}
            row.update({name: values[i] for name, values in batch["rewards"].items() if i < len(values)})
            row.update({column: values[i] for column, values in batch["extras"].items() if i < len(values)})
            rows.append(row)
        return rows

    # -- what a step becomes (override in a subclass) -------------------------------------------

    def trajectories(self, step: int, completions: list[dict], logs: dict[str, Any]) -> list:
        """The step's trajectory rows, from TRL's completions table (a list of its rows)."""
        return completion_rows(step, completions, reward_names(logs), self._weights)

    def step_row(self, step: int, logs: dict[str, Any], trajectories: list) -> dict[str, Any] | StepRecord:
        """The step as `Run.log_step` takes it: every number TRL logged as its metrics, TRL's `reward`
        also as its mean reward (the rest of its columns come from `trajectories`), or a StepRecord."""
        metrics = {key: value for key, value in logs.items() if _is_number(value)}
        if _is_number(logs.get("reward")):
            metrics["mean_reward"] = logs["reward"]
        return metrics

    def before_step_row(self, step: int) -> None:
        """Called between a step's trajectories and its step row: log the step's other rows here
        (our engine: the action distribution at its decision points, evaluations), so the step
        becomes visible with all of them."""

    def step_recorded(self, step: int) -> None:
        """Called after a step's row is logged (our engine: its log line and step delay)."""

    # -- plumbing -------------------------------------------------------------------------------

    def _record_ready(self) -> None:
        for step in sorted(self._pending):
            logs = self._pending.pop(step)
            trajectories = self.trajectories(step, self._read_completions(step), logs)
            self.run.log_trajectories(step, trajectories)
            self.before_step_row(step)
            row = self.step_row(step, logs, trajectories)
            if isinstance(row, StepRecord):
                self.run.log_step(row)
            else:
                self.run.log_step(step, row)
            self.step_recorded(step)

    def _read_completions(self, step: int) -> list[dict]:
        """The step's completions: TRL's own table when it wrote one, else what `track` saw."""
        tracked = self._tracked_table()
        path = self._completions / f"completions_{step:05d}.parquet" if self._completions is not None else None
        if path is None or not path.is_file():
            return tracked
        import pyarrow.parquet as pq

        with pq.ParquetFile(path) as table:
            return table.read().to_pylist()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _model_name(model: Any) -> str | None:
    for candidate in (model, getattr(model, "config", None)):
        name = getattr(candidate, "name_or_path", None) or getattr(candidate, "_name_or_path", None)
        if name:
            return str(name)
    return None
