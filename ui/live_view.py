"""The Live page's parts that must hold still while a run trains: the chart controls kept in the URL,
the onset slot (its height reserved from the first chart on, so a banner appearing mid-run does not
push the charts down), the counters drawn from the same snapshot of steps as the charts, and the
time a run that has not stepped yet will take.

pages/2_Live.py -> **ui.live_view** -> agentrl.
"""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from agentrl.analysis import live
from agentrl.analysis.live import clock
from agentrl.store import queries
from ui.text import plain

X_CHOICES = {"step": "Step", "elapsed_s": "Time"}  # the x axis of the per-step charts
ONSET_SLOT_CSS = ("<style>.st-key-steady-onset-slot { min-height: 5.25rem; }"
                  " .st-key-steady-onset-slot [data-testid='stAlert'] p { font-size: 0.85rem; }</style>")


def chart_controls() -> tuple[str, float]:
    """The x axis (step or elapsed time) and the smoothing of the rate curves, both in the URL so a
    link shows the same view."""
    left, right = st.columns([1, 2], vertical_alignment="bottom")
    x = left.segmented_control("x axis", list(X_CHOICES), format_func=X_CHOICES.get, default="step", key="x",
                               bind="query-params", help="Per-step charts against the step or the run's elapsed time.")
    weight = right.slider("Smoothing", 0.0, 0.99, 0.0, 0.01, key="smoothing", bind="query-params",
                          help="Exponential moving average of the curves, as in W&B (the raw curve stays faint).")
    return x or "step", float(weight or 0.0)


def onset_slot(onset, run: dict) -> None:
    """The onset banner's place: always drawn, the banner in it once the monitor found an onset."""
    st.html(ONSET_SLOT_CSS)
    with st.container(key="steady-onset-slot"):
        if onset:
            st.warning(live.onset_banner(onset, run), icon=":material/warning:")
        else:
            st.caption("Onset monitor: no hacking onset so far. A banner appears here if a hacking signal stays past "
                       "its threshold.")


def counters(steps: pd.DataFrame) -> None:
    """The run's counters at the last step the charts below show (never ahead of them)."""
    rates = live.last_rates(steps.tail(1))
    step = int(steps["step"].iloc[-1]) if not steps.empty else 0
    m = st.columns([2, 2, 2, 2, 2, 3])
    m[0].metric("success (last step)", rates["success"])
    m[1].metric("violation (last step)", rates["violation"])
    m[2].metric("vetoed rollouts", int(steps["vetoed"].fillna(0).sum()))
    m[3].metric("vetoed updates (audit)", int(steps["vetoed_updates"].fillna(0).sum()),
                help="Vetoed trajectories that received an update. Must stay 0.")
    m[4].metric("updates", f"{int(steps['updates'].fillna(0).sum()):,}")
    m[5].caption(f"Counters and charts at step {step}", help="Both drawn from the same read of the run's steps.")


def starting_eta(con, run: dict, total_steps: int) -> str:
    """What a run without a timed step will take: from earlier runs of its engine, or what it waits for."""
    per_step = queries.past_step_seconds(con, run.get("kind") or "")
    if per_step is None:
        return "ETA: estimating… (it waits for the first step to finish; no earlier run of this engine timed one)"
    try:
        delay = float(json.loads(run.get("config") or "{}").get("step_delay") or 0.0)
    except (ValueError, TypeError, AttributeError):
        delay = 0.0
    return (f"ETA about {clock(total_steps * (per_step + delay))} once it steps "
            f"(from earlier {plain(run.get('kind'))} runs; refined after its first step)")
