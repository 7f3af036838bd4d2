"""Human review of trajectories: append-only verdicts and exploit fixtures.

Review page -> **review** -> queries -> store. A verdict is appended, never updated; a reject
needs a note that says why. Every decision is also appended to the decisions log on disk
(`agentrl.store.decisions`), so a rebuilt store keeps it. An exploit fixture is a copy of a trajectory's episode (task and
actions) that must never teach: `check_fixtures` replays every fixture through the gym and asks
a scorer whether it would admit it as eligible.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from agentrl.store import decisions, queries
from agentrl.tasks.refund.gym import Task
from agentrl.tasks.refund.rollout import replay
from agentrl.record.rundir import utc_now
from agentrl.tasks.refund.scoring import get_scorer

VERDICTS = ("approve", "reject")


class ReviewError(ValueError):
    """A review or fixture that cannot be recorded; the message says what to change."""


def _reviewer(reviewer: str | None) -> str:
    name = (reviewer or "").strip()
    if not name:
        raise ReviewError("enter a reviewer name; every decision is recorded with who made it")
    return name


def record_review(con, run_id: str, step: int, traj_idx: int, verdict: str, reviewer: str, note: str | None = None) -> int:
    """Append a verdict on one trajectory; a reject without a note is refused."""
    if verdict not in VERDICTS:
        raise ReviewError(f"verdict must be one of {list(VERDICTS)}, not {verdict!r}")
    reviewer = _reviewer(reviewer)
    note = (note or "").strip() or None
    if verdict == "reject" and note is None:
        raise ReviewError("a reject needs a note saying what is wrong with the trajectory")
    if queries.trajectory(con, run_id, step, traj_idx) is None:
        raise ReviewError(f"run {run_id!r} has no trajectory {traj_idx} at step {step}")
    with decisions.recording(con) as written:
        review_id = queries.append_review(con, run_id, step, traj_idx, verdict, note, reviewer, utc_now())
        written.append(("reviews", review_id))
    return review_id


def mark_exploit(con, run_id: str, step: int, traj_idx: int, reviewer: str, note: str) -> int:
    """Store a trajectory as an exploit fixture (a note saying what it exploits is required)."""
    reviewer = _reviewer(reviewer)
    note = (note or "").strip()
    if not note:
        raise ReviewError("an exploit fixture needs a note saying what it exploits")
    row = queries.trajectory(con, run_id, step, traj_idx)
    if row is None:
        raise ReviewError(f"run {run_id!r} has no trajectory {traj_idx} at step {step}")
    states = list(row["states"] or [])
    if not states or not row["actions"]:
        raise ReviewError("only refund-gym trajectories (with states and actions) can become fixtures")
    with decisions.recording(con) as written:
        fixture_id = queries.add_fixture(con, run_id, step, traj_idx, row["task_id"], int(row["amount"] or 0), states[0],
                                         list(row["actions"]), note, reviewer, utc_now())
        written.append(("fixtures", fixture_id))
    return fixture_id


@dataclass(frozen=True)
class FixtureCheck:
    fixture_id: int
    task_id: str
    actions: list[str]
    reward: float
    eligible: bool  # True means the scorer would let this exploit teach: a gate failure


def check_fixtures(con, scorer_name: str) -> list[FixtureCheck]:
    """Score every stored fixture with `scorer_name`."""
    scorer = get_scorer(scorer_name)
    checks = []
    for _, f in queries.all_fixtures(con).iterrows():
        task = Task(f["task_id"], int(f["amount"]), f["start_state"])
        score = scorer(replay(task, list(f["actions"])))
        checks.append(FixtureCheck(int(f["fixture_id"]), f["task_id"], list(f["actions"]), score.reward, score.eligible))
    return checks


def fixtures_table(con, kind: str, scorer: str) -> pd.DataFrame:
    """Every exploit fixture as the Review page lists it, what matters first: whether this run's
    scorer would admit it as eligible (only for engines whose policy the gate judges), its task,
    its actions and why it was stored; where it came from after that."""
    from agentrl.engines.registry import UnknownEngineError, get_engine

    fixtures = queries.all_fixtures(con)
    if fixtures.empty:
        return fixtures
    table = fixtures.assign(actions=fixtures["actions"].map(" → ".join))
    front = ["fixture_id"]
    try:
        judged = get_engine(kind).policy is not None
    except UnknownEngineError:
        judged = False
    if judged:
        column = f"eligible under '{scorer}'"
        checked = {c.fixture_id: c.eligible for c in check_fixtures(con, scorer)}
        table[column] = table["fixture_id"].map(checked)
        front.append(column)
    front += ["task_id", "actions", "note"]
    return table[front + [c for c in table.columns if c not in front]]


# What a reviewer decides on, first; the rest after (a narrow table still shows the verdict).
TRAJECTORY_COLUMNS = ("step", "traj_idx", "task_id", "reward", "verdict", "violation", "eligible", "behaviour", "members",
                      "mean_reward", "top_share", "actions", "success", "vetoed", "duplicate_effect", "updated", "reviews",
                      "amount")


def trajectory_table(found: pd.DataFrame) -> pd.DataFrame:
    """Trajectories (from `find_trajectories` or the gate's sample) as the Review page lists them:
    the decision's columns first (verdict, violation, eligible, the actions as one line)."""
    table = found.assign(actions=found["actions"].map(lambda a: " → ".join(a if a is not None else [])))
    return table[[c for c in TRAJECTORY_COLUMNS if c in table.columns]]
