"""The Behaviours view Live and Compare share: one run's behaviour shares per step (stacked, each
behaviour in its own colour on every page) and its behaviour table with the unverified marker;
and Compare's found divergence between two runs.

pages -> **ui.behaviours** -> agentrl.analysis.behaviours, agentrl.charts. Definitions (window,
top-reward quarter, unverified, weighted divergence) live in `agentrl.analysis.behaviours`.
"""

from __future__ import annotations

import streamlit as st

import ui
from agentrl import behaviour_charts
from agentrl.analysis import behaviours
from agentrl.analysis.series import MAX_POINTS
from agentrl.store import queries

KEEP = 8  # behaviours drawn by name; the rest stack as "(other)"
UNVERIFIED_HELP = ("Unverified: a behaviour holding at least 5% of the top-reward quarter of the last K steps that "
                   "the verifier never flagged and nobody has reviewed (approve or reject one of its trajectories "
                   "on Review, grouped by behaviour).")


def step_shares(con, run_ids: list[str]):
    """The stacked chart's rows of each of `run_ids` (run_id, step, behaviour, share), in one read:
    Compare asks for every picked run's at once (20 runs on the bench store: one read 0.17 s, one
    read a run 0.5 s in all)."""
    return queries.behaviour_step_shares(con, list(run_ids), max_steps=MAX_POINTS, keep=KEEP)


def draw_run_behaviours(con, run_id: str, version, last: int, label: str | None = None, color: str | None = None,
                        key: str = "behaviours", table=None, shares=None) -> None:
    """One run's Behaviours view: the stacked shares, then the table (`table` and `shares`: read
    already, with the other picked runs', by `behaviours.behaviour_tables` and `step_shares`)."""
    if table is None:
        table = ui.remembered(f"{key}-table-{run_id}", (version, last), lambda: behaviours.behaviour_table(con, run_id, last))
    if table.empty:
        st.caption(f"{label or 'This run'} has no trajectories yet.")
        return
    unverified = set(table.loc[table["unverified"], "behaviour"])
    if shares is None:
        shares = ui.remembered(f"{key}-shares-{run_id}", version, lambda: step_shares(con, [run_id]))
    figure = ui.remembered(f"{key}-chart-{run_id}", (version, last), lambda: behaviour_charts.behaviour_shares(
        shares[["step", "behaviour", "share"]].reset_index(drop=True),
        title=f"{label}: behaviours per step" if label else "Behaviours: share of each step's trajectories",
        unverified=unverified, title_color=color))
    ui.chart(figure, f"{key}-chart-{run_id}")
    if unverified:
        st.warning(f"{len(unverified)} unverified high-reward behaviour(s): " + "; ".join(sorted(unverified)),
                   icon=":material/help:")
    ui.table(behaviours.display_table(table), key=f"{key}-table-{run_id}", name=f"{run_id}-behaviours",
             column_config={"share": st.column_config.ProgressColumn("share now", format="percent", min_value=0, max_value=1),
                            "mean_reward": st.column_config.NumberColumn("mean reward", format="%.3f"),
                            "flagged_share": st.column_config.NumberColumn("flagged", format="percent"),
                            "held_out_success": st.column_config.NumberColumn("held-out success", format="percent"),
                            "top_share": st.column_config.NumberColumn("of the top quarter", format="percent"),
                            "first_step": st.column_config.NumberColumn("first step"),
                            "unverified": st.column_config.TextColumn("", help=UNVERIFIED_HELP)})


def window_control(key: str) -> int:
    return int(st.number_input("Last K steps", 1, 10_000, behaviours.DEFAULT_LAST, key=key,
                               help="Shares, rewards and the unverified marker are over the run's last K steps."))


def draw_found_divergence(con, run_a: str, run_b: str, labels: dict[str, str], version, last: int) -> None:
    """Where two runs' next actions differ most, found from their trajectories."""
    found = ui.remembered(f"found-{run_a}-{run_b}", (version, last),
                          lambda: behaviours.run_divergence(con, run_a, run_b, last))
    if found.empty:
        st.info("The two runs visit no state in common in their last steps.")
        return
    st.markdown(f"**Found divergence**: {labels[run_a]} (A) against {labels[run_b]} (B), their last {last} steps")
    st.caption("States both runs visit (the gym state where recorded, else the calls so far), ranked by the "
               "Jensen–Shannon divergence of their next-action distributions in bits × the smaller of the two "
               "runs' visit shares. Found from the trajectories: no decision point needs declaring.")
    left, right = st.columns([2, 3])
    ui.chart(behaviour_charts.divergence_bars(found, "Where the runs' next actions differ"), "found-divergence", left)

    def dist(probs: dict) -> str:
        return ", ".join(f"{a} {p:.2f}" for a, p in sorted(probs.items(), key=lambda item: -item[1]))

    shown = found.head(20).assign(A=found["probs_a"].head(20).map(dist), B=found["probs_b"].head(20).map(dist))
    with right:
        ui.table(shown[["state", "js", "weight", "visits_a", "visits_b", "A", "B"]], key="found-table",
                 name=f"{run_a}-{run_b}-found-divergence",
                 column_config={"js": st.column_config.NumberColumn("JS (bits)", format="%.3f"),
                                "weight": st.column_config.NumberColumn("weight", format="%.2f")})
