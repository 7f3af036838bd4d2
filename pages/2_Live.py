"""Live: one run as it trains, refreshed every second without reloading the page, and not at all
once it has finished."""

import streamlit as st

import ui
from agentrl import charts
from agentrl.analysis import live
from agentrl.analysis.hardware import estimate_total
from agentrl.analysis.series import downsample, smooth
from agentrl.monitor import store_onset
from agentrl.record.rundir import RunDir
from agentrl.store import queries
from ui.behaviours import draw_run_behaviours, window_control
from ui.pickers import run_picker
from ui.scans import draw_hit_rates

MORE_PANELS = ["Behaviours", "Vetoes", "Policy", "Updates", "Memory", "Engine metrics", "Scanners"]

svc = ui.page("Live")
st.title("Live run")

runs = queries.list_runs(ui.cursor())
requested = st.query_params.get("run")
# A run just launched has its folder before it reaches the store: wait for it rather than say it is unknown.
pending = requested if requested and requested not in set(runs["run_id"]) and RunDir(svc.runs_dir / requested).meta_path.exists() else None
if runs.empty or pending:

    @st.fragment(run_every=ui.LIVE_REFRESH_S)
    def wait_for_run(requested: str | None) -> None:
        """Until the run (or any run) reaches the store: a run just launched appears within a second."""
        present = set(queries.list_runs(ui.cursor())["run_id"])
        if (requested and requested in present) or (not requested and present):
            st.rerun(scope="app")
        if requested:
            st.info(f"Waiting for run {ui.plain(requested)} to reach the store…")
        else:
            st.info("No runs yet. Start one on the Launch page.")
            st.page_link("pages/1_Launch.py", label="Launch a run", icon=":material/rocket_launch:")

    wait_for_run(pending)
    st.stop()

run_id = run_picker(runs, queries.default_live_run(ui.cursor()), help="Defaults to the newest running run.")
started_active = live.is_active(runs.set_index("run_id").at[run_id, "status"])


@ui.refreshing(started_active)
def live_header(run_id: str) -> None:
    """Progress, phase and counters: every second while the run is active."""
    con = ui.cursor()
    run = queries.get_run(con, run_id)
    if run is None:
        st.warning("This run is not in the store yet; it appears within a second of starting.")
        return
    prog = queries.progress(con, run_id)
    status = prog["status"]
    log_tail = RunDir(svc.runs_dir / run_id).tail_log(1)
    run_phase = live.phase(run, prog, log_tail[-1] if log_tail else None)
    with ui.steady("steady-live-header"):
        header, action = st.columns([5, 1])
        header.progress(prog["done"] / prog["total"] if prog["total"] else 0.0, text=live.progress_text(prog, run_phase))
        # Always drawn (disabled once the run ended) so the layout stays put between refreshes.
        may_act = ui.may_act()  # the browser holds the dashboard's key (ui.guard)
        if action.button("Cancel run", key=f"cancel-{run_id}", disabled=not (live.is_active(status) and may_act),
                         help="Stop after the current step." if may_act else ui.VIEW_ONLY) and ui.allowed("cancel the run"):
            with ui.shown_errors("cancel the run"):
                svc.launcher.cancel(run_id)
                st.toast("Stop requested; the run stops after its current step.")
        if run.get("error"):
            st.error(f"{status}: {ui.plain(run['error'])}")
        if run_phase.name in ("queued", "starting"):
            st.info(ui.plain(run_phase.text), icon=":material/hourglass_top:")  # it quotes the run's last output
            st.caption("Charts appear with the first step.")
        else:
            totals = queries.run_totals(con, run_id)
            rates = live.last_rates(queries.step_metrics(con, run_id).tail(1))
            m = st.columns(5)
            m[0].metric("success (last step)", rates["success"])
            m[1].metric("violation (last step)", rates["violation"])
            m[2].metric("vetoed rollouts", totals["vetoed_rollouts"])
            m[3].metric("vetoed updates (audit)", totals["vetoed_updates"], help="Vetoed trajectories that received an update. Must stay 0.")
            m[4].metric("updates", f"{totals['updates']:,}")
    if started_active and not live.is_active(status):
        st.rerun(scope="app")  # the run just ended: redraw once, without the refresh


@ui.refreshing(started_active, ui.CHART_REFRESH_S)
def live_charts(run_id: str) -> None:
    """The charts: redrawn only when the run reported something new, at most every few seconds
    (a browser on a busy machine could otherwise never finish drawing one set before the next)."""
    con = ui.cursor()
    run = queries.get_run(con, run_id)
    if run is None:
        return
    version = queries.run_version(con, run_id)
    with ui.steady("steady-live-charts"):
        if version[1] is not None:  # a step has been reported
            draw_charts(con, run, version)
        with st.expander("Last log lines", expanded=run["status"] == "failed" or version[1] is None):
            st.code("\n".join(RunDir(svc.runs_dir / run_id).tail_log(15)) or "(no output yet)", language="text")


def draw_charts(con, run: dict, version) -> None:
    run_id = run["run_id"]
    steps = ui.remembered(f"steps-{run_id}", version, lambda: queries.step_metrics(con, run_id))
    states = ui.remembered(f"states-{run_id}", version, lambda: queries.sensitive_states(con, run_id))
    shown = live.panels(run["kind"], steps, states)
    thin = downsample(steps)
    # The onset monitor's verdict from the run's own rows: a recorded onset event, else the signals.
    onset = ui.remembered(f"onset-{run_id}", version, lambda: store_onset(con, run_id))
    at = onset.step if onset else None
    if onset:
        st.warning(live.onset_banner(onset, run), icon=":material/warning:")
    figures = ui.remembered(f"figures-{run_id}", (version, at), build=lambda: {
        "rates": charts.mark_onset(charts.rates_curve(thin), at),
        "vetoes": charts.mark_onset(charts.veto_counts(thin), at) if shown.vetoes else None,
        "components": charts.mark_onset(charts.reward_components(
            downsample(queries.reward_components_per_step(con, run_id), by="component")), at),
        "updates": charts.mark_onset(charts.update_counts(thin, clipped=shown.clipped), at) if shown.updates else None,
    })
    left, right = st.columns(2)
    ui.chart(figures["rates"], "rates", left)
    ui.chart(figures["components"], "components", right)

    # More panels on demand: each one drawn only when asked for (the page stays quick to draw).
    more = st.pills("More panels", MORE_PANELS, selection_mode="multi", key="panels", bind="query-params")
    if "Behaviours" in more:
        draw_run_behaviours(con, run_id, version, window_control("behaviours-last"))
    if "Scanners" in more:
        draw_hit_rates(con, [run_id], {run_id: run["name"]}, None, "scanner-rates")
    if "Vetoes" in more:
        if figures["vetoes"] is None:
            st.caption("This engine has no guarded scorer: nothing is vetoed.")
        else:
            ui.chart(figures["vetoes"], "vetoes")
    if "Policy" in more:
        if not shown.action_distribution:
            st.caption("This run records no action distribution at sensitive states.")
        else:
            left, right = st.columns(2)
            state = states[0] if len(states) == 1 else right.selectbox("Sensitive state", states, key="state")
            ui.chart(ui.remembered(f"dist-{run_id}-{state}", version, build=lambda: (
                charts.action_distribution(queries.action_distribution(con, run_id, state), state))), "dist", left)
    if "Updates" in more:
        if figures["updates"] is None:
            st.caption("This engine applies no updates (it scores attempts only).")
        else:
            ui.chart(figures["updates"], "updates")
    if "Memory" in more:
        budget = queries.budget_for_run(con, run_id)
        ui.chart(ui.remembered(f"memory-{run_id}", version, build=lambda: charts.memory_usage(
            queries.hardware_samples(con, run_id), estimate_total(budget))), "memory")
    if "Engine metrics" in more:
        names = queries.step_metric_names(con, run_id)
        if not names:
            st.caption("This engine logs no metrics of its own.")
        else:
            c1, c2, c3 = st.columns([3, 1, 1])
            chosen = c1.multiselect("Engine metrics", names, default=live.preferred_metrics(names), key=f"metrics-{run_id}")
            weight = c2.slider("Smoothing", 0.0, 0.99, 0.0, 0.01, key="smoothing", help="Exponential moving average, as in W&B.")
            log_y = c3.toggle("Log scale", key="log-y")
            options = (version, tuple(chosen), weight, log_y)
            ui.chart(ui.remembered(f"metrics-{run_id}", (options, at), lambda: charts.mark_onset(charts.metric_curves(
                smooth(downsample(queries.step_metric_series(con, run_id, chosen), by="name"), "value", weight, by="name"),
                log_y=log_y), at)), "metrics")


with ui.shown_errors("draw the live run"):
    live_header(run_id)
    live_charts(run_id)
