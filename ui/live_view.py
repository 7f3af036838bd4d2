"""The Live page's parts that must hold still while a run trains: the chart controls kept in the URL
(with the run's seed group, drawn behind its own lines), the onset slot (its height reserved from the first chart on, so a banner appearing mid-run does not
push the charts down), the counters drawn from the same snapshot of steps as the charts, and the
time a run that has not stepped yet will take.

pages/2_Live.py -> **ui.live_view** -> agentrl.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from agentrl.analysis import live, seed_groups
from agentrl.analysis.live import clock
from agentrl.store import queries
from ui.text import plain

X_CHOICES = {"step": "Step", "elapsed_s": "Time"}  # the x axis of the per-step charts
ONSET_SLOT_CSS = ("<style>.st-key-steady-onset-slot { min-height: 5.25rem; }"
                  " .st-key-steady-onset-slot [data-testid='stAlert'] p { font-size: 0.85rem; }</style>")


@dataclass(frozen=True)
class Controls:
    x: str  # "step" or "elapsed_s"
    smoothing: float
    group: seed_groups.SeedGroup | None  # the run's seed group, when it is drawn (more than one run, asked for)
    band: str


def seed_group(con, runs: pd.DataFrame, run_id: str) -> seed_groups.SeedGroup | None:
    """The seed group of `run_id` among `runs` (the runs whose configs differ from its own only in
    `seed`), None when it has no sibling."""
    group = seed_groups.group_containing(seed_groups.seed_groups(queries.run_configs(con, runs["run_id"].tolist())), run_id)
    return group if group and group.size > 1 else None


def chart_controls(group: seed_groups.SeedGroup | None) -> Controls:
    """The x axis (step or elapsed time), the smoothing of the rate curves and, for a run with seed
    siblings, whether their mean and band are drawn behind its own lines (on by default), all in the
    URL so a link shows the same view. One row whatever the run: nothing below it moves."""
    left, middle, right = st.columns([2, 3, 3], vertical_alignment="bottom")
    x = left.segmented_control("x axis", list(X_CHOICES), format_func=X_CHOICES.get, default="step", key="x",
                               bind="query-params", help="Per-step charts against the step or the run's elapsed time.")
    weight = middle.slider("Smoothing", 0.0, 0.99, 0.0, 0.01, key="smoothing", bind="query-params",
                           help="Exponential moving average of the curves, as in W&B (the raw curve stays faint).")
    x = x or "step"
    if group is None:
        right.caption("Seed group: none (no other run differs from this one only in its seed).")
        return Controls(x, float(weight or 0.0), None, seed_groups.BANDS[0])
    toggle, band_box = right.columns([3, 2], vertical_alignment="bottom")
    shown = toggle.toggle(f"Seed group ({group.size} runs)", value=True, key="group", bind="query-params",
                          disabled=x != "step",
                          help="The mean of this run's seed group (runs whose configs differ only in seed) as a dotted "
                               "line in a band, behind the run's own success and violation lines. Drawn against steps "
                               "only: seeds reach a step at different times.")
    band = band_box.selectbox("Band", seed_groups.BANDS, key="band", bind="query-params", disabled=not shown,
                              help="min–max: the least and greatest run at each step; ±1 std: the mean ∓ one standard deviation.")
    drawn = group if shown and x == "step" else None
    return Controls(x, float(weight or 0.0), drawn, band or seed_groups.BANDS[0])


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
