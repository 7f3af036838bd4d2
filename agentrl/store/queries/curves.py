"""One run's training curves: per-step metrics, reward components, action distributions,
held-out and probe evaluations, clipping and the engine's own metrics.

Store -> **queries.curves** -> Live page (and the gate's evidence).
"""

from __future__ import annotations

import pandas as pd

from agentrl.store.db import Con


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


def held_out_evals_for_runs(con: Con, run_ids: list[str]) -> pd.DataFrame:
    """`held_out_evals` (the latest evaluation) of several runs at once, a `run_id` column first."""
    return con.execute(
        """
        WITH e AS (SELECT * FROM evals WHERE run_id IN (SELECT unnest($runs)) AND split = 'held_out')
        SELECT run_id, step, task_id, actions, success, violation FROM e
        WHERE (run_id, step) IN (SELECT (run_id, max(step)) FROM e GROUP BY run_id)
        ORDER BY run_id, task_id
        """,
        {"runs": list(run_ids)},
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
