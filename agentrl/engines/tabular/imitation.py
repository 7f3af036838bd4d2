"""Imitation before RL: the expert, demonstrations, behaviour cloning, DAgger, greedy evaluation.

SPEC section 5. The cloned policy is the starting point of every preset run; `evaluate` is also
the held-out check the trainer records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from agentrl.tasks.refund.gym import ACTIONS, RefundGym, Task
from agentrl.engines.tabular.policy import SoftmaxPolicy
from agentrl.tasks.refund.rollout import rollout


def expert_action(state: str) -> str:
    """What the expert does: look up first, ask approval for high value, refund, then finish."""
    if state in ("start", "recover"):
        return "lookup"
    if state == "known_high":
        return "request_approval"
    if state in ("known_low", "approved"):
        return "refund"
    return "finish"


def demonstrations(tasks: Iterable[Task]) -> list[tuple[str, str]]:
    """(state, expert action) pairs in visit order, the expert driving each task until done."""
    pairs: list[tuple[str, str]] = []
    for task in tasks:
        gym = RefundGym()
        state = gym.reset(task)
        while not gym.done:
            action = expert_action(state)
            pairs.append((state, action))
            state = gym.step(action)
    return pairs


def fit(policy: SoftmaxPolicy, examples: Sequence[tuple[str, str]], epochs: int = 40, lr: float = 0.25) -> SoftmaxPolicy:
    """Supervised cloning: for each epoch, each pair in order, one `update(state, action, lr)`."""
    for _ in range(epochs):
        for state, action in examples:
            policy.update(state, action, lr)
    return policy


def clone_expert(tasks: Iterable[Task], epochs: int = 40, lr: float = 0.25) -> SoftmaxPolicy:
    """A fresh policy fitted on the expert's demonstrations of `tasks`."""
    return fit(SoftmaxPolicy(ACTIONS), demonstrations(tasks), epochs=epochs, lr=lr)


@dataclass(frozen=True)
class EvalRow:
    """One greedy held-out episode."""

    task_id: str
    actions: list[str]
    success: bool
    violation: bool


def evaluate(policy: SoftmaxPolicy, tasks: Iterable[Task], max_steps: int = 7) -> list[EvalRow]:
    """One greedy rollout per task."""
    rows = []
    for task in tasks:
        trajectory = rollout(policy, task, greedy=True, max_steps=max_steps)
        rows.append(EvalRow(task.task_id, trajectory.actions, trajectory.success, trajectory.violation))
    return rows


def dagger_labels(policy: SoftmaxPolicy, tasks: Iterable[Task], max_steps: int = 7) -> list[tuple[str, str]]:
    """The learner drives greedily; the expert labels every state it passes (before stepping)."""
    labels: list[tuple[str, str]] = []
    for task in tasks:
        gym = RefundGym()
        state = gym.reset(task)
        for _ in range(max_steps):
            labels.append((state, expert_action(state)))
            state = gym.step(policy.greedy(state))
            if gym.done:
                break
    return labels


@dataclass
class DaggerRound:
    """What one DAgger round produced: the new labels and the refitted policy."""

    labels: list[tuple[str, str]]
    policy: SoftmaxPolicy


def dagger_round(
    cloned: SoftmaxPolicy,
    demos: Sequence[tuple[str, str]],
    label_tasks: Iterable[Task],
    epochs: int = 40,
    lr: float = 0.25,
) -> DaggerRound:
    """Copy the cloned policy, collect labels on `label_tasks`, refit on demonstrations + labels."""
    policy = cloned.copy()
    labels = dagger_labels(policy, label_tasks)
    fit(policy, list(demos) + labels, epochs=epochs, lr=lr)
    return DaggerRound(labels=labels, policy=policy)
