"""Human review of trajectories: append-only verdicts and exploit fixtures, for any task.

Review page -> **review** -> queries -> store. A verdict is appended, never updated; a reject
needs a note that says why. Every decision is also appended to the decisions log on disk
(`agentrl.store.decisions`), so a rebuilt store keeps it. An exploit fixture is a rejected
trajectory kept as its episode: its task (the run's task spec), the dataset row its environment
was reset with, its tool calls, its behaviour and the reviewer's note. Storing one also appends
the reject, so a fixture counts as a reject in every review count. `check_fixtures` replays
every fixture of a run's task through that task's own environment, reward functions and `verify`
(`agentrl.tasks.replay`) and asks the run's scorer, with the fixtures the run vetoes, whether it
would let the fixture teach. The task is always asked through the Task contract
(`agentrl.tasks.load_task`), never a built-in task's module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pandas as pd

from agentrl.record.behaviour import default_behaviour
from agentrl.record.rundir import utc_now
from agentrl.store import decisions, queries

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


def run_task_spec(run: dict) -> str | None:
    """The task spec a stored run trained (its config's `task`, else its engine's), or None."""
    from agentrl.engines.registry import UnknownEngineError, get_engine

    try:
        engine = get_engine(run["kind"])
    except UnknownEngineError:
        return None
    config = run.get("config")
    config = json.loads(config) if isinstance(config, str) else (config or {})
    spec = engine.task_spec(config)
    if spec is None:
        return None
    from agentrl.tasks.loader import absolute_spec

    return absolute_spec(spec)


def load_run_task(run: dict):
    """The run's task through the contract; ReviewError (one line) when it cannot be loaded."""
    from agentrl.tasks.loader import TaskError, load_task

    spec = run_task_spec(run)
    if spec is None:
        raise ReviewError(f"run {run['run_id']!r} ({run['kind']}) names no task; only a run of a task can give a fixture")
    try:
        return spec, load_task(spec)
    except TaskError as error:
        raise ReviewError(str(error)) from None


def mark_exploit(con, run_id: str, step: int, traj_idx: int, reviewer: str, note: str) -> int:
    """Reject a trajectory and store it as an exploit fixture, in one step (a note saying what it
    exploits is required). Any task's trajectory: the fixture keeps the run's task spec, the
    dataset row of its `task_id`, its tool calls and its behaviour; one whose replay through the
    task does not reproduce its behaviour is refused (the gate would judge something else)."""
    from agentrl.tasks.replay import ReplayError, find_row, recorded_calls, replay, row_for_json, score_replay

    reviewer = _reviewer(reviewer)
    note = (note or "").strip()
    if not note:
        raise ReviewError("an exploit fixture needs a note saying what it exploits")
    row = queries.trajectory(con, run_id, step, traj_idx)
    if row is None:
        raise ReviewError(f"run {run_id!r} has no trajectory {traj_idx} at step {step}")
    run = queries.get_run(con, run_id)
    spec, task = load_run_task(run)
    dataset_row = find_row(task, row["task_id"])
    if dataset_row is None:
        raise ReviewError(f"task {task.name!r} has no row with task_id {row['task_id']!r} (train, eval or probe rows); "
                          "its environment cannot be reset for a replay")
    calls = recorded_calls(row.get("completion"), row.get("actions"))
    if not calls:
        raise ReviewError("the trajectory made no tool calls; there is nothing to replay")
    try:
        stored_row = row_for_json(dataset_row)
    except ReplayError as error:
        raise ReviewError(str(error)) from None
    behaviour = row.get("behaviour") or default_behaviour(row.get("actions"))
    try:
        replayed = score_replay(task, "guarded", replay(task, dataset_row, calls))
    except ReplayError as error:
        raise ReviewError(str(error)) from None
    if replayed.behaviour != behaviour:
        # A fixture the gate cannot replay faithfully would be judged on something else.
        raise ReviewError(f"replayed through task {task.name!r}, the trajectory does not do what it did "
                          f"(recorded: {behaviour!r}; replayed: {replayed.behaviour!r}); it cannot become a fixture: "
                          "reject it without --fixture, and say in the note what it exploits")
    states = list(row.get("states") or [])
    now = utc_now()
    with decisions.recording(con) as written:
        review_id = queries.append_review(con, run_id, step, traj_idx, "reject", note, reviewer, now)
        written.append(("reviews", review_id))
        fixture_id = queries.add_fixture(
            con, run_id, step, traj_idx, row["task_id"], int(row.get("amount") or 0), states[0] if states else "",
            list(row.get("actions") or [c["name"] for c in calls if "name" in c]), note, reviewer, now, task=spec, behaviour=behaviour,
            row_json=json.dumps(stored_row, sort_keys=True), calls_json=json.dumps(calls, sort_keys=True),
            states=states if states and len(states) == len(row.get("actions") or []) else None)
        written.append(("fixtures", fixture_id))
    return fixture_id


@dataclass(frozen=True)
class FixtureCheck:
    fixture_id: int
    task_id: str
    actions: list[str]
    reward: float
    eligible: bool  # True means the scorer would let this exploit teach: a gate failure
    behaviour: str = ""
    reason: str = ""  # why the replay was flagged (the verifier's reason, "matches exploit fixture N")


def _fixture_refs(config: dict | None) -> list:
    from agentrl.scorers import FixtureRef

    return [FixtureRef.of(f) for f in ((config or {}).get("fixtures") or [])]


def fixture_episode(f) -> tuple[dict, list[dict]]:
    """A stored fixture's dataset row and tool calls (an older refund fixture: from its columns)."""
    if f["row_json"] is not None and not (isinstance(f["row_json"], float) and pd.isna(f["row_json"])):
        return json.loads(f["row_json"]), json.loads(f["calls"])
    row = {"prompt": [{"role": "user", "content": ""}], "task_id": f["task_id"], "amount": int(f["amount"]),
           "start_state": f["start_state"]}
    return row, [{"name": a, "arguments": {}} for a in f["actions"]]


def check_fixtures(con, scorer: str, run: dict | None = None) -> list[FixtureCheck]:
    """Every fixture of the run's task (no run: of the refund task) replayed through the task and
    scored with `scorer` and the fixtures the run's config lists."""
    from agentrl.tasks.replay import ReplayError, replay, score_replay

    if run is None:
        run = {"run_id": "", "kind": "tabular", "config": "{}"}
    spec, task = load_run_task(run)
    config = run.get("config")
    refs = _fixture_refs(json.loads(config) if isinstance(config, str) else config)
    checks = []
    for _, f in queries.all_fixtures(con, task=spec).iterrows():
        row, calls = fixture_episode(f)
        try:
            score = score_replay(task, scorer, replay(task, row, calls), fixtures=refs)
        except ReplayError as error:
            raise ReviewError(f"fixture {int(f['fixture_id'])}: {error}") from None
        checks.append(FixtureCheck(int(f["fixture_id"]), f["task_id"], list(f["actions"]), score.reward, score.eligible,
                                   score.behaviour or "", score.reason))
    return checks


def fixtures_table(con, kind: str, scorer: str, run: dict | None = None) -> pd.DataFrame:
    """The exploit fixtures of the run's task as the Review page lists them, what matters first:
    whether this run's scorer would admit it as eligible (only for engines whose policy the gate
    judges), its task, its behaviour and why it was stored; where it came from after that."""
    from agentrl.engines.registry import UnknownEngineError, get_engine

    run = run or {"run_id": "", "kind": kind, "config": "{}"}
    spec = run_task_spec(run)
    fixtures = queries.all_fixtures(con, task=spec)
    if fixtures.empty:
        return fixtures
    table = fixtures.assign(actions=fixtures["actions"].map(" → ".join)).drop(columns=["row_json", "calls"])
    front = ["fixture_id"]
    try:
        judged = get_engine(kind).policy is not None
    except UnknownEngineError:
        judged = False
    if judged:
        column = f"eligible under '{scorer}'"
        checked = {c.fixture_id: c.eligible for c in check_fixtures(con, scorer, run)}
        table[column] = table["fixture_id"].map(checked)
        front.append(column)
    front += ["task_id", "behaviour", "actions", "note"]
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
