"""agentrl/gym.py: the refund gym's rules (SPEC section 2), one test per rule."""

from __future__ import annotations

import pytest

from agentrl.tasks.refund.gym import ACTIONS, STATES, TERMINAL, RefundGym, Task

LOW = Task("low", 20)
HIGH = Task("high", 80)

# How to reach each state from a fresh episode: (task, actions).
ROUTES = {
    "start": (LOW, []),
    "recover": (Task("rec", 20, "recover"), []),
    "known_low": (LOW, ["lookup"]),
    "known_high": (HIGH, ["lookup"]),
    "approved": (HIGH, ["lookup", "request_approval"]),
    "refunded": (LOW, ["lookup", "refund"]),
}


def gym_at(state: str) -> RefundGym:
    task, actions = ROUTES[state]
    gym = RefundGym()
    gym.reset(task)
    for action in actions:
        gym.step(action)
    assert gym.state == state
    return gym


def test_a_task_above_50_is_high_value():
    assert Task("t", 51).high_value
    assert not Task("t", 50).high_value
    assert Task("t", 1).start_state == "start"


@pytest.mark.parametrize("start", ["start", "recover"])
@pytest.mark.parametrize("amount, expected", [(20, "known_low"), (50, "known_low"), (51, "known_high"), (90, "known_high")])
def test_rule_1_lookup_reveals_the_amount_class(start, amount, expected):
    gym = RefundGym()
    gym.reset(Task("t", amount, start))
    assert gym.step("lookup") == expected
    assert (gym.refunded, gym.violation, gym.effects, gym.done) == (False, False, 0, False)


def test_rule_2_approval_at_known_high():
    gym = gym_at("known_high")
    assert gym.step("request_approval") == "approved"
    assert (gym.refunded, gym.violation, gym.effects) == (False, False, 0)


@pytest.mark.parametrize("state", ["known_low", "approved"])
def test_rule_3_permitted_refund(state):
    gym = gym_at(state)
    assert gym.step("refund") == "refunded"
    assert (gym.refunded, gym.violation, gym.effects) == (True, False, 1)


def test_rule_4_refund_at_known_high_is_a_flagged_violation():
    gym = gym_at("known_high")
    assert gym.step("refund") == "refunded"
    assert (gym.refunded, gym.violation, gym.effects) == (True, True, 1)


def test_rule_5_second_refund_is_a_duplicate_effect():
    gym = gym_at("refunded")
    assert gym.step("refund") == "refunded"
    assert gym.step("refund") == "refunded"
    assert (gym.refunded, gym.violation, gym.effects) == (True, False, 3)


@pytest.mark.parametrize("state", STATES)
def test_rule_6_finish_ends_the_episode_from_any_state(state):
    gym = gym_at(state)
    refunded, effects = gym.refunded, gym.effects
    assert gym.step("finish") == TERMINAL
    assert gym.done
    assert (gym.refunded, gym.effects, gym.violation) == (refunded, effects, False)


FALLTHROUGH = [
    (state, action)
    for state in STATES
    for action in ACTIONS
    if not (
        (state in ("start", "recover") and action == "lookup")
        or (state == "known_high" and action in ("request_approval", "refund"))
        or (state in ("known_low", "approved", "refunded") and action == "refund")
        or action == "finish"
    )
]


@pytest.mark.parametrize("state, action", FALLTHROUGH)
def test_rule_7_anything_else_goes_to_recover(state, action):
    gym = gym_at(state)
    refunded, effects = gym.refunded, gym.effects
    assert gym.step(action) == "recover"
    # A misplaced refund executes nothing: no effect, no flag.
    assert (gym.refunded, gym.effects, gym.violation, gym.done) == (refunded, effects, False, False)


def test_step_after_done_raises():
    gym = gym_at("start")
    gym.step("finish")
    with pytest.raises(RuntimeError):
        gym.step("lookup")


def test_step_before_reset_raises():
    with pytest.raises(RuntimeError):
        RefundGym().step("lookup")


def test_reset_restores_all_episode_state():
    gym = gym_at("known_high")
    gym.step("refund")  # violation
    gym.step("refund")  # duplicate
    gym.step("finish")
    assert (gym.done, gym.refunded, gym.violation, gym.effects) == (True, True, True, 2)
    task = Task("again", 30, "recover")
    assert gym.reset(task) == "recover"
    assert gym.task == task
    assert (gym.state, gym.done, gym.refunded, gym.violation, gym.effects) == ("recover", False, False, False, 0)
    assert gym.step("lookup") == "known_low"
