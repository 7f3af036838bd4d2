"""Compare: any set of runs overlaid; what the guarded scorer changed, and how success was reached."""

import streamlit as st

import ui
from agentrl import charts
from agentrl.store import queries
from agentrl.analysis.throughput import throughput_curve

svc = ui.page("Compare")
st.title("Compare runs")
st.caption("Both scorers can reach full success. The difference is in violations, vetoes and the action "
           "distribution at the sensitive state, where the approval decision lives.")

con = ui.cursor()
runs = queries.list_runs(con)
ui.stop_without_runs(runs, "No runs yet. Start the outcome-vs-guarded pair on the Launch page.")

labels_all = {row["run_id"]: ui.run_label(row) for _, row in runs.iterrows()}
default = queries.newest_pair(con) or runs["run_id"].head(2).tolist()
picked = st.multiselect("Runs", list(labels_all), default=default, format_func=labels_all.get,
                        help="Defaults to the newest outcome-only / guarded pair.")
if not picked:
    st.info("Pick at least one run.")
    st.stop()
labels = {run_id: labels_all[run_id].split(" · ")[0] + f" ({labels_all[run_id].split(' · ')[1]})" for run_id in picked}
if len(set(labels.values())) < len(labels):  # same name and scorer twice: fall back to the ids
    labels = {run_id: run_id for run_id in picked}

with ui.shown_errors("draw the rates"):
    steps = queries.steps_for_runs(con, picked)
    left, right = st.columns(2)
    left.plotly_chart(charts.rate_overlay(steps, "success_rate", "Success rate", labels), key="success")
    right.plotly_chart(charts.rate_overlay(steps, "violation_rate", "Violation rate", labels), key="violation")

st.subheader("Action distribution at the sensitive states")
with ui.shown_errors("draw the action distributions"):
    states = queries.sensitive_states_for_runs(con, picked)
    if not states:
        st.info("These runs recorded no action distributions.")
    else:
        c1, c2, c3 = st.columns([1, 1, 2])
        state = c1.selectbox("State", states, help="A decision point of the runs' task (the refund task's is known_high, where the approval decision lives).")
        a_run = c2.selectbox("A", picked, index=0, format_func=labels.get, help="The difference is B − A.")
        b_options = [r for r in picked if r != a_run] or picked
        b_run = c2.selectbox("B", b_options, index=0, format_func=labels.get)
        history = queries.action_probs_for_runs(con, picked, state)
        last_step = int(history["step"].max()) if not history.empty else 0
        step = c3.slider("Step", 0, max(last_step, 1), last_step, help="0 is the starting (cloned) policy.")
        at_step = history[history["step"] == step]
        left, right = st.columns(2)
        left.plotly_chart(charts.action_bars_by_run(at_step, state, step, labels), key="bars")
        a = at_step[at_step["run_id"] == a_run].set_index("action")["prob"]
        b = at_step[at_step["run_id"] == b_run].set_index("action")["prob"]
        diff = (b - a).dropna().rename("diff").reset_index()
        right.plotly_chart(charts.action_difference(diff, state, step, "B − A"), key="diff")
        cols = st.columns(min(len(picked), 3))
        for i, run_id in enumerate(picked):
            part = history[history["run_id"] == run_id]
            cols[i % len(cols)].plotly_chart(charts.action_drift_heatmap(part, state, labels[run_id]), key=f"drift-{i}")

st.subheader("Vetoes, clipping and reward components")
with ui.shown_errors("draw the counters"):
    left, right = st.columns(2)
    left.plotly_chart(charts.count_overlay(steps, "vetoed", "Vetoed rollouts per step", labels), key="vetoed")
    right.plotly_chart(charts.count_overlay(steps, "vetoed_updates", "Vetoed updates per step (audit, must be 0)", labels),
                       key="vetoed-updates")
    left, right = st.columns(2)
    left.plotly_chart(charts.clipped_by_epoch_bars(queries.clipped_by_epoch_for_runs(con, picked), labels), key="clipped")
    right.plotly_chart(charts.components_overlay(queries.reward_components_for_runs(con, picked), labels), key="components")

st.subheader("Held-out evaluation (greedy, latest)")
with ui.shown_errors("show the held-out evaluation"):
    held_out = queries.held_out_for_runs(con, picked)
    if held_out.empty:
        st.info("No held-out evaluation recorded yet.")
    else:
        held_out = held_out.assign(run=held_out["run_id"].map(labels), actions=held_out["actions"].map(", ".join))
        wide = held_out.pivot_table(index="task_id", columns="run", values=["actions", "success", "violation"],
                                    aggfunc="first")
        wide.columns = [f"{run}: {what}" for what, run in wide.columns]
        order = [labels[r] for r in picked]
        wide = wide[sorted(wide.columns, key=lambda c: (order.index(c.rsplit(": ", 1)[0]), c.rsplit(": ", 1)[1]))]
        ui.table(wide.reset_index(), key="held-out", name="held_out")

st.subheader("Imitation ladder")
with ui.shown_errors("show the imitation ladder"):
    for run_id in picked:
        ladder = queries.imitation_policy(con, run_id)
        if ladder.empty:
            continue
        with st.expander(f"{labels[run_id]}: the cloned policy" + (" and its DAgger round" if (ladder["stage"] == "dagger").any() else "")):
            evals = queries.ladder_evals(con, run_id)
            for stage in ladder["stage"].unique():
                part = ladder[ladder["stage"] == stage].pivot_table(index="state", columns="action", values="prob")
                stage_evals = evals[evals["stage"] == stage]
                st.markdown(f"**{stage}** · held-out {int(stage_evals['success'].sum())} of {len(stage_evals)} succeed")
                ui.table(part.round(3).reset_index(), key=f"ladder-{run_id}-{stage}", name=f"{run_id}-{stage}-policy")
            labels_df = queries.imitation_labels(con, run_id)
            if not labels_df.empty:
                st.markdown("**New DAgger labels** (state → expert action)")
                ui.table(labels_df, key=f"labels-{run_id}", name=f"{run_id}-dagger-labels")

st.subheader("Throughput model")
with ui.shown_errors("draw the throughput model"):
    totals = queries.totals_for_runs(con, picked)
    curves = {r.run_id: throughput_curve(int(r.transitions), int(r.updates)) for r in totals.itertuples() if r.transitions}
    left, right = st.columns([3, 2])
    left.plotly_chart(charts.throughput_model(curves, labels), key="throughput")
    with right:
        st.caption("SPEC section 9: environment step 0.300 s, sampling 0.030 s, update 0.002 s per event; "
                   "a model from each run's own totals, not a measurement.")
        ui.table(totals.assign(run=totals["run_id"].map(labels)), key="totals", name="run_totals")
