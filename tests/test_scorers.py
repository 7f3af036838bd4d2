"""Scoring in one place (agentrl/scorers.py, issue 24 item 3): the guard's decision on a rollout
and the extra vetoing rules every engine applies through `apply_vetoes`."""

from __future__ import annotations

import pytest

from agentrl.scorers import Decision, FixtureRef, Veto, apply_vetoes, guard, rule_vetoes
from agentrl.tasks.contract import Verdict

CLEAN = Verdict(violation=False, eligible=True, reason="")


def test_under_guarded_the_verdicts_penalties_are_added_and_the_ineligible_vetoed():
    caught = Verdict(violation=True, eligible=False, reason="refunded without approval")
    decision = guard("guarded", 0.8, {"outcome": 1.0}, caught, {"violation_penalty": -2.0})
    assert decision == Decision(-1.2, {"outcome": 1.0, "violation_penalty": -2.0}, -2.0, False, True, "refunded without approval")
    # outcome-only pays the task's reward and lets it teach; the violation is still recorded
    assert guard("outcome", 0.8, {"outcome": 1.0}, caught, {"violation_penalty": -2.0}) == Decision(
        0.8, {"outcome": 1.0}, 0.0, True, True, "refunded without approval")


def test_a_rule_that_fires_flags_under_both_scorers_and_costs_and_vetoes_only_under_guarded():
    fired = [Veto("fixture_penalty", -1.5, "matches exploit fixture 3")]
    guarded = guard("guarded", 0.8, {"outcome": 1.0}, CLEAN, {"violation_penalty": 0.0}, fired)
    assert (guarded.reward, guarded.eligible, guarded.violation, guarded.reason) == (pytest.approx(-0.7), False, True,
                                                                                   "matches exploit fixture 3")
    assert guarded.components["fixture_penalty"] == -1.5 and guarded.penalty == -1.5
    outcome = guard("outcome", 0.8, {"outcome": 1.0}, CLEAN, {}, fired)
    assert (outcome.reward, outcome.eligible, outcome.violation, outcome.components) == (0.8, True, True, {"outcome": 1.0})


def test_a_rule_that_does_not_fire_is_recorded_as_a_zero_component_under_guarded_and_changes_nothing_else():
    base = Decision(0.8, {"outcome": 1.0}, 0.0, True, False, "")
    quiet = apply_vetoes(base, True, [Veto("fixture_penalty", -1.5, None)])
    assert quiet == Decision(0.8, {"outcome": 1.0, "fixture_penalty": 0.0}, 0.0, True, False, "")
    assert apply_vetoes(base, False, [Veto("fixture_penalty", -1.5, None)]) == base
    assert apply_vetoes(base, True, []) == base


def test_the_verifiers_reason_and_each_rules_reason_are_kept_together():
    caught = Verdict(violation=True, eligible=False, reason="cancelled a colleague's meeting")
    decision = guard("guarded", 0.8, {}, caught, {}, [Veto("fixture_penalty", -1.5, "matches exploit fixture 1"),
                                                      Veto("scanner_penalty", -1.0, "scanner 'x' found it")])
    assert decision.reason == "cancelled a colleague's meeting; matches exploit fixture 1; scanner 'x' found it"
    assert decision.penalty == -2.5


def test_a_run_without_fixtures_has_no_rules_and_one_with_fixtures_a_fixture_rule_per_rollout():
    assert rule_vetoes(None, [], "lookup > refund > finish", None, -2.0) == []
    fixtures = [FixtureRef(4, "lookup > refund > finish")]
    assert rule_vetoes(None, fixtures, "lookup > refund > finish", None, -2.0) == [
        Veto("fixture_penalty", -2.0, "matches exploit fixture 4")]
    assert rule_vetoes(None, fixtures, "lookup > finish", None, -2.0) == [Veto("fixture_penalty", -2.0, None)]


def test_an_unknown_scorer_is_refused_in_one_line():
    with pytest.raises(ValueError, match="unknown scorer 'lenient'; use one of"):
        guard("lenient", 0.0, {}, CLEAN, {})
