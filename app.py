"""agentrl dashboard: the runs overview. Pages in pages/ are discovered automatically."""

import streamlit as st

# Drawn before the imports below: on the first visit after the dashboard starts they take seconds,
# and the tab would be blank until then.
st.set_page_config(page_title="Runs · agentrl", layout="wide")
st.title("agentrl — runs")

import ui
from agentrl.analysis import runs as runs_view
from agentrl.analysis import seed_groups
from agentrl.monitor.kept import kept_onset
from agentrl.store import curation, queries
from ui.pickers import colors_of

svc = ui.page("Runs")
st.caption(
    "Train tool-using agents with group-relative RL, watch them live, compare an outcome-only "
    "scorer with a guarded one. Every record lives in DuckDB."
)
reviewer = ui.reviewer_name()
ui.show_flash()
ui.watch("runs", lambda: queries.runs_version(ui.cursor()))  # new runs, steps and statuses show by themselves

runs = queries.list_runs(ui.cursor())
if runs.empty:
    st.info("No runs yet. Start one on the Launch page: the tabular presets train in seconds.")
    st.page_link("pages/1_Launch.py", label="Launch a run", icon=":material/rocket_launch:")


@st.fragment
def runs_overview() -> None:
    runs = queries.list_runs(ui.cursor())
    if runs.empty:  # every run was deleted meanwhile
        st.rerun(scope="app")
    with ui.steady("steady-runs"):
        counts = runs["status"].value_counts()
        cols = st.columns(5)
        for col, status in zip(cols, ("running", "queued", "succeeded", "failed", "cancelled")):
            col.metric(status, int(counts.get(status, 0)))
        f1, f2, f3, f4, f5, f6 = st.columns([3, 2, 2, 2, 2, 2], vertical_alignment="bottom")
        text = f1.text_input("Search", key="q", bind="query-params", placeholder="name, id or note")
        statuses = f2.multiselect("Status", sorted(runs["status"].unique()), key="status", bind="query-params")
        kinds = f3.multiselect("Engine", sorted(runs["kind"].unique()), key="kind", bind="query-params")
        tags = f4.multiselect("Tags", runs_view.all_tags(runs), key="tag", bind="query-params")
        archived = f5.toggle("Show archived", key="archived", bind="query-params",
                             help="Archived runs are hidden from every run picker.")
        grouped = f6.toggle("Group seeds", key="seeds", bind="query-params",
                            help="Runs whose configs differ only in seed as one row, with the mean ± std of their "
                                 "final figures. Selecting a row selects all its runs.")
        shown = runs_view.filter_runs(runs, text, statuses, kinds, tags, archived)
        colors = colors_of(shown)
        if grouped:
            event, rows = seed_group_table(shown, colors)
        else:
            event, rows = run_table(shown, colors)
    what = f"{len(rows)} seed groups of {len(shown)} runs" if grouped else f"{len(shown)} of {len(runs)} runs"
    st.caption(f"{what} shown. Select rows to compare, tag, archive or delete them.")
    selected = [run_id for i in event.selection.rows if i < len(rows) for run_id in rows[i]]
    if selected:
        with ui.shown_errors("change the selected runs"):
            selected_runs(runs, selected)


def run_table(shown, colors):
    """One row per run: (the table's selection event, each row's run ids)."""
    # Each run's onset, worked out again only when the run has new steps.
    onsets = {r.run_id: ui.remembered(f"onset-{r.run_id}", (r.steps_done, r.status),
                                      lambda r=r: kept_onset(ui.cursor(), r.run_id)) for r in shown.itertuples()}
    table = runs_view.runs_table(shown, onsets, queries.config_texts(ui.cursor(), shown["run_id"].tolist()))
    styled = table.style.apply(lambda column: [f"color: {colors[r]}" for r in table["run_id"]], subset=["run"])
    ids = table["run_id"].tolist()
    event = st.dataframe(
        styled, hide_index=True, key=ui.selection_key("runs", ids), on_select="rerun", selection_mode="multi-row",
        column_config={
            "run": st.column_config.TextColumn("", width=28, help="The run's colour on every chart."),
            "final success": st.column_config.NumberColumn(format="percent", help="Sampled success rate of the last step."),
            "final violation": st.column_config.NumberColumn(format="percent", help="Sampled violation rate of the last step."),
            "held-out success": st.column_config.NumberColumn(format="percent", help="Latest greedy held-out evaluation."),
            "onset": st.column_config.TextColumn("hacking onset", help="The first step at which a hacking signal "
                                                 "stayed past its threshold (the onset monitor)."),
            "final reward": st.column_config.NumberColumn(format="%.3f"),
            "live": st.column_config.LinkColumn("live", display_text="Live", width=50),
            "review": st.column_config.LinkColumn("review", display_text="Review", width=60),
            "hardware": st.column_config.LinkColumn("hardware", display_text="Hardware"),
            "created_at": st.column_config.DatetimeColumn("created (UTC)", format="YYYY-MM-DD HH:mm"),
            "run_id": st.column_config.TextColumn("run id"),
            "learning rate": st.column_config.NumberColumn(format="%g"),
        },
    )
    return event, [[run_id] for run_id in ids]


def seed_group_table(shown, colors):
    """One row per seed group (runs whose configs differ only in seed), the mean ± std of their
    final figures: (the table's selection event, each row's run ids)."""
    groups = seed_groups.seed_groups(queries.run_configs(ui.cursor(), shown["run_id"].tolist()))
    table = runs_view.grouped_table(shown, groups)
    styled = table.style.apply(lambda column: [f"color: {colors[r]}" for r in table["run_id"]], subset=["run"])
    rows = [ids.split(", ") for ids in table["run_ids"]]
    event = st.dataframe(
        styled, hide_index=True, key=ui.selection_key("seed-groups", table["run_ids"].tolist()), on_select="rerun",
        selection_mode="multi-row", column_order=[c for c in table.columns if c not in ("run_id", "run_ids")],
        column_config={
            "run": st.column_config.TextColumn("", width=28, help="The colour of the group's first run."),
            "runs": st.column_config.NumberColumn(help="Runs in the group: their configs differ only in seed."),
            "final success": st.column_config.TextColumn(help="Mean ± std over the group's runs of the last step's sampled success rate."),
            "final violation": st.column_config.TextColumn(help="Mean ± std over the group's runs of the last step's sampled violation rate."),
            "held-out success": st.column_config.TextColumn(help="Mean ± std over the group's runs of the latest held-out evaluation."),
            "final reward": st.column_config.TextColumn(help="Mean ± std over the group's runs of the last step's mean reward."),
            "compare": st.column_config.LinkColumn("compare", display_text="Compare", width=70,
                                                   help="Every run of the group on Compare, drawn as one line in a band."),
        },
    )
    return event, rows


def selected_runs(runs, selected: list[str]) -> None:
    """What can be done to the runs selected in the table."""
    row = st.container(horizontal=True)
    row.page_link("pages/3_Compare.py", label=f"Compare {len(selected)} selected", icon=":material/compare_arrows:",
                  query_params={"run": selected})
    notes = queries.run_notes(ui.cursor(), selected[0])
    if row.button("Archive" if not notes["archived"] else "Unarchive", icon=":material/archive:", key="archive"):
        for run_id in selected:
            curation.annotate(svc.con.cursor(), run_id, archived=not notes["archived"], by=reviewer)
        ui.flash(f"{'Archived' if not notes['archived'] else 'Unarchived'} {len(selected)} run(s)")
    if len(selected) == 1:
        with st.expander(f"Tags and note of {ui.plain(selected[0])}", expanded=False):
            tags = st.multiselect("Tags", sorted(set(runs_view.all_tags(runs)) | set(notes["tags"])),
                                  default=notes["tags"], accept_new_options=True, key=f"tags-{selected[0]}")
            note = st.text_area("Note", notes["note"] or "", key=f"note-{selected[0]}")
            if st.button("Save", key="save-notes"):
                curation.annotate(svc.con.cursor(), selected[0], tags=tags, note=note, by=reviewer)
                ui.flash(f"Saved the tags and note of {selected[0]}")
    with st.expander(f"Delete {len(selected)} run(s)"):
        st.caption("Deletes each run's folder (chunks, log, policy) and every row it recorded. Reviews, "
                   "fixtures and promotions about it stay in the decisions log. A running run cannot be deleted.")
        # The tick and the button are bound to these run ids (never to rows of the table).
        sure = st.checkbox(f"Yes, delete {ui.plain(', '.join(selected))}", key=ui.bound_key("confirm-delete", selected))
        may_act = ui.may_act()  # the browser holds the dashboard's key (ui.guard)
        if st.button("Delete", type="primary", disabled=not (sure and may_act), icon=":material/delete:",
                     key=ui.bound_key("delete", selected),
                     help=None if may_act else ui.VIEW_ONLY) and ui.allowed("delete runs"):
            try:
                for run_id in selected:
                    curation.delete_run(svc.con.cursor(), svc.runs_dir, run_id)
            except curation.CurationError as error:
                st.error(ui.plain(error))
            else:
                ui.flash(f"Deleted {len(selected)} run(s)")

if not runs.empty:
    with ui.shown_errors("list the runs"):
        runs_overview()

with ui.shown_errors("read ingest errors"):
    errors = queries.ingest_errors(ui.cursor())
    if not errors.empty:
        with st.expander(f"{len(errors)} chunk file(s) could not be ingested"):
            st.dataframe(errors, hide_index=True)
