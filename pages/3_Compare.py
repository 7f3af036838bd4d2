"""Compare: any set of runs overlaid, side by side while they train; what the guarded scorer changed,
and how success was reached. The runs, the view, the step, A and B, smoothing and seed grouping are in
the URL; runs that differ only in seed draw as one line with a band (`agentrl.analysis.seed_groups`)."""

import streamlit as st

import ui
from agentrl import charts, group_charts
from agentrl.analysis import behaviours, compare, live, seed_groups
from agentrl.analysis.series import MAX_POINTS, downsample, smooth
from agentrl.monitor.kept import kept_onset
from agentrl.store import queries
from ui import seeds
from ui.behaviours import draw_found_divergence, draw_run_behaviours, step_shares, window_control
from ui.pickers import colors_of, runs_picker
from ui.scans import draw_hit_rates

svc = ui.page("Compare")
st.html(seeds.COMPARE_CSS)
st.title("Compare runs")

runs = queries.list_runs(ui.cursor())
ui.stop_without_runs(runs, "No runs yet. Start the outcome-vs-guarded pair on the Launch page.")
picked = runs_picker(runs, queries.newest_pair(ui.cursor()) or runs["run_id"].head(1).tolist(),
                     help="Defaults to the newest outcome-only / guarded pair launched together (with every seed of it).")
if not picked:
    st.info("Pick at least one run.")
    st.stop()
st.caption(seeds.subtitle(queries.sensitive_states_for_runs(ui.cursor(), picked)))
configs = queries.run_configs(ui.cursor(), picked)
controls = seeds.controls(configs)  # smoothing, and whether runs that differ only in seed draw as one line
labels = compare.run_labels(runs, picked)
colors = colors_of(runs[runs["run_id"].isin(picked)])
groups = seed_groups.seed_groups(configs, controls.key) if controls.grouped else seed_groups.singles(configs)
group_labels = {g.group_id: (g.label if g.size > 1 else labels[g.group_id]) for g in groups}
if seed_groups.has_groups(groups):  # a seed group is a line of its own: the palette's colours in group order
    colors = {g.group_id: charts.run_color(i) for i, g in enumerate(groups)}
colors = {run_id: colors[g.group_id] for g in groups for run_id in g.run_ids}  # a seed group shares one colour
group_of = {run_id: g.group_id for g in groups for run_id in g.run_ids}
seeds.sticky_legend(group_labels, colors)
active = any(live.is_active(s) for s in runs.set_index("run_id").loc[picked, "status"])

VIEWS = ["Rates", "Behaviours", "Action distribution", "Vetoes and clipping", "Reward components", "Engine metrics", "Held-out",
         "Imitation ladder", "Throughput"]


@ui.refreshing(active, ui.CHART_REFRESH_S)
def comparison(picked: list[str]) -> None:
    con = ui.cursor()
    version = tuple(queries.run_version(con, r) for r in picked)
    progress = {r: queries.progress(con, r) for r in picked}
    onsets = {r: ui.remembered(f"onset-{r}", v, lambda r=r: kept_onset(con, r)) for r, v in zip(picked, version)}
    with ui.steady("steady-compare"):
        seeds.progress_row(groups, group_labels, progress, onsets)  # where each run (or seed group) is, and its onset
        view = st.segmented_control("View", VIEWS, default="Rates", key="view", bind="query-params",
                                    label_visibility="collapsed",
                                    help="One view at a time, so the page draws quickly; the URL keeps it.")
        steps = ui.remembered("compare-steps", version, lambda: queries.steps_for_runs(con, picked, max_points=MAX_POINTS))
        with ui.shown_errors(f"draw {view or 'the view'}"):
            DRAW.get(view, lambda *a: None)(con, picked, version, steps)
    if active and not any(live.is_active(p["status"]) for p in progress.values()):
        st.rerun(scope="app")  # every run ended: redraw once, without the refresh


def draw_rates(con, picked, version, steps) -> None:
    thin = downsample(steps, by="run_id")
    onsets = {r: ui.remembered(f"onset-{r}", v, lambda r=r: kept_onset(con, r)) for r, v in zip(picked, version)}
    marks = {group_labels[g.group_id]: min((onsets[r].step for r in g.run_ids if onsets[r]), default=None) for g in groups}
    left, right = st.columns(2)
    for column, title, key, where in (("success_rate", "Success rate", "success", left),
                                      ("violation_rate", "Violation rate", "violation", right)):
        smoothed = smooth(thin, column, controls.smoothing, by="run_id")
        if controls.grouped and seed_groups.has_groups(groups):
            curves = seed_groups.group_curves(smoothed, groups, column, controls.band)
            group_colors = {g.group_id: colors[g.group_id] for g in groups}
            figure = group_charts.seed_band_overlay(curves, title, group_labels, group_colors, band=controls.band)
        else:
            figure = group_charts.full_hover_names(charts.rate_overlay(smoothed, column, title, labels, colors))
        ui.chart(group_charts.mark_onsets(figure, marks), key, where)
    draw_hit_rates(con, picked, labels, colors, "scanner-rates", quiet=True)  # beside the violation rate, when scanned


def draw_behaviours(con, picked, version, steps) -> None:
    last = window_control("behaviours-last")
    tables = ui.remembered("behaviours-tables", (tuple(picked), version, last),  # every picked run's, in one read
                           lambda: behaviours.behaviour_tables(con, picked, last))
    shares = ui.remembered("behaviours-shares", (tuple(picked), version), lambda: step_shares(con, picked))
    cols = st.columns(min(len(picked), 2))
    for i, run_id in enumerate(picked):
        with cols[i % len(cols)]:
            draw_run_behaviours(con, run_id, version, last, labels[run_id], colors[run_id], key=f"behaviours-{i}",
                                table=tables[run_id], shares=shares[shares["run_id"] == run_id])


def draw_found(con, picked, version, last: int, a_run: str | None = None, b_run: str | None = None) -> None:
    if len(picked) < 2:
        st.caption("Pick two runs to see where their next actions differ, found from their trajectories.")
        return
    draw_found_divergence(con, a_run or picked[0], b_run or picked[1], labels, version, last)


def draw_distributions(con, picked, version, steps) -> None:
    states = queries.sensitive_states_for_runs(con, picked)
    if not states:
        st.info("These runs recorded no action distributions at declared decision points; below, the states "
                "where they differ most, found from their trajectories.")
        draw_found(con, picked, version, window_control("found-last"))
        return
    c1, c2, c3 = st.columns([1, 1, 2])
    state = c1.selectbox("State", states, key="state", bind="query-params",
                         help="A decision point the runs' task declared, where its sensitive decision is made.")
    a_run = c2.selectbox("A", picked, index=0, format_func=labels.get, key="a", bind="query-params",
                         help="The difference is B − A.")
    b_options = [r for r in picked if r != a_run] or picked
    other = [i for i, r in enumerate(b_options) if group_of[r] != group_of[a_run]]  # by default, B is of another seed group
    b_run = c2.selectbox("B", b_options, index=(other or [0])[0], format_func=labels.get, key="b", bind="query-params")
    history = ui.remembered(f"history-{state}", version,  # thinned: a 15,625-step run draws as 1,000 steps
                            lambda: queries.action_probs_for_runs(con, picked, state, max_steps=MAX_POINTS))
    start = compare.common_step(history, picked) or 0
    last = int(history["step"].max()) if not history.empty else 0
    step = c3.slider("Step", 0, max(last, 1), start, key="step", bind="query-params",
                     help="0 is the starting (cloned) policy. Starts at the last step every picked run has reached.")
    at_step = queries.action_probs_at_step(con, picked, state, step)  # any step, thinned out of the history or not
    left, right = st.columns(2)
    ui.chart(group_charts.full_hover_names(charts.action_bars_by_run(at_step, state, step, labels, colors)), "bars", left)
    diff = compare.action_difference(at_step, a_run, b_run, labels, step)
    if diff.missing:
        right.info(f"No difference at step {step}: {ui.plain(diff.missing)}")  # it names runs by their labels
    else:
        difference = charts.action_difference(diff.frame, state, step, f"{labels[b_run]} − {labels[a_run]}")
        ui.chart(group_charts.fit_title(difference), "diff", right)
    cols = st.columns(min(len(picked), 3))
    for i, run_id in enumerate(picked):
        part = history[history["run_id"] == run_id]
        ui.chart(group_charts.fit_title(charts.action_drift_heatmap(part, state, labels[run_id]), 40), f"drift-{i}",
                 cols[i % len(cols)])
    st.divider()  # beside the declared decision points, the ones found from the trajectories
    draw_found(con, picked, version, window_control("found-last"), a_run, b_run if b_run != a_run else None)


def draw_vetoes(con, picked, version, steps) -> None:
    thin = downsample(steps, by="run_id")
    left, right = st.columns(2)
    ui.chart(group_charts.full_hover_names(charts.count_overlay(thin, "vetoed", "Vetoed rollouts per step", labels, colors)),
             "vetoed", left)
    audit = charts.count_overlay(thin, "vetoed_updates", "Vetoed updates per step (audit, must be 0)", labels, colors)
    ui.chart(group_charts.full_hover_names(audit), "vetoed-updates", right)
    clipped = queries.clipped_by_epoch_for_runs(con, picked)
    if clipped.empty or not (clipped["clipped"] > 0).any():
        st.caption("No picked run clipped a transition.")
    else:
        ui.chart(charts.clipped_by_epoch_bars(clipped, labels, colors), "clipped")


def draw_components(con, picked, version, steps) -> None:
    components = ui.remembered("compare-components", version,
                               lambda: queries.reward_components_for_runs(con, picked, max_steps=MAX_POINTS))
    ui.chart(group_charts.full_hover_names(charts.components_overlay(downsample(components, by=["run_id", "component"]), labels,
                                                               colors)), "components")


def draw_metrics(con, picked, version, steps) -> None:
    names = queries.step_metric_names_for_runs(con, picked)
    if not names:
        st.info("These runs logged no engine metrics (TRL's kl, entropy, ... appear here for language-model runs).")
        return
    name = st.selectbox("Metric", names, index=names.index(live.preferred_metrics(names, 1)[0]), key="metric",
                        bind="query-params")
    log_y = st.toggle("Log scale", key="log-metric", help="For counters and metrics that span orders of magnitude.")
    series = queries.step_metric_for_runs(con, picked, name, max_points=MAX_POINTS)  # thinned in SQL
    ui.chart(group_charts.full_hover_names(charts.metric_overlay(smooth(series, "value", controls.smoothing, by="run_id"), name,
                                                           labels, colors, log_y=log_y)), "metric-chart")


def draw_held_out(con, picked, version, steps) -> None:
    held_out = queries.held_out_for_runs(con, picked)
    if held_out.empty:
        st.info("No held-out evaluation recorded yet.")
        return
    st.caption("Greedy, each run's latest evaluation: ✓ succeeded, ✗ failed, ⚠ broke a rule of the task.")
    ui.table(compare.held_out_summary(held_out, labels), key="held-out-summary", name="held_out_summary")
    ui.table(compare.held_out_table(held_out, labels), key="held-out", name="held_out")


def draw_ladder(con, picked, version, steps) -> None:
    shown = False
    for run_id in picked:
        stages = compare.ladder_stages(queries.imitation_policy(con, run_id), queries.ladder_evals(con, run_id))
        if not stages:
            continue
        shown = True
        st.markdown(f"**{ui.plain(labels[run_id])}**: the cloned policy" + (" and its DAgger round" if len(stages) > 1 else ""))
        for stage in stages:
            st.caption(f"{stage.stage} · held-out {stage.succeeded} of {stage.evaluated} succeed")
            ui.table(stage.policy, key=f"ladder-{run_id}-{stage.stage}", name=f"{run_id}-{stage.stage}-policy")
        labels_df = queries.imitation_labels(con, run_id)
        if not labels_df.empty:
            st.markdown("**New DAgger labels** (state → expert action)")
            ui.table(labels_df, key=f"labels-{run_id}", name=f"{run_id}-dagger-labels")
    if not shown:
        st.info("None of these runs started from an imitation ladder (only the tabular engine clones a policy first).")


def draw_throughput(con, picked, version, steps) -> None:
    totals = queries.totals_for_runs(con, picked)
    speedup = compare.fleet_speedup(queries.step_metric_for_runs(con, picked, "workers"),
                                    queries.step_metric_for_runs(con, picked, "transitions_per_s"), totals)
    if speedup["workers"].nunique() > 1:
        left, right = st.columns([3, 2])
        ui.chart(charts.fleet_speedup(speedup, labels, colors), "fleet", left)
        with right:
            st.caption("Measured: each run's median transitions/s (scored attempts/s for coding runs) over the "
                       "run with the fewest workers. Compare runs of one task and one environment latency.")
            ui.table(speedup.assign(run=speedup["run_id"].map(labels)), key="fleet-table", name="fleet_speedup")
    else:
        st.caption("Pick runs of one task with different `workers` (e.g. 1, 2 and 4) to see the fleet's "
                   "measured speedup beside the model.")
    left, right = st.columns([3, 2])
    ui.chart(charts.throughput_model(compare.throughput_curves(totals), labels, colors), "throughput", left)
    with right:
        st.caption("SPEC section 9: environment step 0.300 s, sampling 0.030 s, update 0.002 s per event; "
                   "a model from each run's own totals, not a measurement.")
        ui.table(totals.assign(run=totals["run_id"].map(labels)), key="totals", name="run_totals")


DRAW = {"Rates": draw_rates, "Behaviours": draw_behaviours, "Action distribution": draw_distributions, "Vetoes and clipping": draw_vetoes,
        "Reward components": draw_components, "Engine metrics": draw_metrics, "Held-out": draw_held_out,
        "Imitation ladder": draw_ladder, "Throughput": draw_throughput}

comparison(picked)
