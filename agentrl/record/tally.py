"""What a step's trajectory rows add up to: the rates a step row leaves out, filled from its rows.

A user's `log_step(step, metrics)` / `log(metrics)` -> the writer's flusher -> **tally** -> the step
row. The flusher adds each prepared trajectory row of a step; the step's row then takes its mean
reward, veto count, transitions and the rate of each flag the rows set (a flag no row set has no
made-up rate).
"""

from __future__ import annotations

from collections.abc import Iterable

from agentrl.record.rows import FIELD_NAMES

TRAJ_INDEX = {name: i for i, name in enumerate(FIELD_NAMES["trajectories"])}
FLAGS = (("success", "success_rate"), ("violation", "violation_rate"), ("duplicate_effect", "duplicate_rate"))


class StepTally:
    """What a step's trajectory rows add up to, gathered in the flusher for a step row that
    leaves its rates out (a user's `log_step(step, metrics)`)."""

    __slots__ = ("n", "reward", "vetoed", "transitions", "flags", "seen")

    def __init__(self):
        self.n, self.reward, self.vetoed, self.transitions = 0, 0.0, 0, 0
        self.flags = dict.fromkeys([name for name, _ in FLAGS], 0)
        self.seen: set[str] = set()  # flags some row gave (a rate of flags nobody set would read 0%)

    def add(self, values: tuple, given: Iterable[str]) -> None:
        self.n += 1
        self.reward += values[TRAJ_INDEX["reward"]]
        self.vetoed += bool(values[TRAJ_INDEX["vetoed"]])
        self.transitions += len(values[TRAJ_INDEX["actions"]])
        for name, _ in FLAGS:
            self.flags[name] += bool(values[TRAJ_INDEX[name]])
        self.seen.update(given)

    def fill(self, row: dict) -> None:
        row.setdefault("mean_reward", self.reward / self.n)
        row.setdefault("vetoed", self.vetoed)
        row.setdefault("transitions", self.transitions)
        for name, rate in FLAGS:
            if name in self.seen:
                row.setdefault(rate, self.flags[name] / self.n)
