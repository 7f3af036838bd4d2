"""Property tests (hypothesis) over configs, run files and CLI arguments: whatever comes in, the
answer is a clean one-line error or a valid run, never a traceback or a stray file (issue 12).

Configs: any values are a one-line ConfigError or a config every row of which the record and the
store can hold. Run files: any bytes in run.json or status.json cost that run only, in `runs`,
reconcile and ingest. CLI arguments: `budget`, `export`, `ingest`, `check` and `runs` in process, then every
subcommand's arguments generated from the parser itself (issue 22); `train` through the real CLI
in a subprocess (slow), where a valid config must also run. Trackio files with rows of any step
and metrics are an import of the valid rows or one line.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agentrl.cli import main
from agentrl.config import ConfigError, make_config
from agentrl.engines.registry import ENGINES
from agentrl.launcher import Launcher
from agentrl.record.rows import EvalRecord, RecordError, TrajectoryRecord, to_arrow
from agentrl.record.rundir import create_run_dir, list_run_dirs
from agentrl.store.ingest import Ingestor, connect
from helpers import REPO_ROOT

FIELDS = sorted({name for engine in ENGINES.values() for name in engine.config_type.model_fields})
EDGE_NUMBERS = st.sampled_from([0, 1, -1, 2, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 0.5, 1e-300, 1e300, -0.0,
                                math.nan, math.inf, -math.inf, True, False])
SCALARS = st.none() | st.booleans() | EDGE_NUMBERS | st.integers() | st.floats() | st.text(max_size=12)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                      max_leaves=8)
TASK = st.fixed_dictionaries({"task_id": st.text(max_size=8) | SCALARS, "amount": EDGE_NUMBERS | st.integers()},
                             optional={"start_state": st.sampled_from(["start", "recover", "known_high", "?"]) | SCALARS})
CONFIG_VALUES = st.dictionaries(
    st.sampled_from(FIELDS + ["bogus"]),
    VALUES | st.lists(TASK, max_size=3),
    max_size=5,
).map(lambda values: values | {"kind": values["kind"]} if isinstance(values.get("kind"), str) else values)
KIND = st.sampled_from(sorted(ENGINES))


def _fits_the_record(config) -> None:
    """Every task a config names becomes rows the store's tables can take."""
    for name in ("tasks", "eval_tasks", "expert_tasks"):
        for i, task in enumerate(getattr(config, name, []) or []):
            row = TrajectoryRecord(step=1, traj_idx=i, task_id=task.task_id, reward=0.0, amount=task.amount)
            to_arrow("trajectories", [row], run_id="r")
            to_arrow("evals", [EvalRecord(1, "held_out", task.task_id, [], True, False)], run_id="r")
    json.loads(config.to_json())


@settings(max_examples=300, deadline=None)
@given(values=CONFIG_VALUES | st.deferred(lambda: TRAIN_VALUES), kind=st.none() | KIND)
def test_any_config_values_are_one_error_line_or_a_config_the_record_can_hold(values, kind):
    if kind is not None:
        values = {**values, "kind": kind}
    try:
        config = make_config(**values)
    except ConfigError as error:
        event("refused")
        assert "\n" not in str(error) and str(error), values
        return
    event("valid")
    _fits_the_record(config)
    assert make_config(**json.loads(config.to_json())) == config  # what is saved loads back the same


# --- run files ----------------------------------------------------------------------------------

RUN_ID = "20260101-000000-prop-0000"
FILE_CONTENT = st.binary(max_size=48) | VALUES.map(lambda v: json.dumps(v, allow_nan=True).encode()) | st.fixed_dictionaries(
    {"status": st.sampled_from(["running", "succeeded", "queued", "x"])},
    optional={"pid": VALUES, "create_time": VALUES, "step": VALUES, "total_steps": VALUES, "ended_at": VALUES},
).map(lambda v: json.dumps(v, allow_nan=True).encode())


@pytest.mark.slow  # each example creates a store: about half a second
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["run.json", "status.json", "launch.json"]), content=FILE_CONTENT)
def test_any_bytes_in_a_run_file_cost_that_run_only(name, content):
    with tempfile.TemporaryDirectory() as tmp:
        runs_dir = Path(tmp)
        good = create_run_dir(runs_dir, "20260101-000001-good-0000", {"run_id": "good", "name": "good", "config": {}})
        good.update_status(status="succeeded")
        bad = create_run_dir(runs_dir, RUN_ID, {"run_id": RUN_ID, "name": "bad", "config": {}})
        (bad.root / name).write_bytes(content)
        Launcher(runs_dir).reconcile()
        out, err, code = run_main(["runs", "--runs-dir", str(runs_dir)])
        assert code == 0 and "Traceback" not in err and "good" in out
        con = connect(runs_dir)
        try:
            Ingestor(con, runs_dir, log=lambda message: None).ingest()
            assert con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [good.run_id]).fetchone()[0] == 1
        finally:
            con.close()


# --- CLI arguments -------------------------------------------------------------------------------


def run_main(argv: list[str]) -> tuple[str, str, int]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse's own usage errors
            code = exit_.code
    return out.getvalue(), err.getvalue(), code


ARG = st.sampled_from(["", " ", ",", "0", "-1", "nan", "inf", "1e999", "abc", "..", "../../x", "/", "/dev/null",
                       "\u00fc", "q_proj,", ",v_proj", "16", "2", "--help-not"]) | st.text(max_size=6)


def clean(out: str, err: str, code: int) -> None:
    """An answer (exit 0, or budget's 1 for "does not fit" with its one error line), or one error
    line: ours (`error: ...`) or argparse's usage error (`python -m agentrl X: error: ...`)."""
    assert "Traceback" not in err, err
    assert code in (0, 1, 2), (code, err)
    if code == 0:
        assert out.strip() and not err.strip(), (out, err)
        return
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") or ": error: " in last, err
    if last.startswith("error: "):
        assert len(err.strip().splitlines()) == 1, err


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rank=ARG, targets=ARG, rollouts=ARG, tokens=ARG, machine=ARG, use_file=st.booleans())
def test_any_budget_arguments_are_a_table_or_one_error(tmp_path, rank, targets, rollouts, tokens, machine, use_file):
    model = tmp_path / ("model.json" if use_file else "model")
    if use_file:
        model.write_text("{}")
    else:
        model.mkdir(exist_ok=True)
        (model / "config.json").write_text(json.dumps({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                                                       "num_attention_heads": 4, "num_key_value_heads": 2,
                                                       "vocab_size": 300, "head_dim": 16}))
    out, err, code = run_main(["budget", "--model", str(model), f"--rank={rank}", f"--targets={targets}",
                               f"--rollouts={rollouts}", f"--tokens={tokens}", f"--machine-gb={machine}"])
    clean(out, err, code)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(["ingest", "check", "runs", "export"]), runs_dir=ARG, run_id=ARG)
def test_any_store_command_arguments_are_an_answer_or_one_error_and_no_stray_file(tmp_path, command, runs_dir, run_id):
    # Every path is under tmp_path, so a stray file would show there.
    where = tmp_path / "cwd"
    where.mkdir(exist_ok=True)
    (where / "empty-runs").mkdir(exist_ok=True)
    (where / "a-file").write_text("")
    before = sorted(tmp_path.rglob("*"))
    name = runs_dir.strip("/")
    target = where / (name if name not in ("", ".", "..") else "missing")
    if runs_dir in ("0", "1"):  # a runs directory that exists, and a path that is a file
        target = where / ("empty-runs" if runs_dir == "0" else "a-file")
    args = [command, "--runs-dir", str(target)]
    if command == "export":
        args[1:1] = [run_id or "x", "--out", str(where / "out")]
    out, err, code = run_main(args)
    clean(out, err, code)
    after = [p for p in sorted(tmp_path.rglob("*")) if p not in before]
    if command == "ingest" and code == 0:  # the one command that writes: the store, in the runs directory
        assert all(p.parent == target and p.name.startswith("agentrl.duckdb") for p in after), after
    else:
        assert after == [], (command, after)


TRAIN_VALUES = st.fixed_dictionaries({}, optional={
    "rounds": st.sampled_from([1, 2, 0, -1, True, 2.0, "2", None, 10**9]),
    "group_size": st.sampled_from([2, 3, 1, 0, 2**31]),
    "clone_epochs": st.sampled_from([0, 1, -1]),
    "eval_every": st.sampled_from([0, 1, -1]),
    "scorer": st.sampled_from(["outcome", "guarded", "tests", "", None]),
    "step_delay": st.sampled_from([0, 0.0, -1, math.nan, math.inf, 1e-9]),
    "tasks": st.lists(TASK, max_size=2),
    "name": st.sampled_from(["p", "", "x" * 81, "ü", "../up"]),
})


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(values=TRAIN_VALUES, extra=st.sampled_from([[], ["--name", ""], ["--step-delay", "nan"], ["--name", "n"]]))
def test_any_train_config_is_one_error_line_and_nothing_written_or_a_run_that_finishes(tmp_path, values, extra):
    runs_dir = tmp_path / "runs"
    shutil.rmtree(runs_dir, ignore_errors=True)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(values, allow_nan=True))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("AGENTRL_RUNS_DIR", None)
    result = subprocess.run([sys.executable, "-m", "agentrl", "train", "--config", str(path), "--runs-dir", str(runs_dir),
                             "--quiet", *extra], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert "Traceback" not in result.stderr, result.stderr
    if result.returncode == 2:
        event("refused")
        (line,) = result.stderr.splitlines()
        assert line.startswith("error: ")
        assert not runs_dir.exists()  # refused before anything was written
    else:
        event("ran")
        assert result.returncode == 0, (values, result.stdout, result.stderr)
        (run,) = list_run_dirs(runs_dir)
        assert run.status()["status"] == "succeeded"
        assert "succeeded; ingested" in result.stdout


def test_a_row_the_store_cannot_hold_is_still_refused_where_it_is_made():
    """The record's own check stands behind the config's: 2**31 never reaches a flush."""
    with pytest.raises(RecordError):
        TrajectoryRecord(step=1, traj_idx=0, task_id="a", reward=0.0, amount=2**31)
    assert pa.int32().bit_width == 32


# --- every subcommand's arguments (issue 22, finding 6) ----------------------------------------------

# Commands that start training, a process or a long job for a valid input: `train` has its own
# property above, `budget` too; `export-schema` rewrites the repository's schemas/; `dashboard` serves
# until stopped; `cancel` waits for a run to stop (its own tests in tests/cli/test_installed_command.py).
NOT_GENERATED = {"train", "launch", "bench", "build-tiny-model", "budget", "export-schema", "dashboard", "cancel"}


def leaf_parsers() -> dict:
    """Every subcommand of the CLI's parser ('review show', 'gate', ...) by its words."""
    import argparse

    from agentrl.cli import parser

    found = {}

    def walk(node, words):
        subs = [a for a in node._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            found[" ".join(words)] = node
            return
        for name, child in subs[0].choices.items():
            walk(child, [*words, name])

    walk(parser(), [])
    return {words: node for words, node in found.items() if words.split()[0] not in NOT_GENERATED}


LEAVES = leaf_parsers()


def _value(dest: str, runs_dir: Path, ids: list[str], scratch: Path):
    """Values for an argument named `dest`: the real things (a run id, the runs directory) often,
    odd text always possible."""
    real = {
        "run_id": st.sampled_from(ids), "run_ids": st.sampled_from(ids), "trajectory": st.sampled_from(["1/0", "30/8", "²/1", "0/99"]),
        "runs_dir": st.sampled_from([str(runs_dir)] * 6 + [str(scratch / "missing"), str(scratch / "a-file"), str(runs_dir / "agentrl.duckdb")]),
        "out": st.sampled_from([str(scratch / "out"), str(scratch / "a-file"), "/dev/null", str(scratch / "a-file" / "x")]),
        "project_db": st.sampled_from([str(scratch / "a-file"), str(runs_dir / "agentrl.duckdb"), str(runs_dir)]),
        "format": st.sampled_from(["parquet", "csv"]),
        "verdict": st.sampled_from(["unreviewed", "approve", "reject"]),
        "violation": st.sampled_from(["yes", "no"]),
        "interval": st.sampled_from(["0.01", "0", "-1", "nan"]),
        "timeout": st.sampled_from(["0", "1", "nan", "-1"]),
        "top_k": st.sampled_from(["1", "3", "10"]), "last_steps": st.sampled_from(["1", "3"]),
        "last": st.sampled_from(["1", "3", "30", "99999999999"]), "top": st.sampled_from(["1", "10"]),
        "min_success": st.sampled_from(["0", "0.5", "1"]),
        "note": st.sampled_from(["why", ""]), "reason": st.sampled_from(["why", ""]), "override": st.sampled_from(["why", ""]),
    }.get(dest)
    if dest in ("runs_dir", "out"):  # odd paths, always under the scratch folder (never /, .. or the repository)
        odd = ARG.map(lambda text: str(scratch / "odd" / text.replace("/", "_").replace("..", "_")))
    else:
        odd = ARG
    # The real things three times in four: a command that gets past its arguments does its work.
    return odd if real is None else st.one_of(real, real, real, odd)


@st.composite
def command_lines(draw, runs_dir: Path, ids: list[str], scratch: Path) -> list[str]:
    import argparse

    words = draw(st.sampled_from(sorted(LEAVES)))
    argv = words.split()
    for action in LEAVES[words]._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if not action.option_strings:  # a positional: nearly always given
            count = draw(st.integers(0, 2)) if action.nargs == "*" else draw(st.sampled_from([1] * 9 + [0]))
            values = [draw(_value(action.dest, runs_dir, ids, scratch)) for _ in range(count)]
            argv += values
        elif action.dest == "runs_dir" or draw(st.integers(0, 2)) == 0:  # never the repository's own runs/
            flag = action.option_strings[0]
            if action.nargs == 0:
                argv.append(flag)
            else:
                argv.append(f"{flag}={draw(_value(action.dest, runs_dir, ids, scratch))}")
    if words == "watch":
        argv.append("--timeout=2")  # a run that never ends is watched no longer than this
    return argv


def one_answer(out: str, err: str, code: int) -> None:
    """Exit 0..3 (gate's 1 for a failing gate, watch's 3 at an onset), at most one line on stderr, no traceback."""
    assert "Traceback" not in err, err
    assert code in (0, 1, 2, 3), (code, err)
    assert len(err.strip().splitlines()) <= 1, err


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_any_arguments_of_any_command_are_an_answer_or_one_line(trained_pair, tmp_path, monkeypatch, data):
    from agentrl.record.rundir import RUNS_DIR_ENV

    runs_dir, ids = trained_pair
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    (scratch / "a-file").write_text("")
    monkeypatch.chdir(scratch)  # a relative path lands here
    monkeypatch.setenv(RUNS_DIR_ENV, str(scratch / "default-runs"))
    argv = data.draw(command_lines(runs_dir, list(ids.values()), scratch))
    out, err, code = run_main(argv)
    event(f"{argv[0]} exit {code}")
    one_answer(out, err, code)


# --- import-trackio on any Trackio file ----------------------------------------------------------

TRACKIO_VALUE = (SCALARS | st.sampled_from(["NaN", "Infinity", "-Infinity"]) | st.integers(min_value=2**63, max_value=2**70)
                 | st.fixed_dictionaries({"_type": st.just("trackio.table"),
                                          "_value": st.lists(st.dictionaries(st.sampled_from(
                                              ["prompt", "completion", "task_id", "advantage", "reward", "step", "x"]),
                                              VALUES, max_size=4) | SCALARS, max_size=3)}))
TRACKIO_METRICS = (st.dictionaries(st.text(max_size=6), TRACKIO_VALUE, max_size=4).map(lambda d: json.dumps(d, allow_nan=True))
                   | st.binary(max_size=24) | st.text(max_size=12) | VALUES.map(json.dumps))
TRACKIO_STEP = (st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats() | st.text(max_size=4)
                | st.binary(max_size=4) | st.sampled_from([0, 1, 2**31 - 1, 2**31, 2**40]))
TRACKIO_ROW = st.tuples(st.sampled_from(["a", "b", "", "ü"]) | st.none(), TRACKIO_STEP, st.none() | TRACKIO_METRICS)


def _trackio_file(path: Path, rows, configs) -> None:
    import sqlite3

    con = sqlite3.connect(path)
    con.execute("CREATE TABLE metrics (id INTEGER PRIMARY KEY AUTOINCREMENT, timestamp TEXT, run_name TEXT, step INTEGER, "
                "metrics TEXT)")
    con.execute("CREATE TABLE configs (id INTEGER PRIMARY KEY AUTOINCREMENT, run_name TEXT, config TEXT, created_at TEXT)")
    con.executemany("INSERT INTO metrics (timestamp, run_name, step, metrics) VALUES ('2025-01-01T00:00:00', ?, ?, ?)", rows)
    con.executemany("INSERT INTO configs (run_name, config, created_at) VALUES (?, ?, 'x')", configs)
    con.commit()
    con.close()


@pytest.mark.slow  # each example creates a store: about half a second
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(TRACKIO_ROW, max_size=6),
       configs=st.lists(st.tuples(st.sampled_from(["a", "b"]), st.none() | TRACKIO_METRICS), max_size=2))
def test_any_trackio_file_is_an_import_or_one_line(rows, configs):
    """Steps of any value, metrics of any type or bytes: the valid rows are imported and the rest
    counted, or the answer is one line; never a traceback, never a run half imported."""
    with tempfile.TemporaryDirectory() as tmp:
        project, runs_dir = Path(tmp) / "odd.db", Path(tmp) / "runs"
        _trackio_file(project, rows, configs)
        out, err, code = run_main(["import-trackio", str(project), "--runs-dir", str(runs_dir)])
        event(f"exit {code}")
        one_answer(out, err, code)
        assert code in (0, 2), (code, err)
        if code == 2:
            assert err.startswith("error: "), err
        imported = [line.split(" -> ")[-1] for line in out.splitlines() if line.startswith("imported ")]
        on_disk = sorted(r.run_id for r in list_run_dirs(runs_dir)) if runs_dir.exists() else []
        assert sorted(imported) == on_disk  # a run the record refused was removed again
        if imported:
            con = connect(runs_dir, read_only=True)
            try:
                stored = {r[0]: r[1] for r in con.execute("SELECT run_id, status FROM runs").fetchall()}
            finally:
                con.close()
            assert stored == {run_id: "succeeded" for run_id in imported}
