"""The run list and one run's header: records, progress, totals, the default picks.

Store -> **queries.runs** -> every page's run picker, the home page's runs table and the CLI.
"""

from __future__ import annotations

import pandas as pd

from agentrl.store.db import Con, transaction


def list_runs(con: Con) -> pd.DataFrame:
    """Every run, newest first: its record, the last step it reported with that step's success and
    violation rates and mean reward, its latest held-out success, its tags (those agentrl.init gave
    and those added on the page), note (the page's, else init's notes), archived flag
    and colour index (None until the dashboard assigned one)."""
    return con.execute(
        """
        SELECT r.run_id, r.name, r.kind, r.scorer, r.status, r.created_at, r.started_at, r.ended_at,
               coalesce(s.steps_done, 0) AS steps_done, r.total_steps, r.error,
               s.final_success, s.final_violation, s.final_reward, e.held_out_success,
               list_concat(coalesce(n.tags, []), list_filter(coalesce(r.tags, []),
                                                            lambda t: NOT list_contains(coalesce(n.tags, []), t))) AS tags,
               coalesce(n.note, r.notes) AS note, coalesce(n.archived, false) AS archived, c.color_index
        FROM runs r
        LEFT JOIN (SELECT run_id, max(step) AS steps_done, arg_max(success_rate, step) AS final_success,
                          arg_max(violation_rate, step) AS final_violation, arg_max(mean_reward, step) AS final_reward
                   FROM steps GROUP BY run_id) s USING (run_id)
        LEFT JOIN (SELECT run_id, avg(success::INTEGER) AS held_out_success
                   FROM evals e
                   WHERE split = 'held_out' AND step = (SELECT max(step) FROM evals l
                                                        WHERE l.run_id = e.run_id AND l.split = 'held_out')
                   GROUP BY run_id) e USING (run_id)
        LEFT JOIN run_notes n USING (run_id)
        LEFT JOIN run_colors c USING (run_id)
        ORDER BY r.created_at DESC, r.run_id DESC
        """
    ).df()


def run_version(con: Con, run_id: str) -> tuple:
    """What changes whenever a run reports anything (status, steps, samples, evaluations): a page
    redraws a run's charts only when this changed."""
    row = con.execute(
        """
        SELECT (SELECT status FROM runs WHERE run_id = $run), (SELECT max(step) FROM steps WHERE run_id = $run),
               (SELECT count(*) FROM hardware WHERE run_id = $run), (SELECT count(*) FROM evals WHERE run_id = $run),
               (SELECT count(*) FROM action_probs WHERE run_id = $run)
        """,
        {"run": run_id},
    ).fetchone()
    return tuple(row)


def run_statuses(con: Con) -> dict[str, str]:
    """Every run's status now, by run id: what the run pickers' labels show, read fresh (a page
    redraws its picker when this changed)."""
    return dict(con.execute("SELECT run_id, status FROM runs ORDER BY run_id").fetchall())


def config_texts(con: Con, run_ids: list[str]) -> dict[str, str]:
    """The config (JSON text, as the run recorded it) of each of `run_ids` the store holds."""
    rows = con.execute("SELECT run_id, config FROM runs WHERE list_contains(?, run_id)", [list(run_ids)]).fetchall()
    return {run_id: config for run_id, config in rows}


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
    """The runs of the newest outcome/guarded pair launched together: the newest launch group (one
    click on Launch) holding both scorers, every run of it (outcome runs first, each scorer's by
    seed). Stores from before launch groups: two runs of the same kind whose configs are equal but
    for name and scorer (the newest such pair, of equally new ones the two started closest
    together). Archived runs are left out; [] when there is no pair."""
    launched = [r[0] for r in con.execute(
        """
        WITH members AS (
            SELECT r.run_id, r.launch_group, r.scorer, r.created_at, TRY_CAST(json_extract(r.config, '$.seed') AS BIGINT) AS seed
            FROM runs r LEFT JOIN run_notes n USING (run_id)
            WHERE r.launch_group IS NOT NULL AND r.scorer IN ('outcome', 'guarded') AND NOT coalesce(n.archived, false)
        ),
        newest AS (
            SELECT launch_group FROM members GROUP BY launch_group HAVING count(DISTINCT scorer) = 2
            ORDER BY max(created_at) DESC, launch_group DESC LIMIT 1
        )
        SELECT run_id FROM members JOIN newest USING (launch_group)
        ORDER BY scorer = 'guarded', seed, created_at, run_id
        """
    ).fetchall()]
    if launched:
        return launched
    rows = con.execute(
        """
        WITH candidates AS (
            SELECT r.run_id, r.kind, r.scorer, r.created_at,
                   json_merge_patch(r.config, '{"name": null, "scorer": null}') AS settings
            FROM runs r LEFT JOIN run_notes n USING (run_id)
            WHERE r.scorer IN ('outcome', 'guarded') AND NOT coalesce(n.archived, false) AND r.launch_group IS NULL
        )
        SELECT o.run_id, g.run_id
        FROM candidates o JOIN candidates g
          ON o.scorer = 'outcome' AND g.scorer = 'guarded' AND o.kind = g.kind AND o.settings = g.settings
        ORDER BY greatest(o.created_at, g.created_at) DESC,
                 abs(epoch(o.created_at) - epoch(g.created_at)), o.run_id DESC
        LIMIT 1
        """
    ).fetchone()
    return [] if rows is None else [rows[0], rows[1]]


def run_configs(con: Con, run_ids: list[str]) -> pd.DataFrame:
    """What seed grouping reads of several runs, in the order given: run_id, name, kind, scorer,
    config (JSON text), launch_group."""
    df = con.execute(
        "SELECT run_id, name, kind, scorer, config::VARCHAR AS config, launch_group FROM runs WHERE list_contains(?, run_id)",
        [list(run_ids)],
    ).df()
    order = {run_id: i for i, run_id in enumerate(run_ids)}
    return df.sort_values("run_id", key=lambda s: s.map(order)).reset_index(drop=True)


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


# Every table that holds rows a run recorded (the decisions log is not among them: reviews,
# fixtures and promotions outlive the run they are about).
RUN_TABLES = ("steps", "trajectories", "step_components", "step_tallies", "step_behaviours", "run_behaviours",
              "behaviour_actions",
              "events", "action_probs", "evals",
              "imitation_policy", "imitation_labels", "hardware", "budgets", "ingested_files", "run_notes", "runs")


def delete_run_rows(con: Con, run_id: str) -> dict[str, int]:
    """Delete everything a run recorded from the store, in one transaction; returns rows per table.
    Reviews, fixtures and promotions of the run stay (the decisions are an append-only log)."""
    deleted = {}
    with transaction(con) as cur:
        for table in RUN_TABLES:  # names from the constant above, never from input
            deleted[table] = int(cur.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id]).fetchone()[0])
        deleted["ingest_errors"] = int(
            cur.execute("DELETE FROM ingest_errors WHERE starts_with(path, ?)", [f"{run_id}/"]).fetchone()[0])
    return deleted


def past_step_seconds(con: Con, kind: str) -> float | None:
    """Median seconds per step of this engine's finished runs, step delays excluded; None without any."""
    row = con.execute(
        """
        SELECT median(s.elapsed_s / s.step - coalesce(TRY_CAST(json_extract(r.config, '$.step_delay') AS DOUBLE), 0))
        FROM runs r
        JOIN (SELECT run_id, arg_max(elapsed_s, step) AS elapsed_s, max(step) AS step FROM steps GROUP BY run_id) s
          USING (run_id)
        WHERE r.kind = ? AND r.status = 'succeeded' AND s.step > 0
        """,
        [kind],
    ).fetchone()
    return None if row is None or row[0] is None else max(0.0, float(row[0]))
