"""Memory and CPU samples of runs and their memory budgets.

Store -> **queries.hardware** -> Hardware and Live pages.
"""

from __future__ import annotations

import pandas as pd

from agentrl.store.db import Con


def hardware_samples(con: Con, run_id: str) -> pd.DataFrame:
    return con.execute(
        """
        SELECT ts, step, rss_bytes, cpu_percent, gpu_allocated_bytes, gpu_reserved_bytes,
               gpu_total_bytes, sys_available_bytes
        FROM hardware WHERE run_id = ? ORDER BY ts
        """,
        [run_id],
    ).df()


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
