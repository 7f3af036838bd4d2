"""Figures of what runs did, beside the rates: each behaviour's share per step (one colour per
behaviour on every page), the states where two runs' next actions differ most, and each scanner's
hit rate beside the violation rate.

analysis / queries -> **behaviour_charts** -> ui.behaviours, ui.scans. Built on `agentrl.charts`,
which holds plotly and the conventions every chart keeps; kept apart so neither passes 500 lines.
"""

from __future__ import annotations

import zlib

import pandas as pd

from agentrl.charts import NEUTRAL, _few, _layout, _line, go, run_colors

# Behaviours keep one colour on every page and in every run: a hash of the behaviour's text into a
# palette of their own (plotly's Dark24 and Light24: 48 colours, so two behaviours of one chart
# rarely share one; the refund task's common behaviours all differ).
BEHAVIOUR_PALETTE = ["#2E91E5", "#E15F99", "#1CA71C", "#FB0D0D", "#DA16FF", "#222A2A", "#B68100", "#750D86", "#EB663B",
                     "#511CFB", "#00A08B", "#FB00D1", "#FC0080", "#B2828D", "#6C7C32", "#778AAE", "#862A16", "#A777F1",
                     "#620042", "#1616A7", "#DA60CA", "#6C4516", "#0D2A63", "#AF0038", "#FD3216", "#00FE35", "#6A76FC",
                     "#FED4C4", "#FE00CE", "#0DF9FF", "#F6F926", "#FF9616", "#479B55", "#EEA6FB", "#DC587D", "#D626FF",
                     "#6E899C", "#00B5F7", "#B68E00", "#C9FBE5", "#FF0092", "#22FFA7", "#E3EE9E", "#86CE00", "#BC7196",
                     "#7E7DCD", "#FC6955", "#E48F72"]
OTHER_BEHAVIOURS = "(other)"


def behaviour_color(behaviour: str) -> str:
    if behaviour == OTHER_BEHAVIOURS:
        return "#e0e0e0"
    return BEHAVIOUR_PALETTE[zlib.crc32(behaviour.encode()) % len(BEHAVIOUR_PALETTE)]


def behaviour_shares(shares: pd.DataFrame, title: str = "Behaviours: share of each step's trajectories",
                     unverified: frozenset[str] | set[str] = frozenset(), title_color: str | None = None) -> go.Figure:
    """Stacked areas: each behaviour's share of a step's trajectories (columns: step, behaviour,
    share), most common at the bottom; an unverified behaviour's name is marked "⚠"."""
    fig = go.Figure()
    if not shares.empty:
        order = shares.groupby("behaviour")["share"].sum().sort_values(ascending=False).index.tolist()
        if OTHER_BEHAVIOURS in order:  # the lumped rest sits on top
            order.remove(OTHER_BEHAVIOURS)
            order.append(OTHER_BEHAVIOURS)
        for behaviour in order:
            part = shares[shares["behaviour"] == behaviour].sort_values("step")
            name = ("⚠ " if behaviour in unverified else "") + (behaviour if len(behaviour) <= 60 else behaviour[:59] + "…")
            fig.add_trace(go.Scatter(x=part["step"], y=part["share"], name=name, mode="lines", stackgroup="one",
                                     line={"width": 0.5, "color": behaviour_color(behaviour)},
                                     fillcolor=behaviour_color(behaviour), hovertemplate="%{y:.0%}"))
    fig.update_yaxes(range=[0, 1.0], tickformat=".0%")
    fig = _layout(fig, title, "share of trajectories", height=360)
    if title_color:
        fig.update_layout(title={"font": {"size": 15, "color": title_color}})
    return fig


def divergence_bars(found: pd.DataFrame, title: str) -> go.Figure:
    """The found divergent states, largest weighted divergence first (columns: state, js, weight)."""
    fig = go.Figure()
    if not found.empty:
        part = found.head(10).iloc[::-1]
        names = [s if len(s) <= 50 else "…" + s[-49:] for s in part["state"]]
        fig.add_trace(go.Bar(y=names, x=part["js"] * part["weight"], orientation="h", marker_color=NEUTRAL,
                             name="weighted divergence", customdata=part[["js", "weight"]].to_numpy(),
                             hovertemplate="JS %{customdata[0]:.3f} bits × weight %{customdata[1]:.2f}<extra></extra>"))
    fig.update_layout(hovermode="closest")
    return _layout(fig, title, "state", x_title="JS (bits) × weight", height=320)


def scanner_hit_rates(rates: pd.DataFrame, labels: dict[str, str], colors: dict[str, str] | None = None) -> go.Figure:
    """Each scanner's hit rate per step (solid, one dash per scanner) beside the run's violation rate
    (dotted), per run (columns of `queries.scan_hit_rates`)."""
    fig, colors = go.Figure(), colors or run_colors(list(labels))
    dashes = ("solid", "dash", "dashdot", "longdash")
    for run_id in labels:
        part = rates[rates["run_id"] == run_id]
        for i, (scanner, lines) in enumerate(part.groupby("scanner", sort=True)):
            fig.add_trace(_line(lines["step"], lines["hit_rate"], f"{labels[run_id]}: {scanner} hits", colors[run_id],
                                dash=dashes[i % len(dashes)], markers=_few(lines)))
        if not part.empty:
            steps = part.drop_duplicates("step")
            fig.add_trace(_line(steps["step"], steps["violation_rate"], f"{labels[run_id]}: violations", colors[run_id],
                                width=1, dash="dot"))
    fig.update_yaxes(range=[-0.02, 1.05], tickformat=".0%")
    return _layout(fig, "Scanner hit rate beside the violation rate", "rate of scanned rollouts")
