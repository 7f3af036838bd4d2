"""`launch`: start a run in the background, as a process here or as a Ray job on a cluster.

CLI -> **launch** -> `agentrl.launcher.Launcher` (the dashboard's launcher, with its backends) ->
run process or Ray job. Unlike `train`, which runs in the foreground, `launch` prints the run id
and returns (with `--wait`, it follows the run to its end and ingests it). The backend comes from
`--backend` / `--ray-address`, else AGENTRL_BACKEND / AGENTRL_RAY_ADDRESS, as in the dashboard
(`Launcher.from_environment`).
A missing Ray, a bad address or a cluster that does not answer is one error line, exit 2, and
nothing is written.
"""

from __future__ import annotations

import argparse
import time

from agentrl.cli.common import UsageError, add_runs_dir, config_from_args, runs_dir_of
from agentrl.config import ConfigError, preset_names
from agentrl.ray_backend import BACKEND_ENV, BACKENDS, RAY_ADDRESS_ENV, RAY_PYTHON_ENV, RAY_RESOURCES_ENV
from agentrl.record.rundir import TERMINAL_STATUSES, RunDir, ensure_writable

WAIT_POLL_S = 0.5
FINISH_WAIT_S = 30.0  # after the run's final status, for its Ray job to end


def register(sub: argparse._SubParsersAction) -> None:
    launch = sub.add_parser("launch", help="start a run in the background (a process here, or a Ray job) and print its id")
    source = launch.add_mutually_exclusive_group()
    source.add_argument("--preset", help=f"a built-in config: {', '.join(preset_names())}")
    source.add_argument("--config", help="a JSON run config (see schemas/run_config.schema.json)")
    launch.add_argument("--task", help="the task of a language-model run (as for `train`)")
    add_runs_dir(launch)
    launch.add_argument("--name", help="override the run's name")
    launch.add_argument("--step-delay", type=float, help="seconds to pause after each step, to watch a run live")
    launch.add_argument("--scorer", help="override the scorer: 'outcome' or 'guarded'")
    launch.add_argument("--backend", choices=BACKENDS, default=None,
                        help=f"where the run starts: 'local' (a process here) or 'ray' (a Ray job); default ${BACKEND_ENV} or local")
    launch.add_argument("--ray-address", default=None,
                        help=f"the Ray cluster (http://HEAD:8265, or HEAD:6379); default ${RAY_ADDRESS_ENV}, "
                             "then RAY_ADDRESS, then the latest `ray start` on this machine")
    launch.add_argument("--chunks-url", default=None,
                        help="the run writes its chunks (and, behind an object store, its run files) under URL/<run_id>/; "
                             "default $AGENTRL_CHUNKS_URL")
    launch.epilog = (f"A Ray job runs ${RAY_PYTHON_ENV} (default: this interpreter's path) on its node (one with "
                     f"${RAY_RESOURCES_ENV}, a JSON object, when set), and writes into the runs directory at the same "
                     "path: the node must reach it (the same machine, or a shared directory), unless the chunks URL is "
                     "an object store's (s3://...): then the node uses its own runs directory and shares only the URL.")
    launch.add_argument("--wait", action="store_true", help="follow the run until it ends, then ingest it (exit 0: succeeded)")
    launch.set_defaults(func=cmd_launch)


def cmd_launch(args: argparse.Namespace) -> int:
    from agentrl.engines.registry import engine_of
    from agentrl.launcher import Launcher
    from agentrl.ray_backend import BackendError
    from agentrl.record.runfiles import read_launch

    config = config_from_args(args, "launch")
    refusal = engine_of(config).preflight(config).refusal
    if refusal:
        raise ConfigError(refusal)
    try:
        launcher = Launcher.from_environment(runs_dir_of(args), backend=args.backend, ray_address=args.ray_address,
                                             chunks_url=args.chunks_url)
        launcher.check()  # the cluster answers before the runs directory is touched
        if launcher.chunks_url:  # and the storage too (a bucket is never created)
            from agentrl.record.locations import ChunkLocationError, check_chunks_url

            try:
                check_chunks_url(launcher.chunks_url, reach=True)
            except ChunkLocationError as error:
                raise UsageError(str(error)) from None
        ensure_writable(launcher.runs_dir)
        run_id = launcher.start(config)
    except BackendError as error:
        raise UsageError(str(error)) from None
    run = RunDir(launcher.runs_dir / run_id)
    launch = read_launch(run) or {}
    where = (f"Ray job {launch.get('job_id')} on {launch.get('ray_address')}" if launch.get("backend") == "ray"
             else f"process {launch.get('pid')} on this machine")
    print(f"run {run_id}: {config.kind} {config.scorer}, {where} -> {run.root}", flush=True)
    return _wait(launcher, run) if args.wait else 0


def _wait(launcher, run: RunDir) -> int:
    """Follow the run (reconciling it, as the dashboard does) until it ends; then ingest it."""
    from agentrl.store.ingest import StoreError, ingest_once

    last_step, warned = None, None
    while True:
        launcher.reconcile()
        problem = launcher.unreadable.get(run.run_id)
        if problem and problem != warned:  # a cluster that stopped answering: say so once, keep trying
            print(f"cannot follow run {run.run_id} now: {problem}", flush=True)
        warned = problem
        status = run.status() or {}
        if not run.root.is_dir():  # removed while it ran: it will never say how it ended
            status = {"status": "failed", "error": "the run folder was removed while it ran"}
            break
        if status.get("step") and status.get("step") != last_step:
            last_step = status["step"]
            print(f"step {last_step}/{status.get('total_steps') or '?'}", flush=True)
        if status.get("status") in TERMINAL_STATUSES:
            break
        time.sleep(WAIT_POLL_S)
    deadline = time.monotonic() + FINISH_WAIT_S
    while launcher.following(run.run_id) and time.monotonic() < deadline:  # a Ray job's last output
        time.sleep(WAIT_POLL_S)
        launcher.reconcile()
    state = status["status"]
    line = f"run {run.run_id} {state}" + (f": {status['error']}" if status.get("error") else "")
    try:
        report = ingest_once(launcher.runs_dir, wait_s=5.0)
        print(f"{line}; ingested {report.rows} rows from {report.files} chunks", flush=True)
    except (StoreError, OSError) as error:  # held by the dashboard, damaged, full: it ingests later
        print(f"{line}; not ingested now: {' '.join(str(error).split())[:300]}", flush=True)
    return 0 if state == "succeeded" else 3
