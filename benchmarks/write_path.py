"""The write path of a recorded run: what logging a step costs the caller, and how soon the dashboard
can query it.

User's loop -> **Run** (agentrl.init) -> chunks -> **store**. Two measurements:

(a) the caller's cost of one step: `run.log_trajectories(step, rows)` with 32 trajectory rows plus
    `run.log_step(step, metrics)` with 12 metrics, timed in the calling thread with perf_counter,
    while the run's flusher writes in the background (the loop sleeps --work seconds per step, as
    a training step would). Rows as dicts (their values are checked in the flusher) and as
    TrajectoryRecords (checked when the caller builds them: the building is timed too).
(b) freshness: a child process logs a step (32 rows, 12 metrics) every --period seconds, while
    this process holds the store as the dashboard does and ingests with the dashboard's own loop
    (`BackgroundIngest`, a tick every 0.25 s), once on the clock alone and once woken by new
    commits (`CommitWatch`). After every tick it reads the newest step; the delay of a step is the
    moment it was first readable minus the moment `log_step` was called (`steps.ts`, same clock),
    split at the moment its commit marker landed on disk.
(c) a new run: a child process starts --new-runs runs one after another (`agentrl.init`, then its
    first step through `run.log`), while this process holds the store with the dashboard's loop
    woken by `CommitWatch` (which lists the runs directory once a second, and at once when a run
    folder appears). The delay is the moment the run's first step was readable minus the moment
    it was logged: the time until a new run shows on the dashboard.

(a) is also timed for wandb's call, `run.log(metrics, step=step)` (issue 28).

    .venv/bin/python benchmarks/write_path.py [--steps 300] [--work 0.05] [--period 0.1] [--fresh-steps 100] [--new-runs 20]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

import agentrl  # noqa: E402
from agentrl.record.chunks import list_commits  # noqa: E402
from agentrl.record.rundir import list_run_dirs, utc_now  # noqa: E402

INGEST_INTERVAL_S = 0.25  # the dashboard's (ui.INGEST_INTERVAL_S)
TARGET_CALLER_MS = 0.2
TARGET_FRESH_S = 0.1


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def trajectory_rows(step: int, n: int = 32) -> list[dict]:
    """A step's batch as a user's loop would log it: 4 tasks x 8 samples, a short transcript each."""
    return [{"traj_idx": i, "task_id": f"task-{i // 8}", "reward": (i % 3) / 2, "success": i % 3 == 2,
             "violation": i % 7 == 0, "actions": ["lookup", "request_approval", "refund", "finish"],
             "components": {"outcome": 1.0, "format": 0.5, "step_cost": -0.2},
             "prompt": "Refund order 1234 for 80 dollars.", "completion": f"step {step} sample {i}: done"}
            for i in range(n)]


def step_metrics(step: int) -> dict[str, float]:
    names = ("loss", "kl", "entropy", "reward_std", "grad_norm", "learning_rate", "num_tokens", "clip_ratio/region_mean",
             "completions/mean_length", "tools/call_frequency", "tools/failure_frequency", "step_time")
    return {name: 1.0 / (step + k + 1) for k, name in enumerate(names)}


def caller_cost(steps: int, work_s: float, typed: bool, wandb_style: bool = False) -> list[float]:
    """Seconds the caller spent in the two log calls, per step (with typed rows: building them too)."""
    root = Path(tempfile.mkdtemp(prefix="agentrl-write-path-"))
    timings = []
    try:
        with agentrl.init(name="caller-cost", runs_dir=root / "runs", total_steps=steps) as run:
            for step in range(1, steps + 1):
                rows, metrics = trajectory_rows(step), step_metrics(step)
                started = time.perf_counter()
                if typed:
                    rows = [agentrl.TrajectoryRecord(step=step, **row) for row in rows]
                    run.log_trajectories(rows)
                else:
                    run.log_trajectories(step, rows)
                if wandb_style:
                    run.log(metrics, step=step)
                else:
                    run.log_step(step, metrics)
                timings.append(time.perf_counter() - started)
                time.sleep(work_s)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return timings


CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from benchmarks.write_path import step_metrics, trajectory_rows
import agentrl
steps, period = int(sys.argv[3]), float(sys.argv[4])
with agentrl.init(name="freshness", runs_dir=sys.argv[2], total_steps=steps) as run:
    time.sleep(1.5)  # the flusher's start-up (pyarrow loads pandas) is not a step's delay
    for step in range(1, steps + 1):
        run.log_trajectories(step, trajectory_rows(step))
        run.log_step(step, step_metrics(step))
        time.sleep(period)
"""


def freshness(steps: int, period: float, wake: bool) -> tuple[list[float], list[float]]:
    """(log_step -> commit on disk, log_step -> readable in DuckDB) per step, in seconds."""
    from agentrl.store.ingest import BackgroundIngest, Ingestor, connect
    from agentrl.store.watch import CommitWatch

    root = Path(tempfile.mkdtemp(prefix="agentrl-freshness-"))
    runs_dir = root / "runs"
    runs_dir.mkdir()
    con = connect(runs_dir)  # held for the whole run, as the dashboard holds it
    first_seen: dict[int, datetime] = {}
    try:
        ingestor = Ingestor(con, runs_dir, log=lambda message: print(message, file=sys.stderr))
        cursor = con.cursor()

        def tick() -> None:
            ingestor.ingest()
            (newest,) = cursor.execute("SELECT coalesce(max(step), 0) FROM steps").fetchone()
            seen_at = utc_now()
            for step in range(1, newest + 1):
                first_seen.setdefault(step, seen_at)

        child = subprocess.Popen([sys.executable, "-c", CHILD, str(PROJECT_ROOT), str(runs_dir), str(steps), str(period)],
                                 cwd=PROJECT_ROOT)
        loop = BackgroundIngest(tick, interval=INGEST_INTERVAL_S, wake=CommitWatch(runs_dir).changed if wake else None)
        try:
            child.wait(timeout=600)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            time.sleep(INGEST_INTERVAL_S * 2)
            loop.stop()
        if child.returncode != 0 or loop.last_error:
            raise SystemExit(f"the writer exited with {child.returncode}; ingest: {loop.last_error}")
        (run,) = list_run_dirs(runs_dir)
        logged = dict(con.execute("SELECT step, ts FROM steps").fetchall())
        on_disk: dict[int, datetime] = {}
        import pyarrow.parquet as pq

        for commit in list_commits(run.root):
            if "steps" in commit.files:
                landed = datetime.fromtimestamp(os.stat(commit.marker).st_mtime, timezone.utc).replace(tzinfo=None)
                for step in pq.read_table(commit.files["steps"], columns=["step"]).column("step").to_pylist():
                    on_disk[step] = landed
    finally:
        con.close()
        shutil.rmtree(root, ignore_errors=True)
    ordered = sorted(logged)
    return ([(on_disk[s] - logged[s]).total_seconds() for s in ordered],
            [(first_seen[s] - logged[s]).total_seconds() for s in ordered])


NEW_RUNS_CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from benchmarks.write_path import step_metrics, trajectory_rows
import agentrl
import pyarrow.parquet  # what a training script has loaded long before its run starts
for n in range(int(sys.argv[3])):
    with agentrl.init(name=f"new-{n}", runs_dir=sys.argv[2], total_steps=1) as run:
        time.sleep(0.3)  # the script sets up its model; the run folder exists already
        run.log_trajectories(1, trajectory_rows(1))
        run.log(step_metrics(1), step=1, commit=True)
        time.sleep(1.2)
    time.sleep(0.37)  # runs start out of step with the watch's once-a-second listing
"""


def new_run_freshness(runs: int) -> tuple[list[float], list[float]]:
    """(first step logged -> commit on disk, -> readable in DuckDB) for each new run, in seconds."""
    from agentrl.store.ingest import BackgroundIngest, Ingestor, connect
    from agentrl.store.watch import CommitWatch

    root = Path(tempfile.mkdtemp(prefix="agentrl-new-runs-"))
    runs_dir = root / "runs"
    runs_dir.mkdir()
    con = connect(runs_dir)
    first_seen: dict[str, datetime] = {}
    try:
        ingestor = Ingestor(con, runs_dir, log=lambda message: print(message, file=sys.stderr))
        cursor = con.cursor()

        def tick() -> None:
            ingestor.ingest()
            seen_at = utc_now()
            for (run_id,) in cursor.execute("SELECT DISTINCT run_id FROM steps").fetchall():
                first_seen.setdefault(run_id, seen_at)

        loop = BackgroundIngest(tick, interval=INGEST_INTERVAL_S, wake=CommitWatch(runs_dir).changed)
        child = subprocess.Popen([sys.executable, "-c", NEW_RUNS_CHILD, str(PROJECT_ROOT), str(runs_dir), str(runs)],
                                 cwd=PROJECT_ROOT)
        try:
            child.wait(timeout=600)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            time.sleep(INGEST_INTERVAL_S * 2)
            loop.stop()
        if child.returncode != 0 or loop.last_error:
            raise SystemExit(f"the writer exited with {child.returncode}; ingest: {loop.last_error}")
        logged = dict(con.execute("SELECT run_id, ts FROM steps WHERE step = 1").fetchall())
        on_disk = {}
        for run in list_run_dirs(runs_dir):
            (commit,) = [c for c in list_commits(run.root) if "steps" in c.files][:1]
            on_disk[run.run_id] = datetime.fromtimestamp(os.stat(commit.marker).st_mtime, timezone.utc).replace(tzinfo=None)
    finally:
        con.close()
        shutil.rmtree(root, ignore_errors=True)
    ordered = sorted(logged)
    return ([(on_disk[r] - logged[r]).total_seconds() for r in ordered],
            [(first_seen[r] - logged[r]).total_seconds() for r in ordered])


def line(label: str, seconds: list[float], scale: float, unit: str) -> str:
    values = [s * scale for s in seconds]
    digits = 3 if unit == "ms" else 3
    return (f"{label:<58} {len(values):>4}  {percentile(values, 50):>8.{digits}f}  {percentile(values, 95):>8.{digits}f}  "
            f"{max(values):>8.{digits}f} {unit}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="steps timed in the caller (a)")
    parser.add_argument("--work", type=float, default=0.05, help="seconds of 'training' between steps in (a)")
    parser.add_argument("--fresh-steps", type=int, default=100, help="steps the child logs in (b)")
    parser.add_argument("--period", type=float, default=0.1, help="seconds between the child's steps in (b)")
    parser.add_argument("--new-runs", type=int, default=20, help="new runs the child starts in (c)")
    args = parser.parse_args()

    print(f"agentrl write path ({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start)\n")
    print(f"{'measure':<58} {'n':>4}  {'median':>8}  {'p95':>8}  {'max':>8}")
    dicts = caller_cost(args.steps, args.work, typed=False)
    print(line("(a) caller: 32 trajectory rows (dicts) + a step of 12 metrics", dicts, 1e3, "ms"))
    typed = caller_cost(args.steps, args.work, typed=True)
    print(line("(a) caller: the same with 32 TrajectoryRecords, built in the call", typed, 1e3, "ms"))
    wandb = caller_cost(args.steps, args.work, typed=False, wandb_style=True)
    print(line("(a) caller: 32 rows (dicts) + run.log(12 metrics, step=step)", wandb, 1e3, "ms"))
    clock_disk, clock_db = freshness(args.fresh_steps, args.period, wake=False)
    print(line("(b) log_step -> commit on disk", clock_disk, 1, "s"))
    print(line(f"(b) log_step -> readable in DuckDB, ingest every {INGEST_INTERVAL_S} s", clock_db, 1, "s"))
    wake_disk, wake_db = freshness(args.fresh_steps, args.period, wake=True)
    print(line("(b) log_step -> readable in DuckDB, woken by commits (CommitWatch)", wake_db, 1, "s"))
    new_disk, new_db = new_run_freshness(args.new_runs)
    print(line("(c) a new run's first step -> commit on disk", new_disk, 1, "s"))
    print(line("(c) a new run's first step -> readable in DuckDB (CommitWatch)", new_db, 1, "s"))
    print()
    print(f"targets: caller median <= {TARGET_CALLER_MS} ms: {percentile(dicts, 50) * 1e3:.3f} ms; "
          f"readable median <= {TARGET_FRESH_S} s: {percentile(wake_db, 50):.3f} s with the wake-up, "
          f"{percentile(clock_db, 50):.3f} s without; a new run's first step readable median {percentile(new_db, 50):.3f} s; "
          f"run.log median {percentile(wandb, 50) * 1e3:.3f} ms (load average {os.getloadavg()[0]:.1f} at the end)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
