"""Property tests (hypothesis) over configs, run files and CLI arguments: whatever comes in, the
answer is a clean one-line error or a valid run, never a traceback or a stray file (issue 12).

Configs: any values are a one-line ConfigError or a config every row of which the record and the
store can hold. Run files: any bytes in run.json or status.json cost that run only, in `runs`,
reconcile and ingest. CLI arguments: `budget`, `export`, `ingest`, `check` and `runs` in process;
`train` through the real CLI in a subprocess (slow), where a valid config must also run.
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


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
