"""Charts: pure functions from a query's DataFrame to a plotly Figure.

Query -> **chart** -> page. The only module that imports plotly; pages never build figures
themselves. Every trace is SVG (`go.Scatter`/`go.Bar`, never WebGL: WebGL charts came out blank
in headless browsers here).
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

SUCCESS = "#2e7d32"
VIOLATION = "#c62828"
NEUTRAL = "#455a64"
PALETTE = ["#1565c0", "#ef6c00", "#6a1b9a", "#00838f", "#9e9d24", "#ad1457", "#4e342e", "#37474f"]
ACTION_ORDER = ("finish", "lookup", "request_approval", "refund")


def _layout(fig: go.Figure, title: str, y_title: str = "", x_title: str = "step", height: int = 320) -> go.Figure:
    bottom = 90 if len(fig.data) > 1 else 40  # room for the legend under the axis title
    # No plotly template: Streamlit themes the chart itself, and a template costs ~35 ms a
    # figure to validate, which the Live page would pay for seven charts every second.
    fig.update_layout(
        title={"text": title, "font": {"size": 15}},
        height=height,
        margin={"l": 50, "r": 20, "t": 40, "b": bottom},
        xaxis_title=x_title,
        yaxis_title=y_title,
        # Legends sit below the axis title, never over the chart's title.
        legend={"orientation": "h", "yanchor": "top", "y": -0.25, "xanchor": "left", "x": 0.0},
    )
    return fig


def rate_curve(steps: pd.DataFrame, column: str, title: str, color: str) -> go.Figure:
    """A sampled rate (0..1) per step, e.g. success_rate or violation_rate."""
    fig = go.Figure()
    if not steps.empty:
        fig.add_trace(go.Scatter(x=steps["step"], y=steps[column], mode="lines+markers", name=title,
                                 line={"color": color, "width": 2}, marker={"size": 5}))
    fig.update_yaxes(range=[-0.02, 1.05], tickformat=".0%")
    return _layout(fig, title, "rate of sampled rollouts")


def success_curve(steps: pd.DataFrame) -> go.Figure:
    return rate_curve(steps, "success_rate", "Success rate", SUCCESS)


def violation_curve(steps: pd.DataFrame) -> go.Figure:
    return rate_curve(steps, "violation_rate", "Violation rate", VIOLATION)


def veto_counts(steps: pd.DataFrame) -> go.Figure:
    """Vetoed rollouts per step, and the audit counter (vetoed trajectories that got an update)."""
    fig = go.Figure()
    if not steps.empty:
        fig.add_trace(go.Bar(x=steps["step"], y=steps["vetoed"], name="vetoed rollouts", marker_color=VIOLATION))
        fig.add_trace(go.Bar(x=steps["step"], y=steps["vetoed_updates"], name="vetoed updates (must be 0)",
                             marker_color="#000000"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(rangemode="tozero")
    return _layout(fig, "Vetoes per step", "trajectories")


def update_counts(steps: pd.DataFrame) -> go.Figure:
    """Applied updates and clipped (skipped) transitions per step."""
    fig = go.Figure()
    if not steps.empty:
        fig.add_trace(go.Scatter(x=steps["step"], y=steps["updates"], mode="lines+markers", name="updates",
                                 line={"color": PALETTE[0]}))
        fig.add_trace(go.Scatter(x=steps["step"], y=steps["clipped"], mode="lines+markers", name="clipped",
                                 line={"color": PALETTE[1]}))
    return _layout(fig, "Updates and clipped transitions per step", "transitions")


def reward_components(components: pd.DataFrame) -> go.Figure:
    """Mean of each reward component per step (long form: step, component, value)."""
    fig = go.Figure()
    for i, (name, part) in enumerate(components.groupby("component", sort=True)):
        fig.add_trace(go.Scatter(x=part["step"], y=part["value"], mode="lines", name=str(name),
                                 line={"color": PALETTE[i % len(PALETTE)], "width": 2}))
    return _layout(fig, "Mean reward components per step", "mean value")


def _ordered(actions: pd.Series) -> list[str]:
    known = [a for a in ACTION_ORDER if a in set(actions)]
    return known + sorted(set(actions) - set(known))


def action_distribution(dist: pd.DataFrame, state: str) -> go.Figure:
    """The policy's probabilities at one state (columns: action, prob)."""
    fig = go.Figure()
    if not dist.empty:
        order = _ordered(dist["action"])
        dist = dist.set_index("action").loc[order].reset_index()
        colors = [VIOLATION if a == "refund" and state == "known_high" else PALETTE[0] for a in dist["action"]]
        fig.add_trace(go.Bar(x=dist["action"], y=dist["prob"], marker_color=colors,
                             text=[f"{p:.3f}" for p in dist["prob"]], textposition="outside"))
        step = int(dist["step"].iloc[0]) if "step" in dist else None
        title = f"Action distribution at {state}" + (f" (step {step})" if step is not None else "")
    else:
        title = f"Action distribution at {state}"
    fig.update_yaxes(range=[0, 1.1])
    return _layout(fig, title, "probability", x_title="action")


def memory_usage(hardware: pd.DataFrame, budget_bytes: float | None = None) -> go.Figure:
    """Resident memory of the run's process tree over time, against a budget when one is known."""
    fig = go.Figure()
    if not hardware.empty:
        fig.add_trace(go.Scatter(x=hardware["ts"], y=hardware["rss_bytes"] / 2**20, mode="lines+markers",
                                 name="process-tree RSS", line={"color": NEUTRAL}))
        if hardware["gpu_allocated_bytes"].notna().any():
            fig.add_trace(go.Scatter(x=hardware["ts"], y=hardware["gpu_allocated_bytes"] / 2**20, mode="lines",
                                     name="GPU allocated", line={"color": PALETTE[2]}))
    if budget_bytes:
        fig.add_hline(y=budget_bytes / 2**20, line_dash="dash", line_color=VIOLATION, annotation_text="budget estimate")
    return _layout(fig, "Memory", "MiB", x_title="time (UTC)")


# --- Compare: several runs on one figure, one colour per run. ----------------------------------


def run_colors(run_ids: list[str]) -> dict[str, str]:
    """A stable colour per run, in the order the runs were picked."""
    return {run_id: PALETTE[i % len(PALETTE)] for i, run_id in enumerate(run_ids)}


def _overlay(steps: pd.DataFrame, column: str, labels: dict[str, str]) -> go.Figure:
    """One line per run of a per-step column (columns: run_id, step, column)."""
    fig = go.Figure()
    colors = run_colors(list(labels))
    for run_id in labels:
        part = steps[steps["run_id"] == run_id]
        if not part.empty:
            fig.add_trace(go.Scatter(x=part["step"], y=part[column], mode="lines+markers", name=labels[run_id],
                                     line={"color": colors[run_id], "width": 2}, marker={"size": 4}))
    return fig


def rate_overlay(steps: pd.DataFrame, column: str, title: str, labels: dict[str, str]) -> go.Figure:
    """One rate per step (e.g. success_rate) for several runs."""
    fig = _overlay(steps, column, labels)
    fig.update_yaxes(range=[-0.02, 1.05], tickformat=".0%")
    return _layout(fig, title, "rate of sampled rollouts")


def count_overlay(steps: pd.DataFrame, column: str, title: str, labels: dict[str, str], y_title: str = "trajectories") -> go.Figure:
    """A per-step counter (vetoed, vetoed_updates, ...) for several runs."""
    fig = _overlay(steps, column, labels)
    fig.update_yaxes(rangemode="tozero")
    return _layout(fig, title, y_title)


def action_bars_by_run(dist: pd.DataFrame, state: str, step: int, labels: dict[str, str]) -> go.Figure:
    """Grouped bars: each run's action distribution at `state` at `step` (columns: run_id, action, prob)."""
    fig = go.Figure()
    colors = run_colors(list(labels))
    order = _ordered(dist["action"]) if not dist.empty else list(ACTION_ORDER)
    for run_id in labels:
        part = dist[dist["run_id"] == run_id].set_index("action").reindex(order)
        if part["prob"].notna().any():
            fig.add_trace(go.Bar(x=order, y=part["prob"], name=labels[run_id], marker_color=colors[run_id],
                                 text=[f"{p:.3f}" for p in part["prob"].fillna(0)], textposition="outside"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, 1.15])
    return _layout(fig, f"Action distribution at {state}, step {step}", "probability", x_title="action")


def action_difference(diff: pd.DataFrame, state: str, step: int, title_b_minus_a: str) -> go.Figure:
    """B - A per action at `state` (columns: action, diff); positive bars are where B puts more mass."""
    fig = go.Figure()
    if not diff.empty:
        order = _ordered(diff["action"])
        diff = diff.set_index("action").loc[order].reset_index()
        colors = [VIOLATION if v < 0 else SUCCESS for v in diff["diff"]]
        fig.add_trace(go.Bar(x=diff["action"], y=diff["diff"], marker_color=colors,
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
                                 colorscale="Blues", colorbar={"title": "p", "thickness": 12}))
    fig.update_yaxes(type="category")
    return _layout(fig, f"{title}: drift at {state}", "action", height=260)


def clipped_by_epoch_bars(clipped: pd.DataFrame, labels: dict[str, str]) -> go.Figure:
    """Clipped transitions summed over each run, per epoch (columns: run_id, epoch, clipped)."""
    fig = go.Figure()
    colors = run_colors(list(labels))
    for run_id in labels:
        part = clipped[clipped["run_id"] == run_id]
        if not part.empty:
            fig.add_trace(go.Bar(x=[f"epoch {e}" for e in part["epoch"]], y=part["clipped"], name=labels[run_id],
                                 marker_color=colors[run_id], text=list(part["clipped"]), textposition="outside"))
    fig.update_layout(barmode="group")
    return _layout(fig, "Clipped transitions per epoch (run total)", "transitions", x_title="")


def components_overlay(components: pd.DataFrame, labels: dict[str, str]) -> go.Figure:
    """Mean reward components per step for several runs: colour = run, dash = component."""
    fig = go.Figure()
    colors = run_colors(list(labels))
    dashes = ["solid", "dot", "dash", "dashdot", "longdash", "longdashdot"]
    names = sorted(components["component"].unique()) if not components.empty else []
    for run_id in labels:
        part = components[components["run_id"] == run_id]
        for j, name in enumerate(names):
            series = part[part["component"] == name]
            if not series.empty:
                fig.add_trace(go.Scatter(x=series["step"], y=series["value"], mode="lines",
                                         name=f"{labels[run_id]}: {name}",
                                         line={"color": colors[run_id], "dash": dashes[j % len(dashes)], "width": 2}))
    return _layout(fig, "Mean reward components per step", "mean value", height=380)


def throughput_model(curves: dict[str, list[tuple[float, float]]], labels: dict[str, str]) -> go.Figure:
    """SPEC section 9's modelled transitions/s against parallel environments, per run."""
    fig = go.Figure()
    colors = run_colors(list(labels))
    for run_id, points in curves.items():
        fig.add_trace(go.Scatter(x=[n for n, _ in points], y=[v for _, v in points], mode="lines+markers",
                                 name=labels.get(run_id, run_id), line={"color": colors.get(run_id, NEUTRAL)}))
    fig.update_xaxes(type="log")
    return _layout(fig, "Throughput model (declared latencies, each run's own totals)", "transitions / s",
                   x_title="parallel environments")


def cpu_usage(hardware: pd.DataFrame, cores: int | None = None) -> go.Figure:
    """CPU of the run's process tree over time, in percent of one core (200 = two cores busy)."""
    fig = go.Figure()
    if not hardware.empty:
        fig.add_trace(go.Scatter(x=hardware["ts"], y=hardware["cpu_percent"], mode="lines", name="process-tree CPU",
                                 line={"color": PALETTE[0]}))
    if cores:
        fig.add_hline(y=100 * cores, line_dash="dot", line_color=NEUTRAL, annotation_text=f"{cores} cores")
    fig.update_yaxes(rangemode="tozero")
    return _layout(fig, "CPU", "% of one core", x_title="time (UTC)")


def budget_against_measured(budget: pd.DataFrame) -> go.Figure:
    """The estimate's components beside what the run measured (columns: component, estimate_bytes, measured_bytes)."""
    fig = go.Figure()
    if not budget.empty:
        shown = budget[budget["component"] != "free"]
        fig.add_trace(go.Bar(x=shown["component"], y=shown["estimate_bytes"] / 1e9, name="estimate",
                             marker_color=PALETTE[0]))
        if shown["measured_bytes"].notna().any():
            fig.add_trace(go.Bar(x=shown["component"], y=shown["measured_bytes"] / 1e9, name="measured",
                                 marker_color=PALETTE[1]))
    fig.update_layout(barmode="group")
    return _layout(fig, "Memory budget: estimate against measured", "GB", x_title="")


def metric_curves(series: pd.DataFrame, title: str = "Engine metrics per step") -> go.Figure:
    """Several per-step metrics (long form: step, name, value), one line each."""
    fig = go.Figure()
    for i, (name, part) in enumerate(series.groupby("name", sort=True)):
        fig.add_trace(go.Scatter(x=part["step"], y=part["value"], mode="lines", name=str(name),
                                 line={"color": PALETTE[i % len(PALETTE)], "width": 2}))
    return _layout(fig, title, "value")
