"""The Ray backend on a local single-node Ray: submit-to-running latency, and the fleet on actors.

Launch -> **Ray backend** -> Ray job -> run process; tabular run -> **fleet** -> Ray actors. Starts a
Ray instance of its own (127.0.0.1 only, `--cpus` logical CPUs, its own temp dir), then:

1. submits `--jobs` tabular runs (3 rounds each) one after another through
   `Launcher(backend="ray")`, and measures for each: the `start` call, submit -> Ray says
   RUNNING, submit -> the run's status.json says `running`, submit -> `succeeded`;
2. cancels one more run (stop file, then `stop_job` with no grace) and measures cancel -> `cancelled`;
3. samples the refund taskset's rounds (32 rollouts, `--latency` s per environment step) with 1
   and 2 worker processes and with 2 Ray actors, checks that every round's batch is the same for
   all three, and prints transitions per second (median of `--rounds`, start-up excluded).

    .venv/bin/python benchmarks/ray_backend.py [--jobs 5] [--latency 0.02] [--rounds 4] [--cpus 4]

The figures are for one machine (2 cores here): nothing about a multi-node cluster or GPUs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentrl.config import make_config  # noqa: E402
from agentrl.engines.tabular.fleet import RolloutFleet  # noqa: E402
from agentrl.engines.tabular.imitation import clone_expert  # noqa: E402
from agentrl.launcher import Launcher  # noqa: E402
from agentrl.record.rundir import TERMINAL_STATUSES, RunDir, read_json  # noqa: E402
from agentrl.tasks.refund.tasksets import EXPERT_TASKS, TRAIN_TASKS  # noqa: E402


def start_ray(cpus: int, temp_dir: str):
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray server on 127.0.0.1
    import ray

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.perf_counter()
    context = ray.init(num_cpus=cpus, object_store_memory=80 * 1024 * 1024, include_dashboard=True,
                       dashboard_host="127.0.0.1", dashboard_port=port, log_to_driver=False, _temp_dir=temp_dir,
                       runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    address = f"http://{context.dashboard_url}"
    from ray.job_submission import JobSubmissionClient

    while True:  # the job API answers a little after ray.init returns
        try:
            JobSubmissionClient(address)
            break
        except Exception:
            time.sleep(0.2)
    return ray, address, time.perf_counter() - started


def poll(predicate, timeout: float = 300.0, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError("gave up waiting")


def one_job(launcher: Launcher, client, index: int) -> dict[str, float]:
    t0 = time.perf_counter()
    run_id = launcher.start(make_config(name=f"bench-{index}", rounds=3, probe_every=0))
    submitted = time.perf_counter() - t0
    run = RunDir(launcher.runs_dir / run_id)
    job_id = read_json(run.root / "launch.json")["job_id"]
    poll(lambda: str(client.get_job_status(job_id)) != "PENDING")
    job_running = time.perf_counter() - t0

    def state():
        launcher.reconcile()
        return (run.status() or {}).get("status")

    poll(lambda: state() in ("running", *TERMINAL_STATUSES))
    run_running = time.perf_counter() - t0
    final = poll(lambda: (s := state()) in TERMINAL_STATUSES and s)
    done = time.perf_counter() - t0
    assert final == "succeeded", (run_id, run.status())
    return {"start call": submitted, "job RUNNING": job_running, "run running": run_running, "succeeded": done}


def cancel_latency(launcher: Launcher, client) -> tuple[float, str, str]:
    run_id = launcher.start(make_config(name="bench-cancel", rounds=500, step_delay=1.0))
    run = RunDir(launcher.runs_dir / run_id)
    job_id = read_json(run.root / "launch.json")["job_id"]

    def step_one():
        launcher.reconcile()
        return (run.status() or {}).get("step", 0) >= 1

    poll(step_one)
    t0 = time.perf_counter()
    launcher.cancel(run_id)

    def ended():
        launcher.reconcile(grace_s=0.0)
        return (run.status() or {}).get("status") in TERMINAL_STATUSES

    poll(ended)
    took = time.perf_counter() - t0
    job = poll(lambda: (s := client.get_job_status(job_id)).is_terminal() and s)
    return took, run.status()["status"], str(job)


def signature(batch):
    return [(t.task.task_id, t.actions, [round(tr.behavior_logp, 12) for tr in t.transitions]) for t in batch]


def fleets(latency: float, rounds: int) -> tuple[dict[str, float], bool]:
    policy = clone_expert(EXPERT_TASKS)
    rates, same = {}, True
    reference: list = []
    for label, workers, backend in (("1 process", 1, "processes"), ("2 processes", 2, "processes"), ("2 Ray actors", 2, "ray")):
        with RolloutFleet(workers, run_seed=7, env_latency_s=latency, backend=backend) as fleet:
            fleet.sample(policy, TRAIN_TASKS, 8, round_index=0)  # warm-up: workers started and imported
            fleet.stats.per_round.clear()
            batches = [signature(fleet.sample(policy, TRAIN_TASKS, 8, round_index=r)) for r in range(1, rounds + 1)]
            rates[label] = statistics.median(fleet.stats.per_round)
        if not reference:
            reference = batches
        same = same and batches == reference
    return rates, same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5, help="tabular runs submitted one after another (default 5)")
    parser.add_argument("--latency", type=float, default=0.02, help="seconds per environment step in the fleet (default 0.02)")
    parser.add_argument("--rounds", type=int, default=4, help="timed fleet rounds (default 4)")
    parser.add_argument("--cpus", type=int, default=4, help="logical CPUs of the local Ray instance (default 4)")
    args = parser.parse_args()
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    runs = Path(tempfile.mkdtemp(prefix="agentrl-ray-bench-"))
    ray, address, init_s = start_ray(args.cpus, temp_dir)
    try:
        from ray.job_submission import JobSubmissionClient

        client = JobSubmissionClient(address)
        launcher = Launcher(runs, backend="ray", ray_address=address)
        print(f"local Ray {ray.__version__}: {args.cpus} logical CPUs on {os.cpu_count()} cores; "
              f"ray.init to a job API that answers: {init_s:.1f} s")
        times = [one_job(launcher, client, i) for i in range(args.jobs)]
        print(f"\ntabular runs (3 rounds) submitted as Ray jobs, {args.jobs} one after another; seconds from submit:")
        print(f"{'':>14}  {'median':>6}  {'max':>6}  all")
        for key in times[0]:
            values = [t[key] for t in times]
            print(f"{key:>14}  {statistics.median(values):>6.2f}  {max(values):>6.2f}  "
                  + " ".join(f"{v:.2f}" for v in values))
        took, status, job = cancel_latency(launcher, client)
        print(f"\ncancel (stop file, then stop_job with no grace) -> {status}: {took:.2f} s; Ray job {job}")
        rates, same = fleets(args.latency, args.rounds)
        print(f"\nenvironment fleet: 32 rollouts a round, {args.latency * 1000:.0f} ms per environment step, "
              f"median of {args.rounds} rounds (start-up excluded)")
        base = rates["1 process"]
        for label, rate in rates.items():
            print(f"{label:>14}  {rate:>8.1f} transitions/s  {rate / base:>5.2f}x")
        print(f"every round's batch identical for 1 process, 2 processes and 2 Ray actors: {same}")
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
        shutil.rmtree(runs, ignore_errors=True)


if __name__ == "__main__":
    main()
