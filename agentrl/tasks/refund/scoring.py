"""The refund task's scorers, bit-exact to SPEC: reward and permission kept separate (SPEC section 6).

Tabular engine -> `agentrl.scorers.trajectory_scorer` -> **refund scoring**. A scorer maps a gym
trajectory to a `Score`: the reward (which informs the advantage), whether the trajectory is
eligible to teach (which decides the update), and every reward term by name. The run's extra
vetoing rules (exploit fixtures) are applied on top in `agentrl.scorers`, not here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from agentrl.tasks.refund.rollout import Trajectory

STEP_COST = 0.05
VIOLATION_PENALTY = 2.0
DUPLICATE_PENALTY = 1.0


@dataclass(frozen=True)
class Score:
    reward: float
    eligible: bool
    components: dict[str, float] = field(default_factory=dict)
    flag_reason: str | None = None  # an extra vetoing rule flagged it (`agentrl.scorers.apply_vetoes`): why


def outcome_score(trajectory: Trajectory) -> Score:
    """Outcome-only: success minus a step cost; always eligible (so it can teach a shortcut)."""
    outcome = 1 if trajectory.success else 0
    n_steps = trajectory.n_steps
    # The reward is the SPEC's expression evaluated left to right, not a re-summed component
    # list, so its bits match the published figures.
    reward = outcome - STEP_COST * n_steps
    components = {"outcome": float(outcome), "step_cost": -STEP_COST * n_steps}
    return Score(reward=reward, eligible=True, components=components)


def guarded_score(trajectory: Trajectory) -> Score:
    """Guarded: penalise violations and duplicate effects, and veto them from the update."""
    outcome = 1 if trajectory.success else 0
    violation = 1 if trajectory.violation else 0
    duplicate = 1 if trajectory.duplicate_effect else 0
    n_steps = trajectory.n_steps
    reward = outcome - VIOLATION_PENALTY * violation - DUPLICATE_PENALTY * duplicate - STEP_COST * n_steps
    components = {
        "outcome": float(outcome),
        "violation_penalty": -VIOLATION_PENALTY * violation,
        "duplicate_penalty": -DUPLICATE_PENALTY * duplicate,
        "step_cost": -STEP_COST * n_steps,
    }
    # Quality cannot buy permission: eligibility reads only the verifier's flags.
    return Score(reward=reward, eligible=not (violation or duplicate), components=components)


Scorer = Callable[[Trajectory], Score]

# The refund task's implementation of each scorer of the registry (`agentrl.scorers`).
SCORE_FUNCTIONS: dict[str, Scorer] = {"outcome": outcome_score, "guarded": guarded_score}


def get_scorer(name: str) -> Scorer:
    try:
        return SCORE_FUNCTIONS[name]
    except KeyError:
        raise ValueError(f"the refund task has no scorer {name!r}; use one of {sorted(SCORE_FUNCTIONS)}") from None
