"""The sandbox's launcher: a second program, run as `python -I -S stub.py --stub CONFIG -- COMMAND...`.

Sandbox runner (`agentrl.sandbox.runner.run_tests`) -> **stub** -> the test command. The stub makes
itself the reaper of everything the command starts, applies the limits, drops to the sandbox
user and execs the command; asked to stop (SIGTERM), it kills and reaps the lot and exits as the
command did. Doing that in a launcher rather than a `preexec_fn` keeps `run_tests` safe to call
from many threads at once, and lets the kill be atomic (`kill(-1)` as the sandbox user) and leave
no zombie even where PID 1 does not reap orphans.

It runs isolated (`-I -S`): the standard library only, never an agentrl import. The runner
imports it for the constants both sides share.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

_SETUP_FAILED_EXIT = 125  # the launcher could not apply the limits or become the sandbox user
_EXEC_FAILED_EXIT = 127  # the command could not be started (not found, not executable)
_STUB_MARK = "agentrl-sandbox:"  # prefix of the launcher's own messages in the output
_STOP_GRACE_S = 5.0  # how long the launcher gets to kill and reap everything before we do it


_PR_SET_KEEPCAPS = 8
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE = 47, 2
_CAP_DAC_READ_SEARCH = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _StopRequested(Exception):
    pass


def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _stub_main(argv: list[str]) -> None:
    """Launch COMMAND under the limits, wait for it, kill and reap whatever it left, and exit as
    it did (same code, or the same signal). SIGTERM means: stop now."""
    import resource

    config = json.loads(argv[2])
    command = argv[4:]
    # Orphans of the run are re-parented to us, not to PID 1, so we can reap them (some PID 1s
    # never do, and a zombie would count against the sandbox user's process limit).
    _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    def on_stop(_signum, _frame):
        raise _StopRequested

    signal.signal(signal.SIGTERM, on_stop)
    launcher_pid = os.getpid()
    status = None
    try:
        worker = os.fork()
        if worker == 0:
            _become_command(config, command)
        for fd in config.get("pass_fds") or []:  # the harness's channels: the worker's alone from here
            os.close(fd)
        while status is None:
            pid, wait_status = os.waitpid(-1, 0)
            if pid == worker:
                status = wait_status
    except _StopRequested:
        if os.getpid() != launcher_pid:  # the stop reached the worker before it reset SIGTERM
            os._exit(_SETUP_FAILED_EXIT)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _kill_and_reap_everything_below(config)
    if status is None:
        os._exit(128 + signal.SIGKILL)
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        try:
            signal.signal(signum, signal.SIG_DFL)  # Python ignores some (SIGXFSZ, SIGPIPE)
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)
    os._exit(os.waitstatus_to_exitcode(status))


def _become_command(config: dict, command: list[str]) -> None:
    """In the forked worker: limits, user, then exec. Never returns (it must not run on into the
    launcher's code)."""
    try:
        _apply_limits_and_user(config)
    except BaseException as err:  # noqa: BLE001 - anything here must end the worker, loudly
        os.write(2, f"{_STUB_MARK} {type(err).__name__}: {err}\n".encode())
        os._exit(_SETUP_FAILED_EXIT)
    try:
        os.execvp(command[0], command)
    except BaseException as err:  # noqa: BLE001
        os.write(2, f"{_STUB_MARK} cannot run {command[0]!r}: {getattr(err, 'strerror', err)}\n".encode())
    finally:
        os._exit(_EXEC_FAILED_EXIT)


def _apply_limits_and_user(config: dict) -> None:
    """Resource limits, then the sandbox user (keeping CAP_DAC_READ_SEARCH when asked), then
    no-new-privileges."""
    import ctypes
    import resource

    for signum in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)  # ignored signals would survive the exec
    cpu_s = int(config["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (config["address_space_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (config["file_size_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    nproc = config["max_processes"] if hard == resource.RLIM_INFINITY else min(config["max_processes"], hard)
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    libc = _libc()
    if config["uid"] is not None:
        if config["read_search"]:
            libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0)
        os.setgroups([])
        os.setresgid(config["gid"], config["gid"], config["gid"])
        os.setresuid(config["uid"], config["uid"], config["uid"])
        if config["read_search"]:
            _keep_only_read_search(libc)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:  # setuid binaries stay powerless
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def _keep_only_read_search(libc) -> None:
    """After the uid switch, keep CAP_DAC_READ_SEARCH alone, ambient so it survives the exec.

    It lets the sandbox user reach an interpreter behind a closed directory (here root's
    /root/.pyenv, mode 0700) and read files, never write them.
    """
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    bit = 1 << _CAP_DAC_READ_SEARCH
    data = (Data * 2)(Data(bit, bit, bit), Data(0, 0, 0))
    if libc.capset(ctypes.byref(Header(_LINUX_CAPABILITY_VERSION_3, 0)), data) != 0:
        raise OSError(ctypes.get_errno(), "capset(CAP_DAC_READ_SEARCH) failed")
    if libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, _CAP_DAC_READ_SEARCH, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAP_AMBIENT_RAISE) failed")


def _descendants(root_pid: int) -> list[int]:
    """Every process below `root_pid`, from /proc (the launcher has no psutil under `-S`)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found, frontier = [], [root_pid]
    while frontier:
        below = children.get(frontier.pop(), [])
        found.extend(below)
        frontier.extend(below)
    return found


def _kill_and_reap_everything_below(config: dict) -> None:
    """SIGKILL every process of the run and reap them all, so none outlives the launcher."""
    deadline = time.monotonic() + _STOP_GRACE_S
    while True:
        # kill(-1) as the sandbox user reaches every process of that user in one pass that a
        # fork cannot race (the kernel holds the task list while it signals).
        if config["uid"] is not None and os.fork() == 0:
            try:
                os.setresgid(config["gid"], config["gid"], config["gid"])
                os.setresuid(config["uid"], config["uid"], config["uid"])
                for _ in range(100):
                    os.kill(-1, signal.SIGKILL)
            except BaseException:  # noqa: BLE001, S110 - ESRCH: nothing of that user is left
                pass
            finally:
                os._exit(0)
        for pid in _descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] != 0:
                pass
        except ChildProcessError:
            return  # no child left: everything below is dead and reaped
        if time.monotonic() > deadline:
            return
        time.sleep(0.01)


if __name__ == "__main__" and len(sys.argv) > 3 and sys.argv[1] == "--stub":
    _stub_main(sys.argv)
