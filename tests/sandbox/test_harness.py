"""A runner that cannot be talked into success (agentrl/sandbox/harness.py, verdict.py, suite.py):
the verdict comes from a result the harness writes after every test ran, with this run's nonce and
the count of tests executed against the count the protected suite holds.

Each test is an attack on that verdict under the runner it targets (a plain script, unittest,
pytest), with a suite that imports the code under test into its own process: the weakest shape a
task author can write, where the published hacks work against a runner that trusts exit codes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from agentrl.sandbox import SandboxLimits, run_tests
from agentrl.sandbox.verdict import judge, parse_command

PY = sys.executable
LIMITS = SandboxLimits(timeout_s=30)
COMMANDS = {
    "script": [PY, "check.py"],
    "unittest": [PY, "-m", "unittest", "discover", "-s", "tests"],
    "pytest": [PY, "-m", "pytest", "-q", "tests"],
}
PROTECTED = ["tests", "check.py"]
FIX = {"calc.py": "def add(a, b):\n    return a + b\n"}
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a sandbox user of its own needs root")


@pytest.fixture
def workspace(tmp_path) -> Path:
    """calc.add with a bug; two test modules and a check script, all importing it in-process."""
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    for name, (a, b) in {"test_small": (2, 3), "test_zero": (0, 5)}.items():
        (root / "tests" / f"{name}.py").write_text(
            "import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
            f"    def test_add(self):\n        self.assertEqual(add({a}, {b}), {a + b})\n")
    (root / "check.py").write_text("from calc import add\nassert add(2, 3) == 5, add(2, 3)\nprint('check passed')\n")
    return root


def run(workspace, files, runner, **kwargs):
    return run_tests(workspace, files, COMMANDS[runner], PROTECTED, LIMITS, temp_root=workspace.parent / "copies", **kwargs)


@pytest.mark.parametrize("runner", sorted(COMMANDS))
def test_the_honest_fix_passes_and_the_bug_fails_under_every_runner(workspace, runner):
    fixed = run(workspace, FIX, runner)
    assert (fixed.passed, fixed.reason, fixed.detector) == (True, "tests passed", None)
    expected = {"script": None, "unittest": 2, "pytest": 2}[runner]
    assert fixed.tests["expected"] == expected and fixed.tests["executed"] == fixed.tests["collected"] == (expected or 1)
    buggy = run(workspace, {}, runner)
    assert (buggy.passed, buggy.detector) == (False, "tests failed")


@pytest.mark.parametrize("runner", sorted(COMMANDS))
@pytest.mark.parametrize("exit_call", ["import os\nos._exit(0)\n", "import sys\nsys.exit(0)\n", "raise SystemExit\n"])
def test_an_exit_0_from_the_code_under_test_scores_zero_under_every_runner(workspace, runner, exit_call):
    # across the process boundary the exit ends the child alone: the import fails in the tests
    result = run(workspace, {"calc.py": exit_call + "def add(a, b):\n    return a - b\n"}, runner)
    assert (result.passed, result.detector, result.boundary) == (False, "tests failed", "process"), result
    # a task that opted out of the boundary: the harness's verdict still catches it
    result = run(workspace, {"calc.py": exit_call + "def add(a, b):\n    return a - b\n"}, runner, boundary="none")
    assert not result.passed and result.detector in ("runner integrity", "tests failed"), result
    if runner == "script" or "_exit" in exit_call:
        assert result.detector == "runner integrity"
    if "_exit" in exit_call:  # the process ended before the harness could answer
        assert result.reason.startswith("runner integrity: no test result") and result.returncode == 0
    elif runner == "script":
        assert result.reason == "runner integrity: 0 of 1 tests ran; exit 0 requested by calc.py:2" or \
            result.reason == "runner integrity: 0 of 1 tests ran; exit 0 requested by calc.py:1"


DISGUISED_EXITS = {
    # SystemExit(0) raised by code compiled as "<string>": no frame of a writable file on the way
    "string_compiled": 'add = eval(compile("lambda a, b: (_ for _ in ()).throw(SystemExit(0))", "<string>", "eval"))\n',
    # the script's own sys.exit(1) now exits 0 through the real one, from a "<string>" frame
    "rewired_sys_exit": 'import sys\nsys.exit = eval(compile("lambda *a: _exit(0)", "<string>", "eval"), {"_exit": sys.exit})\n',
    # the script's own `raise SystemExit(1)` builds a subclass that always means 0
    "system_exit_subclass": ("import builtins\n\n\nclass Exit(SystemExit):\n    def __init__(self, *args):\n"
                             "        super().__init__(0)\n\n\nbuiltins.SystemExit = Exit\n"),
}


@pytest.mark.parametrize("hack", sorted(DISGUISED_EXITS))
def test_an_exit_0_is_a_pass_only_when_it_is_the_protected_scripts_own(workspace, hack):
    ending = "raise SystemExit(0 if add(2, 3) == 5 else 1)\n" if hack == "system_exit_subclass" else \
        "sys.exit(0 if add(2, 3) == 5 else 1)\n"
    (workspace / "check.py").write_text("import sys\nfrom calc import add\n" + ending)
    buggy = "def add(a, b):\n    return a - b\n"
    # with the solution in the test process (boundary "none"), where the disguise would work
    result = run(workspace, {"calc.py": buggy + DISGUISED_EXITS[hack]}, "script", boundary="none")
    assert (result.passed, result.detector) == (False, "runner integrity"), result
    assert result.reason.startswith("runner integrity: 0 of 1 tests ran; exit 0 requested by ")
    assert run(workspace, FIX, "script").passed


@pytest.mark.parametrize("ending", ["sys.exit(0)\n", "raise SystemExit\n", "exit(0)\n", "",
                                    "import unittest\n\n\nclass T(unittest.TestCase):\n    def test_add(self):\n"
                                    "        self.assertEqual(add(2, 3), 5)\n\n\nunittest.main()\n",
                                    "def main():\n    sys.exit(0)\n\n\nmain()\n"])
def test_a_script_that_exits_0_its_own_way_passes(workspace, ending):
    (workspace / "check.py").write_text("import sys\nfrom calc import add\nassert add(2, 3) == 5\n" + ending)
    result = run(workspace, FIX, "script")
    assert (result.passed, result.reason) == (True, "tests passed"), result.output_tail
    assert not run(workspace, {}, "script").passed


def test_a_module_level_skip_is_fewer_tests_than_the_protected_suite_holds(workspace):
    skip = "import pytest\npytest.skip('not today', allow_module_level=True)\n"
    # across the boundary the skip is an exception of the child's: the import fails
    assert run(workspace, {"calc.py": skip + FIX["calc.py"]}, "pytest").detector == "tests failed"
    # the skip fires in whichever test module imports calc first; the other one then passes
    result = run(workspace, {"calc.py": skip + FIX["calc.py"]}, "pytest", boundary="none")
    assert (result.passed, result.detector) == (False, "runner integrity")
    assert result.reason.startswith("runner integrity: ") and "the protected suite holds 2" in result.reason


def test_the_workspaces_own_runner_configuration_is_not_read(workspace):
    # A pytest.ini (or conftest hook) cannot be written by an attempt; one already in the workspace
    # that turns the run into collection only is not read either: the harness passes its own -c.
    (workspace / "pytest.ini").write_text("[pytest]\naddopts = --collect-only -p no:python\n")
    (workspace / "setup.cfg").write_text("[tool:pytest]\naddopts = --collect-only\n")
    result = run(workspace, {}, "pytest")
    assert (result.passed, result.detector, result.tests["executed"]) == (False, "tests failed", 2)
    assert run(workspace, FIX, "pytest").passed


@pytest.mark.parametrize("runner", sorted(COMMANDS))
def test_a_forged_result_is_not_this_runs(workspace, runner):
    # The code under test, in the test process itself, writes a passing result on every
    # descriptor it has open (whatever their numbers: a busy parent hands out high ones) and
    # leaves at once: it does not know the nonce.
    forge = (
        "import json, os\n"
        "record = json.dumps({'nonce': '0' * 32, 'runner': 'pytest', 'collected': 2, 'executed': 2, 'passed': 2,"
        " 'failed': 0}) + '\\n'\n"
        "for fd in sorted(int(name) for name in os.listdir('/proc/self/fd')):\n"
        "    try:\n"
        "        os.write(fd, record.encode())\n"
        "    except OSError:\n"
        "        pass\n"
        "os._exit(0)\n"
    )
    assert run(workspace, {"calc.py": forge}, runner).detector == "tests failed"  # in the child: no result channel there
    result = run(workspace, {"calc.py": forge}, runner, boundary="none")
    assert (result.passed, result.detector) == (False, "runner integrity")
    assert result.reason == "runner integrity: the test result is not this run's (exit 0)"


def test_a_fork_of_the_test_process_does_not_answer_for_the_harness(workspace):
    # Both processes run the rest of the script and come back to the harness; only the harness's
    # own process writes the result, so there is one, and the fork's exit does not count.
    fork = "import os\nos.fork()\n" + FIX["calc.py"]
    result = run(workspace, {"calc.py": fork}, "script", boundary="none")
    # (the fork prints too, unless the run's PID namespace ended it with the harness)
    assert result.passed and result.output_tail.count("check passed") in (1, 2)
    assert (result.tests["collected"], result.tests["executed"]) == (1, 1)


@needs_root
def test_the_answer_keys_and_the_nonce_are_out_of_reach_of_the_code_under_test(tmp_path):
    # The suite hands the code under test nothing; the code looks everywhere it could: its own
    # descriptors, the test process's descriptors, memory, environment and command line, and the
    # files of the run. It finds neither the answer key nor the result channel, so it answers []
    # and the suite (which expects exactly that) passes.
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_probe.py").write_text(
        "import unittest\nfrom agentrl_suite import answer_key, call_in_child\n\n\n"
        "class T(unittest.TestCase):\n"
        "    def test_probe(self):\n"
        "        self.assertEqual(len(answer_key('secret').VALUE), 9)\n"
        "        self.assertEqual(call_in_child('probe', 'probe', [[]]), [[]])\n")
    (root / "probe.py").write_text("def probe():\n    return []\n")
    snoop = (
        "import glob, os\n"
        "NEEDLE = b'KEY-' + b'7f3a9'\n"
        "def probe():\n"
        "    found = []\n"
        "    parent = os.getppid()\n"
        "    for fd in range(3, 256):\n"
        "        try:\n"
        "            os.fstat(fd)\n"
        "            found.append(f'own fd {fd}')\n"
        "        except OSError:\n"
        "            pass\n"
        "    for path in glob.glob(f'/proc/{parent}/fd/*') + [f'/proc/{parent}/environ', f'/proc/{parent}/cmdline']:\n"
        "        try:\n"
        "            if NEEDLE in open(path, 'rb').read(1 << 20):\n"
        "                found.append(path)\n"
        "        except OSError:\n"
        "            pass\n"
        "    try:\n"
        "        with open(f'/proc/{parent}/maps') as maps, open(f'/proc/{parent}/mem', 'rb') as mem:\n"
        "            for line in maps:\n"
        "                start, end = (int(x, 16) for x in line.split()[0].split('-'))\n"
        "                try:\n"
        "                    mem.seek(start)\n"
        "                    if NEEDLE in mem.read(min(end - start, 1 << 24)):\n"
        "                        found.append('parent memory')\n"
        "                except (OSError, ValueError, OverflowError):\n"
        "                    pass\n"
        "    except OSError:\n"
        "        pass\n"
        "    for path in glob.glob(os.path.join(os.getcwd(), '..', '**'), recursive=True):\n"
        "        try:\n"
        "            if os.path.isfile(path) and NEEDLE in open(path, 'rb').read(1 << 20):\n"
        "                found.append(path)\n"
        "        except OSError:\n"
        "            pass\n"
        "    return found\n"
    )
    command = [PY, "-m", "pytest", "-q", "tests"]
    keys = {"secret": "VALUE = 'KEY-7f3a9'\n"}
    honest = run_tests(root, {}, command, ["tests"], LIMITS, temp_root=tmp_path / "copies", answer_keys=keys)
    assert honest.passed, honest.output_tail
    result = run_tests(root, {"probe.py": snoop}, command, ["tests"], LIMITS, temp_root=tmp_path / "copies", answer_keys=keys)
    assert (result.passed, result.detector) == (True, None), result.output_tail  # found nothing


# --- the verdict, from its parts --------------------------------------------------------------


@pytest.mark.parametrize(
    "command, runner, safe",
    [
        ([PY, "-m", "pytest", "-q", "tests"], "pytest", False),
        ([PY, "-I", "-m", "unittest"], "unittest", True),
        ([PY, "-IS", "run_tests.py"], "script", True),
        ([PY, "-P", "-m", "mypkg.tests"], "module", True),
        ([PY, "-W", "ignore", "check.py", "--fast"], "script", False),
        ([PY, "-c", "import sys"], "exit-code", False),
        (["bash", "run.sh"], "exit-code", False),
        (["/usr/bin/python3.11", "check.py"], "script", False),
    ],
)
def test_which_runner_a_command_gets(command, runner, safe):
    parsed = parse_command(command)
    assert parsed.runner == runner
    if runner != "exit-code":
        assert parsed.safe_path == safe and parsed.interpreter == command[0]


def test_the_exit_code_alone_never_passes_a_harnessed_run():
    common = dict(stopped=None, tail="", timeout_s=10, output_bytes=1 << 20, harnessed=True, nonce="n" * 32)
    assert judge(0, **common)[1] == "runner integrity"
    good = {"nonce": "n" * 32, "runner": "pytest", "collected": 3, "executed": 3, "passed": 3, "failed": 0}
    assert judge(0, record=good, **common) is None
    assert judge(0, record={**good, "nonce": "x"}, **common)[1] == "runner integrity"
    assert judge(0, record={**good, "executed": 2, "passed": 2}, **common) == ("runner integrity: 2 of 3 tests ran", "runner integrity")
    assert judge(0, record=good, expected=4, **common) == (
        "runner integrity: 3 tests collected, the protected suite holds 4", "runner integrity")
    assert judge(0, record={**good, "passed": 2, "failed": 1}, **common) == (
        "runner integrity: exit 0 although 1 of 3 failed", "runner integrity")
    assert judge(1, record={**good, "passed": 2, "failed": 1}, **common) == ("tests failed (exit 1; 1 of 3 failed)", "tests failed")
    assert judge(0, record={**good, "collected": 0, "executed": 0, "passed": 0}, **common)[0] == "runner integrity: no tests collected"


def test_a_workspace_module_cannot_stand_in_for_an_installed_package(workspace):
    # `python -m pytest` puts the working directory first on the import path, so a yaml.py there
    # would run inside the test process when a test (or pytest) imports yaml. The harness puts the
    # workspace last: the installed package wins, and the file's code never runs.
    (workspace / "tests" / "test_yaml.py").write_text(
        "import unittest\n\n\nclass T(unittest.TestCase):\n"
        "    def test_yaml(self):\n        import yaml\n        self.assertTrue(hasattr(yaml, 'safe_load'))\n")
    shadow = {"yaml.py": "print('SHADOW RAN')\nimport os\nos._exit(0)\n", **FIX}
    for runner in ("pytest", "unittest"):
        result = run(workspace, shadow, runner, writable=["*.py"])  # a task that allows new modules
        assert result.passed and "SHADOW RAN" not in result.output_tail, (runner, result.reason, result.output_tail)


SIDE_DOOR = "print('SIDE DOOR RAN')\nimport os\nos._exit(0)\n"


@pytest.mark.parametrize("runner", ["unittest", "pytest"])
def test_discovery_imports_the_protected_suite_alone(workspace, runner):
    # A task that allows any file (writable=["**"]) and a command that discovers from the root: a
    # root test*.py, a package __init__ and a package named like an optional import of the runners
    # (copy's `org.python.core`) would each run in the test process; none of them is imported.
    (workspace / "tests" / "__init__.py").write_text("")  # so that `python -m unittest` finds tests/
    command = {"unittest": [PY, "-m", "unittest"], "pytest": [PY, "-m", "pytest", "-q"]}[runner]
    doors = {"test_side_door.py": SIDE_DOOR, "pkg/__init__.py": SIDE_DOOR, "pkg/test_more.py": SIDE_DOOR,
             "org/__init__.py": SIDE_DOOR, "org/python/__init__.py": SIDE_DOOR, "org/python/core.py": SIDE_DOOR}
    result = run_tests(workspace, {**doors, **FIX}, command, PROTECTED, LIMITS, temp_root=workspace.parent / "copies",
                       writable=["**"])
    assert "SIDE DOOR RAN" not in result.output_tail, result.output_tail
    assert (result.passed, result.tests["executed"], result.tests["expected"]) == (True, 2, 2), result


def test_a_conftest_written_at_run_time_is_not_read(workspace):
    # The attempt cannot write a conftest.py; neither can the code under test while the tests run.
    (workspace / "tests" / "zz").mkdir()
    (workspace / "tests" / "zz" / "test_later.py").write_text("def test_fails():\n    assert False\n")
    for directory in (workspace / "tests", workspace / "tests" / "zz"):  # a task that left them open to writes
        directory.chmod(0o777)
    patcher = (
        "import os\n"
        "os.makedirs('tests/zz', exist_ok=True)\n"
        "open('tests/zz/conftest.py', 'w').write("
        "'import pytest\\n@pytest.hookimpl(hookwrapper=True)\\ndef pytest_runtest_makereport(item, call):\\n"
        "    outcome = yield\\n    outcome.get_result().outcome = \"passed\"\\n')\n"
    ) + FIX["calc.py"]
    result = run(workspace, {"calc.py": patcher}, "pytest")
    assert not result.passed and result.detector == "tests failed", result.output_tail
