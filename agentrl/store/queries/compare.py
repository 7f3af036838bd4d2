"""Several runs at once, for the Compare page. Run ids are bound as one list parameter.

Store -> **queries.compare** -> analysis.compare -> Compare page. The per-step series can be
asked for thinned (`max_steps`: at most that many evenly spaced steps of each run, its first and
last among them; `max_points`: the very rows the page's `downsample` would keep, chosen in SQL by
`queries.thinning`), so 20 runs of 15,625 steps cost about what two short ones do; reward
components come from `step_components`, the per-step sums ingest keeps, not from unnesting every
trajectory's map.
"""

from __future__ import annotations

import pandas as pd

from agentrl.store.db import Con
from agentrl.store.queries.thinning import thinned as _thinned

_STEP_COLUMNS = ("run_id, step, success_rate, violation_rate, duplicate_rate, mean_reward, "
                 "vetoed, vetoed_updates, updates, clipped, transitions")


def steps_for_runs(con: Con, run_ids: list[str], max_points: int | None = None) -> pd.DataFrame:
    """Per-step metrics of several runs, long by run: run_id, step, rates and counters (with
    `max_points`, the rows `downsample(frame, max_points, by="run_id")` keeps, thinned in SQL)."""
    if max_points is None:
        return con.execute(
            f"SELECT {_STEP_COLUMNS} FROM steps WHERE list_contains(?, run_id) ORDER BY run_id, step", [list(run_ids)]
        ).df()
    return _thinned(con, f"SELECT {_STEP_COLUMNS} FROM steps WHERE list_contains($runs, run_id)", _STEP_COLUMNS,
                    {"runs": list(run_ids)}, max_points)


def action_probs_for_runs(con: Con, run_ids: list[str], state: str, max_steps: int | None = None) -> pd.DataFrame:
    """Every recorded distribution at `state` for several runs: run_id, step, action, prob
    (with `max_steps`, at most that many evenly spaced steps of each run, its last included)."""
    if max_steps is None:
        return con.execute(
            """
            SELECT run_id, step, action, prob FROM action_probs
            WHERE list_contains(?, run_id) AND state = ? ORDER BY run_id, step, action
            """,
            [list(run_ids), state],
        ).df()
    return con.execute(
        """
        WITH span AS (SELECT run_id, min(step) AS first, max(step) AS last,
                             greatest(1, ceil((max(step) - min(step)) / $points))::BIGINT AS stride
                      FROM action_probs WHERE list_contains($runs, run_id) AND state = $state GROUP BY run_id)
        SELECT p.run_id, p.step, p.action, p.prob FROM action_probs p JOIN span s USING (run_id)
        WHERE p.state = $state AND ((p.step - s.first) % s.stride = 0 OR p.step = s.last)
        ORDER BY p.run_id, p.step, p.action
        """,
        {"runs": list(run_ids), "state": state, "points": _points(max_steps)},
    ).df()


def action_probs_at_step(con: Con, run_ids: list[str], state: str, step: int) -> pd.DataFrame:
    """The distributions at `state` of several runs at one step: run_id, step, action, prob."""
    return con.execute(
        """
        SELECT run_id, step, action, prob FROM action_probs
        WHERE list_contains(?, run_id) AND state = ? AND step = ? ORDER BY run_id, action
        """,
        [list(run_ids), state, int(step)],
    ).df()


def _points(max_steps: int) -> int:
    if max_steps.__class__ is not int or max_steps < 2:
        raise ValueError(f"max_steps must be an int of at least 2, not {max_steps!r}")
    return max_steps - 1  # the stride leaves room for the last step


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


def reward_components_for_runs(con: Con, run_ids: list[str], max_steps: int | None = None) -> pd.DataFrame:
    """Mean of every reward component per step and run: run_id, step, component, value (from
    the per-step sums ingest keeps; with `max_steps`, at most that many evenly spaced steps of
    each run, its last included)."""
    return con.execute(
        """
        WITH span AS (SELECT run_id, min(step) AS first, max(step) AS last,
                             greatest(1, ceil((max(step) - min(step)) / $points))::BIGINT AS stride
                      FROM step_components WHERE list_contains($runs, run_id) GROUP BY run_id)
        SELECT p.run_id, p.step, p.component, sum(p.total) / nullif(sum(p.n), 0) AS value
        FROM step_components p JOIN span s USING (run_id)
        WHERE (p.step - s.first) % s.stride = 0 OR p.step = s.last
        GROUP BY p.run_id, p.step, p.component ORDER BY p.run_id, p.step, p.component
        """,
        {"runs": list(run_ids), "points": _points(max_steps) if max_steps is not None else 2**31},
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


def step_metric_for_runs(con: Con, run_ids: list[str], name: str, max_points: int | None = None) -> pd.DataFrame:
    """One engine metric per step of several runs: run_id, step, value (with `max_points`, the rows
    `downsample(frame, max_points, by="run_id")` keeps, thinned in SQL)."""
    if max_points is None:
        return con.execute(
            """
            SELECT run_id, step, metrics[?] AS value FROM steps
            WHERE list_contains(?, run_id) AND metrics[?] IS NOT NULL ORDER BY run_id, step
            """,
            [name, list(run_ids), name],
        ).df()
    return _thinned(con, "SELECT run_id, step, metrics[$name] AS value FROM steps "
                         "WHERE list_contains($runs, run_id) AND metrics[$name] IS NOT NULL", "run_id, step, value",
                    {"runs": list(run_ids), "name": name}, max_points)
