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
own directory). The run's view of the machine is bubblewrap's allow-list where `bwrap` is here
(`bubblewrap`), else the launcher's namespaces and a hide-list (`isolation`; the result's `note`
says it is weaker). Neither is a security boundary against the kernel (README, "The test sandbox").

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
from dataclasses import dataclass, field
from pathlib import Path

from agentrl.sandbox import stub
from agentrl.sandbox.bubblewrap import NO_NAMESPACES_NOTE, WEAKER_NOTE, bubblewrap_available, bubblewrap_config
from agentrl.sandbox.isolation import namespace_spec, namespaces_available
from agentrl.sandbox.paths import fingerprint, normalised, refusal_in_copy, refusal_reason, write_file
from agentrl.sandbox.rundir import (
    default_temp_root,
    hand_over,
    ignore_specials,
    load_answer_keys,
    load_held_out,
    memfd,
    place_harness,
)
from agentrl.sandbox.users import (
    acquire_slot,
    count_own_tasks,
    home_of,
    kill_processes,
    own_directory,
    release_slot,
    remove_strays,
    remove_tree,
    uids,
)
from agentrl.sandbox.verdict import INTEGRITY, REFUSED, TestCommand, judge, parse_command, read_record
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
    isolation: tuple[str, ...] = ()
    """What walled the run off: 'sandbox user', 'allow-list' (bubblewrap's view), 'user namespace',
    'network', 'mount', 'ipc', 'pid', 'seccomp', 'process boundary'."""
    boundary: str | None = None
    """'process': the solution's modules ran in a child and only data reached the assertions;
    'none': the task opted out and the solution shared the test process, so the reward is weaker
    (an always-equal object or a patched assertion can earn it; README, "The test sandbox");
    None when no harness ran."""
    note: str = ""
    """Empty when bubblewrap walled the run off (its allow-listed view); else why the isolation is
    weaker (`agentrl.sandbox.bubblewrap.WEAKER_NOTE`)."""


# ---------------------------------------------------------------------------------------------
# The copy
# ---------------------------------------------------------------------------------------------


def _refused(reason: str) -> SandboxResult:
    return SandboxResult(passed=False, reason=reason, returncode=None, duration_s=0.0, output_tail="", detector=REFUSED)


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
    namespaces: bool | None = None,
    hide: Sequence[str | Path] = (),
    boundary: str = "process",
    held_out: Mapping[str, str] | str | Path | None = None,
    bubblewrap: bool | None = None,
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
    `boundary` ("process", the default, or "none"): for a Python test command, whether the
    modules an attempt may write are imported in the test process as proxies to a child that runs
    them (`agentrl.sandbox.boundary`), or, for a suite that needs live objects, as themselves (a
    weaker reward, and the result says so). `held_out` (relative path -> content, or a directory
    of files): tests the policy never sees, written into the copy after the attempt's files and
    protected like the tests (run them as a reward component of their own, `agentrl.rewards.
    HeldOutReward`, so special-casing the visible cases shows as the gap between the two).
    `namespaces` (default: when the
    kernel allows them) gives the run its own network (loopback only), mount and IPC namespaces
    and a view of the files without the home directories, the dashboard's files and the answer
    keys, plus the directories in `hide` (`agentrl.sandbox.isolation`); True insists on them.
    `bubblewrap` (default: when `bwrap` can run here) builds that view from an allow-list instead
    (`agentrl.sandbox.bubblewrap`); False takes the hide-list, and the result's `note` says so.

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

    if boundary not in ("process", "none"):
        raise ValueError(f"boundary must be 'process' or 'none' (got {boundary!r})")
    hidden_tests = load_held_out(held_out)
    protected = list(protected) + [p for p in hidden_tests if p not in protected]
    for path in files:
        reason = refusal_reason(path, protected, writable)
        if reason:
            return _refused(reason)

    if namespaces is None or namespaces:
        available = namespaces_available()
        if namespaces and not available.available:
            raise ValueError(f"namespaces=True but this kernel refuses them here: {available.why_not}")
        namespaces = available.available
    if bubblewrap and not namespaces:
        raise ValueError("bubblewrap=True needs the namespaces; leave namespaces unset or True")
    if bubblewrap is None or bubblewrap:
        wrap = bubblewrap_available() if namespaces else None
        if bubblewrap and not wrap.available:
            raise ValueError(f"bubblewrap=True but it cannot run here: {wrap.why_not}")
        bubblewrap = bool(wrap and wrap.available)

    command = parse_command(list(test_command))
    keys = load_answer_keys(answer_keys)
    run = _Run(workspace, list(test_command), command, list(protected), limits, temp_root, isolate_user, keys,
               namespaces, tuple(hide), boundary, None if writable is None else list(writable), hidden_tests, bubblewrap)
    expected = _expected_tests(run) if command.runner in ("pytest", "unittest") else None
    return run.execute(files, writable, expected=expected)


def _expected_tests(run: "_Run") -> int | None:
    """How many tests the protected suite holds: collected once, without the attempt's files,
    per workspace, command and protected content (None when that collection itself fails)."""
    key = (str(run.workspace.resolve()), tuple(run.test_command), json.dumps(fingerprint(run.workspace, run.protected)),
           run.boundary, json.dumps(run.writable), json.dumps(run.held_out, sort_keys=True), run.bubblewrap)
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
    namespaces: bool
    hide: tuple[str | Path, ...]
    boundary: str = "process"
    writable: list[str] | None = None
    held_out: dict[str, str] = field(default_factory=dict)
    bubblewrap: bool = False

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
            shutil.copytree(self.workspace, copy, symlinks=True, ignore=ignore_specials)
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
            for relative, content in self.held_out.items():  # after the attempt's files: never its
                write_file(copy / relative, content)

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
                           "keys": self.keys, "pytest_ini": str(run_dir / "harness" / "pytest.ini"),
                           "no_conftest": not any(copy.rglob("conftest.py")), "boundary": self.boundary,
                           "writable": self.writable}
                control_fd = memfd("agentrl-control", json.dumps(control).encode())
                result_fd = memfd("agentrl-result")
                fds += [control_fd, result_fd]
                config["pass_fds"] = [control_fd, result_fd]
                place = place_harness(run_dir)
                # -B: -I ignores PYTHONDONTWRITEBYTECODE, and no .pyc may appear beside a protected test
                command = [self.command.interpreter, "-I", "-B", str(place / "harness.py"), str(control_fd), str(result_fd)]
            program = command[0]
            executable = shutil.which(program, path=env["PATH"]) if "/" not in program else str(copy / program)
            reachable = [str(temp_root)] + ([executable, str(Path(executable).resolve())] if executable else [])
            isolation = ("sandbox user",) if slot is not None else ()
            if slot is not None:
                run_dir.chmod(0o711)  # the sandbox user may pass through, not list or rename
                hand_over(copy, home, tmp, slot, protected)
                config.update(uid=slot.uid, gid=slot.gid, read_search=not all(map(stub._traversable_by_others, reachable)))
            else:
                # Without a user of its own the run shares RLIMIT_NPROC with everything this user
                # runs, so the limit is what runs now plus the run's allowance.
                config["max_processes"] = count_own_tasks() + limits.max_processes
            if self.namespaces:
                user_namespace = os.geteuid() != 0
                # each protected path bind-mounted read-only onto itself: a mount point can be
                # neither written, renamed nor removed (EBUSY), so no copy can be put in its place
                guarded = [copy / normalised(p) for p in protected]
                guarded = [p for p in guarded if p.exists() and not p.is_symlink() and p != copy]
                read_only = ([run_dir / "harness"] if harnessed else []) + guarded
                if self.bubblewrap:  # an allow-listed view, built by bwrap; the stub's copy inside does the rest
                    config["bubblewrap"] = bubblewrap_config(run_dir, copy, [executable] if executable else [],
                                                             uid=slot.uid if slot else None, gid=slot.gid if slot else None,
                                                             home=home, hide=self.hide, read_only=read_only)
                    config["read_search"] = False
                isolation += ("allow-list",) * self.bubblewrap
                pid = namespaces_available().pid or self.bubblewrap
                config["namespaces"] = None if self.bubblewrap else namespace_spec(run_dir, copy, [executable] if executable else [], hide=self.hide,
                                                      user_namespace=user_namespace, pid=pid,
                                                      read_only=read_only)
                if not self.bubblewrap:
                    config.update(read_search="auto" if slot is not None else False, reachable=reachable)
                isolation += ("user namespace",) * user_namespace + ("network", "mount", "ipc") + ("pid",) * pid
            if stub.seccomp_supported():  # system calls that reach beyond the run fail with EPERM
                config["seccomp"] = True
                isolation += ("seccomp",)
            isolation += ("process boundary",) if harnessed and self.boundary == "process" else ()

            protected_before = fingerprint(copy, protected)  # as the run finds them (after the hand-over)
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
                verdict = (f"protected path changed during the run: {changed[0]}", INTEGRITY) if changed else None
            reason, detector = verdict or ("tests passed", None)
            return SandboxResult(
                passed=verdict is None,
                reason=reason,
                returncode=returncode,
                duration_s=round(duration, 3),
                output_tail=tail,
                detector=detector,
                tests=tests,
                isolation=isolation,
                boundary=self.boundary if harnessed else None,
                note="" if self.bubblewrap else WEAKER_NOTE if self.namespaces else NO_NAMESPACES_NOTE,
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
                kill_processes(lambda p: home_of(p) == home_marker)
                remove_tree(run_dir)
            if slot is not None:
                remove_strays(slot.uid)
                release_slot(slot)


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
