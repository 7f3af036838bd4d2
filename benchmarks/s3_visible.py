"""How long after a step's commit lands in S3 does its row show in a head's store?

Starts moto's S3 server on 127.0.0.1 (data in memory) with one bucket, a writer process (its own
runs directory) that logs a step every `--step-delay` seconds with `agentrl.init(chunks_url=
s3://bucket/runs)` and flushes each step at once, printing the wall time its commit returned; and,
in this process, a head with its own empty runs directory whose Ingestor (given the same URL, as
the dashboard is through $AGENTRL_CHUNKS_URL) ticks every 0.25 s, the dashboard's interval. For
each step: the first tick after which the head's store holds its row, minus the commit's time.

What it measures is the path a dashboard on another machine sees: a listing of the URL, the run's
status.json, one look for the next commit marker, its files read, one DuckDB transaction. It says
nothing about AWS S3's or MinIO's own latency (moto answers from memory on this host).

Usage: .venv/bin/python benchmarks/s3_visible.py [--steps 40] [--step-delay 0.5]
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WRITER = textwrap.dedent("""
    import sys, time
    import agentrl
    runs_dir, url, steps, delay = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    run = agentrl.init("s3-visible", runs_dir=runs_dir, total_steps=steps, chunks_url=url)
    for step in range(1, steps + 1):
        run.log_trajectories(step, [{"traj_idx": i, "task_id": "t", "reward": 1.0} for i in range(32)])
        run.log_step(step, {"loss": 1.0})
        run.writer.flush()  # the commit now, in this thread: its time is the moment it returned
        print("COMMIT", step, time.time(), flush=True)
        time.sleep(delay)
    run.finish()
""")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--step-delay", type=float, default=0.5)
    args = parser.parse_args()

    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
               AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true", HF_HUB_OFFLINE="1")
    os.environ.update({k: env[k] for k in env if k.startswith("AWS_")})
    bucket = f"bench-{secrets.token_hex(4)}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/runs"

    from agentrl.store.db import connect
    from agentrl.store.ingest import Ingestor

    with tempfile.TemporaryDirectory() as tmp:
        head = Path(tmp) / "head"
        head.mkdir()
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(Path(tmp) / "writer"), url, str(args.steps),
                                   str(args.step_delay)], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
        committed: dict[int, float] = {}

        def read_commits() -> None:
            for line in writer.stdout:
                if line.startswith("COMMIT"):
                    _, step, at = line.split()
                    committed[int(step)] = float(at)

        reader = threading.Thread(target=read_commits, daemon=True)
        reader.start()
        con = connect(head)
        ingestor = Ingestor(con, head, log=lambda message: None, chunks_url=url)
        seen: dict[int, float] = {}
        ticks = []
        deadline = time.monotonic() + args.steps * (args.step_delay + 2) + 60
        while len(seen) < args.steps and time.monotonic() < deadline:
            started = time.perf_counter()
            ingestor.ingest()
            ticks.append(time.perf_counter() - started)
            now = time.time()
            for (step,) in con.execute("SELECT step FROM steps").fetchall():
                seen.setdefault(step, now)
            time.sleep(0.25)
        writer.wait(timeout=120)
        reader.join(timeout=10)
        trajectories = con.execute("SELECT count(*) FROM trajectories").fetchone()[0]
        con.close()
    server.stop()
    lags = sorted(seen[s] - committed[s] for s in seen if s in committed)
    if not lags:
        print("no step reached the head's store")
        return 1
    p95 = lags[min(len(lags) - 1, int(round(0.95 * (len(lags) - 1))))]
    print(f"time to visible through S3 (moto on 127.0.0.1, head ingest every 0.25 s), {len(lags)} steps: "
          f"median {statistics.median(lags) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, max {lags[-1] * 1000:.0f} ms; "
          f"head ingest tick median {statistics.median(ticks) * 1000:.0f} ms; {trajectories} trajectories in the head's store "
          f"(expected {args.steps * 32})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
