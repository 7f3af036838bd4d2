"""The coding environment a language model works in: read files, write files, run the tests.

Inside the LM run process: TRL makes one `CodingToolEnv` per rollout through the coding task's
`environment_factory`, and calls its three public methods when the model emits a tool call.
A rollout never touches the workspace itself: `write_file` keeps the new content in the
environment, `read_file` reads it back (or the workspace's file), and `run_tests` runs the
workspace's own test command on those files in the sandbox (`agentrl.sandbox.run_tests`: a
throw-away copy, limits, the protected paths). A write the sandbox would refuse (the tests, an
absolute path, `..`) is refused here too, and remembered: it is what the coding task's `verify`
flags. Sandbox results are cached by workspace and files, so a group that writes the same files
runs the tests once. Files written in ```file:PATH blocks of the agent's text (SPEC 10's protocol,
the coding engine's scripted attempts') are writes too, taken once at the end (`write_answer`), so
a scripted attempt replays through this environment as it was scored.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from agentrl.sandbox import SandboxLimits, SandboxResult, refusal_reason, run_tests

CACHE_SIZE = 512
_cache: OrderedDict[tuple, SandboxResult] = OrderedDict()
_cache_lock = threading.Lock()


def cache_key(workspace: str, files: dict[str, str], test_command: list[str]) -> tuple:
    return (str(workspace), tuple(sorted(files.items())), tuple(test_command))


def cached_result(key: tuple) -> SandboxResult | None:
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    return None


def remember(key: tuple, result: SandboxResult) -> None:
    with _cache_lock:
        _cache[key] = result
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)


def sandboxed_tests(workspace: str, files: dict[str, str], test_command: list[str], protected: list[str],
                    limits: SandboxLimits | None = None, writable: list[str] | None = None,
                    answer_keys: str | None = None) -> SandboxResult:
    """The workspace's tests with `files` written in, through the cache. `writable` is the task's
    allow-list of paths; `answer_keys` the keys only the test process receives (never the workspace)."""
    key = cache_key(workspace, files, test_command)
    result = cached_result(key)
    if result is None:
        result = run_tests(Path(workspace), dict(files), list(test_command), list(protected), limits or SandboxLimits(),
                           writable=writable, answer_keys=answer_keys)
        remember(key, result)
    return result


class CodingToolEnv:
    """One coding episode on one repository; TRL makes one per rollout and reuses it via `reset`.

    Only the three tools are public functions: TRL exposes every public method as a tool.
    """

    def __init__(self) -> None:
        self._workspace = ""
        self._test_command: list[str] = []
        self._protected: list[str] = []
        self._writable: list[str] | None = None
        self._answer_keys: str | None = None
        self._held_out: str | None = None
        self.written: dict[str, str] = {}  # path -> content the agent wrote (allowed writes only)
        self.refused: list[str] = []  # why each refused write was refused (protected path, `..`, ...)
        self.test_runs = 0
        self.tests_passed: bool | None = None  # set by the tests reward at the end of the rollout
        self.answer_taken = False  # the text's ```file: blocks were written (`write_answer`)

    def reset(self, workspace: str, test_command: list[str], protected: list[str], writable: list[str] | None = None,
              answer_keys: str | None = None, held_out: str | None = None, **row: Any) -> None:
        """Start an episode on the row's repository; the prompt already lists its files."""
        self._workspace = str(workspace)
        self._test_command = list(test_command)
        self._protected = list(protected)
        self._writable = None if writable is None else list(writable)
        self._answer_keys = answer_keys
        self._held_out = held_out  # the held-out tests: never the agent's to read or run
        self.written = {}
        self.refused = []
        self.test_runs = 0
        self.tests_passed = None
        self.answer_taken = False
        return None

    def read_file(self, path: str) -> str:
        """Return the content of a file of the repository.

        Args:
            path: Path of the file, relative to the repository root.
        """
        reason = refusal_reason(path, [])
        if reason:
            return f"error: {reason.removeprefix('refused: ')}"
        if path in self.written:
            return self.written[path]
        target = Path(self._workspace) / path
        if not target.is_file():
            return f"error: no file {path}"
        return target.read_text(encoding="utf-8", errors="replace")

    def write_file(self, path: str, content: str) -> str:
        """Replace a file of the repository with new content.

        Args:
            path: Path of the file, relative to the repository root.
            content: The whole new content of the file.
        """
        reason = refusal_reason(path, self._protected)
        if reason:
            self.refused.append(reason)
            return f"error: {reason}"
        self.written[path] = content
        return f"wrote {path}"

    def run_tests(self) -> str:
        """Run the repository's test suite on the files as they are now and say whether it passed."""
        self.test_runs += 1
        return sandboxed_tests(self._workspace, self.written, self._test_command, self._protected,
                               writable=self._writable, answer_keys=self._answer_keys).reason

    @property
    def workspace(self) -> str:
        return self._workspace

    @property
    def test_command(self) -> list[str]:
        return list(self._test_command)

    @property
    def protected(self) -> list[str]:
        return list(self._protected)

    @property
    def writable(self) -> list[str] | None:
        return None if self._writable is None else list(self._writable)

    @property
    def answer_keys(self) -> str | None:
        return self._answer_keys

    @property
    def held_out(self) -> str | None:
        return self._held_out


def write_answer(environment: CodingToolEnv, files: dict[str, str]) -> None:
    """The files the agent wrote in ```file:PATH blocks of its text, each written as `write_file`
    would (a protected path is refused and remembered), once per episode, after its calls."""
    if environment.answer_taken:
        return
    environment.answer_taken = True
    for path, content in files.items():
        environment.write_file(path, content)
