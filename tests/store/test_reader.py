"""Tests of agentrl/store/reader.py: `agentrl.Api` reads runs, history and trajectories from
another process while a dashboard holds the store (DuckDB refuses that process even read-only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from helpers import REPO_ROOT, wait_for

READER = """
    import json, sys
    import duckdb
    import agentrl

    runs_dir = sys.argv[1]
    try:
        duckdb.connect(runs_dir + "/agentrl.duckdb", read_only=True)
        held = False
    except duckdb.Error:
        held = True  # the dashboard holds it: no other process may open it
    api = agentrl.Api(runs_dir)
    runs = api.runs()
    (run_id,) = runs["run_id"]
    history = api.history(run_id)
    print(json.dumps({"held": held, "status": runs["status"][0], "project": runs["project"][0],
                      "steps": history["step"].tolist(), "loss": history["loss"].tolist(),
                      "trajectories": len(api.trajectories(run_id))}))
"""


def read_from_another_process(runs_dir, cwd) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(READER), str(runs_dir)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_api_reads_a_running_run_from_another_process_while_the_dashboard_holds_the_store(runs_dir, tmp_path):
    import agentrl
    from agentrl.store.ingest import BackgroundIngest, Ingestor, connect
    from agentrl.store.watch import CommitWatch

    runs_dir.mkdir(parents=True)
    con = connect(runs_dir)  # as the dashboard: one connection for its lifetime, its ingest loop in a thread
    ingestor = Ingestor(con, runs_dir)
    lock = threading.Lock()

    def tick() -> None:
        with lock:
            ingestor.ingest()

    loop = BackgroundIngest(tick, interval=0.25, wake=CommitWatch(runs_dir).changed)
    try:
        run = agentrl.init(project="refunds", name="live", runs_dir=runs_dir)
        for step in (1, 2, 3):
            run.log_trajectories(step, [{"traj_idx": 0, "task_id": "a", "reward": 1.0}])
            run.log({"loss": 1.0 / step}, step=step, commit=True)
        run.writer.flush()  # what a run commits about once a second

        def ingested() -> bool:
            with lock:
                return con.execute("SELECT count(*) FROM steps").fetchone()[0] == 3

        assert wait_for(ingested, timeout=20)  # the dashboard has taken it, and holds the store
        seen = read_from_another_process(runs_dir, tmp_path)
        assert seen == {"held": True, "status": "running", "project": "refunds", "steps": [1, 2, 3],
                        "loss": [1.0, 0.5, pytest.approx(1 / 3)], "trajectories": 3}
        run.finish()
        assert read_from_another_process(runs_dir, tmp_path)["status"] == "succeeded"
    finally:
        loop.stop()
        con.close()


def test_api_names_a_run_that_is_not_there(runs_dir):
    import agentrl
    from agentrl.store.reader import ApiError

    with pytest.raises(ApiError, match="no run 'nope'"):
        agentrl.Api(runs_dir).history("nope")
    with pytest.raises(ApiError, match="run ids are folder names"):
        agentrl.Api(runs_dir).trajectories("../etc")
    assert agentrl.Api(runs_dir).runs().empty
