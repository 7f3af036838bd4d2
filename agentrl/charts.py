"""Charts: pure functions from a query's DataFrame to a plotly Figure.

Query -> analysis -> **chart** -> page. The only module that imports plotly; pages never build
figures themselves. Every trace is SVG (`go.Scatter`/`go.Bar`, never WebGL: WebGL charts came out
blank in headless browsers here). Conventions every chart keeps:

- success and violation in Okabe-Ito's bluish green and vermillion, violation dashed (`OUTCOME_STYLE`);
- a run has one colour everywhere (`run_color`, from the index the store assigned it), and a
  reward component one colour in every run (`component_color`);
- hovering names every series at that step (`hovermode="x unified"`);
- legends sit to the right of the plot, so they never cover an axis title; charts of several
  runs have no legend of their own (the page draws one run legend for all of them);
- a column `<name>_raw` beside a smoothed `<name>` is drawn faint under the smoothed line;
- step axes tick at whole steps (or x is the run's elapsed time); memory is in GB everywhere;
- each quantity has its own y axis (engine metrics are small multiples on one shared x axis).
"""

from __future__ import annotations

import numbers
import zlib

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

# Okabe & Ito (2008): colours that readers with a common colour vision deficiency still tell apart.
OKABE_ITO = {"black": "#000000", "orange": "#E69F00", "sky_blue": "#56B4E9", "bluish_green": "#009E73",
             "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "reddish_purple": "#CC79A7"}
SUCCESS = OKABE_ITO["bluish_green"]
VIOLATION = OKABE_ITO["vermillion"]
NEUTRAL = "#607d8b"  # a mid grey-blue: readable on the light and the dark theme
OUTCOME_STYLE = {"success": {"color": SUCCESS, "dash": "solid"}, "violation": {"color": VIOLATION, "dash": "dash"}}
# Line style is a second cue beside colour. Run colours: the rest of Okabe-Ito first, then more.
RUN_PALETTE = [OKABE_ITO["blue"], OKABE_ITO["orange"], OKABE_ITO["reddish_purple"], OKABE_ITO["sky_blue"],
               "#8c6d31", OKABE_ITO["yellow"], "#6a3d9a", "#999999", "#1b7837", "#b15928"]
# Reward components keep their colour in every run and on every page.
COMPONENT_COLORS = {"outcome": OKABE_ITO["blue"], "step_cost": "#999999", "violation_penalty": VIOLATION,
                    "duplicate_penalty": OKABE_ITO["orange"], "format": OKABE_ITO["reddish_purple"],
                    "schema": OKABE_ITO["sky_blue"], "tests": SUCCESS, "step_budget": "#8c6d31"}
ACTION_ORDER = ("finish", "lookup", "request_approval", "refund")
DASHES = ["solid", "dot", "dash", "dashdot", "longdash", "longdashdot"]


def fingerprint(fig: go.Figure) -> int:
    """A checksum of the figure as the browser receives it: equal for equal charts."""
    return zlib.crc32(pio.to_json(fig, validate=False).encode())


def run_color(index, run_id: str | None = None) -> str:
    """A run's colour from its fixed colour index (a hash of its id until it has one)."""
    if index is None or pd.isna(index):
        index = zlib.crc32((run_id or "").encode())
    return RUN_PALETTE[int(index) % len(RUN_PALETTE)]


def component_color(name: str) -> str:
    return COMPONENT_COLORS.get(name) or RUN_PALETTE[zlib.crc32(name.encode()) % len(RUN_PALETTE)]


def _whole_steps(fig: go.Figure) -> None:
    """Tick a step axis at whole steps: a short run otherwise gets ticks at 0.5."""
    values = [pd.to_numeric(pd.Series(trace.x), errors="coerce") for trace in fig.data
              if getattr(trace, "x", None) is not None and len(trace.x)]
    values = pd.concat(values).dropna() if values else pd.Series(dtype=float)
    if len(values) and values.max() - values.min() <= 12:
        fig.update_xaxes(dtick=1, tick0=0)
    else:
        fig.update_xaxes(tickformat="d")


def _layout(fig: go.Figure, title: str, y_title: str = "", x_title: str = "step", height: int = 320,
            legend: bool = True, log_y: bool = False) -> go.Figure:
    # No plotly template: Streamlit themes the chart itself, and a template costs ~35 ms a
    # figure to validate, which a refreshing page would pay for every chart every second.
    fig.update_layout(
        title={"text": title, "font": {"size": 15}},
        height=height,
        margin={"l": 50, "r": 20, "t": 40, "b": 40},
        xaxis_title=x_title,
        yaxis_title=y_title,
        hovermode="x unified",
        showlegend=legend and len([t for t in fig.data if t.showlegend is not False]) > 1,
        legend={"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1.0, "yanchor": "top"},
    )
    if log_y:
        fig.update_yaxes(type="log")
    if x_title == "step":
        _whole_steps(fig)
    return fig


X_AXES = {"step": "step", "elapsed_s": "time since the run started (s)"}  # a per-step chart's x choices


def x_title_of(x: str) -> str:
    return X_AXES[x]


MARKER_POINTS = 40  # a marker is an SVG node each: only short series get them


def _few(frame) -> bool:
    return len(frame) <= MARKER_POINTS


def _line(x, y, name: str, color: str, width: float = 2, dash: str = "solid", markers: bool = False, **extra) -> go.Scatter:
    return go.Scatter(x=x, y=y, mode="lines+markers" if markers else "lines", name=name,
                      line={"color": color, "width": width, "dash": dash}, marker={"size": 4}, **extra)


def _raw_under(fig: go.Figure, part: pd.DataFrame, column: str, x: str, color: str, name: str) -> None:
    """The unsmoothed series, faint, under its smoothed line (when the frame carries one)."""
    raw = f"{column}_raw"
    if raw in part and not part[raw].equals(part[column]):
        fig.add_trace(_line(part[x], part[raw], f"{name} (raw)", color, width=1, opacity=0.3, showlegend=False,
                            hoverinfo="skip"))


def rates_curve(steps: pd.DataFrame, x: str = "step") -> go.Figure:
    """Success and violation rate (0..1) per step on one chart: a run can keep full success
    while its violations climb, and the two lines side by side show it (violation dashed)."""
    fig = go.Figure()
    if not steps.empty:
        for column, name in (("success_rate", "success"), ("violation_rate", "violation")):
            style = OUTCOME_STYLE[name]
            _raw_under(fig, steps, column, x, style["color"], name)
            fig.add_trace(_line(steps[x], steps[column], name, style["color"], dash=style["dash"], markers=_few(steps)))
    fig.update_yaxes(range=[-0.02, 1.05], tickformat=".0%")
    return _layout(fig, "Success and violation rate", "rate of sampled rollouts", x_title=x_title_of(x))


def veto_counts(steps: pd.DataFrame, x: str = "step") -> go.Figure:
    """Vetoed rollouts per step, and the audit counter (vetoed trajectories that got an update)."""
    fig = go.Figure()
    if not steps.empty:
        fig.add_trace(go.Bar(x=steps[x], y=steps["vetoed"], name="vetoed rollouts", marker_color=VIOLATION))
        fig.add_trace(go.Bar(x=steps[x], y=steps["vetoed_updates"], name="vetoed updates (must be 0)",
                             marker_color=NEUTRAL))
    fig.update_layout(barmode="group")
    fig.update_yaxes(rangemode="tozero")
    return _layout(fig, "Vetoes per step", "trajectories", x_title=x_title_of(x))


def update_counts(steps: pd.DataFrame, clipped: bool = True, x: str = "step") -> go.Figure:
    """Applied updates per step, and clipped (skipped) transitions when the run clipped any."""
    fig = go.Figure()
    if not steps.empty:
        fig.add_trace(_line(steps[x], steps["updates"], "updates", RUN_PALETTE[0], markers=_few(steps)))
        if clipped:
            fig.add_trace(_line(steps[x], steps["clipped"], "clipped", RUN_PALETTE[1], dash="dot", markers=_few(steps)))
    return _layout(fig, "Updates and clipped transitions per step" if clipped else "Updates per step", "transitions",
                   x_title=x_title_of(x))


def reward_components(components: pd.DataFrame, x: str = "step") -> go.Figure:
    """Mean of each reward component per step of one run (long form: step[, elapsed_s], component,
    value): colour = component, the same colour as on Compare."""
    fig = go.Figure()
    for name, part in components.groupby("component", sort=True):
        fig.add_trace(_line(part[x], part["value"], str(name), component_color(str(name))))
    return _layout(fig, "Mean reward components per step", "mean value", x_title=x_title_of(x))


def _ordered(actions: pd.Series) -> list[str]:
    known = [a for a in ACTION_ORDER if a in set(actions)]
    return known + sorted(set(actions) - set(known))


def action_distribution(dist: pd.DataFrame, state: str) -> go.Figure:
    """The policy's probabilities at one state (columns: action, prob)."""
    fig = go.Figure()
    if not dist.empty:
        order = _ordered(dist["action"])
        dist = dist.set_index("action").loc[order].reset_index()
        colors = [VIOLATION if a == "refund" and state == "known_high" else RUN_PALETTE[0] for a in dist["action"]]
        fig.add_trace(go.Bar(x=dist["action"], y=dist["prob"], marker_color=colors, name="probability",
                             text=[f"{p:.3f}" for p in dist["prob"]], textposition="outside"))
        step = int(dist["step"].iloc[0]) if "step" in dist else None
        title = f"Action distribution at {state}" + (f" (step {step})" if step is not None else "")
    else:
        title = f"Action distribution at {state}"
    fig.update_yaxes(range=[0, 1.1])
    return _layout(fig, title, "probability", x_title="action")


def _at_least_a_minute(fig: go.Figure, hardware: pd.DataFrame) -> None:
    """A run shorter than its sampling interval has one sample or a few within a second: plotly
    then labels the time axis in tenths of a millisecond. Show at least a minute around them."""
    if hardware.empty:
        return
    first, last = pd.Timestamp(hardware["ts"].min()), pd.Timestamp(hardware["ts"].max())
    if last - first < pd.Timedelta(seconds=60):
        middle, half = first + (last - first) / 2, pd.Timedelta(seconds=30)
        fig.update_xaxes(range=[middle - half, middle + half])


GB = 1e9  # memory is drawn in GB everywhere, as the budget is stated


def memory_usage(hardware: pd.DataFrame, budget_bytes: float | None = None) -> go.Figure:
    """Resident memory of the run's process tree over time, against a budget when one is known
    (both in GB, as the budget chart beside it)."""
    fig = go.Figure()
    if not hardware.empty:
        fig.add_trace(_line(hardware["ts"], hardware["rss_bytes"] / GB, "process-tree RSS", NEUTRAL,
                            markers=_few(hardware)))
        if hardware["gpu_allocated_bytes"].notna().any():
            fig.add_trace(_line(hardware["ts"], hardware["gpu_allocated_bytes"] / GB, "GPU allocated", RUN_PALETTE[2],
                                dash="dot"))
    if budget_bytes:
        fig.add_hline(y=budget_bytes / GB, line_dash="dash", line_color=VIOLATION, annotation_text="budget estimate")
    fig.update_yaxes(rangemode="tozero")
    _at_least_a_minute(fig, hardware)
    return _layout(fig, "Memory", "GB", x_title="time (UTC)")


# --- Several runs on one figure: colour = run (the page draws the run legend). ----------------


def run_colors(run_ids: list[str]) -> dict[str, str]:
    """Colours by position, for runs that have no colour index (tests, scripts)."""
    return {run_id: RUN_PALETTE[i % len(RUN_PALETTE)] for i, run_id in enumerate(run_ids)}


def _overlay(steps: pd.DataFrame, column: str, labels: dict[str, str], colors: dict[str, str] | None,
             x: str = "step") -> go.Figure:
    """One line per run of a per-step column (columns: run_id, step, column[, column_raw])."""
    fig = go.Figure()
    colors = colors or run_colors(list(labels))
    for run_id in labels:
        part = steps[steps["run_id"] == run_id]
        if not part.empty:
            _raw_under(fig, part, column, x, colors[run_id], labels[run_id])
            fig.add_trace(_line(part[x], part[column], labels[run_id], colors[run_id], markers=_few(part)))
    return fig


def rate_overlay(steps: pd.DataFrame, column: str, title: str, labels: dict[str, str],
                 colors: dict[str, str] | None = None) -> go.Figure:
    """One rate per step (e.g. success_rate) for several runs."""
    fig = _overlay(steps, column, labels, colors)
    fig.update_yaxes(range=[-0.02, 1.05], tickformat=".0%")
    return _layout(fig, title, "rate of sampled rollouts", legend=False)


def count_overlay(steps: pd.DataFrame, column: str, title: str, labels: dict[str, str],
                  colors: dict[str, str] | None = None, y_title: str = "trajectories", log_y: bool = False) -> go.Figure:
    """A per-step counter (vetoed, vetoed_updates, ...) for several runs."""
    fig = _overlay(steps, column, labels, colors)
    if not log_y:
        fig.update_yaxes(rangemode="tozero")
    return _layout(fig, title, y_title, legend=False, log_y=log_y)


def metric_overlay(series: pd.DataFrame, name: str, labels: dict[str, str], colors: dict[str, str] | None = None,
                   log_y: bool = False) -> go.Figure:
    """One engine metric per step for several runs (columns: run_id, step, value[, value_raw])."""
    fig = _overlay(series, "value", labels, colors)
    return _layout(fig, name, "value", legend=False, log_y=log_y)


def action_bars_by_run(dist: pd.DataFrame, state: str, step: int, labels: dict[str, str],
                       colors: dict[str, str] | None = None) -> go.Figure:
    """Grouped bars: each run's action distribution at `state` at `step` (columns: run_id, action, prob)."""
    fig = go.Figure()
    colors = colors or run_colors(list(labels))
    order = _ordered(dist["action"]) if not dist.empty else list(ACTION_ORDER)
    for run_id in labels:
        part = dist[dist["run_id"] == run_id].set_index("action").reindex(order)
        if part["prob"].notna().any():
            fig.add_trace(go.Bar(x=order, y=part["prob"], name=labels[run_id], marker_color=colors[run_id],
                                 text=[f"{p:.3f}" for p in part["prob"].fillna(0)], textposition="outside"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, 1.15])
    return _layout(fig, f"Action distribution at {state}, step {step}", "probability", x_title="action", legend=False)


def action_difference(diff: pd.DataFrame, state: str, step: int, title_b_minus_a: str) -> go.Figure:
    """B - A per action at `state` (columns: action, diff); positive bars are where B puts more mass."""
    fig = go.Figure()
    if not diff.empty:
        order = _ordered(diff["action"])
        diff = diff.set_index("action").loc[order].reset_index()
        colors = [VIOLATION if v < 0 else SUCCESS for v in diff["diff"]]
        fig.add_trace(go.Bar(x=diff["action"], y=diff["diff"], marker_color=colors, name="B − A",
                             text=[f"{v:+.3f}" for v in diff["diff"]], textposition="outside"))
    fig.update_yaxes(range=[-1.15, 1.15], zeroline=True)
    return _layout(fig, f"Difference at {state}, step {step}: {title_b_minus_a}", "Δ probability", x_title="action")


def action_drift_heatmap(history: pd.DataFrame, state: str, title: str) -> go.Figure:
    """How one run's distribution at `state` drifted: steps x actions, colour = probability
    (columns: step, action, prob)."""
    fig = go.Figure()
    if not history.empty:
        order = _ordered(history["action"])
        grid = history.pivot_table(index="action", columns="step", values="prob").reindex(order)
        fig.add_trace(go.Heatmap(z=grid.values, x=list(grid.columns), y=list(grid.index), zmin=0, zmax=1,
                                 colorscale="Blues", colorbar={"title": "p", "thickness": 12},
                                 hovertemplate="step %{x}<br>%{y}: %{z:.3f}<extra></extra>"))
    fig.update_yaxes(type="category")
    fig = _layout(fig, f"{title}: drift at {state}", "action", height=260)
    fig.update_layout(hovermode="closest")
    return fig


def clipped_by_epoch_bars(clipped: pd.DataFrame, labels: dict[str, str], colors: dict[str, str] | None = None) -> go.Figure:
    """Clipped transitions summed over each run, per epoch (columns: run_id, epoch, clipped)."""
    fig = go.Figure()
    colors = colors or run_colors(list(labels))
    for run_id in labels:
        part = clipped[clipped["run_id"] == run_id]
        if not part.empty:
            fig.add_trace(go.Bar(x=[f"epoch {e}" for e in part["epoch"]], y=part["clipped"], name=labels[run_id],
                                 marker_color=colors[run_id], text=list(part["clipped"]), textposition="outside"))
    fig.update_layout(barmode="group")
    return _layout(fig, "Clipped transitions per epoch (run total)", "transitions", x_title="", legend=False)


def components_overlay(components: pd.DataFrame, labels: dict[str, str], colors: dict[str, str] | None = None) -> go.Figure:
    """Mean reward components per step for several runs: colour = component (as on Live), dash =
    run, in the order of `labels`. The legend names the components in their colour and the runs in
    their dash (`colors` is accepted for the callers' sake: a run is told by its dash here)."""
    fig, names = go.Figure(), sorted(components["component"].unique()) if not components.empty else []
    dash_of = {run_id: DASHES[j % len(DASHES)] for j, run_id in enumerate(labels)}
    for name in names:  # legend entries: one per component, in its colour
        fig.add_trace(_line([None], [None], name, component_color(name), legendgroup=name, hoverinfo="skip"))
    for run_id in labels:  # and one per run, in its dash
        fig.add_trace(_line([None], [None], labels[run_id], NEUTRAL, dash=dash_of[run_id], hoverinfo="skip"))
    for run_id in labels:
        part = components[components["run_id"] == run_id]
        for name in names:
            series = part[part["component"] == name]
            if not series.empty:
                fig.add_trace(_line(series["step"], series["value"], f"{labels[run_id]}: {name}", component_color(name),
                                    dash=dash_of[run_id], legendgroup=name, showlegend=False))
    return _layout(fig, "Mean reward components per step", "mean value", height=380)


def throughput_model(curves: dict[str, list[tuple[float, float]]], labels: dict[str, str],
                     colors: dict[str, str] | None = None) -> go.Figure:
    """SPEC section 9's modelled transitions/s against parallel environments, per run."""
    fig = go.Figure()
    colors = colors or run_colors(list(labels))
    for run_id, points in curves.items():
        fig.add_trace(_line([n for n, _ in points], [v for _, v in points], labels.get(run_id, run_id),
                            colors.get(run_id, NEUTRAL), markers=True))
    fig.update_xaxes(type="log")
    return _layout(fig, "Throughput model (declared latencies, each run's own totals)", "transitions / s",
                   x_title="parallel environments", legend=False)


def fleet_speedup(speedup: pd.DataFrame, labels: dict[str, str], colors: dict[str, str] | None = None) -> go.Figure:
    """The environment fleet: each run's measured speedup at its worker count (a point in the
    run's colour, joined in order of N) beside SPEC section 9's modelled speedup, and the ideal."""
    fig = go.Figure()
    colors = colors or run_colors(list(labels))
    if not speedup.empty:
        n = speedup["workers"].astype(float)
        fig.add_trace(_line(n, n, "ideal (N×)", NEUTRAL, width=1, dash="dot"))
        fig.add_trace(_line(n, speedup["modelled"], "SPEC 9 model", NEUTRAL, dash="dash", markers=True))
        fig.add_trace(go.Scatter(
            x=n, y=speedup["speedup"], mode="lines+markers", name="measured", line={"color": SUCCESS, "width": 2},
            marker={"size": 11, "color": [colors.get(r, NEUTRAL) for r in speedup["run_id"]]},
            text=[labels.get(r, r) for r in speedup["run_id"]],
            hovertemplate="%{text}: %{y:.2f}x with %{x} workers<extra></extra>"))
        fig.update_xaxes(tickvals=sorted(set(n)), rangemode="tozero")
        fig.update_yaxes(rangemode="tozero")
    return _layout(fig, "Environment fleet: speedup against workers", "speedup over the fewest workers",
                   x_title="workers")


def cpu_usage(hardware: pd.DataFrame, cores: int | None = None) -> go.Figure:
    """CPU of the run's process tree over time, in percent of one core (200 = two cores busy)."""
    fig = go.Figure()
    if not hardware.empty:
        fig.add_trace(_line(hardware["ts"], hardware["cpu_percent"], "process-tree CPU", RUN_PALETTE[0],
                            markers=_few(hardware)))
    if cores:
        fig.add_hline(y=100 * cores, line_dash="dot", line_color=NEUTRAL, annotation_text=f"{cores} cores")
    fig.update_yaxes(rangemode="tozero")
    _at_least_a_minute(fig, hardware)
    return _layout(fig, "CPU", "% of one core", x_title="time (UTC)")


def budget_against_measured(budget: pd.DataFrame) -> go.Figure:
    """The estimate's components beside what the run measured (columns: component, estimate_bytes, measured_bytes)."""
    fig = go.Figure()
    if not budget.empty:
        shown = budget[budget["component"] != "free"]
        fig.add_trace(go.Bar(x=shown["component"], y=shown["estimate_bytes"] / 1e9, name="estimate",
                             marker_color=RUN_PALETTE[0]))
        if shown["measured_bytes"].notna().any():
            fig.add_trace(go.Bar(x=shown["component"], y=shown["measured_bytes"] / 1e9, name="measured",
                                 marker_color=RUN_PALETTE[1]))
    fig.update_layout(barmode="group")
    return _layout(fig, "Memory budget: estimate against measured", "GB", x_title="")


SMALL_MULTIPLE_HEIGHT = 170  # px per engine metric: each on its own y axis


def metric_curves(series: pd.DataFrame, title: str = "Engine metrics per step", log_y: bool = False,
                  x: str = "step") -> go.Figure:
    """Several per-step metrics (long form: step, name, value[, value_raw]) as small multiples: one
    row and one y axis each (entropy near 0 is not flattened by a loss near 10), all rows on one
    shared x axis, so zooming one zooms all and hovering names every metric at that step."""
    from plotly.subplots import make_subplots

    names = sorted(series["name"].astype(str).unique()) if not series.empty else []
    rows = max(len(names), 1)
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.06, subplot_titles=names or None)
    for row, name in enumerate(names, start=1):
        part = series[series["name"].astype(str) == name]
        color = component_color(name)  # a metric keeps its colour whatever else is picked
        if "value_raw" in part and not part["value_raw"].equals(part["value"]):
            fig.add_trace(_line(part[x], part["value_raw"], f"{name} (raw)", color, width=1, opacity=0.3,
                                showlegend=False, hoverinfo="skip"), row=row, col=1)
        fig.add_trace(_line(part[x], part["value"], name, color, showlegend=False), row=row, col=1)
    fig = _layout(fig, title, "", x_title="", height=60 + SMALL_MULTIPLE_HEIGHT * rows, log_y=log_y)
    fig.update_xaxes(title_text=x_title_of(x), row=rows, col=1)
    fig.update_layout(hoversubplots="axis", hovermode="x unified", margin={"t": 60})
    if x == "step":
        _whole_steps(fig)
    return fig


ONSET_LABEL_Y = 0.62  # an onset label's height on a chart (paper): mid-plot, off the 0% and 100% lines


def mark_onset(fig: go.Figure, step: int | None, label: str = "hacking onset", at_x: float | None = None) -> go.Figure:
    """A dashed vertical line at the onset step on a chart whose x axis is the step (the chart is
    left as it was when there is no onset). The line is a layout shape: it is drawn whatever the
    chart's traces, and its name tells a reader (and a browser test) what it marks."""
    if step is None:
        return fig
    where = step if at_x is None else at_x  # the onset step's place on an axis of elapsed time
    # The label goes on the side with more of the run: plotly widens the x axis to fit a label, and
    # a label left of an early onset pushed the axis to negative steps.
    xs = [float(x) for trace in fig.data if getattr(trace, "x", None) is not None
          for x in trace.x if isinstance(x, numbers.Real)]
    middle = (min(xs) + max(xs)) / 2 if xs else where
    fig.add_vline(x=where, line_dash="dash", line_color=VIOLATION, line_width=1.5, name="onset")
    # The label mid-plot (as Compare's, `group_charts.mark_onsets`): at the top it sat on the 100%
    # success line, the one curve a reader looks for there.
    fig.add_annotation(x=where, y=ONSET_LABEL_Y, xref="x", yref="paper", showarrow=False, text=f"{label} (step {step})",
                       xanchor="left" if where <= middle else "right", xshift=4 if where <= middle else -4,
                       font={"color": VIOLATION, "size": 11}, bgcolor="rgba(255,255,255,0.85)")
    return fig
