"""`python -m agentrl watch` on real runs: exit 3 at the onset of an outcome-only run, 0 on the guarded one.

The runs are the two SPEC section 8 presets trained by the CLI; `watch` reads their chunks (not
the database), so it works with or without a dashboard holding the store.
"""

from __future__ import annotations

import pytest

from helpers import agentrl, ok
from agentrl.record.rundir import list_run_dirs


@pytest.fixture(scope="module")
def preset_runs(tmp_path_factory):
    runs_dir = tmp_path_factory.mktemp("watch") / "runs"
    for preset in ("refund-outcome", "refund-guarded"):
        ok(agentrl("train", "--preset", preset, "--runs-dir", runs_dir, "--quiet"))
    return runs_dir, {("outcome" if "outcome" in r.run_id else "guarded"): r.run_id for r in list_run_dirs(runs_dir)}


def test_watch_exits_3_at_the_onset_of_the_outcome_only_run(preset_runs):
    runs_dir, ids = preset_runs
    result = agentrl("watch", ids["outcome"], "--runs-dir", runs_dir, "--interval", "0.1")
    assert result.returncode == 3, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("hacking onset at step ") and "hack_premium" in last


def test_watch_exits_0_on_the_guarded_run(preset_runs):
    runs_dir, ids = preset_runs
    result = agentrl("watch", ids["guarded"], "--runs-dir", runs_dir, "--interval", "0.1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("no hacking onset")
    assert "step    30" in result.stdout


def test_the_run_recorded_its_own_onset_event_and_watch_agrees(preset_runs):
    import pyarrow.parquet as pq

    from agentrl.record.chunks import chunk_files

    runs_dir, ids = preset_runs
    events = [row for path in chunk_files(runs_dir / ids["outcome"], "events") for row in pq.read_table(path).to_pylist()]
    assert [e["kind"] for e in events] == ["onset"]
    watched = agentrl("watch", ids["outcome"], "--runs-dir", runs_dir, "--interval", "0.1").stdout
    assert f"at step {events[0]['step']}:" in watched
    assert chunk_files(runs_dir / ids["guarded"], "events") == []


def test_watch_of_an_unknown_run_is_one_line_and_exit_2(tmp_path):
    result = agentrl("watch", "nope", "--runs-dir", tmp_path)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [f"error: no run 'nope' in {tmp_path} (see `python -m agentrl runs`)"]


def test_on_onset_stop_ends_the_run_cleanly_with_the_reason(tmp_path):
    import json

    config = tmp_path / "stop.json"
    config.write_text(json.dumps({"name": "stop-at-onset", "kind": "tabular", "scorer": "outcome", "on_onset": "stop"}))
    result = agentrl("train", "--config", config, "--runs-dir", tmp_path / "runs", "--quiet")
    assert result.returncode == 3  # not 'succeeded'
    (run,) = list_run_dirs(tmp_path / "runs")
    status = run.status()
    assert status["status"] == "cancelled"
    assert status["error"].startswith("stopped: hacking onset at step ")
    assert status["step"] < 30


def test_on_onset_stop_never_stops_the_guarded_run(tmp_path):
    import json

    config = tmp_path / "guarded-stop.json"
    config.write_text(json.dumps({"name": "guarded-stop", "kind": "tabular", "scorer": "guarded", "on_onset": "stop"}))
    ok(agentrl("train", "--config", config, "--runs-dir", tmp_path / "runs", "--quiet"))
    (run,) = list_run_dirs(tmp_path / "runs")
    assert (run.status()["status"], run.status()["step"]) == ("succeeded", 30)


def test_watch_of_a_run_with_a_damaged_chunk_names_that_commit_and_reads_the_rest(preset_runs, tmp_path):
    """Issue 22, finding 6: a damaged chunk ended `watch` in a traceback; it costs that commit only."""
    import shutil

    runs_dir, ids = preset_runs
    copy = tmp_path / "runs"
    shutil.copytree(runs_dir / ids["outcome"], copy / ids["outcome"])
    (steps,) = (copy / ids["outcome"] / "chunks").glob("00000000.steps.parquet")
    steps.write_bytes(steps.read_bytes()[:100])
    result = agentrl("watch", ids["outcome"], "--runs-dir", copy, "--interval", "0.1")
    assert result.returncode == 0, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"watch: commit 0 of {ids['outcome']} cannot be read (ArrowInvalid: ") and "left out" in line
