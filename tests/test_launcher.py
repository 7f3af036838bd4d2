"""Tests of agentrl/launcher.py: starting run processes, liveness, reconcile and cancel.

Real processes throughout: the launcher's promises are about processes (argument lists, exit
codes, signals, stop files), so a fake would test nothing. Stand-in "pythons" (tiny executable
scripts passed as `Launcher(python=...)`) play runs that fail early or ignore a stop request.
Every test checks it left no process behind.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import time
from pathlib import Path

import psutil
import pytest

from helpers import wait_for
from agentrl.config import load_preset
from agentrl.launcher import Launcher
from agentrl.record.rundir import TERMINAL_STATUSES, RunDir, create_run_dir, read_json


# `runs_dir` (a folder that does not exist yet) comes from conftest.py.


@pytest.fixture(autouse=True)
def no_stray_processes():
    """Fail a test that leaves a child process running; kill and reap whatever it left either way.

    A run writes its terminal status and then still ingests (if it can take the store) before it
    exits, so a child gets a few seconds to finish on its own before it counts as a stray.
    """
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    yield
    leftovers = [p for p in me.children(recursive=True) if p.pid not in before]
    _, alive = psutil.wait_procs(leftovers, timeout=15)  # also reaps the ones already dead
    strays = []
    for proc in alive:
        try:
            strays.append(f"{proc.pid} {' '.join(proc.cmdline())}")
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=10)
    assert not strays, f"processes left running: {strays}"



def status_of(launcher: Launcher, run_id: str) -> dict:
    return RunDir(launcher.runs_dir / run_id).status() or {}


def reconcile_until_terminal(launcher: Launcher, run_id: str, timeout: float = 60.0, **kwargs) -> dict:
    def done():
        launcher.reconcile(**kwargs)
        return status_of(launcher, run_id).get("status") in TERMINAL_STATUSES

    assert wait_for(done, timeout=timeout, interval=0.1), f"{run_id} not terminal: {status_of(launcher, run_id)}"
    return status_of(launcher, run_id)


def wait_running(launcher: Launcher, run_id: str, min_step: int = 0, timeout: float = 60.0) -> dict:
    def running():
        status = status_of(launcher, run_id)
        return status if status.get("status") == "running" and status.get("step", 0) >= min_step else None

    status = wait_for(running, timeout=timeout)
    assert status, f"{run_id} never reported running at step >= {min_step}: {status_of(launcher, run_id)}"
    return status


def fake_python(tmp_path: Path, name: str, body: str) -> str:
    """An executable that stands in for the python interpreter; gets `-m agentrl train ...` args."""
    path = tmp_path / name
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_launched_run_goes_queued_running_succeeded(runs_dir):
    launcher = Launcher(runs_dir)
    run_id = launcher.start(load_preset("refund-outcome", step_delay=0.2, rounds=8))
    seen = [status_of(launcher, run_id)["status"]]
    assert seen == ["queued"]  # written before the process starts

    def observe():
        launcher.reconcile()
        state = status_of(launcher, run_id).get("status")
        if state != seen[-1]:
            seen.append(state)
        return state in TERMINAL_STATUSES

    assert wait_for(observe, timeout=60, interval=0.05), seen
    assert seen == ["queued", "running", "succeeded"]
    status = status_of(launcher, run_id)
    assert status["step"] == 8 and status["error"] is None and status["ended_at"]
    # The worker wrote the status; the process the launcher started supervised it.
    assert status["pid"] != read_json(runs_dir / run_id / "launch.json")["pid"]
    assert "step 8/8" in (runs_dir / run_id / "stdout.log").read_text()
    assert launcher.reconcile() == []  # nothing to change on a finished run


def test_launcher_never_uses_a_shell(runs_dir):
    launcher = Launcher(runs_dir)
    run_id = launcher.start(load_preset("refund-outcome", step_delay=0.5, rounds=30))
    try:
        launch = read_json(runs_dir / run_id / "launch.json")
        command = launch["command"]
        assert isinstance(command, list) and all(isinstance(arg, str) for arg in command)
        assert command[0] == sys.executable
        assert command[1:4] == ["-m", "agentrl", "train"]
        assert command[command.index("--run-id") + 1] == run_id
        status = wait_running(launcher, run_id)
        proc = psutil.Process(launch["pid"])
        assert proc.cmdline() == command  # the process itself, not a shell wrapping it
        assert proc.ppid() == os.getpid()
        assert os.getsid(proc.pid) == proc.pid  # its own session, so a kill reaches its whole group
        worker = psutil.Process(status["pid"])
        assert worker.ppid() == proc.pid and os.getpgid(worker.pid) == proc.pid  # supervised, in the same group
    finally:
        launcher.cancel(run_id)
        reconcile_until_terminal(launcher, run_id, grace_s=5)


def test_sigkilled_run_is_failed_by_reconcile_naming_the_signal(runs_dir):
    launcher = Launcher(runs_dir)
    run_id = launcher.start(load_preset("refund-outcome", step_delay=0.5, rounds=30))
    pid = wait_running(launcher, run_id)["pid"]
    assert launcher.reconcile() == []  # alive: left alone
    os.kill(pid, signal.SIGKILL)
    status = reconcile_until_terminal(launcher, run_id, timeout=30)
    assert status["status"] == "failed"
    assert "SIGKILL" in status["error"]
    assert status["exit_code"] == -signal.SIGKILL
    assert status["ended_at"]


def test_run_killed_under_another_launcher_still_records_the_signal(runs_dir):
    """A dashboard restarted while its run was killed used to say "exit status unknown" forever:
    the run's own supervisor (`agentrl train`) now records how its worker ended."""
    owner = Launcher(runs_dir)
    run_id = owner.start(load_preset("refund-outcome", step_delay=0.5, rounds=30))
    pid = wait_running(owner, run_id)["pid"]
    os.kill(pid, signal.SIGKILL)
    stranger = Launcher(runs_dir)
    assert wait_for(lambda: status_of(stranger, run_id).get("status") in TERMINAL_STATUSES, 30)
    status = status_of(stranger, run_id)
    assert status["status"] == "failed" and "SIGKILL" in status["error"] and status["exit_code"] == -signal.SIGKILL
    assert stranger.reconcile() == []
    reconcile_until_terminal(owner, run_id)  # the owner reaps its child


def test_run_whose_whole_process_group_died_under_another_launcher_is_failed_with_unknown_exit_status(runs_dir):
    owner = Launcher(runs_dir)
    run_id = owner.start(load_preset("refund-outcome", step_delay=0.5, rounds=30))
    pid = wait_running(owner, run_id)["pid"]
    os.killpg(os.getpgid(pid), signal.SIGKILL)  # the worker and its supervisor at once: nobody can say
    assert wait_for(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 10)

    stranger = Launcher(runs_dir)
    assert stranger.reconcile() == [run_id]
    status = status_of(stranger, run_id)
    assert status["status"] == "failed"
    assert "exit status unknown" in status["error"]
    assert stranger.reconcile() == [] and owner.reconcile() == []  # the owner reaps its child here


def test_a_reused_pid_is_not_mistaken_for_the_run(runs_dir):
    run = create_run_dir(runs_dir, "20260101-000000-reused-0000", {"run_id": "20260101-000000-reused-0000",
                                                                  "name": "reused", "config": {}})
    # This test process is alive, but it was not created when the run said its process was.
    run.update_status(status="running", pid=os.getpid(), create_time=psutil.Process().create_time() - 3600)
    assert Launcher(runs_dir).reconcile() == [run.run_id]
    status = run.status()
    assert status["status"] == "failed" and "exit status unknown" in status["error"]


def test_a_queued_run_that_never_started_is_failed_after_the_launch_grace(runs_dir):
    run = create_run_dir(runs_dir, "20260101-000000-stuck-0000", {"run_id": "20260101-000000-stuck-0000",
                                                                 "name": "stuck", "config": {}})
    launcher = Launcher(runs_dir)
    assert launcher.reconcile() == []  # just created: it may be starting right now
    old = time.time() - 3600
    os.utime(run.meta_path, (old, old))
    assert launcher.reconcile() == [run.run_id]
    assert run.status()["status"] == "failed"


def test_run_process_exiting_nonzero_before_training_is_failed_with_its_exit_code(runs_dir, tmp_path):
    python = fake_python(tmp_path, "python-exit3", "import sys\nprint('error: config.json became invalid', flush=True)\nsys.exit(3)\n")
    launcher = Launcher(runs_dir, python=python)
    run_id = launcher.start(load_preset("refund-outcome"))
    status = reconcile_until_terminal(launcher, run_id, timeout=30)
    assert status["status"] == "failed"
    assert "exited with code 3" in status["error"]
    assert "config.json became invalid" in status["error"]  # the last line it printed
    assert status["exit_code"] == 3


def test_cancel_stops_a_run_early_between_rounds(runs_dir):
    launcher = Launcher(runs_dir)
    run_id = launcher.start(load_preset("refund-outcome", step_delay=0.5, rounds=30))
    wait_running(launcher, run_id, min_step=1)
    launcher.cancel(run_id)
    assert (runs_dir / run_id / "stop").exists()
    started = time.monotonic()
    status = reconcile_until_terminal(launcher, run_id, timeout=30)
    assert time.monotonic() - started < 10
    assert status["status"] == "cancelled"
    assert 1 <= status["step"] < 30
    assert status["error"] is None  # it stopped itself; the launcher did not have to kill it
    launcher.cancel(run_id)  # cancelling a finished run is a no-op
    assert status_of(launcher, run_id)["status"] == "cancelled"


def test_cancel_of_an_unknown_run_is_refused(runs_dir):
    runs_dir.mkdir()
    with pytest.raises(ValueError, match="no run"):
        Launcher(runs_dir).cancel("20260101-000000-nope-0000")


IGNORES_STOP = """\
import json, os, signal, sys, time
import psutil
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
args = sys.argv
status_path = os.path.join(args[args.index("--runs-dir") + 1], args[args.index("--run-id") + 1], "status.json")
status = json.load(open(status_path))
status.update(status="running", pid=os.getpid(), create_time=psutil.Process().create_time(), step=1)
tmp = status_path + ".tmp"
with open(tmp, "w") as handle:
    json.dump(status, handle)
os.replace(tmp, status_path)
print("running and ignoring stop requests", flush=True)
time.sleep(120)
"""


def test_cancel_kills_a_run_that_ignores_the_stop_request_after_the_grace_period(runs_dir, tmp_path):
    launcher = Launcher(runs_dir, python=fake_python(tmp_path, "python-stubborn", IGNORES_STOP))
    run_id = launcher.start(load_preset("refund-outcome"))
    pid = wait_running(launcher, run_id)["pid"]
    launcher.cancel(run_id)
    assert launcher.reconcile(grace_s=30) == []  # within the grace period: left alone
    assert psutil.pid_exists(pid)
    status = reconcile_until_terminal(launcher, run_id, timeout=30, grace_s=0.5)
    assert status["status"] == "cancelled"
    assert "grace period" in status["error"]
    assert wait_for(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 10)


def test_pair_configs_are_the_same_settings_with_each_scorer():
    from agentrl.config import load_preset
    from agentrl.launcher import pair_configs

    outcome, guarded = pair_configs(load_preset("refund-guarded").model_copy(update={"rounds": 7}))
    assert (outcome.name, outcome.scorer, guarded.name, guarded.scorer) == ("refund-outcome", "outcome", "refund-guarded", "guarded")
    assert outcome.model_dump(exclude={"name", "scorer"}) == guarded.model_dump(exclude={"name", "scorer"})
    assert outcome.rounds == 7


def test_seed_configs_are_the_config_at_consecutive_seeds_each_named_by_its_seed():
    from agentrl.config import ConfigError
    from agentrl.launcher import MAX_SEEDS, seed_configs

    config = load_preset("refund-outcome", seed=7)
    assert seed_configs(config, 1) == [config]
    three = seed_configs(config, 3)
    assert [(c.seed, c.name) for c in three] == [(7, "refund-outcome-seed7"), (8, "refund-outcome-seed8"),
                                                 (9, "refund-outcome-seed9")]
    assert {c.model_dump_json(exclude={"seed", "name"}) for c in three} == {config.model_dump_json(exclude={"seed", "name"})}
    assert len(seed_configs(config.model_copy(update={"name": "n" * 80}), 2)[1].name) == 80
    with pytest.raises(ConfigError, match=f"from 1 to {MAX_SEEDS}"):
        seed_configs(config, MAX_SEEDS + 1)
