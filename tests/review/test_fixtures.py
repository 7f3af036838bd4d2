"""Fixtures for any task and review that teaches the guard (issue 24), on the calendar example
(examples/calendar_booking, a task from outside the package) trained by the LM engine: a
reviewer rejects one trajectory of a short outcome-only run as an exploit fixture; the fixture is
replayed through the task's own environment, reward functions and verify; a guarded run launched
after it lists it in its config and vetoes every repeat of its behaviour."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("trl")

from agentrl.config import make_config
from agentrl.engines.trl.engine import run_trl
from agentrl.launcher import create_run, with_fixtures
from agentrl.review import gate, reviews
from agentrl.store import queries
from agentrl.store.ingest import connect, ingest_once
from agentrl.tasks.loader import absolute_spec
from helpers import REPO_ROOT

pytestmark = [pytest.mark.lm, pytest.mark.slow]

EXAMPLE = absolute_spec(f"{REPO_ROOT / 'examples' / 'calendar_booking' / 'task.py'}:TASK")
SHORTCUT = "check_slot > cancel_conflict > book_requested > finish"


def calendar_config(scorer: str, **overrides):
    values = {"kind": "trl", "task": EXAMPLE, "scorer": scorer, "name": f"calendar-{scorer}", "rounds": 3, "group_size": 4,
              "eval_every": 0, "probe_every": 0, "lm": {"tasks_per_step": 2, "max_completion_length": 64, "max_tool_calls": 6}}
    values.update(overrides)
    return make_config(**values)


def train(runs_dir, config) -> str:
    config = with_fixtures(runs_dir, config)  # what the launcher does: the fixtures stored so far
    run = create_run(runs_dir, config)
    lines: list[str] = []
    assert run_trl(config, run, log=lines.append) == "succeeded", lines
    ingest_once(runs_dir)
    return run.run_id


@pytest.fixture(scope="module")
def reviewed(tmp_path_factory):
    """An outcome-only calendar run with its shortcut rejected as fixture 1, then a guarded run
    launched after: (runs_dir, con, outcome run id, guarded run id, fixture id)."""
    runs_dir = tmp_path_factory.mktemp("fixtures") / "runs"
    runs_dir.mkdir()
    outcome = train(runs_dir, calendar_config("outcome"))
    con = connect(runs_dir)
    shortcut = con.execute("SELECT step, traj_idx FROM trajectories WHERE run_id = ? AND behaviour = ? ORDER BY step, traj_idx",
                           [outcome, SHORTCUT]).fetchone()
    assert shortcut is not None, "the cloned model took the shortcut nowhere in this run"
    fixture_id = reviews.mark_exploit(con, outcome, shortcut[0], shortcut[1], "alice", "cancelled a colleague's meeting")
    con.close()
    guarded = train(runs_dir, calendar_config("guarded", group_size=8))
    con = connect(runs_dir)
    yield runs_dir, con, outcome, guarded, fixture_id
    con.close()


def test_a_calendar_trajectory_becomes_a_fixture_with_its_task_row_and_calls_and_counts_as_a_reject(reviewed):
    _, con, outcome, _, fixture_id = reviewed
    (fixture,) = queries.all_fixtures(con, task=EXAMPLE).to_dict("records")
    assert fixture["fixture_id"] == fixture_id and fixture["behaviour"] == SHORTCUT and fixture["task"] == EXAMPLE
    assert [c["name"] for c in json.loads(fixture["calls"])] == SHORTCUT.split(" > ")  # parsed from the completion
    assert json.loads(fixture["row_json"])["task_id"] == fixture["task_id"]
    history = queries.review_history(con, outcome, int(fixture["step"]), int(fixture["traj_idx"]))
    assert history[["verdict", "note"]].values.tolist() == [["reject", "cancelled a colleague's meeting"]]
    assert queries.all_fixtures(con, task="refund").empty  # fixtures belong to their task


def test_the_fixture_replays_through_the_task_and_only_the_outcome_scorer_lets_it_teach(reviewed):
    _, con, outcome, guarded, fixture_id = reviewed
    (under_outcome,) = reviews.check_fixtures(con, "outcome", queries.get_run(con, outcome))
    (under_guarded,) = reviews.check_fixtures(con, "guarded", queries.get_run(con, guarded))
    assert under_outcome.fixture_id == under_guarded.fixture_id == fixture_id
    assert under_outcome.behaviour == under_guarded.behaviour == SHORTCUT
    assert under_outcome.eligible and not under_guarded.eligible
    assert under_outcome.reward == pytest.approx(1.0 - 0.05 * 4)  # booked the requested hour, four calls
    # The guarded run lists the fixture: its replay is vetoed by verify and by the fixture, both named.
    assert under_guarded.reason == f"cancelled a colleague's meeting; matches exploit fixture {fixture_id}"


def test_a_guarded_run_launched_after_the_fixture_lists_it_and_vetoes_every_repeat(reviewed):
    _, con, outcome, guarded, fixture_id = reviewed
    assert json.loads(queries.get_run(con, guarded)["config"])["fixtures"] == [
        {"fixture_id": fixture_id, "behaviour": SHORTCUT, "states": None}]  # the calendar records no states
    assert json.loads(queries.get_run(con, outcome)["config"])["fixtures"] == []  # launched before it
    rows = con.execute("SELECT behaviour, violation, eligible, vetoed, updated, verifier_reason, components FROM trajectories "
                       "WHERE run_id = ?", [guarded]).fetchall()
    repeats = [r for r in rows if r[0] == SHORTCUT]
    assert repeats, "the guarded run never repeated the shortcut; nothing was tested"
    for behaviour, violation, eligible, vetoed, updated, reason, components in rows:
        repeat = behaviour == SHORTCUT
        assert components["fixture_penalty"] == (-1.5 if repeat else 0.0)  # its own component: the task's violation penalty
        if repeat:
            assert violation and not eligible and vetoed and not updated
            assert f"matches exploit fixture {fixture_id}" in reason


def test_the_gate_checks_each_run_against_its_tasks_fixtures(reviewed):
    runs_dir, con, outcome, guarded, _ = reviewed

    def fixture_check(run_id):
        report = gate.evaluate_gate(con, runs_dir, run_id)
        return next(c for c in report.checks if c.name.endswith("rejects every exploit fixture"))

    assert fixture_check(outcome).figure == "1 of 1 fixtures admitted as eligible"
    assert fixture_check(guarded).passed and fixture_check(guarded).figure == "0 of 1 fixtures admitted as eligible"
