"""The sandboxed test runner: a throw-away copy of a workspace, the files a completion wrote, and
the workspace's own test command run there under limits (SPEC section 10).

Run process -> rewards (`agentrl.rewards.tests_reward`) -> **sandbox**. `run_tests` refuses
writes that would leave the copy or touch the tests, copies the workspace, writes the files, runs
the command under wall-clock, CPU, address-space, file-size and process-count limits with a
scrubbed environment (as an unprivileged user of its own when started as root), kills every
process the run left behind, and removes the copy. It answers with a `SandboxResult`: pass or
fail, and a short reason a person can read.

These limits bound accidents (a loop, a fork bomb, a runaway allocation, a test that deletes its
own directory). They are NOT a security boundary: the run shares the kernel, the network and the
file system of the host (the README's "The test sandbox" section says how to add one).

This file is also the launcher each run goes through: `python -I -S sandbox.py --stub CONFIG --
COMMAND...` (`_stub_main`) makes itself the reaper of everything the command starts, applies the
limits, drops to the sandbox user and execs the command; asked to stop, it kills and reaps the
lot. Doing that in a launcher rather than a `preexec_fn` keeps `run_tests` safe to call from many
threads at once, and lets the kill be atomic (`kill(-1)` as the sandbox user) and leave no zombie
even where PID 1 does not reap orphans.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agentrl.sandbox import stub
from agentrl.sandbox.paths import fingerprint, is_under, normalised, refusal_in_copy, refusal_reason, write_file
from agentrl.sandbox.users import (
    Slot,
    acquire_slot,
    kill_processes,
    own_directory,
    release_slot,
    remove_strays,
    remove_tree,
    uids,
)
from agentrl.sandbox.stub import _SETUP_FAILED_EXIT, _STOP_GRACE_S, _STUB_MARK

MIB = 1 << 20
GIB = 1 << 30

OUTPUT_TAIL_BYTES = 4000
"""How much of the end of the output a result keeps."""



@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one test run; each bounds one kind of accident."""

    timeout_s: float = 10.0
    """Wall-clock seconds before every process of the run is killed."""
    cpu_s: int = 10
    """CPU seconds per process (RLIMIT_CPU): SIGXCPU at the limit, SIGKILL one second later."""
    address_space_bytes: int = 1 * GIB
    """Virtual memory per process (RLIMIT_AS); past it an allocation fails (MemoryError in Python)."""
    file_size_bytes: int = 16 * MIB
    """Largest file a process may write (RLIMIT_FSIZE); past it a write fails with EFBIG."""
    max_processes: int = 64
    """Processes and threads the run may have at once (RLIMIT_NPROC of its own sandbox user)."""
    output_bytes: int = 1 * MIB
    """Captured stdout + stderr past which the run is stopped and fails."""

    def __post_init__(self) -> None:
        for name in ("timeout_s", "cpu_s", "address_space_bytes", "file_size_bytes", "max_processes", "output_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be positive (got {getattr(self, name)!r})")


@dataclass(frozen=True)
class SandboxResult:
    """What one run came to. `returncode` is None when nothing ran (a refused write)."""

    passed: bool
    reason: str
    """Short and for people: 'tests passed', 'tests failed (exit 1)', 'refused: protected path
    tests/test_x.py', 'timed out after 3.0s', 'killed by signal SIGXCPU (cpu limit)', ..."""
    returncode: int | None
    duration_s: float
    output_tail: str


# ---------------------------------------------------------------------------------------------
# The copy
# ---------------------------------------------------------------------------------------------


def default_temp_root() -> Path:
    """Where runs make their copies unless told otherwise: `<tmp>/agentrl-sandbox`."""
    return Path(tempfile.gettempdir()) / "agentrl-sandbox"


def _traversable_by_others(path: Path) -> bool:
    """Whether a user with no relation to any owner can reach `path` (o+x on every directory)."""
    path = path.absolute()
    for directory in [*reversed(path.parents), path]:
        try:
            mode = directory.stat().st_mode
        except OSError:
            return False
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return False
    return True


def _ignore_specials(directory: str, names: list[str]) -> set[str]:
    # Byte caches are rebuilt in the copy; FIFOs, sockets and devices would block or mislead copy2.
    ignored = set()
    for name in names:
        if name == "__pycache__":
            ignored.add(name)
            continue
        mode = os.lstat(os.path.join(directory, name)).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            ignored.add(name)
    return ignored


def _hand_over(copy: Path, home: Path, tmp: Path, slot: Slot, protected: Sequence[str]) -> None:
    """Give the copy to the sandbox user, except the protected paths: those stay root's and
    read-only, so the run cannot change the tests it is judged by."""
    guarded = [normalised(p) for p in protected]
    for directory, dirnames, filenames in os.walk(copy):
        for path in [Path(directory) / name for name in dirnames + filenames]:
            if any(is_under(path.relative_to(copy).as_posix(), g) for g in guarded):
                mode = path.lstat().st_mode
                if not stat.S_ISLNK(mode):
                    os.chmod(path, stat.S_IMODE(mode) | (0o555 if stat.S_ISDIR(mode) else 0o444))
            else:
                os.chown(path, slot.uid, slot.gid, follow_symlinks=False)
    for private in (copy, home, tmp):
        os.chown(private, slot.uid, slot.gid)
        os.chmod(private, 0o700 if private != copy else stat.S_IMODE(private.stat().st_mode) | 0o700)


def _refused(reason: str) -> SandboxResult:
    return SandboxResult(passed=False, reason=reason, returncode=None, duration_s=0.0, output_tail="")


def run_tests(
    workspace: Path,
    files: dict[str, str],
    test_command: list[str],
    protected: list[str],
    limits: SandboxLimits = SandboxLimits(),
    *,
    temp_root: Path | None = None,
    isolate_user: bool | None = None,
    writable: Sequence[str] | None = None,
) -> SandboxResult:
    """Write `files` into a throw-away copy of `workspace` and run `test_command` there.

    Passes when the command exits 0 and the protected paths are as they were. `temp_root` is
    where the copy is made (default `default_temp_root()`); it is empty again when this returns.
    `isolate_user` (default: when running as root) runs the command as a sandbox user of its own.
    `writable` is the task's allow-list of what an attempt may create or change (glob patterns;
    None: anything the rules for every task allow, `agentrl.sandbox.paths`).

    For example, with a repository whose tests live under tests/:

        run_tests(Path("repo"), {"calc.py": "def add(a, b):\\n    return a + b\\n"},
                  [sys.executable, "-m", "unittest", "-q"], protected=["tests"]).reason
        # 'tests passed'; {"tests/test_calc.py": ...} would be 'refused: protected path ...'
    """
    workspace = Path(workspace)
    if not workspace.is_dir():
        raise ValueError(f"workspace {workspace} is not a directory")
    if not test_command:
        raise ValueError("test_command is empty; give the command as an argument list")
    is_root = os.geteuid() == 0
    if isolate_user is None:
        isolate_user = is_root
    if isolate_user and not is_root:
        raise ValueError("isolate_user=True needs root (to switch to a sandbox user); pass isolate_user=False")

    for path in files:
        reason = refusal_reason(path, protected, writable)
        if reason:
            return _refused(reason)

    temp_root = own_directory(Path(temp_root) if temp_root is not None else default_temp_root(), 0o711)
    slot = acquire_slot() if isolate_user else None
    run_dir: Path | None = None
    process: subprocess.Popen | None = None
    try:
        if slot is not None and temp_root.stat().st_uid == os.geteuid():
            temp_root.chmod(stat.S_IMODE(temp_root.stat().st_mode) | stat.S_IXOTH)
        run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=temp_root))
        copy, home, tmp = run_dir / "workspace", run_dir / "home", run_dir / "tmp"
        shutil.copytree(workspace, copy, symlinks=True, ignore=_ignore_specials)
        home.mkdir()
        tmp.mkdir()
        for path, content in files.items():
            relative = normalised(path)
            reason = refusal_in_copy(copy, relative, protected, writable)
            if reason is None:
                try:
                    write_file(copy / relative, content)
                except OSError as err:
                    reason = f"refused: cannot write {relative} ({err.strerror})"
            if reason:
                return _refused(reason)
        protected_before = fingerprint(copy, protected)

        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": str(home),
            "TMPDIR": str(tmp),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
        }
        config: dict = {
            "cpu_s": limits.cpu_s,
            "address_space_bytes": limits.address_space_bytes,
            "file_size_bytes": limits.file_size_bytes,
            "max_processes": limits.max_processes,
            "uid": None,
            "gid": None,
            "read_search": False,
        }
        if slot is not None:
            run_dir.chmod(0o711)  # the sandbox user may pass through, not list or rename
            _hand_over(copy, home, tmp, slot, protected)
            program = test_command[0]
            executable = shutil.which(program, path=env["PATH"]) if "/" not in program else str(copy / program)
            reachable = [temp_root] + ([Path(executable), Path(executable).resolve()] if executable else [])
            config.update(uid=slot.uid, gid=slot.gid, read_search=not all(map(_traversable_by_others, reachable)))
        else:
            # Without a user of its own the run shares RLIMIT_NPROC with everything this user
            # runs, so the limit is what runs now plus the run's allowance.
            config["max_processes"] = _count_own_tasks() + limits.max_processes

        launcher = [sys.executable, "-I", "-S", str(Path(stub.__file__).resolve()), "--stub", json.dumps(config), "--"]
        started = time.monotonic()
        process = subprocess.Popen(
            launcher + list(test_command),
            cwd=copy,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        output, stopped = _read_until_exit(process, started + limits.timeout_s, limits.output_bytes)
        returncode = process.wait()
        duration = time.monotonic() - started
        tail = output.decode("utf-8", errors="replace")
        reason = _reason(returncode, stopped, tail, limits)
        if reason is None:
            changed = [p for p, d in fingerprint(copy, protected).items() if d != protected_before[p]]
            reason = f"protected path changed during the run: {changed[0]}" if changed else "tests passed"
        return SandboxResult(
            passed=reason == "tests passed",
            reason=reason,
            returncode=returncode,
            duration_s=round(duration, 3),
            output_tail=tail,
        )
    finally:
        if process is not None:
            if process.poll() is None:
                _stop(process)
            if process.stdout is not None:
                process.stdout.close()
        if slot is not None:
            kill_processes(lambda p: slot.uid in uids(p))
        if run_dir is not None:
            home_marker = str(run_dir / "home")
            kill_processes(lambda p: _home_of(p) == home_marker)
            remove_tree(run_dir)
        if slot is not None:
            remove_strays(slot.uid)
            release_slot(slot)


def _home_of(process) -> str | None:
    """HOME of one of our own processes (the marker of a run without a user of its own)."""
    import psutil

    try:
        return process.environ().get("HOME") if process.uids().real == os.getuid() else None
    except psutil.Error:
        return None


def _count_own_tasks() -> int:
    """Processes and threads of this real uid: RLIMIT_NPROC counts threads too."""
    import psutil

    uid = os.getuid()
    count = 0
    for process in psutil.process_iter():
        try:
            if process.uids().real == uid:
                count += process.num_threads()
        except psutil.Error:
            continue
    return count


def _read_until_exit(process: subprocess.Popen, deadline: float, output_bytes: int) -> tuple[bytes, str | None]:
    """Read the merged output until end of file (every process of the run gone), the deadline, or
    the output cap. Returns the tail and why it stopped early, if it did."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    poller = select.poll()  # not select(): a trainer may hold more than FD_SETSIZE descriptors
    poller.register(fd, select.POLLIN | select.POLLHUP)
    tail = bytearray()
    total = 0
    stopped = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            stopped = "timeout"
            break
        if not poller.poll(min(remaining, 0.5) * 1000):
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        total += len(chunk)
        tail += chunk
        del tail[:-OUTPUT_TAIL_BYTES]
        if total > output_bytes:
            stopped = "output"
            break
    if stopped:
        _stop(process)
    return bytes(tail), stopped


def _stop(process: subprocess.Popen) -> None:
    """Have the launcher kill and reap everything it started; kill the group ourselves if not."""
    try:
        os.kill(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        process.wait(timeout=_STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


_SIGNAL_HINTS = {"SIGKILL": " (memory/cpu limit?)", "SIGXCPU": " (cpu limit)", "SIGXFSZ": " (file-size limit)"}
_OUTPUT_HINTS = {
    "MemoryError": "address-space limit?",
    "Cannot allocate memory": "address-space limit?",
    "File too large": "file-size limit?",
    "Resource temporarily unavailable": "process limit?",
}


def _reason(returncode: int, stopped: str | None, tail: str, limits: SandboxLimits) -> str | None:
    """The reason of a run that did not pass, or None when the command exited 0."""
    if stopped == "timeout":
        return f"timed out after {limits.timeout_s:.1f}s"
    if stopped == "output":
        return f"output truncated: more than {limits.output_bytes} bytes, run stopped"
    if returncode == _SETUP_FAILED_EXIT and _STUB_MARK in tail:
        message = tail[tail.rindex(_STUB_MARK) + len(_STUB_MARK):].strip().splitlines()[0]
        return f"sandbox setup failed: {message}"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"killed by signal {name}{_SIGNAL_HINTS.get(name, '')}"
    if returncode != 0:
        hints = sorted({hint for marker, hint in _OUTPUT_HINTS.items() if marker in tail})
        return f"tests failed (exit {returncode}{'; ' + ', '.join(hints) if hints else ''})"
    return None
