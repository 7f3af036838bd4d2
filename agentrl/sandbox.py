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

import fcntl
import hashlib
import json
import os
import posixpath
import pwd
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MIB = 1 << 20
GIB = 1 << 30

SANDBOX_UID_BASE = 1_990_000_000
"""First uid of the sandbox users (uid = gid = base + slot); chosen far above real accounts."""
SANDBOX_SLOTS = 64
"""Runs that may be in flight at once on this machine (all processes together), one uid each, so
RLIMIT_NPROC counts one run's processes and 'every process of this uid' names exactly one run."""
OUTPUT_TAIL_BYTES = 4000
"""How much of the end of the output a result keeps."""

_SETUP_FAILED_EXIT = 125  # the launcher could not apply the limits or become the sandbox user
_EXEC_FAILED_EXIT = 127  # the command could not be started (not found, not executable)
_STUB_MARK = "agentrl-sandbox:"  # prefix of the launcher's own messages in the output
_STOP_GRACE_S = 5.0  # how long the launcher gets to kill and reap everything before we do it
_WORLD_WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm")  # where a sandbox user can leave files


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
# Which writes are allowed
# ---------------------------------------------------------------------------------------------


def _normalised(path: str) -> str:
    return posixpath.normpath(path.strip()).rstrip("/")


def _is_under(path: str, base: str) -> bool:
    return base == "." or path == base or path.startswith(base + "/")


def refusal_reason(path: str, protected: Iterable[str]) -> str | None:
    """Why writing `path` (relative to the workspace) is refused, or None when it is allowed.

    Checks the text of the path only; writes through symlinks are checked in the copy.
    """
    if not path.strip() or "\x00" in path:
        return f"refused: invalid path {path!r}"
    if path.startswith(("/", "\\", "~")):
        return f"refused: absolute path {path}"
    if ".." in PurePosixPath(path.replace("\\", "/")).parts:
        return f"refused: path leaves the workspace (..): {path}"
    relative = _normalised(path)
    if relative in ("", "."):
        return f"refused: invalid path {path!r}"
    for guarded in protected:
        if _is_under(relative, _normalised(guarded)):
            return f"refused: protected path {relative}"
    return None


def _refusal_in_copy(copy: Path, relative: str, protected: Sequence[str]) -> str | None:
    """Why writing `relative` in the copy is refused once symlinks are followed, or None."""
    target = copy / relative
    if target.is_symlink():
        return f"refused: write through symlink {relative}"
    root = copy.resolve()
    try:
        parent = target.parent.resolve()  # follows any symlink on the way, as the write would
    except (OSError, RuntimeError):  # a symlink loop
        return f"refused: write through symlink {relative}"
    if parent != root and root not in parent.parents:
        return f"refused: write through symlink {relative}"
    real = (parent / target.name).relative_to(root).as_posix()
    for guarded in protected:
        if _is_under(real, _normalised(guarded)):
            return f"refused: protected path {real} (through a symlink)"
    if target.is_dir():
        return f"refused: {relative} is a directory"
    return None


def _write_file(target: Path, content: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    # O_NOFOLLOW: the checks above already refused symlinks; this keeps it so if one appeared.
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(content)


def _fingerprint(copy: Path, protected: Sequence[str]) -> dict[str, str | None]:
    """A digest of each protected path in the copy (None when absent), symlinks not followed."""

    def digest(path: Path) -> str | None:
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(mode):
            return "link:" + os.readlink(path)
        if stat.S_ISREG(mode):
            return "file:" + hashlib.sha256(path.read_bytes()).hexdigest()
        if stat.S_ISDIR(mode):
            entries = sorted(os.listdir(path))
            return "dir:" + hashlib.sha256(json.dumps([[e, digest(path / e)] for e in entries]).encode()).hexdigest()
        return f"other:{mode}"

    return {_normalised(p): digest(copy / _normalised(p)) for p in protected}


# ---------------------------------------------------------------------------------------------
# Sandbox users (root only)
# ---------------------------------------------------------------------------------------------


@dataclass
class _Slot:
    uid: int
    gid: int
    lock_fd: int


def _slot_lock_dir() -> Path:
    return Path(tempfile.gettempdir()) / "agentrl-sandbox-slots"


def _has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def _own_directory(path: Path, mode: int) -> Path:
    """Create `path` if needed and make sure it is ours: in a world-writable /tmp another user
    could have made it first, and could then swap what we put in it."""
    path.mkdir(mode=mode, parents=True, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise ValueError(f"{path} is not a directory of this user (uid {os.geteuid()}); remove it or pass another temp_root")
    return path


def _acquire_slot() -> _Slot:
    """Claim a sandbox uid for one run; the flock makes the claim hold across processes too."""
    lock_dir = _own_directory(_slot_lock_dir(), 0o700)
    while True:
        for slot in range(SANDBOX_SLOTS):
            uid = SANDBOX_UID_BASE + slot
            if _has_account(uid):
                continue
            fd = os.open(lock_dir / f"{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            # A run of a crashed process may have left processes under this uid: end them. An
            # unreaped zombie would count against RLIMIT_NPROC, so such a slot is skipped.
            if _kill_processes(lambda p, uid=uid: uid in _uids(p)):
                os.close(fd)
                continue
            return _Slot(uid=uid, gid=uid, lock_fd=fd)
        time.sleep(0.05)


def _release_slot(slot: _Slot) -> None:
    os.close(slot.lock_fd)  # closing the descriptor drops the flock


def _uids(process) -> tuple[int, ...]:
    import psutil

    try:
        return tuple(process.uids())
    except psutil.Error:  # gone, or unreadable
        return ()


def _kill_processes(selected) -> int:
    """SIGKILL every process `selected(process)` picks, until none is left alive; returns how many
    zombies of them remain (dead, waiting for a parent that does not reap them)."""
    import psutil  # lazily: the launcher runs this file under `-S`, without site-packages

    deadline = time.monotonic() + _STOP_GRACE_S
    while True:
        alive, zombies = [], 0
        for process in psutil.process_iter():
            if process.pid == os.getpid() or not selected(process):
                continue
            try:
                if process.status() == psutil.STATUS_ZOMBIE:
                    zombies += 1
                    continue
                process.kill()
                alive.append(process)
            except psutil.Error:
                continue
        if not alive or time.monotonic() > deadline:
            return zombies
        psutil.wait_procs(alive, timeout=0.2)


def _remove_strays(uid: int) -> None:
    """Remove what the sandbox user left in the world-writable directories (a dedicated uid owns
    nothing else there)."""
    for directory in {*_WORLD_WRITABLE_DIRS, tempfile.gettempdir()}:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    _remove_tree(Path(entry.path))
                else:
                    os.unlink(entry.path)
            except OSError:
                continue


def sandbox_processes(temp_root: Path | None = None) -> list:
    """Processes sandboxes left behind; empty after every `run_tests` returns (for tests and
    diagnostics). Without `temp_root`: every process of a sandbox uid, zombies included. With it:
    those whose HOME lies under `temp_root` (runs made there, with or without a uid of their
    own), and any zombie of a sandbox uid (nothing should leave one, whoever ran it)."""
    import psutil

    uids = range(SANDBOX_UID_BASE, SANDBOX_UID_BASE + SANDBOX_SLOTS)
    prefix = str(Path(temp_root).resolve()) + os.sep if temp_root is not None else None
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            of_sandbox_uid = any(uid in uids for uid in _uids(process))
            if prefix is None or (of_sandbox_uid and process.status() == psutil.STATUS_ZOMBIE):
                if of_sandbox_uid:
                    found.append(process)
            elif process.environ().get("HOME", "").startswith(prefix):
                found.append(process)
        except psutil.Error:
            continue
    return found


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


def _hand_over(copy: Path, home: Path, tmp: Path, slot: _Slot, protected: Sequence[str]) -> None:
    """Give the copy to the sandbox user, except the protected paths: those stay root's and
    read-only, so the run cannot change the tests it is judged by."""
    guarded = [_normalised(p) for p in protected]
    for directory, dirnames, filenames in os.walk(copy):
        for path in [Path(directory) / name for name in dirnames + filenames]:
            if any(_is_under(path.relative_to(copy).as_posix(), g) for g in guarded):
                mode = path.lstat().st_mode
                if not stat.S_ISLNK(mode):
                    os.chmod(path, stat.S_IMODE(mode) | (0o555 if stat.S_ISDIR(mode) else 0o444))
            else:
                os.chown(path, slot.uid, slot.gid, follow_symlinks=False)
    for private in (copy, home, tmp):
        os.chown(private, slot.uid, slot.gid)
        os.chmod(private, 0o700 if private != copy else stat.S_IMODE(private.stat().st_mode) | 0o700)


def _remove_tree(path: Path) -> None:
    """Remove `path` whatever the run did to it (read-only directories, already deleted)."""

    def make_writable_and_retry(function, failed_path, _exc_info):
        try:
            os.chmod(os.path.dirname(failed_path), 0o700)
            if os.path.isdir(failed_path) and not os.path.islink(failed_path):
                os.chmod(failed_path, 0o700)
            function(failed_path)
        except FileNotFoundError:
            pass

    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, onerror=make_writable_and_retry)


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


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
) -> SandboxResult:
    """Write `files` into a throw-away copy of `workspace` and run `test_command` there.

    Passes when the command exits 0 and the protected paths are as they were. `temp_root` is
    where the copy is made (default `default_temp_root()`); it is empty again when this returns.
    `isolate_user` (default: when running as root) runs the command as a sandbox user of its own.

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
        reason = refusal_reason(path, protected)
        if reason:
            return _refused(reason)

    temp_root = _own_directory(Path(temp_root) if temp_root is not None else default_temp_root(), 0o711)
    slot = _acquire_slot() if isolate_user else None
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
            relative = _normalised(path)
            reason = _refusal_in_copy(copy, relative, protected)
            if reason is None:
                try:
                    _write_file(copy / relative, content)
                except OSError as err:
                    reason = f"refused: cannot write {relative} ({err.strerror})"
            if reason:
                return _refused(reason)
        protected_before = _fingerprint(copy, protected)

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

        launcher = [sys.executable, "-I", "-S", str(Path(__file__).resolve()), "--stub", json.dumps(config), "--"]
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
            changed = [p for p, d in _fingerprint(copy, protected).items() if d != protected_before[p]]
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
            _kill_processes(lambda p: slot.uid in _uids(p))
        if run_dir is not None:
            home_marker = str(run_dir / "home")
            _kill_processes(lambda p: _home_of(p) == home_marker)
            _remove_tree(run_dir)
        if slot is not None:
            _remove_strays(slot.uid)
            _release_slot(slot)


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


# ---------------------------------------------------------------------------------------------
# The launcher (runs as `python -I -S sandbox.py --stub CONFIG -- COMMAND...`, stdlib only)
# ---------------------------------------------------------------------------------------------

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
