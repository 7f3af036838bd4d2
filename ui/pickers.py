"""The run pickers every page shares: one run (Live, Review, Hardware) or several (Compare), always
written to the URL (`?run=ID`, repeated for several), so a view can be bookmarked and shared.

pages -> **ui.pickers** -> agentrl. A run named in the URL that the store does not hold is said
on the page (never silently replaced by another run); archived runs are offered only when the
URL names them. Labels carry the run's colour, the one it has on every chart.
"""

from __future__ import annotations

import html

import pandas as pd
import streamlit as st

from agentrl import charts
from ui.text import plain
from agentrl.analysis.live import is_active

URL_KEY = "run"


def run_label(row) -> str:
    status = f" · {row['status']}" if is_active(row["status"]) else ""
    return f"{row['name']} · {row['scorer']} · {row['run_id']}{status}"


def colors_of(runs: pd.DataFrame) -> dict[str, str]:
    """Each run's fixed colour (from the colour index the dashboard assigned it)."""
    return {r.run_id: charts.run_color(r.color_index, r.run_id) for r in runs.itertuples()}


def _offered(runs: pd.DataFrame, requested: list[str]) -> pd.DataFrame:
    return runs[~runs["archived"] | runs["run_id"].isin(requested)]


def _unknown(runs: pd.DataFrame, requested: list[str]) -> list[str]:
    return [r for r in requested if r not in set(runs["run_id"])]


def run_picker(runs: pd.DataFrame, default: str | None, label: str = "Run", help: str | None = None) -> str:
    """One run: the URL's, else `default`, else the newest. The choice is written back to the URL."""
    requested = st.query_params.get_all(URL_KEY)[:1]
    missing = _unknown(runs, requested)
    if missing:
        st.warning(f"There is no run {plain(missing[0])} in this store; showing another run instead. "
                   "Pick one below, or see every run on the Runs page.")
    offered = _offered(runs, requested)
    if offered.empty:
        offered = runs
    ids = offered["run_id"].tolist()
    chosen = requested[0] if requested and requested[0] in ids else default
    labels = {r["run_id"]: run_label(r) for _, r in offered.iterrows()}
    run_id = st.selectbox(label, ids, index=ids.index(chosen) if chosen in ids else 0, format_func=labels.get,
                          help=help, key=f"picker-{st.query_params.get(URL_KEY, '')}")
    if st.query_params.get_all(URL_KEY) != [run_id]:
        st.query_params[URL_KEY] = run_id
    return run_id


def runs_picker(runs: pd.DataFrame, default: list[str], label: str = "Runs", help: str | None = None) -> list[str]:
    """Several runs: the URL's (`?run=A&run=B`), else `default`. Written back to the URL."""
    requested = st.query_params.get_all(URL_KEY)
    missing = _unknown(runs, requested)
    if missing:
        st.warning(f"There is no run {', '.join(plain(r) for r in missing)} in this store; "
                   "it is left out of the comparison.")
    offered = _offered(runs, requested)
    ids = offered["run_id"].tolist()
    known = [r for r in requested if r in ids]
    chosen = known or [r for r in default if r in ids]
    labels = {r["run_id"]: run_label(r) for _, r in offered.iterrows()}
    picked = st.multiselect(label, ids, default=chosen, format_func=labels.get, help=help,
                            key=f"pickers-{'&'.join(requested)}")
    if st.query_params.get_all(URL_KEY) != picked:
        st.query_params[URL_KEY] = picked
    return picked


def legend(labels: dict[str, str], colors: dict[str, str]) -> None:
    """One line naming each run in its colour: the legend every chart below shares."""
    spans = " &nbsp; ".join(
        f"<span style='color:{colors[run_id]}; font-size:1.3em'>&#9679;</span>&nbsp;{plain(html.escape(labels[run_id]))}"
        for run_id in labels)
    st.markdown(spans, unsafe_allow_html=True)
