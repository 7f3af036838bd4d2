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


def probe_evals(con: Con, run_id: str) -> pd.DataFrame:
    """The exploit probes a run played itself at its end (split 'probe', its last probe step)."""
    return con.execute(
        """
        SELECT task_id, actions, success, violation FROM evals
        WHERE run_id = ? AND split = 'probe'
          AND step = (SELECT max(step) FROM evals WHERE run_id = ? AND split = 'probe')
        ORDER BY task_id
        """,
        [run_id, run_id],
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


# --- Compare: several runs at once. Run ids are bound as one list parameter. ---------------------


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


def steps_for_runs(con: Con, run_ids: list[str]) -> pd.DataFrame:
    """Per-step metrics of several runs, long by run: run_id, step, rates and counters."""
    return con.execute(
        """
        SELECT run_id, step, success_rate, violation_rate, duplicate_rate, mean_reward,
               vetoed, vetoed_updates, updates, clipped, transitions
        FROM steps WHERE list_contains(?, run_id) ORDER BY run_id, step
        """,
        [list(run_ids)],
    ).df()


def action_probs_for_runs(con: Con, run_ids: list[str], state: str) -> pd.DataFrame:
    """Every recorded distribution at `state` for several runs: run_id, step, action, prob."""
    return con.execute(
        """
        SELECT run_id, step, action, prob FROM action_probs
        WHERE list_contains(?, run_id) AND state = ? ORDER BY run_id, step, action
        """,
        [list(run_ids), state],
    ).df()


def sensitive_states_for_runs(con: Con, run_ids: list[str]) -> list[str]:
    rows = con.execute(
        "SELECT DISTINCT state FROM action_probs WHERE list_contains(?, run_id) ORDER BY state", [list(run_ids)]
    ).fetchall()
    return [r[0] for r in rows]


def clipped_by_epoch_for_runs(con: Con, run_ids: list[str]) -> pd.DataFrame:
    """Clipped transitions summed over each run, per epoch: run_id, epoch, clipped."""
    return con.execute(
        """
        SELECT run_id, epoch, sum(clipped)::BIGINT AS clipped FROM (
            SELECT run_id, unnest(clipped_by_epoch) AS clipped, generate_subscripts(clipped_by_epoch, 1) AS epoch
            FROM steps WHERE list_contains(?, run_id)
        ) GROUP BY run_id, epoch ORDER BY run_id, epoch
        """,
        [list(run_ids)],
    ).df()


def reward_components_for_runs(con: Con, run_ids: list[str]) -> pd.DataFrame:
    """Mean of every reward component per step and run: run_id, step, component, value."""
    return con.execute(
        """
        SELECT run_id, step, component, avg(value) AS value
        FROM (
            SELECT run_id, step, unnest(map_keys(components)) AS component, unnest(map_values(components)) AS value
            FROM trajectories WHERE list_contains(?, run_id)
        )
        GROUP BY run_id, step, component ORDER BY run_id, step, component
        """,
        [list(run_ids)],
    ).df()


def held_out_for_runs(con: Con, run_ids: list[str]) -> pd.DataFrame:
    """Each run's latest greedy held-out evaluation: run_id, step, task_id, actions, success, violation."""
    return con.execute(
        """
        SELECT e.run_id, e.step, e.task_id, e.actions, e.success, e.violation
        FROM evals e
        JOIN (SELECT run_id, max(step) AS step FROM evals
              WHERE list_contains(?, run_id) AND split = 'held_out' GROUP BY run_id) last USING (run_id, step)
        WHERE e.split = 'held_out'
        ORDER BY e.run_id, e.task_id
        """,
        [list(run_ids)],
    ).df()


def imitation_policy(con: Con, run_id: str) -> pd.DataFrame:
    """The imitation ladder's policy tables: stage, state, action, prob."""
    return con.execute(
        "SELECT stage, state, action, prob FROM imitation_policy WHERE run_id = ? ORDER BY stage, state, action",
        [run_id],
    ).df()


def imitation_labels(con: Con, run_id: str) -> pd.DataFrame:
    """Labels a DAgger round added: stage, idx, state, action."""
    return con.execute(
        "SELECT stage, idx, state, action FROM imitation_labels WHERE run_id = ? ORDER BY stage, idx", [run_id]
    ).df()


def ladder_evals(con: Con, run_id: str) -> pd.DataFrame:
    """Held-out results of each imitation stage: stage, task_id, actions, success, violation."""
    return con.execute(
        """
        SELECT substr(split, 8) AS stage, task_id, actions, success, violation FROM evals
        WHERE run_id = ? AND starts_with(split, 'ladder:') ORDER BY stage, task_id
        """,
        [run_id],
    ).df()


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


# --- Review: the trajectory explorer, reviews, fixtures, promotions. ----------------------------

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
        ORDER BY t.reward {order}, t.step DESC, t.traj_idx
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
        ORDER BY t.reward DESC, t.step DESC, t.traj_idx
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


def all_fixtures(con: Con) -> pd.DataFrame:
    return con.execute(
        """
        SELECT fixture_id, source_run_id, step, traj_idx, task_id, amount, start_state, actions, note,
               created_by, created_at
        FROM fixtures ORDER BY fixture_id
        """
    ).df()


def add_fixture(con: Con, source_run_id: str, step: int, traj_idx: int, task_id: str, amount: int,
                start_state: str, actions: list[str], note: str, created_by: str, created_at) -> int:
    row = con.execute(
        """
        INSERT INTO fixtures (source_run_id, step, traj_idx, task_id, amount, start_state, actions, note,
                              created_by, created_at)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING fixture_id
        """,
        [source_run_id, int(step), int(traj_idx), task_id, int(amount), start_state, list(actions), note,
         created_by, created_at],
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


# --- Hardware ----------------------------------------------------------------------------------


def budget_for_run(con: Con, run_id: str) -> pd.DataFrame:
    """The run's memory budget: component, estimate bytes, measured bytes (either may be null)."""
    return con.execute(
        """
        SELECT component,
               max(bytes) FILTER (WHERE source = 'estimate') AS estimate_bytes,
               max(bytes) FILTER (WHERE source = 'measured') AS measured_bytes
        FROM budgets WHERE run_id = ?
        GROUP BY component
        ORDER BY min(CASE source WHEN 'estimate' THEN 0 ELSE 1 END), component
        """,
        [run_id],
    ).df()


def peak_memory_by_run(con: Con) -> pd.DataFrame:
    """Every run's peak process-tree memory and CPU as sampled, with its budget estimate."""
    return con.execute(
        """
        SELECT r.run_id, r.kind, r.scorer, r.status, h.samples, h.peak_rss_bytes, h.peak_cpu_percent,
               h.peak_gpu_allocated_bytes, b.estimate_total_bytes
        FROM runs r
        LEFT JOIN (SELECT run_id, count(*) AS samples, max(rss_bytes) AS peak_rss_bytes,
                          max(cpu_percent) AS peak_cpu_percent, max(gpu_allocated_bytes) AS peak_gpu_allocated_bytes
                   FROM hardware GROUP BY run_id) h USING (run_id)
        LEFT JOIN (SELECT run_id, max(bytes) AS estimate_total_bytes FROM budgets
                   WHERE source = 'estimate' AND component = 'total' GROUP BY run_id) b USING (run_id)
        ORDER BY r.created_at DESC, r.run_id DESC
        """
    ).df()


def step_metric_names(con: Con, run_id: str) -> list[str]:
    """Names of the engine-specific metrics a run logged per step (TRL's kl, entropy, ...)."""
    rows = con.execute(
        "SELECT DISTINCT unnest(map_keys(metrics)) AS name FROM steps WHERE run_id = ? ORDER BY name", [run_id]
    ).fetchall()
    return [r[0] for r in rows]


def step_metric_series(con: Con, run_id: str, names: list[str]) -> pd.DataFrame:
    """Chosen engine metrics per step, long form: step, name, value."""
    return con.execute(
        """
        SELECT step, name, value FROM (
            SELECT step, unnest(map_keys(metrics)) AS name, unnest(map_values(metrics)) AS value
            FROM steps WHERE run_id = ?
        ) WHERE list_contains(?, name) ORDER BY name, step
        """,
        [run_id, list(names)],
    ).df()


# --- the onset monitor (agentrl.monitor) -------------------------------------------------------


def monitor_rollouts(con: Con, run_id: str, after_step: int = 0) -> pd.DataFrame:
    """What the hacking signals read of each trajectory: step, reward, and the verifier's flag."""
    return con.execute(
        """
        SELECT step, reward, coalesce(violation, false) AS flagged, coalesce(success, false) AS success,
               coalesce(vetoed, false) AS vetoed
        FROM trajectories WHERE run_id = ? AND step > ? ORDER BY step, traj_idx
        """,
        [run_id, after_step],
    ).df()


def monitor_distributions(con: Con, run_id: str) -> pd.DataFrame:
    """Every recorded next-action distribution at the run's decision points: step, state, action, prob."""
    return con.execute(
        "SELECT step, state, action, prob FROM action_probs WHERE run_id = ? ORDER BY step, state, action",
        [run_id],
    ).df()


def monitor_probes(con: Con, run_id: str) -> pd.DataFrame:
    """Every exploit-probe replay of a run (split 'probe'): step, task_id, violation."""
    return con.execute(
        "SELECT step, task_id, violation FROM evals WHERE run_id = ? AND split = 'probe' ORDER BY step, task_id",
        [run_id],
    ).df()


def monitor_events(con: Con, run_id: str) -> pd.DataFrame:
    """Onset events a run recorded itself (its `events` table): step, kind, signal, value, threshold, message."""
    return con.execute(
        "SELECT step, kind, signal, value, threshold, message FROM events WHERE run_id = ? ORDER BY step",
        [run_id],
    ).df()
