"""Figures of seed groups and Compare's finishing touches: one line per seed group in a band of
its colour, full names in hover labels, a long title on two lines, onset labels mid-plot.

analysis.seed_groups -> **group_charts** -> Compare (`seed_band_overlay`) and Live (`beside_seed_group`).
Built on `agentrl.charts`, which holds plotly and the conventions every chart keeps (a run's
colour, "x unified" hover, no legend on a chart of several runs: the page draws one); kept apart
so neither module passes 500 lines.
"""

from __future__ import annotations

import numbers

import pandas as pd

from agentrl.charts import ONSET_LABEL_Y, OUTCOME_STYLE, VIOLATION, _few, _layout, _line, go, run_colors


def _translucent(color: str, alpha: float = 0.18) -> str:
    """`color` (#rrggbb) as rgba with `alpha`: a band in its line's colour that lines show through."""
    color = color.lstrip("#")
    if len(color) != 6:
        return f"rgba(128,128,128,{alpha})"
    r, g, b = (int(color[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def seed_band_overlay(curves: pd.DataFrame, title: str, labels: dict[str, str], colors: dict[str, str] | None = None,
                      y_title: str = "rate of sampled rollouts", rate: bool = True, band: str = "min–max") -> go.Figure:
    """One line per seed group, the mean over its runs, in a band of the group's colour (columns of
    `curves`, from `analysis.seed_groups.group_curves`: group_id, step, mean, lo, hi, runs).
    `labels` and `colors` are by group id; a group of one run draws as a plain line. Live and
    Compare both call this; the band's name (`<label> (band)`) says what it spans."""
    fig = go.Figure()
    colors = colors or run_colors(list(labels))
    for group_id, name in labels.items():
        part = curves[curves["group_id"] == group_id]
        if part.empty:
            continue
        color = colors[group_id]
        if (part["hi"] - part["lo"]).abs().max() > 0:
            fig.add_trace(go.Scatter(x=part["step"], y=part["hi"], mode="lines", line={"width": 0, "color": color},
                                     showlegend=False, hoverinfo="skip", name=f"{name} (band top)"))
            fig.add_trace(go.Scatter(x=part["step"], y=part["lo"], mode="lines", line={"width": 0, "color": color},
                                     fill="tonexty", fillcolor=_translucent(color), showlegend=False, hoverinfo="skip",
                                     name=f"{name} (band)"))
        fig.add_trace(_line(part["step"], part["mean"], name, color, markers=_few(part),
                            customdata=part[["lo", "hi", "runs"]].to_numpy(),
                            hovertemplate=("%{y:.1%}" if rate else "%{y:.4g}") + f" ({band}: %{{customdata[0]:.3g}} to "
                            "%{customdata[1]:.3g}, %{customdata[2]} runs)"))
    if rate:
        fig.update_yaxes(range=[-0.02, 1.05], tickformat=".0%")
    fig = _layout(fig, title, y_title, legend=False)
    return full_hover_names(fig)


def full_hover_names(fig: go.Figure) -> go.Figure:
    """Hover labels name each series in full (plotly cuts names at 15 characters by default)."""
    fig.update_layout(hoverlabel={"namelength": -1})
    return fig


def fit_title(fig: go.Figure, chars: int = 48) -> go.Figure:
    """A title longer than `chars` broken onto a second line at its last ': ' or ' ' before the
    limit, with room made above the plot, so a half-width chart shows all of it."""
    text = fig.layout.title.text or ""
    if len(text) <= chars or "<br>" in text:
        return fig
    cut = text.rfind(": ", 0, chars)
    cut, skip = (cut + 1, 1) if cut > 0 else (text.rfind(" ", 0, chars), 1)
    if cut <= 0:
        return fig
    fig.update_layout(title={"text": text[:cut] + "<br>" + text[cut + skip:]},
                      margin={"t": (fig.layout.margin.t or 40) + 22})
    return fig


def mark_onsets(fig: go.Figure, onsets: dict[str, int | None]) -> go.Figure:
    """A dashed vertical line at each run's onset step (label -> step, None: no onset), labelled
    in the middle of the plot, one label under the other, so no label sits on a curve at 0% or
    100%. Each line is a layout shape named "onset", as `mark_onset` draws it."""
    xs = [float(x) for trace in fig.data if getattr(trace, "x", None) is not None
          for x in trace.x if isinstance(x, numbers.Real)]
    marked = [(label, step) for label, step in onsets.items() if step is not None]
    for i, (label, step) in enumerate(marked):
        middle = (min(xs) + max(xs)) / 2 if xs else step
        fig.add_vline(x=step, line_dash="dash", line_color=VIOLATION, line_width=1.5, name="onset")
        fig.add_annotation(x=step, y=ONSET_LABEL_Y - 0.12 * (i % 4), xref="x", yref="paper", showarrow=False,
                           text=f"{label}: onset (step {step})", xanchor="left" if step <= middle else "right",
                           xshift=4 if step <= middle else -4, font={"color": VIOLATION, "size": 11},
                           bgcolor="rgba(255,255,255,0.85)")
    return fig


def beside_seed_group(run_fig: go.Figure, curves: dict[str, pd.DataFrame], label: str, band: str = "min–max") -> go.Figure:
    """Live's rate chart with the run's seed group behind it: per rate (`curves`: "success" or
    "violation" -> `group_curves` of that rate for the one group), the group's mean as a thin dotted
    line in a band of the rate's colour, drawn first so the run's own lines stay on top. The run's
    traces keep their names ("success", "violation"); the group's are "<rate>, <label>" (label: "mean of 3 seeds")."""
    fig = go.Figure()
    for rate, part in curves.items():
        if part.empty:
            continue
        color = OUTCOME_STYLE[rate]["color"]
        name = f"{rate}, {label}"
        if (part["hi"] - part["lo"]).abs().max() > 0:
            fig.add_trace(go.Scatter(x=part["step"], y=part["hi"], mode="lines", line={"width": 0, "color": color},
                                     showlegend=False, hoverinfo="skip", name=f"{name} (band top)"))
            fig.add_trace(go.Scatter(x=part["step"], y=part["lo"], mode="lines", line={"width": 0, "color": color},
                                     fill="tonexty", fillcolor=_translucent(color, 0.14), showlegend=False,
                                     hoverinfo="skip", name=f"{name} ({band})"))
        fig.add_trace(_line(part["step"], part["mean"], name, color, width=1.2, dash="dot",
                            customdata=part[["lo", "hi", "runs"]].to_numpy(),
                            hovertemplate=f"%{{y:.1%}} ({band}: %{{customdata[0]:.1%}} to %{{customdata[1]:.1%}}, "
                                          "%{customdata[2]} runs)"))
    for trace in run_fig.data:
        fig.add_trace(trace)
    fig.update_layout(run_fig.layout)
    return full_hover_names(fig)
