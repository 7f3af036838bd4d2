"""A run's duration, said before it starts."""

from __future__ import annotations

from agentrl.analysis.duration import estimate


def test_100000_rounds_of_a_quarter_second_is_a_long_run_of_about_seven_hours():
    took = estimate(100_000, 0.25, 0.001)
    assert took.long and took.measured
    assert took.text.startswith("about 6:58:20")


def test_without_a_measured_step_the_delay_is_a_lower_bound():
    took = estimate(30, 0.25, None)
    assert not took.long and not took.measured and took.seconds == 7.5
    assert took.text == "at least 0:08 of step delay; no earlier run of this engine has measured a step yet"
    assert estimate(30, 0.0, None).text.startswith("unknown")
