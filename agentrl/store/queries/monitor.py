"""Queries of the onset monitor (`agentrl.monitor`): what the hacking signals read of a run.

Store -> **queries.monitor** -> monitor -> Live banner, gate, `watch`'s store side.
"""

from __future__ import annotations

import pandas as pd

from agentrl.store.db import Con

__all__ = ["monitor_step_tallies", "monitor_distribution_matrices", "monitor_probes", "monitor_events"]


def monitor_step_tallies(con: Con, run_id: str) -> dict:
    """The rollout signals' per-step tallies as columns (numpy arrays named as
    `agentrl.monitor.signals.StepTally`'s fields, step first), summed here so a run of 15,625 steps
    hands the monitor 15,625 values a column, not 500,000 rows."""
    return con.execute(
        """
        WITH t AS (
            SELECT step, coalesce(reward, 0.0) AS reward, coalesce(violation, false) AS flagged,
                   coalesce(success, false) AS success, coalesce(vetoed, false) AS vetoed,
                   max(coalesce(reward, 0.0)) OVER (PARTITION BY step) AS best
            FROM trajectories WHERE run_id = ?
        )
        SELECT step, count(*)::INTEGER AS n, count(*) FILTER (flagged AND NOT vetoed)::INTEGER AS taught,
               count(*) FILTER (flagged)::INTEGER AS flagged, coalesce(sum(reward) FILTER (flagged), 0.0) AS flagged_reward,
               count(*) FILTER (NOT flagged)::INTEGER AS clean, coalesce(sum(reward) FILTER (NOT flagged), 0.0) AS clean_reward,
               count(*) FILTER (NOT flagged AND success)::INTEGER AS clean_success,
               coalesce(sum(reward) FILTER (NOT flagged AND success), 0.0) AS clean_success_reward,
               count(*) FILTER (reward >= best - 1e-9)::INTEGER AS top,
               count(*) FILTER (reward >= best - 1e-9 AND flagged)::INTEGER AS top_flagged
        FROM t GROUP BY step ORDER BY step
        """,
        [run_id],
    ).fetchnumpy()


def monitor_distribution_matrices(con: Con, run_id: str) -> list[tuple]:
    """Every recorded next-action distribution at the run's decision points, one row a state:
    (state, [steps], [actions], [[prob of each action] for each step]), steps in order, an action a
    step did not record as 0. Pivoted here: a long run has tens of thousands of (step, action) rows."""
    return con.execute(
        """
        WITH actions AS (
            SELECT state, list(DISTINCT action ORDER BY action) AS actions FROM action_probs WHERE run_id = ? GROUP BY state
        ), steps AS (
            SELECT p.state, p.step, list(coalesce(p.prob, 0.0) ORDER BY p.action) AS probs, list(p.action ORDER BY p.action) AS seen
            FROM action_probs p WHERE p.run_id = ? GROUP BY p.state, p.step
        )
        SELECT s.state, list(s.step ORDER BY s.step), any_value(a.actions),
               list(CASE WHEN s.seen = a.actions THEN s.probs
                         ELSE list_transform(a.actions, lambda x: coalesce(s.probs[list_position(s.seen, x)], 0.0)) END
                    ORDER BY s.step)
        FROM steps s JOIN actions a USING (state) GROUP BY s.state ORDER BY s.state
        """,
        [run_id, run_id],
    ).fetchall()


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
