"""agentrl dashboard: the runs overview. Pages in pages/ are discovered automatically."""

import streamlit as st

import ui
from agentrl.store import queries

svc = ui.page("Runs")
st.title("agentrl — runs")
st.caption(
    "Train tool-using agents with group-relative RL, watch them live, compare an outcome-only "
    "scorer with a guarded one. Every record lives in DuckDB."
)

with ui.shown_errors("list the runs"):
    runs = queries.list_runs(ui.cursor())
    if runs.empty:
        st.info("No runs yet. Start one on the Launch page: the tabular presets train in seconds.")
        st.page_link("pages/1_Launch.py", label="Launch a run", icon=":material/rocket_launch:")
    else:
        counts = runs["status"].value_counts()
        cols = st.columns(5)
        for col, status in zip(cols, ("running", "queued", "succeeded", "failed", "cancelled")):
            col.metric(status, int(counts.get(status, 0)))
        st.dataframe(
            runs[["run_id", "name", "kind", "scorer", "status", "steps_done", "total_steps", "created_at", "ended_at", "error"]],
            hide_index=True,
            column_config={
                "steps_done": st.column_config.NumberColumn("steps"),
                "total_steps": st.column_config.NumberColumn("of"),
                "created_at": st.column_config.DatetimeColumn("created (UTC)", format="YYYY-MM-DD HH:mm:ss"),
                "ended_at": st.column_config.DatetimeColumn("ended (UTC)", format="YYYY-MM-DD HH:mm:ss"),
            },
        )
        st.page_link("pages/2_Live.py", label="Watch the newest run live", icon=":material/monitoring:")

with ui.shown_errors("read ingest errors"):
    errors = queries.ingest_errors(ui.cursor())
    if not errors.empty:
        with st.expander(f"{len(errors)} chunk file(s) could not be ingested"):
            st.dataframe(errors, hide_index=True)
