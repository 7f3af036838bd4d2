"""Seed groups' and Compare's figures (`agentrl.group_charts`, issue 29): a group's mean line in a
band of its colour, hover names in full, a long title on two lines, onset labels mid-plot."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from agentrl import charts, group_charts


def _curves() -> pd.DataFrame:
    return pd.DataFrame({"group_id": ["o", "o", "g", "g"], "step": [1, 2, 1, 2], "mean": [0.3, 0.8, 0.1, 0.1],
                         "lo": [0.2, 0.6, 0.1, 0.1], "hi": [0.4, 1.0, 0.1, 0.1], "runs": [2, 2, 1, 1]})


def test_a_seed_group_draws_one_mean_line_in_a_band_of_its_colour_and_a_lone_run_no_band():
    fig = group_charts.seed_band_overlay(_curves(), "Success rate", {"o": "outcome · 2 seeds", "g": "guarded"},
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
    fitted = group_charts.fit_title(fig)
    assert fitted.layout.title.text == ("Difference at known_high, step 30:<br>refund-guarded (guarded) − "
                                        "refund-outcome (outcome)")
    assert fitted.layout.margin.t > 40


def test_onset_labels_sit_mid_plot_one_under_the_other_never_on_the_100_percent_line():
    fig = go.Figure(go.Scatter(x=list(range(1, 31)), y=[1.0] * 30))
    group_charts.mark_onsets(fig, {"a": 7, "b": 25, "c": None})
    assert [s.x0 for s in fig.layout.shapes] == [7, 25] and {s.name for s in fig.layout.shapes} == {"onset"}
    ys = [a.y for a in fig.layout.annotations]
    assert all(0.2 < y < 0.8 for y in ys) and len(set(ys)) == 2
    assert [a.xanchor for a in fig.layout.annotations] == ["left", "right"]


def test_live_draws_a_runs_seed_group_behind_its_own_lines_a_dotted_mean_in_a_band_of_each_rates_colour():
    steps = pd.DataFrame({"step": [1, 2], "success_rate": [0.5, 1.0], "violation_rate": [0.0, 0.5]})
    curves = {rate: _curves()[lambda c: c["group_id"] == "o"] for rate in ("success", "violation")}
    fig = group_charts.beside_seed_group(charts.rates_curve(steps), curves, "mean of 2 seeds")
    names = [t.name for t in fig.data]
    assert names[-2:] == ["success", "violation"]  # the run's own lines on top, named as before
    assert names.index("success, mean of 2 seeds") < names.index("violation, mean of 2 seeds") < names.index("success")
    band = next(t for t in fig.data if t.fill == "tonexty" and t.name.startswith("violation"))
    assert band.fillcolor == "rgba(213,94,0,0.14)" and list(band.y) == [0.2, 0.6]  # vermillion, translucent
    mean = next(t for t in fig.data if t.name == "success, mean of 2 seeds")
    assert mean.line.dash == "dot" and mean.line.color == charts.SUCCESS
    assert fig.layout.title.text == "Success and violation rate" and list(fig.layout.yaxis.range) == [-0.02, 1.05]


def test_lives_onset_label_sits_mid_plot_off_the_100_percent_line():
    fig = charts.mark_onset(charts.rates_curve(pd.DataFrame({"step": [1, 2, 3], "success_rate": [1.0] * 3,
                                                             "violation_rate": [0.5] * 3})), 2)
    (label,) = fig.layout.annotations
    assert label.yref == "paper" and 0.2 < label.y < 0.8 and label.text == "hacking onset (step 2)"
