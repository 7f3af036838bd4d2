"""Runs per minute through a two-node Ray cluster that shares nothing but an S3 endpoint; and its
cancel and a dead worker node, timed.

Starts moto's S3 server on 127.0.0.1 (data in memory) with one bucket, and two Ray nodes on this
host (tests/ray_nodes.py): a head (the job API, 1 CPU) and a worker with its own temp dir, its own
runs directory and `--slots` of the resource `agentrl_worker`. This process is the head's
dashboard: a `Launcher(backend="ray", chunks_url="s3://bucket/runs")` with a runs directory the
worker never sees, asking for one `agentrl_worker` a run.

1. submits `--runs` tabular runs (3 rounds each) at once, follows them as the dashboard does
   (reconcile every 0.25 s) until every one has ended, then ingests the head's store by listing
   the URL and checks its exact row counts: runs per minute = runs / (first submit -> last end);
2. cancels a run from the head once it has stepped (the stop file beside its chunks, then Ray's
   stop_job after a 5 s grace): cancel -> `cancelled` on the head;
3. kills the worker node whole (SIGKILL to its process tree) under a running run:
   kill -> `failed` on the head, with Ray's reason.

    .venv/bin/python benchmarks/ray_cluster.py [--runs 6] [--slots 2]

The figures are for one host with 2 cores shared with other work: no network between the nodes,
no GPU, moto rather than AWS S3 or MinIO.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from ray_nodes import WORKER_RESOURCE, free_port, start_two_nodes

from agentrl.config import make_config
from agentrl.launcher import Launcher
from agentrl.record.rundir import TERMINAL_STATUSES, RunDir


def follow(launcher: Launcher, run_ids: list[str], done, timeout: float = 600.0, **kwargs) -> dict[str, float]:
    """Reconcile until `done(status)` holds for every run; returns when each first did (monotonic)."""
    when: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(when) < len(run_ids):
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting: {[(r, RunDir(launcher.runs_dir / r).status()) for r in run_ids if r not in when]}")
        launcher.reconcile(**kwargs)
        for run_id in run_ids:
            if run_id not in when and done(RunDir(launcher.runs_dir / run_id).status() or {}):
                when[run_id] = time.monotonic()
        time.sleep(0.25)
    return when


def ended(status: dict) -> bool:
    return status.get("status") in TERMINAL_STATUSES


def stepped(status: dict) -> bool:
    return status.get("status") == "running" and status.get("step", 0) >= 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6, help="tabular runs submitted at once (default 6)")
    parser.add_argument("--slots", type=int, default=2, help="runs the worker node takes at once (default 2)")
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request
    print("$ .venv/bin/python benchmarks/ray_cluster.py " + shlex.join(sys.argv[1:]), flush=True)

    import boto3
    from moto.server import ThreadedMotoServer

    from agentrl.store.db import connect
    from agentrl.store.ingest import ingest_once

    saved = dict(os.environ)
    root = Path(tempfile.mkdtemp(prefix="agentrl-ray-cluster-"))
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    nodes = None
    try:
        endpoint = f"http://127.0.0.1:{server.get_host_and_port()[1]}"
        os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                          AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
        bucket = f"bench-{secrets.token_hex(4)}"
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
        url = f"s3://{bucket}/runs"
        started = time.perf_counter()
        nodes = start_two_nodes(root / "worker-runs", root, env=saved, worker_slots=args.slots)
        print(f"two Ray nodes up (head 1 CPU; worker 2 CPUs, {args.slots} x {WORKER_RESOURCE}) in "
              f"{time.perf_counter() - started:.1f} s; S3: moto on {endpoint}, {url}", flush=True)
        head_runs = root / "head-runs"
        head_runs.mkdir()
        launcher = Launcher(head_runs, backend="ray", ray_address=nodes.address, chunks_url=url,
                            ray_resources={WORKER_RESOURCE: 1})

        # 1. runs per minute
        t0 = time.monotonic()
        config = make_config(name="bench", rounds=3, probe_every=0)
        run_ids = [launcher.start(config) for _ in range(args.runs)]
        ends = follow(launcher, run_ids, ended)
        span = max(ends.values()) - t0
        statuses = [RunDir(head_runs / r).status()["status"] for r in run_ids]
        report = ingest_once(head_runs, chunks_url=url)
        con = connect(head_runs)
        try:
            steps = con.execute("SELECT count(*) FROM steps").fetchone()[0]
            trajectories = con.execute("SELECT count(*) FROM trajectories").fetchone()[0]
        finally:
            con.close()
        expected = (args.runs * 3, args.runs * 3 * config.group_size * len(config.tasks))
        print(f"\n{args.runs} tabular runs (3 rounds) submitted at once from the head: all ended in {span:.1f} s "
              f"-> {args.runs / span * 60:.1f} runs per minute; each, submit -> end: median "
              f"{statistics.median(e - t0 for e in ends.values()):.1f} s")
        print(f"statuses: {sorted(set(statuses))}; head's store after one ingest by listing the URL: {steps} steps, "
              f"{trajectories} trajectories (expected {expected[0]}, {expected[1]}): "
              f"{'exact' if (steps, trajectories) == expected else 'MISMATCH'}; {report.rows} rows", flush=True)

        # 2. cancel from the head
        run_id = launcher.start(make_config(name="bench-cancel", rounds=500, step_delay=0.5))
        follow(launcher, [run_id], stepped)
        t1 = time.monotonic()
        launcher.cancel(run_id)
        follow(launcher, [run_id], ended, grace_s=5.0)
        status = RunDir(head_runs / run_id).status()
        worker_status = RunDir(nodes.worker_runs_dir / run_id).status() or {}
        print(f"\ncancel from the head -> {status['status']} on the head in {time.monotonic() - t1:.1f} s "
              f"(at step {status.get('step')}; the run's own record on the worker: {worker_status.get('status')})", flush=True)

        # 3. the worker node dies under a run
        run_id = launcher.start(make_config(name="bench-node-dies", rounds=500, step_delay=0.5))
        follow(launcher, [run_id], stepped)
        t2 = time.monotonic()
        nodes.worker.kill()
        follow(launcher, [run_id], ended)
        status = RunDir(head_runs / run_id).status()
        print(f"\nworker node killed (SIGKILL to its process tree) -> {status['status']} on the head in "
              f"{time.monotonic() - t2:.1f} s: {status.get('error', '')[:400]}", flush=True)
    finally:
        left = nodes.stop() if nodes is not None else []
        server.stop()
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(root, ignore_errors=True)
    if left:
        print(f"processes of the Ray nodes still running: {left}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
