"""Live: one run as it trains, refreshed every second without reloading the page."""

import streamlit as st

import ui
from agentrl import charts
from agentrl.store import queries
from agentrl.record.rundir import TERMINAL_STATUSES, RunDir

svc = ui.page("Live")
st.title("Live run")

runs = queries.list_runs(ui.cursor())
requested = st.query_params.get("run")
if requested and requested not in set(runs["run_id"]) and not RunDir(svc.runs_dir / requested).meta_path.exists():
    st.warning(f"There is no run `{requested}` in {svc.runs_dir}; showing the newest run instead.")
    requested = None


@st.fragment(run_every=ui.LIVE_REFRESH_S)
def wait_for_run(requested: str | None) -> None:
    """Until the run (or any run) reaches the store: a run just launched appears within a second."""
    present = set(queries.list_runs(ui.cursor())["run_id"])
    if (requested and requested in present) or (not requested and present):
        st.rerun(scope="app")
    if requested:
        st.info(f"Waiting for run `{requested}` to reach the store…")
    else:
        st.info("No runs yet. Start one on the Launch page.")
        st.page_link("pages/1_Launch.py", label="Launch a run", icon=":material/rocket_launch:")


if runs.empty or (requested and requested not in set(runs["run_id"])):
    wait_for_run(requested)
    st.stop()

run_ids = runs["run_id"].tolist()
default = requested if requested in run_ids else queries.default_live_run(ui.cursor())
labels = {row["run_id"]: ui.run_label(row) for _, row in runs.iterrows()}
run_id = st.selectbox("Run", run_ids, index=run_ids.index(default) if default in run_ids else 0,
                      format_func=labels.get, help="Defaults to the newest running run.")
if run_id != requested:
    st.query_params["run"] = run_id


@st.fragment(run_every=ui.LIVE_REFRESH_S)
def live_panel(run_id: str) -> None:
    con = ui.cursor()
    run = queries.get_run(con, run_id)
    if run is None:
        st.warning("This run is not in the store yet; it appears within a second of starting.")
        return
    prog = queries.progress(con, run_id)
    status = prog["status"]
    total, done = prog["total"], prog["done"]
    header, action = st.columns([5, 1])
    eta = "" if prog["eta_s"] is None else f" · ETA {ui.format_seconds(prog['eta_s'])}"
    header.progress(done / total if total else 0.0,
                    text=f"Step {done} of {total} · {status} · elapsed {ui.format_seconds(prog['elapsed_s'])}{eta}")
    # Always drawn (disabled once the run ended) so the layout, and the charts below it, stay
    # put between refreshes instead of being rebuilt.
    ended = status in TERMINAL_STATUSES
    if action.button("Cancel run", key=f"cancel-{run_id}", disabled=ended, help="Stop after the current round."):
        with ui.shown_errors("cancel the run"):
            svc.launcher.cancel(run_id)
            st.toast("Stop requested; the run stops after its current round.")
    if run.get("error"):
        st.error(f"{status}: {run['error']}")

    steps = queries.step_metrics(con, run_id)
    totals = queries.run_totals(con, run_id)
    m = st.columns(5)
    last = steps.iloc[-1] if not steps.empty else None
    m[0].metric("success (last step)", "–" if last is None else f"{last['success_rate']:.0%}")
    m[1].metric("violation (last step)", "–" if last is None else f"{last['violation_rate']:.0%}")
    m[2].metric("vetoed rollouts", totals["vetoed_rollouts"])
    m[3].metric("vetoed updates (audit)", totals["vetoed_updates"], help="Vetoed trajectories that received an update. Must stay 0.")
    m[4].metric("updates", f"{totals['updates']:,}")

    left, right = st.columns(2)
    left.plotly_chart(charts.success_curve(steps), key="success")
    right.plotly_chart(charts.violation_curve(steps), key="violation")
    left, right = st.columns(2)
    left.plotly_chart(charts.veto_counts(steps), key="vetoes")
    right.plotly_chart(charts.reward_components(queries.reward_components_per_step(con, run_id)), key="components")
    left, right = st.columns(2)
    states = queries.sensitive_states(con, run_id) or ["known_high"]
    state = states[0] if len(states) == 1 else left.selectbox("Sensitive state", states, key="state")
    left.plotly_chart(charts.action_distribution(queries.action_distribution(con, run_id, state), state), key="dist")
    budget = queries.budget_for_run(con, run_id)
    estimate = budget.loc[budget["component"] == "total", "estimate_bytes"].dropna()
    right.plotly_chart(charts.memory_usage(queries.hardware_samples(con, run_id),
                                           float(estimate.iloc[0]) if len(estimate) else None), key="memory")
    left, right = st.columns(2)
    left.plotly_chart(charts.update_counts(steps), key="updates")
    names = queries.step_metric_names(con, run_id)
    if names:
        # TRL logs dozens of metrics; start from the ones that say whether learning is healthy.
        preferred = [n for n in ("reward_std", "entropy", "kl", "tools/call_frequency", "measured_parallelism") if n in names]
        with right:
            chosen = st.multiselect("Engine metrics", names, default=preferred or names[:3], key=f"metrics-{run_id}")
            st.plotly_chart(charts.metric_curves(queries.step_metric_series(con, run_id, chosen)), key="metrics")

    with st.expander("Last log lines", expanded=status == "failed"):
        lines = RunDir(svc.runs_dir / run_id).tail_log(15)
        st.code("\n".join(lines) or "(no output yet)", language="text")


with ui.shown_errors("draw the live run"):
    live_panel(run_id)
