"""agentrl/throughput.py: the declared throughput model (SPEC section 9)."""

from __future__ import annotations

import math

import pytest

from agentrl.analysis.throughput import phase_seconds, throughput_curve, transitions_per_second

# The guarded run's totals (asserted from the run itself in test_training.test_guarded_run_totals).
TRANSITIONS, UPDATES = 3444, 6556


# --- published figures ---


def test_throughput_phase_seconds_on_guarded_totals():
    phases = phase_seconds(TRANSITIONS, UPDATES)
    assert (round(phases.environment), round(phases.sampling), round(phases.update)) == (1033, 103, 13)
    assert phases.environment == pytest.approx(3444 * 0.3, abs=1e-9)
    assert phases.sampling == pytest.approx(3444 * 0.03, abs=1e-9)
    assert phases.update == pytest.approx(6556 * 0.002, abs=1e-9)


def test_throughput_transitions_per_second_curve():
    curve = throughput_curve(TRANSITIONS, UPDATES, (1, 4, 16, 64))
    assert [n for n, _ in curve] == [1, 4, 16, 64]
    assert [round(rate, 1) for _, rate in curve] == [3.0, 9.2, 19.0, 26.0]


def test_throughput_ceiling_about_30():
    ceiling = transitions_per_second(TRANSITIONS, UPDATES, math.inf)
    assert round(ceiling) == 30
    phases = phase_seconds(TRANSITIONS, UPDATES)
    assert ceiling == pytest.approx(TRANSITIONS / (phases.sampling + phases.update), abs=1e-9)


# --- behaviour ---


def test_transitions_per_second_formula():
    phases = phase_seconds(100, 50)
    expected = 100 / (phases.environment / 8 + phases.sampling + phases.update)
    assert transitions_per_second(100, 50, 8) == pytest.approx(expected, abs=1e-9)


def test_more_environments_never_slow_the_model_down():
    rates = [rate for _, rate in throughput_curve(TRANSITIONS, UPDATES)]
    assert rates == sorted(rates)
    assert rates[-1] < transitions_per_second(TRANSITIONS, UPDATES, math.inf)


@pytest.mark.parametrize("n_envs", [0, -1])
def test_non_positive_environment_count_is_refused(n_envs):
    with pytest.raises(ValueError):
        transitions_per_second(TRANSITIONS, UPDATES, n_envs)
