"""Hostile completions against the sandbox (SPEC section 10): each attack is bounded in time,
scores 0 with a reason that says what happened, leaves the original workspace byte for byte as
it was, and leaves no process and no copy behind.

The workspace is a repository whose protected test `check.py` imports the completion's
`solution.py` and asserts `answer() == 42`; every attack writes its own `solution.py` (or a path it
should not) and tries to pass, break out, or linger.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from agentrl.tasks.coding.tasks import CODING_TASKS, materialize
from agentrl.rewards import tests_reward
from agentrl.sandbox import SandboxLimits, SandboxResult, run_tests, sandbox_processes

PY = sys.executable
QUICK = SandboxLimits(timeout_s=2.0)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox user exists only when started as root")


def tree_digest(root: Path) -> str:
    """Paths, contents, modes and link targets of a tree: any change shows."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        digest.update(f"{path.relative_to(root)}|{info.st_mode}|{info.st_uid}\n".encode())
        if path.is_symlink():
            digest.update(os.readlink(path).encode())
        elif path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture
def sandbox_root():
    root = Path(tempfile.mkdtemp(prefix="agentrl-sandbox-test-"))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def workspace(tmp_path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "check.py").write_text("from solution import answer\nassert answer() == 42, answer()\nprint('check passed')\n")
    (root / "solution.py").write_text("def answer():\n    return 41\n")
    return root


@pytest.fixture
def attack(workspace, sandbox_root):
    """Run a completion's files against the workspace and check what must hold whatever they do."""

    def run(files: dict[str, str], limits: SandboxLimits = QUICK, command: list[str] | None = None, own_children=()) -> SandboxResult:
        before = tree_digest(workspace)
        children_before = {p.pid for p in psutil.Process().children(recursive=True)}  # not the run's
        started = time.monotonic()
        result = run_tests(workspace, files, command or [PY, "check.py"], ["check.py"], limits, temp_root=sandbox_root)
        elapsed = time.monotonic() - started
        assert not result.passed and result.reason, result
        # Bounded by the limits, not left to run on: a margin no machine's load comes near.
        assert elapsed < limits.timeout_s + 60, f"took {elapsed:.1f}s"
        assert tree_digest(workspace) == before, "the original workspace changed"
        assert os.listdir(sandbox_root) == [], "the copy was left behind"
        assert sandbox_processes(sandbox_root) == [], "a process of the run is still there"
        assert [p for p in psutil.Process().children(recursive=True)
                if p.pid not in own_children and p.pid not in children_before] == []
        return result

    return run


# --- resources --------------------------------------------------------------------------------


def test_infinite_loop_is_killed_at_the_timeout(attack):
    result = attack({"solution.py": "while True:\n    pass\n"})
    assert result.reason == "timed out after 2.0s"


def test_fork_bomb_is_stopped_at_the_process_limit(attack):
    bomb = (
        "import os, time\n"
        "forked = 0\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60)\n"
        "            os._exit(0)\n"
        "        forked += 1\n"
        "except OSError as err:\n"
        "    print('forks refused after', forked, err)\n"
        "    raise SystemExit(1)\n"
    )
    result = attack({"solution.py": bomb}, SandboxLimits(timeout_s=5.0, max_processes=20))
    assert result.reason == "tests failed (exit 1; process limit?)"
    forked = int(result.output_tail.split("forks refused after ")[1].split()[0])
    assert forked < 20


def test_exponential_fork_bomb_is_killed_at_the_timeout(attack):
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = attack({"solution.py": bomb}, SandboxLimits(timeout_s=2.0, max_processes=32))
    assert result.reason == "timed out after 2.0s"


def test_memory_bomb_fails_at_the_address_space_limit(attack):
    bomb = "hoard = []\nwhile True:\n    hoard.append(bytearray(32 * 2**20))\n"
    result = attack({"solution.py": bomb}, SandboxLimits(timeout_s=5.0, address_space_bytes=256 * 2**20))
    assert result.reason == "tests failed (exit 1; address-space limit?)"
    assert "MemoryError" in result.output_tail


def test_huge_output_is_cut_off(attack):
    result = attack({"solution.py": "while True:\n    print('y' * 1000)\n"}, SandboxLimits(timeout_s=5.0, output_bytes=64 * 1024))
    assert result.reason == "output truncated: more than 65536 bytes, run stopped"
    assert len(result.output_tail) <= 4000


def test_huge_file_fails_at_the_file_size_limit(attack):
    writer = "with open('huge.bin', 'wb') as f:\n    f.write(b'0' * (8 * 2**20))\n"
    result = attack({"solution.py": writer}, SandboxLimits(timeout_s=5.0, file_size_bytes=2**20))
    assert result.reason == "tests failed (exit 1; file-size limit?)"


# --- leaving the copy -------------------------------------------------------------------------


def test_writing_outside_by_dotdot_is_refused(attack):
    assert attack({"../solution.py": "def answer():\n    return 42\n"}).reason == "refused: path leaves the workspace (..): ../solution.py"


def test_writing_an_absolute_path_is_refused(attack, workspace):
    assert attack({str(workspace / "solution.py"): "x"}).reason == f"refused: absolute path {workspace / 'solution.py'}"


def test_writing_through_a_symlink_of_the_workspace_is_refused(attack, workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "vendor").symlink_to(outside)
    assert attack({"vendor/solution.py": "x"}).reason == "refused: write through symlink vendor/solution.py"
    assert os.listdir(outside) == []


@needs_root
def test_writing_outside_at_run_time_is_denied(attack, workspace):
    # The code makes its own symlink to the original workspace and writes through it, then tries
    # the absolute path; as the sandbox user it may do neither, and it cannot pass.
    escape = (
        "import os\n"
        f"os.symlink({str(workspace / 'check.py')!r}, 'escape.py')\n"
        "for target in ['escape.py', " + repr(str(workspace / "solution.py")) + "]:\n"
        "    try:\n"
        "        open(target, 'w').write('def answer():\\n    return 42\\n')\n"
        "        print('WROTE', target)\n"
        "    except OSError as err:\n"
        "        print('denied', target, err.strerror)\n"
        "def answer():\n    return 41\n"
    )
    result = attack({"solution.py": escape})
    assert result.reason == "tests failed (exit 1)"
    lines = result.output_tail.splitlines()
    assert not any(line.startswith("WROTE") for line in lines)
    assert sum(line.startswith("denied ") for line in lines) == 2


def test_deleting_the_copy_fails(attack):
    vandal = "import os, shutil\nshutil.rmtree(os.getcwd(), ignore_errors=True)\ndef answer():\n    return 41\n"
    result = attack({"solution.py": vandal})
    if "sandbox user" in result.isolation:  # the copy's root is root's and sticky: check.py stays, runs and fails
        assert result.reason == "tests failed (exit 1)" and "AssertionError: 41" in result.output_tail
    else:  # the run's own files: it may delete them, and the fingerprint shows it
        assert result.reason == "protected path changed during the run: check.py"


# --- the tests themselves ---------------------------------------------------------------------


def test_overwriting_the_tests_is_refused(attack):
    forged = {"solution.py": "def answer():\n    return 42\n", "check.py": "print('check passed')\n"}
    assert attack(forged).reason == "refused: protected path check.py"
    assert attack({"./check.py": "pass\n"}).reason == "refused: protected path check.py"


def test_replacing_the_tests_at_run_time_fails(attack):
    swap = (
        "import os\n"
        "open('forged.py', 'w').write('print(\"check passed\")\\n')\n"
        "os.replace('forged.py', 'check.py')\n"
        "def answer():\n    return 42\n"
    )
    result = attack({"solution.py": swap})
    if "sandbox user" in result.isolation:  # the swap itself is refused (EPERM, EBUSY): the import fails
        assert result.reason == "tests failed (exit 1)" and ("PermissionError" in result.output_tail
                                                             or "Device or resource busy" in result.output_tail)
    else:
        assert result.reason == "protected path changed during the run: check.py"


FORGERIES = {
    # prints what a passing run prints, and leaves the bug
    "forged_report": "print('Ran 2 tests in 0.001s\\n\\nOK')\n",
    # answers from a table lifted out of the test file: the fixed cases pass, the random ones not
    "answers_from_the_test_file": (
        "import re\n"
        "_source = open('tests/test_text.py').read()\n"
        "_answers = dict(re.findall(r'\\(\"([^\"]*)\", \"([^\"]*)\"\\)', _source))\n"
        "print('Ran 2 tests\\n\\nOK')\n"
    ),
    # answers the harness's pending calls from that table itself, then exits 0 at once
    "early_exit": (
        "import json, os, re, sys\n"
        "_answers = dict(re.findall(r'\\(\"([^\"]*)\", \"([^\"]*)\"\\)', open('tests/test_text.py').read()))\n"
        "print('OK')\n"
        "print(json.dumps([_answers.get(a[0], a[0]) for a in sys.modules['__main__'].calls]), flush=True)\n"
        "os._exit(0)\n"
    ),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_reading_the_tests_to_forge_their_output_scores_zero(forgery, sandbox_root, tmp_path):
    task = CODING_TASKS["slugify"]
    workspace = materialize(task, tmp_path)
    before = tree_digest(workspace)
    lookup = "def slugify(title):\n    return _answers.get(title, title.lower())\n" if forgery != "forged_report" else ""
    bug = "def slugify(title):\n    return title.strip().lower().replace(' ', '-')\n" if forgery == "forged_report" else ""
    solution = FORGERIES[forgery] + bug + lookup
    result = run_tests(workspace, {"text.py": solution}, task.test_command, task.protected, QUICK, temp_root=sandbox_root)
    assert (result.passed, result.reason) == (False, "tests failed (exit 1)")
    assert "FAILED" in result.output_tail
    assert tree_digest(workspace) == before and os.listdir(sandbox_root) == []


def test_shadowing_a_module_the_tests_use_scores_zero(sandbox_root, tmp_path):
    task = CODING_TASKS["slugify"]
    workspace = materialize(task, tmp_path)
    exit_ok = "import os\nprint('OK')\nos._exit(0)\n"
    files = {name: exit_ok for name in ("unittest.py", "json.py", "subprocess.py", "importlib.py", "sitecustomize.py")}
    completion = "".join(f"```file:{name}\n{content}```\n" for name, content in files.items())
    row = {"workspace": str(workspace), "test_command": task.test_command, "protected": task.protected}
    assert tests_reward([completion], **{k: [v] for k, v in row.items()}) == [0.0]


# --- secrets and input ------------------------------------------------------------------------


@needs_root
def test_secrets_in_the_environment_are_not_visible(attack, monkeypatch):
    secret = f"hunter2-{os.getpid()}"
    monkeypatch.setenv("AGENTRL_FAKE_SECRET", secret)
    # A process started with the secret in its environment, as the trainer would have been.
    holder = subprocess.Popen(["sleep", "30"], env={**os.environ})
    try:
        snoop = (
            "import glob, os\n"
            f"needle = {secret.encode()!r}\n"
            "found = [k for k, v in os.environ.items() if needle.decode() in v]\n"
            "for path in glob.glob('/proc/[0-9]*/environ'):\n"
            "    try:\n"
            "        if needle in open(path, 'rb').read():\n"
            "            found.append(path)\n"
            "    except OSError:\n"
            "        pass\n"
            "print('found', len(found))\n"
            "def answer():\n    return 42 if found else 41\n"
        )
        result = attack({"solution.py": snoop}, own_children=[holder.pid])
    finally:
        holder.kill()
        holder.wait()
    assert result.reason == "tests failed (exit 1)"
    assert "found 0" in result.output_tail and secret not in result.output_tail


def test_a_command_waiting_on_stdin_does_not_hang(attack):
    result = attack({"solution.py": "line = input()\ndef answer():\n    return 42\n"})
    # EOFError at once, not "timed out": standard input is empty, whatever the machine's load.
    assert result.reason == "tests failed (exit 1)" and "EOFError" in result.output_tail
