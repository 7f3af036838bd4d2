"""Thinning a per-step series in SQL exactly as `agentrl.analysis.series.downsample` thins it in
pandas, so a chart's 1,000 points per run leave DuckDB instead of all 15,625 steps.

Store -> **queries.thinning** -> queries.compare. `downsample` keeps, of a series of n rows (n >
max_points), the rows at positions `numpy.linspace(0, n - 1, max_points).round()`. That is float
arithmetic SQL can repeat bit for bit: position i*d with d = (n - 1) / (max_points - 1), in
doubles, rounded half to even (`round_even`, numpy's rounding). A row at position p is kept when
some i rounds to p; as d > 1 only i = floor((p + 0.5) / d) or the one before can (both checked).
A run's positions are its step minus its first step when its steps have no gap (the usual case:
no sort), else its row number (a window, slower).
"""

from __future__ import annotations

import pandas as pd

from agentrl.store.db import Con


def points_of(max_points: int) -> int:
    """`max_points` checked as `downsample` checks it."""
    if max_points.__class__ is not int or max_points < 2:
        raise ValueError(f"max_points must be an int of at least 2, not {max_points!r}")
    return max_points


def kept(pos: str, n: str, points: str) -> str:
    """An SQL condition: row position `pos` of a series of `n` rows is one `downsample` keeps at
    most `points` of (the three are SQL expressions of ours, never input)."""
    d = f"(({n} - 1)::DOUBLE / ({points} - 1))"
    i = f"floor(({pos} + 0.5) / {d})"
    return (f"({n} <= {points} OR round_even({i} * {d}, 0) = {pos} OR round_even(({i} - 1) * {d}, 0) = {pos} "
            f"OR {pos} = {n} - 1)")


def thinned(con: Con, series: str, columns: str, params: dict, max_points: int) -> pd.DataFrame:
    """The rows of `series` (a query of ours with run_id and step, its values bound by `params`)
    that `downsample(frame, max_points, by="run_id")` keeps, `columns` of them, by run and step.
    Two statements: each run's length and first step (and whether its steps have gaps), then the
    rows, by step arithmetic for the gapless runs and by row number for the others."""
    points = points_of(max_points)
    spans = con.execute(
        f"""SELECT run_id, count(*), min(step), count(DISTINCT step) = count(*) AND max(step) - min(step) + 1 = count(*)
            FROM ({series}) GROUP BY run_id""", params).fetchall()
    gapless = [row for row in spans if row[3]]
    gapped = [row[0] for row in spans if not row[3]]
    parts = [f"""SELECT {columns} FROM ({series}) p
                 JOIN (SELECT unnest($span_runs) AS run_id, unnest($span_n) AS n, unnest($span_first) AS first) s USING (run_id)
                 WHERE {kept("p.step - s.first", "s.n", "$points")}"""]
    if gapped:  # rare (a run resumed from an earlier step): positions need a sort
        parts.append(f"""SELECT {columns} FROM (
                            SELECT *, row_number() OVER (PARTITION BY run_id ORDER BY step) - 1 AS pos,
                                   count(*) OVER (PARTITION BY run_id) AS n
                            FROM ({series}) WHERE list_contains($gapped, run_id))
                         WHERE {kept("pos", "n", "$points")}""")
    bound = {**params, "points": points, "span_runs": [r[0] for r in gapless], "span_n": [r[1] for r in gapless],
             "span_first": [r[2] for r in gapless]}
    if gapped:
        bound["gapped"] = gapped
    return con.execute(" UNION ALL ".join(parts) + " ORDER BY run_id, step", bound).df()
