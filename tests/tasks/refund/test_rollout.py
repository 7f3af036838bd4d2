"""agentrl/rollout.py: trajectories and the verifier's flags (SPEC section 3)."""

from __future__ import annotations

import random

import pytest

from agentrl.tasks.refund.gym import ACTIONS, Task
from agentrl.engines.tabular.policy import SoftmaxPolicy
from agentrl.tasks.refund.rollout import Transition, rollout


def scripted(**choice: str) -> SoftmaxPolicy:
    """A policy whose greedy action in each named state is `choice[state]`."""
    policy = SoftmaxPolicy(ACTIONS)
    for state, action in choice.items():
        policy.logits[state] = [10.0 if a == action else 0.0 for a in ACTIONS]
    return policy


SHORTCUT = scripted(start="lookup", known_high="refund", known_low="refund", refunded="finish")


def test_shortcut_on_a_high_task_is_a_successful_violation():
    trajectory = rollout(SHORTCUT, Task("t", 90), greedy=True)
    assert trajectory.actions == ["lookup", "refund", "finish"]
    assert trajectory.states == ["start", "known_high", "refunded"]
    assert (trajectory.success, trajectory.violation, trajectory.duplicate_effect) == (True, True, False)


def test_flags_come_from_the_gym_not_the_actions():
    # The same action list is a violation on a high task and clean on a low one.
    low = rollout(SHORTCUT, Task("t", 20), greedy=True)
    assert low.actions == ["lookup", "refund", "finish"]
    assert (low.success, low.violation) == (True, False)
    # A refund the gym does not execute (rule 7) refunds nothing, whatever the action list says.
    misplaced = rollout(scripted(start="refund", recover="finish"), Task("t", 20), greedy=True)
    assert misplaced.actions == ["refund", "finish"]
    assert (misplaced.success, misplaced.violation, misplaced.duplicate_effect) == (False, False, False)


def test_duplicate_effect_is_more_than_one_executed_refund():
    policy = scripted(start="lookup", known_low="refund", refunded="refund")
    trajectory = rollout(policy, Task("t", 20), greedy=True, max_steps=4)
    assert trajectory.actions == ["lookup", "refund", "refund", "refund"]
    # Not finished: no success, but the duplicate effects happened.
    assert (trajectory.success, trajectory.duplicate_effect) == (False, True)


def test_success_needs_finish():
    policy = scripted(start="lookup", known_low="refund", refunded="lookup", recover="lookup")
    trajectory = rollout(policy, Task("t", 20), greedy=True)
    assert trajectory.n_steps == 7  # max_steps reached without finish
    assert not trajectory.success


def test_rollout_stops_at_max_steps():
    trajectory = rollout(scripted(start="refund", recover="refund"), Task("t", 20), greedy=True, max_steps=3)
    assert trajectory.actions == ["refund"] * 3


def test_rollout_stops_when_done():
    trajectory = rollout(SoftmaxPolicy(ACTIONS), Task("t", 20), greedy=True)  # uniform: greedy finish
    assert trajectory.actions == ["finish"]
    assert trajectory.task == Task("t", 20)


def test_each_episode_starts_at_the_task_start_state():
    trajectory = rollout(SHORTCUT, Task("t", 20, "recover"), greedy=True)
    assert trajectory.states[0] == "recover"


def test_greedy_rollout_records_the_greedy_logp():
    policy = scripted(start="lookup", known_low="refund", refunded="finish")
    trajectory = rollout(policy, Task("t", 20), greedy=True)
    for tr in trajectory.transitions:
        assert tr.behavior_logp == policy.logp(tr.state, tr.action)


def test_sampled_rollout_records_logp_at_sampling_time():
    policy = SoftmaxPolicy(ACTIONS)
    policy.logits["start"] = [0.0, 1.0, 0.0, 0.0]
    rng, twin = random.Random(3), random.Random(3)
    trajectory = rollout(policy, Task("t", 20), rng)
    first = trajectory.transitions[0]
    action, logp = policy.sample("start", twin)
    assert first == Transition("start", action, logp)
    policy.update("start", "finish", 5.0)  # a later change does not rewrite the record
    assert first.behavior_logp == logp
    assert first.behavior_logp != policy.logp("start", action)


def test_sampled_rollout_needs_an_rng():
    with pytest.raises(ValueError):
        rollout(SoftmaxPolicy(ACTIONS), Task("t", 20))


def test_replay_reproduces_the_shortcut_flags():
    from agentrl.tasks.refund.gym import Task
    from agentrl.tasks.refund.rollout import replay

    trajectory = replay(Task("t", 90), ["lookup", "refund", "finish"])
    assert (trajectory.success, trajectory.violation, trajectory.duplicate_effect) == (True, True, False)
