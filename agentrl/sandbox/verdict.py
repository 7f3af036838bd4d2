"""How a run is judged: which runner a test command gets, and the verdict from the harness's
result, the exit status and the limits, with the reason and the detector that decided it.

Sandbox runner -> **verdict**. `parse_command` reads a task's test command: `python -m pytest`,
`python -m unittest`, `python script.py` and `python -m module` run through the harness
(`agentrl.sandbox.harness`), whose result is the verdict; anything else (another program,
`python -c`) is judged by its exit code alone, and its result says so (`tests` is None).
`judge` turns what a run left into one reason, in this order: a limit was hit, the launcher
failed, a signal, no result from the harness or not this run's, failed tests, fewer tests ran
than were collected, fewer were collected than the protected suite holds, a non-zero exit.
"""

from __future__ import annotations

import json
import os
import re
import signal
from dataclasses import asdict, dataclass

from agentrl.sandbox.stub import _SETUP_FAILED_EXIT, _STUB_MARK

REFUSED = "refused path"
INTEGRITY = "runner integrity"
FAILED = "tests failed"
LIMIT = "resource limit"
SETUP = "sandbox setup"
DETECTORS = (REFUSED, INTEGRITY, FAILED, LIMIT, SETUP)
"""What can decide that a run did not pass, as `SandboxResult.detector` names it."""

_PYTHON = re.compile(r"python[0-9.]*$")
_FLAGS_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")


@dataclass(frozen=True)
class TestCommand:
    """A test command as the harness runs it."""

    __test__ = False  # not a pytest test class, whatever its name says
    runner: str
    """'pytest', 'unittest', 'script', 'module', or 'exit-code' (not run through the harness)."""
    interpreter: str | None = None
    target: str | None = None
    """The script's path or the module's name."""
    args: tuple[str, ...] = ()
    safe_path: bool = False
    """`-I` or `-P` was given: the script's directory (or the working directory) is not put on
    the import path."""

    def control(self) -> dict:
        return {**asdict(self), "args": list(self.args)}


def parse_command(command: list[str]) -> TestCommand:
    """Which runner `command` gets.

    >>> parse_command(["python3", "-m", "pytest", "-q", "tests"]).runner
    'pytest'
    >>> parse_command(["make", "test"]).runner
    'exit-code'
    """
    if not command or not _PYTHON.match(os.path.basename(command[0])):
        return TestCommand("exit-code")
    i, safe_path = 1, False
    while i < len(command) and command[i].startswith("-") and command[i] not in ("-m", "-c", "-"):
        flag = command[i]
        if flag in _FLAGS_WITH_VALUE:
            i += 1
        elif not flag.startswith("--") and not flag.startswith(("-W", "-X")):
            safe_path = safe_path or "I" in flag or "P" in flag
        i += 1
    if i >= len(command) or command[i] in ("-c", "-"):
        return TestCommand("exit-code")
    if command[i] == "-m":
        if i + 1 >= len(command):
            return TestCommand("exit-code")
        module, args = command[i + 1], tuple(command[i + 2:])
        runner = module if module in ("pytest", "unittest") else "module"
        return TestCommand(runner, command[0], module, args, safe_path)
    return TestCommand("script", command[0], command[i], tuple(command[i + 1:]), safe_path)


def read_record(fd: int) -> tuple[dict | None, str | None]:
    """The harness's result from its channel: (record, None), or (None, why there is none)."""
    os.lseek(fd, 0, os.SEEK_SET)
    data = b""
    while chunk := os.read(fd, 1 << 16):
        data += chunk
    lines = [line for line in data.decode("utf-8", errors="replace").splitlines() if line.strip()]
    if not lines:
        return None, None
    if len(lines) > 1:
        return None, f"{len(lines)} results written"
    try:
        record = json.loads(lines[0])
    except json.JSONDecodeError:
        return None, "an unreadable result"
    return (record, None) if isinstance(record, dict) else (None, "an unreadable result")


_SIGNAL_HINTS = {"SIGKILL": " (memory/cpu limit?)", "SIGXCPU": " (cpu limit)", "SIGXFSZ": " (file-size limit)"}
_OUTPUT_HINTS = {
    "MemoryError": "address-space limit?",
    "Cannot allocate memory": "address-space limit?",
    "File too large": "file-size limit?",
    "Resource temporarily unavailable": "process limit?",
}


def _failed(returncode: int, tail: str, note: str = "") -> tuple[str, str]:
    hints = sorted({hint for marker, hint in _OUTPUT_HINTS.items() if marker in tail})
    extra = [note] if note else []
    return f"tests failed (exit {returncode}{'; ' + ', '.join(extra + hints) if extra or hints else ''})", FAILED


def judge(
    returncode: int,
    stopped: str | None,
    tail: str,
    timeout_s: float,
    output_bytes: int,
    *,
    harnessed: bool,
    record: dict | None = None,
    record_problem: str | None = None,
    nonce: str | None = None,
    expected: int | None = None,
) -> tuple[str, str] | None:
    """(reason, detector) of a run that did not pass, or None when it passed."""
    if stopped == "timeout":
        return f"timed out after {timeout_s:.1f}s", LIMIT
    if stopped == "output":
        return f"output truncated: more than {output_bytes} bytes, run stopped", LIMIT
    if returncode == _SETUP_FAILED_EXIT and _STUB_MARK in tail:
        message = tail[tail.rindex(_STUB_MARK) + len(_STUB_MARK):].strip().splitlines()[0]
        return f"sandbox setup failed: {message}", SETUP
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"killed by signal {name}{_SIGNAL_HINTS.get(name, '')}", LIMIT
    if not harnessed:
        return None if returncode == 0 else _failed(returncode, tail)
    if record is None:
        why = record_problem or "no test result: the run ended before every test ran"
        return f"runner integrity: {why} (exit {returncode})", INTEGRITY
    if record.get("nonce") != nonce:
        return f"runner integrity: the test result is not this run's (exit {returncode})", INTEGRITY
    collected, executed = int(record.get("collected", 0)), int(record.get("executed", 0))
    failed, skipped = int(record.get("failed", 0)), int(record.get("skipped", 0))
    errors = int(record.get("collect_errors", 0))
    if failed or errors:
        note = ", ".join(part for part in (f"{failed} of {collected} failed" if failed else "",
                                           f"{errors} collection errors" if errors else "") if part)
        if returncode == 0:
            return f"runner integrity: exit 0 although {note}", INTEGRITY
        # A script is one test: its reason stays the plain 'tests failed (exit N)'.
        return _failed(returncode, tail, "" if record.get("runner") in ("script", "module") else note)
    if executed < collected:
        early = f"; exit 0 requested by {record['early_exit']}" if record.get("early_exit") else ""
        return f"runner integrity: {executed} of {collected} tests ran{early}", INTEGRITY
    if expected is not None and collected != expected:
        return f"runner integrity: {collected} tests collected, the protected suite holds {expected}", INTEGRITY
    if collected == 0:
        return "runner integrity: no tests collected", INTEGRITY
    if skipped:
        return f"tests failed ({skipped} of {collected} skipped)", FAILED
    if returncode != 0:
        return _failed(returncode, tail)
    return None
