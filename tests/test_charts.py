"""The onset marker (`agentrl.charts.mark_onset`): a dashed line at the onset step whose label lies
on the side with more of the run, so the step axis keeps to the run's steps."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from agentrl import charts


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
    fig = charts.behaviour_shares(shares, unverified={"c"})
    assert [t.name for t in fig.data] == ["a > b", "⚠ c"]  # most common at the bottom; unverified marked
    assert all(t.stackgroup == "one" for t in fig.data)
    again = charts.behaviour_shares(shares[shares["behaviour"] == "c"])
    assert again.data[0].line.color == fig.data[1].line.color == charts.behaviour_color("c")
    assert len({charts.behaviour_color(b) for b in ("lookup > refund > finish", "refund > finish",
                                                    "lookup > request_approval > refund > finish")}) == 3


def test_divergence_bars_rank_states_by_weighted_divergence():
    found = pd.DataFrame({"state": ["s1", "s2"], "js": [0.5, 0.9], "weight": [1.0, 0.1]})
    fig = charts.divergence_bars(found, "found")
    assert list(fig.data[0].y) == ["s2", "s1"] and list(fig.data[0].x) == [0.9 * 0.1, 0.5]  # the largest on top
