"""Hardware: a run's process-tree memory and CPU (psutil), GPU memory when the run used one, and
its memory budget estimate against what it measured."""

import os

import pandas as pd
import psutil
import streamlit as st

import ui
from agentrl import charts
from agentrl.store import queries
from agentrl.engines.trl.budget import format_bytes
from agentrl.record.rundir import TERMINAL_STATUSES

svc = ui.page("Hardware")
st.title("Hardware")

memory = psutil.virtual_memory()
m = st.columns(4)
m[0].metric("machine memory", format_bytes(memory.total))
m[1].metric("available now", format_bytes(memory.available))
m[2].metric("CPU cores", os.cpu_count() or "?")
m[3].metric("CPU busy now", f"{psutil.cpu_percent(interval=None):.0f}%")

con = ui.cursor()
runs = queries.list_runs(con)
ui.stop_without_runs(runs, "No runs yet. Each run samples its process tree about once a second.")

run_ids = runs["run_id"].tolist()
labels = {row["run_id"]: ui.run_label(row) for _, row in runs.iterrows()}
requested = st.query_params.get("run")
default = requested if requested in run_ids else queries.default_live_run(con)
run_id = st.selectbox("Run", run_ids, index=run_ids.index(default) if default in run_ids else 0, format_func=labels.get)


@st.fragment(run_every=ui.LIVE_REFRESH_S * 2)
def hardware_panel(run_id: str) -> None:
    con = ui.cursor()
    hardware = queries.hardware_samples(con, run_id)
    budget = queries.budget_for_run(con, run_id)
    estimate_total = budget.loc[budget["component"] == "total", "estimate_bytes"]
    estimate_total = float(estimate_total.iloc[0]) if len(estimate_total) and estimate_total.notna().all() else None
    n = st.columns(4)
    n[0].metric("peak process-tree RSS", format_bytes(hardware["rss_bytes"].max()) if not hardware.empty else "–")
    n[1].metric("budget estimate (run total)", format_bytes(estimate_total) if estimate_total else "–",
                help="The run's own memory from the SPEC section 11 arithmetic (everything but the OS reserve).")
    gpu = hardware["gpu_allocated_bytes"].dropna() if not hardware.empty else hardware
    n[2].metric("peak GPU allocated", format_bytes(gpu.max()) if len(gpu) else "no GPU")
    n[3].metric("samples", len(hardware))
    left, right = st.columns(2)
    left.plotly_chart(charts.memory_usage(hardware, estimate_total), key="memory")
    right.plotly_chart(charts.cpu_usage(hardware, os.cpu_count()), key="cpu")
    if budget.empty:
        st.caption("This run recorded no memory budget (tabular runs need none; language-model runs record "
                   "their estimate at start and their measured peak at the end).")
    else:
        left, right = st.columns([3, 2])
        left.plotly_chart(charts.budget_against_measured(budget), key="budget")
        with right:
            shown = budget.assign(estimate=budget["estimate_bytes"].map(lambda b: "–" if pd.isna(b) else format_bytes(b)),
                                  measured=budget["measured_bytes"].map(lambda b: "–" if pd.isna(b) else format_bytes(b)))
            ui.table(shown[["component", "estimate", "measured", "estimate_bytes", "measured_bytes"]],
                     key=f"budget-{run_id}", name=f"{run_id}-budget")
    status = queries.get_run(con, run_id)["status"]
    if status in TERMINAL_STATUSES:
        st.caption(f"The run is {status}; these are its recorded samples.")


with ui.shown_errors("draw the hardware view"):
    hardware_panel(run_id)

st.subheader("All runs")
with ui.shown_errors("list peak memory"):
    peaks = queries.peak_memory_by_run(con)
    readable = lambda b: "–" if pd.isna(b) else format_bytes(b)  # noqa: E731
    peaks.insert(5, "peak RSS", peaks["peak_rss_bytes"].map(readable))
    peaks.insert(6, "estimate", peaks["estimate_total_bytes"].map(readable))
    ui.table(peaks, key="peaks", name="peak_memory_by_run",
             column_config={"peak_cpu_percent": st.column_config.NumberColumn(format="%.0f")})
