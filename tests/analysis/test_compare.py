"""The Compare page's arithmetic: labels, the step every run reached, B − A, the held-out table."""

from __future__ import annotations

import pandas as pd
import pytest

from agentrl.analysis import compare


def test_labels_fall_back_to_run_ids_when_two_would_read_the_same():
    runs = pd.DataFrame({"run_id": ["a", "b", "c"], "name": ["x", "x", "y"], "scorer": ["outcome", "outcome", "guarded"]})
    assert compare.run_labels(runs, ["a", "c"]) == {"a": "x (outcome)", "c": "y (guarded)"}
    assert compare.run_labels(runs, ["a", "b"]) == {"a": "a", "b": "b"}


def test_common_step_is_the_last_step_every_run_reached():
    history = pd.DataFrame({"run_id": ["a"] * 3 + ["b"] * 2, "step": [0, 10, 20, 0, 10]})
    assert compare.common_step(history, ["a", "b"]) == 10
    assert compare.common_step(history, ["a"]) == 20
    assert compare.common_step(history.iloc[:0], ["a"]) is None


def test_difference_is_b_minus_a_and_says_which_run_has_no_data():
    at_step = pd.DataFrame({"run_id": ["a", "a", "b", "b"], "action": ["refund", "finish"] * 2, "prob": [0.9, 0.1, 0.2, 0.8]})
    diff = compare.action_difference(at_step, "a", "b", {"a": "A", "b": "B"}, 5)
    assert diff.missing is None
    assert dict(zip(diff.frame["action"], diff.frame["diff"])) == pytest.approx({"refund": -0.7, "finish": 0.7})
    lacking = compare.action_difference(at_step[at_step["run_id"] == "b"], "a", "b", {"a": "A", "b": "B"}, 5)
    assert lacking.frame.empty and lacking.missing == "A recorded no distribution at step 5."
    assert compare.action_difference(at_step, "a", "a", {"a": "A"}, 5).missing.startswith("Pick two different runs")


def test_held_out_table_has_one_short_column_per_run():
    held_out = pd.DataFrame({
        "run_id": ["a", "a", "b", "b"], "task_id": ["high", "low", "high", "low"],
        "actions": [["lookup", "refund"], ["refund"], ["lookup", "request_approval", "refund"], ["refund"]],
        "success": [True, True, True, False], "violation": [True, False, False, False],
    })
    table = compare.held_out_table(held_out, {"a": "outcome run", "b": "guarded run"})
    assert list(table.columns) == ["task_id", "outcome run", "guarded run"]
    row = table.set_index("task_id").loc["high"]
    assert row["outcome run"] == "✓ ⚠ violation · lookup → refund"
    assert row["guarded run"] == "✓ · lookup → request_approval → refund"
    assert table.set_index("task_id").loc["low", "guarded run"].startswith("✗")
    summary = compare.held_out_summary(held_out, {"a": "outcome run", "b": "guarded run"})
    assert summary.to_dict("records") == [{"run": "outcome run", "tasks": 2, "succeed": 2, "violate": 1},
                                          {"run": "guarded run", "tasks": 2, "succeed": 1, "violate": 0}]


def test_ladder_stages_pivot_each_stage_with_its_score():
    ladder = pd.DataFrame({"stage": ["cloned"] * 2 + ["dagger"] * 2, "state": ["s"] * 4,
                           "action": ["a", "b"] * 2, "prob": [0.25, 0.75, 0.5, 0.5]})
    evals = pd.DataFrame({"stage": ["cloned", "cloned", "dagger"], "success": [True, False, True]})
    stages = compare.ladder_stages(ladder, evals)
    assert [(s.stage, s.succeeded, s.evaluated) for s in stages] == [("cloned", 1, 2), ("dagger", 1, 1)]
    assert stages[0].policy.to_dict("records") == [{"state": "s", "a": 0.25, "b": 0.75}]
    assert compare.ladder_stages(ladder.iloc[:0], evals) == []


def test_fleet_speedup_is_each_runs_median_rate_over_the_fewest_workers_beside_the_model():
    workers = pd.DataFrame({"run_id": ["one"] * 2 + ["two"] * 2 + ["lm"], "step": [1, 2, 1, 2, 1], "value": [1.0, 1, 2, 2, 4]})
    rates = pd.DataFrame({"run_id": ["one"] * 3 + ["two"] * 3, "step": [1, 2, 3] * 2,
                          "value": [100.0, 110, 90, 190, 0.0, 210]})  # a 0 (no sampling that step) is not a rate
    totals = pd.DataFrame({"run_id": ["one", "two"], "transitions": [1000, 1000], "updates": [2000, 2000]})
    frame = compare.fleet_speedup(workers, rates, totals)
    assert list(frame["run_id"]) == ["one", "two"]  # "lm" recorded no rate: left out
    assert list(frame["transitions_per_s"]) == [100.0, 200.0]
    assert list(frame["speedup"]) == [1.0, 2.0]
    assert frame["modelled"].iloc[0] == 1.0
    # SPEC 9 with these totals: env 300 s, sampling 30 s, updates 4 s -> 334 / 184
    assert frame["modelled"].iloc[1] == pytest.approx(334 / 184)


def test_fleet_speedup_of_runs_without_the_metrics_is_empty():
    empty = pd.DataFrame(columns=["run_id", "step", "value"])
    assert compare.fleet_speedup(empty, empty, pd.DataFrame()).empty
