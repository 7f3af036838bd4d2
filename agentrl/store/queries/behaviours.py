"""Behaviours: each behaviour's share per step, the window the unverified marker and the gate's
coverage check read, the reviews by behaviour, and the next-action counts the found divergence reads.

Store (`step_behaviours`, `run_behaviours`, `trajectories.behaviour`) -> **queries.behaviours** -> analysis.behaviours
-> Live, Compare and Review pages, `agentrl behaviours`, `agentrl diff`, the gate. Per-step figures
come from the tallies ingest keeps; only the run's last K steps are read trajectory by trajectory
(the top-reward quarter needs each reward).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from agentrl.store.db import Con

__all__ = ["behaviour_step_shares", "behaviour_totals", "behaviour_window", "behaviour_reviews",
           "behaviour_members", "behaviour_representatives", "next_action_counts", "last_step", "last_steps",
           "behaviour_totals_for_runs", "behaviour_window_for_runs", "behaviour_reviews_for_runs"]


def last_step(con: Con, run_id: str) -> int:
    """The run's last step that has trajectories (0 when it has none), from `run_behaviours` (a
    row a behaviour, not a row a step)."""
    return int(con.execute("SELECT coalesce(max(last_step), 0) FROM run_behaviours WHERE run_id = ?", [run_id]).fetchone()[0])


def last_steps(con: Con, run_ids: list[str]) -> dict[str, int]:
    """`last_step` of each run (0 for one without trajectories)."""
    found = dict(con.execute("SELECT run_id, max(last_step) FROM run_behaviours WHERE run_id IN (SELECT unnest($runs)) "
                             "GROUP BY run_id", {"runs": list(run_ids)}).fetchall())
    return {run_id: int(found.get(run_id) or 0) for run_id in run_ids}


def behaviour_totals_for_runs(con: Con, since: dict[str, int]) -> pd.DataFrame:
    """`behaviour_totals` of several runs at once (a `run_id` column first), each after its own
    `since[run_id]`: the whole-run figures from `run_behaviours`, the window's from the last steps'
    `step_behaviours` (the least `since` bounds the scan)."""
    return con.execute(
        """
        WITH since AS (SELECT unnest($runs) AS run_id, unnest($since) AS since),
        whole AS (SELECT run_id, behaviour, min(first_step) AS first_step, sum(flagged)::BIGINT AS flagged_ever
                  FROM run_behaviours WHERE run_id IN (SELECT run_id FROM since) GROUP BY run_id, behaviour),
        win AS (SELECT b.run_id, b.behaviour, sum(b.n)::BIGINT AS n, sum(b.reward_total) AS reward_total,
                       sum(b.flagged)::BIGINT AS flagged, sum(b.success)::BIGINT AS success
                FROM step_behaviours b JOIN since s USING (run_id) WHERE b.step > s.since AND b.step > $lowest
                GROUP BY b.run_id, b.behaviour)
        SELECT w.run_id, w.behaviour, w.first_step, w.flagged_ever, coalesce(x.n, 0)::BIGINT AS n,
               coalesce(x.reward_total, 0.0) AS reward_total, coalesce(x.flagged, 0)::BIGINT AS flagged,
               coalesce(x.success, 0)::BIGINT AS success
        FROM whole w LEFT JOIN win x USING (run_id, behaviour) ORDER BY w.run_id, w.behaviour
        """,
        {"runs": list(since), "since": [int(v) for v in since.values()], "lowest": min(since.values(), default=0)},
    ).df()


def behaviour_window_for_runs(con: Con, since: dict[str, int]) -> pd.DataFrame:
    """`behaviour_window` of several runs at once (a `run_id` column first), each after its own `since`."""
    return con.execute(
        """
        WITH since AS (SELECT unnest($runs) AS run_id, unnest($since) AS since),
        w AS (
            SELECT t.run_id, t.behaviour, coalesce(t.reward, 0.0) AS reward,
                   coalesce(t.eligible, true) AND NOT coalesce(t.vetoed, false) AS taught
            FROM trajectories t JOIN since s USING (run_id) WHERE t.step > s.since AND t.step > $lowest
        ), cut AS (SELECT run_id, quantile_disc(reward, 0.75) AS q FROM w GROUP BY run_id)
        SELECT run_id, behaviour, count(*) FILTER (reward >= q)::BIGINT AS top_n, count(*) FILTER (taught)::BIGINT AS taught
        FROM w JOIN cut USING (run_id) GROUP BY run_id, behaviour ORDER BY run_id, behaviour
        """,
        {"runs": list(since), "since": [int(v) for v in since.values()], "lowest": min(since.values(), default=0)},
    ).df()


def behaviour_reviews_for_runs(con: Con, run_ids: list[str]) -> pd.DataFrame:
    """`behaviour_reviews` of several runs at once (a `run_id` column first): the reviews first
    (few), then only the reviewed steps' trajectories."""
    verdicts = con.execute("SELECT run_id, step, traj_idx, arg_max(verdict, review_id) FROM reviews "
                           "WHERE run_id IN (SELECT unnest($runs)) GROUP BY ALL", {"runs": list(run_ids)}).fetchall()
    if not verdicts:
        return pd.DataFrame({"run_id": pd.Series([], dtype=object), "behaviour": pd.Series([], dtype=object),
                             "approved": pd.Series([], dtype="int64"), "rejected": pd.Series([], dtype="int64")})
    columns = list(zip(*verdicts))
    return con.execute(
        """
        WITH v AS (SELECT unnest($runs) AS run_id, unnest($steps) AS step, unnest($idx) AS traj_idx,
                          unnest($verdicts) AS verdict)
        SELECT t.run_id, t.behaviour, count(*) FILTER (v.verdict = 'approve')::BIGINT AS approved,
               count(*) FILTER (v.verdict = 'reject')::BIGINT AS rejected
        FROM v JOIN trajectories t ON t.run_id = v.run_id AND t.step = v.step AND t.traj_idx = v.traj_idx
        WHERE t.step BETWEEN $lo AND $hi  -- read only the reviewed steps' row groups
        GROUP BY t.run_id, t.behaviour ORDER BY t.run_id, t.behaviour
        """,
        {"runs": list(columns[0]), "steps": list(columns[1]), "idx": list(columns[2]), "verdicts": list(columns[3]),
         "lo": min(columns[1]), "hi": max(columns[1])},
    ).df()


_KEPT_STEPS = """
    WITH span AS (SELECT unnest($runs) AS run_id, (generate_subscripts($runs, 1) - 1)::INTEGER AS run,
                         unnest($firsts) AS first, unnest($lasts) AS last, unnest($strides) AS stride),
    wanted AS (SELECT DISTINCT unnest(list_append(range(first, last, stride), last)) AS step FROM span),
    kept AS (SELECT s.run, t.step, t.code, t.n FROM step_behaviours t {steps} JOIN span s USING (run_id) WHERE {which})
"""
# With `max_steps`: the rows of any picked run's kept steps, found by a join on the step (an
# integer) with the few wanted, then each run's own (its first step and stride, and its last).
# A filter computing `(step - first) % stride` on every row of the table took three times as
# long: 30 against 9 ms on the bench store's 9.87M rows.
_EACH_RUNS_STEPS = ("JOIN wanted USING (step)", "(t.step - s.first) % s.stride = 0 OR t.step = s.last")
_EVERY_STEP = ("", "true")


def behaviour_step_shares(con: Con, run_ids: list[str], max_steps: int | None = None, keep: int | None = None,
                          other: str = "(other)") -> pd.DataFrame:
    """Per run, step and behaviour: `n` trajectories and their `share` of the step's trajectories
    (with `max_steps`, at most that many evenly spaced steps of each run, its first and last among
    them). With `keep`, what the page draws
    (`analysis.behaviours.lump_shares`): each run's `keep` behaviours of largest total share by
    name, the others summed as `other` (up to the rounding of the sums: 9 rows a step leave DuckDB
    instead of every behaviour's).

    The rows are grouped and joined by run number and behaviour number (`behaviour_names`), and
    named only once lumped: on the 10M-row bench store, grouping 600,000 rows by run id and names
    of up to 500 characters was half of the query. Each step's total is a join, not a window over
    the step's rows: on 20 runs of ~670 behaviours the window's partitioning took a quarter of it."""
    points = None if max_steps is None else max(1, int(max_steps) - 1)
    spans = con.execute(  # each run's first and last step and the stride of its kept steps, from the small table
        "SELECT run_id, min(first_step), max(last_step), greatest(1, ceil((max(last_step) - min(first_step)) / "
        "coalesce(?, 1)))::BIGINT FROM run_behaviours WHERE run_id IN (SELECT unnest(?)) GROUP BY run_id ORDER BY run_id",
        [points, list(run_ids)]).fetchall()
    params = {"runs": [r[0] for r in spans], "firsts": [r[1] for r in spans], "lasts": [r[2] for r in spans],
              "strides": [r[3] for r in spans]}
    steps, which = _EVERY_STEP if points is None else _EACH_RUNS_STEPS
    # A step that came in more than one commit has a row a commit for each behaviour: summed into
    # one here. Lumped, they need not be: each part's share adds up in the lumped sums below (to the
    # rounding of the sums).
    rows = "kept" if keep is not None else "(SELECT run, step, code, sum(n)::BIGINT AS n FROM kept GROUP BY ALL)"
    shares = _KEPT_STEPS.format(steps=steps, which=which) + f""",
        b AS (SELECT run, step, code, n::BIGINT AS n FROM {rows}),
        totals AS (SELECT run, step, sum(n) AS total FROM b GROUP BY ALL),
        shares AS (SELECT run, step, code, n, n / total AS share FROM b JOIN totals USING (run, step))
    """
    if keep is None:
        return con.execute(
            shares + """
            SELECT p.run_id, s.step, c.behaviour, s.n, s.share
            FROM shares s JOIN span p USING (run) JOIN behaviour_names c USING (code)
            ORDER BY p.run_id, s.step, c.behaviour
            """, params).df()
    lumped = con.execute(
        shares + """,
        sums AS (SELECT run, code, sum(share) AS total_share FROM shares GROUP BY run, code),
        ranked AS (SELECT run, code, row_number() OVER (PARTITION BY run ORDER BY total_share DESC, c.behaviour) AS rank
                   FROM sums JOIN behaviour_names c USING (code)),
        named AS (SELECT run, code, true AS named FROM ranked WHERE rank <= $keep)  -- a few rows to join with
        SELECT s.run, s.step, CASE WHEN r.named THEN s.code ELSE -1 END AS code, sum(s.n)::BIGINT AS n,
               sum(s.share) AS share
        FROM shares s LEFT JOIN named r USING (run, code) GROUP BY ALL
        """,
        {**params, "keep": int(keep)},
    ).fetchnumpy()
    # Named here, not joined in DuckDB: a few hundred names for ~50,000 rows (20 ms less on the bench store).
    codes = np.unique(lumped["code"])
    found = dict(con.execute("SELECT code, behaviour FROM behaviour_names WHERE code IN (SELECT unnest(?))",
                             [[int(c) for c in codes if c >= 0]]).fetchall())
    labels = np.array(sorted({found.get(int(c), other) for c in codes}), dtype=object)
    label_of = {int(c): int(np.searchsorted(labels, found.get(int(c), other))) for c in codes}
    label = np.array([label_of[int(c)] for c in codes])[np.searchsorted(codes, lumped["code"])]
    order = np.lexsort((label, lumped["step"], lumped["run"]))  # run numbers follow the sorted run ids
    return pd.DataFrame({"run_id": pd.array(np.array(params["runs"], dtype=object)[lumped["run"][order]], dtype="str"),
                         "step": np.asarray(lumped["step"][order], dtype="int32"),
                         "behaviour": pd.array(labels[label[order]], dtype="str"),
                         "n": np.asarray(lumped["n"][order], dtype="int64"),
                         "share": np.asarray(lumped["share"][order], dtype="float64")})


def behaviour_totals(con: Con, run_id: str, since_step: int, until_step: int | None = None) -> pd.DataFrame:
    """Per behaviour of one run up to `until_step` (default: all): its first step, trajectories
    flagged, and over the steps after `since_step` its count, summed reward, flagged and successful counts."""
    return con.execute(
        """
        SELECT behaviour, min(step) AS first_step, sum(flagged)::BIGINT AS flagged_ever,
               coalesce(sum(n) FILTER (step > ?), 0)::BIGINT AS n,
               coalesce(sum(reward_total) FILTER (step > ?), 0.0) AS reward_total,
               coalesce(sum(flagged) FILTER (step > ?), 0)::BIGINT AS flagged,
               coalesce(sum(success) FILTER (step > ?), 0)::BIGINT AS success
        FROM step_behaviours WHERE run_id = ? AND (? IS NULL OR step <= ?) GROUP BY behaviour ORDER BY behaviour
        """,
        [int(since_step)] * 4 + [run_id, until_step, until_step],
    ).df()


def behaviour_window(con: Con, run_id: str, since_step: int, until_step: int | None = None) -> pd.DataFrame:
    """Per behaviour, over the run's trajectories after `since_step` (up to `until_step`): how many are in the
    top-reward quarter (reward at or above the 75th percentile of those rewards, `quantile_disc`,
    a null reward as 0) and how many its scorer let teach (eligible and not vetoed)."""
    return con.execute(
        """
        WITH w AS (
            SELECT behaviour, coalesce(reward, 0.0) AS reward,
                   coalesce(eligible, true) AND NOT coalesce(vetoed, false) AS taught
            FROM trajectories WHERE run_id = ? AND step > ? AND (? IS NULL OR step <= ?)
        ), cut AS (SELECT quantile_disc(reward, 0.75) AS q FROM w)
        SELECT behaviour, count(*) FILTER (reward >= q)::BIGINT AS top_n, count(*) FILTER (taught)::BIGINT AS taught
        FROM w, cut GROUP BY behaviour ORDER BY behaviour
        """,
        [run_id, int(since_step), until_step, until_step],
    ).df()


def behaviour_reviews(con: Con, run_id: str) -> pd.DataFrame:
    """Per behaviour of one run: how many of its trajectories are approved and rejected (each
    trajectory by its latest verdict)."""
    return con.execute(
        """
        WITH v AS (SELECT step, traj_idx, arg_max(verdict, review_id) AS verdict FROM reviews
                   WHERE run_id = ? GROUP BY step, traj_idx)
        SELECT t.behaviour, count(*) FILTER (v.verdict = 'approve')::BIGINT AS approved,
               count(*) FILTER (v.verdict = 'reject')::BIGINT AS rejected
        FROM v JOIN trajectories t ON t.run_id = ? AND t.step = v.step AND t.traj_idx = v.traj_idx
        GROUP BY t.behaviour ORDER BY t.behaviour
        """,
        [run_id, run_id],
    ).df()


def behaviour_members(con: Con, run_id: str, behaviour: str, since_step: int = 0, limit: int = 200) -> pd.DataFrame:
    """One behaviour's trajectories after `since_step`, highest reward first, with their latest verdict."""
    return con.execute(
        """
        WITH v AS (SELECT step, traj_idx, arg_max(verdict, review_id) AS verdict FROM reviews
                   WHERE run_id = ? GROUP BY step, traj_idx)
        SELECT t.step, t.traj_idx, t.task_id, t.actions, t.reward, t.violation, t.eligible, t.vetoed,
               coalesce(v.verdict, 'unreviewed') AS verdict
        FROM trajectories t LEFT JOIN v ON v.step = t.step AND v.traj_idx = t.traj_idx
        WHERE t.run_id = ? AND t.behaviour = ? AND t.step > ?
        ORDER BY t.reward DESC, t.step DESC, t.traj_idx LIMIT ?
        """,
        [run_id, run_id, behaviour, int(since_step), int(limit)],
    ).df()


def next_action_counts(con: Con, run_id: str, since_step: int, gym_states: bool) -> tuple[pd.DataFrame, int]:
    """How often the run's trajectories after `since_step` took each next action at each state,
    and how many trajectories that is. A state is the recorded gym state (`gym_states`) or the
    calls so far joined by " > " ("(start)" before the first); a call-prefix state is also
    followed by "(end)" once the trajectory stops."""
    if gym_states:
        sql = """
            SELECT states[i] AS state, actions[i] AS action, count(*)::BIGINT AS n
            FROM (SELECT states, actions, unnest(range(1, least(len(states), len(actions)) + 1)) AS i
                  FROM trajectories WHERE run_id = ? AND step > ?)
            GROUP BY ALL ORDER BY state, action
        """
    else:
        sql = """
            SELECT CASE WHEN i = 1 THEN '(start)' ELSE array_to_string(actions[1:i - 1], ' > ') END AS state,
                   CASE WHEN i <= len(actions) THEN actions[i] ELSE '(end)' END AS action, count(*)::BIGINT AS n
            FROM (SELECT coalesce(actions, []::VARCHAR[]) AS actions,
                         unnest(range(1, len(coalesce(actions, []::VARCHAR[])) + 2)) AS i
                  FROM trajectories WHERE run_id = ? AND step > ?)
            GROUP BY ALL ORDER BY state, action
        """
    counts = con.execute(sql, [run_id, int(since_step)]).df()
    total = con.execute("SELECT count(*) FROM trajectories WHERE run_id = ? AND step > ?",
                        [run_id, int(since_step)]).fetchone()[0]
    return counts, int(total)


def behaviour_representatives(con: Con, run_id: str, behaviours: list[str] | None = None, step_min: int | None = None,
                              step_max: int | None = None, reviewed_anywhere: bool = False) -> pd.DataFrame:
    """One trajectory per behaviour of one run (those in `behaviours`, or all) within the step
    range: a reviewed one if there is one (with `reviewed_anywhere`, from any step of the run),
    else the highest reward (among equals a flagged one: what a reviewer must see). With each, its
    behaviour's count (`members`) and mean reward in the range. Reads the range and the reviewed
    trajectories only: the gate asks it of the last K steps of a long run."""
    return con.execute(
        """
        WITH v AS (SELECT step, traj_idx, arg_max(verdict, review_id) AS verdict FROM reviews
                   WHERE run_id = $run GROUP BY step, traj_idx),
        inrange AS (
            SELECT t.step, t.traj_idx, t.task_id, t.actions, t.reward, t.violation, t.eligible, t.vetoed, t.behaviour,
                   v.verdict
            FROM trajectories t LEFT JOIN v ON v.step = t.step AND v.traj_idx = t.traj_idx
            WHERE t.run_id = $run AND ($behaviours IS NULL OR list_contains($behaviours, t.behaviour))
              AND ($lo IS NULL OR t.step >= $lo) AND ($hi IS NULL OR t.step <= $hi)
        ),
        elsewhere AS (
            SELECT t.step, t.traj_idx, t.task_id, t.actions, t.reward, t.violation, t.eligible, t.vetoed, t.behaviour,
                   v.verdict
            FROM v JOIN trajectories t ON t.run_id = $run AND t.step = v.step AND t.traj_idx = v.traj_idx
            WHERE $anywhere AND ($behaviours IS NULL OR list_contains($behaviours, t.behaviour))
        ),
        stats AS (SELECT behaviour, count(*) AS members, avg(reward) AS mean_reward FROM inrange GROUP BY behaviour),
        ranked AS (
            SELECT c.*, row_number() OVER (PARTITION BY c.behaviour ORDER BY c.verdict IS NOT NULL DESC,
                                           c.reward DESC NULLS LAST, c.violation DESC NULLS LAST, c.step DESC,
                                           c.traj_idx) AS rank
            FROM (SELECT * FROM inrange UNION ALL SELECT * FROM elsewhere) c
            WHERE c.behaviour IN (SELECT behaviour FROM stats)
        )
        SELECT r.* EXCLUDE (rank, verdict), coalesce(r.verdict, 'unreviewed') AS verdict, s.members, s.mean_reward
        FROM ranked r JOIN stats s USING (behaviour) WHERE r.rank = 1 ORDER BY s.members DESC, r.behaviour
        """,
        {"run": run_id, "behaviours": behaviours, "lo": step_min, "hi": step_max, "anywhere": bool(reviewed_anywhere)},
    ).df()
