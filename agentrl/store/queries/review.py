"""The trajectory explorer, the gate's sample, and the append-only decisions: reviews,
exploit fixtures and promotions.

Store -> **queries.review** -> review.reviews, review.gate -> Review page and CLI.
"""

from __future__ import annotations

import pandas as pd

from agentrl.store.db import Con

# The latest verdict of each reviewed trajectory (reviews are append-only; the last one counts).
_LATEST_VERDICT = """
    SELECT run_id, step, traj_idx, arg_max(verdict, review_id) AS verdict, count(*) AS reviews
    FROM reviews WHERE run_id = ? GROUP BY run_id, step, traj_idx
"""

FLAG_COLUMNS = ("success", "violation", "duplicate_effect", "eligible", "vetoed")


def step_range(con: Con, run_id: str) -> tuple[int, int]:
    row = con.execute("SELECT min(step), max(step) FROM steps WHERE run_id = ?", [run_id]).fetchone()
    return (int(row[0] or 0), int(row[1] or 0))


def trajectory_task_ids(con: Con, run_id: str) -> list[str]:
    rows = con.execute(
        "SELECT DISTINCT task_id FROM trajectories WHERE run_id = ? ORDER BY task_id", [run_id]
    ).fetchall()
    return [r[0] for r in rows]


def find_trajectories(
    con: Con,
    run_id: str,
    step_min: int | None = None,
    step_max: int | None = None,
    task_ids: list[str] | None = None,
    flags: dict[str, bool] | None = None,
    verdict: str | None = None,
    descending: bool = True,
    limit: int = 50,
) -> pd.DataFrame:
    """The trajectory explorer: one run's trajectories filtered by step range, tasks, flags
    (success, violation, duplicate_effect, eligible, vetoed: True/False, absent = any) and latest
    verdict ('approve', 'reject', 'unreviewed'), sorted by reward."""
    flags = flags or {}
    unknown = set(flags) - set(FLAG_COLUMNS)
    if unknown:
        raise ValueError(f"unknown flag(s) {sorted(unknown)}; use {list(FLAG_COLUMNS)}")
    flag_values = [flags.get(name) for name in FLAG_COLUMNS]
    order = "DESC" if descending else "ASC"  # one of two literals, never user text
    return con.execute(
        f"""
        SELECT t.run_id, t.step, t.traj_idx, t.task_id, t.amount, t.actions, t.reward,
               t.success, t.violation, t.duplicate_effect, t.eligible, t.vetoed, t.updated,
               coalesce(v.verdict, 'unreviewed') AS verdict, coalesce(v.reviews, 0) AS reviews
        FROM trajectories t
        LEFT JOIN ({_LATEST_VERDICT}) v USING (run_id, step, traj_idx)
        WHERE t.run_id = ?
          AND (? IS NULL OR t.step >= ?) AND (? IS NULL OR t.step <= ?)
          AND (? IS NULL OR list_contains(?, t.task_id))
          AND (? IS NULL OR t.success = ?) AND (? IS NULL OR t.violation = ?)
          AND (? IS NULL OR t.duplicate_effect = ?) AND (? IS NULL OR t.eligible = ?)
          AND (? IS NULL OR t.vetoed = ?)
          AND (? IS NULL OR coalesce(v.verdict, 'unreviewed') = ?)
        ORDER BY t.reward {order}, t.violation DESC NULLS LAST, t.eligible NULLS FIRST, t.step DESC, t.traj_idx
        LIMIT ?
        """,
        [run_id, run_id, step_min, step_min, step_max, step_max, task_ids or None, task_ids or None,
         *[v for value in flag_values for v in (value, value)], verdict, verdict, int(limit)],
    ).df()


def top_trajectories(con: Con, run_id: str, k: int, last_steps: int) -> pd.DataFrame:
    """The gate's sample: the k highest-reward trajectories of the run's last `last_steps` steps,
    with their latest verdict."""
    return con.execute(
        f"""
        SELECT t.step, t.traj_idx, t.task_id, t.actions, t.reward, t.violation, t.eligible,
               coalesce(v.verdict, 'unreviewed') AS verdict
        FROM trajectories t
        LEFT JOIN ({_LATEST_VERDICT}) v USING (run_id, step, traj_idx)
        WHERE t.run_id = ?
          AND t.step > (SELECT coalesce(max(step), 0) FROM trajectories WHERE run_id = ?) - ?
        ORDER BY t.reward DESC, t.violation DESC NULLS LAST, t.eligible NULLS FIRST, t.step DESC, t.traj_idx
        LIMIT ?
        """,
        [run_id, run_id, run_id, int(last_steps), int(k)],
    ).df()


def trajectory(con: Con, run_id: str, step: int, traj_idx: int) -> dict | None:
    """One trajectory's full record (lists and the components map as Python values), or None."""
    cur = con.execute(
        "SELECT * FROM trajectories WHERE run_id = ? AND step = ? AND traj_idx = ?", [run_id, int(step), int(traj_idx)]
    )
    row = cur.fetchone()
    if row is None:
        return None
    return dict(zip([d[0] for d in cur.description], row))


def review_history(con: Con, run_id: str, step: int, traj_idx: int) -> pd.DataFrame:
    """Every review of one trajectory, oldest first."""
    return con.execute(
        """
        SELECT review_id, verdict, note, reviewer, reviewed_at FROM reviews
        WHERE run_id = ? AND step = ? AND traj_idx = ? ORDER BY review_id
        """,
        [run_id, int(step), int(traj_idx)],
    ).df()


def reviews_for_run(con: Con, run_id: str) -> pd.DataFrame:
    return con.execute(
        """
        SELECT review_id, step, traj_idx, verdict, note, reviewer, reviewed_at FROM reviews
        WHERE run_id = ? ORDER BY review_id
        """,
        [run_id],
    ).df()


def append_review(con: Con, run_id: str, step: int, traj_idx: int, verdict: str, note: str | None,
                  reviewer: str, reviewed_at) -> int:
    """Append one review; returns its id (ids increase in the order reviews were recorded)."""
    row = con.execute(
        """
        INSERT INTO reviews (run_id, step, traj_idx, verdict, note, reviewer, reviewed_at)
        VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING review_id
        """,
        [run_id, int(step), int(traj_idx), verdict, note, reviewer, reviewed_at],
    ).fetchone()
    return int(row[0])


def all_fixtures(con: Con, task: str | None = None) -> pd.DataFrame:
    """Every exploit fixture, oldest first; with `task`, only those of that task spec (a fixture
    of an older store, without a task, is the refund task's). `row_json` and `calls` are JSON text."""
    return con.execute(
        """
        SELECT fixture_id, source_run_id, step, traj_idx, task_id, amount, start_state, actions, note,
               created_by, created_at, coalesce(task, 'refund') AS task, behaviour, row_json::VARCHAR AS row_json,
               calls::VARCHAR AS calls, states
        FROM fixtures WHERE (? IS NULL OR coalesce(task, 'refund') = ?) ORDER BY fixture_id
        """,
        [task, task],
    ).df()


def add_fixture(con: Con, source_run_id: str, step: int, traj_idx: int, task_id: str, amount: int,
                start_state: str, actions: list[str], note: str, created_by: str, created_at,
                task: str | None = None, behaviour: str | None = None, row_json: str | None = None,
                calls_json: str | None = None, states: list[str] | None = None) -> int:
    row = con.execute(
        """
        INSERT INTO fixtures (source_run_id, step, traj_idx, task_id, amount, start_state, actions, note,
                              created_by, created_at, task, behaviour, row_json, calls, states)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING fixture_id
        """,
        [source_run_id, int(step), int(traj_idx), task_id, int(amount), start_state, list(actions), note,
         created_by, created_at, task, behaviour, row_json, calls_json, states],
    ).fetchone()
    return int(row[0])


def promotions(con: Con, run_id: str | None = None) -> pd.DataFrame:
    """Promotion decisions, oldest first (all runs when `run_id` is None)."""
    return con.execute(
        """
        SELECT promotion_id, run_id, decision, decided_by, decided_at, gate_passed, override_reason,
               reason, bundle_path, content_hash, checks
        FROM promotions WHERE (? IS NULL OR run_id = ?) ORDER BY promotion_id
        """,
        [run_id, run_id],
    ).df()


def append_promotion(con: Con, run_id: str, decision: str, decided_by: str, decided_at, gate_passed: bool | None,
                     override_reason: str | None, reason: str | None, bundle_path: str | None,
                     content_hash: str | None, checks_json: str | None) -> int:
    row = con.execute(
        """
        INSERT INTO promotions (run_id, decision, decided_by, decided_at, gate_passed, override_reason, reason,
                                bundle_path, content_hash, checks)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING promotion_id
        """,
        [run_id, decision, decided_by, decided_at, gate_passed, override_reason, reason, bundle_path,
         content_hash, checks_json],
    ).fetchone()
    return int(row[0])
