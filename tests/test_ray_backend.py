"""Tests of agentrl/ray_backend.py: runs submitted as Ray jobs, and the environment fleet on Ray actors.

Real Ray throughout (issue 15, item 3). The `slow` tests share one local Ray instance per module,
started by this process (127.0.0.1 only, 4 logical CPUs, a small object store, a temp dir of its
own, token authentication as Ray sets it up) and shut down at the end, with every process it
started gone: a tabular run submitted through the launcher's Ray backend trains on two fleet
actors and lands in the store with exact counts; the fleet's batch on Ray actors is the batch of
worker processes; a cancelled Ray run is stopped by `stop_job` and recorded `cancelled`; a job
that dies before its run says anything is `failed` with Ray's words. The quick tests need no
cluster: importing agentrl never imports Ray, and a missing Ray, an unknown backend or a
cluster that does not answer is one line with nothing written.

Ray is an optional extra; `make test` (and so CI) installs it. Without it the Ray tests are
skipped, except under CI, where a missing Ray fails them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import types

import psutil
import pytest

from helpers import REPO_ROOT, agentrl, store_rows, wait_for
from agentrl.cli import main
from agentrl.config import ConfigError, make_config
from agentrl.engines.tabular.fleet import RolloutFleet
from agentrl.launcher import Launcher
from agentrl.ray_backend import BackendError
from agentrl.record.rundir import RUNS_DIR_ENV, TERMINAL_STATUSES, RunDir, create_run_dir, list_run_dirs, read_json, write_json_atomic
from agentrl.tasks.refund.tasksets import TRAIN_TASKS

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None and not os.environ.get("CI"),
                               reason="Ray is an optional extra: pip install -r requirements-ray.txt -c constraints.txt")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _our_processes(marker: str) -> list[psutil.Process]:
    """Processes whose command line names `marker` (a test's own temp path): the runs this test started."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in arg for arg in proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            pass
    return found


# --- quick: no cluster --------------------------------------------------------------------------


def test_importing_agentrl_never_imports_ray():
    modules = ["agentrl", "agentrl.launcher", "agentrl.cli", "agentrl.ray_backend", "agentrl.engines.tabular.engine",
               "agentrl.engines.tabular.fleet", "agentrl.engines.registry", "agentrl.store.ingest"]
    code = f"import sys\nfor name in {modules!r}: __import__(name)\nprint('ray' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_without_ray_the_ray_backend_is_one_line_naming_the_install_and_writes_nothing(tmp_path):
    runs_dir = tmp_path / "runs"
    # `import ray` fails in this interpreter, as it does where the extra is not installed.
    code = ("import sys\nsys.modules['ray'] = None\nfrom agentrl.cli import main\n"
            f"sys.exit(main(['launch', '--backend', 'ray', '--preset', 'refund-outcome', '--runs-dir', {str(runs_dir)!r}]))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["error: the Ray backend needs Ray, which is not installed: pip install .[ray]"]
    assert not runs_dir.exists()
    code = ("import sys\nsys.modules['ray'] = None\nfrom agentrl.engines.tabular.fleet import RolloutFleet\n"
            "RolloutFleet(2, run_seed=7, backend='ray')")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert "BackendError: fleet_backend 'ray' needs Ray, which is not installed: pip install .[ray]" in result.stderr


def run_main(argv: list[str]) -> tuple[str, str, int]:
    """`python -m agentrl ARGV` in this process: (stdout, stderr, exit status)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse
            code = exit_.code
    return out.getvalue(), err.getvalue(), code


def test_an_unknown_backend_is_refused_in_one_line(runs_dir, monkeypatch):
    with pytest.raises(BackendError, match=r"unknown launch backend 'slurm'; choose one of \['local', 'ray'\]"):
        Launcher(runs_dir, backend="slurm")
    _, err, code = run_main(["launch", "--backend", "slurm", "--preset", "refund-outcome", "--runs-dir", str(runs_dir)])
    assert code == 2 and "invalid choice: 'slurm'" in err
    monkeypatch.setenv("AGENTRL_BACKEND", "slurm")  # the dashboard's variable, read by `launch` too
    _, err, code = run_main(["launch", "--preset", "refund-outcome", "--runs-dir", str(runs_dir)])
    assert code == 2 and err.splitlines() == ["error: unknown launch backend 'slurm'; choose one of ['local', 'ray']"]
    assert not runs_dir.exists()
    with pytest.raises(ConfigError, match="fleet_backend"):
        make_config(workers=2, fleet_backend="dask")


@pytest.mark.parametrize("text", ["agentrl_worker", '{"agentrl_worker": 0}', '["agentrl_worker"]', '{"w": true}', "{}"])
def test_ray_resources_that_are_not_a_json_object_of_positive_amounts_are_one_line(runs_dir, monkeypatch, text):
    monkeypatch.setenv("AGENTRL_RAY_RESOURCES", text)
    _, err, code = run_main(["launch", "--backend", "ray", "--preset", "refund-outcome", "--runs-dir", str(runs_dir)])
    assert code == 2 and err.splitlines() == [f"error: AGENTRL_RAY_RESOURCES={text!r} is not a JSON object of resource "
                                              'names and positive amounts, such as {"agentrl_worker": 1}']
    assert not runs_dir.exists()
    monkeypatch.setenv("AGENTRL_RAY_RESOURCES", '{"agentrl_worker": 1}')
    assert Launcher.from_environment(runs_dir, backend="ray").ray_resources == {"agentrl_worker": 1.0}


def test_a_run_id_from_a_launcher_elsewhere_makes_its_folder_here_only_behind_an_object_store(tmp_path, monkeypatch):
    """What a Ray job on a node that shares only the chunks URL runs: the folder is made here, with that id."""
    monkeypatch.setenv("AGENTRL_CHUNKS_URL", "")  # `train` in this process sets it: put back as it was after the test
    config = make_config(name="sent", rounds=1, probe_every=0).to_json()
    url = "memory://agentrl-sent/runs"  # an object store of this process: it publishes, as s3:// does
    result = agentrl("train", "--config-json", config, "--run-id", "20260101-000000-sent-0001", "--chunks-url", url,
                     "--no-ingest", "--quiet", "--runs-dir", tmp_path / "node")
    assert result.returncode == 0, result.stderr
    meta = read_json(tmp_path / "node" / "20260101-000000-sent-0001" / "run.json")
    assert meta["name"] == "sent" and meta["chunks_url"] == f"{url}/20260101-000000-sent-0001"
    # Refusals come before anything runs (in this process: no run is forked).
    _, err, code = run_main(["train", "--config-json", config, "--run-id", "20260101-000000-sent-0002",
                             "--runs-dir", str(tmp_path / "node")])
    assert code == 2 and err.splitlines() == [
        f"error: --run-id '20260101-000000-sent-0002': no run.json in {tmp_path / 'node' / '20260101-000000-sent-0002'}"]
    _, err, code = run_main(["train", "--config-json", config, "--run-id", "../escape", "--chunks-url", url,
                             "--runs-dir", str(tmp_path / "node")])
    assert code == 2 and err.splitlines() == ["error: --run-id '../escape' cannot name a run folder; use letters, digits, '.', '_' and '-'"]
    # A node whose runs directory is the launcher's own finds the launcher's copy of the run there: refused.
    head = create_run_dir(tmp_path / "head", "20260101-000000-sent-0003",
                          {"run_id": "20260101-000000-sent-0003", "name": "sent", "published_at": url})
    _, err, code = run_main(["train", "--config-json", config, "--run-id", head.run_id, "--chunks-url", url,
                             "--runs-dir", str(tmp_path / "head")])
    assert code == 2 and len(err.splitlines()) == 1 and "is the launcher's copy of this run" in err, err
    assert (head.status() or {})["status"] == "queued"


@needs_ray
@pytest.mark.parametrize("address", ["http://127.0.0.1:{port}", "127.0.0.1:{port}", "ray://127.0.0.1:{port}", "not a cluster"])
def test_a_cluster_that_does_not_answer_is_one_line_and_nothing_is_written(runs_dir, address):
    address = address.format(port=_free_port())  # nothing listens there
    _, err, code = run_main(["launch", "--backend", "ray", "--ray-address", address, "--preset", "refund-outcome",
                             "--runs-dir", str(runs_dir)])
    assert code == 2
    assert err.splitlines() == [err.splitlines()[0]] and err.startswith("error: ") and address in err, err
    assert "cannot reach the Ray cluster" in err or "not a Ray cluster address" in err
    assert not runs_dir.exists()


@needs_ray
def test_a_ray_run_whose_cluster_stops_answering_is_named_and_never_guessed_failed(runs_dir):
    run = create_run_dir(runs_dir, "20260101-000000-gone-0000", {"run_id": "gone", "name": "gone", "config": {}})
    run.update_status(status="running", step=3)
    address = f"http://127.0.0.1:{_free_port()}"
    write_json_atomic(run.root / "launch.json", {"backend": "ray", "ray_address": address, "job_id": "agentrl-gone"})
    launcher = Launcher(runs_dir)
    assert launcher.reconcile() == []
    assert address in launcher.unreadable[run.run_id]
    assert run.status()["status"] == "running"  # unknown is not failed: it may still be training there
    launcher.cancel(run.run_id)  # the stop file is written even when the cluster is away
    assert run.stop_requested() and launcher.reconcile() == [] and run.status()["status"] == "running"


@needs_ray
def test_the_dashboard_says_where_runs_start_and_starts_nothing_on_a_cluster_that_does_not_answer(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    runs_dir, address = tmp_path / "runs", f"http://127.0.0.1:{_free_port()}"
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))
    monkeypatch.setenv("AGENTRL_BACKEND", "ray")
    monkeypatch.setenv("AGENTRL_RAY_ADDRESS", address)
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=60)
    at.switch_page("pages/1_Launch.py")
    at.run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    assert any(c.value.startswith(f"Runs start as Ray jobs on {address}; their node must reach the runs directory")
               for c in at.caption)
    next(b for b in at.button if b.label == "Start run").click().run()
    (error,) = [re.sub(r"\\(.)", r"\1", e.value).replace("\u2060", "") for e in at.error]  # as the page reads (ui.plain)
    assert error.startswith(f"Could not start the run: BackendError: cannot reach the Ray cluster at {address}: nothing answers")
    assert [p for p in runs_dir.iterdir() if p.is_dir()] == []  # no run folder


# --- slow: one local Ray instance for the module --------------------------------------------------


class Cluster:
    def __init__(self, address: str, temp_dir: str):
        self.address = address  # the dashboard's HTTP address: the job API
        self.temp_dir = temp_dir

    def client(self):
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.address)


@pytest.fixture(scope="module")
def ray_cluster():
    saved = dict(os.environ)
    # Ray binds every server to the node's address; on one machine that is loopback only when Ray
    # runs in its single-machine mode (the mode it uses on macOS and Windows).
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # for the processes Ray starts
    import ray
    from ray._private import ray_constants

    cluster_mode = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False  # for this one, which may have imported Ray already

    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths live under it
    port = _free_port()
    context = ray.init(num_cpus=4, object_store_memory=80 * 1024 * 1024, include_dashboard=True,
                       dashboard_host="127.0.0.1", dashboard_port=port, log_to_driver=False, _temp_dir=temp_dir,
                       runtime_env={"env_vars": {"PYTHONPATH": str(REPO_ROOT)}})  # this driver's fleet actors import agentrl
    try:
        assert context.address_info["node_ip_address"] == "127.0.0.1"
        cluster = Cluster(f"http://{context.dashboard_url}", temp_dir)
        assert wait_for(lambda: _answers(cluster), timeout=60, interval=0.5), "the job API never answered"
        yield cluster
    finally:
        known = {p.pid: _describe(p) for p in me.children(recursive=True)}
        ray.shutdown()
        ray_constants.ENABLE_RAY_CLUSTER = cluster_mode
        os.environ.clear()
        os.environ.update(saved)
        # multiprocessing's resource tracker (the process fleet's, a child of this process for the
        # session) is not Ray's.
        started = [p for p in me.children(recursive=True)
                   if p.pid not in before and "multiprocessing.resource_tracker" not in known.get(p.pid, "")]
        _, alive = psutil.wait_procs(started, timeout=20)
        for proc in alive:
            proc.kill()
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not alive, f"Ray processes left running: {[known.get(p.pid, p.pid) for p in alive]}"


def _describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.pid} (parent {proc.ppid()}, {proc.status()}): {' '.join(proc.cmdline())[:200]}"
    except psutil.Error:
        return str(proc.pid)


def _answers(cluster: Cluster) -> bool:
    try:
        cluster.client()
        return True
    except Exception:
        return False


def _reconcile_until(launcher: Launcher, run_id: str, done, timeout: float = 120.0, **kwargs) -> dict:
    run = RunDir(launcher.runs_dir / run_id)

    def check():
        launcher.reconcile(**kwargs)
        return done(run.status() or {})

    assert wait_for(check, timeout=timeout, interval=0.2), f"{run_id}: {run.status()} {launcher.unreadable}"
    return run.status()


def _terminal(status: dict) -> bool:
    return status.get("status") in TERMINAL_STATUSES


def _job_over(cluster: Cluster, job_id: str) -> str:
    status = wait_for(lambda: (s := cluster.client().get_job_status(job_id)).is_terminal() and s, timeout=60, interval=0.2)
    assert status, f"the Ray job {job_id} never ended"
    return str(status)


@pytest.mark.slow
@needs_ray
def test_a_tabular_run_launched_as_a_ray_job_trains_on_ray_actors_and_lands_in_the_store(ray_cluster, runs_dir, tmp_path):
    from ray.util.state import list_actors

    config = make_config(name="on-ray", rounds=3, group_size=4, workers=2, fleet_backend="ray", probe_every=0)
    config_path = tmp_path / "on-ray.json"
    config_path.write_text(config.to_json())
    # `launch --backend ray --wait`: the launcher submits the job, follows it to its end, then ingests.
    out, err, code = run_main(["launch", "--backend", "ray", "--ray-address", ray_cluster.address, "--config", str(config_path),
                               "--runs-dir", str(runs_dir), "--wait"])
    assert code == 0, (out, err)
    (run,) = list_run_dirs(runs_dir)
    run_id = run.run_id
    launch = read_json(run.root / "launch.json")
    assert launch["backend"] == "ray" and launch["job_id"] == f"agentrl-{run_id}" and launch["ray_address"] == ray_cluster.address
    assert f"Ray job agentrl-{run_id} on {ray_cluster.address}" in out
    assert f"run {run_id} succeeded; ingested" in out
    assert run.status()["status"] == "succeeded"

    info = ray_cluster.client().get_job_info(launch["job_id"])
    assert str(info.status) == "SUCCEEDED" and info.metadata["agentrl_run_id"] == run_id
    assert shlex.split(info.entrypoint) == launch["command"]  # our argument list, quoted: no shell syntax of ours
    assert launch["command"][-1] == "--no-ingest"  # the dashboard (here `launch --wait`) is the one store writer
    log = (run.root / "stdout.log").read_text()  # Ray's copy of the job's output
    assert f"Running entrypoint for job agentrl-{run_id}" in log and "step 3/3 success" in log
    assert f"run {run_id} succeeded; its chunks wait in" in log  # the job left the store alone

    tasks = len(config.tasks)
    assert store_rows(runs_dir, "SELECT count(*) FROM steps WHERE run_id = ?", [run_id]) == [(3,)]
    assert store_rows(runs_dir, "SELECT count(*), count(DISTINCT step) FROM trajectories WHERE run_id = ?",
                      [run_id]) == [(3 * 4 * tasks, 3)]
    assert store_rows(runs_dir, "SELECT status FROM runs WHERE run_id = ?", [run_id]) == [("succeeded",)]
    metrics = store_rows(runs_dir, "SELECT metrics['workers'], metrics['transitions_per_s'] FROM steps WHERE run_id = ?", [run_id])
    assert len(metrics) == 3 and all(workers == 2.0 and rate > 0 for workers, rate in metrics), metrics
    # The rollouts were sampled by two Ray actors of that job (Ray's own record of its actors).
    every = list_actors(address=ray_cluster.address, detail=True, raise_on_missing_output=False, limit=1000)
    actors = [a for a in every if a.class_name == "Sampler" and a.job_id == info.job_id]
    assert len(actors) == 2 and all(a.state == "DEAD" for a in actors), every  # and closed with the run


def _signature(batch):
    return [(t.task.task_id, t.actions, [round(tr.behavior_logp, 12) for tr in t.transitions]) for t in batch]


@pytest.mark.slow
@needs_ray
def test_the_fleet_on_ray_actors_samples_the_same_batch_as_worker_processes(ray_cluster, cloned_policy, monkeypatch):
    import ray

    # An AppTest (this module's, or tests/app's earlier in the session) leaves a page script as
    # __main__, which the worker processes' 'spawn' would run again; a run process's __main__ is agentrl's.
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    with RolloutFleet(2, run_seed=7, backend="processes") as processes, RolloutFleet(3, run_seed=7, backend="ray") as actors:
        batches = []
        for round_index in (1, 2):
            a = processes.sample(cloned_policy, TRAIN_TASKS, 8, round_index=round_index)
            b = actors.sample(cloned_policy, TRAIN_TASKS, 8, round_index=round_index)
            assert len(a) == len(b) == 8 * len(TRAIN_TASKS)
            assert _signature(a) == _signature(b)  # 3 actors' slices, 2 processes' slices: one batch
            batches.append(_signature(b))
        assert batches[0] != batches[1]  # not one batch whatever the round: the seeds are the round's
        assert actors.stats.transitions == processes.stats.transitions > 0
    assert ray.is_initialized()  # the fleet joined this process's connection and left it open


@pytest.mark.slow
@needs_ray
def test_a_cancelled_ray_run_is_stopped_by_ray_and_recorded_cancelled(ray_cluster, runs_dir):
    launcher = Launcher(runs_dir, backend="ray", ray_address=ray_cluster.address)
    # On a fleet actor: ray.init in the run must not take over the SIGTERM that stop_job sends.
    run_id = launcher.start(make_config(name="cancel-me", rounds=500, step_delay=1.0, fleet_backend="ray"))
    job_id = read_json(runs_dir / run_id / "launch.json")["job_id"]
    _reconcile_until(launcher, run_id, lambda s: s.get("status") == "running" and s.get("step", 0) >= 1)
    launcher.cancel(run_id)
    assert RunDir(runs_dir / run_id).stop_requested()  # the stop file first
    status = _reconcile_until(launcher, run_id, _terminal, grace_s=0.0)  # then, the grace over, Ray's stop_job
    assert status["status"] == "cancelled", status
    assert _job_over(ray_cluster, job_id) == "STOPPED"
    assert status["step"] < 500
    assert wait_for(lambda: (launcher.reconcile(), not launcher.following(run_id))[1], timeout=30)
    assert f"run {run_id} cancelled" in "\n".join(RunDir(runs_dir / run_id).tail_log(50))  # the run recorded it itself
    assert wait_for(lambda: not _our_processes(str(runs_dir)), timeout=30), "the run's processes outlived the stop"


@pytest.mark.slow
@needs_ray
def test_a_job_that_dies_before_its_run_says_anything_is_failed_with_rays_message(ray_cluster, runs_dir, tmp_path):
    python = tmp_path / "python-dies"
    python.write_text("#!/bin/sh\necho 'fake python: cannot import agentrl'\nexit 7\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    launcher = Launcher(runs_dir, python=str(python), backend="ray", ray_address=ray_cluster.address)
    run_id = launcher.start(make_config(name="dies", rounds=3))
    assert (RunDir(runs_dir / run_id).status() or {})["status"] == "queued"
    status = _reconcile_until(launcher, run_id, _terminal)
    assert status["status"] == "failed" and status["exit_code"] == 7
    assert status["error"].startswith(f"the Ray job agentrl-{run_id} ended FAILED without a final status (exit code 7): ")
    assert "fake python: cannot import agentrl" in status["error"]  # Ray's message carries the job's last output
    assert "\n" not in status["error"]
    assert "fake python: cannot import agentrl" in (runs_dir / run_id / "stdout.log").read_text()
    assert launcher.reconcile() == []  # decided once
    assert json.loads((runs_dir / run_id / "status.json").read_text())["status"] == "failed"
