"""AppTest for every page: no exception, the expected charts and tables, launch validation."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from agentrl.config import load_preset
from agentrl.launcher import create_run
from agentrl.rundir import RUNS_DIR_ENV
from agentrl.runner import run_tabular
from agentrl.store import ingest_once

ROOT = Path(__file__).resolve().parent.parent


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
    # success, violation, vetoes, reward components, action distribution, memory, updates
    assert len(charts) == 7
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
    at.number_input[0].set_value(0)  # rounds
    at.button[0].click().run()
    assert any("rounds" in e.value and "greater than 0" in e.value for e in at.error)
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
