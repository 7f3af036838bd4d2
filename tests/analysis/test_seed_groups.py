"""Seed groups: runs that differ only in seed (or a picked key) are one line with a band, and one
row of the run table with mean ± std of their final metrics."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from agentrl.analysis import seed_groups
from agentrl.analysis.seed_groups import collapse_runs, group_curves, group_keys, has_groups, singles


def runs(*rows) -> pd.DataFrame:
    """(run_id, name, scorer, config overrides) -> the columns `run_configs` returns."""
    base = {"name": "x", "kind": "tabular", "rounds": 30, "seed": 7, "lr": 0.1}
    return pd.DataFrame([{"run_id": run_id, "name": name, "kind": "tabular", "scorer": scorer,
                          "config": json.dumps(dict(base, name=name, scorer=scorer, **extra))}
                         for run_id, name, scorer, extra in rows])


PAIR_OF_SEEDS = runs(("o7", "refund-outcome-seed7", "outcome", {"seed": 7}),
                     ("o8", "refund-outcome-seed8", "outcome", {"seed": 8}),
                     ("g7", "refund-guarded-seed7", "guarded", {"seed": 7}),
                     ("g8", "refund-guarded-seed8", "guarded", {"seed": 8}),
                     ("short", "refund-outcome", "outcome", {"seed": 9, "rounds": 3}))


def test_runs_that_differ_only_in_seed_and_name_are_one_group_named_without_the_seed():
    groups = seed_groups.seed_groups(PAIR_OF_SEEDS)
    assert [g.run_ids for g in groups] == [("o7", "o8"), ("g7", "g8"), ("short",)]
    assert [g.label for g in groups] == ["refund-outcome (outcome) · 2 seeds", "refund-guarded (guarded) · 2 seeds",
                                         "refund-outcome (outcome)"]
    assert groups[0].group_id == "o7" and groups[0].values == (7, 8)
    assert has_groups(groups) and not has_groups(singles(PAIR_OF_SEEDS))
    assert seed_groups.group_containing(groups, "g8") is groups[1] and seed_groups.group_containing(groups, "z") is None


def test_a_rerun_of_the_same_seed_or_a_run_without_the_key_is_no_other_seed():
    table = runs(("a", "a", "outcome", {}), ("b", "b", "outcome", {}), ("c", "c", "outcome", {"seed": 8}))
    assert [g.run_ids for g in seed_groups.seed_groups(table)] == [("a", "c"), ("b",)]
    no_seed = pd.DataFrame({"run_id": ["x", "y"], "name": ["x", "y"], "kind": "script", "scorer": "outcome",
                            "config": [json.dumps({"lr": 0.1}), json.dumps({"lr": 0.1})]})
    assert not has_groups(seed_groups.seed_groups(no_seed))


def test_another_key_can_be_picked_and_the_seed_then_splits_groups():
    table = runs(("a", "a", "outcome", {"lr": 0.1}), ("b", "b", "outcome", {"lr": 0.2}),
                 ("c", "c", "outcome", {"lr": 0.2, "seed": 8}))
    assert group_keys(table) == ["seed", "lr"]
    assert [g.run_ids for g in seed_groups.seed_groups(table, "lr")] == [("a", "b"), ("c",)]
    assert seed_groups.seed_groups(table, "lr")[0].label == "a (outcome) · 2 values of lr"


def test_group_curves_are_the_mean_with_a_min_max_or_one_std_band_per_step():
    steps = pd.DataFrame({"run_id": ["o7", "o7", "o8", "o8", "short"], "step": [1, 2, 1, 2, 1],
                          "success_rate": [0.2, 0.6, 0.4, 1.0, 0.5]})
    groups = seed_groups.seed_groups(PAIR_OF_SEEDS)
    curves = group_curves(steps, groups, "success_rate")
    outcome = curves[curves["group_id"] == "o7"].set_index("step")
    assert outcome["mean"].tolist() == pytest.approx([0.3, 0.8])
    assert outcome["lo"].tolist() == pytest.approx([0.2, 0.6]) and outcome["hi"].tolist() == pytest.approx([0.4, 1.0])
    assert outcome["runs"].tolist() == [2, 2]
    std = group_curves(steps, groups, "success_rate", band="±1 std").set_index(["group_id", "step"])
    assert std.loc[("o7", 1), "hi"] == pytest.approx(0.3 + 0.1414, abs=1e-3)
    assert std.loc[("short", 1), "lo"] == std.loc[("short", 1), "hi"] == 0.5  # one run: no band
    assert "g7" not in set(curves["group_id"])  # a group without steps yet draws nothing
    with pytest.raises(ValueError, match="band must be one of"):
        group_curves(steps, groups, "success_rate", band="iqr")


def test_the_run_table_collapses_a_seed_group_into_one_row_of_mean_and_std():
    table = pd.DataFrame({"run_id": ["o7", "o8", "g7", "g8", "short"], "final_success": [1.0, 0.8, 1.0, 1.0, 0.5],
                          "final_violation": [0.5, 0.3, 0.0, 0.0, None]})
    collapsed = collapse_runs(table, seed_groups.seed_groups(PAIR_OF_SEEDS)).set_index("group_id")
    assert collapsed.loc["o7", "runs"] == 2 and collapsed.loc["o7", "values"] == "7, 8"
    assert collapsed.loc["o7", "final_success_mean"] == pytest.approx(0.9)
    assert collapsed.loc["o7", "final_success_std"] == pytest.approx(0.1414, abs=1e-4)
    assert collapsed.loc["o7", "final_success"] == "0.900 ± 0.141"
    assert collapsed.loc["g7", "final_violation"] == "0.000 ± 0.000"
    assert collapsed.loc["short", "final_success"] == "0.500" and collapsed.loc["short", "final_violation"] == "—"
    assert "held_out_success_mean" not in collapsed.columns  # only the metrics the table has
