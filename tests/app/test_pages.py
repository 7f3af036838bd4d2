"""AppTest for every page: no exception, the expected charts and tables, launch validation."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from agentrl.config import load_preset
from agentrl.launcher import create_run
from agentrl.record.rundir import RUNS_DIR_ENV
from agentrl.engines.tabular.engine import run_tabular
from agentrl.store.ingest import ingest_once

ROOT = Path(__file__).resolve().parents[2]


def _train(runs_dir: Path, preset: str) -> str:
    run = create_run(runs_dir, load_preset(preset))
    run_tabular(load_preset(preset), run, log=lambda message: None)
    return run.run_id


@pytest.fixture
def trained_runs_dir(tmp_path, monkeypatch) -> Path:
    """A runs directory holding the two preset runs, ingested; the app reads it from the env."""
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    _train(runs_dir, "refund-outcome")
    _train(runs_dir, "refund-guarded")
    ingest_once(runs_dir)
    # The dashboard is configured by environment, exactly as `make run` configures it.
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))
    return runs_dir


def _app(path: str) -> AppTest:
    # Start from the entrypoint, as a browser does, so page links resolve as in the real app.
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    if path != "app.py":
        at.switch_page(path)
    return at


def _no_errors(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def test_overview_lists_runs_newest_first(trained_runs_dir):
    at = _app("app.py").run()
    _no_errors(at)
    table = at.dataframe[0].value
    assert list(table["name"]) == ["refund-guarded", "refund-outcome"]
    assert set(table["status"]) == {"succeeded"}


def test_overview_on_an_empty_store_points_to_launch(tmp_path, monkeypatch):
    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path / "empty"))
    at = _app("app.py").run()
    _no_errors(at)
    assert any("No runs yet" in info.value for info in at.info)


def test_live_page_draws_every_chart_for_the_newest_run(trained_runs_dir):
    at = _app("pages/2_Live.py").run()
    _no_errors(at)
    charts = at.get("plotly_chart")
    # success, violation, vetoes, reward components, action distribution, memory, updates, and the
    # engine metrics (a tabular run logs its environment workers and the onset monitor's signals)
    assert len(charts) == 8
    progress = at.get("progress")[0]
    assert "Step 30 of 30" in progress.proto.text
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["vetoed rollouts"] == "25"  # the guarded run is the newest
    assert metrics["vetoed updates (audit)"] == "0"


def test_live_page_shows_the_run_named_in_the_url(trained_runs_dir):
    outcome_id = sorted(p.name for p in trained_runs_dir.iterdir() if "outcome" in p.name)[0]
    at = _app("pages/2_Live.py")
    at.query_params["run"] = outcome_id
    at.run()
    _no_errors(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["vetoed rollouts"] == "0"
    assert metrics["violation (last step)"] == "50%"


def test_live_page_on_an_empty_store(tmp_path, monkeypatch):
    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path / "empty"))
    at = _app("pages/2_Live.py").run()
    _no_errors(at)
    assert any("No runs yet" in info.value for info in at.info)


def test_launch_refuses_an_invalid_config_and_starts_nothing(tmp_path, monkeypatch):
    runs_dir = tmp_path / "runs"
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))
    at = _app("pages/1_Launch.py").run()
    _no_errors(at)
    next(n for n in at.number_input if n.label == "Rounds").set_value(0).run()
    assert any("rounds" in e.value and "greater than 0" in e.value for e in at.error)
    start = next(b for b in at.button if b.label == "Start run")
    assert start.disabled  # a browser user cannot start it (AppTest refuses to click it, as a browser would)
    assert not at.exception
    assert [p for p in runs_dir.iterdir() if p.is_dir()] == []


def test_launch_starts_the_outcome_vs_guarded_pair(tmp_path, monkeypatch):
    runs_dir = tmp_path / "runs"
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))
    at = _app("pages/1_Launch.py").run()
    _no_errors(at)
    delay = next(n for n in at.number_input if n.label == "Step delay (s)")
    delay.set_value(0.0)
    pair = next(b for b in at.button if b.label == "Start outcome-vs-guarded pair")
    pair.click().run()
    _no_errors(at)
    assert any("Started" in s.value for s in at.success)
    run_dirs = sorted(p for p in runs_dir.iterdir() if p.is_dir())
    assert sorted(p.name.split("-", 2)[2].rsplit("-", 1)[0] for p in run_dirs) == ["refund-guarded", "refund-outcome"]
    # They are real processes: wait for both to finish on their own.
    deadline = time.monotonic() + 60
    statuses = []
    while time.monotonic() < deadline:
        statuses = [json.loads((p / "status.json").read_text()).get("status") for p in run_dirs]
        if all(s == "succeeded" for s in statuses):
            break
        time.sleep(0.2)
    assert statuses == ["succeeded", "succeeded"]


def test_an_unwritable_runs_dir_is_one_clear_message_on_every_page(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(RUNS_DIR_ENV, str(blocker / "runs"))
    for path in ("app.py", "pages/1_Launch.py", "pages/2_Live.py"):
        at = _app(path).run()
        assert not at.exception, [e.value for e in at.exception]
        assert [e.value for e in at.error] == [
            f"The run store is unavailable: runs directory '{blocker / 'runs'}' cannot be written: Not a directory"
        ]


# --- Compare and Review -----------------------------------------------------------------------


@pytest.fixture
def pair_app_env(trained_pair, monkeypatch):
    runs_dir, ids = trained_pair
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))
    return runs_dir, ids


def _array(value) -> list:
    """A plotly JSON array: a list, or typed binary ({'dtype', 'bdata'}) as plotly writes numpy data."""
    import base64

    import numpy as np

    if isinstance(value, dict) and "bdata" in value:
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).tolist()
    return list(value or [])


def _figures(at: AppTest) -> list[dict]:
    """Every plotly figure on the page: its title and each trace's name, x and y as lists."""
    figures = []
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        figures.append({
            "layout": {"title": {"text": spec["layout"].get("title", {}).get("text", "")}},
            "data": [{"name": t.get("name"), "x": _array(t.get("x")), "y": _array(t.get("y"))} for t in spec["data"]],
        })
    return figures


def _no_failures(at: AppTest) -> None:
    """No exception and no section that could not be drawn (a failing gate is an expected error box)."""
    assert not at.exception, [e.value for e in at.exception]
    assert not [e.value for e in at.error if e.value.startswith("Could not")]


def _gate_table(at: AppTest):
    (table,) = [d.value for d in at.dataframe if list(d.value.columns) == ["check", "result", "figure", "detail"]]
    return table


def _store(runs_dir):
    """A read connection on the store the app holds: the app's own cached connection."""
    import ui

    return ui._services(str(runs_dir.resolve())).con.cursor()


def test_compare_defaults_to_the_pair_and_shows_the_known_high_difference(pair_app_env):
    runs_dir, ids = pair_app_env
    at = _app("pages/3_Compare.py").run()
    _no_errors(at)
    assert at.multiselect[0].value == [ids["outcome"], ids["guarded"]]
    figures = _figures(at)
    titles = [f["layout"]["title"]["text"] for f in figures]
    (diff,) = [f for f, t in zip(figures, titles) if t.startswith("Difference at known_high, step 30")]
    by_action = dict(zip(diff["data"][0]["x"], map(float, diff["data"][0]["y"])))
    assert by_action["refund"] == pytest.approx(0.009 - 0.966, abs=1e-3)  # guarded − outcome
    (bars,) = [f for f, t in zip(figures, titles) if t.startswith("Action distribution at known_high")]
    refund = {trace["name"]: float(dict(zip(trace["x"], trace["y"]))["refund"]) for trace in bars["data"]}
    assert refund == {"refund-outcome (outcome)": pytest.approx(0.966, abs=5e-4),
                      "refund-guarded (guarded)": pytest.approx(0.009, abs=5e-4)}
    assert sum(t.endswith("drift at known_high") for t in titles) == 2
    assert {"Success rate", "Violation rate", "Vetoed rollouts per step", "Clipped transitions per epoch (run total)",
            "Mean reward components per step"} <= set(titles)


def test_compare_step_slider_moves_the_bars_to_the_cloned_start(pair_app_env):
    at = _app("pages/3_Compare.py").run()
    at.slider[0].set_value(0).run()
    _no_errors(at)
    (diff,) = [f for f in _figures(at) if f["layout"]["title"]["text"].startswith("Difference at known_high, step 0")]
    assert all(abs(float(v)) < 1e-12 for v in diff["data"][0]["y"])  # both runs start from the same cloned policy


def test_compare_held_out_table_puts_both_runs_side_by_side(pair_app_env):
    at = _app("pages/3_Compare.py").run()
    table = at.dataframe[0].value
    assert list(table["task_id"]) == ["eval-high", "eval-low", "eval-recover-high", "eval-recover-low"]
    row = table.set_index("task_id").loc["eval-high"]
    assert row["refund-outcome (outcome): actions"] == "lookup, refund, finish"
    assert row["refund-guarded (guarded): actions"] == "lookup, request_approval, refund, finish"


def test_review_approve_appends_a_review(pair_app_env):
    runs_dir, ids = pair_app_env
    at = _app("pages/4_Review.py")
    at.query_params["run"] = ids["guarded"]
    at.run()
    _no_failures(at)
    opened = at.selectbox(key="open-trajectory").value
    at.button(key=f"approve-{opened}").click().run()
    _no_failures(at)
    assert any(m.value.startswith("Approved step") for m in at.success)
    step, idx = map(int, opened.split("/"))
    assert queries_review_history(runs_dir, ids["guarded"], step, idx) == [("approve", at.sidebar.text_input(key="reviewer").value)]


def queries_review_history(runs_dir, run_id, step, idx):
    from agentrl.store import queries

    history = queries.review_history(_store(runs_dir), run_id, step, idx)
    return list(zip(history["verdict"], history["reviewer"]))


def test_review_reject_without_a_note_is_refused_with_a_message(pair_app_env):
    runs_dir, ids = pair_app_env
    at = _app("pages/4_Review.py")
    at.query_params["run"] = ids["guarded"]
    at.run()
    opened = at.selectbox(key="open-trajectory").value
    at.button(key=f"reject-{opened}").click().run()
    assert not at.exception
    assert any("reject needs a note" in e.value for e in at.error)
    step, idx = map(int, opened.split("/"))
    assert queries_review_history(runs_dir, ids["guarded"], step, idx) == []
    at.text_area(key=f"note-{ids['guarded']}-{opened}").input("approves without asking").run()
    at.button(key=f"reject-{opened}").click().run()
    assert queries_review_history(runs_dir, ids["guarded"], step, idx)[0][0] == "reject"


def test_review_gate_outcome_fails_and_promote_without_reason_is_refused(pair_app_env):
    runs_dir, ids = pair_app_env
    at = _app("pages/4_Review.py")
    at.query_params["run"] = ids["outcome"]
    at.run()
    gate_table = _gate_table(at)
    row = gate_table.set_index("check").loc["zero held-out violations"]
    assert (row["result"], row["figure"]) == ("FAIL", "2 of 4 tasks violate")
    at.button(key="promote").click().run()
    assert any("gate fails" in e.value for e in at.error)
    from agentrl.store import queries

    assert queries.promotions(_store(runs_dir), ids["outcome"]).empty


def test_review_guarded_gate_passes_after_approving_top_k_and_promotes(pair_app_env):
    from agentrl.review import gate
    from agentrl.store import queries
    from agentrl.review import reviews as review

    runs_dir, ids = pair_app_env
    at = _app("pages/4_Review.py")
    at.query_params["run"] = ids["guarded"]
    at.run()
    con = _store(runs_dir)
    for row in queries.top_trajectories(con, ids["guarded"], 5, 3).itertuples():
        review.record_review(con, ids["guarded"], row.step, row.traj_idx, "approve", "alice")
    at.run()
    assert all(_gate_table(at)["result"] == "pass")
    at.button(key="promote").click().run()
    _no_failures(at)
    record = queries.promotions(_store(runs_dir), ids["guarded"])
    assert record["decision"].tolist() == ["promote"]
    assert (runs_dir / ids["guarded"] / gate.BUNDLE_DIR / "manifest.json").is_file()


def test_hardware_page_shows_memory_and_cpu_of_a_run_and_the_peaks_table(pair_app_env):
    runs_dir, ids = pair_app_env
    at = _app("pages/5_Hardware.py").run()
    _no_errors(at)
    titles = [f["layout"]["title"]["text"] for f in _figures(at)]
    assert titles[:2] == ["Memory", "CPU"]
    peaks = at.dataframe[-1].value
    assert set(peaks["run_id"]) == set(ids.values())
    assert (peaks["peak_rss_bytes"] > 10 * 2**20).all()


def test_launch_shows_the_lm_budget_and_refuses_a_run_that_cannot_fit(tmp_path, monkeypatch):
    runs_dir = tmp_path / "runs"
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))
    at = _app("pages/1_Launch.py").run()
    next(s for s in at.selectbox if s.label == "Preset").set_value("lm-refund-guarded").run()
    _no_errors(at)
    budget = next(c.value for c in at.code if "KV cache" in c.value)
    assert "Python + torch runtime" in budget and "free" in budget
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
    at = _app("pages/1_Launch.py").run()
    next(s for s in at.selectbox if s.label == "Preset").set_value("lm-refund-outcome").run()
    next(t for t in at.text_input if t.label == "Model directory").input(str(tmp_path / "no-model"))
    next(b for b in at.button if b.label == "Start run").click().run()
    assert any("does not exist" in e.value for e in at.error)
    assert not at.success


def test_review_without_a_reviewer_name_is_refused_with_a_message(pair_app_env):
    runs_dir, ids = pair_app_env
    at = _app("pages/4_Review.py")
    at.query_params["run"] = ids["guarded"]
    at.run()
    at.sidebar.text_input(key="reviewer").input("").run()
    opened = at.selectbox(key="open-trajectory").value
    at.button(key=f"approve-{opened}").click().run()
    assert not at.exception
    assert any(e.value.startswith("enter a reviewer name") for e in at.error)
    step, idx = map(int, opened.split("/"))
    assert queries_review_history(runs_dir, ids["guarded"], step, idx) == []
