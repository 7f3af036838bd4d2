"""Live: one run as it trains, refreshed every second without reloading the page, and not at all
once it has finished. Its charts refresh without a blank frame (ui.buffered), the counters above
them come from the same read of the run's steps, and the onset banner's place is kept from the
start (ui.live_view). A run with seed siblings draws their mean in a band behind its own lines; the
step charts zoom and hover together (ui.synced_charts)."""

import streamlit as st

# Drawn before the imports below: on the first visit after the dashboard starts they take seconds,
# and the tab would be blank until then.
st.set_page_config(page_title="Live · agentrl", layout="wide")
st.title("Live run")

import ui
from agentrl import charts, group_charts
from agentrl.analysis import live, seed_groups
from agentrl.analysis.hardware import estimate_total
from agentrl.analysis.series import MAX_POINTS, downsample, smooth
from agentrl.monitor.kept import kept_onset
from agentrl.record.rundir import RunDir
from agentrl.store import queries
from ui import buffered, live_view, synced_charts
from ui.behaviours import draw_run_behaviours, window_control
from ui.pickers import run_picker
from ui.scans import draw_hit_rates

MORE_PANELS = ["Behaviours", "Vetoes", "Policy", "Updates", "Memory", "Engine metrics", "Scanners"]
STEP_PANELS = ["rates", "components", "vetoes", "updates", "metrics"]  # charts against the step (or time): zoomed together

svc = ui.page("Live")
buffered.install()
synced_charts.install(STEP_PANELS)

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
controls = live_view.chart_controls(live_view.seed_group(ui.cursor(), runs, run_id))


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
            st.caption(f"{live_view.starting_eta(con, run, prog['total'])}. Charts appear with the first step.")
    if started_active and not live.is_active(status):
        st.rerun(scope="app")  # the run just ended: redraw once, without the refresh


@ui.refreshing(started_active, ui.CHART_REFRESH_S)
def live_charts(run_id: str, controls: live_view.Controls) -> None:
    """The charts: redrawn only when the run reported something new, at most every few seconds
    (a browser on a busy machine could otherwise never finish drawing one set before the next)."""
    con = ui.cursor()
    run = queries.get_run(con, run_id)
    if run is None:
        return
    version = queries.run_version(con, run_id)
    with ui.steady("steady-live-charts"):
        if version[1] is not None:  # a step has been reported
            draw_charts(con, run, version, controls)
        with st.expander("Last log lines", expanded=run["status"] == "failed" or version[1] is None):
            st.code("\n".join(RunDir(svc.runs_dir / run_id).tail_log(15)) or "(no output yet)", language="text")


def draw_charts(con, run: dict, version, controls: live_view.Controls) -> None:
    run_id, x, weight, group = run["run_id"], controls.x, controls.smoothing, controls.group
    # One read of the steps per version: the counters and every chart below are drawn from it.
    steps = ui.remembered(f"steps-{run_id}", version, lambda: queries.step_metrics(con, run_id))
    last = int(steps["step"].max()) if not steps.empty else 0
    states = ui.remembered(f"states-{run_id}", version, lambda: queries.sensitive_states(con, run_id))
    shown = live.panels(run["kind"], steps, states)
    thin = smooth(smooth(downsample(steps), "success_rate", weight), "violation_rate", weight)
    # The onset monitor's verdict from the run's own rows: a recorded onset event, else the signals.
    onset = ui.remembered(f"onset-{run_id}", version, lambda: kept_onset(con, run_id))
    at = onset.step if onset else None
    at_x = None if x == "step" or at is None else steps.loc[steps["step"] == at, "elapsed_s"].max()

    def components():
        found = queries.reward_components_per_step(con, run_id)
        found = found[found["step"] <= last].merge(steps[["step", "elapsed_s"]], on="step", how="left")
        return downsample(found, by="component")

    mark = lambda fig: charts.mark_onset(fig, at, at_x=at_x)
    # The seed group's steps: new when any of its runs reported something.
    group_version = tuple(queries.run_version(con, r) for r in group.run_ids) if group else None

    def rates():
        figure = charts.rates_curve(thin, x=x)
        if group:
            members = ui.remembered(f"group-steps-{run_id}", group_version, lambda: downsample(
                queries.steps_for_runs(con, list(group.run_ids), max_points=MAX_POINTS), by="run_id"))
            curves = {rate: seed_groups.group_curves(smooth(members, f"{rate}_rate", weight, by="run_id"), [group],
                                                     f"{rate}_rate", controls.band) for rate in ("success", "violation")}
            figure = group_charts.beside_seed_group(figure, curves, f"mean of {group.size} seeds", controls.band)
        return mark(figure)

    figures = ui.remembered(f"figures-{run_id}", (version, at, x, weight, group_version, controls.band), build=lambda: {
        "rates": rates(),
        "vetoes": mark(charts.veto_counts(thin, x=x)) if shown.vetoes else None,
        "components": mark(charts.reward_components(components(), x=x)),
        "updates": mark(charts.update_counts(thin, clipped=shown.clipped, x=x)) if shown.updates else None,
    })
    # Built before anything is drawn: the counters and the charts reach the browser together.
    live_view.onset_slot(onset, run)
    live_view.counters(steps)
    left, right = st.columns(2)
    buffered.chart(figures["rates"], "rates", left)
    buffered.chart(figures["components"], "components", right)

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
            buffered.chart(figures["vetoes"], "vetoes")
    if "Policy" in more:
        if not shown.action_distribution:
            st.caption("This run records no action distribution at sensitive states.")
        else:
            left, right = st.columns(2)
            state = states[0] if len(states) == 1 else right.selectbox("Sensitive state", states, key="state")
            buffered.chart(ui.remembered(f"dist-{run_id}-{state}", version, build=lambda: (
                charts.action_distribution(queries.action_distribution(con, run_id, state), state))), "dist", left)
    if "Updates" in more:
        if figures["updates"] is None:
            st.caption("This engine applies no updates (it scores attempts only).")
        else:
            buffered.chart(figures["updates"], "updates")
    if "Memory" in more:
        budget = queries.budget_for_run(con, run_id)
        buffered.chart(ui.remembered(f"memory-{run_id}", version, build=lambda: charts.memory_usage(
            queries.hardware_samples(con, run_id), estimate_total(budget))), "memory")
    if "Engine metrics" in more:
        names = queries.step_metric_names(con, run_id)
        if not names:
            st.caption("This engine logs no metrics of its own.")
        else:
            c1, c2 = st.columns([4, 1])
            chosen = c1.multiselect("Engine metrics", names, default=live.preferred_metrics(names), key=f"metrics-{run_id}")
            log_y = c2.toggle("Log scale", key="log-y")
            options = (version, tuple(chosen), weight, log_y, x)

            def metric_series():
                found = queries.step_metric_series(con, run_id, chosen)
                found = found[found["step"] <= last].merge(steps[["step", "elapsed_s"]], on="step", how="left")
                return smooth(downsample(found, by="name"), "value", weight, by="name")

            buffered.chart(ui.remembered(f"metrics-{run_id}", (options, at), lambda: mark(charts.metric_curves(
                metric_series(), log_y=log_y, x=x))), "metrics")


with ui.shown_errors("draw the live run"):
    live_header(run_id)
    live_charts(run_id, controls)
