"""The launcher: starts run processes, tracks their liveness, cancels them.

Launch -> **run process**: a run is `python -m agentrl train --config <run_dir>/config.json ...`
started from an argument list (never a shell string) in its own session, output to
`<run_dir>/stdout.log`; that command supervises a worker that does the run and records its exit
(`agentrl.supervisor`). Liveness is the pid *and* the process create time (a reused pid is not
the run), of the process we started or the worker status.json names. A run that vanished
without a terminal status is marked `failed` with its exit code or signal (or "exit status
unknown" when neither it nor this launcher could learn it); a cancel is a stop file the run
honours between rounds, then SIGKILL to its process group after a grace period.

That is the `local` backend. With `backend="ray"` a run is submitted as a Ray job instead
(`agentrl.ray_backend`): launch.json records the job, Ray's job status stands in for the pid,
Ray's copy of the output is copied into stdout.log, and the cancel's last resort is `stop_job`.
Each run is followed the way it was launched, whatever backend this launcher starts new runs with.
A head's copy of a run published from another machine (`agentrl.record.published`) is not
followed here: its own machine records its end, and a cancel writes the stop file beside its chunks.
Unless this launcher submitted it as a Ray job to a node that shares nothing with it but a chunks
URL in an object store: then the run's folder here is such a copy from the start, the status it
publishes is read from the URL, and Ray's job status decides the end the run could not record.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from agentrl.config import RunConfig
from agentrl.launch_configs import MAX_SEEDS, new_launch_group, pair_configs, seed_configs, with_fixtures  # noqa: F401
from agentrl.paths import PROJECT_ROOT
from agentrl.ray_backend import (
    BACKEND_ENV,
    BACKENDS,
    RAY_ADDRESS_ENV,
    RAY_PYTHON_ENV,
    RAY_RESOURCES_ENV,
    BackendError,
    RayClients,
    ended_detail,
    job_environment,
    job_metadata,
    parse_resources,
    run_output,
    storage_environment,
    submission_id,
    write_log,
)
from agentrl.record.chunks import sweep_uncommitted
from agentrl.record.locations import CHUNKS_URL_ENV
from agentrl.record.published import is_copy, make_copy, publish_status, publishes, refresh_copy, request_stop
from agentrl.record.rundir import (
    TERMINAL_STATUSES,
    RunDir,
    RunsDirError,
    iso,
    list_run_dirs,
    new_run,
    remove_run_dir,
    utc_now,
    write_json_atomic,
)
from agentrl.record.runfiles import RunFileError, read_launch, read_status
from agentrl.supervisor import describe_exit

CANCEL_GRACE_S = 10.0
LAUNCH_GRACE_S = 60.0  # a queued run whose process never said hello is failed after this
LOG_SYNC_S = 2.0  # a running Ray job's output is copied into stdout.log at most this often


@dataclass(frozen=True)
class Liveness:
    alive: bool
    exit_code: int | None = None  # negative: killed by that signal
    known: bool = False  # True when the exit code is known (we are the parent)


def create_run(runs_dir: Path, config: RunConfig, launch_group: str | None = None, run_id: str | None = None) -> RunDir:
    """A new run's folder for `config`: run.json (who it is, and the `launch_group` it was started
    with, if any), config.json, and a `queued` status.json; `run_id` when a launcher elsewhere named
    it. A config without `fixtures` gets the fixtures of its task stored so far (`with_fixtures`); its
    scanners get their held-out figures recorded (`agentrl.scan.enforce.with_scanner_validation`)."""
    from agentrl.scan.enforce import with_scanner_validation

    config = with_scanner_validation(Path(runs_dir), with_fixtures(Path(runs_dir), config))
    labels = {"launch_group": launch_group} if launch_group else {}
    run = new_run(Path(runs_dir), config.name, config.kind, config.scorer, config.model_dump(mode="json"),
                  total_steps=config.total_steps, run_id=run_id, **labels)
    try:
        (run.root / "config.json").write_text(config.to_json())
    except OSError as error:  # a full disk: no half-made run folder is left behind
        remove_run_dir(run)
        raise RunsDirError(f"cannot write run folder {str(run.root)!r}: {error.strerror or error}") from None
    return run


def _is_copy(run: RunDir) -> bool:
    """Whether the run folder is a head's copy of a run published from another machine (a
    damaged run.json is no copy: this launcher judges that run as before)."""
    try:
        return is_copy(run.meta())
    except ValueError:  # not UTF-8
        return False


class Launcher:
    """Starts runs in one runs directory and keeps their Popen handles to learn exit codes.

    `backend` is where new runs start: "local" (a process on this machine) or "ray" (a Ray job
    on the cluster at `ray_address`; None: RAY_ADDRESS, or the latest `ray start` here).
    `python` is the interpreter of the run's command, on the job's node for a Ray run.
    A Ray run with `chunks_url` behind an object store runs in its node's own runs directory and
    shares only that URL with this machine; `ray_resources` picks the node (Ray's entrypoint resources).
    """

    def __init__(self, runs_dir: Path, python: str = sys.executable, backend: str = "local",
                 ray_address: str | None = None, chunks_url: str | None = None,
                 ray_resources: dict[str, float] | None = None):
        if backend not in BACKENDS:
            raise BackendError(f"unknown launch backend {backend!r}; choose one of {list(BACKENDS)}")
        self.runs_dir = Path(runs_dir)
        self.python = python
        self.backend = backend
        self.ray_address = ray_address or None
        self.chunks_url = chunks_url or None
        self.ray_resources = ray_resources or None
        self._children: dict[str, subprocess.Popen] = {}
        self._lock = threading.Lock()
        self._ray = RayClients()
        self._backend_of: dict[str, str] = {}  # run id -> "local" | "ray", from its launch.json
        self._settled: set[str] = set()  # Ray runs with nothing left to follow
        self._stopping: set[str] = set()  # Ray runs whose job this launcher asked Ray to stop
        self._log_copied: dict[str, float] = {}
        #: Runs the last `reconcile` could not judge, with why (a damaged status.json names its path).
        self.unreadable: dict[str, str] = {}

    @classmethod
    def from_environment(cls, runs_dir: Path, backend: str | None = None, ray_address: str | None = None,
                         chunks_url: str | None = None) -> Launcher:
        """The dashboard's (and `launch`'s) launcher: `backend` / `ray_address` when given, else
        AGENTRL_BACKEND ("local" or "ray") and AGENTRL_RAY_ADDRESS; a Ray job runs AGENTRL_RAY_PYTHON
        (default: this interpreter's path, which must then exist on the job's node) on a node with
        AGENTRL_RAY_RESOURCES, and writes through `chunks_url` (default AGENTRL_CHUNKS_URL)."""
        backend = backend or os.environ.get(BACKEND_ENV) or "local"
        python = (os.environ.get(RAY_PYTHON_ENV) if backend == "ray" else None) or sys.executable
        resources = parse_resources(os.environ.get(RAY_RESOURCES_ENV)) if backend == "ray" else None
        return cls(runs_dir, python=python, backend=backend, ray_address=ray_address or os.environ.get(RAY_ADDRESS_ENV) or None,
                   chunks_url=chunks_url or os.environ.get(CHUNKS_URL_ENV) or None, ray_resources=resources)

    @property
    def shares_only_the_url(self) -> bool:
        """Whether new Ray runs share nothing with this machine but an object-store chunks URL."""
        return self.backend == "ray" and publishes(self.chunks_url)

    def describe(self) -> str:
        """Where new runs start, in one line (the Launch page shows it)."""
        if self.backend == "ray":
            where = self.ray_address or "the local Ray cluster (RAY_ADDRESS, or the latest `ray start` on this machine)"
            if self.shares_only_the_url:
                return (f"Runs start as Ray jobs on {where}, in their node's own runs directory; they share "
                        f"nothing with this machine but {self.chunks_url}, where they publish their files.")
            return (f"Runs start as Ray jobs on {where}; their node must reach the runs directory "
                    f"{self.runs_dir.resolve()} at the same path.")
        return "Runs start as processes on this machine."

    def check(self) -> None:
        """Raise BackendError when new runs cannot start (Ray missing, a bad address, a cluster that does not answer)."""
        if self.backend == "ray":
            self._ray.get(self.ray_address)

    def _train_command(self, run: RunDir) -> list[str]:
        return [self.python, "-m", "agentrl", "train", "--config", str(run.root.resolve() / "config.json"),
                "--runs-dir", str(self.runs_dir.resolve()), "--run-id", run.run_id]

    def start(self, config: RunConfig, launch_group: str | None = None) -> str:
        """Create the run folder and start its process (or submit its Ray job); returns the run id.
        `launch_group`: the id shared by the runs started together with this one (`start_group`)."""
        if self.backend == "ray":
            return self._start_ray_job(config, launch_group)
        run = create_run(self.runs_dir, config, launch_group)
        run_id = run.run_id
        command = self._train_command(run)
        env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        if self.chunks_url:
            env[CHUNKS_URL_ENV] = self.chunks_url
        with open(run.log_path, "ab") as log:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=PROJECT_ROOT, env=env, start_new_session=True, close_fds=True,
            )
        try:
            create_time = psutil.Process(process.pid).create_time()
        except psutil.Error:
            create_time = None
        # The child owns status.json; the launcher records the process in a file of its own.
        write_json_atomic(run.root / "launch.json", {"pid": process.pid, "create_time": create_time,
                                                     "launched_at": iso(utc_now()), "command": command})
        with self._lock:
            self._children[run_id] = process
        return run_id

    def _start_ray_job(self, config: RunConfig, launch_group: str | None = None) -> str:
        """Submit the run as a Ray job. The cluster is asked first, so a missing Ray or a cluster
        that does not answer is one error with nothing written."""
        jobs = self._ray.get(self.ray_address)
        run = create_run(self.runs_dir, config, launch_group)
        # The dashboard (or `agentrl ingest`) is the one store writer: a job on another node must
        # never open the DuckDB file, which may sit on a shared disk.
        command = [*self._train_command(run), "--no-ingest"]
        env = job_environment(PROJECT_ROOT)
        job_id = submission_id(run.run_id)  # ours, so launch.json names the job before it exists
        try:
            if self.shares_only_the_url:  # the node makes the run's folder in its own runs directory
                config_text = json.dumps(json.loads((run.root / "config.json").read_text()), separators=(",", ":"))
                command = [self.python, "-m", "agentrl", "train", "--config-json", config_text, "--run-id", run.run_id,
                           "--chunks-url", self.chunks_url, "--no-ingest"]
                env.update(storage_environment())  # the job's runtime environment, never a run file
                make_copy(run, self.chunks_url)
            elif self.chunks_url:
                command += ["--chunks-url", self.chunks_url]
            write_json_atomic(run.root / "launch.json", {
                "backend": "ray", "ray_address": jobs.address, "job_id": job_id,
                "launched_at": iso(utc_now()), "command": command})
            jobs.submit(command, job_id, job_metadata(run.run_id, config.name, config.kind, self.runs_dir.resolve()),
                        env, self.ray_resources)
        except (BackendError, OSError) as error:
            remove_run_dir(run)
            if isinstance(error, BackendError):
                raise
            raise RunsDirError(f"cannot write run folder {str(run.root)!r}: {error.strerror or error}") from None
        self._backend_of[run.run_id] = "ray"
        return run.run_id

    def following(self, run_id: str) -> bool:
        """Whether a Ray run still has a job to follow (its output is copied once the job ends)."""
        return self._backend_of.get(run_id) == "ray" and run_id not in self._settled

    def start_group(self, configs: list[RunConfig]) -> list[str]:
        """Start `configs` as one launch: every run records the same launch group, which is how
        Compare finds the runs launched together (`queries.newest_pair`)."""
        group = new_launch_group()
        return [self.start(config, group) for config in configs]

    def start_pair(self, outcome: RunConfig, guarded: RunConfig, seeds: int = 1) -> list[str]:
        """The outcome-vs-guarded pair as one launch, `seeds` seeds of each (outcome runs first)."""
        return self.start_group([*seed_configs(outcome, seeds), *seed_configs(guarded, seeds)])

    def liveness(self, run: RunDir) -> Liveness:
        """Whether the run's process is alive; RunFileError when its status or launch file is damaged.

        The process we started (when this launcher started it) and the process the run recorded
        in status.json both count: `agentrl train` supervises a worker process that does the work.
        """
        with self._lock:
            process = self._children.get(run.run_id)
        if process is not None:
            code = process.poll()  # also reaps it, so no zombie is left behind
            if code is None:
                return Liveness(alive=True)
            return Liveness(alive=self._recorded_process(run) is not None, exit_code=code, known=True)
        return Liveness(alive=self._recorded_process(run) is not None)

    def _recorded_process(self, run: RunDir) -> psutil.Process | None:
        """The run's recorded process (status.json's, else launch.json's) when it is alive and is
        that process: same pid *and* create time, so a reused pid is never taken for the run."""
        status = read_status(run) or {}
        source = status if status.get("pid") else (read_launch(run) or {})
        pid, create_time = source.get("pid"), source.get("create_time")
        if not pid or create_time is None:
            return None  # a pid alone cannot say it is still the run's process
        try:
            proc = psutil.Process(pid)
            if abs(proc.create_time() - create_time) >= 1.0 or proc.status() == psutil.STATUS_ZOMBIE:
                return None
        except (psutil.Error, OverflowError, ValueError):
            return None
        return proc

    def cancel(self, run_id: str) -> None:
        """Ask the run to stop; `reconcile` kills it if it has not stopped within the grace period."""
        run = RunDir(self.runs_dir / run_id)
        if not run.meta_path.exists():
            raise ValueError(f"no run {run_id!r} in {self.runs_dir}")
        if (run.status() or {}).get("status") in TERMINAL_STATUSES:
            return
        meta = run.meta() or {}
        if is_copy(meta):  # a run of another machine, seen through its chunks URL: the stop goes there
            try:
                request_stop(meta)
            except OSError as error:
                raise ValueError(f"run {run_id} runs elsewhere and its chunks URL cannot be written now: {error}") from None
        run.request_stop()

    def reconcile(self, grace_s: float = CANCEL_GRACE_S) -> list[str]:
        """Mark vanished runs failed (or cancelled) and enforce cancel grace periods.

        Returns the ids whose status this call changed.
        """
        changed = []
        unreadable = {}
        for run in list_run_dirs(self.runs_dir):
            try:
                if self._reconcile_one(run, grace_s):
                    changed.append(run.run_id)
            except (RunFileError, BackendError) as error:  # that run only: it cannot be judged until its file is fixed
                unreadable[run.run_id] = str(error)  # (or its Ray cluster answers again)
            except OSError as error:  # its folder cannot be written (a full or read-only disk)
                unreadable[run.run_id] = f"{run.root}: cannot record its status: {error.strerror or error}"
        self.unreadable = unreadable
        return changed

    def _reconcile_one(self, run: RunDir, grace_s: float) -> bool:
        """Reconcile one run; True when its status changed."""
        copy = _is_copy(run)
        launch = self._ray_launch(run)
        if copy and launch is None:
            return False  # a run of another machine: its own machine records its end, the store reads it from the URL
        status = read_status(run) or {}
        state = status.get("status")
        if launch is not None:
            return self._reconcile_ray_job(run, launch, state, grace_s, copy)
        if state in TERMINAL_STATUSES:
            # The process may still be ingesting after its final status: keep its handle
            # until it has exited and been reaped.
            with self._lock:
                process = self._children.get(run.run_id)
                if process is not None and process.poll() is not None:
                    del self._children[run.run_id]
            return False
        live = self.liveness(run)
        if live.alive and run.stop_requested():
            requested = run.stop_path.stat().st_mtime
            if time.time() - requested > grace_s:
                self._kill(run)
                live = Liveness(alive=False)
        if live.alive:
            return False
        if not live.known and not self._known_pid(run) and self._age(run) < LAUNCH_GRACE_S:
            return False  # being launched right now: no process recorded yet
        # Re-read: the run may have written its terminal status just before exiting.
        status = read_status(run) or {}
        if status.get("status") in TERMINAL_STATUSES:
            return False
        if run.stop_requested():
            run.update_status(status="cancelled", ended_at=iso(utc_now()),
                              error="cancelled; the run was stopped by the launcher after the grace period")
        else:
            last = run_output(run.tail_log(20))
            detail = describe_exit(live.exit_code if live.known else None)
            if last:
                detail += f"; last output: {last[-1][:300]}"
            run.update_status(status="failed", ended_at=iso(utc_now()), error=detail, exit_code=live.exit_code)
        sweep_uncommitted(run.root)  # no process writes the run any more: a flush cut short goes
        return True

    def _ray_launch(self, run: RunDir) -> dict | None:
        """The run's launch.json when it was submitted as a Ray job, else None."""
        if self._backend_of.get(run.run_id) == "local":
            return None
        try:
            launch = read_launch(run)
        except RunFileError:
            return None  # the process path below names a damaged launch.json where it matters
        if launch is None:
            return None  # being launched right now, or a run recorded by a script
        if launch.get("backend") != "ray":
            self._backend_of[run.run_id] = "local"
            return None
        self._backend_of[run.run_id] = "ray"
        if not isinstance(launch.get("job_id"), str) or not isinstance(launch.get("ray_address"), str):
            raise RunFileError(run.root / "launch.json", ": a Ray launch needs 'job_id' and 'ray_address' strings")
        return launch

    def _reconcile_ray_job(self, run: RunDir, launch: dict, state: str | None, grace_s: float, copy: bool) -> bool:
        """A Ray run: Ray's job status is its liveness; True when its status changed. A run on a
        node that shares only the chunks URL (`copy`) says its status there."""
        if run.run_id in self._settled:
            return False
        job_id, address = launch["job_id"], launch["ray_address"]
        jobs = self._ray.get(address)
        try:
            job = jobs.state(job_id)
        except BackendError as error:
            self._ray.forget(address, error)
            raise
        if copy and state not in TERMINAL_STATUSES:  # read after the job's state: an end it published before it ended counts
            self._refresh_copy(run)
            state = (read_status(run) or {}).get("status")
        if state in TERMINAL_STATUSES:  # the run said how it ended; keep its output once the job is over
            if job is None or not job.alive:
                self._copy_log(run, jobs, job_id, force=job is not None)
                self._settled.add(run.run_id)
            return False
        if job is None and state in (None, "queued") and self._age(run) < LAUNCH_GRACE_S:
            return False  # being submitted right now: the cluster does not know the job yet
        if job is not None and job.alive:
            self._copy_log(run, jobs, job_id)
            if (run.stop_requested() and run.run_id not in self._stopping
                    and time.time() - run.stop_path.stat().st_mtime > grace_s):
                jobs.stop(job_id)  # the stop file was not honoured in time (or never reached the node)
                self._stopping.add(run.run_id)
            return False
        if job is not None:
            self._copy_log(run, jobs, job_id, force=True)
        status = read_status(run) or {}  # it may have written its terminal status just before the job ended
        if status.get("status") in TERMINAL_STATUSES:
            return False
        exit_code = job.exit_code if job is not None and job.exit_code is not None and -255 <= job.exit_code <= 255 else None
        if run.stop_requested() or (job is not None and job.status == "STOPPED"):
            run.update_status(status="cancelled", ended_at=iso(utc_now()), exit_code=exit_code,
                              error=f"cancelled; the Ray job {job_id} was stopped before the run recorded its end")
        else:
            last = run_output(run.tail_log(20))
            run.update_status(status="failed", ended_at=iso(utc_now()), exit_code=exit_code,
                              error=ended_detail(job_id, job, jobs.address, last[-1] if last else ""))
        if copy:  # every head that lists the URL sees the end recorded here (the run's own storage may be away)
            try:
                publish_status(run)
            except OSError:
                pass
        else:
            sweep_uncommitted(run.root)
        self._settled.add(run.run_id)
        return True

    def _refresh_copy(self, run: RunDir) -> None:
        try:
            refresh_copy(run)
        except OSError as error:
            raise BackendError(f"run {run.run_id} publishes its status under {(run.meta() or {}).get('chunks_url')}, "
                               f"which does not answer now: {' '.join(str(error).split())[:200]}") from None

    def _copy_log(self, run: RunDir, jobs, job_id: str, force: bool = False) -> None:
        """Ray's copy of the job's output into stdout.log: at most every LOG_SYNC_S while it runs,
        and once more when it ends. Best effort: the run's status does not depend on it."""
        now = time.monotonic()
        if not force and now - self._log_copied.get(run.run_id, -LOG_SYNC_S) < LOG_SYNC_S:
            return
        self._log_copied[run.run_id] = now
        try:
            write_log(run.log_path, jobs.logs(job_id))
        except (BackendError, OSError):
            pass

    def _known_pid(self, run: RunDir) -> int | None:
        status = read_status(run) or {}
        launch = read_launch(run) or {}
        return status.get("pid") or launch.get("pid")

    def _age(self, run: RunDir) -> float:
        try:
            return time.time() - run.meta_path.stat().st_mtime
        except OSError:
            return 0.0

    def _kill(self, run: RunDir) -> None:
        """SIGKILL the run's process group (the run is its own session leader), only once its
        process is verified; never the launcher's own group."""
        with self._lock:
            process = self._children.get(run.run_id)
        pids = [p.pid for p in [self._recorded_process(run)] if p is not None]
        if process is not None and process.poll() is None:
            pids.append(process.pid)
        for pid in pids:
            try:
                group = os.getpgid(pid)
                if group == os.getpgrp():
                    os.kill(pid, signal.SIGKILL)
                else:
                    os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if process is not None:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
