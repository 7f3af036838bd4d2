"""agentrl/supervisor.py: `agentrl train` records how its run ended, also when the run is killed.

Issue 12, finding 4: a CLI-started run that was killed said "vanished (exit status unknown)"
forever. Real processes throughout: the CLI in a subprocess, killed with real signals.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest

from agentrl.launcher import Launcher
from agentrl.record.chunks import chunk_files
from agentrl.record.rundir import TERMINAL_STATUSES, RunDir, list_run_dirs
from agentrl.supervisor import describe_exit, record_exit
from helpers import REPO_ROOT, wait_for


def start_train(runs_dir, *extra) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("AGENTRL_RUNS_DIR", None)
    return subprocess.Popen([sys.executable, "-m", "agentrl", "train", "--preset", "refund-outcome", "--step-delay", "0.3",
                             "--runs-dir", str(runs_dir), "--quiet", *extra], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def train(runs_dir):
    proc = start_train(runs_dir)
    yield proc
    if proc.poll() is None:
        proc.kill()  # its worker gets SIGTERM from the kernel and stops at its next step
    proc.communicate(timeout=30)


def running_worker(runs_dir) -> tuple[RunDir, int]:
    def found():
        runs = list_run_dirs(runs_dir)
        status = (runs[0].status() or {}) if runs else {}
        return (runs[0], status["pid"]) if status.get("status") == "running" and status.get("step", 0) >= 2 else None

    result = wait_for(found, timeout=60)
    assert result, "the run never reached step 2"
    return result


def test_a_sigkilled_cli_run_is_failed_naming_the_signal_without_any_reconcile(runs_dir, train):
    run, worker = running_worker(runs_dir)
    assert worker != train.pid  # the worker does the run; `train` supervises it
    os.kill(worker, signal.SIGKILL)
    out, err = train.communicate(timeout=60)
    assert train.returncode == 3, err
    status = run.status()
    assert status["status"] == "failed"
    assert status["error"].startswith("the run process was killed by SIGKILL")
    assert status["exit_code"] == -signal.SIGKILL and status["ended_at"]
    assert f"run {run.run_id} failed" in out
    assert Launcher(runs_dir).reconcile() == []  # nothing left for anyone to guess


def test_killing_the_train_command_stops_its_run_which_records_itself_cancelled(runs_dir, train):
    run, worker = running_worker(runs_dir)
    os.kill(train.pid, signal.SIGKILL)  # the command a person started, not the worker
    assert train.wait(timeout=30) == -signal.SIGKILL
    assert wait_for(lambda: (run.status() or {}).get("status") in TERMINAL_STATUSES, timeout=30)
    assert wait_for(lambda: not psutil.pid_exists(worker) or psutil.Process(worker).status() == psutil.STATUS_ZOMBIE, 30)
    status = run.status()
    assert status["status"] == "cancelled" and 2 <= status["step"] < 30
    steps = sum(1 for _ in chunk_files(run.root, "steps"))
    assert steps >= 1  # its last flush happened before the status


def test_sigterm_to_the_train_command_is_passed_to_the_run(runs_dir, train):
    run, _ = running_worker(runs_dir)
    train.send_signal(signal.SIGTERM)
    out, err = train.communicate(timeout=60)
    assert train.returncode == 3, err
    assert run.status()["status"] == "cancelled" and run.status()["error"] is None


def test_record_exit_leaves_a_status_the_run_wrote_itself(tmp_path):
    from agentrl.record.rundir import create_run_dir

    run = create_run_dir(tmp_path, "20260101-000000-x-0000", {"run_id": "x", "config": {}})
    run.update_status(status="succeeded")
    assert not record_exit(run, -9)
    assert run.status()["status"] == "succeeded"
    run.update_status(status="running")
    assert record_exit(run, 1)
    assert run.status()["error"] == describe_exit(1) and run.status()["exit_code"] == 1
