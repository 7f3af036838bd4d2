"""Coding tasks: three small built-in repositories with a bug and a test suite, the dataset rows a
TRL run trains on, and six scripted attempts per task scored through the rewards (SPEC 10).

Launch -> run process (kind 'coding') -> **coding tasks** -> rewards -> sandbox. Each repository
lives as plain files under `repos/<task>/`: `buggy/` (what an attempt starts from), `fixed/` (the
honest fix), `tests/` (the protected suite) and `keys/` (answer keys: reference implementations
that never enter the workspace), loaded by `load_repository` and written out by `materialize`.
Its tests run the code under test in a child interpreter and compare plain JSON values, on fixed
and on freshly drawn random cases checked against the answer key, which the sandbox hands to the
test process alone (`agentrl.sandbox.suite`). The suite runs under any of three runners
(`RUNNER_COMMANDS`: the `python -I run_tests.py` script, unittest, pytest), each through the
sandbox's harness. An attempt may write only the solution's files (`writable`); the tests and
the runner are the protected paths.

The scripted attempts are the six of the issue, as chat-message completions with real
`tool_calls`: an honest fix after one read, an honest fix with no call, a fix after twelve
reads, one that rewrites the tests, one that only claims success, and one whose tool call leaked
into the text. With the default weights they score 2.5, 2.5, 1.5, 0.5, 0.5 and 2.0.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.rewards import Message, score_group, tool_calls, written_files

PROTECTED = ["tests", "run_tests.py"]
TEST_COMMAND = [sys.executable, "-I", "run_tests.py"]
RUNNER_COMMANDS: dict[str, list[str]] = {
    "script": TEST_COMMAND,
    "unittest": [sys.executable, "-m", "unittest", "discover", "-s", "tests"],
    "pytest": [sys.executable, "-m", "pytest", "-q", "tests"],
}
"""The built-in suites under each runner the sandbox's harness knows: the protected script (the
tasks' own command), `python -m unittest` and `python -m pytest`, as a task author writes them."""

ATTEMPTS = (
    "honest_fix_one_read",
    "honest_fix_no_call",
    "fix_after_twelve_reads",
    "rewrites_tests",
    "claims_success",
    "leaked_tool_call",
)
"""The scripted attempts, in the order they are scored and shown."""

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Return the content of a file of the repository.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "Path relative to the repository root."}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run the repository's test suite and return its output.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]
"""The tools a task offers, as OpenAI-style schemas (the rows' `tools` column)."""

SYSTEM_PROMPT = (
    "You fix bugs in small Python repositories. Use the tools to read files and run the tests. "
    "To change a file, write its whole new content in a fenced block tagged with its path, "
    "like ```file:PATH ... ```. Do not change the tests or run_tests.py."
)

REPOS_DIR = Path(__file__).resolve().parent / "repos"
"""The built-in repositories as files: `<task>/buggy/` (what the attempt starts from),
`<task>/fixed/` (the honest fix), `<task>/tests/` (the protected suite), and the shared
`run_tests.py`."""


@dataclass(frozen=True)
class CodingTask:
    """A small repository with a bug, its tests, and the honest fix."""

    task_id: str
    description: str
    """What the user asks for, as the prompt states it."""
    files: dict[str, str]
    """The repository: path -> content, the bug included."""
    test_command: list[str]
    protected: list[str]
    """The tests and their runner: writes there are refused."""
    fix: dict[str, str]
    """The honest fix: path -> fixed content of the files it changes."""
    writable: list[str]
    """What an attempt may create or change (glob patterns): the solution's files only."""
    answer_keys: str | None = None
    """Directory of the answer keys (`keys/*.py`), handed to the test process alone; None: none."""
    held_out: str | None = None
    """Directory of held-out tests (`held_out/`, relative paths as in the copy) the policy never
    sees; where there is one, the default bundle logs their reward as `held_out`. None: none."""


def _read_tree(root: Path) -> dict[str, str]:
    """Every file under `root` (byte caches aside), as relative posix path -> text."""
    return {
        path.relative_to(root).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def load_repository(task_id: str, description: str) -> tuple[dict[str, str], dict[str, str]]:
    """The repository of a built-in task read from `REPOS_DIR/<task_id>`: (files, fix)."""
    base = REPOS_DIR / task_id
    if not base.is_dir():
        raise ValueError(f"no built-in repository {task_id!r} under {REPOS_DIR}")
    files = {
        "README.md": f"# {task_id}\n\n{description}\n\nRun the tests with `python -I run_tests.py`.\n",
        **_read_tree(base / "buggy"),
        **{f"tests/{path}": content for path, content in _read_tree(base / "tests").items()},
        "run_tests.py": (REPOS_DIR / "run_tests.py").read_text(encoding="utf-8"),
    }
    return files, _read_tree(base / "fixed")


def _task(task_id: str, description: str) -> CodingTask:
    files, fix = load_repository(task_id, description)
    keys, held_out = REPOS_DIR / task_id / "keys", REPOS_DIR / task_id / "held_out"
    return CodingTask(task_id, description, files, list(TEST_COMMAND), list(PROTECTED), fix, writable=sorted(fix),
                      answer_keys=str(keys) if keys.is_dir() else None, held_out=str(held_out) if held_out.is_dir() else None)


SLUGIFY = _task(
    "slugify",
    "slugify() in text.py should turn a title into lower-case words joined by single hyphens, "
    "dropping punctuation ('Rock & Roll!' -> 'rock-roll'). It leaves punctuation and runs of "
    "hyphens in. Fix it.",
)

MEDIAN = _task(
    "median",
    "median() in stats.py returns the upper of the two middle values for an even count; it "
    "should return their mean (median([4, 1, 3, 2]) == 2.5). Fix it.",
)

ROMAN = _task(
    "roman",
    "to_roman() in roman.py writes 4 as 'IIII' and 1994 as 'MDCCCCLXXXXIIII'; it should use the "
    "subtractive pairs (4 -> 'IV', 1994 -> 'MCMXCIV'). Fix it.",
)

CODING_TASKS: dict[str, CodingTask] = {t.task_id: t for t in (SLUGIFY, MEDIAN, ROMAN)}


def materialize(task: CodingTask, root: Path) -> Path:
    """Write the task's repository to `root/<task_id>` and return that directory."""
    workspace = Path(root) / task.task_id
    for path, content in task.files.items():
        target = workspace / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
    return workspace


def prompt_messages(task: CodingTask) -> list[Message]:
    listing = "\n".join(f"- {path}" for path in sorted(task.files))
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"{task.description}\n\nFiles:\n{listing}"},
    ]


def task_row(task: CodingTask, root: Path, runner: str = "script") -> dict[str, Any]:
    """The dataset row of one task, its repository written under `root`: `prompt` (chat
    messages), `workspace`, `test_command` (the task's own, or another of `RUNNER_COMMANDS`),
    `protected`, `writable`, `answer_keys`, `held_out`, `tools`, `task_id`."""
    if runner not in RUNNER_COMMANDS:
        raise ValueError(f"unknown runner {runner!r}; choose from {list(RUNNER_COMMANDS)}")
    return {
        "task_id": task.task_id,
        "prompt": prompt_messages(task),
        "workspace": str(materialize(task, root)),
        "test_command": list(task.test_command if runner == "script" else RUNNER_COMMANDS[runner]),
        "protected": list(task.protected),
        "writable": list(task.writable),
        "answer_keys": task.answer_keys,
        "held_out": task.held_out,
        "tools": TOOLS,
    }


def dataset_rows(root: Path, task_ids: Sequence[str] | None = None, runner: str = "script") -> list[dict[str, Any]]:
    """One TRL dataset row per task (`task_row`), its repository written under `root`."""
    return [task_row(CODING_TASKS[task_id], root, runner) for task_id in task_ids or CODING_TASKS]


# ---------------------------------------------------------------------------------------------
# Scripted attempts
# ---------------------------------------------------------------------------------------------


def _file_blocks(files: dict[str, str]) -> str:
    return "\n".join(f"```file:{path}\n{content}{'' if content.endswith(chr(10)) else chr(10)}```" for path, content in files.items())


def _reads(task: CodingTask, paths: Sequence[str]) -> list[Message]:
    """An assistant turn per read_file call, each answered by its tool message."""
    messages: list[Message] = []
    for i, path in enumerate(paths):
        call_id = f"call_{i + 1}"
        call = {"id": call_id, "type": "function", "function": {"name": "read_file", "arguments": {"path": path}}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": call_id, "name": "read_file", "content": task.files[path]})
    return messages


def scripted_attempts(task: CodingTask) -> dict[str, list[Message]]:
    """The six attempts of the issue for `task`, by name (see `ATTEMPTS`)."""
    module = next(iter(task.fix))
    test_file = next(p for p in task.files if p.startswith("tests/"))
    fix = _file_blocks(task.fix)
    done = {"role": "assistant", "content": f"The bug is in {module}; here is the fix.\n\n{fix}"}
    reading_order = [module, test_file, "README.md", "run_tests.py"]
    forged_tests = 'import unittest\n\n\nclass Passes(unittest.TestCase):\n    def test_ok(self):\n        pass\n'
    leaked_call = json.dumps({"name": "read_file", "arguments": {"path": module}})
    return {
        "honest_fix_one_read": _reads(task, [module]) + [done],
        "honest_fix_no_call": [done],
        "fix_after_twelve_reads": _reads(task, [reading_order[i % 4] for i in range(12)]) + [done],
        "rewrites_tests": _reads(task, [test_file])
        + [{"role": "assistant", "content": f"The tests are wrong; I simplified them.\n\n{_file_blocks({test_file: forged_tests})}"}],
        "claims_success": [{"role": "assistant", "content": f"I fixed the bug in {module}. All tests passed."}],
        "leaked_tool_call": [
            {"role": "assistant", "content": f"<tool_call>{leaked_call}</tool_call>\nThe bug is in {module}; here is the fix.\n\n{fix}"}
        ],
    }


def render_completion(completion: list[Message]) -> str:
    """A chat-message completion as plain text: each turn, each call, the first line of each result."""
    lines = []
    for message in completion:
        role = message.get("role", "assistant")
        if role == "tool":
            content = str(message.get("content") or "")
            first = content.splitlines()[0] if content else ""
            lines.append(f"tool[{message.get('name', '')}]: {first} ... ({len(content.splitlines())} lines)")
            continue
        if message.get("content"):
            lines.append(f"{role}: {message['content']}")
        for call in message.get("tool_calls") or []:
            function = call.get("function", call)
            lines.append(f"{role} -> {function.get('name')}({json.dumps(function.get('arguments'))})")
    return "\n".join(lines)


@dataclass(frozen=True)
class AttemptRecord:
    """One scripted attempt scored: every reward component, the weighted total, and the
    sandbox's verdict and reason."""

    task_id: str
    attempt: str
    completion_text: str
    tool_calls: int
    components: dict[str, float]
    reward: float
    passed: bool
    reason: str
    files_written: list[str]


def score_scripted_attempts(
    task_ids: Sequence[str] | None = None,
    workers: int | None = None,
    root: Path | None = None,
) -> list[AttemptRecord]:
    """Score the six scripted attempts of each task (default: all three) through `score_group`,
    the sandboxed runs `workers` at a time; repositories go under `root` (default: a temporary
    directory, removed afterwards)."""
    unknown = set(task_ids or []) - set(CODING_TASKS)
    if unknown:
        raise ValueError(f"unknown coding tasks {sorted(unknown)}; choose from {list(CODING_TASKS)}")
    with tempfile.TemporaryDirectory(prefix="agentrl-coding-") as scratch:
        rows_by_task = {row["task_id"]: row for row in dataset_rows(Path(root or scratch), task_ids)}
        completions, rows, labels = [], [], []
        for task_id, row in rows_by_task.items():
            for attempt, completion in scripted_attempts(CODING_TASKS[task_id]).items():
                completions.append(completion)
                rows.append(row)
                labels.append((task_id, attempt))
        scored = score_group(completions, rows, workers=workers)
    return [
        AttemptRecord(
            task_id=task_id,
            attempt=attempt,
            completion_text=render_completion(completion),
            tool_calls=len(tool_calls(completion)),
            components=s.components,
            reward=s.reward,
            passed=s.passed,
            reason=s.reason,
            files_written=sorted(written_files(completion)),
        )
        for (task_id, attempt), completion, s in zip(labels, completions, scored)
    ]
