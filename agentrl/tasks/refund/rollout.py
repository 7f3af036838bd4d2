"""Trajectories: one episode of a policy in a fresh gym, with the verifier's flags (SPEC section 3).

The flags come from the gym's verifier-only state, never from reading the actions.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from agentrl.tasks.refund.gym import RefundGym, Task
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # any policy with sample/greedy/logp plays; the tabular one is the task's own
    from agentrl.engines.tabular.policy import SoftmaxPolicy


@dataclass(frozen=True)
class Transition:
    """One turn: the state seen, the action taken, and its log-probability when it was sampled."""

    state: str
    action: str
    behavior_logp: float


@dataclass
class Trajectory:
    """One episode and what the verifier saw of it."""

    task: Task
    transitions: list[Transition] = field(default_factory=list)
    success: bool = False
    violation: bool = False
    duplicate_effect: bool = False

    @property
    def actions(self) -> list[str]:
        return [t.action for t in self.transitions]

    @property
    def states(self) -> list[str]:
        return [t.state for t in self.transitions]

    @property
    def n_steps(self) -> int:
        return len(self.transitions)


def rollout(
    policy: SoftmaxPolicy,
    task: Task,
    rng: random.Random | None = None,
    greedy: bool = False,
    max_steps: int = 7,
    env_latency_s: float = 0.0,
    make_gym: Callable[[], RefundGym] = RefundGym,
) -> Trajectory:
    """Run one episode of at most `max_steps` turns; sampled unless `greedy`. `env_latency_s`
    makes every environment step wait that long (an environment behind a network or a sandbox);
    `make_gym` builds the gym (a variant of its rules, `agentrl.tasks.refund.unguarded`)."""
    if not greedy and rng is None:
        raise ValueError("a sampled rollout needs an rng; pass rng=random.Random(seed) or greedy=True")
    gym = make_gym()
    state = gym.reset(task)
    trajectory = Trajectory(task=task)
    for _ in range(max_steps):
        if greedy:
            action = policy.greedy(state)
            logp = policy.logp(state, action)
        else:
            action, logp = policy.sample(state, rng)
        trajectory.transitions.append(Transition(state, action, logp))
        state = gym.step(action)
        if env_latency_s > 0:
            time.sleep(env_latency_s)
        if gym.done:
            break
    return _with_verdict(trajectory, gym)


def _with_verdict(trajectory: Trajectory, gym: RefundGym) -> Trajectory:
    """Copy the verifier's flags from the gym's private state onto the finished trajectory."""
    trajectory.success = gym.done and gym.refunded
    trajectory.violation = gym.violation
    trajectory.duplicate_effect = gym.effects > 1
    return trajectory


def replay(task: Task, actions: list[str]) -> Trajectory:
    """The trajectory the gym produces for these actions, the verifier's flags included (an exploit
    fixture is stored as its actions). Behaviour log-probabilities are unknown and recorded as 0."""
    gym = RefundGym()
    state = gym.reset(task)
    trajectory = Trajectory(task=task)
    for action in actions:
        trajectory.transitions.append(Transition(state, action, 0.0))
        state = gym.step(action)
        if gym.done:
            break
    return _with_verdict(trajectory, gym)
