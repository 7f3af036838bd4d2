"""Thinning in SQL keeps exactly the rows the Compare page's `downsample` kept in pandas: the
charts draw the same points, only fewer rows leave DuckDB."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from agentrl.analysis.series import downsample
from agentrl.store import queries
from agentrl.store.db import connect
from agentrl.store.queries.thinning import kept


@pytest.mark.parametrize("max_points", [2, 3, 7, 50])
def test_sql_keeps_the_positions_numpy_linspace_rounds_to(max_points):
    lengths = list(range(1, 400)) + [15_625, 31_251]
    rows = duckdb.connect().execute(
        f"""SELECT n, list(p ORDER BY p) FROM (SELECT n, unnest(range(n)) AS p FROM (SELECT unnest(?) AS n))
            WHERE {kept("p", "n", str(max_points))} GROUP BY n""", [lengths]).fetchall()
    for n, positions in rows:
        expected = list(range(n)) if n <= max_points else \
            np.unique(np.linspace(0, n - 1, max_points).round().astype(int)).tolist()
        assert positions == expected, n
    assert len(rows) == len(lengths)


@pytest.fixture
def steps_store(tmp_path):
    """Three runs: 500 steps from 1, 40 steps from 10 (shorter than the points asked), and one
    with gaps (every third step missing, as a run resumed from elsewhere might leave); every
    fourth step without the `kl` metric."""
    con = connect(tmp_path)
    for run_id, steps in {"a-long": range(1, 501), "b-short": range(10, 50),
                          "c-gaps": [s for s in range(0, 700) if s % 3]}.items():
        con.execute(
            """INSERT INTO steps BY NAME
               SELECT ? AS run_id, s AS step, now()::TIMESTAMP AS ts, s / 1000.0 AS success_rate, s % 7 / 7.0 AS violation_rate,
                      0.0 AS duplicate_rate, s * 0.5 AS mean_reward, s % 3 AS vetoed, 0 AS vetoed_updates, s AS updates,
                      s % 5 AS clipped, 2 * s AS transitions,
                      CASE WHEN s % 4 = 0 THEN MAP {'entropy': 1.0} ELSE MAP {'kl': s / 10.0, 'entropy': 1.0} END AS metrics
               FROM (SELECT unnest(?) AS s)""", [run_id, list(steps)])
    yield con
    con.close()


RUNS = ["a-long", "b-short", "c-gaps"]


@pytest.mark.parametrize("max_points", [2, 17, 100])
def test_steps_for_runs_thinned_equals_the_pages_old_thinning(steps_store, max_points):
    expected = downsample(queries.steps_for_runs(steps_store, RUNS), max_points, by="run_id").reset_index(drop=True)
    thinned = queries.steps_for_runs(steps_store, RUNS, max_points=max_points)
    assert len(thinned) < 1_200 and set(thinned["run_id"]) == set(RUNS)
    assert thinned.equals(expected)


@pytest.mark.parametrize("max_points", [2, 17, 100])
def test_step_metric_for_runs_thinned_equals_the_pages_old_thinning(steps_store, max_points):
    expected = downsample(queries.step_metric_for_runs(steps_store, RUNS, "kl"), max_points, by="run_id")
    thinned = queries.step_metric_for_runs(steps_store, RUNS, "kl", max_points=max_points)
    assert thinned["value"].notna().all()
    assert thinned.equals(expected.reset_index(drop=True))


def test_thinning_one_run_of_many_or_none(steps_store):
    one = queries.steps_for_runs(steps_store, ["c-gaps"], max_points=10)
    assert one["step"].tolist() == downsample(queries.steps_for_runs(steps_store, ["c-gaps"]), 10)["step"].tolist()
    assert queries.steps_for_runs(steps_store, ["nobody"], max_points=10).empty
    assert queries.step_metric_for_runs(steps_store, RUNS, "no-such-metric", max_points=10).empty


def test_max_points_below_two_is_refused_in_one_line(steps_store):
    with pytest.raises(ValueError, match="max_points must be an int of at least 2"):
        queries.steps_for_runs(steps_store, RUNS, max_points=1)
