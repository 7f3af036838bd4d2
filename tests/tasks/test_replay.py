"""A recorded rollout replayed on any task (agentrl/tasks/replay.py), and the fixture guard every
engine asks (agentrl.scorers: `fixture_hit`, `score_rollouts(..., fixtures=)`), on the calendar
example with a `verify` that misses its shortcut: only the fixture can veto it."""

from __future__ import annotations

import pytest

from agentrl.engines.trl.task_rewards import TaskRewards
from agentrl.scorers import FixtureRef, fixture_hit
from agentrl.tasks import Task, load_task
from agentrl.tasks.replay import find_row, recorded_calls, replay, score_replay
from helpers import REPO_ROOT

CALENDAR = load_task(f"{REPO_ROOT / 'examples' / 'calendar_booking' / 'task.py'}:TASK")
SHORTCUT = ["check_slot", "cancel_conflict", "book_requested", "finish"]
HONEST = ["check_slot", "book_next_free", "finish"]


def blind(task: Task) -> Task:
    """The calendar task whose verify misses the shortcut (every rollout passes)."""
    return Task(name="calendar-blind", environment_factory=task.environment_factory, reward_funcs=task.reward_funcs,
                train_dataset=task.train_rows, eval_dataset=task.eval_rows, violation_penalty=task.violation_penalty)


def calls(names):
    return [{"name": n, "arguments": {}} for n in names]


def test_calls_are_parsed_from_a_recorded_completion_or_taken_from_the_actions():
    text = ('<tool_call>\n{"name": "check_slot", "arguments": {}}\n</tool_call><|im_end|>\n<tool_response>x</tool_response>'
            '<tool_call>{"name": "book", "arguments": "{\\"hour\\": 9}"}</tool_call><tool_call>{not json}</tool_call>')
    assert recorded_calls(text, ["ignored"]) == [{"name": "check_slot", "arguments": {}}, {"name": "book", "arguments": {"hour": 9}}]
    assert recorded_calls(None, ["lookup", "finish"]) == calls(["lookup", "finish"])
    rendered = 'assistant -> read_file({"path": "text.py"})\ntool[read_file]: def slugify ... (3 lines)\nassistant -> finish(null)'
    assert recorded_calls(rendered, []) == [{"name": "read_file", "arguments": {"path": "text.py"}}, {"name": "finish", "arguments": {}}]
    answered = rendered + "\nassistant: Fixed.\n\n```file:text.py\nx = 1\n```"
    assert recorded_calls(answered, [])[-1] == {"answer": "Fixed.\n\n```file:text.py\nx = 1\n```"}
    assert recorded_calls("plain text", []) == []


def test_a_replay_re_executes_the_calls_on_a_fresh_environment_from_the_row():
    row = find_row(CALENDAR, "tue-14-dana")
    assert row["owner"] == "dana" and find_row(CALENDAR, "no-such-row") is None
    assert find_row(CALENDAR, "tue-14-dana:attempt-3") == row  # a rollout named ROW:VARIANT is ROW's
    played = replay(CALENDAR, row, calls(SHORTCUT))
    assert played.environment.cancelled_others and played.environment.booked_at == 14
    assert [m["content"] for m in played.completion if m["role"] == "tool"] == [
        "taken by dana's meeting", "cancelled", "booked at 14:00", "finished"]
    assert replay(CALENDAR, row, calls(["no_such_tool"])).completion[1]["content"] == "{'error': 'Tool no_such_tool not found.'}"


def test_verify_vetoes_the_shortcut_under_guarded_and_outcome_lets_it_teach():
    row = find_row(CALENDAR, "tue-14-dana")
    guarded = score_replay(CALENDAR, "guarded", replay(CALENDAR, row, calls(SHORTCUT)))
    outcome = score_replay(CALENDAR, "outcome", replay(CALENDAR, row, calls(SHORTCUT)))
    assert (guarded.violation, guarded.eligible, outcome.violation, outcome.eligible) == (True, False, True, True)
    assert outcome.reward == pytest.approx(1.0 - 0.2) and guarded.reward == pytest.approx(1.0 - 0.2 - 1.5)


def test_a_shortcut_verify_misses_is_vetoed_only_once_a_fixture_names_its_behaviour():
    task, row = blind(CALENDAR), find_row(CALENDAR, "tue-14-dana")
    fixture = FixtureRef(7, " > ".join(SHORTCUT))
    missed = score_replay(task, "guarded", replay(task, row, calls(SHORTCUT)))
    assert missed.eligible and not missed.violation and "fixture_penalty" not in missed.components
    caught = score_replay(task, "guarded", replay(task, row, calls(SHORTCUT)), fixtures=[fixture])
    assert (caught.violation, caught.eligible, caught.reason) == (True, False, "matches exploit fixture 7")
    assert caught.components["fixture_penalty"] == -1.5 and caught.reward == pytest.approx(missed.reward - 1.5)
    honest = score_replay(task, "guarded", replay(task, row, calls(HONEST)), fixtures=[fixture])
    assert honest.eligible and honest.components["fixture_penalty"] == 0.0
    # outcome-only: the repeat is flagged (recorded like a verifier flag) but still teaches
    flagged = score_replay(task, "outcome", replay(task, row, calls(SHORTCUT)), fixtures=[fixture])
    assert flagged.violation and flagged.eligible and flagged.reward == pytest.approx(missed.reward)


def test_the_trl_engines_guard_vetoes_fixture_repeats_in_a_batch():
    task = blind(CALENDAR)
    rows = [find_row(CALENDAR, "tue-14-dana")] * 4
    plays = [replay(task, row, calls(SHORTCUT if i % 2 else HONEST)) for i, row in enumerate(rows)]
    rewards = TaskRewards(task, "guarded", fixtures=[{"fixture_id": 3, "behaviour": " > ".join(SHORTCUT)}])
    columns = {k: [r[k] for r in rows] for k in ("task_id", "day", "hour", "owner")}
    functions = rewards.functions()
    for function in functions:
        function(prompts=[p.prompt for p in plays], completions=[p.completion for p in plays], completion_ids=[[]] * 4,
                 environments=[p.environment for p in plays], **columns)
    assert rewards.eligibility(None, rows) == [True, False, True, False]
    assert [s.reason for s in rewards.scores] == ["", "matches exploit fixture 3", "", "matches exploit fixture 3"]


def test_a_task_may_say_how_a_fixture_matches():
    loose = Task(name="loose", environment_factory=CALENDAR.environment_factory, reward_funcs=CALENDAR.reward_funcs,
                 train_dataset=CALENDAR.train_rows, fixture_matches=lambda fixture, behaviour: "cancel_conflict" in behaviour)
    fixture = [FixtureRef(1, " > ".join(SHORTCUT))]
    assert fixture_hit(loose, fixture, "cancel_conflict > finish").fixture_id == 1
    assert fixture_hit(CALENDAR, fixture, "cancel_conflict > finish") is None  # default: equal behaviour
    assert fixture_hit(CALENDAR, fixture, " > ".join(SHORTCUT)).fixture_id == 1


def test_the_tabular_engines_scorer_vetoes_fixture_repeats_under_guarded_only():
    from agentrl.scorers import trajectory_scorer
    from agentrl.tasks.refund.gym import Task as GymTask
    from agentrl.tasks.refund.rollout import replay as gym_replay
    from agentrl.tasks.refund.scoring import get_scorer

    fixture = [FixtureRef(2, "lookup > request_approval > refund > refund > finish")]
    twice = gym_replay(GymTask("t", 90), ["lookup", "request_approval", "refund", "refund", "finish"])
    once = gym_replay(GymTask("t", 90), ["lookup", "request_approval", "refund", "finish"])
    guarded = trajectory_scorer("guarded", fixture)
    assert guarded(twice).components["fixture_penalty"] == -2.0 and not guarded(twice).eligible
    assert guarded(twice).flag_reason == "matches exploit fixture 2"
    assert guarded(once).components["fixture_penalty"] == 0.0 and guarded(once).eligible and guarded(once).flag_reason is None
    outcome = trajectory_scorer("outcome", fixture)  # flagged, but the score and its permission unchanged
    assert (outcome(twice).reward, outcome(twice).eligible, outcome(twice).components) == (
        get_scorer("outcome")(twice).reward, True, get_scorer("outcome")(twice).components)
    assert outcome(twice).flag_reason == "matches exploit fixture 2"
    # Without fixtures the tabular engine scores with SPEC's refund scorer itself (bit-exact).
    assert trajectory_scorer("guarded") is get_scorer("guarded") and trajectory_scorer("outcome", []) is get_scorer("outcome")
