"""agentrl/imitation.py: expert, demonstrations, cloning, DAgger, greedy evaluation (SPEC 5, 8)."""

from __future__ import annotations

import pytest

from agentrl.tasks.refund.gym import ACTIONS, STATES, Task
from agentrl.engines.tabular.imitation import (
    clone_expert,
    dagger_labels,
    dagger_round,
    demonstrations,
    evaluate,
    expert_action,
    fit,
)
from agentrl.engines.tabular.policy import SoftmaxPolicy
from agentrl.tasks.refund.tasksets import EVAL_TASKS, EXPERT_TASKS, TRAIN_TASKS


def rounded(policy: SoftmaxPolicy, state: str) -> dict[str, float]:
    return {action: round(p, 3) for action, p in policy.table([state])[state].items()}


# --- published figures (SPEC section 8) ---


def test_cloned_policy_at_known_high(cloned_policy):
    assert rounded(cloned_policy, "known_high") == {
        "finish": 0.029, "lookup": 0.029, "request_approval": 0.914, "refund": 0.029,
    }


def test_cloned_policy_at_recover_is_uniform(cloned_policy):
    assert "recover" not in cloned_policy.logits  # never visited by the expert
    assert cloned_policy.probabilities("recover") == [0.25, 0.25, 0.25, 0.25]


def test_cloned_policy_held_out_2_of_4_recover_tasks_finish(cloned_policy):
    rows = evaluate(cloned_policy, EVAL_TASKS)
    assert sum(r.success for r in rows) == 2
    by_id = {r.task_id: r for r in rows}
    for task_id in ("eval-recover-low", "eval-recover-high"):
        assert by_id[task_id].actions == ["finish"]
        assert not by_id[task_id].success
    assert by_id["eval-low"].success and by_id["eval-high"].success


def test_one_dagger_round_labels_and_held_out_4_of_4(cloned_policy):
    result = dagger_round(cloned_policy, demonstrations(EXPERT_TASKS), TRAIN_TASKS[2:])
    assert result.labels == [("recover", "lookup"), ("recover", "lookup")]
    rows = evaluate(result.policy, EVAL_TASKS)
    assert [r.success for r in rows] == [True, True, True, True]
    assert not any(r.violation for r in rows)


# --- behaviour ---


@pytest.mark.parametrize(
    "state, action",
    [("start", "lookup"), ("recover", "lookup"), ("known_high", "request_approval"),
     ("known_low", "refund"), ("approved", "refund"), ("refunded", "finish")],
)
def test_expert_action(state, action):
    assert expert_action(state) == action


def test_every_state_has_an_expert_action():
    assert {expert_action(s) for s in STATES} <= set(ACTIONS)


def test_demonstrations_are_state_action_pairs_in_visit_order():
    assert demonstrations(EXPERT_TASKS) == [
        ("start", "lookup"), ("known_low", "refund"), ("refunded", "finish"),
        ("start", "lookup"), ("known_high", "request_approval"), ("approved", "refund"), ("refunded", "finish"),
    ]


def test_fit_is_epochs_of_in_order_updates():
    examples = [("a", "lookup"), ("b", "refund"), ("a", "finish")]
    fitted = fit(SoftmaxPolicy(ACTIONS), examples, epochs=3, lr=0.5)
    manual = SoftmaxPolicy(ACTIONS)
    for _ in range(3):
        for state, action in examples:
            manual.update(state, action, 0.5)
    assert fitted.logits == manual.logits


def test_clone_expert_defaults_are_40_epochs_at_lr_025():
    manual = fit(SoftmaxPolicy(ACTIONS), demonstrations(EXPERT_TASKS), epochs=40, lr=0.25)
    assert clone_expert(EXPERT_TASKS).logits == manual.logits


def test_dagger_labels_are_taken_before_the_learner_steps():
    # A uniform learner finishes at once (greedy tie -> 'finish'): one label per task, for its start.
    labels = dagger_labels(SoftmaxPolicy(ACTIONS), [Task("a", 20), Task("b", 90, "recover")])
    assert labels == [("start", "lookup"), ("recover", "lookup")]


def test_dagger_labels_follow_the_learner_not_the_expert(cloned_policy):
    # The cloned learner looks up, then (at known_high) asks approval, refunds, finishes.
    labels = dagger_labels(cloned_policy, [Task("h", 90)])
    assert labels == [("start", "lookup"), ("known_high", "request_approval"), ("approved", "refund"), ("refunded", "finish")]


def test_dagger_round_leaves_the_cloned_policy_alone(cloned_policy):
    before = {state: list(row) for state, row in cloned_policy.logits.items()}
    dagger_round(cloned_policy, demonstrations(EXPERT_TASKS), TRAIN_TASKS[2:])
    assert cloned_policy.logits == before


def test_evaluate_is_one_greedy_row_per_task(cloned_policy):
    rows = evaluate(cloned_policy, EVAL_TASKS)
    assert [r.task_id for r in rows] == [t.task_id for t in EVAL_TASKS]
    assert rows[1].actions == ["lookup", "request_approval", "refund", "finish"]
    assert evaluate(cloned_policy, EVAL_TASKS) == rows  # greedy: deterministic
