"""Tests of agentrl/record/api.py and agentrl/__init__.py: `agentrl.init`, the public face of the writer.

A user's own loop records a run the dashboard reads like any engine's: typed or dict rows, step
rates from the trajectories, Ctrl-C that still stops the loop and marks the run cancelled, a run
closed at interpreter exit, and `AGENTRL_RUN_DIR` from the script engine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import REPO_ROOT, store_rows
from agentrl.record.rundir import RUN_DIR_ENV, SUPERVISOR_ENV, list_run_dirs, new_run


def _python(code: str, env: dict | None = None, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO_ROOT,
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def test_importing_agentrl_loads_nothing_heavy_and_recording_loads_no_torch_streamlit_or_duckdb(tmp_path):
    code = f"""
        import json, sys
        import agentrl
        bare = [m for m in ("torch", "streamlit", "duckdb", "pyarrow", "pandas") if m in sys.modules]
        with agentrl.init(name="light", runs_dir={str(tmp_path / "runs")!r}) as run:
            run.log_step(1, {{"loss": 0.5}})
        print(json.dumps([bare, [m for m in ("torch", "streamlit", "duckdb") if m in sys.modules]]))
    """
    process = _python(code)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert json.loads(out) == [[], []]


def test_a_custom_loop_lands_its_steps_trajectories_and_evals_in_duckdb(runs_dir):
    import agentrl

    with agentrl.init(name="my loop", config={"lr": 0.01, "model": "tiny"}, runs_dir=runs_dir, total_steps=2) as run:
        for step in (1, 2):
            run.log_trajectories(step, [
                {"traj_idx": 0, "task_id": "a", "reward": 1.0, "success": True, "actions": ["lookup", "refund"],
                 "components": {"outcome": 1.0}},
                agentrl.TrajectoryRecord(step=step, traj_idx=1, task_id="b", reward=0.0, actions=["finish"]),
            ])
            run.log_evals(step, [{"split": "held_out", "task_id": "e", "actions": ["finish"], "success": False, "violation": False}])
            run.log_step(step, {"loss": 1.0 / step, "kl": float("nan"), "updates": 3})
    (run_dir,) = list_run_dirs(runs_dir)
    meta = run_dir.meta()
    assert (meta["name"], meta["kind"], meta["config"], meta["total_steps"]) == ("my loop", "script", {"lr": 0.01, "model": "tiny"}, 2)
    assert run_dir.status()["status"] == "succeeded"

    steps = store_rows(runs_dir, "SELECT step, success_rate, violation_rate, mean_reward, updates, transitions, metrics "
                                  "FROM steps ORDER BY step")
    # Rates come from the step's trajectories: success was set (by a dict row and a record),
    # violation only by the record (its default), so both rates are known.
    assert [s[:6] for s in steps] == [(1, 0.5, 0.0, 0.5, 3, 3), (2, 0.5, 0.0, 0.5, 3, 3)]
    assert [s[6] for s in steps] == [{"loss": 1.0}, {"loss": 0.5}]  # NaN left out
    trajectories = store_rows(runs_dir, "SELECT step, traj_idx, task_id, actions, components FROM trajectories ORDER BY step, traj_idx")
    assert trajectories[0] == (1, 0, "a", ["lookup", "refund"], {"outcome": 1.0})
    assert len(trajectories) == 4
    assert store_rows(runs_dir, "SELECT count(*) FROM evals")[0][0] == 2
    (kind, status), = store_rows(runs_dir, "SELECT kind, status FROM runs")
    assert (kind, status) == ("script", "succeeded")


def test_a_step_without_trajectory_flags_has_no_made_up_rates(runs_dir):
    import agentrl

    with agentrl.init(name="rewards only", runs_dir=runs_dir) as run:
        run.log_trajectories(1, [{"traj_idx": i, "task_id": "a", "reward": float(i)} for i in range(4)])
        run.log_step(1, {"loss": 0.1})
    ((success, violation, mean_reward),) = store_rows(runs_dir, "SELECT success_rate, violation_rate, mean_reward FROM steps")
    assert (success, violation, mean_reward) == (None, None, 1.5)


@dataclasses.dataclass
class _Args:
    lr: float = 0.1
    layers: tuple = (1, 2)


@pytest.mark.parametrize("config", [_Args(), argparse.Namespace(lr=0.1, layers=(1, 2)), {"lr": 0.1, "layers": (1, 2)}],
                         ids=["dataclass", "namespace", "dict"])
def test_a_config_is_stored_as_json_from_the_usual_shapes(runs_dir, config):
    import agentrl

    run = agentrl.init(name="cfg", config=config, runs_dir=runs_dir)
    run.finish()
    assert run.dir.meta()["config"] == {"lr": 0.1, "layers": [1, 2]}


def test_a_config_that_is_not_a_mapping_is_one_clear_error(runs_dir):
    import agentrl

    with pytest.raises(agentrl.RecordError, match="config must be a dict"):
        agentrl.init(name="cfg", config=3, runs_dir=runs_dir)
    assert list_run_dirs(runs_dir) == []


USER_LOOP = """
    import signal, sys, time
    import agentrl
    run = agentrl.init(name="ctrl-c", runs_dir=sys.argv[1])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, "init installed a SIGINT handler"
    with run:
        step = 0
        while True:
            step += 1
            run.log_step(step, {"loss": 1.0})
            if step == 3:
                print("looping", flush=True)
            time.sleep(0.02)
"""


def test_ctrl_c_stops_a_users_loop_and_marks_its_run_cancelled(runs_dir):
    process = subprocess.Popen([sys.executable, "-c", textwrap.dedent(USER_LOOP), str(runs_dir)], cwd=REPO_ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "looping"
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    # The loop stopped the way Python stops on Ctrl-C: KeyboardInterrupt, then death by SIGINT.
    assert process.returncode == -signal.SIGINT and "KeyboardInterrupt" in err, err
    (run_dir,) = list_run_dirs(runs_dir)
    status = run_dir.status()
    assert (status["status"], status["error"]) == ("cancelled", "interrupted (Ctrl-C)")
    assert status["step"] >= 3


@pytest.mark.parametrize(("ending", "status", "error"), [
    ("pass", "succeeded", None),
    ("raise RuntimeError('diverged')", "failed", "RuntimeError: diverged"),
    ("raise KeyboardInterrupt", "cancelled", "interrupted (Ctrl-C)"),
])
def test_a_run_never_finished_is_closed_at_exit_with_what_ended_the_script(runs_dir, ending, status, error):
    code = f"""
        import sys
        import agentrl
        run = agentrl.init(name="no finish", runs_dir=sys.argv[1])
        run.log_step(1, {{"loss": 1.0}})
        {ending}
    """
    process = subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(runs_dir)], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=60)
    (run_dir,) = list_run_dirs(runs_dir)
    got = run_dir.status()
    assert (got["status"], got["error"]) == (status, error), process.stderr
    assert store_rows(runs_dir, "SELECT count(*) FROM steps")[0][0] == 1


def test_under_the_script_engine_init_writes_into_its_run_and_leaves_the_lifecycle_to_it(runs_dir):
    """AGENTRL_RUN_DIR (and the supervisor's pid) come from the script engine; see tests/engines/script."""
    run_dir = new_run(runs_dir, "launched", "script", "outcome", {"command": ["python", "train.py"]})
    run_dir.update_status(status="running", pid=12345, create_time=1.0, started_at="then")
    code = """
        import agentrl
        with agentrl.init(name="ignored", config={"lr": 3}, total_steps=5) as run:
            run.log_step(1, {"loss": 1.0})
    """
    process = _python(code, env={RUN_DIR_ENV: str(run_dir.root), SUPERVISOR_ENV: "12345"})
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert [r.run_id for r in list_run_dirs(runs_dir)] == [run_dir.run_id]  # no second run
    status, meta = run_dir.status(), run_dir.meta()
    assert (status["status"], status["pid"], status["reported_status"], status["total_steps"]) == ("running", 12345, "succeeded", 5)
    assert (meta["name"], meta["config"], meta["logged_config"], meta["total_steps"]) == (
        "launched", {"command": ["python", "train.py"]}, {"lr": 3}, 5)


def test_agentrl_run_dir_that_is_not_a_run_folder_is_one_clear_error(tmp_path, monkeypatch):
    import agentrl
    from agentrl.record.rundir import RunsDirError

    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(RunsDirError, match="AGENTRL_RUN_DIR=.* is not a run folder"):
        agentrl.init(name="x")


def test_logging_from_several_threads_at_once_keeps_every_row(runs_dir):
    import threading

    import agentrl

    run = agentrl.init(name="threads", runs_dir=runs_dir, flush_interval=0.05)

    def worker(offset: int) -> None:
        for i in range(200):
            run.log_trajectories(1, [{"traj_idx": offset * 1000 + i, "task_id": f"w{offset}", "reward": 1.0}])
            if i % 50 == 0:
                time.sleep(0.001)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    run.log_step(1, {"loss": 0.0})
    run.finish()
    rows = store_rows(runs_dir, "SELECT count(DISTINCT traj_idx), count(*) FROM trajectories")
    assert rows == [(800, 800)]


def test_init_twice_in_one_process_under_the_script_engine_shares_the_run(runs_dir, monkeypatch):
    """A TRL callback and the script around it both call init: one writer, one run."""
    import agentrl

    run_dir = new_run(runs_dir, "launched", "script", "outcome", {})
    monkeypatch.setenv(RUN_DIR_ENV, str(run_dir.root))
    first = agentrl.init()
    assert agentrl.init() is first
    first.finish()
    second = agentrl.init()  # the first one ended: a new writer on the same run
    assert second is not first
    second.finish()


# --- wandb's and Trackio's habits ------------------------------------------------------------------


def test_a_wandb_style_loop_lands_one_row_per_step_with_its_metrics_flattened_and_named_as_the_store_names_them(runs_dir):
    import numpy as np

    import agentrl

    run = agentrl.init(project="refunds", name="wandb-habits", config={"lr": 0.01}, tags=["baseline", "cpu"],
                       notes="first try", runs_dir=runs_dir)
    for step in range(1, 4):
        agentrl.log({"loss": np.float32(1.0 / step), "reward": 0.25 * step, "converged": step == 3,
                     "train": {"kl": 0.1, "lr": None}, "entropy": float("nan"), "updates": 2.0}, step=step)
        agentrl.log({"eval/accuracy": 0.5}, step=step)  # a second log to the same step merges into it
    run.config.update({"batch_size": 8})
    run.config["seed"] = 3
    run.summary["best_reward"] = 0.75
    assert (run.id, run.name, run.config.lr) == (run.run_id, "wandb-habits", 0.01)
    agentrl.finish()

    history = agentrl.Api(runs_dir).history(run.id)
    assert list(history["step"]) == [1, 2, 3]
    assert list(history["mean_reward"]) == [0.25, 0.5, 0.75]  # TRL's `reward` is the store's mean_reward
    assert list(history["updates"]) == [2, 2, 2]
    assert list(history["converged"]) == [0.0, 0.0, 1.0]  # bools count 0/1
    assert list(history["train/kl"]) == [0.1, 0.1, 0.1] and list(history["eval/accuracy"]) == [0.5] * 3
    assert history["loss"].round(4).tolist() == [1.0, 0.5, 0.3333]
    assert "entropy" not in history and "train/lr" not in history  # NaN and None are left out
    (record,) = agentrl.Api(runs_dir).runs().to_dict("records")
    assert (record["project"], record["tags"], record["notes"], record["status"]) == ("refunds", ["baseline", "cpu"], "first try", "succeeded")
    assert record["config"] == {"lr": 0.01, "batch_size": 8, "seed": 3}
    assert record["summary"]["best_reward"] == 0.75 and record["summary"]["eval/accuracy"] == 0.5
    # ... and the store (the dashboard's Runs page) has them too, tags and notes shown on the page
    assert store_rows(runs_dir, "SELECT count(*), count(DISTINCT step) FROM steps") == [(3, 3)]
    from agentrl.analysis.runs import runs_table
    from agentrl.store.db import connect
    from agentrl.store.queries import list_runs

    con = connect(runs_dir)
    try:
        shown = runs_table(list_runs(con)).iloc[0]
        project, summary = con.execute("SELECT project, summary->>'$.best_reward' FROM runs").fetchone()
    finally:
        con.close()
    assert (shown["tags"], shown["note"], project, summary) == ("baseline, cpu", "first try", "refunds", "0.75")


def test_step_defaults_to_the_next_one_and_commit_false_gathers_a_step_as_wandb_does(runs_dir):
    import agentrl

    with agentrl.init(name="steps", runs_dir=runs_dir) as run:
        run.log({"a": 1.0})  # step 1
        run.log({"a": 2.0})  # step 2
        run.log({"b": 3.0}, commit=False)  # step 3, still open ...
        run.log({"a": 3.0})  # ... and this completes it
        run.log({"a": 5.0}, step=5)
        with pytest.raises(agentrl.RecordError, match="step 4 was logged after step 5; steps go forward"):
            run.log({"a": 4.0}, step=4)  # steps go forward
    history = agentrl.Api(runs_dir).history(run.id)
    assert history[["step", "a"]].values.tolist() == [[1, 1.0], [2, 2.0], [3, 3.0], [5, 5.0]]
    assert history["b"].tolist()[2] == 3.0


def test_logging_after_finish_raises_and_finish_takes_wandbs_words_and_exit_codes(runs_dir):
    import agentrl

    run = agentrl.init(name="done", runs_dir=runs_dir)
    run.log({"loss": 1.0})
    run.finish(exit_code=2)
    assert (run.dir.status()["status"], run.dir.status()["error"]) == ("failed", "exit code 2")
    with pytest.raises(agentrl.RecordError, match="is finished; nothing more can be logged"):
        run.log({"loss": 0.5})
    with pytest.raises(agentrl.RecordError, match="is finished"):
        run.log_step(2, {"loss": 0.5})
    run.finish()  # finishing twice does nothing
    assert run.dir.status()["status"] == "failed"

    crashed = agentrl.init(name="crash", runs_dir=runs_dir)
    agentrl.finish("crashed")
    assert crashed.dir.status()["status"] == "failed"
    with pytest.raises(agentrl.RecordError, match="no run to log to; call agentrl.init"):
        agentrl.log({"loss": 1.0})  # agentrl.finish ended the current run: agentrl.log has none
    with pytest.raises(ValueError, match="use one of"):
        agentrl.init(name="x", runs_dir=runs_dir).finish("exploded")


def test_a_metric_that_is_not_a_number_is_named_and_never_takes_valid_rows_with_it(runs_dir):
    """issue 22: the call that raised an earlier row's delayed error used to lose its own step."""
    import agentrl

    run = agentrl.init(name="bad values", runs_dir=runs_dir)
    with pytest.raises(agentrl.RecordError, match=r"metric 'note' must be a number or bool, not 'warm'; .*step 1 are recorded"):
        run.log({"loss": 1.0, "note": "warm"}, step=1)
    run.log_trajectories(2, [{"traj_idx": 0, "task_id": "t", "reward": "lots"}, {"traj_idx": 1, "task_id": "t", "reward": 1.0}])
    run.log({"loss": 0.5}, step=2)
    run.log({"loss": 0.25}, step=3)  # step 2 goes to the writer here ...
    run.writer.flush()  # ... and its bad trajectory is found in the flush
    with pytest.raises(agentrl.RecordError, match="trajectories.reward must be a number"):
        run.log({"loss": 0.125}, step=4)  # reports the bad row; its own metrics are kept
    run.finish()
    history = agentrl.Api(runs_dir).history(run.id)
    assert history[["step", "loss"]].values.tolist() == [[1, 1.0], [2, 0.5], [3, 0.25], [4, 0.125]]
    assert agentrl.Api(runs_dir).trajectories(run.id)["traj_idx"].tolist() == [1]


def test_resume_continues_a_run_from_its_last_step_and_refuses_what_it_cannot_do(runs_dir):
    import agentrl

    with agentrl.init(name="long", id="long-run-1", runs_dir=runs_dir, config={"lr": 0.1}) as run:
        for _ in range(3):
            run.log({"loss": 1.0})
    with pytest.raises(OSError, match="run 'long-run-1' already exists in .*; pass resume='allow'"):
        agentrl.init(id="long-run-1", runs_dir=runs_dir)
    with pytest.raises(OSError, match="does not exist in .*, so it cannot be continued"):
        agentrl.init(id="missing-run", resume="must", runs_dir=runs_dir)
    with pytest.raises(ValueError, match="resume='must' needs id="):
        agentrl.init(resume="must", runs_dir=runs_dir)
    with pytest.raises(TypeError, match="unexpected keyword argument.*'projcet'"):
        agentrl.init(projcet="typo", runs_dir=runs_dir)

    with agentrl.init(id="long-run-1", resume="must", runs_dir=runs_dir, entity="ignored") as again:
        assert (again.name, again.config["lr"]) == ("long", 0.1)
        again.log({"loss": 0.5})  # step 4
    with agentrl.init(id="long-run-1", resume="allow", runs_dir=runs_dir) as third:
        third.log({"loss": 0.25}, step=6)
    assert agentrl.Api(runs_dir).history("long-run-1")[["step", "loss"]].values.tolist() == [
        [1, 1.0], [2, 1.0], [3, 1.0], [4, 0.5], [6, 0.25]]
    assert store_rows(runs_dir, "SELECT status, (SELECT count(*) FROM steps) FROM runs") == [("succeeded", 5)]


def test_a_run_continued_after_the_dashboards_ingest_finished_with_it_is_taken_again(runs_dir):
    import agentrl
    from agentrl.store.ingest import Ingestor, connect

    with agentrl.init(id="again-1", runs_dir=runs_dir) as run:
        run.log({"loss": 1.0})
    con = connect(runs_dir)  # one Ingestor throughout, as the dashboard keeps one
    try:
        ingestor = Ingestor(con, runs_dir)
        ingestor.ingest()
        ingestor.ingest()
        assert "again-1" in ingestor.drained  # ended and taken: no longer looked at ...
        with agentrl.init(id="again-1", resume="must", runs_dir=runs_dir) as run:
            run.log({"loss": 0.5})
        ingestor.ingest()  # ... until it is continued
        assert con.execute("SELECT count(*), max(step) FROM steps").fetchone() == (2, 2)
        assert con.execute("SELECT status FROM runs").fetchone() == ("succeeded",)
    finally:
        con.close()
