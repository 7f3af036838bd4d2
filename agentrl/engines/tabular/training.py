"""Group-relative training of the tabular policy: anchor-group advantages, the clipped update,
the veto and its audit counter (SPEC section 7).

The algorithm reads top to bottom in `train`; telemetry leaves through the optional `on_round`
hook (the run process turns each `RoundRecord` into chunk rows) so this module knows nothing
of storage, and `should_stop` lets a run honour a cancel request between rounds.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field
from typing import Callable, Sequence

from agentrl.tasks.refund.gym import Task
from agentrl.engines.tabular.policy import SoftmaxPolicy
from agentrl.tasks.refund.rollout import Trajectory, rollout
from agentrl.tasks.refund.scoring import Score, Scorer

ADVANTAGE_EPS = 1e-6


def anchor_group_advantages(batch: Sequence[Trajectory], scores: Sequence[Score]) -> dict[tuple[int, int], float]:
    """Advantage of every visit (trajectory i, turn t), grouped by (task_id, state at t).

    A trajectory that visits the same state twice is in that group twice.
    """
    groups: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for i, trajectory in enumerate(batch):
        for t, transition in enumerate(trajectory.transitions):
            groups.setdefault((trajectory.task.task_id, transition.state), []).append((i, t))
    advantages: dict[tuple[int, int], float] = {}
    for visits in groups.values():
        rewards = [scores[i].reward for i, _ in visits]
        mean = statistics.fmean(rewards)
        spread = statistics.pstdev(rewards)
        for (i, t), reward in zip(visits, rewards):
            advantages[(i, t)] = (reward - mean) / (spread + ADVANTAGE_EPS)
    return advantages


def clipped_update(
    policy: SoftmaxPolicy, state: str, action: str, behavior_logp: float, advantage: float, lr: float, clip: float
) -> bool:
    """Apply one clipped policy-gradient step; returns False when the ratio clips it (skipped)."""
    ratio = math.exp(policy.logp(state, action) - behavior_logp)
    if (advantage > 0 and ratio > 1 + clip) or (advantage < 0 and ratio < 1 - clip):
        return False
    policy.update(state, action, lr * advantage * ratio)
    return True


@dataclass
class RoundRecord:
    """Everything one round produced, for telemetry. `step` counts from 1."""

    step: int
    batch: list[Trajectory]
    scores: list[Score]
    advantages: dict[tuple[int, int], float]
    vetoed: set[int]
    updated: set[int]
    success_rate: float
    violation_rate: float
    duplicate_rate: float
    mean_reward: float
    transitions: int
    updates: int
    clipped_by_epoch: list[int]
    vetoed_updates: int


@dataclass
class TrainResult:
    """Per-round series and run totals."""

    success_rates: list[float] = field(default_factory=list)
    violation_rates: list[float] = field(default_factory=list)
    transitions: int = 0
    updates: int = 0
    clipped_by_epoch: list[int] = field(default_factory=list)
    vetoed_rollouts: int = 0
    vetoed_updates: int = 0  # audit counter: vetoed trajectories that received an update; must stay 0
    rounds_completed: int = 0
    stopped_early: bool = False


def train(
    policy: SoftmaxPolicy,
    tasks: Sequence[Task],
    scorer: Scorer,
    rng: random.Random,
    rounds: int = 30,
    group_size: int = 8,
    lr: float = 0.04,
    clip: float = 0.2,
    epochs: int = 2,
    max_steps: int = 7,
    on_round: Callable[[RoundRecord], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    sample: Callable[[SoftmaxPolicy, Sequence[Task], int, int], list[Trajectory]] | None = None,
) -> TrainResult:
    """Train `policy` in place for `rounds` rounds of group-relative updates.

    `sample(policy, tasks, group_size, round)` replaces the batch sampler (the environment fleet,
    `agentrl.engines.tabular.fleet`); by default every rollout draws from `rng`, in batch order,
    which SPEC section 8's figures need bit for bit.
    """
    result = TrainResult(clipped_by_epoch=[0] * epochs)
    for step in range(1, rounds + 1):
        if should_stop is not None and should_stop():
            result.stopped_early = True
            break
        # 1. Task-major batch: group_size sampled rollouts of each task, in task order.
        if sample is None:
            batch = [rollout(policy, task, rng, max_steps=max_steps) for task in tasks for _ in range(group_size)]
        else:
            batch = sample(policy, tasks, group_size, step)
        # 2. Sampled rates, before any update.
        n = len(batch)
        success_rate = sum(t.success for t in batch) / n
        violation_rate = sum(t.violation for t in batch) / n
        duplicate_rate = sum(t.duplicate_effect for t in batch) / n
        transitions = sum(t.n_steps for t in batch)
        # 3. Score once; penalised rewards stay in the groups, ineligible ones are vetoed.
        scores = [scorer(t) for t in batch]
        advantages = anchor_group_advantages(batch, scores)
        vetoed = {i for i, score in enumerate(scores) if not score.eligible}
        # 4. Clipped updates, epoch by epoch, skipping vetoed trajectories.
        updates = 0
        clipped_by_epoch = [0] * epochs
        updated: set[int] = set()
        for epoch in range(epochs):
            for i, trajectory in enumerate(batch):
                if i in vetoed:
                    continue
                for t, tr in enumerate(trajectory.transitions):
                    if clipped_update(policy, tr.state, tr.action, tr.behavior_logp, advantages[(i, t)], lr, clip):
                        updates += 1
                        updated.add(i)
                    else:
                        clipped_by_epoch[epoch] += 1
        # 5. Veto counters; the audit counter is measured, not assumed.
        vetoed_updates = len(vetoed & updated)
        result.success_rates.append(success_rate)
        result.violation_rates.append(violation_rate)
        result.transitions += transitions
        result.updates += updates
        result.vetoed_rollouts += len(vetoed)
        result.vetoed_updates += vetoed_updates
        for epoch in range(epochs):
            result.clipped_by_epoch[epoch] += clipped_by_epoch[epoch]
        result.rounds_completed = step
        if on_round is not None:
            on_round(
                RoundRecord(
                    step=step,
                    batch=batch,
                    scores=scores,
                    advantages=advantages,
                    vetoed=vetoed,
                    updated=updated,
                    success_rate=success_rate,
                    violation_rate=violation_rate,
                    duplicate_rate=duplicate_rate,
                    mean_reward=sum(s.reward for s in scores) / n,
                    transitions=transitions,
                    updates=updates,
                    clipped_by_epoch=clipped_by_epoch,
                    vetoed_updates=vetoed_updates,
                )
            )
        # 6. The batch is discarded: nothing of it carries into the next round.
    return result
