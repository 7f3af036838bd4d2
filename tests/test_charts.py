"""The onset marker (`agentrl.charts.mark_onset`): a dashed line at the onset step whose label lies
on the side with more of the run, so the step axis keeps to the run's steps."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from agentrl import behaviour_charts, charts


def _marked(step: int, steps) -> go.Figure:
    return charts.mark_onset(go.Figure(go.Scatter(x=steps, y=np.zeros(len(steps)))), step, "refund-outcome (outcome): onset")


def test_an_early_onsets_label_reads_to_the_right_of_its_line():
    # Left of a step-7 line, the label pushed a 30-step run's axis to step -20 on Compare.
    (label,) = _marked(7, np.arange(1, 31)).layout.annotations
    assert (label.x, label.xanchor, label.text) == (7, "left", "refund-outcome (outcome): onset (step 7)")


def test_a_late_onsets_label_reads_to_the_left_of_its_line():
    (label,) = _marked(28, list(range(1, 31))).layout.annotations
    assert (label.x, label.xanchor) == (28, "right")


def test_no_onset_leaves_the_chart_as_it_was():
    fig = go.Figure(go.Scatter(x=[1, 2], y=[0, 1]))
    assert charts.mark_onset(fig, None) is fig and not fig.layout.shapes and not fig.layout.annotations


def test_a_run_with_one_hardware_sample_is_drawn_on_a_minute_of_time():
    import pandas as pd

    one = pd.DataFrame({"ts": [pd.Timestamp("2026-12-01 23:18:35.935")], "rss_bytes": [63e6], "cpu_percent": [3.0],
                        "gpu_allocated_bytes": [None]})
    for fig in (charts.memory_usage(one), charts.cpu_usage(one, cores=2)):
        start, end = (pd.Timestamp(x) for x in fig.layout.xaxis.range)
        assert end - start == pd.Timedelta(seconds=60) and start < one["ts"][0] < end
    long = pd.DataFrame({"ts": pd.date_range("2026-12-01", periods=3, freq="min"), "rss_bytes": [1e6] * 3,
                         "cpu_percent": [1.0] * 3, "gpu_allocated_bytes": [None] * 3})
    assert charts.memory_usage(long).layout.xaxis.range is None  # a longer run keeps plotly's own range


def test_behaviour_shares_stack_each_behaviour_in_its_own_colour_on_every_chart():
    shares = pd.DataFrame({"step": [1, 1, 2, 2], "behaviour": ["a > b", "c", "a > b", "c"], "share": [0.75, 0.25, 0.5, 0.5]})
    fig = behaviour_charts.behaviour_shares(shares, unverified={"c"})
    assert [t.name for t in fig.data] == ["a > b", "⚠ c"]  # most common at the bottom; unverified marked
    assert all(t.stackgroup == "one" for t in fig.data)
    again = behaviour_charts.behaviour_shares(shares[shares["behaviour"] == "c"])
    assert again.data[0].line.color == fig.data[1].line.color == behaviour_charts.behaviour_color("c")
    assert len({behaviour_charts.behaviour_color(b) for b in ("lookup > refund > finish", "refund > finish",
                                                    "lookup > request_approval > refund > finish")}) == 3


def test_divergence_bars_rank_states_by_weighted_divergence():
    found = pd.DataFrame({"state": ["s1", "s2"], "js": [0.5, 0.9], "weight": [1.0, 0.1]})
    fig = behaviour_charts.divergence_bars(found, "found")
    assert list(fig.data[0].y) == ["s2", "s1"] and list(fig.data[0].x) == [0.9 * 0.1, 0.5]  # the largest on top


def test_scanner_hit_rates_draw_each_scanner_beside_the_runs_violation_rate():
    rates = pd.DataFrame({"run_id": ["a"] * 4, "step": [1, 2, 1, 2], "scanner": ["forced"] * 2 + ["repeat"] * 2,
                          "hit_rate": [0.5, 0.25, 0.0, 0.1], "violation_rate": [0.1, 0.2, 0.1, 0.2]})
    fig = behaviour_charts.scanner_hit_rates(rates, {"a": "run a"})
    assert [t.name for t in fig.data] == ["run a: forced hits", "run a: repeat hits", "run a: violations"]
    assert list(fig.data[0].y) == [0.5, 0.25] and list(fig.data[2].y) == [0.1, 0.2] and fig.data[2].line.dash == "dot"


def test_engine_metrics_are_small_multiples_each_on_its_own_y_axis_sharing_one_x_axis():
    # Issue 29: on one y axis, a loss near 10 flattened the entropy near 0.
    series = pd.DataFrame({"step": [1, 2, 3] * 2, "name": ["entropy"] * 3 + ["loss"] * 3,
                           "value": [0.1, 0.05, 0.01, 9.0, 8.0, 7.0]})
    fig = charts.metric_curves(series)
    assert [(t.name, t.yaxis) for t in fig.data] == [("entropy", "y"), ("loss", "y2")]
    assert fig.layout.xaxis.matches == "x2" and fig.layout.hoversubplots == "axis"  # zoom and hover in step
    assert fig.layout.yaxis.domain != fig.layout.yaxis2.domain


def test_success_and_violation_differ_in_colour_for_colour_blind_readers_and_in_line_style():
    steps = pd.DataFrame({"step": [1, 2], "success_rate": [0.5, 1.0], "violation_rate": [0.0, 0.5]})
    success, violation = charts.rates_curve(steps).data
    assert (success.line.color, violation.line.color) == (charts.OKABE_ITO["bluish_green"], charts.OKABE_ITO["vermillion"])
    assert (success.line.dash, violation.line.dash) == ("solid", "dash")
    timed = charts.rates_curve(steps.assign(elapsed_s=[0.5, 1.5]), x="elapsed_s")
    assert list(timed.data[0].x) == [0.5, 1.5] and timed.layout.xaxis.title.text.startswith("time since")


def test_memory_is_drawn_in_gb_as_its_budget():
    samples = pd.DataFrame({"ts": pd.date_range("2026-12-01", periods=3, freq="min"), "rss_bytes": [2e9] * 3,
                            "gpu_allocated_bytes": [None] * 3})
    fig = charts.memory_usage(samples, budget_bytes=3e9)
    assert list(fig.data[0].y) == [2.0] * 3 and fig.layout.shapes[0].y0 == 3.0 and fig.layout.yaxis.title.text == "GB"


def test_reward_components_of_several_runs_keep_the_component_colour_and_tell_runs_by_dash():
    components = pd.DataFrame({"run_id": ["a", "a", "b", "b"], "step": [1, 1, 1, 1],
                               "component": ["outcome", "step_cost"] * 2, "value": [1.0, -0.1, 0.5, -0.2]})
    fig = charts.components_overlay(components, {"a": "run A", "b": "run B"})
    drawn = {t.name: (t.line.color, t.line.dash) for t in fig.data if t.showlegend is False}
    assert drawn["run A: outcome"][0] == drawn["run B: outcome"][0] == charts.component_color("outcome")
    assert drawn["run A: outcome"][1] == drawn["run A: step_cost"][1] != drawn["run B: outcome"][1]
