"""Review: the highest-reward trajectories before promotion, exploit fixtures, and the promotion
gate with its audit trail."""

import math

import pandas as pd
import streamlit as st

import ui
from agentrl.review import gate
from agentrl.store import queries
from agentrl.review import reviews as review
from agentrl.record.rundir import TERMINAL_STATUSES

svc = ui.page("Review")
st.title("Review before promotion")
reviewer = ui.reviewer_name()
ui.show_flash()

con = ui.cursor()
runs = queries.list_runs(con)
ui.stop_without_runs(runs)

run_ids = runs["run_id"].tolist()
labels = {row["run_id"]: ui.run_label(row) for _, row in runs.iterrows()}
requested = st.query_params.get("run")
run_id = st.selectbox("Run", run_ids, index=run_ids.index(requested) if requested in run_ids else 0,
                      format_func=labels.get)
if run_id != requested:
    st.query_params["run"] = run_id
run = queries.get_run(con, run_id)
if run["status"] not in TERMINAL_STATUSES:
    st.info(f"This run is {run['status']}; its trajectories so far can be reviewed, and it can be promoted once it finishes.")

explore, gate_tab, fixtures_tab = st.tabs(["Trajectories", "Promotion gate", "Exploit fixtures"])

YES_NO = {"any": None, "yes": True, "no": False}
FLAGS = {"success": "success", "violation": "violation", "duplicate": "duplicate_effect", "eligible": "eligible",
         "vetoed": "vetoed"}

with explore, ui.shown_errors("explore the trajectories"):
    first, last = queries.step_range(con, run_id)
    if last == 0:
        st.info("No trajectories recorded yet.")
    else:
        f1, f2, f3 = st.columns([2, 2, 1])
        last_n = f3.number_input("Last N steps", min_value=1, max_value=max(last, 1), value=min(3, last),
                                 help="The default view: the top trajectories by reward over the last N steps.")
        lo, hi = f1.slider("Steps", first, max(last, first + 1), (max(first, last - int(last_n) + 1), last),
                           key=f"steps-{run_id}-{last_n}")
        tasks = f2.multiselect("Tasks", queries.trajectory_task_ids(con, run_id), placeholder="all tasks")
        flag_cols = st.columns(len(FLAGS) + 3)
        flags = {}
        for col, (label, column) in zip(flag_cols, FLAGS.items()):
            choice = col.selectbox(label, list(YES_NO), key=f"flag-{label}")
            if YES_NO[choice] is not None:
                flags[column] = YES_NO[choice]
        verdict = flag_cols[-3].selectbox("verdict", ["any", "unreviewed", "approve", "reject"])
        order = flag_cols[-2].selectbox("sort by reward", ["highest first", "lowest first"])
        top_k = flag_cols[-1].number_input("top k", min_value=1, max_value=10_000, value=10)
        found = queries.find_trajectories(
            con, run_id, step_min=lo, step_max=hi, task_ids=tasks or None, flags=flags,
            verdict=None if verdict == "any" else verdict, descending=order == "highest first", limit=int(top_k),
        )
        if found.empty:
            st.info("No trajectory matches these filters.")
        else:
            shown = found.assign(actions=found["actions"].map(" → ".join))
            event = ui.table(
                shown.drop(columns=["run_id"]), key=f"found-{run_id}", name=f"{run_id}-trajectories",
                on_select="rerun", selection_mode="single-row",
                column_config={"reward": st.column_config.NumberColumn(format="%.3f")},
            )
            keys = [f"{int(r.step)}/{int(r.traj_idx)}" for r in found.itertuples()]
            picked_rows = event.selection.rows if event is not None and hasattr(event, "selection") else []
            if picked_rows:
                st.session_state["open-trajectory"] = keys[picked_rows[0]]
            if st.session_state.get("open-trajectory") not in keys:
                st.session_state["open-trajectory"] = keys[0]
            descriptions = {k: f"step {r.step} · #{r.traj_idx} · {r.task_id} · reward {r.reward:.3f} · {r.verdict}"
                            for k, r in zip(keys, found.itertuples())}
            opened = st.selectbox("Open trajectory", keys, format_func=descriptions.get, key="open-trajectory",
                                  help="Or select a row in the table.")
            step, traj_idx = (int(x) for x in opened.split("/"))
            record = queries.trajectory(con, run_id, step, traj_idx)

            amount = f" (amount {record['amount']})" if record.get("amount") is not None else ""  # refund rows carry one
            st.markdown(f"#### Step {step}, trajectory {traj_idx}: `{record['task_id']}`{amount}")
            flag_line = " ".join(
                f":{'red' if (name in ('violation', 'duplicate_effect', 'vetoed') and record[name]) or (name in ('success', 'eligible') and not record[name]) else 'green'}-badge[{name}: {'yes' if record[name] else 'no'}]"
                for name in ("success", "violation", "duplicate_effect", "eligible", "vetoed", "updated")
                if record.get(name) is not None
            )
            st.markdown(flag_line)
            left, right = st.columns([3, 2])
            with left:
                states, actions = list(record["states"] or []), list(record["actions"] or [])
                logps = list(record["behavior_logps"] or [])
                advantages = list(record["advantages"] or [])
                transcript = pd.DataFrame({
                    "turn": range(1, len(actions) + 1),
                    "state": states[: len(actions)] + [None] * (len(actions) - len(states)),
                    "action": actions,
                    "behaviour prob": [math.exp(v) if v is not None else None for v in logps] + [None] * (len(actions) - len(logps)),
                    "advantage": (advantages + [None] * (len(actions) - len(advantages)))[: len(actions)],  # an LM row with no call keeps one
                })
                st.markdown("**Transcript**")
                ui.table(transcript, key=f"transcript-{opened}", name=f"{run_id}-{step}-{traj_idx}-transcript",
                         column_config={"behaviour prob": st.column_config.NumberColumn(format="%.3f"),
                                        "advantage": st.column_config.NumberColumn(format="%+.3f")})
                if record.get("prompt") or record.get("completion"):
                    with st.expander("Prompt and completion", expanded=True):
                        st.code(f"{record.get('prompt') or ''}\n{record.get('completion') or ''}", language="text", wrap_lines=True)
            with right:
                components = record.get("components") or {}
                st.markdown(f"**Reward {record['reward']:.3f}**")
                st.dataframe(pd.DataFrame({"component": list(components), "value": list(components.values())}),
                             hide_index=True)
                if record.get("verifier_reason"):
                    st.markdown(f"**Verifier:** {record['verifier_reason']}")

            st.markdown("**Decision**")
            note = st.text_area("Note", key=f"note-{run_id}-{opened}", placeholder="Required to reject or to mark an exploit.")
            b1, b2, b3 = st.columns(3)
            if b1.button("Approve", type="primary", key=f"approve-{opened}", icon=":material/check:"):
                try:
                    review.record_review(svc.con.cursor(), run_id, step, traj_idx, "approve", reviewer, note)
                    ui.flash(f"Approved step {step} #{traj_idx}")  # and redraw, so the table shows it
                except review.ReviewError as error:
                    st.error(str(error))
            if b2.button("Reject", key=f"reject-{opened}", icon=":material/close:"):
                try:
                    review.record_review(svc.con.cursor(), run_id, step, traj_idx, "reject", reviewer, note)
                    ui.flash(f"Rejected step {step} #{traj_idx}")
                except review.ReviewError as error:
                    st.error(str(error))
            if b3.button("Mark as exploit fixture", key=f"exploit-{opened}", icon=":material/bug_report:"):
                try:
                    fixture_id = review.mark_exploit(svc.con.cursor(), run_id, step, traj_idx, reviewer, note)
                    ui.flash(f"Stored exploit fixture {fixture_id}")
                except review.ReviewError as error:
                    st.error(str(error))
            history = queries.review_history(con, run_id, step, traj_idx)
            if not history.empty:
                st.markdown("**Review history** (append-only, oldest first)")
                ui.table(history, key=f"history-{opened}", name=f"{run_id}-{step}-{traj_idx}-reviews")

with gate_tab, ui.shown_errors("evaluate the promotion gate"):
    g1, g2, g3 = st.columns(3)
    min_success = g1.slider("Held-out success at least", 0.0, 1.0, 0.75, 0.05)
    top_k = g2.number_input("Top-k trajectories to review", 1, 100, 5)
    last_steps = g3.number_input("…from the last N steps", 1, 10_000, 3)
    settings = gate.GateSettings(min_success=min_success, top_k=int(top_k), last_steps=int(last_steps))
    report = gate.evaluate_gate(con, svc.runs_dir, run_id, settings)
    checks = pd.DataFrame([{"check": c.name, "result": "pass" if c.passed else "FAIL", "figure": c.figure,
                            "detail": c.detail} for c in report.checks])
    ui.table(checks, key=f"gate-{run_id}", name=f"{run_id}-gate")
    state = gate.current_state(con, run_id)
    if report.passed:
        st.success(f"The gate passes. Run state: {state}.")
    else:
        st.error(f"The gate fails: {len(report.failed)} of {len(report.checks)} checks. Run state: {state}.")
    top = queries.top_trajectories(con, run_id, settings.top_k, settings.last_steps)
    unreviewed = top[top["verdict"] != "approve"]
    if not unreviewed.empty:
        st.caption("Trajectories the gate still needs approved: " + ", ".join(
            f"step {r.step} #{r.traj_idx} ({r.verdict})" for r in unreviewed.itertuples()))
    override = ""
    if not report.passed:
        override = st.text_input("Reason for overriding the failing gate", key="override",
                                 help="Promoting a failing gate is refused unless you record why.")
    p1, p2 = st.columns(2)
    if p1.button("Promote", type="primary", disabled=state == "promoted", icon=":material/verified:", key="promote"):
        try:
            promotion_id = gate.promote(svc.con.cursor(), svc.runs_dir, run_id, reviewer, settings, override)
            ui.flash(f"Promoted (record {promotion_id}); bundle in {svc.runs_dir / run_id / gate.BUNDLE_DIR}")
        except gate.GateError as error:
            st.error(str(error))
    with p2:
        rollback_reason = st.text_input("Rollback reason", disabled=state != "promoted", key="rollback-reason")
        if st.button("Roll back", disabled=state != "promoted", icon=":material/undo:", key="rollback"):
            try:
                gate.rollback(svc.con.cursor(), run_id, reviewer, rollback_reason)
                ui.flash("Rollback recorded")
            except gate.GateError as error:
                st.error(str(error))
    st.markdown("**Promotion record** (append-only)")
    history = queries.promotions(svc.con.cursor(), run_id)
    if history.empty:
        st.caption("No promotion decisions for this run yet.")
    else:
        ui.table(history.drop(columns=["checks"]), key=f"promotions-{run_id}", name=f"{run_id}-promotions")

with fixtures_tab, ui.shown_errors("list the exploit fixtures"):
    fixtures = queries.all_fixtures(con)
    if fixtures.empty:
        st.info("No exploit fixtures yet. Mark a trajectory as an exploit on the Trajectories tab.")
    else:
        checked = {c.fixture_id: c for c in review.check_fixtures(con, run["scorer"])} if run["kind"] != "coding" else {}
        fixtures = fixtures.assign(
            actions=fixtures["actions"].map(" → ".join),
            **{f"eligible under '{run['scorer']}'": fixtures["fixture_id"].map(lambda i: checked[i].eligible if i in checked else None)},
        )
        st.caption("Every run's scorer is checked against all fixtures; an eligible fixture fails that run's gate.")
        ui.table(fixtures, key="fixtures", name="fixtures")
    st.markdown("**All reviews of this run**")
    ui.table(queries.reviews_for_run(con, run_id), key=f"reviews-{run_id}", name=f"{run_id}-reviews")
