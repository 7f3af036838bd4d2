"""The sandboxed test runner (agentrl/sandbox.py, SPEC section 10): what it runs, where, as whom,
with what environment, which writes it refuses, and what it leaves behind (nothing).

Hostile completions have their own file, tests/test_sandbox_adversarial.py.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import psutil
import pytest

from agentrl.sandbox import SandboxLimits, namespaces_available, refusal_reason, run_tests, sandbox_processes
from agentrl.sandbox.users import SANDBOX_SLOTS, SANDBOX_UID_BASE

PY = sys.executable
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to a sandbox user needs root")
SANDBOX_UIDS = range(SANDBOX_UID_BASE, SANDBOX_UID_BASE + SANDBOX_SLOTS)


@pytest.fixture
def sandbox_root():
    """A temp root for the copies; empty again, with no process of the runs left, after each test."""
    root = Path(tempfile.mkdtemp(prefix="agentrl-sandbox-test-"))
    root.chmod(0o711)
    # Children this test process had before (a multiprocessing resource tracker an earlier test
    # started lives as long as pytest) are not the run's.
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield root
    leftovers = sorted(os.listdir(root))
    processes = sandbox_processes(root)
    shutil.rmtree(root, ignore_errors=True)
    assert leftovers == [], "a run left its copy behind"
    assert processes == [], "a run left processes behind"
    assert [p for p in psutil.Process().children(recursive=True) if p.pid not in before] == []


@pytest.fixture
def workspace(tmp_path) -> Path:
    """A tiny repository: a module, its test, and a guard test that must stay untouched."""
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "tests" / "test_calc.py").write_text(
        "import sys\nsys.path.insert(0, '.')\nfrom calc import add\nassert add(2, 3) == 5, add(2, 3)\n"
    )
    return root


FIXED_CALC = {"calc.py": "def add(a, b):\n    return a + b\n"}
TEST_CALC = [PY, "tests/test_calc.py"]


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run(workspace, files, command, sandbox_root, protected=("tests",), writable=None, **limits):
    return run_tests(workspace, files, command, list(protected), SandboxLimits(**limits), temp_root=sandbox_root,
                     writable=writable)


# --- what it runs -----------------------------------------------------------------------------


def test_the_fix_passes_the_workspace_tests(workspace, sandbox_root):
    result = run(workspace, FIXED_CALC, TEST_CALC, sandbox_root)
    assert (result.passed, result.reason, result.returncode) == (True, "tests passed", 0)


def test_the_unfixed_code_fails_with_its_exit_code(workspace, sandbox_root):
    result = run(workspace, {}, TEST_CALC, sandbox_root)
    assert (result.passed, result.reason, result.returncode) == (False, "tests failed (exit 1)", 1)
    assert "AssertionError: -1" in result.output_tail


def test_files_go_into_the_copy_and_the_workspace_is_unchanged(workspace, sandbox_root):
    before = tree(workspace)
    result = run(workspace, {**FIXED_CALC, "new/dir/notes.txt": "hello\n"}, [PY, "-c", "print(open('new/dir/notes.txt').read())"], sandbox_root)
    assert result.passed and "hello" in result.output_tail
    assert tree(workspace) == before


def test_a_missing_command_fails_and_says_so(workspace, sandbox_root):
    result = run(workspace, {}, ["no-such-test-runner"], sandbox_root)
    assert result.reason == "tests failed (exit 127)" and "cannot run 'no-such-test-runner'" in result.output_tail


def test_output_tail_keeps_the_end_of_the_output(workspace, sandbox_root):
    result = run(workspace, {}, [PY, "-c", "for i in range(5000): print(i)"], sandbox_root)
    assert result.passed
    assert result.output_tail.endswith("4999\n") and len(result.output_tail) <= 4000


# --- which writes it refuses ------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, reason",
    [
        ("/etc/passwd", "refused: absolute path /etc/passwd"),
        ("../outside.py", "refused: path leaves the workspace (..): ../outside.py"),
        ("lib/../../outside.py", "refused: path leaves the workspace (..): lib/../../outside.py"),
        ("tests/test_calc.py", "refused: protected path tests/test_calc.py"),
        ("./tests//test_calc.py", "refused: protected path tests/test_calc.py"),
        ("tests/new_helper.py", "refused: protected path tests/new_helper.py"),
        ("tests", "refused: protected path tests"),
        ("", "refused: invalid path ''"),
    ],
)
def test_refused_paths(path, reason):
    assert refusal_reason(path, ["tests/"]) == reason


def test_paths_beside_the_protected_ones_are_allowed():
    assert refusal_reason("tests_extra/x.py", ["tests"]) is None
    assert refusal_reason("src/tests/x.py", ["tests"]) is None


def test_a_refused_write_runs_nothing(workspace, sandbox_root):
    result = run(workspace, {**FIXED_CALC, "tests/test_calc.py": "pass\n"}, TEST_CALC, sandbox_root)
    assert (result.passed, result.reason, result.returncode) == (False, "refused: protected path tests/test_calc.py", None)


def test_writes_through_a_symlink_in_the_workspace_are_refused(workspace, sandbox_root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target.py").write_text("original\n")
    (workspace / "linked_dir").symlink_to(outside)
    (workspace / "linked_file.py").symlink_to(outside / "target.py")
    (workspace / "tests_alias").symlink_to("tests")
    assert run(workspace, {"linked_dir/evil.py": "x"}, TEST_CALC, sandbox_root).reason == "refused: write through symlink linked_dir/evil.py"
    assert run(workspace, {"linked_file.py": "x"}, TEST_CALC, sandbox_root).reason == "refused: write through symlink linked_file.py"
    assert run(workspace, {"tests_alias/test_calc.py": "pass\n"}, TEST_CALC, sandbox_root).reason == (
        "refused: protected path tests/test_calc.py (through a symlink)"
    )
    assert sorted(os.listdir(outside)) == ["target.py"] and (outside / "target.py").read_text() == "original\n"


# --- how it runs ------------------------------------------------------------------------------


def test_environment_is_scrubbed(workspace, sandbox_root, monkeypatch):
    monkeypatch.setenv("AGENTRL_FAKE_TOKEN", "not-for-tests")
    result = run(workspace, {}, [PY, "-c", "import json, os; print(json.dumps(dict(os.environ)))"], sandbox_root)
    env = json.loads(result.output_tail.strip().splitlines()[-1])
    assert sorted(env) == ["HOME", "LANG", "PATH", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "TMPDIR"]
    assert env["PYTHONHASHSEED"] == "0" and env["HOME"].startswith(str(sandbox_root))


def test_stdin_is_empty(workspace, sandbox_root):
    result = run(workspace, {}, [PY, "-c", "import sys; print(repr(sys.stdin.read()))"], sandbox_root, timeout_s=5)
    assert result.passed and result.output_tail.strip() == "''"


def test_a_run_past_the_wall_clock_is_killed(workspace, sandbox_root):
    result = run(workspace, {}, [PY, "-c", "import time; time.sleep(60)"], sandbox_root, timeout_s=1.0)
    assert (result.passed, result.reason) == (False, "timed out after 1.0s")  # the wall clock, not the 60 s sleep, ended it


def test_a_run_past_its_cpu_seconds_gets_sigxcpu(workspace, sandbox_root):
    result = run(workspace, {}, [PY, "-c", "while True: pass"], sandbox_root, timeout_s=8, cpu_s=1)
    # The reason says the CPU limit ended it: the 8 s wall clock would read "timed out after 8.0s".
    assert (result.passed, result.reason) == (False, "killed by signal SIGXCPU (cpu limit)")


def test_a_daemon_left_behind_is_killed_when_the_run_ends(workspace, sandbox_root):
    daemon = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(60)\n"
        "    os._exit(0)\n"
        "print('main done')\n"
    )
    result = run(workspace, {"daemon.py": daemon}, [PY, "daemon.py"], sandbox_root, writable=["*.py"], timeout_s=10)
    assert result.passed and result.duration_s < 30  # not waiting on the daemon's 60 s sleep
    # the sandbox_root fixture then checks that no process of the run is left


@needs_root
def test_runs_as_a_sandbox_user_of_its_own_when_root(workspace, sandbox_root):
    probe = (
        "import os\n"
        "caps = dict(l.split(':\\t') for l in open('/proc/self/status').read().splitlines() if l.startswith('Cap'))\n"
        "print(os.getuid(), os.getgid(), os.getgroups(), int(caps['CapEff'], 16))\n"
    )
    result = run(workspace, {"probe.py": probe}, [PY, "probe.py"], sandbox_root, writable=["*.py"])
    uid, gid, groups, effective_caps = result.output_tail.split(" ", 3)
    assert int(uid) in SANDBOX_UIDS and gid == uid and groups == "[]"
    # at most CAP_DAC_READ_SEARCH (bit 2), to reach an interpreter behind a closed directory
    assert int(effective_caps) in (0, 1 << 2)


@needs_root
def test_concurrent_runs_get_distinct_users(workspace, sandbox_root):
    uids = []

    def one():
        result = run(workspace, {}, [PY, "-c", "import os, time; time.sleep(0.5); print(os.getuid())"], sandbox_root)
        uids.append(int(result.output_tail))

    threads = [threading.Thread(target=one) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(uids)) == 3 and set(uids) <= set(SANDBOX_UIDS)


@needs_root
def test_protected_paths_are_read_only_to_the_run(workspace, sandbox_root):
    result = run(workspace, FIXED_CALC, [PY, "-c", "open('tests/test_calc.py', 'w').write('pass')"], sandbox_root)
    assert result.reason == "tests failed (exit 1)"
    assert "PermissionError" in result.output_tail or "Read-only file system" in result.output_tail


MOVE_AND_REPLACE = (
    "import os, shutil\n"
    "os.rename('tests', 'moved')\n"
    "shutil.copytree('moved', 'tests')\n"
    "open('tests/test_calc.py', 'w').write('pass')\n"
)


@needs_root
@pytest.mark.parametrize("namespaces", [True, False])
def test_a_protected_directory_cannot_be_moved_and_replaced(workspace, sandbox_root, namespaces):
    # the copy's root is root's and sticky, and with namespaces each protected path is a read-only
    # mount point: renaming it fails (EPERM, EBUSY), so no copy of the run's own takes its place
    if namespaces and not namespaces_available().available:
        pytest.skip("the kernel refuses namespaces here")
    result = run_tests(workspace, FIXED_CALC, [PY, "-c", MOVE_AND_REPLACE], ["tests"], SandboxLimits(), temp_root=sandbox_root,
                       namespaces=namespaces)
    assert result.reason == "tests failed (exit 1)", result
    assert "PermissionError" in result.output_tail or "Device or resource busy" in result.output_tail, result.output_tail
    # the run may still add and remove files of its own beside the tests
    scratch = run_tests(workspace, FIXED_CALC, [PY, "-c", "import os\nopen('out.txt', 'w').write('x')\nos.remove('out.txt')\n"],
                        ["tests"], SandboxLimits(), temp_root=sandbox_root, namespaces=namespaces)
    assert scratch.passed, scratch.output_tail


def test_a_protected_directory_swapped_and_put_back_during_the_run_is_caught(workspace, sandbox_root):
    # without a user or namespaces of its own nothing stops the swap; the fingerprint (inode, owner,
    # mode, change time) catches it even when the original is renamed back before the end
    swap = MOVE_AND_REPLACE + "shutil.rmtree('tests')\nos.rename('moved', 'tests')\n"
    result = run_tests(workspace, FIXED_CALC, [PY, "-c", swap], ["tests"], SandboxLimits(), temp_root=sandbox_root,
                       isolate_user=False, namespaces=False)
    assert (result.passed, result.reason, result.detector) == (False, "protected path changed during the run: tests",
                                                              "runner integrity")


def test_the_run_writes_no_bytecode_beside_the_protected_tests(workspace, sandbox_root):
    # pytest rewrites a test module's assertions and caches the result as a .pyc beside it unless
    # told not to; -I ignores PYTHONDONTWRITEBYTECODE, so the harness says it itself. A new
    # __pycache__ in tests/ would change the protected directory and fail an honest run.
    (workspace / "tests" / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    result = run_tests(workspace, FIXED_CALC, [PY, "-m", "pytest", "-q", "tests"], ["tests"], SandboxLimits(timeout_s=30),
                       temp_root=sandbox_root, isolate_user=False, namespaces=False)
    assert (result.passed, result.reason) == (True, "tests passed"), result.output_tail


@needs_root
def test_files_the_run_leaves_in_tmp_are_removed(workspace, sandbox_root):
    stray = Path("/tmp") / f"agentrl-stray-{os.getpid()}"
    result = run(workspace, {}, [PY, "-c", f"open({str(stray)!r}, 'w').write('left behind')"], sandbox_root)
    assert result.passed and not stray.exists()


def test_without_a_user_of_its_own_the_limits_and_the_clean_up_still_hold(workspace, sandbox_root):
    def run_as_caller(files, command, **limits):
        return run_tests(workspace, files, command, ["tests"], SandboxLimits(**limits), temp_root=sandbox_root, isolate_user=False)

    assert run_as_caller(FIXED_CALC, TEST_CALC).reason == "tests passed"
    escaped = "import subprocess; subprocess.Popen(['sleep', '60'], start_new_session=True)"
    assert run_as_caller({}, [PY, "-c", escaped]).passed
    assert run_as_caller({}, [PY, "-c", "while True: pass"], timeout_s=1).reason == "timed out after 1.0s"


def test_limits_say_what_to_change():
    with pytest.raises(ValueError, match="SandboxLimits.timeout_s must be positive"):
        SandboxLimits(timeout_s=0)


def test_held_out_tests_join_the_copy_after_the_attempt_and_cannot_be_written(workspace, sandbox_root):
    held_out = {"extra_check.py": "import sys\nsys.path.insert(0, '.')\nfrom calc import add\nassert add(4, 4) == 8\n"}
    command = [PY, "extra_check.py"]
    assert run_tests(workspace, FIXED_CALC, command, ["tests"], temp_root=sandbox_root, held_out=held_out).passed
    special_case = {"calc.py": "def add(a, b):\n    return 5 if (a, b) == (2, 3) else a - b\n"}
    assert run_tests(workspace, special_case, TEST_CALC, ["tests"], temp_root=sandbox_root, held_out=held_out).passed
    assert not run_tests(workspace, special_case, command, ["tests"], temp_root=sandbox_root, held_out=held_out).passed
    forged = {**FIXED_CALC, "extra_check.py": "pass\n"}
    result = run_tests(workspace, forged, command, ["tests"], temp_root=sandbox_root, held_out=held_out)
    assert result.reason == "refused: protected path extra_check.py"
    assert not (workspace / "extra_check.py").exists()
    with pytest.raises(ValueError, match="held-out test path '../x.py'"):
        run_tests(workspace, {}, command, ["tests"], temp_root=sandbox_root, held_out={"../x.py": ""})
