"""The launcher's Ray backend: a run submitted as a Ray job, and its status, logs and cancel.

Launch -> `agentrl.launcher` -> **Ray backend** -> Ray job (`python -m agentrl train ...` on the
cluster) -> chunks in the runs directory -> store. The job's entrypoint is `shlex.join` of an
argument list we built (Ray only takes a string and runs it with a shell); its metadata carries
the run id, and `launch.json` records the job's submission id and the cluster's HTTP address, so
any launcher (the dashboard, `agentrl runs`) can follow the run later:

- status: Ray's `PENDING`/`RUNNING` is alive; a job that ended before the run wrote a terminal
  status.json becomes `failed` with Ray's message (or `cancelled` when a stop was asked for);
- logs: Ray keeps the job's output; the launcher copies it into `<run_dir>/stdout.log`;
- cancel: the stop file first (the run honours it between steps, when the runs directory is
  shared with the node), then `stop_job` once the grace period has passed.

The run writes its chunks into the runs directory, so the job's node must reach it at the same
path (the same machine, or a shared directory); unless the launcher has a chunks URL behind an
object store (`s3://...`): then the nodes share nothing but that URL. The job gets the config as
text and the run id, makes the run's folder in its own node's runs directory (`$AGENTRL_RUNS_DIR`
of `ray start` there), and publishes run.json, status.json and its chunks under the URL; the
launcher's folder is a head's copy of that run (`agentrl.record.published`), and the storage's
settings (`AWS_*`) travel in the job's runtime environment, never in a run file.
`AGENTRL_RAY_RESOURCES` (JSON, e.g. `{"agentrl_worker": 1}`) puts the job on a node that has them. Ray is an optional extra (`pip install .[ray]`):
nothing here imports it until a Ray run is launched or followed, and a missing Ray, a bad address
or an unreachable cluster is one `BackendError` line, raised before anything is written.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

BACKENDS = ("local", "ray")  # where the launcher starts runs; here, not in the launcher, so the CLI's options cost no imports
BACKEND_ENV, RAY_ADDRESS_ENV = "AGENTRL_BACKEND", "AGENTRL_RAY_ADDRESS"  # the dashboard's launcher reads these
RAY_PYTHON_ENV = "AGENTRL_RAY_PYTHON"  # the interpreter a Ray job runs, on its node (default: this one's path)
RAY_RESOURCES_ENV = "AGENTRL_RAY_RESOURCES"  # JSON: the resources a run's job needs on its node (Ray's entrypoint_resources)
REQUEST_TIMEOUT_S = 10.0  # one HTTP request to the cluster's job API; the dashboard's ingest loop waits on it
PROBE_TIMEOUT_S = 3.0  # the TCP check of HOST:PORT before Ray is asked
RETRY_AFTER_S = 10.0  # an address that failed is not asked again for this long (a dead cluster must not stall ingest)
ALIVE = ("PENDING", "RUNNING")


class BackendError(Exception):
    """A launch backend that cannot be used (Ray missing, a bad address, an unreachable cluster): one line."""


def require_ray(what: str = "the Ray backend"):
    """The `ray` module, or a BackendError naming the install command."""
    try:
        import ray
    except ImportError:
        raise BackendError(f"{what} needs Ray, which is not installed: pip install .[ray]") from None
    return ray


def _line(error: BaseException) -> str:
    """An exception's message as one short line."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text[:300]


@dataclass(frozen=True)
class JobState:
    """What Ray says about one job."""

    status: str  # PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED
    message: str = ""
    exit_code: int | None = None

    @property
    def alive(self) -> bool:
        return self.status in ALIVE


def _probe(address: str | None) -> None:
    """A TCP connection to HOST:PORT of `address` first: Ray itself waits 30-45 s on a GCS or
    `ray://` address where nothing listens, the Launch button must not."""
    if not address or address == "auto":
        return
    try:
        parts = urlsplit(address if "://" in address else f"tcp://{address}")
        host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80 if parts.scheme == "http" else None)
    except ValueError:
        host = port = None
    if not host or not port:
        raise BackendError(f"not a Ray cluster address: {address!r}; use http://HEAD:8265 (the dashboard) or HEAD:6379")
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as error:
        raise BackendError(f"cannot reach the Ray cluster at {address}: nothing answers at {host}:{port} "
                           f"({error.strerror or error}); is it running? (ray start --head)") from None


def _client_class():
    from ray.job_submission import JobSubmissionClient

    class TimedClient(JobSubmissionClient):
        """Ray's job client with a timeout on every request (Ray sets none, and an unreachable
        host would hold the caller for minutes)."""

        def _do_request(self, method, endpoint, **kwargs):
            kwargs.setdefault("timeout", REQUEST_TIMEOUT_S)
            return super()._do_request(method, endpoint, **kwargs)

    return TimedClient


class RayJobs:
    """One Ray cluster's job API. Constructing it checks that Ray is installed and the cluster answers."""

    def __init__(self, address: str | None):
        require_ray()
        where = address or "the local Ray cluster (RAY_ADDRESS, or the latest `ray start` on this machine)"
        _probe(address)
        try:
            self._client = _client_class()(address)
        except Exception as error:  # Ray raises ConnectionError, ValueError, RuntimeError, its own errors
            if "authentication" in str(error).lower():  # `ray start` turns token authentication on
                raise BackendError(f"the Ray cluster at {where} asks for its token: set RAY_AUTH_MODE=token where the "
                                   "dashboard (or `agentrl launch`) runs, with the cluster's token in ~/.ray/auth_token "
                                   "or RAY_AUTH_TOKEN (`ray get-auth-token` on the head node prints it)") from None
            raise BackendError(f"cannot reach the Ray cluster at {where}: {_line(error)}") from None
        #: The cluster's HTTP address as Ray resolved it; launch.json keeps it for whoever follows the run.
        self.address: str = self._client.get_address()
        if address and address.startswith(("http://", "https://")) and self.address.rstrip("/") != address.rstrip("/"):
            # Ray's rule: RAY_API_SERVER_ADDRESS or RAY_ADDRESS wins over the address it is given.
            raise BackendError(f"Ray asked {self.address} (from RAY_ADDRESS or RAY_API_SERVER_ADDRESS) instead of "
                               f"{address}: unset the variable, or pass that address")

    def submit(self, argv: list[str], submission_id: str, metadata: dict[str, str], env: dict[str, str],
               resources: dict[str, float] | None = None) -> str:
        """Submit `argv` as a job (on a node with `resources`, when given); returns its submission id."""
        try:
            return self._client.submit_job(entrypoint=shlex.join(argv), submission_id=submission_id,
                                           metadata=metadata, runtime_env={"env_vars": env},
                                           entrypoint_resources=resources or None)
        except Exception as error:
            raise BackendError(f"the Ray cluster at {self.address} refused the job: {_line(error)}") from None

    def state(self, job_id: str) -> JobState | None:
        """The job's state, or None when the cluster does not know the job (it was restarted)."""
        try:
            info = self._client.get_job_info(job_id)
        except RuntimeError as error:
            if "404" in str(error):
                return None
            raise BackendError(f"the Ray cluster at {self.address}: {_line(error)}") from None
        except Exception as error:
            raise BackendError(f"cannot reach the Ray cluster at {self.address}: {_line(error)}") from None
        return JobState(str(info.status), info.message or "", info.driver_exit_code)

    def logs(self, job_id: str) -> str:
        try:
            return self._client.get_job_logs(job_id)
        except Exception as error:
            raise BackendError(f"cannot read the logs of Ray job {job_id} at {self.address}: {_line(error)}") from None

    def stop(self, job_id: str) -> bool:
        """Ask Ray to stop the job (SIGTERM to its processes, SIGKILL a few seconds later)."""
        try:
            return self._client.stop_job(job_id)
        except Exception as error:
            raise BackendError(f"cannot stop Ray job {job_id} at {self.address}: {_line(error)}") from None


class RayClients:
    """The launcher's connections, one per cluster address, with a back-off for addresses that failed."""

    def __init__(self):
        self._clients: dict[str | None, RayJobs] = {}
        self._failed: dict[str | None, tuple[float, str]] = {}

    def get(self, address: str | None) -> RayJobs:
        if address in self._clients:
            return self._clients[address]
        failed = self._failed.get(address)
        if failed and time.monotonic() - failed[0] < RETRY_AFTER_S:
            raise BackendError(failed[1])
        try:
            jobs = RayJobs(address)
        except BackendError as error:
            self._failed[address] = (time.monotonic(), str(error))
            raise
        self._failed.pop(address, None)
        self._clients[address] = self._clients[jobs.address] = jobs
        return jobs

    def forget(self, address: str | None, error: BackendError) -> None:
        """A request to `address` failed: reconnect later, not on every tick."""
        self._clients = {a: c for a, c in self._clients.items() if a != address and c.address != address}
        self._failed[address] = (time.monotonic(), str(error))


def job_environment(project_root: Path) -> dict[str, str]:
    """The environment variables every run's job gets: what the local launcher sets, and the
    project on the import path (a node where agentrl is installed with pip does not need it)."""
    path = str(project_root)
    return {"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "PYTHONPATH": path + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}


def storage_environment() -> dict[str, str]:
    """The object store's settings of this process (`AWS_*`: endpoint, credentials, profile, region),
    for a job that writes through a chunks URL from a node that may have none of its own."""
    return {name: value for name, value in os.environ.items() if name.startswith("AWS_")}


def parse_resources(text: str | None) -> dict[str, float] | None:
    """`AGENTRL_RAY_RESOURCES`: a JSON object of resource names and positive amounts, or one BackendError line."""
    if not text or not text.strip():
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if (not isinstance(value, dict) or not value
            or not all(isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                       for k, v in value.items())):
        raise BackendError(f"{RAY_RESOURCES_ENV}={text!r} is not a JSON object of resource names and positive "
                           'amounts, such as {"agentrl_worker": 1}')
    return {k: float(v) for k, v in value.items()}


def submission_id(run_id: str) -> str:
    return f"agentrl-{run_id}"


def job_metadata(run_id: str, name: str, kind: str, runs_dir: Path) -> dict[str, str]:
    return {"agentrl_run_id": run_id, "agentrl_name": name, "agentrl_kind": kind, "agentrl_runs_dir": str(runs_dir)}


def ended_detail(job_id: str, state: JobState | None, address: str, last_output: str = "") -> str:
    """Why a run whose job ended without a terminal status failed: Ray's words and the job's last line."""
    if state is None:
        detail = f"the Ray job {job_id} is not known to the cluster at {address} (was the cluster restarted?)"
    else:
        detail = f"the Ray job {job_id} ended {state.status} without a final status"
        if state.exit_code is not None:
            detail += f" (exit code {state.exit_code})"
        lines = [line.strip() for line in state.message.strip().splitlines()]
        said = (lines or [""])[0].rstrip(":")
        # Where the job's node died, Ray says so further down: "The actor died because its node has died. ..."
        said += "".join(f" {line.split(' Node Id:')[0]}" for line in lines[1:] if DEAD_NODE.search(line))
        if said:  # "Job entrypoint command failed with exit code 7, last available logs (...)"
            detail += f": {said[:300]}"
    if last_output:
        detail += f"; last output: {' '.join(last_output.split())[:300]}"
    return detail


DEAD_NODE = re.compile(r"died because its node has died|node was terminated")
RAY_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+(INFO|WARNING|ERROR) job_\w+\.py:|Running entrypoint for job )")


def run_output(lines: list[str]) -> list[str]:
    """The lines the run printed, without those Ray's job manager adds to the job's log."""
    return [line for line in lines if line.strip() and not RAY_LOG_LINE.match(line)]


def write_log(path: Path, text: str) -> None:
    """Replace the run's stdout.log with Ray's copy of the job's output (temporary name, then rename)."""
    temp = path.with_name(path.name + ".ray-tmp")
    temp.write_text(text, errors="replace")
    os.replace(temp, path)
