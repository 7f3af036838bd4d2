"""Tests of agentrl/integrations/trackio.py and `python -m agentrl import-trackio`: a project written
by Trackio itself (installed for the tests, run offline) comes into the store whole."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap

import pytest

from helpers import agentrl, ok, store_rows

WRITE_PROJECT = textwrap.dedent("""
    import pandas as pd
    import trackio

    trackio.init(project="grpo-demo", name="run-a", config={"lr": 0.01, "model": "tiny", "reward_weights": [1.0, 0.5]})
    for step in (1, 2, 3):
        table = pd.DataFrame({"step": [step] * 2, "prompt": ["refund 20", "refund 80"], "completion": ["ok", "no"],
                              "length": [1.0, 0.5], "polite": [0.0, 1.0], "task_id": ["small", "large"],
                              "advantage": [0.7, -0.7]})
        trackio.log({"reward": 0.5 * step, "loss": 1.0 / step, "kl": float("nan"), "rewards/length/mean": 0.75,
                     "rewards/polite/mean": 0.5, "completions": trackio.Table(dataframe=table)}, step=step)
    trackio.finish()
    trackio.init(project="grpo-demo", name="run-b", config={"lr": 0.02})
    for step in (1, 2):
        trackio.log({"reward": 0.1 * step}, step=step)
    trackio.finish()
""")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """`grpo-demo.db`, written by trackio in a process of its own (offline)."""
    home = tmp_path_factory.mktemp("trackio")
    env = {**os.environ, "TRACKIO_DIR": str(home), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", WRITE_PROJECT], cwd=home, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    path = home / "grpo-demo.db"
    assert path.is_file(), list(home.iterdir())
    return path


def test_a_trackio_project_round_trips_into_the_store(project, runs_dir):
    before = hashlib.sha256(project.read_bytes()).hexdigest()
    result = ok(agentrl("import-trackio", project, "--runs-dir", runs_dir))
    assert "imported run-a: 3 steps, 6 completions" in result.stdout
    assert "imported run-b: 2 steps, 0 completions" in result.stdout
    assert hashlib.sha256(project.read_bytes()).hexdigest() == before  # read-only

    runs = {r[0]: r[1:] for r in store_rows(runs_dir, "SELECT name, kind, status, total_steps, config FROM runs")}
    assert set(runs) == {"run-a", "run-b"}
    kind, status, total, config = runs["run-a"]
    assert (kind, status, total) == ("script", "succeeded", 3)
    import json

    config = json.loads(config)
    assert (config["lr"], config["model"], config["trackio"]["project"]) == (0.01, "tiny", "grpo-demo")

    steps = store_rows(runs_dir, "SELECT step, mean_reward, metrics FROM steps JOIN runs USING (run_id) "
                                 "WHERE name = 'run-a' ORDER BY step")
    assert [(s, m) for s, m, _ in steps] == [(1, 0.5), (2, 1.0), (3, 1.5)]
    assert steps[1][2] == {"reward": 1.0, "loss": 0.5, "rewards/length/mean": 0.75, "rewards/polite/mean": 0.5}  # NaN left out
    trajectories = store_rows(runs_dir, "SELECT step, traj_idx, task_id, prompt, completion, components, reward, advantages "
                                        "FROM trajectories ORDER BY step, traj_idx")
    assert len(trajectories) == 6
    assert trajectories[0] == (1, 0, "small", "refund 20", "ok", {"length": 1.0, "polite": 0.0}, 1.0, [0.7])
    # TRL's reward: the weighted sum with the run's reward_weights (1.0, 0.5).
    assert trajectories[1][6] == pytest.approx(0.5 + 0.5 * 1.0)
    assert store_rows(runs_dir, "SELECT count(*) FROM hardware") == [(0,)]  # the importer's own process is not the run's


def test_importing_again_adds_nothing(project, runs_dir):
    ok(agentrl("import-trackio", project, "--runs-dir", runs_dir))
    again = ok(agentrl("import-trackio", project, "--runs-dir", runs_dir))
    assert again.stdout.count("already imported") == 2
    assert store_rows(runs_dir, "SELECT count(*) FROM runs") == [(2,)]
    assert store_rows(runs_dir, "SELECT count(*) FROM steps") == [(5,)]


@pytest.mark.parametrize(("make", "message"), [
    (lambda tmp: tmp / "missing.db", "is not a file"),
    (lambda tmp: (tmp / "text.db").write_text("not sqlite") and tmp / "text.db", "cannot read"),
])
def test_a_file_that_is_not_a_trackio_project_is_one_line_and_nothing_is_written(tmp_path, runs_dir, make, message):
    result = agentrl("import-trackio", make(tmp_path), "--runs-dir", runs_dir)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not runs_dir.exists() or list(runs_dir.iterdir()) == []


def test_a_sqlite_file_without_trackio_tables_is_refused(tmp_path, runs_dir):
    import sqlite3

    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    result = agentrl("import-trackio", other, "--runs-dir", runs_dir)
    assert result.returncode == 2 and "has no metrics table; it is not a Trackio project" in result.stderr


# --- issue 22, finding 6: a row agentrl cannot take costs that row, never the import -----------------


def trackio_file(path, rows, configs=()):
    """A Trackio project file of `rows` (run_name, step, metrics as text or bytes), in Trackio's own
    table layout, built by code (Trackio stores whatever SQLite takes)."""
    import sqlite3

    con = sqlite3.connect(path)
    con.execute("CREATE TABLE metrics (id INTEGER PRIMARY KEY AUTOINCREMENT, timestamp TEXT, run_name TEXT, step INTEGER, "
                "metrics TEXT)")
    con.execute("CREATE TABLE configs (id INTEGER PRIMARY KEY AUTOINCREMENT, run_name TEXT, config TEXT, created_at TEXT)")
    con.executemany("INSERT INTO metrics (timestamp, run_name, step, metrics) VALUES ('2025-01-01T00:00:00', ?, ?, ?)", rows)
    con.executemany("INSERT INTO configs (run_name, config, created_at) VALUES (?, ?, '2025-01-01T00:00:00')", configs)
    con.commit()
    con.close()
    return path


@pytest.mark.parametrize(("step", "metrics"), [
    (None, '{"reward": 0.6}'),
    ("abc", '{"reward": 0.6}'),
    (2**40, '{"reward": 0.6}'),
    (2.5, '{"reward": 0.6}'),
    (2, b'{"reward": "\xff\xfe"}'),
    (2, "not json"),
])
def test_a_row_with_a_step_or_metrics_agentrl_cannot_take_is_left_out_and_counted(tmp_path, runs_dir, step, metrics):
    project = trackio_file(tmp_path / "odd.db", [("r", 1, '{"reward": 0.5}'), ("r", step, metrics), ("r", 3, '{"reward": 0.7}')])
    result = ok(agentrl("import-trackio", project, "--runs-dir", runs_dir))
    assert "imported r: 2 steps" in result.stdout and "left out 1 rows whose step" in result.stdout
    assert "Traceback" not in result.stderr
    assert store_rows(runs_dir, "SELECT step, mean_reward FROM steps ORDER BY step") == [(1, 0.5), (3, 0.7)]


def test_a_value_past_any_float_and_config_bytes_that_are_not_utf8_are_left_out(tmp_path, runs_dir):
    project = trackio_file(tmp_path / "odd.db", [("r", 1, '{"reward": 0.5, "huge": 1' + "0" * 400 + "}")],
                           configs=[("r", b'{"lr": "\xff"}')])
    result = ok(agentrl("import-trackio", project, "--runs-dir", runs_dir))
    assert "imported r: 1 steps" in result.stdout and "left out 1 values" in result.stdout
    assert store_rows(runs_dir, "SELECT step, metrics FROM steps") == [(1, {"reward": 0.5})]


GROWING = textwrap.dedent("""
    import sys
    import pandas as pd
    import trackio

    first = sys.argv[1] == "first"
    trackio.init(project="growing", name="long", resume="allow" if first else "must")
    for step in ((1, 2) if first else (3, 4)):
        table = pd.DataFrame({"prompt": ["refund 20", "refund 80"], "completion": ["ok", "no"], "reward": [1.0, 0.25],
                              "task_id": ["small", "large"]})
        trackio.log({"reward": 0.5 * step, "completions": trackio.Table(dataframe=table)}, step=step)
    trackio.finish()
""")


def test_a_run_that_grew_after_its_import_is_followed_and_a_tables_reward_column_is_the_reward(tmp_path, runs_dir):
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path), "HF_HUB_OFFLINE": "1"}

    def trackio_session(which: str) -> None:
        done = subprocess.run([sys.executable, "-c", GROWING, which], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]

    trackio_session("first")
    assert "imported long: 2 steps, 4 completions" in ok(agentrl("import-trackio", tmp_path / "growing.db", "--runs-dir", runs_dir)).stdout
    trackio_session("again")  # resume="must": the same Trackio run logs steps 3 and 4
    again = ok(agentrl("import-trackio", tmp_path / "growing.db", "--runs-dir", runs_dir))
    assert "followed long: 2 new steps, 4 completions" in again.stdout
    assert "already imported" in ok(agentrl("import-trackio", tmp_path / "growing.db", "--runs-dir", runs_dir)).stdout

    assert store_rows(runs_dir, "SELECT step, mean_reward FROM steps ORDER BY step") == [(1, 0.5), (2, 1.0), (3, 1.5), (4, 2.0)]
    assert store_rows(runs_dir, "SELECT status, total_steps FROM runs") == [("succeeded", 4)]
    rewards = store_rows(runs_dir, "SELECT step, list(reward ORDER BY traj_idx) FROM trajectories GROUP BY step ORDER BY step")
    assert rewards == [(step, [1.0, 0.25]) for step in (1, 2, 3, 4)]  # the table's own reward column, not 0
