"""Every query the dashboard and the CLI make, each a named function with one parameterised
statement (values are bound with `?`, never formatted into SQL).

Store -> **queries** -> page: a page asks one of these for a DataFrame and draws it. Each takes a
DuckDB connection or cursor (the dashboard passes a cursor per thread).
"""

from __future__ import annotations

import pandas as pd
import duckdb

Con = duckdb.DuckDBPyConnection


def list_runs(con: Con) -> pd.DataFrame:
    """Every run, newest first, with the last step it reported."""
    return con.execute(
        """
        SELECT r.run_id, r.name, r.kind, r.scorer, r.status, r.created_at, r.started_at, r.ended_at,
               coalesce(s.steps_done, 0) AS steps_done, r.total_steps, r.error
        FROM runs r
        LEFT JOIN (SELECT run_id, max(step) AS steps_done FROM steps GROUP BY run_id) s USING (run_id)
        ORDER BY r.created_at DESC, r.run_id DESC
        """
    ).df()


def get_run(con: Con, run_id: str) -> dict | None:
    """One run's record (config as JSON text), or None."""
    df = con.execute("SELECT * FROM runs WHERE run_id = ?", [run_id]).df()
    return None if df.empty else df.iloc[0].to_dict()


def default_live_run(con: Con) -> str | None:
    """The newest running run, else the newest run of any status."""
    row = con.execute(
        """
        SELECT run_id FROM runs
        ORDER BY (status IN ('running', 'queued')) DESC, created_at DESC, run_id DESC
        LIMIT 1
        """
    ).fetchone()
    return None if row is None else row[0]


def step_metrics(con: Con, run_id: str) -> pd.DataFrame:
    """One row per step: rates, reward, veto, update and clip counters, in step order."""
    return con.execute(
        """
        SELECT step, ts, elapsed_s, success_rate, violation_rate, duplicate_rate, mean_reward,
               vetoed, vetoed_updates, updates, clipped, transitions
        FROM steps WHERE run_id = ? ORDER BY step
        """,
        [run_id],
    ).df()


def progress(con: Con, run_id: str) -> dict:
    """Steps done of the total, elapsed training seconds, and an ETA from the mean step time."""
    row = con.execute(
        """
        SELECT r.total_steps, r.status, max(s.step), arg_max(s.elapsed_s, s.step)
        FROM runs r LEFT JOIN steps s USING (run_id)
        WHERE r.run_id = ?
        GROUP BY r.total_steps, r.status
        """,
        [run_id],
    ).fetchone()
    if row is None:
        return {"total": 0, "done": 0, "elapsed_s": 0.0, "eta_s": None, "status": None}
    total, status, done, elapsed = row[0] or 0, row[1], row[2] or 0, row[3] or 0.0
    eta = None
    if done and total and status in ("running", "queued"):
        eta = max(0.0, (total - done) * elapsed / done)
    return {"total": total, "done": done, "elapsed_s": elapsed, "eta_s": eta, "status": status}


def reward_components_per_step(con: Con, run_id: str) -> pd.DataFrame:
    """Mean of every reward component per step, long form: step, component, value."""
    return con.execute(
        """
        SELECT step, component, avg(value) AS value
        FROM (
            SELECT step, unnest(map_keys(components)) AS component, unnest(map_values(components)) AS value
            FROM trajectories WHERE run_id = ?
        )
        GROUP BY step, component ORDER BY step, component
        """,
        [run_id],
    ).df()


def action_distribution(con: Con, run_id: str, state: str, step: int | None = None) -> pd.DataFrame:
    """The action distribution at `state` at `step` (default: the latest recorded)."""
    return con.execute(
        """
        SELECT step, action, prob FROM action_probs
        WHERE run_id = ? AND state = ?
          AND step = coalesce(?, (SELECT max(step) FROM action_probs WHERE run_id = ? AND state = ?))
        ORDER BY action
        """,
        [run_id, state, step, run_id, state],
    ).df()


def action_probs_history(con: Con, run_id: str, state: str) -> pd.DataFrame:
    """Every recorded step's distribution at `state`: step, action, prob."""
    return con.execute(
        "SELECT step, action, prob FROM action_probs WHERE run_id = ? AND state = ? ORDER BY step, action",
        [run_id, state],
    ).df()


def sensitive_states(con: Con, run_id: str) -> list[str]:
    rows = con.execute("SELECT DISTINCT state FROM action_probs WHERE run_id = ? ORDER BY state", [run_id]).fetchall()
    return [r[0] for r in rows]


def held_out_evals(con: Con, run_id: str, step: int | None = None) -> pd.DataFrame:
    """Greedy held-out results at `step` (default: the latest evaluation)."""
    return con.execute(
        """
        SELECT step, task_id, actions, success, violation FROM evals
        WHERE run_id = ? AND split = 'held_out'
          AND step = coalesce(?, (SELECT max(step) FROM evals WHERE run_id = ? AND split = 'held_out'))
        ORDER BY task_id
        """,
        [run_id, step, run_id],
    ).df()


def run_totals(con: Con, run_id: str) -> dict:
    """Transitions, updates, vetoed rollouts, vetoed updates and clipped transitions over the run."""
    row = con.execute(
        """
        SELECT count(*), coalesce(sum(transitions), 0), coalesce(sum(updates), 0),
               coalesce(sum(vetoed), 0), coalesce(sum(vetoed_updates), 0), coalesce(sum(clipped), 0)
        FROM steps WHERE run_id = ?
        """,
        [run_id],
    ).fetchone()
    keys = ("steps", "transitions", "updates", "vetoed_rollouts", "vetoed_updates", "clipped")
    return {k: int(v) for k, v in zip(keys, row)}


def clipped_by_epoch(con: Con, run_id: str) -> list[int]:
    """Clipped transitions summed over the run, one number per epoch."""
    rows = con.execute(
        """
        SELECT epoch, sum(clipped)::BIGINT FROM (
            SELECT unnest(clipped_by_epoch) AS clipped, generate_subscripts(clipped_by_epoch, 1) AS epoch
            FROM steps WHERE run_id = ?
        ) GROUP BY epoch ORDER BY epoch
        """,
        [run_id],
    ).fetchall()
    return [int(r[1]) for r in rows]


def trajectory_count(con: Con, run_id: str) -> int:
    return int(con.execute("SELECT count(*) FROM trajectories WHERE run_id = ?", [run_id]).fetchone()[0])


def hardware_samples(con: Con, run_id: str) -> pd.DataFrame:
    return con.execute(
        """
        SELECT ts, step, rss_bytes, cpu_percent, gpu_allocated_bytes, gpu_reserved_bytes,
               gpu_total_bytes, sys_available_bytes
        FROM hardware WHERE run_id = ? ORDER BY ts
        """,
        [run_id],
    ).df()


def ingest_errors(con: Con) -> pd.DataFrame:
    return con.execute("SELECT path, error, seen_at FROM ingest_errors ORDER BY seen_at DESC").df()
