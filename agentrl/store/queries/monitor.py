"""Queries of the onset monitor (`agentrl.monitor`): what the hacking signals read of a run.

Store -> **queries.monitor** -> monitor -> Live banner, gate, `watch`'s store side.
"""

from __future__ import annotations

import pandas as pd

from agentrl.store.db import Con

__all__ = ["monitor_rollouts", "monitor_distributions", "monitor_probes", "monitor_events"]


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
