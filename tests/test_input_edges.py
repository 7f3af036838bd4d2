"""The input edges of issue 12 (finding 7, and finding 3's config side), each through the real CLI:
one error line, exit status 2, nothing written; and a config that validates is one the record
and the store can hold, end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.record.rundir import list_run_dirs
from agentrl.store import queries
from agentrl.store.ingest import connect
from helpers import agentrl, ok


def config_file(text: str):
    def build(tmp: Path) -> Path:
        path = tmp / "edge.json"
        path.write_text(text)
        return path
    return build


TRAIN_EDGES = {
    # name: (arguments after `train`, built from tmp_path; text the one error line holds)
    "empty-preset": (lambda tmp: ["--preset", ""], "unknown preset ''; choose one of"),
    "preset-as-a-path": (lambda tmp: ["--preset", "../../x"], "unknown preset '../../x'"),
    "preset-as-an-absolute-path": (lambda tmp: ["--preset", str(config_file('{"rounds": 1}')(tmp))], "unknown preset"),
    "rounds-true": (lambda tmp: ["--config", config_file('{"rounds": true}')(tmp)], "rounds: Input should be a valid integer (got True)"),
    "duplicate-keys": (lambda tmp: ["--config", config_file('{"rounds": 3, "rounds": 4}')(tmp)], "gives 'rounds' twice"),
    "nested-duplicate-keys": (lambda tmp: ["--config", config_file('{"tasks": [{"task_id": "a", "task_id": "b", "amount": 1}]}')(tmp)],
                              "gives 'task_id' twice"),
    "nan": (lambda tmp: ["--config", config_file('{"lr": NaN}')(tmp)], "must be a finite number (got nan)"),
    "infinity": (lambda tmp: ["--config", config_file('{"step_delay": Infinity}')(tmp)], "must be a finite number (got inf)"),
    "amount-past-int32": (lambda tmp: ["--config", config_file('{"tasks":[{"task_id":"a","amount":3000000000}],"rounds":3}')(tmp)],
                          "less than or equal to 2147483647 (got 3000000000)"),
    "float-for-an-int": (lambda tmp: ["--config", config_file('{"rounds": 2.0}')(tmp)], "rounds"),
    "string-for-a-number": (lambda tmp: ["--config", config_file('{"lr": "0.1"}')(tmp)], "lr"),
    "step-delay-nan": (lambda tmp: ["--preset", "refund-outcome", "--step-delay", "nan"], "must be a finite number (got nan)"),
    "empty-name": (lambda tmp: ["--preset", "refund-outcome", "--name", ""], "name: String should have at least 1 character"),
    "config-not-utf8": (lambda tmp: ["--config", _bytes(tmp, b'{"rounds": \xff}')], "is not UTF-8 text"),
}


def _bytes(tmp: Path, content: bytes) -> Path:
    path = tmp / "binary.json"
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("case", list(TRAIN_EDGES))
def test_a_train_input_edge_is_one_error_line_and_writes_nothing(tmp_path, case):
    build, expected = TRAIN_EDGES[case]
    args = build(tmp_path)
    runs_dir = tmp_path / "runs"
    before = sorted(tmp_path.rglob("*"))
    one_error_line(agentrl("train", *args, "--runs-dir", runs_dir), expected)
    assert sorted(tmp_path.rglob("*")) == before and not runs_dir.exists()


BUDGET_EDGES = {
    "model-is-a-file": (lambda tmp: ["--model", _bytes(tmp, b"{}")], "is a file; give the model's folder"),
    "targets-comma": (lambda tmp: ["--model", tmp, "--targets", ","], "--targets ',' names no module"),
    "machine-gb-0": (lambda tmp: ["--model", tmp, "--machine-gb", "0"], "--machine-gb must be a positive number of GB, not 0.0"),
    "machine-gb-nan": (lambda tmp: ["--model", tmp, "--machine-gb", "nan"], "--machine-gb must be a positive number of GB, not nan"),
    "rank-0": (lambda tmp: ["--model", tmp, "--rank", "0"], "--rank must be at least 1"),
}


@pytest.mark.parametrize("case", list(BUDGET_EDGES))
def test_a_budget_input_edge_is_one_error_line(tmp_path, case):
    build, expected = BUDGET_EDGES[case]
    one_error_line(agentrl("budget", *build(tmp_path)), expected)


def test_a_config_at_the_edges_of_what_validates_trains_and_lands_in_the_store(tmp_path):
    """Finding 3: what validates is what the record holds. The largest amount, a long unicode
    task id and the largest seed go through a whole run into DuckDB, nothing refused at a flush."""
    runs_dir = tmp_path / "runs"
    long_id = "ü-" * 100
    config = {"rounds": 2, "group_size": 2, "seed": 2**63 - 1, "eval_every": 0,
              "tasks": [{"task_id": long_id, "amount": 2**31 - 1}, {"task_id": "zero", "amount": 0}],
              "eval_tasks": [{"task_id": "e", "amount": 2**31 - 1, "start_state": "recover"}]}
    path = tmp_path / "edge.json"
    path.write_text(json.dumps(config))
    result = ok(agentrl("train", "--config", path, "--runs-dir", runs_dir, "--quiet"))
    assert "succeeded" in result.stdout
    (run,) = list_run_dirs(runs_dir)
    con = connect(runs_dir)
    try:
        amounts = con.execute("SELECT DISTINCT task_id, amount FROM trajectories WHERE run_id = ? ORDER BY amount",
                              [run.run_id]).fetchall()
        assert amounts == [("zero", 0), (long_id, 2**31 - 1)]
        assert queries.trajectory_count(con, run.run_id) == 2 * 2 * 2
    finally:
        con.close()


# --- issue 22, finding 6: each of these inputs ended in a traceback ---------------------------------


def one_error_line(result, *expected: str) -> str:
    """Exit 2, one `error: ` line on stderr naming each of `expected`, nothing on stdout."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stdout == "", result.stdout
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and all(text in line for text in expected), line
    return line


@pytest.mark.parametrize("key", ["²/1", "1/²", "١/2", "99999999999999999999/1", "1/2/3", "a/1", " 1/2"])
def test_review_show_of_a_key_that_is_not_two_ascii_numbers_is_one_line(trained_pair, key):
    runs_dir, ids = trained_pair
    one_error_line(agentrl("review", "show", ids["outcome"], key, "--runs-dir", runs_dir), f"trajectory {key!r}: give STEP/IDX")


@pytest.mark.parametrize("command", ["ingest", "check", "rebuild"])
def test_a_directory_named_like_the_store_is_one_line_and_left_alone(trained_pair, command):
    runs_dir, _ = trained_pair
    store = runs_dir / "agentrl.duckdb"
    store.unlink()
    (store / "mine").mkdir(parents=True)
    one_error_line(agentrl(command, "--runs-dir", runs_dir), f"{store} is a directory, not the store")
    assert (store / "mine").is_dir()


def test_a_reader_that_stops_early_ends_the_command_quietly(trained_pair):
    """`gate RUN | head`: the reader closes the pipe; the command ends with SIGPIPE's status and no traceback."""
    import os
    import subprocess
    import sys

    from helpers import REPO_ROOT

    runs_dir, ids = trained_pair
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes a byte
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "agentrl", "gate", ids["outcome"], "--runs-dir", str(runs_dir)],
                            cwd=REPO_ROOT, env=env, stdout=write, stderr=subprocess.PIPE, text=True, timeout=120)
    os.close(write)
    assert (result.returncode, result.stderr) == (141, "")


def test_an_argument_argparse_refuses_is_one_line(tmp_path):
    result = agentrl("review", "show", "--runs-dir", tmp_path)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("python -m agentrl review show: error: the following arguments are required: run_id")


def test_a_path_the_file_system_refuses_is_one_line(tmp_path):
    """`bench --work-dir` under a file: the OSError is one line, as every other refusal."""
    (tmp_path / "a-file").write_text("")
    one_error_line(agentrl("bench", "--quick", "--work-dir", tmp_path / "a-file" / "x", "--out", tmp_path / "out"),
                   "Not a directory", str(tmp_path / "a-file" / "x"))
