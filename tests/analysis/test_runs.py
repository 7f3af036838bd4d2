"""The home page's runs table: filters, final figures, links."""

from __future__ import annotations

import pandas as pd

from agentrl.analysis import runs as runs_view


def _runs() -> pd.DataFrame:
    return pd.DataFrame({
        "run_id": ["r1", "r2", "r3"], "name": ["pair-outcome", "pair-guarded", "lm"], "status": ["succeeded", "running", "failed"],
        "kind": ["tabular", "tabular", "trl"], "scorer": ["outcome", "guarded", "guarded"], "steps_done": [30, 12, 0],
        "total_steps": [30, 30, 60], "final_success": [1.0, 0.5, None], "final_violation": [0.5, 0.0, None],
        "held_out_success": [1.0, None, None], "final_reward": [0.8, 0.7, None], "tags": [["spec"], ["spec", "pair"], []],
        "note": [None, "watch the veto", None], "archived": [False, False, True], "created_at": pd.Timestamp("2026-01-01"),
        "error": [None, None, "boom"], "color_index": [0, 1, 2],
    })


def test_filters_combine_and_archived_runs_are_hidden_unless_asked():
    runs = _runs()
    assert runs_view.filter_runs(runs)["run_id"].tolist() == ["r1", "r2"]
    assert runs_view.filter_runs(runs, archived=True)["run_id"].tolist() == ["r1", "r2", "r3"]
    assert runs_view.filter_runs(runs, text="VETO")["run_id"].tolist() == ["r2"]
    assert runs_view.filter_runs(runs, tags=["pair"])["run_id"].tolist() == ["r2"]
    assert runs_view.filter_runs(runs, statuses=["succeeded"], kinds=["tabular"])["run_id"].tolist() == ["r1"]
    assert runs_view.all_tags(runs) == ["pair", "spec"]


def test_runs_table_has_final_figures_and_a_link_to_each_page_of_the_run():
    table = runs_view.runs_table(_runs())
    row = table.iloc[0]
    assert (row["steps"], row["final success"], row["final violation"], row["tags"]) == ("30/30", 1.0, 0.5, "spec")
    assert (row["live"], row["review"], row["hardware"]) == ("Live?run=r1", "Review?run=r1", "Hardware?run=r1")
    assert runs_view.page_url("Compare", ["a", "b"]) == "Compare?run=a&run=b"


def test_runs_table_shows_the_config_fields_each_engine_names_with_the_created_time_and_run_id_up_front():
    """Issue 29, finding 10: learning rate, group size and seed as columns, blank for an engine
    without them; the created time beside the status and the run id before the links."""
    import json

    runs = _runs().assign(kind=["tabular", "tabular", "coding"])
    configs = {"r1": json.dumps({"lr": 0.04, "group_size": 8, "seed": 7, "rounds": 30}),
               "r2": json.dumps({"lr": 0.02, "group_size": 16, "seed": 8, "rounds": 30}),
               "r3": json.dumps({"seed": 3, "rounds": 1, "lr": 9.9})}  # a coding run: its engine shows no lr
    table = runs_view.runs_table(runs, configs=configs)
    assert table["learning rate"].tolist()[:2] == [0.04, 0.02] and pd.isna(table["learning rate"].iloc[2])
    assert table["group size"].tolist()[:2] == [8, 16] and table["seed"].tolist() == [7, 8, 3]
    columns = list(table.columns)
    assert columns.index("created_at") == columns.index("status") + 1
    assert columns.index("learning rate") < columns.index("run_id") < columns.index("live")
    assert "learning rate" not in runs_view.runs_table(runs).columns  # no configs given, no config columns
    unreadable = runs_view.config_columns(runs, {"r1": "{not json"})
    assert unreadable["seed"].isna().all()


def test_the_grouped_table_is_one_row_per_seed_group_with_mean_and_std_and_a_compare_link():
    from agentrl.analysis.seed_groups import SeedGroup

    runs = _runs().assign(run_id=["s8", "s7", "lone"], status=["succeeded", "running", "succeeded"],
                          final_success=[1.0, 0.5, 0.25], final_reward=[0.8, 0.6, None])
    groups = [SeedGroup("s8", "pair-outcome (outcome) · 2 seeds", ("s8", "s7"), (8, 7)),
              SeedGroup("lone", "lm (guarded)", ("lone",), (7,))]
    table = runs_view.grouped_table(runs, groups)
    first, second = table.iloc[0], table.iloc[1]
    assert (first["group"], first["runs"], first["seeds"], first["status"]) == ("pair-outcome (outcome) · 2 seeds", 2, "7, 8",
                                                                               "succeeded, running")
    assert first["steps"] == "12/30"  # the group's slowest run
    assert first["final success"] == "75.0% ± 35.4%" and first["final reward"] == "0.700 ± 0.141"
    assert second["final success"] == "25.0%" and second["final reward"] == ""  # one run: no spread; no figure: blank
    assert first["compare"] == "Compare?run=s8&run=s7" and first["run_ids"] == "s8, s7"
