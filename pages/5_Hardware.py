"""Hardware: the machine now, a run's process-tree memory and CPU (psutil), GPU memory when the run
used one, and its memory budget estimate against what it measured, all in GB. The run is in the
URL; its charts refresh without a blank frame (ui.buffered)."""

import streamlit as st

# Drawn before the imports below: on the first visit after the dashboard starts they take seconds,
# and the tab would be blank until then.
st.set_page_config(page_title="Hardware · agentrl", layout="wide")
st.title("Hardware")

import ui
from agentrl import charts
from agentrl.analysis import hardware as hw
from agentrl.analysis.live import is_active
from agentrl.analysis.series import downsample
from agentrl.store import queries
from ui import buffered
from ui.pickers import run_picker

svc = ui.page("Hardware")
buffered.install()


@st.fragment(run_every=ui.LIVE_REFRESH_S * 2)
def machine() -> None:
    snapshot = hw.machine_snapshot(svc.cpu)
    m = st.columns(4)
    m[0].metric("machine memory", hw.readable(snapshot.total_bytes))
    m[1].metric("available now", hw.readable(snapshot.available_bytes))
    m[2].metric("CPU cores", snapshot.cores or "?")
    m[3].metric("CPU busy (last 5 s)", "measuring…" if snapshot.busy_percent is None else f"{snapshot.busy_percent:.0f}%",
                help="Share of all cores busy over the last few seconds, measured by the dashboard in the background.")


with ui.steady("steady-machine"):
    machine()

runs = queries.list_runs(ui.cursor())
ui.stop_without_runs(runs, "No runs yet. Each run samples its process tree about once a second.")
run_id = run_picker(runs, queries.default_live_run(ui.cursor()))
active = is_active(runs.set_index("run_id").at[run_id, "status"])


@ui.refreshing(active, ui.CHART_REFRESH_S)
def hardware_panel(run_id: str) -> None:
    con = ui.cursor()
    version = queries.run_version(con, run_id)
    samples = ui.remembered(f"hw-{run_id}", version, lambda: queries.hardware_samples(con, run_id))
    budget = queries.budget_for_run(con, run_id)
    memory = hw.run_memory(samples, budget)
    with ui.steady("steady-hardware"):
        n = st.columns(4)
        n[0].metric("peak process-tree RSS", memory.peak_rss)
        n[1].metric("budget estimate (run total)", memory.estimate,
                    help="The run's own memory from the SPEC section 11 arithmetic (everything but the OS reserve).")
        n[2].metric("peak GPU allocated", memory.peak_gpu)
        n[3].metric("samples", memory.samples)
        thin = downsample(samples)
        left, right = st.columns(2)
        buffered.chart(ui.remembered(f"hw-mem-{run_id}", version, lambda: charts.memory_usage(
            thin, hw.estimate_total(budget))), "hw-memory", left)
        buffered.chart(ui.remembered(f"hw-cpu-{run_id}", version, lambda: charts.cpu_usage(thin, hw.cores())), "hw-cpu", right)
        if budget.empty:
            st.caption("This run recorded no memory budget (tabular runs need none; language-model runs record "
                       "their estimate at start and their measured peak at the end).")
        else:
            left, right = st.columns([3, 2])
            buffered.chart(charts.budget_against_measured(budget), "hw-budget", left)
            with right:
                ui.table(hw.budget_table(budget), key=f"budget-{run_id}", name=f"{run_id}-budget")
            gpus = hw.gpu_by_rank(budget)
            if not gpus.empty:
                st.caption("GPU per training process: the budget's estimate for one GPU against the peak torch "
                           "allocated and reserved over the run (reset each step), and the device's memory per NVML.")
                ui.table(gpus, key=f"gpus-{run_id}", name=f"{run_id}-gpu-by-rank")
        status = version[0]
        if not is_active(status):
            st.caption(f"The run is {status}; these are its recorded samples.")
    if active and not is_active(version[0]):
        st.rerun(scope="app")


with ui.shown_errors("draw the hardware view"):
    hardware_panel(run_id)

st.subheader("All runs")
with ui.shown_errors("list peak memory"):
    ui.table(hw.peaks_table(queries.peak_memory_by_run(ui.cursor())), key="peaks", name="peak_memory_by_run",
             column_config={"peak_cpu_percent": st.column_config.NumberColumn(format="%.0f")})
