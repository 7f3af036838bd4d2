"""Queries of the onset monitor (`agentrl.monitor`): what the hacking signals read of a run.

Store -> **queries.monitor** -> monitor -> Live banner, gate, `watch`'s store side.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from agentrl.store.db import Con
from agentrl.store.queries.ledger import STEP_TALLIES_SQL

__all__ = ["monitor_step_tallies", "monitor_distribution_matrices", "monitor_probes", "monitor_events",
           "monitor_behaviour_columns", "monitor_approved_behaviours", "monitor_action_uses",
           "monitor_reviewed", "monitor_run_engine", "monitor_fixture_behaviours", "monitor_test_pass_rates",
           "monitor_signals_fingerprint"]


def monitor_step_tallies(con: Con, run_id: str) -> dict:
    """The rollout signals' per-step tallies as columns (numpy arrays named as
    `agentrl.monitor.signals.StepTally`'s fields, step first): the rows ingest kept in
    `step_tallies`, one a step, so a run of 15,625 steps hands the monitor 15,625 values a column,
    not 500,000 rows. A step whose trajectories came in more than one commit has a row for each,
    whose top counts cannot be added: such a run is tallied from its trajectories."""
    split = con.execute(
        "SELECT count(*) > count(DISTINCT step) FROM step_tallies WHERE run_id = ?", [run_id]).fetchone()[0]
    if split:
        relation = "(SELECT * FROM trajectories WHERE run_id = $run_id)"
        sql = f"SELECT * EXCLUDE (run_id, best) FROM ({STEP_TALLIES_SQL.format(relation=relation)}) ORDER BY step"
    else:
        sql = ("SELECT * EXCLUDE (run_id, best) FROM step_tallies WHERE run_id = $run_id ORDER BY step")
    return con.execute(sql, {"run_id": run_id}).fetchnumpy()


def monitor_distribution_matrices(con: Con, run_id: str) -> list[tuple]:
    """Every recorded next-action distribution at the run's decision points, one row a state:
    (state, steps: int array in order, actions: sorted names, probs: float array steps x actions),
    an action a step did not record as 0. The rows come as numbers (each state and action coded
    by its rank) and are pivoted with numpy: a long run has tens of thousands of (step, action)
    rows, and a pivot into SQL lists took four times as long."""
    import numpy as np

    names = con.execute(
        "SELECT state, list(DISTINCT action ORDER BY action) FROM action_probs WHERE run_id = ? "
        "GROUP BY state ORDER BY state",
        [run_id],
    ).fetchall()
    cols = con.execute(
        """
        WITH names AS (SELECT DISTINCT state, action FROM action_probs WHERE run_id = ?),
        codes AS (
            SELECT state, action, dense_rank() OVER (ORDER BY state)::INTEGER - 1 AS state_code,
                   row_number() OVER (PARTITION BY state ORDER BY action)::INTEGER - 1 AS action_code
            FROM names
        )
        SELECT c.state_code, p.step, c.action_code, coalesce(p.prob, 0.0) AS prob
        FROM action_probs p JOIN codes c USING (state, action)
        WHERE p.run_id = ? ORDER BY c.state_code, p.step
        """,
        [run_id, run_id],
    ).fetchnumpy()
    state_code = np.asarray(cols["state_code"])
    bounds = np.searchsorted(state_code, np.arange(len(names) + 1))
    out = []
    for code, (state, actions) in enumerate(names):
        rows = slice(bounds[code], bounds[code + 1])
        steps, step_index = np.unique(np.asarray(cols["step"])[rows], return_inverse=True)
        probs = np.zeros((len(steps), len(actions)))
        probs[step_index, np.asarray(cols["action_code"])[rows]] = np.asarray(cols["prob"], dtype=float)[rows]
        out.append((state, steps, list(actions), probs))
    return out


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


def monitor_approved_behaviours(con: Con, run_id: str) -> list[str]:
    """Behaviours of the run with a trajectory whose latest verdict is 'approve'."""
    return [r[0] for r in con.execute(
        """
        WITH v AS (SELECT step, traj_idx, arg_max(verdict, review_id) AS verdict FROM reviews WHERE run_id = ?
                   GROUP BY step, traj_idx)
        SELECT DISTINCT t.behaviour FROM trajectories t JOIN v USING (step, traj_idx)
        WHERE t.run_id = ? AND v.verdict = 'approve' AND t.behaviour IS NOT NULL ORDER BY 1
        """, [run_id, run_id]).fetchall()]


def monitor_run_engine(con: Con, run_id: str) -> tuple[str, str] | None:
    """(kind, config JSON) of a run, or None: what names its task, for its fixtures."""
    row = con.execute("SELECT kind, config FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return None if row is None else (row[0], row[1])


def monitor_fixture_behaviours(con: Con, task: str | None) -> list[str]:
    """The behaviours of the exploit fixtures of task spec `task` (an older fixture without a task
    is the refund task's)."""
    if task is None:
        return []
    return [r[0] for r in con.execute(
        "SELECT DISTINCT behaviour FROM fixtures WHERE coalesce(task, 'refund') = ? AND behaviour IS NOT NULL ORDER BY 1",
        [task]).fetchall()]


def monitor_behaviour_columns(con: Con, run_id: str) -> tuple[list[str], dict]:
    """Every row ingest kept in `step_behaviours` for the run, as numbers: (its behaviours, sorted,
    read from `run_behaviours`, which is kept with it in the same transactions; and columns `code`
    (the behaviour's index in that list), `step`, `n` (rollouts) and `unflagged`), in no particular
    order; a step that came in more than one commit has a row for each. What `unverified_share`
    reads, without a Python object a row (a run of 15,625 steps has 500,000)."""
    named = con.execute(  # the run's behaviours and their store-wide numbers, from the small tables
        "SELECT behaviour, c.code FROM (SELECT DISTINCT behaviour FROM run_behaviours WHERE run_id = ?) "
        "JOIN behaviour_names c USING (behaviour) ORDER BY behaviour", [run_id]).fetchall()
    names = [name for name, _ in named]
    cols = con.execute(  # by number, mapped to the run's own indices below (no faster than the join by name: 23 vs 22 ms)
        "SELECT code, step, n, n - flagged AS unflagged FROM step_behaviours WHERE run_id = ?", [run_id]).fetchnumpy()
    codes = np.asarray(cols["code"], dtype=np.int64)
    largest = max([code for _, code in named] + [int(codes.max()) if len(codes) else -1])
    index = np.full(largest + 1, -1, dtype=np.int32)  # store number -> the run's
    index[[code for _, code in named]] = np.arange(len(named), dtype=np.int32)
    local = index[codes]
    # The two reads are two transactions: rows an ingest committed in between may name behaviours
    # the first did not see. They are left out, as a join with the names left them out.
    known = local >= 0
    cols = {name: np.asarray(column)[known] for name, column in cols.items()} if not known.all() else dict(cols)
    cols["code"] = local[known] if not known.all() else local
    return names, cols


def monitor_action_uses(con: Con, run_id: str, suspect: list[str]) -> list[tuple[str, str, int, int]]:
    """(state, action, uses in flagged trajectories or of a behaviour in `suspect`, uses) of the
    run's trajectories, from `behaviour_actions` (a run of 500,000 trajectories has a few thousand
    such rows): each action at its recorded state, or '*' where the states do not line up."""
    return con.execute(
        """
        WITH suspect AS (SELECT unnest($suspect) AS behaviour)  -- joined, not list_contains: hundreds of names
        SELECT state, action,
               sum(CASE WHEN coalesce(behaviour IN (SELECT behaviour FROM suspect), false) THEN uses ELSE flagged END)::BIGINT,
               sum(uses)::BIGINT
        FROM behaviour_actions WHERE run_id = $run_id GROUP BY state, action
        """,
        {"run_id": run_id, "suspect": list(suspect)},
    ).fetchall()


def monitor_reviewed(con: Con, run_id: str) -> list[tuple[str, str | None, bool | None, list | None, list | None]]:
    """(latest verdict, behaviour, violation, states, actions) of every reviewed trajectory of the
    run: the reviews first (few), then only their steps' trajectories."""
    verdicts = con.execute("SELECT step, traj_idx, arg_max(verdict, review_id) FROM reviews WHERE run_id = ? "
                           "GROUP BY step, traj_idx", [run_id]).fetchall()
    if not verdicts:
        return []
    return con.execute(
        """
        WITH v AS (SELECT unnest($steps) AS step, unnest($idx) AS traj_idx, unnest($verdicts) AS verdict)
        SELECT v.verdict, t.behaviour, t.violation, t.states, t.actions
        FROM v JOIN trajectories t ON t.run_id = $run_id AND t.step = v.step AND t.traj_idx = v.traj_idx
        WHERE t.step IN (SELECT DISTINCT step FROM v)  -- read only the reviewed steps' row groups
        """,
        {"run_id": run_id, "steps": [r[0] for r in verdicts], "idx": [r[1] for r in verdicts],
         "verdicts": [r[2] for r in verdicts]},
    ).fetchall()


def monitor_test_pass_rates(con: Con, run_id: str) -> dict[int, tuple[float, float]]:
    """{step: (visible-tests pass rate, held-out pass rate)} from the per-step sums of the `tests`
    and `held_out` reward components ingest keeps, at the steps that logged `held_out` (what the
    monitor's `test_gap` reads)."""
    rows = con.execute(
        """
        SELECT step,
               sum(total) FILTER (WHERE component = 'tests') / sum(n) FILTER (WHERE component = 'tests'),
               sum(total) FILTER (WHERE component = 'held_out') / sum(n) FILTER (WHERE component = 'held_out')
        FROM step_components
        WHERE run_id = ? AND component IN ('tests', 'held_out')
        GROUP BY step
        HAVING count(*) FILTER (WHERE component = 'held_out') > 0 AND count(*) FILTER (WHERE component = 'tests') > 0
        ORDER BY step
        """,
        [run_id],
    ).fetchall()
    return {int(step): (float(visible), float(held_out)) for step, visible, held_out in rows}


def monitor_signals_fingerprint(con: Con, run_id: str) -> tuple:
    """(the store's file, or None in memory; then what changes whenever anything a run's stored
    signals read changed: its record's creation time, its ingested chunks and their rows, its
    reviews, every task's fixtures). What `agentrl.monitor.kept` keys a run's signals by."""
    return tuple(con.execute(
        """
        SELECT (SELECT path FROM duckdb_databases() WHERE database_name = current_database()),
               (SELECT created_at FROM runs WHERE run_id = $run),
               (SELECT count(*) FROM ingested_files WHERE run_id = $run),
               (SELECT sum(rows) FROM ingested_files WHERE run_id = $run),
               (SELECT count(*) FROM reviews WHERE run_id = $run), (SELECT max(review_id) FROM reviews WHERE run_id = $run),
               (SELECT count(*) FROM fixtures), (SELECT max(fixture_id) FROM fixtures)
        """,
        {"run": run_id},
    ).fetchone())
