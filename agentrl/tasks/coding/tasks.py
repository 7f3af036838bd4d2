"""Coding tasks: three small built-in repositories with a bug and a test suite, the dataset rows a
TRL run trains on, and six scripted attempts per task scored through the rewards (SPEC 10).

Launch -> run process (kind 'coding') -> **coding tasks** -> rewards -> sandbox. Each repository
is defined here as path -> content and written out by `materialize`. Its tests run the code
under test in a child interpreter and assert in their own, on fixed and on freshly drawn random
cases, and its test command runs them in isolated mode (`python -I run_tests.py`): so a solution
cannot pass by printing a forged report, exiting early, shadowing a module, or answering from a
table lifted out of the test file. The tests and the runner are the protected paths.

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

RUNNER = '''"""Runs this repository's tests; exits 0 only when every test ran and passed.

Run it as `python -I run_tests.py`: isolated mode keeps the working directory (where a solution
writes its files) off the import path, so no file there can stand in for a module used here.
"""

import importlib.util
import sys
import unittest
from pathlib import Path

suite = unittest.TestSuite()
for path in sorted(Path("tests").glob("test_*.py")):
    spec = importlib.util.spec_from_file_location(f"tests.{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    suite.addTests(unittest.defaultTestLoader.loadTestsFromModule(module))
result = unittest.TextTestRunner(verbosity=1).run(suite)
sys.exit(0 if result.wasSuccessful() and result.testsRun > 0 else 1)
'''

HARNESS = '''import json
import random
import subprocess
import sys
import unittest


def call_in_child(module, function, calls):
    """`module.function(*args)` for each args in `calls`, evaluated in a fresh interpreter.

    The code under test never runs in this process, so whatever it does there (print a forged
    report, exit early, patch the standard library) cannot touch the assertions made here.
    """
    program = (
        "import json, sys\\n"
        "calls = json.loads(sys.stdin.read())\\n"
        "sys.path.insert(0, '.')\\n"
        f"from {module} import {function}\\n"
        f"print(json.dumps([{function}(*args) for args in calls]))\\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", program],
        input=json.dumps(calls), capture_output=True, text=True, timeout=20,
    )
    if done.returncode != 0:
        raise AssertionError(f"the code under test failed:\\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])
'''


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


def _task(task_id: str, description: str, module: str, buggy: str, fixed: str, tests: str) -> CodingTask:
    files = {
        "README.md": f"# {task_id}\n\n{description}\n\nRun the tests with `python -I run_tests.py`.\n",
        f"{module}.py": buggy,
        f"tests/test_{module}.py": tests,
        "run_tests.py": RUNNER,
    }
    return CodingTask(task_id, description, files, list(TEST_COMMAND), list(PROTECTED), {f"{module}.py": fixed})


SLUGIFY = _task(
    "slugify",
    "slugify() in text.py should turn a title into lower-case words joined by single hyphens, "
    "dropping punctuation ('Rock & Roll!' -> 'rock-roll'). It leaves punctuation and runs of "
    "hyphens in. Fix it.",
    "text",
    buggy='''"""Text helpers."""


def slugify(title):
    """Lower-case words joined by single hyphens: 'Hello, World!' -> 'hello-world'."""
    return title.strip().lower().replace(" ", "-")
''',
    fixed='''"""Text helpers."""

import re


def slugify(title):
    """Lower-case words joined by single hyphens: 'Hello, World!' -> 'hello-world'."""
    return "-".join(re.findall(r"[a-z0-9]+", title.lower()))
''',
    tests='"""Tests of text.slugify, fixed cases and random titles."""\n\n' + HARNESS + '''import re


def reference(title):
    return "-".join(re.findall(r"[a-z0-9]+", title.lower()))


class SlugifyTest(unittest.TestCase):
    def test_examples(self):
        cases = [("Hello World", "hello-world"), ("  Many   spaces  ", "many-spaces"),
                 ("Rock & Roll!", "rock-roll"), ("already-a-slug", "already-a-slug")]
        self.assertEqual(call_in_child("text", "slugify", [[t] for t, _ in cases]), [s for _, s in cases])

    def test_random_titles(self):
        rng = random.Random()
        words = ["alpha", "Beta", "GAMMA", "d3lta", "e", "Zeta99"]
        titles = [rng.choice([" ", "  ", " - ", ", ", "! "]).join(rng.choices(words, k=rng.randint(1, 5)))
                  + rng.choice(["", " ", "?", "..."]) for _ in range(25)]
        self.assertEqual(call_in_child("text", "slugify", [[t] for t in titles]), [reference(t) for t in titles])
''',
)

MEDIAN = _task(
    "median",
    "median() in stats.py returns the upper of the two middle values for an even count; it "
    "should return their mean (median([4, 1, 3, 2]) == 2.5). Fix it.",
    "stats",
    buggy='''"""Summary statistics."""


def median(values):
    """The middle value of `values`; for an even count, the mean of the two middle values."""
    ordered = sorted(values)
    return ordered[len(ordered) // 2]
''',
    fixed='''"""Summary statistics."""


def median(values):
    """The middle value of `values`; for an even count, the mean of the two middle values."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
''',
    tests='"""Tests of stats.median, fixed cases and random lists."""\n\n' + HARNESS + '''import statistics


class MedianTest(unittest.TestCase):
    def test_examples(self):
        cases = [([3, 1, 2], 2), ([4, 1, 3, 2], 2.5), ([5], 5), ([1, 1, 2, 10], 1.5)]
        self.assertEqual(call_in_child("stats", "median", [[v] for v, _ in cases]), [m for _, m in cases])

    def test_random_lists(self):
        rng = random.Random()
        lists = [[rng.randint(-50, 50) for _ in range(rng.randint(1, 9))] for _ in range(25)]
        self.assertEqual(call_in_child("stats", "median", [[v] for v in lists]), [statistics.median(v) for v in lists])
''',
)

ROMAN = _task(
    "roman",
    "to_roman() in roman.py writes 4 as 'IIII' and 1994 as 'MDCCCCLXXXXIIII'; it should use the "
    "subtractive pairs (4 -> 'IV', 1994 -> 'MCMXCIV'). Fix it.",
    "roman",
    buggy='''"""Roman numerals."""

NUMERALS = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]


def to_roman(number):
    """`number` (1 to 3999) in Roman numerals, with subtractive pairs: 1994 -> 'MCMXCIV'."""
    numerals = []
    for value, numeral in NUMERALS:
        count, number = divmod(number, value)
        numerals.append(numeral * count)
    return "".join(numerals)
''',
    fixed='''"""Roman numerals."""

NUMERALS = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
            (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]


def to_roman(number):
    """`number` (1 to 3999) in Roman numerals, with subtractive pairs: 1994 -> 'MCMXCIV'."""
    numerals = []
    for value, numeral in NUMERALS:
        count, number = divmod(number, value)
        numerals.append(numeral * count)
    return "".join(numerals)
''',
    tests='"""Tests of roman.to_roman, fixed cases and random numbers."""\n\n' + HARNESS + '''

def reference(number):
    thousands = ["", "M", "MM", "MMM"]
    hundreds = ["", "C", "CC", "CCC", "CD", "D", "DC", "DCC", "DCCC", "CM"]
    tens = ["", "X", "XX", "XXX", "XL", "L", "LX", "LXX", "LXXX", "XC"]
    ones = ["", "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX"]
    return thousands[number // 1000] + hundreds[number // 100 % 10] + tens[number // 10 % 10] + ones[number % 10]


class ToRomanTest(unittest.TestCase):
    def test_examples(self):
        cases = [(1, "I"), (4, "IV"), (9, "IX"), (14, "XIV"), (40, "XL"), (1994, "MCMXCIV"), (3999, "MMMCMXCIX")]
        self.assertEqual(call_in_child("roman", "to_roman", [[n] for n, _ in cases]), [r for _, r in cases])

    def test_random_numbers(self):
        numbers = random.Random().sample(range(1, 4000), 30)
        self.assertEqual(call_in_child("roman", "to_roman", [[n] for n in numbers]), [reference(n) for n in numbers])
''',
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


def dataset_rows(root: Path, task_ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One TRL dataset row per task, its repository written under `root`: `prompt` (chat
    messages), `workspace`, `test_command`, `protected`, `tools`, `task_id`."""
    rows = []
    for task_id in task_ids or CODING_TASKS:
        task = CODING_TASKS[task_id]
        rows.append(
            {
                "task_id": task.task_id,
                "prompt": prompt_messages(task),
                "workspace": str(materialize(task, root)),
                "test_command": list(task.test_command),
                "protected": list(task.protected),
                "tools": TOOLS,
            }
        )
    return rows


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
