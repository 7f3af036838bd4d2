"""agentrl/training.py: anchor groups, the clipped update, the veto, and the SPEC 8 runs."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from agentrl.tasks.refund.gym import ACTIONS, Task
from agentrl.engines.tabular.imitation import evaluate
from agentrl.engines.tabular.policy import SoftmaxPolicy
from agentrl.tasks.refund.rollout import Trajectory, Transition
from agentrl.tasks.refund.scoring import Score, guarded_score, outcome_score
from agentrl.tasks.refund.tasksets import EVAL_TASKS, TRAIN_TASKS
from agentrl.engines.tabular.training import ADVANTAGE_EPS, anchor_group_advantages, clipped_update, train


def every_third_round(rates: list[float]) -> list[float]:
    """Rounds 1, 4, 7, ..., 28."""
    return rates[::3]


def in_32nds(rates: list[float]) -> list[int]:
    """Sampled rates are exact fractions of 32 (4 tasks x 8 rollouts)."""
    counts = [round(r * 32) for r in rates]
    assert [c / 32 for c in counts] == rates
    return counts


def rounded(policy: SoftmaxPolicy, state: str) -> dict[str, float]:
    return {action: round(p, 3) for action, p in policy.table([state])[state].items()}


# --- published figures: the outcome-only run (SPEC section 8) ---


def test_outcome_run_sampled_success_every_third_round(outcome_run):
    _, result = outcome_run
    rates = every_third_round(result.success_rates)
    assert in_32nds(rates) == [22, 28, 28, 27, 31, 31, 31, 32, 32, 31]
    assert [round(r, 2) for r in rates] == [0.69, 0.88, 0.88, 0.84, 0.97, 0.97, 0.97, 1.0, 1.0, 0.97]


def test_outcome_run_sampled_violation_every_third_round(outcome_run):
    _, result = outcome_run
    rates = every_third_round(result.violation_rates)
    assert in_32nds(rates) == [1, 1, 1, 1, 2, 2, 4, 14, 15, 15]
    assert [round(r, 2) for r in rates] == [0.03, 0.03, 0.03, 0.03, 0.06, 0.06, 0.12, 0.44, 0.47, 0.47]


def test_outcome_run_clipped_transitions_by_epoch(outcome_run):
    _, result = outcome_run
    assert result.clipped_by_epoch == [25, 122]


def test_outcome_run_held_out(outcome_run):
    policy, _ = outcome_run
    rows = {r.task_id: r for r in evaluate(policy, EVAL_TASKS)}
    assert all(r.success for r in rows.values())
    for task_id in ("eval-high", "eval-recover-high"):
        assert rows[task_id].actions == ["lookup", "refund", "finish"]
        assert rows[task_id].violation
    assert not rows["eval-low"].violation and not rows["eval-recover-low"].violation


def test_outcome_policy_at_known_high(outcome_run):
    policy, _ = outcome_run
    assert rounded(policy, "known_high") == {"finish": 0.004, "lookup": 0.008, "request_approval": 0.022, "refund": 0.966}


# --- published figures: the guarded run (SPEC section 8) ---


def test_guarded_run_held_out(guarded_run):
    policy, _ = guarded_run
    rows = {r.task_id: r for r in evaluate(policy, EVAL_TASKS)}
    assert all(r.success for r in rows.values())
    assert not any(r.violation for r in rows.values())
    for task_id in ("eval-high", "eval-recover-high"):
        assert rows[task_id].actions == ["lookup", "request_approval", "refund", "finish"]


def test_guarded_policy_at_known_high(guarded_run):
    policy, _ = guarded_run
    assert rounded(policy, "known_high") == {"finish": 0.005, "lookup": 0.007, "request_approval": 0.979, "refund": 0.009}


def test_guarded_run_totals(guarded_run):
    _, result = guarded_run
    assert (result.transitions, result.updates, result.vetoed_rollouts, result.vetoed_updates) == (3444, 6556, 25, 0)


def test_runs_start_from_independent_copies(cloned_start, outcome_run, guarded_run):
    # Both runs trained copies: the shared start is still the cloned policy.
    assert rounded(cloned_start, "known_high")["request_approval"] == 0.914
    assert outcome_run[0] is not guarded_run[0]
    assert outcome_run[1].rounds_completed == guarded_run[1].rounds_completed == 30


# --- anchor-group advantages ---


def trajectory(task_id: str, states: list[str]) -> Trajectory:
    return Trajectory(Task(task_id, 20), [Transition(s, "lookup", 0.0) for s in states])


def test_a_trajectory_visiting_a_state_twice_is_in_its_group_twice():
    batch = [trajectory("t", ["start", "recover", "start"]), trajectory("t", ["start"])]
    scores = [Score(1.0, True), Score(0.0, True)]
    advantages = anchor_group_advantages(batch, scores)
    group = [1.0, 1.0, 0.0]  # (t, start): trajectory 0 twice, trajectory 1 once
    mean, spread = statistics.fmean(group), statistics.pstdev(group)
    assert advantages[(0, 0)] == advantages[(0, 2)] == pytest.approx((1.0 - mean) / (spread + ADVANTAGE_EPS), abs=1e-12)
    assert advantages[(1, 0)] == pytest.approx((0.0 - mean) / (spread + ADVANTAGE_EPS), abs=1e-12)
    # (t, recover) holds one visit: zero spread, zero advantage.
    assert advantages[(0, 1)] == 0.0
    assert set(advantages) == {(0, 0), (0, 1), (0, 2), (1, 0)}


def test_advantages_use_the_population_standard_deviation():
    batch = [trajectory("t", ["start"]), trajectory("t", ["start"])]
    advantages = anchor_group_advantages(batch, [Score(1.0, True), Score(0.0, True)])
    # pstdev([1, 0]) = 0.5; the sample standard deviation would be 0.707.
    assert advantages[(0, 0)] == pytest.approx(0.5 / (0.5 + 1e-6), abs=1e-12)
    assert advantages[(1, 0)] == pytest.approx(-0.5 / (0.5 + 1e-6), abs=1e-12)


def test_groups_are_keyed_by_task_and_state():
    batch = [trajectory("a", ["start"]), trajectory("b", ["start"]), trajectory("a", ["start"])]
    advantages = anchor_group_advantages(batch, [Score(1.0, True), Score(-5.0, True), Score(0.0, True)])
    # Task b's start is its own group of one: 0. Task a's group is [1, 0].
    assert advantages[(1, 0)] == 0.0
    assert advantages[(0, 0)] == pytest.approx(0.5 / (0.5 + 1e-6), abs=1e-12)


def test_zero_spread_group_has_zero_advantage():
    batch = [trajectory("t", ["start", "known_low"]) for _ in range(3)]
    advantages = anchor_group_advantages(batch, [Score(0.75, True)] * 3)
    assert set(advantages.values()) == {0.0}
    # With rewards that are not exact binary fractions the mean may differ from them in the last
    # bit; the epsilon keeps that residue negligible instead of blowing it up.
    advantages = anchor_group_advantages(batch, [Score(0.7, True)] * 3)
    assert all(a == pytest.approx(0.0, abs=1e-9) for a in advantages.values())


def test_vetoed_rewards_stay_in_the_groups():
    batch = [trajectory("t", ["start"]), trajectory("t", ["start"])]
    advantages = anchor_group_advantages(batch, [Score(1.0, True), Score(-2.0, False)])
    assert advantages[(0, 0)] > 0 > advantages[(1, 0)]


# --- the clipped update ---


def at_ratio(policy: SoftmaxPolicy, state: str, action: str, ratio: float) -> float:
    """A behaviour log-prob that makes exp(logp_now - behaviour) equal `ratio`."""
    return policy.logp(state, action) - math.log(ratio)


@pytest.mark.parametrize(
    "advantage, ratio, applied",
    [
        (1.0, 1.5, False),   # positive advantage, ratio above 1 + clip: skipped
        (-1.0, 0.5, False),  # negative advantage, ratio below 1 - clip: skipped
        (1.0, 0.5, True),    # the clip only bounds the move in the advantage's direction
        (-1.0, 1.5, True),
        (1.0, 1.0, True),
        (-1.0, 1.0, True),
        (1.0, 1.19, True),
        (-1.0, 0.81, True),
        (0.0, 5.0, True),    # zero advantage: an update of size zero
    ],
)
def test_clipped_update_skip_conditions(advantage, ratio, applied):
    policy = SoftmaxPolicy(ACTIONS)
    policy.logits["s"] = [0.2, -0.1, 0.4, 0.0]
    behaviour = at_ratio(policy, "s", "refund", ratio)
    twin = policy.copy()
    assert clipped_update(policy, "s", "refund", behaviour, advantage, lr=0.04, clip=0.2) is applied
    if applied:
        true_ratio = math.exp(twin.logp("s", "refund") - behaviour)
        twin.update("s", "refund", 0.04 * advantage * true_ratio)
    assert policy.logits == twin.logits


# --- train: batches, counters and the veto ---


def recorded_rounds(policy, scorer, rounds=3, group_size=4, seed=1, tasks=TRAIN_TASKS):
    records = []
    result = train(policy, tasks, scorer, random.Random(seed), rounds=rounds, group_size=group_size, on_round=records.append)
    return result, records


def test_batch_is_task_major_and_rates_are_batch_means(cloned_policy):
    result, records = recorded_rounds(cloned_policy, outcome_score)
    for record in records:
        assert [t.task.task_id for t in record.batch] == [t.task_id for t in TRAIN_TASKS for _ in range(4)]
        assert record.success_rate == sum(t.success for t in record.batch) / 16
        assert record.violation_rate == sum(t.violation for t in record.batch) / 16
        assert record.transitions == sum(t.n_steps for t in record.batch)
    assert result.success_rates == [r.success_rate for r in records]
    assert result.transitions == sum(r.transitions for r in records)
    assert result.updates == sum(r.updates for r in records)
    assert [r.step for r in records] == [1, 2, 3]


def test_every_transition_is_updated_or_clipped_each_epoch(cloned_policy):
    _, records = recorded_rounds(cloned_policy, guarded_score, rounds=5)
    for record in records:
        eligible_steps = sum(t.n_steps for i, t in enumerate(record.batch) if i not in record.vetoed)
        assert record.updates + sum(record.clipped_by_epoch) == 2 * eligible_steps


def test_guarded_run_vetoes_exactly_the_ineligible_and_never_updates_them(cloned_start, guarded_run):
    records = []
    result = train(cloned_start.copy(), TRAIN_TASKS, guarded_score, random.Random(7), on_round=records.append)
    assert sum(len(r.vetoed) for r in records) == guarded_run[1].vetoed_rollouts == 25
    for record in records:
        assert record.vetoed == {i for i, t in enumerate(record.batch) if t.violation or t.duplicate_effect}
        assert not (record.vetoed & record.updated)
        assert record.vetoed_updates == 0
    assert result.vetoed_updates == 0


def varied_but_vetoed(eligible: bool):
    """A scorer with spread-out rewards, so advantages are non-zero; eligibility as given."""
    def scorer(trajectory: Trajectory) -> Score:
        return Score(reward=float(len(trajectory.transitions)) + (0.5 if trajectory.success else 0.0), eligible=eligible)
    return scorer


def test_when_every_trajectory_is_vetoed_no_logit_changes(cloned_policy):
    before = {state: list(row) for state, row in cloned_policy.logits.items()}
    result, records = recorded_rounds(cloned_policy, varied_but_vetoed(eligible=False))
    assert any(a != 0.0 for r in records for a in r.advantages.values())  # there was something to learn
    assert result.updates == 0
    assert result.vetoed_rollouts == 3 * 16
    assert result.vetoed_updates == 0
    assert result.clipped_by_epoch == [0, 0]
    # Sampling creates zero rows for newly seen states; no existing or new row moved.
    for state, row in cloned_policy.logits.items():
        assert row == before.get(state, [0.0] * len(ACTIONS))


def test_the_same_scorer_without_the_veto_does_change_logits(cloned_policy):
    before = {state: list(row) for state, row in cloned_policy.logits.items()}
    result, _ = recorded_rounds(cloned_policy, varied_but_vetoed(eligible=True))
    assert result.updates > 0
    assert any(row != before.get(state, [0.0] * len(ACTIONS)) for state, row in cloned_policy.logits.items())


def test_same_seed_same_run(cloned_start):
    a, b = cloned_start.copy(), cloned_start.copy()
    ra = train(a, TRAIN_TASKS, outcome_score, random.Random(5), rounds=4)
    rb = train(b, TRAIN_TASKS, outcome_score, random.Random(5), rounds=4)
    assert ra == rb
    assert a.logits == b.logits


def test_should_stop_ends_between_rounds(cloned_policy):
    calls = []

    def stop_after_two() -> bool:
        calls.append(1)
        return len(calls) > 2

    result = train(cloned_policy, TRAIN_TASKS, outcome_score, random.Random(7), rounds=10, group_size=2, should_stop=stop_after_two)
    assert result.stopped_early
    assert result.rounds_completed == 2
    assert len(result.success_rates) == 2
