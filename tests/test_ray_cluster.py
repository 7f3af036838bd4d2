"""Two Ray nodes that share nothing but an S3 endpoint (issue 30, item 3).

One cluster for the module (tests/ray_nodes.py): a head with the job API and its own temp dir, a
worker with its own temp dir and runs directory (its `AGENTRL_RUNS_DIR`) and the resource
`agentrl_worker`, and moto's S3 server on 127.0.0.1 with one bucket. The launcher (this process:
the head's dashboard) has a runs directory of its own that the worker never sees, and the chunks
URL `s3://bucket/runs`; the endpoint and credentials reach the job only through its runtime
environment. A run submitted with the Ray backend lands on the worker, writes through S3, and the
head's store (ingest by listing the URL) holds exactly its rows; its fleet's actors sit on both
nodes; killing the worker node under another run marks that one `failed` with Ray's reason. Every
process either node started is gone at the end. A cancel from the head stops a run on the worker
and the head records it cancelled. (The runs per minute are measured by benchmarks/ray_cluster.py.)
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
from pathlib import Path

import pytest
from helpers import wait_for
from ray_nodes import WORKER_RESOURCE, start_two_nodes
from record.s3_endpoint import TEST_SECRET, aws_env, free_port

from agentrl.config import make_config
from agentrl.launcher import Launcher
from agentrl.record.published import PUBLISHED_KEY
from agentrl.record.rundir import TERMINAL_STATUSES, RunDir, read_json
from agentrl.store.db import connect
from agentrl.store.ingest import ingest_once

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("ray", "s3fs", "moto")) and not os.environ.get("CI"),
                                 reason="needs Ray (requirements-ray.txt) and s3fs with moto[server] (requirements-s3.txt)")]


class Setup:
    def __init__(self, nodes, url: str, head_runs: Path):
        self.nodes, self.url, self.head_runs = nodes, url, head_runs

    def launcher(self) -> Launcher:
        return Launcher(self.head_runs, backend="ray", ray_address=self.nodes.address, chunks_url=self.url,
                        ray_resources={WORKER_RESOURCE: 1})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    import boto3
    import s3fs
    from moto.server import ThreadedMotoServer

    saved = dict(os.environ)
    root = tmp_path_factory.mktemp("cluster")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    nodes = None
    try:
        endpoint = f"http://127.0.0.1:{server.get_host_and_port()[1]}"
        for name in [n for n in os.environ if n.startswith("AWS_") or n == "AGENTRL_CHUNKS_URL"]:
            del os.environ[name]
        os.environ.update(aws_env(endpoint, root))  # the head's: the launcher passes them on to the job
        s3fs.S3FileSystem.clear_instance_cache()
        bucket = f"agentrl-{secrets.token_hex(4)}"
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
        nodes = start_two_nodes(root / "worker-runs", root, env=saved, worker_slots=2)  # neither node has an AWS variable
        head_runs = root / "head-runs"
        head_runs.mkdir()
        yield Setup(nodes, f"s3://{bucket}/runs", head_runs)
    finally:
        left = nodes.stop() if nodes is not None else []
        server.stop()
        os.environ.clear()
        os.environ.update(saved)
        s3fs.S3FileSystem.clear_instance_cache()
    assert not left, f"processes of the Ray nodes still running after SIGKILL: {left}"


def _follow(launcher: Launcher, run_id: str, done, timeout: float = 120.0, **kwargs) -> dict:
    run = RunDir(launcher.runs_dir / run_id)

    def check():
        launcher.reconcile(**kwargs)
        return done(run.status() or {})

    assert wait_for(check, timeout=timeout, interval=0.25), f"{run_id}: {run.status()} {launcher.unreadable}"
    return run.status()


def _counts(runs_dir: Path, run_id: str) -> tuple:
    con = connect(runs_dir)
    try:
        return (con.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchall(),
                con.execute("SELECT count(*) FROM steps WHERE run_id = ?", [run_id]).fetchone()[0],
                con.execute("SELECT count(*), count(DISTINCT (step, traj_idx)) FROM trajectories WHERE run_id = ?",
                            [run_id]).fetchone())
    finally:
        con.close()


def _no_secret_in(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            assert TEST_SECRET.encode() not in path.read_bytes(), path


def test_runs_launched_from_the_head_train_on_the_worker_and_a_dead_worker_fails_the_run_it_held(cluster):
    import fsspec
    from ray.job_submission import JobSubmissionClient
    from ray.util.state import list_actors, list_nodes

    launcher = cluster.launcher()
    assert launcher.describe().endswith(f"they share nothing with this machine but {cluster.url}, where they publish their files.")
    config = make_config(name="on-worker", rounds=3, group_size=4, workers=2, fleet_backend="ray", probe_every=0)
    run_id = launcher.start(config)
    doomed = launcher.start(make_config(name="node-dies", rounds=500, step_delay=0.5))  # beside it (the worker has 2 slots)
    status = _follow(launcher, run_id, lambda s: s.get("status") in TERMINAL_STATUSES)
    assert status["status"] == "succeeded", status

    # The run's own folder is on the worker, in its runs directory; the head has a copy that names the URL.
    worker_run = RunDir(cluster.nodes.worker_runs_dir / run_id)
    assert read_json(worker_run.meta_path)["chunks_url"] == f"{cluster.url}/{run_id}"
    assert read_json(worker_run.status_path)["status"] == "succeeded"
    head_run = RunDir(cluster.head_runs / run_id)
    assert read_json(head_run.meta_path)[PUBLISHED_KEY] == cluster.url
    assert not (head_run.root / "chunks").exists() and not (worker_run.root / "chunks").exists()  # chunks: only in S3
    launch = read_json(head_run.root / "launch.json")
    assert "--runs-dir" not in launch["command"] and launch["command"][-1] == "--no-ingest"

    client = JobSubmissionClient(cluster.nodes.address)
    info = client.get_job_info(launch["job_id"])
    nodes = {n.node_id: n for n in list_nodes(address=cluster.nodes.address, raise_on_missing_output=False)}
    assert nodes[info.driver_node_id].resources_total.get(WORKER_RESOURCE) == 2  # the job ran on the worker
    actors = [a for a in list_actors(address=cluster.nodes.address, detail=True, raise_on_missing_output=False, limit=1000)
              if a.class_name == "Sampler" and a.job_id == info.job_id]
    assert len(actors) == 2 and len({a.node_id for a in actors}) == 2, actors  # the fleet on both nodes

    report = ingest_once(cluster.head_runs, chunks_url=cluster.url)  # the dashboard's ingest: by listing the URL
    tasks = len(config.tasks)
    expected = ([("succeeded",)], 3, (3 * 4 * tasks, 3 * 4 * tasks))
    assert _counts(cluster.head_runs, run_id) == expected, report
    ingest_once(cluster.head_runs, chunks_url=cluster.url)
    assert _counts(cluster.head_runs, run_id) == expected  # nothing taken twice
    _no_secret_in(head_run.root)
    _no_secret_in(worker_run.root)

    # A cancel from the head reaches a run on the worker (the stop file beside its chunks in S3, then
    # Ray's stop_job after the grace), and the head records it cancelled.
    stopped = launcher.start(make_config(name="cancel-from-head", rounds=500, step_delay=0.5))
    _follow(launcher, stopped, lambda s: s.get("status") == "running" and s.get("step", 0) >= 1)
    launcher.cancel(stopped)
    status = _follow(launcher, stopped, lambda s: s.get("status") in TERMINAL_STATUSES, grace_s=5.0)
    assert status["status"] == "cancelled", status
    assert status.get("step", 0) < 500

    # The other run, live on the head, loses its node: the machine dies (its raylet, its workers, the run).
    _follow(launcher, doomed, lambda s: s.get("status") == "running" and s.get("step", 0) >= 1)
    cluster.nodes.worker.kill()
    status = _follow(launcher, doomed, lambda s: s.get("status") in TERMINAL_STATUSES)
    assert status["status"] == "failed", status
    assert status["error"].startswith(f"the Ray job agentrl-{doomed} ended FAILED without a final status"), status
    assert "The actor died because its node has died." in status["error"], status["error"]  # Ray's words
    # Published where every head looks: a second head listing the URL sees the same end.
    with fsspec.open(f"{cluster.url}/{doomed}/status.json", "r") as published:
        assert json.load(published) == RunDir(cluster.head_runs / doomed).status()
    assert launcher.reconcile() == []  # decided once
