"""The test harness: a second program the sandbox runs in place of a Python test command, so the
verdict comes from a result it writes after every test ran, never from the exit code alone.

Sandbox runner -> stub -> **harness** -> the task's tests. The runner starts it as
`python -I harness.py CONTROL_FD RESULT_FD` from a directory outside the workspace. CONTROL_FD
holds what to run (JSON: the per-run nonce, the runner, the parsed test command, the answer keys);
the harness reads it once and closes it. When the tests are done it writes one JSON line to
RESULT_FD: the nonce, the tests collected and executed, passed, failed and skipped, and exits 0
only when every collected test ran and passed. A process that ends before that (`os._exit(0)` in
the code under test) leaves no result, and the runner scores it 0 (`agentrl.sandbox.verdict`).

Three runners, chosen by the runner from the task's command (`python -m pytest ...`,
`python -m unittest ...`, `python [-m] script ...`):

- pytest: `pytest.main` in this process with the task's arguments plus a configuration file of
  ours (`-c`: the workspace's `pytest.ini`, `pyproject.toml`, `setup.cfg` or `tox.ini` are never
  read), no cache plugin, no plugins loaded from entry points, and a plugin counting every
  test's phases;
- unittest: `unittest.main` with the task's arguments and a result that counts;
- script: the script (or module) run here as `__main__`; it is one test, executed when it ends on
  its own: an exception or a non-zero exit fails it, and an exit 0 passes only when it is the
  protected script's own (the real `SystemExit`, raised from a frame of the script's file, with
  the real `sys.exit`); any other is an early exit.

Where `python` would put the working directory (or the script's) first on the import path, the
harness puts it last, so the workspace's modules still import by name but cannot shadow an
installed package the tests or the runner import later.

The harness marks itself non-dumpable, so a process the tests start (where the built-in suites
run the code under test) can read neither its memory nor its descriptors: not the nonce, not
the answer keys, not the result channel. The modules an attempt may write never run here: unless
the task says `boundary: "none"`, the harness installs `agentrl_boundary` first, and the tests
import them as proxies to a child that runs them (README, "Guarantees"). Standard library only,
apart from pytest for its runner.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

_PR_SET_DUMPABLE = 4


def _not_dumpable() -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _early_exit(tb, workspace: str, protected: list[str]) -> str | None:
    """`file:line` of the innermost frame of a writable workspace file in a traceback, if any:
    whoever runs there asked for the exit, not the protected tests."""
    guarded = [os.path.join(workspace, p) for p in protected]
    culprit = None
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        filename = os.path.abspath(name)
        if not name.startswith("<") and _inside(filename, workspace) and not any(_inside(filename, g) for g in guarded):
            culprit = f"{os.path.relpath(filename, workspace)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return culprit


def _importable(directory: str) -> None:
    """Put a workspace directory on the import path *after* the interpreter's own entries: its
    modules import by name, but no file there can stand in for the standard library or an installed
    package the tests or the runner import later (pytest and unittest put their own test directory
    first only when it is not on the path already)."""
    directory = os.path.abspath(directory)
    if directory not in sys.path:
        sys.path.append(directory)


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


_REAL_EXIT, _REAL_SYS, _REAL_SYSTEM_EXIT = sys.exit, sys, SystemExit  # as they were before any test code ran


def _trusted_exit_codes() -> set:
    """Code objects outside the script that may end it with an exit of their own: `unittest.main`
    (`TestProgram`) and the `exit()` builtin, captured before any test code ran (a function whose
    `__code__` is swapped later no longer matches)."""
    import builtins
    import unittest

    codes = {unittest.TestProgram.__init__.__code__, unittest.TestProgram.runTests.__code__}
    quitter = getattr(type(getattr(builtins, "exit", None)), "__call__", None)
    if hasattr(quitter, "__code__"):
        codes.add(quitter.__code__)
    return codes


def _all_codes(code) -> set:
    """`code` and every code object nested in it (its functions, classes, comprehensions)."""
    found, frontier = set(), [code]
    while frontier:
        current = frontier.pop()
        found.add(current)
        frontier.extend(c for c in current.co_consts if hasattr(c, "co_code"))
    return found


def _disguised_exit(exc: BaseException, script_codes: set, trusted: set, workspace: str,
                    protected: list[str]) -> str | None:
    """Why an exit 0 is not the protected script's own, or None when it is: a `SystemExit` of the
    real class, with `sys.exit` and `sys` as they were, raised from a frame of the script's own
    code (or of `unittest.main` that the script called), with nothing else on the way. A
    `SystemExit(0)` from code compiled as "<string>", from a writable file, or through a rewired
    `sys.exit` is the solution's exit, whatever frames it passed through."""
    culprit = _early_exit(exc.__traceback__, workspace, protected)
    if culprit:
        return culprit
    if type(exc) is not _REAL_SYSTEM_EXIT:
        return f"a {type(exc).__name__} (not SystemExit itself)"
    if sys.exit is not _REAL_EXIT or sys.modules.get("sys") is not _REAL_SYS:
        return "a rewired sys.exit"
    frames, tb = [], exc.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    first = next((i for i, (frame, _) in enumerate(frames) if frame.f_code in script_codes), None)
    if first is None:
        return "code that is not the protected script"
    for frame, line in frames[first:]:
        if frame.f_code not in script_codes and frame.f_code not in trusted:
            return f"{frame.f_code.co_filename}:{line} (not the protected script)"
        if frame.f_globals.get("sys", _REAL_SYS) is not _REAL_SYS:
            return "a sys module swapped in the script's globals"
    return None


def run_script(control: dict, mode: str) -> dict:
    """The script (or module) as `__main__`: one test, passed when it returns, or exits 0 from its
    own code with the real `sys.exit` (`_disguised_exit`)."""
    command = control["command"]
    if mode == "collect":
        return {"collected": 1}
    import runpy

    trusted = _trusted_exit_codes()
    workspace = os.getcwd()
    target, args = command["target"], command["args"]
    if not command["safe_path"]:  # as `python script.py` / `python -m module` would, but last (`_importable`)
        _importable(workspace if command["runner"] == "module" else os.path.dirname(os.path.abspath(target)))
    sys.argv = [target, *args]
    script_codes: set = set()
    try:
        # runpy's own steps, so that the code objects of the script are known (`_disguised_exit`)
        if command["runner"] == "module":
            _, spec, code = runpy._get_module_details(target)
            script_codes = _all_codes(code)
            runpy._run_module_code(code, None, "__main__", spec)
        else:
            code, _ = runpy._get_code_from_file("__main__", target)
            script_codes = _all_codes(code)
            runpy._run_module_code(code, None, "__main__", script_name=target)
    except SystemExit as exc:
        code = _exit_code(exc.code)
        culprit = _disguised_exit(exc, script_codes, trusted, workspace, control["protected"]) if code == 0 else None
        if culprit:
            print(f"agentrl-harness: exit {code} requested by {culprit} before the tests finished", file=sys.stderr)
            return {"collected": 1, "executed": 0, "passed": 0, "failed": 0, "early_exit": culprit}
        return {"collected": 1, "executed": 1, "passed": int(code == 0), "failed": int(code != 0)}
    except BaseException:  # noqa: BLE001 - any exception fails the one test, as python would show it
        traceback.print_exc()
        return {"collected": 1, "executed": 1, "passed": 0, "failed": 1}
    return {"collected": 1, "executed": 1, "passed": 1, "failed": 0}


def _guard(protected: list[str]):
    """Whether discovery may import a path: one under a protected path, or a directory on the way
    to one (None: the task protects nothing, so everything may be)."""
    workspace = os.getcwd()
    guarded = [os.path.normpath(os.path.join(workspace, p)) for p in protected]
    if not guarded:
        return None

    def may_import(path: str) -> bool:
        path = os.path.normpath(os.path.abspath(path))
        return any(_inside(path, g) or (os.path.isdir(path) and _inside(g, path)) for g in guarded)

    return may_import


def run_unittest(control: dict, mode: str) -> dict:
    import unittest

    command = control["command"]
    may_import = _guard(control["protected"])

    class Loader(unittest.TestLoader):
        """Discovery that imports the protected suite alone: no root `test*.py`, package
        `__init__` or `sitecustomize/` the attempt wrote or changed."""

        def _find_test_path(self, full_path, pattern):  # unittest's own hook for one discovered path
            if may_import is not None and not may_import(full_path):
                return None, False
            return super()._find_test_path(full_path, pattern)

    if not command["safe_path"]:
        _importable(os.getcwd())
    counts: dict = {}

    class Program(unittest.TestProgram):
        def runTests(self):  # noqa: N802 - unittest's name
            counts["collected"] = self.test.countTestCases()
            if mode == "collect":
                return
            self.result = unittest.TextTestRunner(verbosity=self.verbosity).run(self.test)

    program = Program(module=None, argv=["python -m unittest", *command["args"]], exit=False, testLoader=Loader())
    result = getattr(program, "result", None)
    if result is not None:
        failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
        skipped = len(result.skipped)
        counts.update(executed=result.testsRun, failed=failed, skipped=skipped,
                      passed=result.testsRun - failed - skipped)
    return counts


class _PytestCounter:
    """Counts what pytest collected and, per test, which phases ran and how they ended; collects
    nothing outside the protected suite (`may_import`)."""

    def __init__(self, may_import=None) -> None:
        self.may_import = may_import
        self.collected = 0
        self.collect_errors = 0
        self.phases: dict[str, dict[str, str]] = {}

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.collect_errors += 1

    def pytest_ignore_collect(self, collection_path, config):
        if self.may_import is not None and not self.may_import(str(collection_path)):
            return True
        return None

    def pytest_collection_finish(self, session) -> None:
        self.collected = len(session.items)

    def pytest_runtest_logreport(self, report) -> None:
        self.phases.setdefault(report.nodeid, {})[report.when] = report.outcome

    def counts(self) -> dict:
        done = [p for p in self.phases.values() if "teardown" in p]
        passed = sum(1 for p in done if p.get("call") == "passed" and set(p.values()) == {"passed"})
        skipped = sum(1 for p in done if "skipped" in p.values())
        return {"collected": self.collected, "collect_errors": self.collect_errors, "executed": len(done),
                "passed": passed, "skipped": skipped, "failed": len(done) - passed - skipped}


def run_pytest(control: dict, mode: str) -> dict:
    command = control["command"]
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # entry-point plugins: a task names its own with -p
    import importlib

    import pytest
    from _pytest.config import default_plugins

    for plugin in default_plugins:  # pytest and its own plugins, before the workspace is on the path
        try:
            importlib.import_module(f"_pytest.{plugin}")
        except ImportError:
            pass
    if not command["safe_path"]:
        _importable(os.getcwd())

    counter = _PytestCounter(_guard(control["protected"]))
    ours = ["-c", control["pytest_ini"], "--rootdir", os.getcwd(), "-p", "no:cacheprovider"]
    if control.get("no_conftest"):  # the task has none: one the code under test writes is not read either
        ours.append("--noconftest")
    if mode == "collect":
        ours.append("--collect-only")
    try:
        # --import-mode=append last, so it wins: a test's directory goes after the installed
        # packages on the path, never before them (a workspace yaml.py cannot stand in for yaml)
        pytest.main([*ours, *command["args"], "--import-mode=append"], plugins=[counter])
    except BaseException:  # noqa: BLE001 - the counts say what ran; the trace says why it stopped
        traceback.print_exc()
    counts = counter.counts()
    return {"collected": counts["collected"], "collect_errors": counts["collect_errors"]} if mode == "collect" else counts


RUNNERS = {"script": run_script, "module": run_script, "unittest": run_unittest, "pytest": run_pytest}


def main(argv: list[str]) -> None:
    sys.dont_write_bytecode = True  # the runner passes -B too: no .pyc beside a protected test
    control_fd, result_fd = int(argv[1]), int(argv[2])
    with os.fdopen(control_fd, "rb") as handle:
        control = json.loads(handle.read())
    os.set_inheritable(result_fd, False)
    _not_dumpable()
    harness_pid = os.getpid()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # agentrl_suite
    import agentrl_suite

    agentrl_suite._install_keys(control.get("keys") or {})
    if control.get("boundary") == "process":  # the solution's modules import as proxies to a child
        import agentrl_boundary

        agentrl_boundary.Boundary(os.getcwd(), control["protected"], control.get("writable")).install()
    mode = control["mode"]
    counts = RUNNERS[control["command"]["runner"]](control, mode)
    record = {"nonce": control["nonce"], "mode": mode, "runner": control["command"]["runner"], **counts}
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if os.getpid() != harness_pid:  # a fork of the tests came back here: only the harness answers
        os._exit(1)
    os.write(result_fd, (json.dumps(record) + "\n").encode())
    ok = mode == "collect" or (counts.get("collected", 0) > 0 and counts.get("executed") == counts["collected"]
                               == counts.get("passed"))
    # os._exit: what the tests left behind (threads, atexit hooks) cannot change the answer now
    os._exit(0 if ok else 1)


if __name__ == "__main__":
    main(sys.argv)
