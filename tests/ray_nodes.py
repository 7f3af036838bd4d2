"""Two Ray nodes on this host that share nothing but what a test hands both: for the tests of a
cluster (tests/test_ray_cluster.py) and its benchmark (benchmarks/ray_cluster.py).

Each node is one `ray start --block` process of its own, in a session of its own (so a node can be
killed whole, as a machine dies), with its own temp directory, and its own environment: the
worker's names its own runs directory (`AGENTRL_RUNS_DIR`), which a job it runs inherits. The head
has the dashboard (the job API) and the GCS; the worker joins it and carries the custom resource
`agentrl_worker`, which a launcher asks for (`AGENTRL_RAY_RESOURCES`) to put a run's job there.
Token authentication is off: both nodes are on this host, and the client of a test process may
have read another cluster's token already (Ray keeps the first it reads).

Stopping: SIGTERM to each `ray start --block` (Ray then stops the node's own processes and reaps
them), SIGKILL after a wait, then SIGKILL to whatever either node had started that is still there.
Nothing here calls `ray stop`, which stops every Ray process of the machine, other clusters' too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
WORKER_RESOURCE = "agentrl_worker"
# A node whose raylet is gone is declared dead after about 3 missed 0.5 s health checks (default: 5 x 3 s).
FAST_HEALTH_CHECKS = {"RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "1000",
                      "RAY_health_check_failure_threshold": "3", "RAY_health_check_initial_delay_ms": "0"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Node:
    name: str
    temp_dir: str
    process: subprocess.Popen
    log: Path
    started: set[int] = field(default_factory=set)  # every process seen under this node, for the final sweep

    def processes(self) -> list[psutil.Process]:
        """`ray start` and every process under it (its daemons, their workers, a job's run)."""
        try:
            root = psutil.Process(self.process.pid)
            found = [root, *root.children(recursive=True)]
        except psutil.Error:
            return []
        self.started.update(p.pid for p in found)
        return found

    def kill(self) -> None:
        """The machine dies: SIGKILL to the node's whole process tree at once."""
        victims = self.processes()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        for proc in victims:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


def _options(*pairs: str) -> list[str]:
    return [f"--{name}={free_port()}" for name in pairs]


def _start(name: str, args: list[str], env: dict[str, str], log_dir: Path) -> Node:
    temp_dir = tempfile.mkdtemp(prefix=f"ray-{name}-", dir="/tmp")  # short: Ray's socket paths live under it
    log = log_dir / f"ray-{name}.log"
    with open(log, "ab") as out:
        process = subprocess.Popen([RAY, "start", "--block", f"--temp-dir={temp_dir}", "--disable-usage-stats",
                                    "--object-store-memory=80000000", "--include-log-monitor=false", *args,
                                    *_options("dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                                              "runtime-env-agent-port", "metrics-export-port")],
                                   env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    return Node(name, temp_dir, process, log)


@dataclass
class TwoNodes:
    head: Node
    worker: Node
    gcs_address: str  # 127.0.0.1:PORT
    address: str  # http://127.0.0.1:PORT: the head's job API, what a launcher is given
    worker_runs_dir: Path

    @property
    def nodes(self) -> tuple[Node, Node]:
        return self.head, self.worker

    def alive_nodes(self) -> list[dict]:
        from ray.util.state import list_nodes

        return [n.__dict__ for n in list_nodes(address=self.address, raise_on_missing_output=False)
                if n.state == "ALIVE"]

    def stop(self, timeout: float = 30.0) -> list[str]:
        """Stop both nodes; returns what was still running after SIGKILL (empty when all is gone)."""
        for node in (self.worker, self.head):
            node.processes()  # remember the tree before it is taken apart
            if node.process.poll() is None:
                node.process.send_signal(signal.SIGTERM)  # `ray start --block` stops its node's processes
        for node in (self.worker, self.head):
            try:
                node.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                node.kill()
        # A few outlive their node a moment (the dashboard's forkserver and its resource tracker): wait, then SIGKILL.
        remembered = []
        for node in self.nodes:
            for pid in node.started:
                with contextlib.suppress(psutil.Error):
                    remembered.append(psutil.Process(pid))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(node.process.pid, signal.SIGKILL)

        def running() -> list[psutil.Process]:
            alive = []
            for proc in remembered:
                with contextlib.suppress(psutil.Error):
                    if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                        alive.append(proc)
            return alive

        deadline = time.monotonic() + 5
        while running() and time.monotonic() < deadline:
            time.sleep(0.2)
        for proc in running():
            with contextlib.suppress(psutil.Error):
                proc.kill()
        time.sleep(0.5)
        left = [f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in running()]
        for node in self.nodes:
            shutil.rmtree(node.temp_dir, ignore_errors=True)
        return left


def start_two_nodes(worker_runs_dir: Path, log_dir: Path, head_cpus: int = 1, worker_cpus: int = 2,
                    env: dict[str, str] | None = None, timeout: float = 120.0, worker_slots: int = 1) -> TwoNodes:
    """A head and a worker on this host; `env` is the base environment of both (no AWS variables:
    a run's job gets those from whoever launches it). `worker_slots`: how many `agentrl_worker`
    the worker has, so how many runs asking for one it takes at once."""
    base = {k: v for k, v in (env or os.environ).items()
            if not k.startswith(("AWS_", "RAY_", "AGENTRL_")) and k != "PYTHONPATH"}
    base.update(FAST_HEALTH_CHECKS, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    gcs_port, dashboard_port = free_port(), free_port()
    # Both in Ray's cluster mode, which advertises this host's own address rather than loopback (a
    # worker resolves 127.0.0.1 to it, and a head in single-machine mode would not answer there).
    head = _start("head", ["--head", f"--port={gcs_port}", f"--num-cpus={head_cpus}", "--include-dashboard=true",
                           "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}",
                           *_options("ray-client-server-port")],
                  dict(base, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="1"), log_dir)
    cluster = None
    try:
        address = f"http://127.0.0.1:{dashboard_port}"
        _wait(lambda: _job_api_answers(address), timeout, head, "the head's job API never answered")
        worker_runs_dir.mkdir(parents=True, exist_ok=True)
        worker = _start("worker", [f"--address=127.0.0.1:{gcs_port}", f"--num-cpus={worker_cpus}",
                                   f"--resources={json.dumps({WORKER_RESOURCE: worker_slots})}"],
                        dict(base, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="1", AGENTRL_RUNS_DIR=str(worker_runs_dir)), log_dir)
        cluster = TwoNodes(head, worker, f"127.0.0.1:{gcs_port}", address, worker_runs_dir)
        _wait(lambda: len(cluster.alive_nodes()) == 2, timeout, worker, "the worker never joined the head")
        return cluster
    except BaseException:
        if cluster is not None:
            cluster.stop()
        else:
            head.kill()
        raise


def _job_api_answers(address: str) -> bool:
    from ray.job_submission import JobSubmissionClient

    try:
        JobSubmissionClient(address)
        return True
    except Exception:
        return False


def _wait(predicate, timeout: float, node: Node, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if node.process.poll() is not None:
            raise RuntimeError(f"{what}: `ray start` of the {node.name} exited {node.process.returncode}; "
                               f"see {node.log}:\n{node.log.read_text()[-2000:]}")
        try:
            if predicate():
                return
        except Exception:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{what} within {timeout:.0f} s; see {node.log}")
