"""agentrl/policy.py: the tabular softmax policy (SPEC section 1)."""

from __future__ import annotations

import math
import random

import pytest

from agentrl.tasks.refund.gym import ACTIONS
from agentrl.engines.tabular.policy import SoftmaxPolicy


def test_actions_are_the_refund_tools_in_spec_order():
    assert ACTIONS == ("finish", "lookup", "request_approval", "refund")
    assert SoftmaxPolicy(ACTIONS).actions == ACTIONS


def test_unseen_state_gets_a_zero_row_and_is_uniform():
    policy = SoftmaxPolicy(ACTIONS)
    assert policy.probabilities("start") == [0.25] * 4
    assert policy.logits == {"start": [0.0, 0.0, 0.0, 0.0]}


def test_probabilities_are_stable_for_large_logits():
    policy = SoftmaxPolicy(ACTIONS)
    # exp(1000) overflows a float; subtracting the row max first keeps it finite.
    policy.logits["s"] = [1000.0, 1000.0, -1000.0, 999.0]
    probs = policy.probabilities("s")
    assert all(math.isfinite(p) for p in probs)
    assert sum(probs) == pytest.approx(1.0, abs=1e-12)
    e = math.exp(-1.0)
    assert probs == pytest.approx([1 / (2 + e), 1 / (2 + e), 0.0, e / (2 + e)], abs=1e-12)


def test_greedy_breaks_ties_toward_the_first_action():
    policy = SoftmaxPolicy(ACTIONS)
    assert policy.greedy("fresh") == "finish"
    policy.logits["s"] = [0.0, 2.0, 2.0, 1.0]
    assert policy.greedy("s") == "lookup"


def test_logp_is_log_of_current_probability():
    policy = SoftmaxPolicy(ACTIONS)
    policy.logits["s"] = [0.5, -1.0, 2.0, 0.0]
    probs = policy.probabilities("s")
    for index, action in enumerate(ACTIONS):
        assert policy.logp("s", action) == pytest.approx(math.log(probs[index]), abs=1e-12)


def test_update_adds_step_times_onehot_minus_probabilities_before_the_change():
    policy = SoftmaxPolicy(ACTIONS)
    before = [0.3, -0.2, 1.1, 0.0]
    policy.logits["s"] = list(before)
    p = policy.probabilities("s")
    step = 0.7
    policy.update("s", "request_approval", step)
    onehot = [0.0, 0.0, 1.0, 0.0]
    expected = [before[i] + step * (onehot[i] - p[i]) for i in range(4)]
    assert policy.logits["s"] == pytest.approx(expected, abs=1e-12)


def test_update_touches_only_its_own_state():
    policy = SoftmaxPolicy(ACTIONS)
    policy.logits["other"] = [1.0, 2.0, 3.0, 4.0]
    policy.update("s", "refund", 0.25)
    assert policy.logits["other"] == [1.0, 2.0, 3.0, 4.0]


def test_negative_step_moves_away_from_the_action():
    policy = SoftmaxPolicy(ACTIONS)
    policy.update("s", "refund", -1.0)
    probs = policy.probabilities("s")
    assert probs[3] < 0.25
    assert probs[0] == probs[1] == probs[2] > 0.25


def test_sample_draws_with_rng_choices_and_returns_the_behaviour_logp():
    policy = SoftmaxPolicy(ACTIONS)
    policy.logits["s"] = [0.1, 0.9, -0.4, 0.3]
    probs = policy.probabilities("s")
    rng, twin = random.Random(11), random.Random(11)
    for _ in range(50):
        action, logp = policy.sample("s", rng)
        index = twin.choices(range(4), weights=probs, k=1)[0]
        assert action == ACTIONS[index]
        assert logp == math.log(probs[index])


def test_copy_is_independent():
    policy = SoftmaxPolicy(ACTIONS)
    policy.update("s", "lookup", 1.0)
    twin = policy.copy()
    twin.update("s", "refund", 5.0)
    twin.update("t", "finish", 1.0)
    assert policy.logits["s"] != twin.logits["s"]
    assert "t" not in policy.logits
    policy.update("s", "finish", 3.0)
    assert twin.logits["s"][0] != policy.logits["s"][0]


def test_table_maps_states_to_action_probabilities():
    policy = SoftmaxPolicy(ACTIONS)
    policy.update("a", "lookup", 1.0)
    table = policy.table()
    assert list(table) == ["a"]
    assert list(table["a"]) == list(ACTIONS)
    assert policy.table(["b"]) == {"b": dict.fromkeys(ACTIONS, 0.25)}
