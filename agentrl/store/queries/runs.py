"""The run list and one run's header: records, progress, totals, the default picks.

Store -> **queries.runs** -> every page's run picker, the home page's runs table and the CLI.
"""

from __future__ import annotations

import pandas as pd

from agentrl.store.db import Con


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


def trajectory_count(con: Con, run_id: str) -> int:
    return int(con.execute("SELECT count(*) FROM trajectories WHERE run_id = ?", [run_id]).fetchone()[0])


def ingest_errors(con: Con) -> pd.DataFrame:
    return con.execute("SELECT path, error, seen_at FROM ingest_errors ORDER BY seen_at DESC").df()


def runs_by_id(con: Con, run_ids: list[str]) -> pd.DataFrame:
    """The run records of `run_ids`, in the order given."""
    df = con.execute(
        "SELECT run_id, name, kind, scorer, status, created_at FROM runs WHERE list_contains(?, run_id)",
        [list(run_ids)],
    ).df()
    order = {run_id: i for i, run_id in enumerate(run_ids)}
    return df.sort_values("run_id", key=lambda s: s.map(order)).reset_index(drop=True)


def newest_pair(con: Con) -> list[str]:
    """The newest outcome run and the newest guarded run of the same kind (outcome first)."""
    rows = con.execute(
        """
        WITH ranked AS (
            SELECT run_id, kind, scorer, created_at,
                   row_number() OVER (PARTITION BY kind, scorer ORDER BY created_at DESC, run_id DESC) AS rank
            FROM runs WHERE scorer IN ('outcome', 'guarded')
        )
        SELECT o.run_id, g.run_id
        FROM ranked o JOIN ranked g ON o.kind = g.kind AND o.rank = 1 AND g.rank = 1
                                    AND o.scorer = 'outcome' AND g.scorer = 'guarded'
        ORDER BY greatest(o.created_at, g.created_at) DESC
        LIMIT 1
        """
    ).fetchone()
    return [] if rows is None else [rows[0], rows[1]]


def totals_for_runs(con: Con, run_ids: list[str]) -> pd.DataFrame:
    """Run totals of several runs: run_id, steps, transitions, updates, vetoed_rollouts, vetoed_updates, clipped."""
    return con.execute(
        """
        SELECT run_id, count(*) AS steps, coalesce(sum(transitions), 0)::BIGINT AS transitions,
               coalesce(sum(updates), 0)::BIGINT AS updates, coalesce(sum(vetoed), 0)::BIGINT AS vetoed_rollouts,
               coalesce(sum(vetoed_updates), 0)::BIGINT AS vetoed_updates, coalesce(sum(clipped), 0)::BIGINT AS clipped
        FROM steps WHERE list_contains(?, run_id) GROUP BY run_id ORDER BY run_id
        """,
        [list(run_ids)],
    ).df()
