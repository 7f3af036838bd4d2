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


# --- Seed groups and Compare's figures (issue 29) ----------------------------------------------


def _curves() -> pd.DataFrame:
    return pd.DataFrame({"group_id": ["o", "o", "g", "g"], "step": [1, 2, 1, 2], "mean": [0.3, 0.8, 0.1, 0.1],
                         "lo": [0.2, 0.6, 0.1, 0.1], "hi": [0.4, 1.0, 0.1, 0.1], "runs": [2, 2, 1, 1]})


def test_a_seed_group_draws_one_mean_line_in_a_band_of_its_colour_and_a_lone_run_no_band():
    fig = charts.seed_band_overlay(_curves(), "Success rate", {"o": "outcome · 2 seeds", "g": "guarded"},
                                   {"o": "#0072b2", "g": "#d55e00"})
    names = [t.name for t in fig.data]
    assert names == ["outcome · 2 seeds (band top)", "outcome · 2 seeds (band)", "outcome · 2 seeds", "guarded"]
    band = fig.data[1]
    assert band.fill == "tonexty" and band.fillcolor == "rgba(0,114,178,0.18)" and list(band.y) == [0.2, 0.6]
    assert list(fig.data[2].y) == [0.3, 0.8] and fig.data[2].line.color == "#0072b2"
    assert fig.layout.hoverlabel.namelength == -1  # hover names are never cut to "refund-outcome…"


def test_a_long_title_breaks_onto_two_lines_with_room_above_the_plot():
    fig = charts.action_difference(pd.DataFrame({"action": ["refund"], "diff": [-0.9]}), "known_high", 30,
                                   "refund-guarded (guarded) − refund-outcome (outcome)")
    fitted = charts.fit_title(fig)
    assert fitted.layout.title.text == ("Difference at known_high, step 30:<br>refund-guarded (guarded) − "
                                        "refund-outcome (outcome)")
    assert fitted.layout.margin.t > 40


def test_onset_labels_sit_mid_plot_one_under_the_other_never_on_the_100_percent_line():
    fig = go.Figure(go.Scatter(x=list(range(1, 31)), y=[1.0] * 30))
    charts.mark_onsets(fig, {"a": 7, "b": 25, "c": None})
    assert [s.x0 for s in fig.layout.shapes] == [7, 25] and {s.name for s in fig.layout.shapes} == {"onset"}
    ys = [a.y for a in fig.layout.annotations]
    assert all(0.2 < y < 0.8 for y in ys) and len(set(ys)) == 2
    assert [a.xanchor for a in fig.layout.annotations] == ["left", "right"]
