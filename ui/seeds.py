"""Compare's header: its chart controls (smoothing, seed groups), the legend that stays on screen
while the page scrolls, and each run's (or seed group's) progress and onset in one line, all of
it short enough that both rate charts show above the fold at 1440x900.

pages/3_Compare.py -> **ui.seeds** -> agentrl.analysis.seed_groups. The controls are in the URL
(`smoothing`, `seeds`, `group_by`, `band`), so a grouped view can be bookmarked and shared.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from agentrl.analysis import seed_groups
from agentrl.analysis.live import is_active
from ui.text import plain

# Less room above the title; the legend sticks at the top of the window while the page scrolls (its
# wrapper is a direct child of the page's block, so it sticks for the whole page); the run picker scrolls
# inside itself instead of pushing the charts down when many runs are picked.
COMPARE_CSS = """<style>
[data-testid="stMainBlockContainer"] { padding: 3rem 3rem 4rem 3rem; }
[data-testid="stLayoutWrapper"]:has(> .st-key-compare-legend) { position: sticky; top: 0; z-index: 990;
  background: #ffffff; padding: 0.6rem 0 0.2rem 0; }
@media (prefers-color-scheme: dark) { [data-testid="stLayoutWrapper"]:has(> .st-key-compare-legend) { background: #0e1117; } }
[data-testid="stMultiSelectTagsContainer"] { max-height: 68px; overflow-y: auto; }
</style>"""


def subtitle(states: list[str]) -> str:
    """What the page shows, in the words of the picked runs' own task: its decision points by name
    (those the runs recorded), not the refund task's approval on every task."""
    where = (f"at the task's decision point{'s' if len(states) > 1 else ''} {', '.join(f'`{plain(s)}`' for s in states)}"
             if states else "where the runs' next actions differ (found from their trajectories)")
    return ("Both scorers can reach full success; the difference is in violations, vetoes and the action "
            f"distribution {where}.")


@dataclass(frozen=True)
class Controls:
    smoothing: float
    grouped: bool  # runs that differ only in `key` draw as one line with a band
    key: str
    band: str


def controls(configs: pd.DataFrame) -> Controls:
    """One row: smoothing; and, when several runs are picked, whether to group them by seed (on by
    default when some of them differ only in seed), the config key to group by, and the band."""
    row = st.container(horizontal=True, vertical_alignment="bottom", key="compare-controls")
    smoothing = row.slider("Smoothing", 0.0, 0.99, 0.0, 0.01, key="smoothing", bind="query-params", width=220,
                           help="Exponential moving average of the rate and metric curves, as in W&B.")
    if len(configs) < 2:
        return Controls(smoothing, False, seed_groups.SEED, seed_groups.BANDS[0])
    keys = seed_groups.group_keys(configs)
    by_seed = seed_groups.has_groups(seed_groups.seed_groups(configs))
    grouped = row.toggle("Group seeds", value=by_seed, key="seeds", bind="query-params",
                         help="Runs whose configs differ only in the key on the right (seed, unless you pick another) "
                              "draw as one line, their mean, in a band; the legend names each group.")
    key = row.selectbox("Group by", keys, key="group_by", bind="query-params", width=170, disabled=not grouped,
                        help="The config key that may differ within a group; every other setting must be equal.")
    band = row.selectbox("Band", seed_groups.BANDS, key="band", bind="query-params", width=130, disabled=not grouped,
                         help="min–max: the least and greatest run at each step; ±1 std: the mean ∓ one standard deviation.")
    return Controls(smoothing, grouped, key or seed_groups.SEED, band or seed_groups.BANDS[0])


def sticky_legend(labels: dict[str, str], colors: dict[str, str]) -> None:
    """One line naming each run (or seed group) in its colour, the legend of every chart below;
    it stays at the top of the window while the page scrolls."""
    spans = " &nbsp; ".join(
        f"<span style='color:{colors[key]}; font-size:1.3em'>&#9679;</span>&nbsp;{plain(html.escape(labels[key]))}"
        for key in labels)
    st.container(key="compare-legend").markdown(spans, unsafe_allow_html=True)


def _onset_text(onsets: list) -> str:
    found = [o for o in onsets if o]
    if not found:
        return "no hacking onset"
    first = min(found, key=lambda o: o.step)
    if len(onsets) > 1:
        return f":red[hacking onset in {len(found)} of {len(onsets)}, first at step {first.step}] ({plain(first.signal)})"
    return f":red[hacking onset at step {first.step}] ({plain(first.signal)} = {first.value:.3g})"


def progress_row(groups: list[seed_groups.SeedGroup], labels: dict[str, str], progress: dict[str, dict],
                 onsets: dict) -> None:
    """Each run's (or seed group's: its slowest run's) step of the total, status and hacking
    onset, side by side in one line of bars."""
    cols = st.columns(len(groups))
    for col, group in zip(cols, groups):
        members = [progress[r] for r in group.run_ids]
        done, total = min(p["done"] for p in members), max(p["total"] for p in members)
        statuses = list(dict.fromkeys(p["status"] for p in members))
        status = " / ".join(str(s) for s in statuses) if len(statuses) > 1 else str(statuses[0])
        running = sum(is_active(p["status"]) for p in members)
        if len(members) > 1 and running:
            status = f"{running} of {len(members)} running"
        col.progress(done / total if total else 0.0,
                     text=f"{plain(labels[group.group_id])}: step {done} of {total} · {status} · "
                          + _onset_text([onsets[r] for r in group.run_ids]))
