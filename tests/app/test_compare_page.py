"""AppTest of the Compare page: the default pair, the known_high difference, views in the URL,
fixed run colours, and what is said instead of a blank chart."""

from __future__ import annotations

import pytest
from apptest import app, figure, figures, no_errors, table_with, titles, view
from conftest import add_run


def test_compare_defaults_to_the_pair_and_shows_the_known_high_difference(pair_app_env):
    runs_dir, ids = pair_app_env
    at = app("pages/3_Compare.py").run()
    no_errors(at)
    assert at.multiselect[0].value == [ids["outcome"], ids["guarded"]]
    assert set(titles(at)) == {"Success rate", "Violation rate"}  # one view at a time: the page draws fast
    view(at, "Action distribution")
    no_errors(at)
    diff = figure(at, "Difference at known_high, step 30")
    by_action = dict(zip(diff["data"][0]["x"], map(float, diff["data"][0]["y"])))
    assert by_action["refund"] == pytest.approx(0.009 - 0.966, abs=1e-3)  # guarded − outcome
    bars = figure(at, "Action distribution at known_high")
    refund = {trace["name"]: float(dict(zip(trace["x"], trace["y"]))["refund"]) for trace in bars["data"]}
    assert refund == {"refund-outcome (outcome)": pytest.approx(0.966, abs=5e-4),
                      "refund-guarded (guarded)": pytest.approx(0.009, abs=5e-4)}
    assert sum(t.endswith("drift at known_high") for t in titles(at)) == 2
    view(at, "Vetoes and clipping")
    assert {"Vetoed rollouts per step", "Clipped transitions per epoch (run total)"} <= set(titles(at))
    view(at, "Reward components")
    assert titles(at) == ["Mean reward components per step"]


def test_compare_step_slider_moves_the_bars_to_the_cloned_start(pair_app_env):
    at = view(app("pages/3_Compare.py").run(), "Action distribution")
    at.slider(key="step").set_value(0).run()
    no_errors(at)
    diff = figure(at, "Difference at known_high, step 0")
    assert all(abs(float(v)) < 1e-12 for v in diff["data"][0]["y"])  # both runs start from the same cloned policy


def test_compare_view_runs_and_step_come_from_the_url(pair_app_env):
    """Issue 13, finding 8: a comparison is addressable: runs picked, view and step."""
    runs_dir, ids = pair_app_env
    at = app("pages/3_Compare.py", run=[ids["guarded"]], view="Action distribution", step="12").run()
    no_errors(at)
    assert at.multiselect[0].value == [ids["guarded"]]
    assert any(t == "Action distribution at known_high, step 12" for t in titles(at))
    # Issue 29: A and B too, by the names they show (B − A: here outcome − guarded, the other way round
    # from the default).
    at = app("pages/3_Compare.py", run=[ids["outcome"], ids["guarded"]], view="Action distribution",
             a="refund-guarded (guarded)", b="refund-outcome (outcome)").run()
    no_errors(at)
    assert figure(at, "Difference at known_high")["title"].endswith(
        "refund-outcome (outcome) − refund-guarded (guarded)")


def test_compare_held_out_table_puts_both_runs_side_by_side(pair_app_env):
    """Issue 13, finding 6: one short column per run, so the second run is not cut off."""
    at = view(app("pages/3_Compare.py").run(), "Held-out")
    table = table_with(at, "task_id")
    assert list(table.columns) == ["task_id", "refund-outcome (outcome)", "refund-guarded (guarded)"]
    assert list(table["task_id"]) == ["eval-high", "eval-low", "eval-recover-high", "eval-recover-low"]
    row = table.set_index("task_id").loc["eval-high"]
    assert row["refund-outcome (outcome)"] == "✓ ⚠ violation · lookup → refund → finish"
    assert row["refund-guarded (guarded)"] == "✓ · lookup → request_approval → refund → finish"


def test_a_run_keeps_its_colour_whatever_else_is_picked(pair_app_env):
    """Issue 13, finding 5: colours are the run's own, on every page and with any number of runs."""
    runs_dir, ids = pair_app_env
    add_run(runs_dir, "lm-run", "trl")

    def colours(run_ids):
        at = app("pages/3_Compare.py", run=run_ids).run()
        no_errors(at)
        success = figure(at, "Success rate")
        assert success["layout"]["showlegend"] is False  # the page's one run legend names them
        return {trace["name"]: trace["color"] for trace in success["data"]}

    pair = colours([ids["outcome"], ids["guarded"]])
    three = colours(["lm-run", ids["guarded"], ids["outcome"]])
    alone = colours([ids["guarded"]])
    assert three["refund-outcome (outcome)"] == pair["refund-outcome (outcome)"]
    assert three["refund-guarded (guarded)"] == pair["refund-guarded (guarded)"] == alone["refund-guarded (guarded)"]
    assert len(set(three.values())) == 3


def test_the_default_pair_is_launched_together_and_the_step_is_one_both_reached(pair_app_env):
    """Issue 13, finding 4: an unrelated newer outcome run does not join the pair; with runs of
    different lengths the step starts where both have data, and B − A says when one has none."""
    runs_dir, ids = pair_app_env
    add_run(runs_dir, "short-outcome", "tabular", scorer="outcome", steps=3)
    at = app("pages/3_Compare.py").run()
    assert at.multiselect[0].value == [ids["outcome"], ids["guarded"]]
    at = view(app("pages/3_Compare.py", run=["short-outcome", ids["guarded"]]).run(), "Action distribution")
    no_errors(at)
    assert at.slider(key="step").value == 3
    at.slider(key="step").set_value(20).run()
    assert any("No difference at step 20" in i.value and "recorded no distribution" in i.value for i in at.info)


def test_views_that_do_not_apply_say_so_instead_of_drawing_zeros(pair_app_env):
    """Issue 13, finding 7: an LM run has no imitation ladder and clipped nothing."""
    runs_dir, ids = pair_app_env
    add_run(runs_dir, "lm-run", "trl")
    at = view(app("pages/3_Compare.py", run=["lm-run"]).run(), "Imitation ladder")
    assert any("None of these runs started from an imitation ladder" in i.value for i in at.info)
    view(at, "Vetoes and clipping")
    assert "Clipped transitions per epoch (run total)" not in titles(at)
    assert any(c.value == "No picked run clipped a transition." for c in at.caption)
    view(at, "Engine metrics")
    assert titles(at) == ["entropy"]


def test_a_smoothed_curve_keeps_its_raw_values_underneath(pair_app_env):
    """Issue 13: smoothing and log scale where curves are noisy (issue 29: the smoothing is in the URL)."""
    runs_dir, ids = pair_app_env
    at = app("pages/3_Compare.py", run=[ids["outcome"]]).run()
    at.slider(key="smoothing").set_value(0.9).run()
    no_errors(at)
    traces = figure(at, "Success rate")["data"]
    assert [t["name"] for t in traces] == ["refund-outcome (outcome) (raw)", "refund-outcome (outcome)"]
    assert traces[0]["y"] != traces[1]["y"]
    assert figures(at)[0]["layout"]["hovermode"] == "x unified"
    shared = app("pages/3_Compare.py", run=[ids["outcome"]], smoothing="0.9").run()  # a link keeps the smoothing
    assert shared.slider(key="smoothing").value == 0.9
    assert figure(shared, "Success rate")["data"][1]["y"] == traces[1]["y"]


def test_throughput_draws_the_fleets_measured_speedup_for_runs_with_different_workers(tmp_path, monkeypatch):
    """Two real tabular runs, 1 and 2 rollout workers, an environment that waits 5 ms a step."""
    import json

    from helpers import agentrl, ok

    from agentrl.config import load_preset
    from agentrl.record.rundir import RUNS_DIR_ENV
    from agentrl.store.ingest import ingest_once

    runs_dir = tmp_path / "runs"
    ids = []
    for workers in (1, 2):
        config = load_preset("refund-outcome").model_copy(update={"rounds": 3, "workers": workers, "env_latency_s": 0.005,
                                                                  "name": f"fleet-{workers}"})
        path = tmp_path / f"fleet-{workers}.json"
        path.write_text(json.dumps(config.model_dump(mode="json")))
        # In its own process, as the dashboard starts a run: the fleet's spawned workers import the
        # run's __main__ (agentrl), never a page script an AppTest left as this process's __main__.
        result = ok(agentrl("train", "--config", path, "--runs-dir", runs_dir, "--quiet"))
        ids.append(result.stdout.split()[1].rstrip(":"))  # "run ID: tabular outcome, 3 steps -> ..."
    ingest_once(runs_dir)
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))
    at = view(app("pages/3_Compare.py", run=ids).run(), "Throughput")
    no_errors(at)
    fleet = figure(at, "Environment fleet")
    measured = next(t for t in fleet["data"] if t["name"] == "measured")
    assert measured["x"] == [1.0, 2.0] and measured["y"][0] == 1.0 and measured["y"][1] > 0
    table = table_with(at, "workers", "transitions_per_s", "speedup", "modelled")
    assert list(table["workers"]) == [1.0, 2.0]
