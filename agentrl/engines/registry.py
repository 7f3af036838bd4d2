"""The engine registry: every engine declares here what the rest of the code asks of it.

Launch page, CLI, launcher and gate -> **registry** -> an engine. An engine is its config class,
the function that runs it in the run process, the scorers it accepts, a preflight (a report
shown before starting, such as a memory budget, and a refusal when the run cannot start), the
cost of a config in words, and for engines that train a policy the file a promotion bundles and
how the gate replays the exploit probes. Adding an engine is one `Engine(...)` in `ENGINES`; no
other module asks which kind a run is.

Importing this module loads only the engines' config classes: torch, TRL and the sandbox load
when a run starts or a preflight needs them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentrl.config.base import RunConfig
from agentrl.engines.coding.config import CodingConfig
from agentrl.engines.script.config import ScriptConfig
from agentrl.engines.tabular.config import TabularConfig
from agentrl.engines.trl.config import TrlConfig


@dataclass(frozen=True)
class Preflight:
    """What a config costs before it starts: a report to show and, when it cannot start, why."""

    report: str | None = None  # monospace text (the memory budget table), shown on Launch
    refusal: str | None = None  # one line; None means the run can start


@dataclass(frozen=True)
class PolicySupport:
    """How a trained policy is found and probed, for the promotion gate and its bundle."""

    artifact: str  # file or folder in the run folder that holds the final policy
    replay_probes: str | None = None  # "module:function"(run_dir, config: dict, tasks) -> [EvalResult]
    # None: the run plays the exploit probes itself at its end and records them (evals split 'probe').


def resolve_entry(path: str) -> Callable[..., Any]:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _no_preflight(config: RunConfig) -> Preflight:
    return Preflight()


@dataclass(frozen=True)
class Engine:
    kind: str
    title: str
    config_type: type[RunConfig]
    entry: str  # "module:function": run(config, run: agentrl.record.Run, log) -> final status
    cost: Callable[[Any], str]
    scorers: tuple[str, ...] = ("outcome", "guarded")
    preflight_check: str | None = None  # "module:function"(config) -> Preflight; imported when asked
    policy: PolicySupport | None = None
    pair: bool = True  # the outcome-vs-guarded pair is meaningful
    form_step_delay: float = 0.0  # the Launch form's starting step delay (so a fast run can be watched)
    # Its trajectories' `states` are a gym's named states, the same across runs (found divergence
    # compares them); otherwise states are read as the calls so far (an LM's are texts).
    gym_states: bool = False
    form_fields: tuple[str, ...] = field(default=())  # fields the Launch form shows, in order (empty: all simple ones)
    # Config fields the runs table shows as columns for its runs (dotted for a nested one): what
    # tells two runs of this engine apart at a glance.
    table_fields: tuple[str, ...] = ("seed",)
    runs_any_command: bool = False  # its config names a program to run: the dashboard starts it only when allowed
    # The task a run trains when its config names none (a config's `task` wins): review, fixtures
    # and the gate load it through the Task contract (`agentrl.tasks.load_task`). None: unknown.
    task: str | None = None

    def task_spec(self, config: dict | None) -> str | None:
        """The task spec of a run of this engine with `config` (a dict, as the store holds it)."""
        named = (config or {}).get("task") if isinstance(config, dict) else None
        return str(named) if named else self.task

    def run(self, config: RunConfig, run, log: Callable[[str], None] = print) -> str:
        return resolve_entry(self.entry)(config, run, log)

    def preflight(self, config: RunConfig) -> Preflight:
        return resolve_entry(self.preflight_check)(config) if self.preflight_check else _no_preflight(config)


def _tabular_cost(config: TabularConfig) -> str:
    n_tasks = len(config.tasks)
    rollouts = config.rounds * n_tasks * config.group_size
    return (f"{config.rounds} rounds × {n_tasks} tasks × group {config.group_size} = **{rollouts:,} sampled rollouts**, "
            f"each at most {config.max_steps} turns; {config.epochs} update epochs per round; "
            f"at least {config.rounds * config.step_delay:.0f} s of step delay.")


def _trl_cost(config: TrlConfig) -> str:
    lm = config.lm
    rollouts = config.rounds * lm.tasks_per_step * config.group_size
    evals = f"every {config.eval_every} steps" if config.eval_every else "before and after training"
    processes = config.distributed.num_processes
    split = (f" Each step's rollouts are split among {processes} processes ({config.distributed.strategy}, "
             f"`accelerate launch`); the first one records.") if processes > 1 else ""
    return (f"{config.rounds} optimiser steps × {lm.tasks_per_step} tasks × group {config.group_size} = "
            f"**{rollouts:,} multi-turn rollouts** of at most {lm.max_completion_length} tokens and "
            f"{lm.max_tool_calls} tool calls each, plus a greedy held-out evaluation {evals}.{split}")


def _coding_cost(config: CodingConfig) -> str:
    from agentrl.tasks.coding.tasks import CODING_TASKS

    return (f"{config.rounds} pass(es) over {len(CODING_TASKS)} coding tasks = **{config.total_steps} steps**, each a "
            f"group of scripted attempts whose test suites run in the sandbox, "
            f"{config.workers or 'one per core'} at a time.")


def _script_cost(config: ScriptConfig) -> str:
    import shlex

    steps = f"**{config.rounds} steps**" if config.rounds else "as many steps as it logs"
    return (f"runs `{shlex.join(config.command)}` as a child of the run, {steps}; inside it `agentrl.init()` (or the TRL "
            f"callback) writes into this run. What it costs is up to the command.")


ENGINES: dict[str, Engine] = {
    engine.kind: engine
    for engine in (
        Engine(
            kind="tabular", title="tabular policy (SPEC 1-8, seconds on a CPU)", config_type=TabularConfig,
            entry="agentrl.engines.tabular.engine:run_tabular", cost=_tabular_cost,
            policy=PolicySupport("policy.json", replay_probes="agentrl.engines.tabular.engine:replay_probes"),
            form_step_delay=0.25, gym_states=True, task="refund", table_fields=("lr", "group_size", "seed", "rounds"),
        ),
        Engine(
            kind="trl", title="language model (TRL GRPO + LoRA)", config_type=TrlConfig,
            entry="agentrl.engines.trl.engine:run_trl", cost=_trl_cost,
            preflight_check="agentrl.engines.trl.engine:preflight", policy=PolicySupport("adapter"), task="refund",
            table_fields=("lr", "group_size", "seed", "rounds", "lm.model"),
        ),
        Engine(
            kind="coding", title="coding attempts (sandboxed tests)", config_type=CodingConfig,
            entry="agentrl.engines.coding.engine:run_coding", cost=_coding_cost, pair=False, task="coding",
            table_fields=("seed", "rounds"),
        ),
        Engine(
            kind="script", title="your own command (agentrl.init or the TRL callback inside it)", config_type=ScriptConfig,
            entry="agentrl.engines.script.engine:run_script", cost=_script_cost,
            preflight_check="agentrl.engines.script.engine:preflight", pair=False, runs_any_command=True,
        ),
    )
}


class UnknownEngineError(ValueError):
    pass


def get_engine(kind: str) -> Engine:
    try:
        return ENGINES[kind]
    except (KeyError, TypeError):
        raise UnknownEngineError(f"unknown kind {kind!r}; use one of {sorted(ENGINES)}") from None


def engine_of(config: RunConfig) -> Engine:
    return get_engine(config.kind)
