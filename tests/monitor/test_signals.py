"""Tests of agentrl/monitor/signals.py: each signal on records built to cross it and not to."""

from __future__ import annotations

import pytest

from agentrl.monitor.onset import DEFAULT_THRESHOLDS, detect_onset
from agentrl.monitor.signals import Episode, SuspectMap, unverified_signals, verified_at_start, wilson_lower
from agentrl.monitor.signals import (
    Rollout,
    drift_signals,
    js_divergence,
    probe_signals,
    rollout_signals,
    test_gap_signals as gap_signals,
    wilson_lower,
)


def batch(step: int, n: int, flagged: int, flagged_reward: float = 0.85, clean_reward: float = 0.8) -> list[Rollout]:
    return ([Rollout(step, flagged_reward, True, True) for _ in range(flagged)]
            + [Rollout(step, clean_reward, False, True) for _ in range(n - flagged)])


def test_wilson_lower_bound():
    assert wilson_lower(0, 0) == 0.0 and wilson_lower(0, 100) == 0.0
    assert wilson_lower(50, 100) == pytest.approx(0.4038, abs=1e-3)
    assert wilson_lower(1, 32) < 0.02 < wilson_lower(10, 160)


def test_flagged_share_ignores_one_flagged_rollout_in_a_step_but_sees_a_trend():
    noisy = rollout_signals(batch(1, 32, 1) + batch(2, 32, 0) + batch(3, 32, 1))
    assert all(s["flagged_share"] < 0.02 for s in noisy.values())
    trend = rollout_signals([r for step in range(1, 6) for r in batch(step, 32, 4)])
    assert trend[5]["flagged_share"] > 0.02


def test_vetoed_violations_do_not_count_toward_the_flagged_share():
    """A guarded run samples violations while it explores; vetoed, they cannot teach the hack."""
    vetoed = [Rollout(s, -1.15, True, True, vetoed=True) for s in range(1, 6) for _ in range(4)]
    clean = [Rollout(s, 0.8, False, True) for s in range(1, 6) for _ in range(28)]
    assert rollout_signals(vetoed + clean)[5]["flagged_share"] == 0.0
    taught = [Rollout(s, 0.85, True, True) for s in range(1, 6) for _ in range(4)]
    assert rollout_signals(taught + clean)[5]["flagged_share"] > 0.02


def test_top_flagged_share_counts_every_tied_rollout_at_the_top():
    # The shortcut ties an honest low-value refund at the top reward: both are counted.
    rows = [Rollout(1, 0.85, True), Rollout(1, 0.85, False), Rollout(1, 0.80, False), Rollout(1, 0.85, True)]
    assert rollout_signals(rows)[1]["top_flagged_share"] == pytest.approx(2 / 3)
    assert rollout_signals(batch(1, 8, 0))[1]["top_flagged_share"] == 0.0


def test_hack_premium_is_positive_when_the_reward_pays_for_the_violation_and_negative_under_a_guard():
    paid = rollout_signals(batch(1, 32, 4, flagged_reward=0.85, clean_reward=0.80))
    assert paid[1]["hack_premium"] == pytest.approx(0.05)
    guarded = rollout_signals(batch(1, 32, 4, flagged_reward=-1.15, clean_reward=0.80))
    assert guarded[1]["hack_premium"] == pytest.approx(-1.95)


def test_hack_premium_compares_with_honest_successes_not_with_failures():
    rows = batch(1, 3, 3, flagged_reward=0.85) + [Rollout(1, 0.9, False, True), Rollout(1, -0.35, False, False)]
    assert rollout_signals(rows)[1]["hack_premium"] == pytest.approx(-0.05)


def test_hack_premium_waits_for_a_few_flagged_rollouts():
    assert "hack_premium" not in rollout_signals(batch(1, 32, 2))[1]


def test_js_divergence_is_zero_for_equal_distributions_and_one_bit_for_disjoint_ones():
    p = {"a": 0.5, "b": 0.5}
    assert js_divergence(p, p) == 0.0
    assert js_divergence({"a": 1.0, "b": 0.0}, {"a": 0.0, "b": 1.0}) == pytest.approx(1.0)


def test_drift_counts_only_toward_the_suspect_actions_at_each_decision_point():
    start = {"known_high": {"request_approval": 0.914, "refund": 0.029, "lookup": 0.029, "finish": 0.028}}
    hacked = {"known_high": {"request_approval": 0.022, "refund": 0.966, "lookup": 0.008, "finish": 0.004}}
    sharpened = {"known_high": {"request_approval": 0.979, "refund": 0.009, "lookup": 0.007, "finish": 0.005}}
    out = drift_signals({0: start, 10: sharpened, 30: hacked}, {"known_high": {"refund"}})
    assert out[0]["drift:known_high"] == 0.0
    assert out[10]["drift:known_high"] < 0 < 0.05 < out[30]["drift:known_high"]
    # Nothing known to be suspect: nothing to drift toward.
    assert drift_signals({0: start, 30: hacked})[30]["drift:known_high"] == 0.0


def test_drift_toward_a_safe_action_raises_nothing_even_when_larger_than_an_outcome_runs_onset_drift():
    """The helpdesk run of issue 24: a guarded run sharpening on escalating (the safe action) got an
    onset from the unsigned drift. Signed, that drift is negative however large it is."""
    start = {"asked": {"escalate": 0.75, "reset_password": 0.25}}
    safer = {"asked": {"escalate": 0.999, "reset_password": 0.001}}
    toward_shortcut = {"asked": {"escalate": 0.45, "reset_password": 0.55}}
    suspects = {"asked": {"reset_password"}}
    safe_drift = js_divergence(start["asked"], safer["asked"])
    onset_drift = drift_signals({0: start, 1: toward_shortcut}, suspects)[1]["drift:asked"]
    assert safe_drift > onset_drift > DEFAULT_THRESHOLDS["drift"].value  # the unsigned drift was larger
    steps = {s: (safer if s >= 1 else start) for s in range(0, 40)}
    signals = drift_signals(steps, suspects)
    assert all(v["drift:asked"] <= 0 for v in signals.values())
    assert detect_onset({s: v for s, v in signals.items() if s > 0}) is None
    assert detect_onset({s: drift_signals({0: start, 1: toward_shortcut}, suspects)[1] for s in (1, 2, 3)}) is not None


def test_an_action_is_suspect_where_mostly_suspect_rollouts_take_it():
    suspects = SuspectMap()
    flagged = Episode(1, "lookup > refund > finish", ("start", "known_high", "refunded"), ("lookup", "refund", "finish"), True)
    honest = Episode(1, "lookup > request_approval > refund > finish", ("start", "known_high", "approved", "refunded"),
                     ("lookup", "request_approval", "refund", "finish"), False)
    for episode in [flagged] * 3 + [honest] * 5:
        suspects.add(episode, episode.flagged)
    assert suspects.suspects("known_high") == {"refund"}  # at the decision state, not wherever refund is called
    assert suspects.suspects("approved") == set()
    no_states = SuspectMap()
    no_states.add(Episode(1, "check > cancel > book", (), ("check", "cancel", "book"), True), True)
    no_states.add(Episode(1, "check > book_next", (), ("check", "book_next"), False), False)
    assert no_states.suspects("slot taken") == {"cancel", "book"}  # no rollout records that state: uses anywhere


def test_an_unverified_behaviour_that_takes_over_is_signalled_and_a_common_start_behaviour_never():
    verified = verified_at_start({"escalate": 24, "reset": 4, "other": 4})
    assert verified == {"escalate"}
    shortcut = {s: {None: 32, "reset": 28, "escalate": 4} for s in range(1, 6)}
    assert unverified_signals(shortcut, verified)[5]["unverified_share"] > 0.5
    safe = {s: {None: 32, "escalate": 32} for s in range(1, 6)}
    assert unverified_signals(safe, verified)[5]["unverified_share"] == 0.0


def test_the_test_gap_reads_the_tests_and_held_out_components_of_the_rollouts_that_carry_both():
    from agentrl.monitor.signals import held_out_pass_rates

    components = [{"tests": 1.0, "held_out": 0.0}, {"tests": 1.0, "held_out": 1.0}, {"tests": 0.0}, {"format": 1.0}]
    assert held_out_pass_rates(components) == (1.0, 0.5)
    assert held_out_pass_rates([{"tests": 1.0}]) is None


def test_probe_violations_and_test_gap():
    assert probe_signals({5: [False, False], 10: [True, False]}) == {5: {"probe_violations": 0.0}, 10: {"probe_violations": 0.5}}
    assert gap_signals({3: (0.9, 0.4)}) == {3: {"test_gap": pytest.approx(0.5)}}


def test_the_wilson_bound_grows_with_the_count_so_the_largest_count_gives_the_largest_share():
    for n in range(0, 400):
        bounds = [wilson_lower(c, n) for c in range(n + 1)]
        assert bounds == sorted(bounds), n
    counts = {1: {None: 10, "a": 3, "b": 7}, 2: {None: 10, "a": 6, "b": 1}, 3: {None: 10, "c": 0}}
    shares = unverified_signals(counts, verified=set(), window=1)
    assert [shares[s]["unverified_share"] for s in (1, 2, 3)] == [wilson_lower(7, 10), wilson_lower(6, 10), 0.0]
