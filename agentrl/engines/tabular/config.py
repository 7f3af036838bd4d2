"""The tabular engine's run config: SPEC sections 5-8 on the refund gym's softmax policy.

Launch -> **config** -> `agentrl.engines.tabular.engine`. The defaults are SPEC section 8's
outcome-only run (cloned on two expert demonstrations, 30 rounds of 8 rollouts per task). The
engine keeps its gym, but its task is the refund task of the Task contract
(`agentrl.tasks.refund.task.REFUND_TASK`): the training and held-out rows and the decision point
recorded every round are that object's.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator

from agentrl.config.base import RunConfig, TaskSpec, unique_task_ids
from agentrl.tasks.refund.gym import STATES
from agentrl.tasks.refund.tasksets import EXPERT_TASKS


def task_specs(tasks) -> list[TaskSpec]:
    """Config task specs from gym tasks or from the refund task's rows."""
    return [TaskSpec(task_id=t["task_id"], amount=t["amount"], start_state=t["start_state"]) if isinstance(t, dict)
            else TaskSpec(task_id=t.task_id, amount=t.amount, start_state=t.start_state) for t in tasks]


def _refund_task():
    from agentrl.tasks.refund.task import REFUND_TASK

    return REFUND_TASK


class TabularConfig(RunConfig):
    """A tabular run: imitation, then group-relative RL on the refund gym (seconds on a CPU)."""

    labels: ClassVar[dict[str, str]] = {
        "rounds": "rounds", "group_size": "group size", "lr": "step size", "clip": "clip", "epochs": "epochs",
        "max_steps": "turn limit", "dagger": "DAgger round", "clone_epochs": "cloning epochs",
        "clone_lr": "cloning step size", "eval_every": "evaluate every N rounds", "step_delay": "step delay (s)",
        "sensitive_states": "sensitive states", "workers": "environment workers", "env_latency_s": "environment latency (s)",
        "fleet_backend": "fleet backend", "probe_every": "replay exploit probes every N rounds", "on_onset": "at a hacking onset",
    }

    kind: Literal["tabular"] = Field(default="tabular", description="The tabular softmax policy of SPEC sections 1-8.")
    name: str = Field(default="refund", min_length=1, max_length=80, description="Human name of the run; the run id is derived from it.")
    rounds: int = Field(default=30, gt=0, le=100_000, description="Training rounds: each samples every task group-size times and updates the policy.")
    group_size: int = Field(default=8, ge=2, le=4096, description="Sampled rollouts per task per round; advantages need at least 2.")
    eval_every: int = Field(default=5, ge=0, le=100_000, description="Greedy held-out evaluation every N rounds (0: only before and after training).")
    lr: float = Field(default=0.04, gt=0, le=100, description="Policy-gradient step size of one clipped update.")
    clip: float = Field(default=0.2, gt=0, le=10, description="Ratio clip: a step whose ratio leaves [1-clip, 1+clip] in the advantage's direction is skipped.")
    epochs: int = Field(default=2, ge=1, le=100, description="Passes over each round's batch.")
    max_steps: int = Field(default=7, ge=1, le=1000, description="Turn limit of one episode.")
    dagger: bool = Field(default=False, description="Run one DAgger round on the cloned policy before RL (closes the recovery gap by imitation).")
    clone_epochs: int = Field(default=40, ge=0, le=10_000, description="Behaviour-cloning epochs over the expert demonstrations.")
    clone_lr: float = Field(default=0.25, gt=0, le=100, description="Behaviour-cloning step size.")
    sensitive_states: list[str] = Field(default_factory=lambda: list(_refund_task().decisions()), json_schema_extra={"options": list(STATES)}, description="States whose action distribution is recorded every round.")
    tasks: list[TaskSpec] = Field(default_factory=lambda: task_specs(_refund_task().train_dataset()), min_length=1, max_length=10_000, description="Training tasks, sampled in this order every round.")
    eval_tasks: list[TaskSpec] = Field(default_factory=lambda: task_specs(_refund_task().eval_dataset()), min_length=1, max_length=10_000, description="Held-out tasks for greedy evaluation.")
    workers: int = Field(default=1, ge=1, le=256, description="Environment fleet: worker processes that sample each round's rollouts in parallel (1: in the run process). With more than 1, or an environment latency, each rollout gets a seed of its own, so the batch is the same for any number of workers but differs from the single-RNG run of SPEC section 8.")
    fleet_backend: Literal["processes", "ray"] = Field(default="processes", description="Where the environment workers run: 'processes' on the run's machine, or 'ray': one Ray actor per worker on the Ray cluster the run is on (launched with --backend ray, or RAY_ADDRESS); the batch is the same either way. 'ray' needs pip install .[ray] where the run runs.")
    env_latency_s: float = Field(default=0.0, ge=0, le=60, description="Seconds every environment step waits, as an environment behind a network or a sandbox would (SPEC section 9 declares 0.3 s); what a fleet of workers hides.")
    probe_every: int = Field(default=5, ge=0, le=100_000, description="Replay the exploit probes greedily every N rounds while training (0: never during training), so a hacking onset shows as it happens.")
    on_onset: Literal["warn", "stop"] = Field(default="warn", description="At a hacking onset (agentrl.monitor): 'warn' records it and goes on; 'stop' ends the run cleanly with the reason.")
    expert_tasks: list[TaskSpec] = Field(default_factory=lambda: task_specs(EXPERT_TASKS), min_length=1, max_length=10_000, description="Tasks the expert demonstrates for behaviour cloning.")

    @field_validator("sensitive_states")
    @classmethod
    def _known_states(cls, value: list[str]) -> list[str]:
        unknown = [s for s in value if s not in STATES]
        if unknown:
            raise ValueError(f"unknown state(s) {unknown}; use states from {list(STATES)}")
        return value

    _unique = field_validator("tasks", "eval_tasks", "expert_tasks")(classmethod(lambda cls, v: unique_task_ids(v)))
