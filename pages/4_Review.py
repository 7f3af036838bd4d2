"""Review: the highest-reward trajectories before promotion (ties broken with violations first),
exploit fixtures, the promotion gate with exactly the sample it checks and its audit trail, and
the coding sandbox's hack-suite detection table.
The run, the tab and the open trajectory are in the URL; decisions made in another browser show
here within two seconds. The open trajectory and the decision on it are one fragment: next,
previous and every decision redraw only that part (the page never jumps), and the keys of
ui.reviewing press its buttons."""

import streamlit as st

import ui
from agentrl.analysis.live import is_active
from agentrl.review import gate
from agentrl.review import reviews as review
from agentrl.review import transcript
from agentrl.store import queries
from agentrl.tasks.coding import detection
from ui import reviewing
from ui import scans as scans_ui
from ui.pickers import run_picker

svc = ui.page("Review")
st.title("Review before promotion")
reviewer = ui.reviewer_name()
ui.show_flash()
ui.watch_decisions()

con = ui.cursor()
runs = queries.list_runs(con)
ui.stop_without_runs(runs)
run_id = run_picker(runs, runs["run_id"].iloc[0])
run = queries.get_run(con, run_id)
if is_active(run["status"]):
    st.info(f"This run is {run['status']}; its trajectories so far can be reviewed, and it can be promoted once it finishes.")

explore, gate_tab, fixtures_tab, hacks_tab = st.tabs(["Trajectories", "Promotion gate", "Exploit fixtures", "Hack suite"],
                                                     key="tab", bind="query-params")

YES_NO = {"any": None, "yes": True, "no": False}
FLAGS = {"success": "success", "violation": "violation", "duplicate": "duplicate_effect", "eligible": "eligible",
         "vetoed": "vetoed"}


def decide(action, message: str) -> None:
    """Record a decision and redraw with it, or say why it cannot be recorded."""
    try:
        result = action()
    except (review.ReviewError, gate.GateError) as error:
        st.error(ui.plain(error))
        return
    ui.flash(message.format(result=result))


def open_trajectory(run_id: str, keys: list[str], descriptions: dict[str, str], table_rows: list[int]) -> str:
    """The trajectory to show: a row just picked in the table, else the one already open, else the
    URL's (`?traj=STEP/IDX`, shown even outside the list until the filters change), else the first listed."""
    picked = keys[table_rows[0]] if table_rows and table_rows[0] < len(keys) else None
    if picked and picked != st.session_state.get("_table-pick"):
        st.session_state["_table-pick"] = picked
        st.session_state["open-trajectory"] = picked
    linked = transcript.parse_key(st.query_params.get("traj"))
    if "open-trajectory" not in st.session_state:
        exists = linked is not None and queries.trajectory(con, run_id, *linked) is not None
        if st.query_params.get("traj") and not exists:
            st.warning(f"Run {ui.plain(run_id)} has no trajectory {ui.plain(st.query_params.get('traj'))} (step/index); "
                       "showing the first one listed.")
        st.session_state["open-trajectory"] = st.query_params.get("traj") if exists else keys[0]
        st.session_state["_linked"] = (st.session_state["open-trajectory"], keys)
    current = st.session_state["open-trajectory"]
    if current not in keys and st.session_state.get("_linked") != (current, keys):
        current = st.session_state["open-trajectory"] = keys[0]  # filtered out: open the first listed
    options = keys if current in keys else [current] + keys
    pick, previous, following = st.columns([8, 1, 1], vertical_alignment="bottom")
    opened = pick.selectbox("Open trajectory", options, key="open-trajectory",
                            format_func=lambda k: descriptions.get(k, f"step {k.replace('/', ' · #')} (from the link)"),
                            help="Or select a row in the table. The URL names the open trajectory, to share it.")
    for column, key, label, offset in ((previous, reviewing.PREVIOUS, "Previous", -1), (following, reviewing.NEXT, "Next", 1)):
        column.button(label, key=key, disabled=reviewing.neighbour(keys, opened, offset) is None, width="stretch",
                      help=f"Open the {label.lower()} trajectory listed (key {'k' if offset < 0 else 'j'}).",
                      on_click=lambda offset=offset: st.session_state.update(
                          {"open-trajectory": reviewing.neighbour(keys, opened, offset)}))
    if st.query_params.get("traj") != opened:
        st.query_params["traj"] = opened
    return opened


def show_trajectory(run_id: str, opened: str, following: str | None) -> None:
    step, traj_idx = transcript.parse_key(opened)
    record = queries.trajectory(con, run_id, step, traj_idx)
    amount = "" if record.get("amount") is None else f" (amount {record['amount']})"  # tasks without amounts say none
    st.markdown(f"#### Step {step}, trajectory {traj_idx}: {ui.plain(record['task_id'])}{amount}")
    st.markdown(reviewing.flag_badges(record))
    left, right = st.columns([3, 2])
    with left:
        st.markdown("**Transcript**")
        # Keys that do not change with the trajectory: the next one replaces these tables in place.
        ui.table(transcript.turn_table(record), key="transcript", name=f"{run_id}-{step}-{traj_idx}-transcript",
                 column_config={"behaviour prob": st.column_config.NumberColumn(format="%.3f"),
                                "advantage": st.column_config.NumberColumn(format="%+.3f")})
        if record.get("prompt") or record.get("completion"):
            st.markdown("**Conversation** (what the model generated is marked)")
            turns = transcript.chat_turns(record.get("prompt"), record.get("completion"))
            st.dataframe(turns, hide_index=True, key="turns",
                         column_config={"message": st.column_config.TextColumn(width="large"),
                                        "generated": st.column_config.CheckboxColumn("model")})
            with st.expander("Raw prompt and completion"):
                st.code(f"{record.get('prompt') or ''}\n{record.get('completion') or ''}", language="text", wrap_lines=True)
    with right:
        st.markdown(f"**Reward {record['reward']:.3f}**")
        st.dataframe(transcript.components_table(record), hide_index=True, key="components")
        if record.get("verifier_reason"):
            st.markdown(f"**Verifier:** {ui.plain(record['verifier_reason'])}")
    scans_ui.show_results(con, run_id, step, traj_idx, record)
    decision(run_id, step, traj_idx, opened, flagged=bool(reviewing.flagged(record)), following=following)


DECISIONS = {  # name: (button label, icon, what the page says once it is recorded)
    "approve": ("Approve", ":material/check:", "Approved step {step} #{idx}"),
    "reject": ("Reject", ":material/close:", "Rejected step {step} #{idx}"),
    "exploit": ("Mark as exploit fixture", ":material/bug_report:", "Stored exploit fixture {result}"),
}


def record_decision(name: str, run_id: str, step: int, traj_idx: int, note_key: str, following: str | None) -> None:
    """A decision button's callback (it runs before the redraw): record the decision and open the
    next trajectory listed, or keep the reason it was refused for the page to say."""
    note, who = st.session_state.get(note_key, ""), st.session_state.get("reviewer", "")
    try:
        if name == "exploit":
            result = review.mark_exploit(svc.con.cursor(), run_id, step, traj_idx, who, note)
        else:
            result = review.record_review(svc.con.cursor(), run_id, step, traj_idx, name, who, note)
    except (review.ReviewError, gate.GateError) as error:
        st.session_state["_decided"] = ("error", ui.plain(error))
        return
    st.session_state["_decided"] = ("success", DECISIONS[name][2].format(step=step, idx=traj_idx, result=result))
    ui.acknowledge("decisions", lambda: queries.decisions_version(ui.cursor()))  # drawn here, not by a redraw
    if following:
        st.session_state["open-trajectory"] = following


def decision(run_id: str, step: int, traj_idx: int, opened: str, flagged: bool, following: str | None) -> None:
    """Approve, reject or mark as an exploit, recorded where the buttons are: the page stays in
    place (no redraw from the top) and the next trajectory listed opens. A flagged trajectory's
    primary button is Reject."""
    st.markdown("**Decision**")
    note_key = f"note-{run_id}-{opened}"
    st.text_area("Note", key=note_key, placeholder="Required to reject or to mark an exploit.", height=80)
    primary = "reject" if flagged else "approve"
    for column, (name, (label, icon, _)) in zip(st.columns(len(DECISIONS)), DECISIONS.items()):
        # One key for every trajectory: the next one's button replaces this one in place (a key per
        # trajectory left the old button beside the new for a moment). The click still applies to
        # the trajectory it was drawn for: its callback's arguments name it.
        column.button(label, type="primary" if name == primary else "secondary", key=f"decide-{name}", icon=icon,
                      on_click=record_decision, args=(name, run_id, step, traj_idx, note_key, following))
    said = st.session_state.pop("_decided", None)
    if said:
        tone, text = said
        if tone == "success":
            st.success(text, icon=":material/check_circle:")
        else:
            st.error(text)
    history = queries.review_history(con, run_id, step, traj_idx)
    if not history.empty:
        st.markdown("**Review history** (append-only, oldest first)")
        ui.table(history, key="history", name=f"{run_id}-{step}-{traj_idx}-reviews")


@st.fragment
def trajectory_view(run_id: str, keys: list[str], descriptions: dict[str, str], table_rows: list[int]) -> None:
    """The open trajectory, its neighbours and the decision on it: a fragment, so next, previous
    and every decision redraw only this part and the page does not move."""
    with ui.shown_errors("show the trajectory"):
        reviewing.keyboard_shortcuts()
        opened = open_trajectory(run_id, keys, descriptions, table_rows)
        show_trajectory(run_id, opened, reviewing.neighbour(keys, opened, 1))


def show_by_behaviour(run_id: str, lo: int, hi: int) -> None:
    """The explorer grouped: one representative per behaviour (a reviewed one where there is one,
    else the highest reward), its count and mean reward; pick a behaviour to list and open its members."""
    groups = queries.behaviour_representatives(con, run_id, step_min=lo, step_max=hi)
    if groups.empty:
        st.info("No trajectory in these steps.")
        return
    ui.table(review.trajectory_table(groups), key=f"groups-{run_id}", name=f"{run_id}-behaviours-representatives",
             shown=reviewing.marked_violations(review.trajectory_table(groups)),
             column_config={"reward": st.column_config.NumberColumn(format="%.3f"),
                            "mean_reward": st.column_config.NumberColumn("mean reward", format="%.3f")})
    chosen = st.selectbox("Behaviour", groups["behaviour"].tolist(), key="behaviour-open",
                          format_func=lambda b: f"{b} ({int(groups.set_index('behaviour').at[b, 'members'])})")
    members = queries.behaviour_members(con, run_id, chosen, since_step=lo - 1, limit=500)
    members = members[members["step"] <= hi]
    event = ui.table(review.trajectory_table(members), key=f"members-{run_id}",
                     shown=reviewing.marked_violations(review.trajectory_table(members)), name=f"{run_id}-behaviour-members",
                     on_select="rerun", selection_mode="single-row",
                     column_config={"reward": st.column_config.NumberColumn(format="%.3f")})
    keys = [transcript.key(r.step, r.traj_idx) for r in members.itertuples()]
    descriptions = {k: f"step {r.step} · #{r.traj_idx} · {r.task_id} · reward {r.reward:.3f} · {r.verdict}"
                    for k, r in zip(keys, members.itertuples())}
    rows = event.selection.rows if event is not None and hasattr(event, "selection") else []
    trajectory_view(run_id, keys, descriptions, rows)


if explore.open:
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
            grouped = st.toggle("Group by behaviour", key="by-behaviour",
                                help="One row per behaviour (its tool calls, or what the task calls it) in these "
                                     "steps: a representative, how many trajectories share it and their mean reward.")
            if grouped:
                show_by_behaviour(run_id, lo, hi)
            else:
                flag_cols = st.columns(len(FLAGS) + 3)
                flags = {}
                for col, (label, column) in zip(flag_cols, FLAGS.items()):
                    choice = col.selectbox(label, list(YES_NO), key=f"flag-{label}")
                    if YES_NO[choice] is not None:
                        flags[column] = YES_NO[choice]
                verdict = flag_cols[-3].selectbox("verdict", ["any", "unreviewed", "approve", "reject"])
                order = flag_cols[-2].selectbox("sort by reward", ["highest first", "lowest first"],
                                                help="Equal rewards list violating trajectories first.")
                top_k = flag_cols[-1].number_input("top k", min_value=1, max_value=10_000, value=10)
                scanner = scans_ui.scanner_choice(con, run_id)
                found = queries.find_trajectories(
                    con, run_id, step_min=lo, step_max=hi, task_ids=tasks or None, flags=flags,
                    verdict=None if verdict == "any" else verdict, descending=order == "highest first",
                    limit=int(top_k) if scanner is None else 1_000_000,
                )
                found = scans_ui.keep_hits(con, run_id, found, scanner, int(top_k))
                if found.empty:
                    st.info("No trajectory matches these filters.")
                else:
                    keys = [transcript.key(r.step, r.traj_idx) for r in found.itertuples()]
                    # A picked row is resolved against the table as the user saw it: one that changed since
                    # (new trajectories of a live run) starts the selection again, never opens another row.
                    table = scans_ui.with_scanner_column(con, run_id, review.trajectory_table(found))
                    event = ui.table(table, key=ui.selection_key(f"found-{run_id}", keys),
                                     shown=reviewing.marked_violations(table),
                                     name=f"{run_id}-trajectories", on_select="rerun", selection_mode="single-row",
                                     column_config={"reward": st.column_config.NumberColumn(format="%.3f")})
                    descriptions = {k: f"step {r.step} · #{r.traj_idx} · {r.task_id} · reward {r.reward:.3f} · {r.verdict}"
                                    for k, r in zip(keys, found.itertuples())}
                    rows = event.selection.rows if event is not None and hasattr(event, "selection") else []
                    trajectory_view(run_id, keys, descriptions, rows)


def open_from_sample(run_id: str, keys: list[str]) -> None:
    """A row of the gate's sample picked: open that trajectory in the transcript view."""
    rows = st.session_state[f"sample-{run_id}"].selection.rows
    if not rows:
        return
    for slot in ("open-trajectory", "_linked", "_table-pick"):
        st.session_state.pop(slot, None)
    st.query_params["traj"] = keys[rows[0]]
    st.session_state["by-behaviour"] = False  # the flat list, where a linked trajectory opens
    st.session_state["tab"] = "Trajectories"


def gate_sample(run_id: str, sample) -> None:
    st.markdown(f"**The gate's sample**: one trajectory for each of the {len(sample)} high-reward behaviours its "
                "review coverage counts (a reviewed one where there is one). Select a row to open it in the "
                "transcript view.")
    keys = [transcript.key(r.step, r.traj_idx) for r in sample.itertuples()]
    table = review.trajectory_table(sample)
    ui.table(table, key=f"sample-{run_id}", name=f"{run_id}-gate-sample", shown=reviewing.marked_violations(table),
             on_select=lambda: open_from_sample(run_id, keys), selection_mode="single-row",
             column_config={"reward": st.column_config.NumberColumn(format="%.3f")})


if gate_tab.open:
    with gate_tab, ui.shown_errors("evaluate the promotion gate"):
        g1, g2, g3 = st.columns(3)
        min_success = g1.slider("Held-out success at least", 0.0, 1.0, 0.75, 0.05)
        defaults = gate.GateSettings()
        last_steps = g2.number_input("Review coverage over the last K steps", 1, 10_000, defaults.last_steps)
        min_share = g3.number_input("…every behaviour with at least this share of the top-reward quarter", 0.01, 1.0,
                                    defaults.min_share, 0.01)
        min_recall = st.slider("Each enforced scanner's held-out recall at least", 0.0, 1.0, defaults.min_scanner_recall, 0.05)
        settings = gate.GateSettings(min_success=min_success, last_steps=int(last_steps), min_share=float(min_share),
                                     min_scanner_recall=float(min_recall))
        report = gate.evaluate_gate(con, svc.runs_dir, run_id, settings)
        ui.table(gate.checks_table(report), key=f"gate-{run_id}", name=f"{run_id}-gate")
        state = gate.current_state(con, run_id)
        if report.passed:
            st.success(f"The gate passes. Run state: {state}.")
        else:
            st.error(f"The gate fails: {len(report.failed)} of {len(report.checks)} checks. Run state: {state}.")
        if report.sample is not None:
            gate_sample(run_id, report.sample)
        override = ""
        if not report.passed:
            override = st.text_input("Reason for overriding the failing gate", key="override",
                                     help="Promoting a failing gate is refused unless you record why.")
        p1, p2 = st.columns(2)
        may_act = ui.may_act()  # the browser holds the dashboard's key (ui.guard)
        if p1.button("Promote", type="primary", disabled=state == "promoted" or not may_act, icon=":material/verified:",
                     key="promote", help=None if may_act else ui.VIEW_ONLY) and ui.allowed("promote the run"):
            decide(lambda: gate.promote(svc.con.cursor(), svc.runs_dir, run_id, reviewer, settings, override),
                   "Promoted (record {result}); bundle in " + str(svc.runs_dir / run_id / gate.BUNDLE_DIR))
        with p2:
            rollback_reason = st.text_input("Rollback reason", disabled=state != "promoted", key="rollback-reason")
            if st.button("Roll back", disabled=state != "promoted" or not may_act, icon=":material/undo:", key="rollback",
                         help=None if may_act else ui.VIEW_ONLY) and ui.allowed("roll back the promotion"):
                decide(lambda: gate.rollback(svc.con.cursor(), run_id, reviewer, rollback_reason), "Rollback recorded")
        st.markdown("**Promotion record** (append-only)")
        history = queries.promotions(svc.con.cursor(), run_id)
        if history.empty:
            st.caption("No promotion decisions for this run yet.")
        else:
            ui.table(history.drop(columns=["checks"]), key=f"promotions-{run_id}", name=f"{run_id}-promotions")

if fixtures_tab.open:
    with fixtures_tab, ui.shown_errors("list the exploit fixtures"):
        fixtures = review.fixtures_table(con, run["kind"], run["scorer"], run=run)
        if fixtures.empty:
            st.info("No exploit fixtures yet. Mark a trajectory as an exploit on the Trajectories tab.")
        else:
            st.caption("Every fixture of this run's task is replayed through the task and scored by the run's scorer; an "
                       "eligible fixture fails the run's gate. A run launched after a fixture vetoes its behaviour.")
            ui.table(fixtures, key="fixtures", name="fixtures")
        st.markdown("**All reviews of this run**")
        ui.table(queries.reviews_for_run(con, run_id), key=f"reviews-{run_id}", name=f"{run_id}-reviews")

if hacks_tab.open:
    with hacks_tab, ui.shown_errors("show the hack suite"):
        st.caption("The coding tasks' sandbox against every published reward hack (test-runner patches, exit "
                   "tricks, planted result files, tampered tests, frozen clocks…) under each runner: which "
                   "detector caught it, and the test reward it earned (0 is the guarantee). The limits are not a "
                   "security boundary; see the README's Guarantees.")
        report = detection.load_detection_report(svc.runs_dir)
        if report is None:
            st.info("The hack suite has not been run here yet. It takes about a minute.")
        else:
            m = st.columns(2)
            m[0].metric("hacks that earned test reward", f"{report.earned} of {len(report.table)}")
            m[1].metric("impossible suites passed", f"{report.impossible_passed} of {report.impossible_attempts}",
                        help="ImpossibleBench: suites whose expected values were mutated must never pass.")
            st.caption(f"Scored {report.made_at} (code fingerprint {report.fingerprint}).")
            if not report.current:
                st.warning("The sandbox, rewards or hacks changed since this table was made: run it again.")
            ui.table(report.table.drop(columns=["task_id"]), key="hack-suite", name="hack_suite")
        if st.button("Run the hack suite" if report is None else "Run it again", icon=":material/bug_report:",
                     key="run-hacks", disabled=not ui.may_act(), help=None if ui.may_act() else ui.VIEW_ONLY) \
                and ui.allowed("run the hack suite"):  # it starts sandboxed processes
            with st.spinner("Scoring every hack in the sandbox (about a minute)…"):
                detection.save_detection_report(svc.runs_dir, detection.compute_detection_report())
            st.rerun()
