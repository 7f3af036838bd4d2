"""AppTest of the Runs, Launch, Live and Hardware pages: no exception, the expected charts and
tables, launch validation, deep links, and issue 13's findings that an AppTest can show."""

from __future__ import annotations

import json
import time

import pytest

from apptest import app, figure, figures, no_errors, store, titles
from conftest import add_run

from agentrl.record.rundir import RUNS_DIR_ENV


def test_overview_lists_runs_newest_first_with_final_figures_and_links(trained_runs_dir):
    at = app("app.py").run()
    no_errors(at)
    table = at.dataframe[0].value
    assert list(table["name"]) == ["refund-guarded", "refund-outcome"]
    assert set(table["status"]) == {"succeeded"}
    outcome = table.set_index("name").loc["refund-outcome"]
    assert (outcome["final success"], outcome["final violation"], outcome["held-out success"]) == (1.0, 0.5, 1.0)
    assert outcome["live"] == f"Live?run={outcome['run_id']}" and outcome["review"] == f"Review?run={outcome['run_id']}"


def test_overview_filters_by_name_and_tag_and_hides_archived_runs(trained_runs_dir):
    from agentrl.store import curation

    at = app("app.py").run()
    con = store(trained_runs_dir)
    ids = dict(zip(at.dataframe[0].value["name"], at.dataframe[0].value["run_id"]))
    curation.annotate(con, ids["refund-guarded"], tags=["spec"], note="the veto works")
    at.run()
    next(t for t in at.text_input if t.label == "Search").input("veto").run()
    assert list(at.dataframe[0].value["name"]) == ["refund-guarded"]
    assert at.dataframe[0].value["tags"].tolist() == ["spec"]
    curation.annotate(con, ids["refund-guarded"], archived=True)
    at.run()
    assert at.dataframe[0].value.empty
    at.toggle(key="archived").set_value(True).run()
    assert list(at.dataframe[0].value["name"]) == ["refund-guarded"]
    linked = app("app.py", archived="true").run()  # issue 29: "show archived" is in the URL, to share the view
    assert set(linked.dataframe[0].value["name"]) == {"refund-guarded", "refund-outcome"}
    assert linked.dataframe[0].value["learning rate"].tolist() == [0.04, 0.04]  # the config, beside the figures


def test_overview_on_an_empty_store_points_to_launch(tmp_path, monkeypatch):
    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path / "empty"))
    at = app("app.py").run()
    no_errors(at)
    assert any("No runs yet" in info.value for info in at.info)


def test_live_page_draws_the_runs_charts_and_more_panels_on_demand(trained_runs_dir):
    at = app("pages/2_Live.py").run()
    no_errors(at)
    # success beside violation, reward components; more on demand (the page draws two charts quickly)
    assert set(titles(at)) == {"Success and violation rate", "Mean reward components per step"}
    rates = figure(at, "Success and violation rate")
    # Okabe-Ito's bluish green and vermillion, told apart by readers with a colour vision deficiency
    assert [(t["name"], t["color"]) for t in rates["data"]] == [("success", "#009E73"), ("violation", "#D55E00")]
    assert [t["line"]["dash"] for t in json.loads(next(c.proto.spec for c in at.get("plotly_chart")
                                                       if "Success and violation" in c.proto.spec))["data"]] == ["solid", "dash"]
    assert "Step 30 of 30" in at.get("progress")[0].proto.text
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["vetoed rollouts"] == "25"  # the guarded run is the newest
    assert metrics["vetoed updates (audit)"] == "0"
    at.button_group(key="panels").set_value(["Vetoes", "Policy", "Updates", "Memory"]).run()
    no_errors(at)
    assert {"Vetoes per step", "Action distribution at known_high (step 30)", "Updates and clipped transitions per step",
            "Memory"} <= set(titles(at))


def test_live_page_shows_the_run_named_in_the_url(trained_runs_dir):
    outcome_id = sorted(p.name for p in trained_runs_dir.iterdir() if "outcome" in p.name)[0]
    at = app("pages/2_Live.py", run=outcome_id).run()
    no_errors(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["vetoed rollouts"] == "0"
    assert metrics["violation (last step)"] == "50%"


def test_a_first_language_model_run_says_what_its_time_estimate_waits_for(trained_runs_dir):
    """Issue 29, item 7: before its first step, a run of an engine never timed here does not say
    "unknown": it says it is estimating, and what for."""
    add_run(trained_runs_dir, "first-lm", "trl", steps=0, status="running")
    at = app("pages/2_Live.py", run="first-lm").run()
    no_errors(at)
    eta = [c.value for c in at.caption if c.value.startswith("ETA")]
    assert eta and eta[0].startswith("ETA: estimating… (it waits for the first step to finish")
    assert not any("unknown" in c.value.lower() for c in at.caption)


def test_live_page_says_when_the_url_names_no_run(trained_runs_dir):
    """Issue 13, finding 8: a bad deep link is said, not silently replaced."""
    at = app("pages/2_Live.py", run="nope").run()
    assert any("There is no run nope " in w.value for w in at.warning)
    assert at.query_params["run"] != "nope"


def test_live_page_on_an_empty_store(tmp_path, monkeypatch):
    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path / "empty"))
    at = app("pages/2_Live.py").run()
    no_errors(at)
    assert any("No runs yet" in info.value for info in at.info)


def test_a_starting_run_says_it_is_loading_instead_of_drawing_empty_charts(trained_runs_dir):
    """Issue 13, finding 3: before step 1 the page names the phase and the time since launch."""
    add_run(trained_runs_dir, "starting-lm", "trl", steps=0, status="running", states=False)
    at = app("pages/2_Live.py", run="starting-lm").run()
    no_errors(at)
    assert at.get("plotly_chart") == []
    (phase,) = [i.value for i in at.info if i.value.startswith("Starting:")]
    assert "loading the engine and the model" in phase and "since launch" in phase
    assert at.get("progress")[0].proto.text == "Step 0 of 0 · starting"


def test_panels_that_do_not_apply_are_not_drawn_and_steps_tick_whole(trained_runs_dir):
    """Issue 13, finding 7: a coding run gets no known_high chart; three steps tick 1, 2, 3."""
    add_run(trained_runs_dir, "coding-run", "coding", states=False)
    at = app("pages/2_Live.py", run="coding-run").run()
    no_errors(at)
    assert figure(at, "Success and violation rate")["layout"]["xaxis"]["dtick"] == 1
    at.button_group(key="panels").set_value(["Policy", "Updates"]).run()
    assert not any(t.startswith("Action distribution") for t in titles(at))
    assert any("records no action distribution" in c.value for c in at.caption)
    assert any("applies no updates" in c.value for c in at.caption)


def test_reward_components_keep_their_colour_from_run_to_run(trained_runs_dir):
    """Issue 13, finding 5: a component's colour is its own, not its position in the legend."""
    add_run(trained_runs_dir, "lm-run", "trl")
    colours = []
    for run_id in ("lm-run", sorted(p.name for p in trained_runs_dir.iterdir() if "guarded" in p.name)[0]):
        at = app("pages/2_Live.py", run=run_id).run()
        colours.append({t["name"]: t["color"] for t in figure(at, "Mean reward components")["data"]})
    assert colours[0]["step_cost"] == colours[1]["step_cost"] and colours[0]["outcome"] == colours[1]["outcome"]
    # Hover names every series; the legend sits right of the plot, never over the axis title.
    layout = figure(at, "Mean reward components")["layout"]
    assert layout["hovermode"] == "x unified" and layout["legend"]["x"] > 1


def test_launch_refuses_an_invalid_config_and_starts_nothing(tmp_path, monkeypatch):
    runs_dir = tmp_path / "runs"
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))
    at = app("pages/1_Launch.py").run()
    no_errors(at)
    next(n for n in at.number_input if n.label == "Rounds").set_value(0).run()
    assert any("**Rounds**: must be more than 0 (you entered 0)" in e.value for e in at.error)
    start = next(b for b in at.button if b.label == "Start run")
    assert start.disabled  # a browser user cannot start it (AppTest refuses to click it, as a browser would)
    assert not at.exception
    assert [p for p in runs_dir.iterdir() if p.is_dir()] == []


def test_launch_names_fields_by_label_and_refuses_a_fraction_of_a_round(tmp_path, monkeypatch):
    """Issue 13, finding 10: 3.7 rounds is refused by name, not silently 3; no internal keys."""
    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path / "runs"))
    at = app("pages/1_Launch.py").run()
    next(n for n in at.number_input if n.label == "Rounds").set_value(3.7).run()
    next(n for n in at.number_input if n.label == "Group size").set_value(1).run()
    (error,) = [e.value for e in at.error]
    assert "**Rounds**: must be a whole number (you entered 3.7)" in error
    assert "**Group size**: must be at least 2 (you entered 1)" in error
    assert "group_size" not in error and "rounds (" not in error
    assert next(b for b in at.button if b.label == "Start run").disabled


def test_launch_asks_before_a_run_of_hours(tmp_path, monkeypatch):
    """Issue 13, finding 10: 100,000 rounds of a 0.25 s delay (about 7 h) does not start without a word."""
    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path / "runs"))
    at = app("pages/1_Launch.py").run()
    next(n for n in at.number_input if n.label == "Rounds").set_value(100_000).run()
    no_errors(at)
    assert any("6:56:40" in w.value for w in at.warning)
    assert any(c.value.startswith("Time: at least 6:56:40 of step delay") for c in at.caption)
    assert next(b for b in at.button if b.label == "Start run").disabled
    next(c for c in at.checkbox if c.label == "Start it anyway").check().run()
    assert not next(b for b in at.button if b.label == "Start run").disabled


def test_launch_starts_the_outcome_vs_guarded_pair_and_opens_it_side_by_side_on_compare(tmp_path, monkeypatch):
    runs_dir = tmp_path / "runs"
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))
    at = app("pages/1_Launch.py").run()
    no_errors(at)
    delay = next(n for n in at.number_input if n.label == "Step delay (s)")
    delay.set_value(0.0)
    pair = next(b for b in at.button if b.label == "Start outcome-vs-guarded pair")
    pair.click().run()
    no_errors(at)
    run_dirs = sorted(p for p in runs_dir.iterdir() if p.is_dir())
    assert sorted(p.name.split("-", 2)[2].rsplit("-", 1)[0] for p in run_dirs) == ["refund-guarded", "refund-outcome"]
    # One click: the page is Compare, the pair picked (outcome first), the URL naming both.
    assert at.title[0].value == "Compare runs"
    assert sorted(at.multiselect[0].value) == [p.name for p in run_dirs]
    assert sorted(at.query_params["run"]) == [p.name for p in run_dirs]
    # They are real processes: wait for both to finish on their own.
    deadline = time.monotonic() + 60
    statuses = []
    while time.monotonic() < deadline:
        statuses = [json.loads((p / "status.json").read_text()).get("status") for p in run_dirs]
        if all(s == "succeeded" for s in statuses):
            break
        time.sleep(0.2)
    assert statuses == ["succeeded", "succeeded"]


@pytest.mark.slow
def test_launch_starts_n_seeds_of_a_config_in_one_click_as_one_launch(tmp_path, monkeypatch):
    """Issue 29: a Launch option starts N seeds of a config; Compare opens on them, one group."""
    runs_dir = tmp_path / "runs"
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))
    at = app("pages/1_Launch.py").run()
    next(n for n in at.number_input if n.label == "Step delay (s)").set_value(0.0)
    next(n for n in at.number_input if n.label == "Seeds").set_value(3).run()
    next(b for b in at.button if b.label == "Start 3 seeds").click().run()
    no_errors(at)
    metas = [json.loads((p / "run.json").read_text()) for p in sorted(runs_dir.iterdir()) if p.is_dir()]
    assert sorted((m["name"], m["config"]["seed"]) for m in metas) == [
        ("refund-outcome-seed7", 7), ("refund-outcome-seed8", 8), ("refund-outcome-seed9", 9)]
    assert len({m["launch_group"] for m in metas}) == 1
    assert at.title[0].value == "Compare runs" and len(at.multiselect[0].value) == 3
    deadline = time.monotonic() + 60  # real processes: let them finish on their own
    while time.monotonic() < deadline and not all(
            json.loads((runs_dir / m["run_id"] / "status.json").read_text()).get("status") == "succeeded" for m in metas):
        time.sleep(0.2)


def test_an_unwritable_runs_dir_is_one_clear_message_on_every_page(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(RUNS_DIR_ENV, str(blocker / "runs"))
    for path in ("app.py", "pages/1_Launch.py", "pages/2_Live.py"):
        at = app(path).run()
        assert not at.exception, [e.value for e in at.exception]
        assert [e.value for e in at.error] == [
            f"The run store is unavailable: runs directory '{blocker / 'runs'}' cannot be written: Not a directory"
        ]


def test_launch_shows_the_lm_budget_and_refuses_a_run_that_cannot_fit(tmp_path, monkeypatch):
    runs_dir = tmp_path / "runs"
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))
    at = app("pages/1_Launch.py").run()
    next(s for s in at.selectbox if s.label == "Preset").set_value("lm-refund-guarded").run()
    no_errors(at)
    budget = next(c.value for c in at.code if "KV cache" in c.value)
    assert "Python + torch runtime" in budget and "free" in budget and "0.0 GB" not in budget
    memory = next(n for n in at.number_input if n.label.startswith("Machine memory"))
    memory.set_value(0.5)  # GB: less than the process's runtime alone
    next(b for b in at.button if b.label == "Start run").click().run()
    assert not at.exception
    refusal = [e.value for e in at.error if e.value.startswith("This run cannot start")]
    assert refusal and "memory budget does not fit" in refusal[0]
    assert not at.success
    assert not runs_dir.exists() or [p for p in runs_dir.iterdir() if p.is_dir()] == []


def test_launch_refuses_a_missing_model_directory(tmp_path, monkeypatch):
    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path / "runs"))
    at = app("pages/1_Launch.py").run()
    next(s for s in at.selectbox if s.label == "Preset").set_value("lm-refund-outcome").run()
    next(t for t in at.text_input if t.label == "Model directory").input(str(tmp_path / "no-model"))
    next(b for b in at.button if b.label == "Start run").click().run()
    assert any("does not exist" in e.value for e in at.error)
    assert not at.success


def test_hardware_page_shows_memory_and_cpu_of_a_run_and_the_peaks_table(pair_app_env):
    runs_dir, ids = pair_app_env
    at = app("pages/5_Hardware.py").run()
    no_errors(at)
    assert titles(at)[:2] == ["Memory", "CPU"]
    peaks = at.dataframe[-1].value
    assert set(peaks["run_id"]) == set(ids.values())
    assert (peaks["peak_rss_bytes"] > 10 * 2**20).all()


def test_hardware_page_writes_its_run_to_the_url_and_reads_the_cpu_over_a_window(pair_app_env):
    """Issue 13, findings 8 and 9: the run is in the URL; CPU busy is measured over seconds."""
    runs_dir, ids = pair_app_env
    at = app("pages/5_Hardware.py", run=ids["outcome"]).run()
    no_errors(at)
    assert at.query_params["run"] == ids["outcome"]
    cpu = next(m for m in at.metric if m.label.startswith("CPU busy"))
    assert cpu.label == "CPU busy (last 5 s)"
    assert [f["data"][0]["x"] for f in figures(at)[:1]]  # the run's own samples are drawn


def test_released_services_stop_their_threads_and_close_the_store(trained_runs_dir):
    """When Streamlit releases its cached resources (cache cleared, app reloaded), the dashboard's
    ingest and maintenance threads stop and the store is closed, so nothing keeps ticking."""
    import threading

    import streamlit as st

    from agentrl.store.ingest import connect

    def ours() -> set[str]:
        return {t.name for t in threading.enumerate() if t.name.startswith("agentrl-")}

    no_errors(app("app.py").run())
    assert {"agentrl-ingest", "agentrl-maintenance"} <= ours()
    st.cache_resource.clear()
    assert ours() == set()
    connect(trained_runs_dir).close()  # the dashboard's connection is gone: the store opens here


def test_launch_runs_no_command_unless_the_dashboard_was_started_with_the_script_engine(tmp_path, monkeypatch):
    """Issue 22: the script engine runs whatever command is typed, so it is off in the dashboard."""
    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path / "runs"))
    monkeypatch.delenv("AGENTRL_ALLOW_SCRIPT_ENGINE", raising=False)
    at = app("pages/1_Launch.py").run()
    next(s for s in at.selectbox if s.label == "Preset").set_value("script-custom-loop").run()
    assert any(e.value.startswith("The script engine runs the command typed here, so it is off") for e in at.error)
    assert next(b for b in at.button if b.label == "Start run").disabled
    monkeypatch.setenv("AGENTRL_ALLOW_SCRIPT_ENGINE", "1")
    at.run()
    no_errors(at)
    assert not next(b for b in at.button if b.label == "Start run").disabled


def test_a_full_disk_is_said_as_such_on_the_pages_and_they_recover_once_space_is_freed(tmp_path, monkeypatch):
    """Issue 22, finding 5: DuckDB gives up on the store after a checkpoint that found the disk
    full; the pages say the disk is full (not "damaged, rebuild"), and once space is freed the
    dashboard opens the store again by itself, with nothing lost."""
    import subprocess

    import duckdb
    from conftest import _train
    from helpers import fill_disk, wait_for

    import ui
    from agentrl.store import curation, queries
    from agentrl.store.ingest import ingest_once

    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("a full disk needs a tmpfs (root)")
    try:
        runs_dir = disk / "runs"
        runs_dir.mkdir()
        run_id = _train(runs_dir, "refund-outcome")
        ingest_once(runs_dir)
        monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))
        at = app("app.py").run()
        no_errors(at)
        svc = ui.services()
        curation.annotate(store(runs_dir), run_id, note="written before the disk filled")
        filler = fill_disk(disk)
        with pytest.raises(duckdb.Error, match="No space left on device"):
            svc.maintenance.checkpoint()
        assert wait_for(lambda: svc.loop.last_error, timeout=30)
        assert svc.loop.last_error.startswith("the disk is full: ")  # the sidebar's line, not "damaged, rebuild"
        at.run()  # still full: the store is opened again from its file and its log, nothing lost
        assert ui.services() is not svc
        assert not [line for line in [e.value for e in at.error] + [w.value for w in at.warning]
                    if "the disk is full" not in line or "damaged" in line]
        assert queries.run_notes(ui.cursor(), run_id)["note"] == "written before the disk filled"
        filler.unlink()
        ui.services().maintenance.checkpoint()  # room again: the log goes into the file
        second = _train(runs_dir, "refund-guarded")  # and new runs come in, without a restart
        assert wait_for(lambda: set(at.run().dataframe[0].value["run_id"]) == {run_id, second}, timeout=30)
        no_errors(at)
    finally:
        import streamlit as st

        st.cache_resource.clear()
        subprocess.run(["umount", "-l", str(disk)], check=True)


def test_delete_is_bound_to_the_runs_selected_never_to_a_row_of_a_table_that_changed(trained_runs_dir):
    """Issue 22, finding 6: a run started meanwhile shifts the table; the tick must not carry over
    to whatever run now sits in the selected row. Delete removes the run selected, or nothing."""
    from conftest import _train
    from helpers import wait_for

    from agentrl.store import queries

    at = app("app.py").run()
    no_errors(at)
    guarded, outcome = at.dataframe[0].value["run_id"]  # newest first: the guarded run is the top row
    at.session_state[at.dataframe[0].key] = {"selection": {"rows": [0], "columns": []}}  # a click on the top row
    at.run()
    (tick,) = [c for c in at.checkbox if c.label.startswith("Yes, delete")]
    assert tick.label == f"Yes, delete {guarded}"
    tick.check().run()
    assert [b for b in at.button if b.label == "Delete" and not b.disabled]

    newer = _train(trained_runs_dir, "refund-outcome")  # a run started meanwhile: the new top row
    assert wait_for(lambda: newer in set(queries.list_runs(store(trained_runs_dir))["run_id"]), timeout=30)
    at.run()
    assert list(at.dataframe[0].value["run_id"]) == [newer, guarded, outcome]
    for button in [b for b in at.button if b.label == "Delete" and not b.disabled]:
        button.click().run()
    left = set(queries.list_runs(store(trained_runs_dir))["run_id"])
    assert {newer, outcome} <= left  # never a run other than the one selected
    if guarded in left:  # refused: the selection starts again, asking for a new tick
        assert any("select again" in i.value for i in at.info)
        assert not [c for c in at.checkbox if c.label.startswith("Yes, delete") and c.value]


def test_hardware_page_sets_each_training_process_gpu_peak_against_the_budget(tmp_path, monkeypatch):
    """A run that recorded two GPUs' peaks (rows as the engine writes them; no GPU here): the page
    shows one line per rank, the budget's per-GPU estimate beside the measured peaks."""
    from agentrl.record.hardware import gpu_rank_rows
    from agentrl.record.run import Run
    from agentrl.record.rundir import new_run
    from agentrl.store.ingest import ingest_once

    runs_dir = tmp_path / "runs"
    run_dir = new_run(runs_dir, "two-gpus", "trl", "guarded", {}, total_steps=1)
    with Run(run_dir, total_steps=1) as run:
        run.log_budget([{"run_id": run.run_id, "component": "total", "bytes": 30 * 10**9, "source": "estimate"}])
        run.log_budget(gpu_rank_rows(run.run_id, [
            {"allocated_bytes": 9 * 10**9, "reserved_bytes": 12 * 10**9, "device_total_bytes": 80 * 10**9},
            {"allocated_bytes": 8 * 10**9, "reserved_bytes": 10 * 10**9, "device_total_bytes": 80 * 10**9}],
            estimate_bytes=11 * 10**9))
        run.finish("succeeded")
    ingest_once(runs_dir)
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))
    at = app("pages/5_Hardware.py", run=run_dir.run_id).run()
    no_errors(at)
    gpus = next(d.value for d in at.dataframe if "peak allocated" in d.value.columns)
    assert gpus.to_dict("records") == [
        {"rank": 0, "estimate": "11.0 GB", "peak allocated": "9.0 GB", "peak reserved": "12.0 GB", "GPU memory": "80.0 GB"},
        {"rank": 1, "estimate": "11.0 GB", "peak allocated": "8.0 GB", "peak reserved": "10.0 GB", "GPU memory": "80.0 GB"}]
