"""Tests of agentrl/engines/script: a user's own command as a run, started by the launcher or the CLI.

Real processes throughout: the engine's promises are about a child process (no shell, its
environment, its exit status, SIGINT on cancel) and about who writes status.json when.
"""

from __future__ import annotations

import json
import sys
import textwrap

import psutil
import pytest

from helpers import agentrl, ok, store_rows, wait_for
from agentrl.config import ConfigError, make_config
from agentrl.engines.registry import get_engine
from agentrl.launcher import Launcher
from agentrl.record.rundir import TERMINAL_STATUSES, RunDir, list_run_dirs


@pytest.fixture(autouse=True)
def no_stray_processes():
    """The command runs under the engine's process: neither may outlive a test."""
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    yield
    leftovers = [p for p in me.children(recursive=True) if p.pid not in before]
    _, alive = psutil.wait_procs(leftovers, timeout=20)
    for proc in alive:
        proc.kill()
    assert not alive, f"processes left running: {[p.pid for p in alive]}"


def script(**values):
    return make_config(kind="script", name=values.pop("name", "cmd"), **values)


def wait_terminal(launcher: Launcher, run_id: str, timeout: float = 90.0) -> dict:
    run = RunDir(launcher.runs_dir / run_id)

    def done():
        launcher.reconcile()
        return (run.status() or {}).get("status") in TERMINAL_STATUSES

    assert wait_for(done, timeout=timeout, interval=0.1), run.status()
    return run.status()


def test_a_command_from_the_cli_records_into_the_run_it_was_given(runs_dir, tmp_path):
    config = tmp_path / "script.json"
    config.write_text(json.dumps({"kind": "script", "name": "loop", "rounds": 5,
                                  "command": ["python", "examples/custom_loop.py", "--steps", "5"]}))
    result = ok(agentrl("train", "--config", config, "--runs-dir", runs_dir))
    assert "succeeded" in result.stdout
    (run,) = list_run_dirs(runs_dir)
    status, meta = run.status(), run.meta()
    # The engine owns the lifecycle (its pid, its final status); the command reported its own outcome.
    assert (status["status"], status["reported_status"], status["exit_code"], status["step"]) == ("succeeded", "succeeded", 0, 5)
    assert status["pid"] != status["writer_pid"]
    assert meta["config"]["command"] == ["python", "examples/custom_loop.py", "--steps", "5"]
    assert meta["logged_config"]["steps"] == 5  # what the command itself passed to agentrl.init
    assert store_rows(runs_dir, "SELECT kind, status, total_steps FROM runs") == [("script", "succeeded", 5)]
    assert store_rows(runs_dir, "SELECT count(*), max(step) FROM steps") == [(5, 5)]
    assert store_rows(runs_dir, "SELECT count(*) FROM trajectories WHERE step = 5")[0][0] == 16
    assert store_rows(runs_dir, "SELECT count(*) FROM hardware")[0][0] >= 1  # the command's process tree


def test_arguments_reach_the_program_unchanged_because_no_shell_reads_them(runs_dir, tmp_path):
    out = tmp_path / "argv.json"
    code = "import json, sys; json.dump(sys.argv[1:], open(sys.argv[1], 'w'))"
    launcher = Launcher(runs_dir)
    tricky = ["$HOME", "a; touch /tmp/agentrl-pwned", "`id`", "x y", "*"]
    run_id = launcher.start(script(command=["python", "-c", code, str(out), *tricky]))
    assert wait_terminal(launcher, run_id)["status"] == "succeeded"
    assert json.loads(out.read_text()) == [str(out), *tricky]


def test_a_failing_command_fails_the_run_with_its_exit_code_and_last_line(runs_dir):
    launcher = Launcher(runs_dir)
    run_id = launcher.start(script(command=["python", "-c", "import sys; print('loss went to nan', flush=True); sys.exit(3)"]))
    status = wait_terminal(launcher, run_id)
    assert status["status"] == "failed" and status["exit_code"] == 3
    assert status["error"] == "the command exited with code 3; last output: loss went to nan"


def test_a_command_that_raises_inside_agentrl_init_reports_the_error(runs_dir):
    code = textwrap.dedent("""
        import agentrl
        with agentrl.init() as run:
            run.log_step(1, {"loss": 1.0})
            raise RuntimeError("diverged")
    """)
    launcher = Launcher(runs_dir)
    run_id = launcher.start(script(command=["python", "-c", code]))
    status = wait_terminal(launcher, run_id)
    assert (status["status"], status["reported_status"], status["error"]) == ("failed", "failed", "RuntimeError: diverged")


NEVER_LOOKS = textwrap.dedent("""
    import time
    import agentrl
    with agentrl.init() as run:
        step = 0
        while True:  # never asks run.stop_requested(): only SIGINT stops it
            step += 1
            run.log_step(step, {"loss": 1.0})
            time.sleep(0.05)
""")


@pytest.mark.slow
def test_cancel_interrupts_a_command_that_never_looks_and_the_run_is_cancelled(runs_dir):
    import agentrl.engines.script.engine as engine

    launcher = Launcher(runs_dir)
    run_id = launcher.start(script(command=["python", "-c", NEVER_LOOKS]))
    run = RunDir(runs_dir / run_id)
    assert wait_for(lambda: (run.status() or {}).get("step", 0) >= 3, timeout=60), run.status()
    launcher.cancel(run_id)
    status = wait_terminal(launcher, run_id, timeout=engine.KILL_S + 30)
    # Stopped by SIGINT (KeyboardInterrupt in the command), which reported it was cancelled.
    assert (status["status"], status["reported_status"]) == ("cancelled", "cancelled")
    assert "sending SIGINT to the command" in "\n".join(run.tail_log(30))


def test_preflight_shows_the_command_or_refuses_it_in_one_line(tmp_path):
    engine = get_engine("script")
    report = engine.preflight(script(command=["python", "examples/custom_loop.py"])).report
    assert report.splitlines()[0] == "$ python examples/custom_loop.py" and sys.executable in report
    missing = engine.preflight(script(command=["no-such-program-xyz"])).refusal
    assert missing == "program 'no-such-program-xyz' is not on PATH; give its full path on the command's first line"
    nowhere = engine.preflight(script(command=["python"], cwd=str(tmp_path / "nowhere"))).refusal
    assert "does not exist" in nowhere and "cwd" in nowhere


@pytest.mark.parametrize(("values", "message"), [
    ({"command": []}, "command"),
    ({"command": ["  "]}, "must name the program"),
    ({"env": ["NOT A VARIABLE"]}, "is not NAME=value"),
    ({"env": ["AGENTRL_RUN_DIR=/tmp"]}, "set by agentrl itself"),
    ({"step_delay": 1.0}, "step delay"),
])
def test_a_bad_script_config_is_one_config_error(values, message):
    with pytest.raises(ConfigError, match=message):
        script(**values)


def test_the_launch_form_draws_the_command_one_argument_per_line():
    from ui.forms import editable

    from agentrl.engines.script.config import ScriptConfig

    assert editable(ScriptConfig, "command") and editable(ScriptConfig, "env")
    assert not editable(ScriptConfig, "step_delay")  # hidden: a command keeps its own pace
    assert ScriptConfig.model_fields["command"].json_schema_extra == {"widget": "lines"}


def test_a_script_config_naming_scanners_is_refused_in_one_line_as_they_could_not_veto():
    # the command computes its own rewards: a scanner named here would look enforced and veto nothing
    with pytest.raises(ConfigError, match="the script engine cannot enforce scanners") as raised:
        make_config(kind="script", name="cmd", command=["python", "x.py"], scanners=["builtin:repeated_call"])
    assert "\n" not in str(raised.value)
