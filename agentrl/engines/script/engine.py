"""The run process of kind 'script': a user's own command, started as a child of the run.

`python -m agentrl train` lands here for a config of kind 'script' (launch -> **run process** ->
the command -> chunks -> store). Who owns what:

- this process (the engine) owns the run's lifecycle: status.json's `running` with its own pid
  (the launcher's liveness check and cancel follow it), the final status, `ended_at` and the
  exit code. It outlives the command, so a command that crashes, is killed or never records
  anything still ends as `failed` with its exit status and last output line.
- the command owns the rows: `agentrl.init()` inside it finds the run through `AGENTRL_RUN_DIR`
  and writes steps, trajectories, evaluations and hardware samples of its process tree, and
  status.json's step; it reports its own outcome (`reported_status`) instead of ending the run.
  The two never write status.json at the same time: this process writes before the command
  starts and after it has exited.

Cancel (the stop file, or SIGTERM/SIGINT to this process): the command sees the stop request
through `run.stop_requested()` (the TRL callback stops training there); one that does not look
gets SIGINT after `COOPERATIVE_S` (Ctrl-C: KeyboardInterrupt in Python), and SIGKILL after
`KILL_S`. The command starts from its argument list, never through a shell, in the run's
process group (so the launcher's last-resort kill reaches it), with the dashboard's Python
first on PATH and this agentrl importable.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import psutil

from agentrl.engines.child import Escalation, end_run, wait_for_child
from agentrl.engines.registry import Preflight
from agentrl.engines.script.config import ScriptConfig
from agentrl.paths import PACKAGE_DIR, PROJECT_ROOT
from agentrl.record.rundir import RUN_DIR_ENV, SUPERVISOR_ENV, TERMINAL_STATUSES, RunDir, iso, utc_now

COOPERATIVE_S = 3.0  # after a stop request, the command's own chance to stop between steps
KILL_S = 8.0  # then SIGINT; SIGKILL at this many seconds (the launcher kills the group at 10)


class CommandError(ValueError):
    """The command cannot start; the message says which part and what to change."""


def working_dir(config: ScriptConfig) -> Path:
    path = Path(config.cwd).expanduser() if config.cwd else PROJECT_ROOT
    if not path.is_dir():
        raise CommandError(f"working directory {str(path)!r} does not exist; set cwd to a folder (empty: the project folder)")
    return path


def search_path() -> str:
    """PATH with this Python's folder first, so `python` in a command is the dashboard's own."""
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", os.defpath)])


def resolve_command(config: ScriptConfig) -> list[str]:
    """The argument list with its program found (on PATH, or relative to the working directory)."""
    program, *args = config.command
    cwd = working_dir(config)
    if os.sep in program:
        path = Path(program).expanduser()
        path = path if path.is_absolute() else cwd / path
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise CommandError(f"program {program!r} is not an executable file in {str(cwd)!r}")
        return [str(path), *args]
    found = shutil.which(program, path=search_path())
    if found is None:
        raise CommandError(f"program {program!r} is not on PATH; give its full path on the command's first line")
    return [found, *args]


def preflight(config: ScriptConfig) -> Preflight:
    """Before the run: the command as it will start, or why it cannot."""
    try:
        argv = resolve_command(config)
    except CommandError as error:
        return Preflight(refusal=str(error))
    return Preflight(report=f"$ {shlex.join(config.command)}\n  program  {argv[0]}\n  in       {working_dir(config)}")


def child_environment(config: ScriptConfig, run_dir: RunDir) -> dict[str, str]:
    """The dashboard's environment, plus: its Python first on PATH, this agentrl importable (a
    checkout that was never pip-installed), the run folder, and the config's own variables."""
    python_path = [str(PACKAGE_DIR.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, PATH=search_path(), PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(python_path))
    env.update(entry.split("=", 1) for entry in config.env)
    env.update({RUN_DIR_ENV: str(run_dir.root.resolve()), SUPERVISOR_ENV: str(os.getpid()), "AGENTRL_SEED": str(config.seed)})
    return env


def run_script(config: ScriptConfig, run_dir: RunDir, log: Callable[[str], None] = print) -> str:
    """Run the command of `config` as this run; returns the final status."""
    run_dir.update_status(status="running", pid=os.getpid(), create_time=psutil.Process().create_time(),
                          started_at=iso(utc_now()), step=0, total_steps=config.total_steps, error=None)
    signalled: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, frame: signalled.append(number))
    try:
        argv = resolve_command(config)
        # In the foreground (`agentrl train` in a terminal) the command's output is copied into
        # stdout.log as it is shown, so its last line can say why it failed; a launched run's
        # output is that file already.
        capture = not output_is(run_dir.log_path)
        pipe = subprocess.PIPE if capture else None
        child = subprocess.Popen(argv, cwd=working_dir(config), env=child_environment(config, run_dir),
                                 stdin=subprocess.DEVNULL, close_fds=True, stdout=pipe, stderr=pipe)
    except (CommandError, OSError) as error:
        detail = str(error) if isinstance(error, CommandError) else f"cannot start {config.command[0]!r}: {error.strerror or error}"
        return end_run(run_dir, "failed", detail, None, log)
    log(f"started {shlex.join(config.command)} (pid {child.pid}) in {working_dir(config)}")
    copies = copy_output(child, run_dir.log_path) if capture else []
    code = _wait(child, run_dir, signalled, log)
    for copy in copies:
        copy.join(timeout=2.0)  # a grandchild holding the pipe open must not hold the run's end
    stopped = bool(signalled) or run_dir.stop_requested()
    reported = run_dir.status() or {}
    status, error = reported.get("reported_status"), reported.get("error")
    if status not in TERMINAL_STATUSES:
        status = None
    if stopped:
        status = "cancelled"
        error = error or "cancelled; the command was stopped"
    elif code != 0 and status != "cancelled":
        status = "failed"
        last = [line for line in run_dir.tail_log(5) if line.strip()]
        said = f"last output: {last[-1][:300]}" if last else ""
        if not error:
            error = _describe(code) + (f"; {said}" if said else "")
        elif said and last[-1][:300] not in error:  # the command's own report ("SystemExit: 3") and why
            error = f"{error}; {said}"
    return end_run(run_dir, status or "succeeded", error, code, log)


def output_is(path: Path) -> bool:
    """Whether this process's stdout is the file at `path` (the launcher's redirect)."""
    try:
        mine, theirs = os.fstat(sys.stdout.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):
        return False
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)


def copy_output(child: subprocess.Popen, log_path: Path) -> list[threading.Thread]:
    """Threads that pass the child's stdout and stderr on to ours as they come and append both to
    `log_path` (the run's stdout.log)."""
    log = open(log_path, "ab", buffering=0)
    lock = threading.Lock()

    def copy(source, target) -> None:
        try:
            for chunk in iter(lambda: source.read1(65536), b""):
                try:
                    target.write(chunk)
                    target.flush()
                except (OSError, ValueError):
                    pass  # our own stdout went away: the file still gets the output
                with lock:
                    log.write(chunk)
        finally:
            source.close()

    threads = [threading.Thread(target=copy, args=(source, getattr(target, "buffer", target)), daemon=True)
               for source, target in ((child.stdout, sys.stdout), (child.stderr, sys.stderr))]
    for thread in threads:
        thread.start()
    closer = threading.Thread(target=lambda: ([t.join() for t in threads], log.close()), daemon=True)
    closer.start()
    return threads


def _wait(child: subprocess.Popen, run_dir: RunDir, signalled: list[int], log: Callable[[str], None]) -> int:
    """The command's exit code, after asking it to stop when the run is cancelled."""
    def told() -> float:
        log("stop requested: the command has a few seconds to stop on its own")
        return 0.0

    return wait_for_child(child, run_dir, signalled, log, [
        Escalation(COOPERATIVE_S, "sending SIGINT to the command", lambda c: _signal(c, signal.SIGINT)),
        Escalation(KILL_S, "the command did not stop: SIGKILL", lambda c: _signal(c, signal.SIGKILL)),
    ], on_stop=told)


def _signal(child: subprocess.Popen, signum: int) -> None:
    try:
        child.send_signal(signum)
    except ProcessLookupError:
        pass


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"the command was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"the command was killed by signal {-code}"
    return f"the command exited with code {code}"
