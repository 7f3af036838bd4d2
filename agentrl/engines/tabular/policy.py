"""The tabular softmax policy: one row of logits per observed state (SPEC section 1).

Sits at the bottom of the flow: rollouts sample from it, imitation and the group-relative
trainer both change it through the single `update` call. It knows nothing of tasks or rewards.
"""

from __future__ import annotations

import copy
import math
import random
from typing import Sequence


class SoftmaxPolicy:
    """A softmax over a fixed action tuple, one logit row per state, rows created as zeros."""

    def __init__(self, actions: Sequence[str]):
        self.actions: tuple[str, ...] = tuple(actions)
        self.logits: dict[str, list[float]] = {}

    def row(self, state: str) -> list[float]:
        """The logit row of `state`, created as zeros on first access (an unseen state is uniform)."""
        if state not in self.logits:
            self.logits[state] = [0.0] * len(self.actions)
        return self.logits[state]

    def probabilities(self, state: str) -> list[float]:
        """Softmax of the state's row, stable: the row max is subtracted before `exp`."""
        row = self.row(state)
        top = max(row)
        exps = [math.exp(value - top) for value in row]
        total = sum(exps)
        return [value / total for value in exps]

    def sample(self, state: str, rng: random.Random) -> tuple[str, float]:
        """Draw an action; returns it with its behaviour log-probability at sampling time."""
        probs = self.probabilities(state)
        # The exact call matters: it decides which draws the seeded generator makes.
        index = rng.choices(range(len(self.actions)), weights=probs, k=1)[0]
        return self.actions[index], math.log(probs[index])

    def greedy(self, state: str) -> str:
        """The arg-max action; the first one in action order on ties."""
        probs = self.probabilities(state)
        best = 0
        for index in range(1, len(probs)):
            if probs[index] > probs[best]:
                best = index
        return self.actions[best]

    def logp(self, state: str, action: str) -> float:
        """Log of the action's current probability in `state`."""
        return math.log(self.probabilities(state)[self.actions.index(action)])

    def update(self, state: str, action: str, step: float) -> None:
        """Move the row toward `action`: logit_i += step * (onehot_i - p_i), p taken before the change.

        Supervised cloning and policy-gradient steps are both this call with different steps.
        """
        probs = self.probabilities(state)
        row = self.row(state)
        for index, name in enumerate(self.actions):
            target = 1.0 if name == action else 0.0
            row[index] += step * (target - probs[index])

    def copy(self) -> "SoftmaxPolicy":
        """An independent copy (two runs trained from one cloned start must not share rows)."""
        return copy.deepcopy(self)

    def table(self, states: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
        """state -> {action: probability} for `states` (default: every state seen so far)."""
        names = list(self.logits) if states is None else list(states)
        return {state: dict(zip(self.actions, self.probabilities(state))) for state in names}

    def to_dict(self) -> dict:
        """The whole policy as plain JSON data: its actions and every logit row."""
        return {"actions": list(self.actions), "logits": {state: list(row) for state, row in self.logits.items()}}

    @classmethod
    def from_dict(cls, data: dict) -> "SoftmaxPolicy":
        """The inverse of `to_dict`; rows must have one logit per action."""
        policy = cls(data["actions"])
        for state, row in data["logits"].items():
            if len(row) != len(policy.actions):
                raise ValueError(f"state {state!r} has {len(row)} logits for {len(policy.actions)} actions")
            policy.logits[state] = [float(v) for v in row]
        return policy
