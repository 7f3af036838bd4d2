"""Several runs at once, for the Compare page. Run ids are bound as one list parameter.

Store -> **queries.compare** -> analysis.compare -> Compare page.
"""

from __future__ import annotations

import pandas as pd

from agentrl.store.db import Con


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


def step_metric_names_for_runs(con: Con, run_ids: list[str]) -> list[str]:
    """Engine-specific metric names any of the runs logged (TRL's kl, entropy, ...)."""
    rows = con.execute(
        "SELECT DISTINCT unnest(map_keys(metrics)) AS name FROM steps WHERE list_contains(?, run_id) ORDER BY name",
        [list(run_ids)],
    ).fetchall()
    return [r[0] for r in rows]


def step_metric_for_runs(con: Con, run_ids: list[str], name: str) -> pd.DataFrame:
    """One engine metric per step of several runs: run_id, step, value."""
    return con.execute(
        """
        SELECT run_id, step, metrics[?] AS value FROM steps
        WHERE list_contains(?, run_id) AND metrics[?] IS NOT NULL ORDER BY run_id, step
        """,
        [name, list(run_ids), name],
    ).df()
