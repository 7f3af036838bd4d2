"""Which writes an attempt may make (agentrl/sandbox/paths.py): the task's allow-list, and the
files refused for every task because they change how the tests run rather than what they test.

Each test tries a write an attacker would make and checks it is refused with its reason, before
anything runs; beside it, the write an honest fix makes stays allowed.
"""

from __future__ import annotations

import sys

import pytest

from agentrl.sandbox import SandboxLimits, refusal_reason, run_tests

PROTECTED = ["tests", "run_tests.py"]


@pytest.mark.parametrize(
    "path, reason",
    [
        # test-runner configuration: a hook rewrites reports, addopts turns the run into collection only
        ("conftest.py", "refused: test-runner configuration conftest.py"),
        ("pkg/conftest.py", "refused: test-runner configuration pkg/conftest.py"),
        ("pytest.ini", "refused: test-runner configuration pytest.ini"),
        (".pytest.ini", "refused: test-runner configuration .pytest.ini"),
        ("pyproject.toml", "refused: test-runner configuration pyproject.toml"),
        ("setup.cfg", "refused: test-runner configuration setup.cfg"),
        ("sub/tox.ini", "refused: test-runner configuration sub/tox.ini"),
        # site hooks run at interpreter start-up
        ("sitecustomize.py", "refused: site hook sitecustomize.py"),
        ("lib/usercustomize.py", "refused: site hook lib/usercustomize.py"),
        ("zzz.pth", "refused: site hook zzz.pth"),
        ("sitecustomize/__init__.py", "refused: site hook sitecustomize/__init__.py"),
        # byte code is used instead of its source when the header matches
        ("__pycache__/text.cpython-311.pyc", "refused: byte code __pycache__/text.cpython-311.pyc"),
        ("text.pyc", "refused: byte code text.pyc"),
        # shadows of the test runners and of the suite helper the sandbox provides
        ("pytest.py", "refused: pytest.py shadows the test runner's module pytest"),
        ("_pytest/__init__.py", "refused: _pytest/__init__.py shadows the test runner's module _pytest"),
        ("pluggy.py", "refused: pluggy.py shadows the test runner's module pluggy"),
        ("unittest.py", "refused: unittest.py shadows the test runner's module unittest"),
        ("unittest/__init__.py", "refused: unittest/__init__.py shadows the test runner's module unittest"),
        ("agentrl_suite.py", "refused: agentrl_suite.py shadows the test runner's module agentrl_suite"),
        # shadows of the standard library
        ("json.py", "refused: json.py shadows the standard-library module json"),
        ("subprocess/__init__.py", "refused: subprocess/__init__.py shadows the standard-library module subprocess"),
        ("time.cpython-311-x86_64-linux-gnu.so", "refused: time.cpython-311-x86_64-linux-gnu.so shadows the standard-library module time"),
    ],
)
def test_files_that_change_how_the_tests_run_are_refused_for_every_task(path, reason):
    assert refusal_reason(path, PROTECTED) == reason
    assert refusal_reason(path, PROTECTED, writable=["**"]) == reason


def test_modules_that_do_not_shadow_are_allowed():
    # a namespace directory, a module inside a package, and names beside the standard library's
    for path in ("json/data.txt", "mypkg/json.py", "code/solution.py", "text.py", "statsmodels.py", "README.md"):
        assert refusal_reason(path, PROTECTED) is None, path


def test_a_task_may_name_its_own_module_even_when_it_shares_a_standard_library_name():
    assert refusal_reason("calendar.py", PROTECTED, writable=["calendar.py"]) is None
    assert refusal_reason("calendar.py", PROTECTED, writable=["*.py"]).startswith("refused: calendar.py shadows")
    # but never a runner's module or configuration
    assert refusal_reason("pytest.py", PROTECTED, writable=["pytest.py"]).startswith("refused: pytest.py shadows")
    assert refusal_reason("conftest.py", PROTECTED, writable=["conftest.py"]) == "refused: test-runner configuration conftest.py"


@pytest.mark.parametrize(
    "path, writable, allowed",
    [
        ("text.py", ["text.py"], True),
        ("./text.py", ["text.py"], True),
        ("helpers.py", ["text.py"], False),
        ("src/pkg/mod.py", ["src/**"], True),
        ("src/pkg/mod.py", ["src"], True),
        ("srcx/mod.py", ["src/**"], False),
        ("docs/notes.md", ["*.py"], False),
        ("a.py", ["*.py"], True),
        ("text.py", [], False),
    ],
)
def test_the_allow_list_says_what_an_attempt_may_create_or_change(path, writable, allowed):
    reason = refusal_reason(path, PROTECTED, writable=writable)
    if allowed:
        assert reason is None
    else:
        assert reason == f"refused: not writable: {path.lstrip('./')} (this task allows {', '.join(writable) or 'nothing'})"


def test_protected_comes_before_the_allow_list():
    assert refusal_reason("tests/test_text.py", PROTECTED, writable=["text.py"]) == "refused: protected path tests/test_text.py"


def test_a_refused_write_runs_nothing_and_leaves_no_copy(tmp_path):
    workspace = tmp_path / "repo"
    workspace.mkdir()
    (workspace / "text.py").write_text("x = 1\n")
    root = tmp_path / "copies"
    result = run_tests(workspace, {"text.py": "x = 2\n", "conftest.py": "import os\nos._exit(0)\n"},
                       [sys.executable, "-c", "raise SystemExit(1)"], PROTECTED, SandboxLimits(timeout_s=5), temp_root=root,
                       writable=["text.py"])
    assert (result.passed, result.reason, result.returncode) == (False, "refused: test-runner configuration conftest.py", None)
    assert not root.exists() or list(root.iterdir()) == []


def test_a_symlink_in_the_workspace_cannot_launder_a_refused_name(tmp_path):
    workspace = tmp_path / "repo"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("")
    (workspace / "harmless.txt").symlink_to("conftest.py")
    result = run_tests(workspace, {"harmless.txt": "import pytest\n"}, [sys.executable, "-c", "pass"], PROTECTED,
                       SandboxLimits(timeout_s=5), temp_root=tmp_path / "copies")
    assert result.reason == "refused: write through symlink harmless.txt"


@pytest.mark.parametrize("path", ["test_side_door.py", "org/__init__.py", "org/python/core.py", "yaml.py", "pkg/__init__.py",
                                  "native.cpython-311-x86_64-linux-gnu.so"])
def test_without_an_allow_list_an_attempt_changes_existing_modules_and_adds_none(tmp_path, path):
    # a new module is a new door into the test process: unittest discovery imports a root test*.py
    # or a package __init__, and an optional import of the runners (copy's org.python.core) finds it
    workspace = tmp_path / "repo"
    (workspace / "tests").mkdir(parents=True)
    (workspace / "calc.py").write_text("x = 1\n")
    (workspace / "notes").mkdir()
    command = [sys.executable, "-c", "pass"]
    result = run_tests(workspace, {path: "import os\nos._exit(0)\n"}, command, ["tests"], SandboxLimits(timeout_s=5),
                       temp_root=tmp_path / "copies")
    assert result.reason.startswith(f"refused: new module {path}: a task without a `writable` list"), result.reason
    changed = run_tests(workspace, {"calc.py": "x = 2\n", "notes/todo.txt": "new data is not a module\n"}, command, ["tests"],
                        SandboxLimits(timeout_s=5), temp_root=tmp_path / "copies")
    assert changed.passed, changed.reason
