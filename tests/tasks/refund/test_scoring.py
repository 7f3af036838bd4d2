"""agentrl/scoring.py: reward and permission kept separate (SPEC section 6)."""

from __future__ import annotations

import itertools

import pytest

from agentrl.tasks.refund.gym import ACTIONS, Task
from agentrl.engines.tabular.policy import SoftmaxPolicy
from agentrl.tasks.refund.rollout import Trajectory, Transition, rollout
from agentrl.tasks.refund.scoring import SCORE_FUNCTIONS, get_scorer, guarded_score, outcome_score


def shortcut_trajectory(amount: int = 90) -> Trajectory:
    """lookup, refund, finish, driven through the real gym."""
    policy = SoftmaxPolicy(ACTIONS)
    for state, action in {"start": "lookup", "known_high": "refund", "known_low": "refund", "refunded": "finish"}.items():
        policy.logits[state] = [10.0 if a == action else 0.0 for a in ACTIONS]
    trajectory = rollout(policy, Task("shortcut", amount), greedy=True)
    assert trajectory.actions == ["lookup", "refund", "finish"]
    return trajectory


def made_up(n_steps: int, success: bool, violation: bool, duplicate: bool) -> Trajectory:
    transitions = [Transition("start", "lookup", 0.0)] * n_steps
    return Trajectory(Task("t", 90), transitions, success=success, violation=violation, duplicate_effect=duplicate)


# --- published figure (SPEC section 8) ---


def test_shortcut_trajectory_scores():
    trajectory = shortcut_trajectory(90)
    outcome = outcome_score(trajectory)
    assert outcome.reward == pytest.approx(0.85, abs=1e-9)
    assert outcome.eligible
    guarded = guarded_score(trajectory)
    assert guarded.reward == pytest.approx(-1.15, abs=1e-9)
    assert not guarded.eligible


# --- behaviour ---


def test_outcome_components():
    score = outcome_score(shortcut_trajectory(90))
    assert set(score.components) == {"outcome", "step_cost"}
    assert score.components["outcome"] == 1.0
    assert score.components["step_cost"] == pytest.approx(-0.15, abs=1e-9)


def test_guarded_components_are_each_term():
    score = guarded_score(shortcut_trajectory(90))
    assert score.components == pytest.approx(
        {"outcome": 1.0, "violation_penalty": -2.0, "duplicate_penalty": 0.0, "step_cost": -0.15}, abs=1e-9
    )


def test_outcome_only_is_always_eligible():
    for flags in itertools.product([False, True], repeat=3):
        assert outcome_score(made_up(4, *flags)).eligible


@pytest.mark.parametrize("success, violation, duplicate", list(itertools.product([False, True], repeat=3)))
def test_guarded_reward_and_components_add_up(success, violation, duplicate):
    trajectory = made_up(5, success, violation, duplicate)
    score = guarded_score(trajectory)
    expected = (1 if success else 0) - 2.0 * violation - 1.0 * duplicate - 0.05 * 5
    assert score.reward == pytest.approx(expected, abs=1e-9)
    assert sum(score.components.values()) == pytest.approx(score.reward, abs=1e-9)


@pytest.mark.parametrize("success, n_steps", [(True, 1), (True, 7), (False, 3)])
@pytest.mark.parametrize("violation, duplicate", [(True, False), (False, True), (True, True), (False, False)])
def test_quality_cannot_buy_permission(success, n_steps, violation, duplicate):
    # Eligibility reads only the verifier's flags, whatever the reward.
    score = guarded_score(made_up(n_steps, success, violation, duplicate))
    assert score.eligible == (not violation and not duplicate)


def test_a_clean_success_beats_the_shortcut_under_guarded_only():
    clean = Trajectory(Task("t", 90), [Transition("s", "a", 0.0)] * 4, success=True)
    assert guarded_score(clean).reward > guarded_score(shortcut_trajectory(90)).reward
    assert outcome_score(clean).reward < outcome_score(shortcut_trajectory(90)).reward


def test_get_scorer():
    assert get_scorer("outcome") is outcome_score
    assert get_scorer("guarded") is guarded_score
    from agentrl.scorers import SCORERS

    assert set(SCORE_FUNCTIONS) == set(SCORERS) == {"outcome", "guarded"}  # the refund task implements every scorer
    with pytest.raises(ValueError, match="no scorer 'nope'"):
        get_scorer("nope")
