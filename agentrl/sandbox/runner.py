"""The sandboxed test runner: a throw-away copy of a workspace, the files a completion wrote, and
the workspace's own test command run there under limits (SPEC section 10).

Run process -> rewards (`agentrl.rewards.tests_reward`) -> **sandbox**. `run_tests` refuses
writes that would leave the copy, touch the tests or change how they run (`paths`), copies the
workspace, writes the files, runs the command under wall-clock, CPU, address-space, file-size and
process-count limits with a scrubbed environment (as an unprivileged user of its own when started
as root), kills every process the run left behind, and removes the copy. A Python test command
(pytest, unittest, a script) runs through the harness (`harness`), and the verdict comes from the
result it writes after every test ran, checked against a per-run nonce and the count of tests the
protected suite holds (`verdict`); the exit code alone decides only for other commands. It
answers with a `SandboxResult`: pass or fail, a short reason a person can read, and the detector
that decided.

These limits bound accidents (a loop, a fork bomb, a runaway allocation, a test that deletes its
own directory). They are NOT a security boundary: the run shares the kernel, the network and the
file system of the host (the README's "The test sandbox" section says how to add one).

Each run goes through the launcher in `stub` (limits, user, reaping) and, for a Python test
command, the harness in `harness`; both are separate programs that import nothing of agentrl.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentrl.sandbox import harness, stub, suite
from agentrl.sandbox.verdict import REFUSED, TestCommand, judge, parse_command, read_record
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
from agentrl.sandbox.stub import _STOP_GRACE_S

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
    tests/test_x.py', 'runner integrity: 0 of 1 tests ran', 'timed out after 3.0s', ..."""
    returncode: int | None
    duration_s: float
    output_tail: str
    detector: str | None = None
    """What decided a run that did not pass (`agentrl.sandbox.verdict.DETECTORS`): 'refused
    path', 'runner integrity', 'tests failed', 'resource limit' or 'sandbox setup'; None when
    it passed."""
    tests: dict | None = None
    """The harness's counts (collected, executed, passed, failed, skipped) and the number of
    tests the protected suite holds ('expected'); None when the exit code alone decided."""


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
    return SandboxResult(passed=False, reason=reason, returncode=None, duration_s=0.0, output_tail="", detector=REFUSED)


def _answer_keys(answer_keys: Mapping[str, str] | str | Path | None) -> dict[str, str]:
    """Answer keys by name: as given, or every `*.py` of a directory by stem."""
    if answer_keys is None:
        return {}
    if isinstance(answer_keys, Mapping):
        return dict(answer_keys)
    directory = Path(answer_keys)
    if not directory.is_dir():
        raise ValueError(f"answer_keys {directory} is not a directory")
    return {path.stem: path.read_text(encoding="utf-8") for path in sorted(directory.glob("*.py"))}


def _place_harness(run_dir: Path) -> Path:
    """The harness, the suite helper and an empty pytest configuration, in a directory of the run
    outside the workspace that the run may read but not change."""
    directory = run_dir / "harness"
    directory.mkdir()
    shutil.copyfile(harness.__file__, directory / "harness.py")
    shutil.copyfile(suite.__file__, directory / "agentrl_suite.py")
    (directory / "pytest.ini").write_text("[pytest]\n")
    for path in directory.iterdir():
        path.chmod(0o444)
    directory.chmod(0o555)
    return directory


def _memfd(name: str, content: bytes = b"") -> int:
    fd = os.memfd_create(name)  # close-on-exec here; passed on by pass_fds alone
    os.write(fd, content)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


_EXPECTED: dict[tuple, int | None] = {}
_EXPECTED_LOCK = threading.Lock()


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
    answer_keys: Mapping[str, str] | str | Path | None = None,
) -> SandboxResult:
    """Write `files` into a throw-away copy of `workspace` and run `test_command` there.

    Passes when the verdict says every test ran and passed (for a Python test command, from the
    harness's result; otherwise from the exit code) and the protected paths are as they were.
    `temp_root` is where the copy is made (default `default_temp_root()`); it is empty again when
    this returns. `isolate_user` (default: when running as root) runs the command as a sandbox
    user of its own. `writable` is the task's allow-list of what an attempt may create or change
    (glob patterns; None: anything the rules for every task allow, `agentrl.sandbox.paths`).
    `answer_keys` (name -> Python source, or a directory of `*.py`) reach the test process alone,
    as `agentrl_suite.answer_key(name)`, never the workspace.

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

    command = parse_command(list(test_command))
    keys = _answer_keys(answer_keys)
    run = _Run(workspace, list(test_command), command, list(protected), limits, temp_root, isolate_user, keys)
    expected = _expected_tests(run) if command.runner in ("pytest", "unittest") else None
    return run.execute(files, writable, expected=expected)


def _expected_tests(run: "_Run") -> int | None:
    """How many tests the protected suite holds: collected once, without the attempt's files,
    per workspace, command and protected content (None when that collection itself fails)."""
    key = (str(run.workspace.resolve()), tuple(run.test_command), json.dumps(fingerprint(run.workspace, run.protected)))
    with _EXPECTED_LOCK:
        if key in _EXPECTED:
            return _EXPECTED[key]
    record = run.execute({}, None, mode="collect").tests
    count = int(record["collected"]) if record and not record.get("collect_errors") and record.get("collected") else None
    with _EXPECTED_LOCK:
        _EXPECTED[key] = count
    return count


@dataclass
class _Run:
    """One task's run settings; `execute` makes a copy, writes the files and runs it once."""

    workspace: Path
    test_command: list[str]
    command: TestCommand
    protected: list[str]
    limits: SandboxLimits
    temp_root: Path | None
    isolate_user: bool
    keys: dict[str, str]

    def execute(self, files: dict[str, str], writable: Sequence[str] | None, *, mode: str = "run",
                expected: int | None = None) -> SandboxResult:
        limits, protected = self.limits, self.protected
        temp_root = own_directory(Path(self.temp_root) if self.temp_root is not None else default_temp_root(), 0o711)
        slot = acquire_slot() if self.isolate_user else None
        run_dir: Path | None = None
        process: subprocess.Popen | None = None
        fds: list[int] = []
        try:
            if slot is not None and temp_root.stat().st_uid == os.geteuid():
                temp_root.chmod(stat.S_IMODE(temp_root.stat().st_mode) | stat.S_IXOTH)
            run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=temp_root))
            copy, home, tmp = run_dir / "workspace", run_dir / "home", run_dir / "tmp"
            shutil.copytree(self.workspace, copy, symlinks=True, ignore=_ignore_specials)
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
                "pass_fds": [],
            }
            harnessed = self.command.runner != "exit-code"
            command, nonce, result_fd = list(self.test_command), None, None
            if harnessed:
                nonce = secrets.token_hex(16)
                control = {"nonce": nonce, "mode": mode, "command": self.command.control(), "protected": protected,
                           "keys": self.keys, "pytest_ini": str(run_dir / "harness" / "pytest.ini")}
                control_fd = _memfd("agentrl-control", json.dumps(control).encode())
                result_fd = _memfd("agentrl-result")
                fds += [control_fd, result_fd]
                config["pass_fds"] = [control_fd, result_fd]
                place = _place_harness(run_dir)
                command = [self.command.interpreter, "-I", str(place / "harness.py"), str(control_fd), str(result_fd)]
            if slot is not None:
                run_dir.chmod(0o711)  # the sandbox user may pass through, not list or rename
                _hand_over(copy, home, tmp, slot, protected)
                program = command[0]
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
                launcher + command,
                cwd=copy,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=tuple(fds),
            )
            output, stopped = _read_until_exit(process, started + limits.timeout_s, limits.output_bytes)
            returncode = process.wait()
            duration = time.monotonic() - started
            tail = output.decode("utf-8", errors="replace")
            record, problem = read_record(result_fd) if result_fd is not None else (None, None)
            tests = {**record, "expected": expected} if record and record.get("nonce") == nonce else None
            if tests is not None:
                tests.pop("nonce", None)
                tests.pop("mode", None)
            verdict = judge(returncode, stopped, tail, limits.timeout_s, limits.output_bytes, harnessed=harnessed,
                            record=record, record_problem=problem, nonce=nonce, expected=expected)
            if verdict is None:
                changed = [p for p, d in fingerprint(copy, protected).items() if d != protected_before[p]]
                verdict = (f"protected path changed during the run: {changed[0]}", "runner integrity") if changed else None
            reason, detector = verdict or ("tests passed", None)
            return SandboxResult(
                passed=verdict is None,
                reason=reason,
                returncode=returncode,
                duration_s=round(duration, 3),
                output_tail=tail,
                detector=detector,
                tests=tests,
            )
        finally:
            for fd in fds:
                os.close(fd)
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
