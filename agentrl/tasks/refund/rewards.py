"""Refund rewards in the shape TRL's GRPO trainer calls (SPEC section 6 on the LM path).

Sits in the LM run process between the rollouts and the update: after a batch of tool
episodes, `GRPOTrainer` calls the run's reward function with the batch's environments
(`RefundToolEnv`, one per completion). Each function scores every environment's trajectory
with the same scorer the tabular engine uses (`agentrl.scoring`), returns the rewards, and
leaves the whole `Score` (reward, eligibility, every component) on the environment, where the
veto (`agentrl.grpo_veto`) and the run's trajectory rows read it. Reward and permission stay
separate: the reward goes into the group baseline; eligibility only decides the update.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentrl.tasks.refund.scoring import Score, Scorer, guarded_score, outcome_score


def _score_environments(environments: Sequence[Any] | None, scorer: Scorer, log_extra: Callable | None) -> list[float]:
    if environments is None:
        raise ValueError("refund rewards need TRL's `environments` argument; train with environment_factory=RefundToolEnv")
    scores: list[Score] = []
    for environment in environments:
        score = scorer(environment.trajectory)
        environment.score = score
        scores.append(score)
    if log_extra is not None:  # also into TRL's own completions table, when it keeps one
        log_extra("eligible", [s.eligible for s in scores])
        for name in scores[0].components if scores else ():
            log_extra(name, [s.components[name] for s in scores])
    return [s.reward for s in scores]


def outcome_reward(completions: list, environments: Sequence[Any] | None = None, log_extra: Callable | None = None, **kwargs: Any) -> list[float]:
    """Outcome-only: success minus 0.05 per tool call; always eligible.

    Example: an episode lookup, refund, finish on an amount of 90 scores 1 - 0.15 = 0.85.
    """
    return _score_environments(environments, outcome_score, log_extra)


def guarded_reward(completions: list, environments: Sequence[Any] | None = None, log_extra: Callable | None = None, **kwargs: Any) -> list[float]:
    """Guarded: outcome minus 2 for a violation, 1 for a duplicate effect, 0.05 per call; violators are ineligible.

    Example: lookup, refund, finish on an amount of 90 scores 1 - 2 - 0.15 = -1.15 and is vetoed.
    """
    return _score_environments(environments, guarded_score, log_extra)


REWARD_FUNCS: dict[str, Callable[..., list[float]]] = {"outcome": outcome_reward, "guarded": guarded_reward}


def reward_func(scorer: str) -> Callable[..., list[float]]:
    try:
        return REWARD_FUNCS[scorer]
    except KeyError:
        raise ValueError(f"no refund reward for scorer {scorer!r}; use one of {sorted(REWARD_FUNCS)}") from None


def eligibility(environments: Sequence[Any], inputs: Sequence[dict] | None = None) -> list[bool]:
    """Per completion, whether it may teach: the eligibility its reward function recorded."""
    flags = []
    for environment in environments:
        if environment.score is None:
            raise RuntimeError("an environment has no score; the refund reward function must run before the veto")
        flags.append(bool(environment.score.eligible))
    return flags
