"""A task's reward functions as TRL's `GRPOTrainer` calls them, plus the guard, for either scorer.

Inside the LM run process, between the rollouts and the update: TRL calls every reward function
of the task (each wrapped to keep its values: they are the stored reward components), then the
guard, last. The guard runs the task's `verify` on every rollout and scores the batch
(`agentrl.scorers.score_rollouts`); for the `guarded` scorer it returns the verdicts' penalties,
which TRL adds to the weighted sum (weight 1) so the penalised reward stays in the group
baseline, and `eligibility` then tells `VetoGRPOTrainer` which rollouts to mask out of the
update. For `outcome` it returns 0 and vetoes nothing; the violations are still recorded.
A rollout that repeats one of the exploit fixtures the run's config lists is flagged, and under
`guarded` penalised and vetoed (`agentrl.scorers.fixture_hit`).
The scores are read here, at reward time, because TRL reuses its environments next step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentrl.scorers import FixtureRef, RolloutScore, score_rollouts
from agentrl.tasks.contract import Task, reward_name

GUARD = "guard"  # TRL's name for the guard's reward column (rewards/guard/mean)


class TaskRewards:
    """The reward functions, weights and eligibility of one run; `scores` holds the last batch's."""

    def __init__(self, task: Task, scorer: str, fixtures: Sequence[Any] = (), scanners: Sequence[Any] = ()):
        if GUARD in task.reward_names():
            raise ValueError(f"task {task.name!r} has a reward function named {GUARD!r}; rename it (the guard's column is called that)")
        self.task = task
        self.scorer = scorer
        self.fixtures = [FixtureRef.of(f) for f in fixtures or ()]  # the run's config's: repeats are flagged (guarded: vetoed)
        from agentrl.scan.enforce import load_enforced

        self.scanners = load_enforced(scanners, task)  # the run's config's: hits are flagged (guarded: vetoed)
        self.values: dict[str, list] = {}
        self.scores: list[RolloutScore] = []
        self.task_ids: list[str] = []

    def functions(self) -> list[Callable[..., list]]:
        return [self._recording(f) for f in self.task.reward_funcs] + [self._guard()]

    def weights(self) -> list[float]:
        return self.task.weights() + [1.0]

    def _recording(self, function: Callable[..., list]) -> Callable[..., list]:
        name = reward_name(function)

        def reward(**kwargs: Any) -> list:
            values = list(function(**kwargs))
            self.values[name] = values
            return values

        reward.__name__ = name
        return reward

    def _guard(self) -> Callable[..., list]:
        def guard(prompts: list, completions: list, environments: Sequence[Any] | None = None, **columns: Any) -> list[float]:
            self.scores = score_rollouts(self.task, self.scorer, self.values, list(completions), list(environments or []),
                                         fixtures=self.fixtures, scanners=self.scanners)
            self.task_ids = row_ids(columns.get("task_id"), prompts)
            return [s.penalty for s in self.scores]

        guard.__name__ = GUARD
        return guard

    def eligibility(self, environments: Sequence[Any] | None, inputs: Sequence[dict]) -> list[bool]:
        if len(self.scores) != len(inputs):
            raise RuntimeError("the guard did not score this batch; it must be the last reward function")
        return [s.eligible for s in self.scores]


def row_ids(task_ids: Sequence[Any] | None, prompts: Sequence[Any]) -> list[str]:
    """Each row's `task_id` column, or (when a task has none) the start of its last prompt message."""
    if task_ids is not None:
        return [str(t) for t in task_ids]
    ids = []
    for prompt in prompts:
        text = prompt if isinstance(prompt, str) else str((prompt[-1] or {}).get("content", "")) if prompt else ""
        ids.append(" ".join(text.split())[:60] or "row")
    return ids
