"""The run pickers every page shares: one run (Live, Review, Hardware) or several (Compare), always
written to the URL (`?run=ID`, repeated for several), so a view can be bookmarked and shared.

pages -> **ui.pickers** -> agentrl. A run named in the URL that the store does not hold is said
on the page (never silently replaced by another run); archived runs are offered only when the
URL names them. Labels end with the run's status, kept current (the page redraws when a status
changes); the legend carries each run's colour, the one it has on every chart.
"""

from __future__ import annotations

import html

import pandas as pd
import streamlit as st

from agentrl import charts
from agentrl.store import queries
from ui.text import plain

URL_KEY = "run"
STATUS_CHECK_S = 2.0  # how often a picker checks whether a run's status changed


def run_label(row) -> str:
    """A run as the pickers list it, its status always last (a chip the picker keeps current)."""
    return f"{row['name']} · {row['scorer']} · {row['run_id']} · {row['status']}"


def colors_of(runs: pd.DataFrame) -> dict[str, str]:
    """Each run's fixed colour (from the colour index the dashboard assigned it)."""
    return {r.run_id: charts.run_color(r.color_index, r.run_id) for r in runs.itertuples()}


def _offered(runs: pd.DataFrame, requested: list[str]) -> pd.DataFrame:
    return runs[~runs["archived"] | runs["run_id"].isin(requested)]


def _unknown(runs: pd.DataFrame, requested: list[str]) -> list[str]:
    return [r for r in requested if r not in set(runs["run_id"])]


def _followed(key: str, requested: list[str], fallback: list[str], ids: list[str]) -> list[str]:
    """What the picker `key` shows this run. Its widget key is fixed, so a pick is never dropped
    (a key that followed the URL made a new widget, back at the URL's old run, on every other pick).
    The URL is followed only when it names something the picker did not write itself (a link, the
    back button); a URL without the parameter (the sidebar's link) shows `fallback`. The value is
    set through session state each run, as run ids: the widget's own value is its label, which
    changes with a run's status."""
    wrote_slot = f"_{key}-wrote"
    page = st.context.url
    wrote = st.session_state.get(wrote_slot)
    current = st.session_state.get(key)
    if wrote == (page, requested) and current is not None:  # the widget's own pick, already in the URL
        chosen = [current] if isinstance(current, str) else list(current)
    elif not requested:
        chosen = fallback
    else:
        chosen = requested
    return [r for r in chosen if r in ids]


def _remember(key: str, written: list[str]) -> None:
    st.session_state[f"_{key}-wrote"] = (st.context.url, written)
    if st.query_params.get_all(URL_KEY) != written:
        st.query_params[URL_KEY] = written


def _watch_statuses() -> None:
    """Redraw the page when any run's status changes (or a run appears): the labels above show it."""
    import ui

    ui.watch("run-statuses", lambda: queries.run_statuses(ui.cursor()), STATUS_CHECK_S)


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
    fallback = [default] if default in ids else ids[:1]
    key = "run-picker"
    chosen = _followed(key, [r for r in requested if r in ids], fallback, ids) or fallback
    st.session_state[key] = chosen[0]
    labels = {r["run_id"]: run_label(r) for _, r in offered.iterrows()}
    run_id = st.selectbox(label, ids, format_func=labels.get, help=help, key=key)
    _remember(key, [run_id])
    _watch_statuses()
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
    key = "runs-picker"
    known = [r for r in requested if r in ids]
    st.session_state[key] = _followed(key, known if requested else [], [r for r in default if r in ids], ids)
    labels = {r["run_id"]: run_label(r) for _, r in offered.iterrows()}
    picked = st.multiselect(label, ids, format_func=labels.get, help=help, key=key)
    _remember(key, picked)
    _watch_statuses()
    return picked


def legend(labels: dict[str, str], colors: dict[str, str]) -> None:
    """One line naming each run in its colour: the legend every chart below shares."""
    spans = " &nbsp; ".join(
        f"<span style='color:{colors[run_id]}; font-size:1.3em'>&#9679;</span>&nbsp;{plain(html.escape(labels[run_id]))}"
        for run_id in labels)
    st.markdown(spans, unsafe_allow_html=True)
