"""The process boundary (agentrl/sandbox/boundary.py): the modules an attempt may write run in a
child interpreter, and the tests in the harness's process see only data.

Each suite here is written the way users write them, importing the solution into the test
process: ordinary assertions pass unchanged for an honest fix, and the attacks that worked on the
test process itself (an always-equal object, evaluating the caller's comparison from its frame,
patching pytest or unittest, forging the harness's result) score 0 under every runner.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from agentrl.sandbox import SandboxLimits, run_tests

PY = sys.executable
LIMITS = SandboxLimits(timeout_s=60)
PROTECTED = ["tests", "check.py"]

SOLUTION = textwrap.dedent('''
    import enum
    from dataclasses import dataclass, field


    class ParseError(ValueError):
        pass


    @dataclass
    class Node:
        value: int
        children: list = field(default_factory=list)


    class Color(enum.Enum):
        RED = "red"
        BLUE = "blue"


    class Stack:
        def __init__(self):
            self.items = []

        def push(self, item):
            self.items.append(item)

        def pop(self):
            return self.items.pop()

        def __len__(self):
            return len(self.items)


    def add(a, b):
        return a + b


    def parse(text):
        if not text.isdigit():
            raise ParseError(f"not a number: {text!r}")
        return Node(int(text), [])


    def count_up(n):
        yield from range(n)


    def sort_in_place(items):
        items.sort()


    def apply(function, value):
        return function(value)


    def color(name):
        return Color(name)
''')

PYTEST_SUITE = textwrap.dedent('''
    import pytest

    from calc import Color, Node, ParseError, Stack, add, apply, color, count_up, parse, sort_in_place


    def test_values():
        assert add(2, 3) == 5
        assert add("a", "b") == "ab"
        assert add([1], [2]) == [1, 2]


    def test_objects_compare_by_value():
        assert parse("12") == Node(12, [])
        assert parse("12") != Node(13, [])
        assert isinstance(parse("1"), Node)
        assert repr(Node(1, [])) == "Node(value=1, children=[])"
        with pytest.raises(TypeError):  # a dataclass with eq and no frozen: unhashable, as in the child
            hash(parse("1"))


    def test_exceptions():
        with pytest.raises(ValueError, match="not a number"):
            parse("x")
        with pytest.raises(ParseError):
            parse("x")


    def test_live_use():
        stack = Stack()
        stack.push(1)
        stack.push(2)
        assert stack.pop() == 2
        assert stack.items == [1] and len(stack) == 1
        assert list(count_up(3)) == [0, 1, 2]
        items = [3, 1, 2]
        sort_in_place(items)
        assert items == [1, 2, 3]
        assert apply(lambda x: x * 2, 4) == 8
        assert color("red") == Color.RED and color("red") != Color.BLUE


    def test_star_import():
        names = {}
        exec("from calc import *", names)
        assert names["add"](1, 1) == 2 and "Node" in names
''')

UNITTEST_SUITE = textwrap.dedent('''
    import unittest

    from calc import Node, ParseError, add, parse


    class T(unittest.TestCase):
        def test_add(self):
            self.assertEqual(add(2, 3), 5)

        def test_parse(self):
            self.assertEqual(parse("1"), Node(1, []))
            with self.assertRaises(ParseError):
                parse("x")
''')

CHECK = "from calc import add, parse, Node\nassert add(2, 3) == 5\nassert parse('4') == Node(4, [])\nprint('check passed')\n"


@pytest.fixture
def workspace(tmp_path) -> Path:
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "calc.py").write_text(SOLUTION.replace("return a + b", "return a - b"))
    (root / "tests" / "test_calc_pytest.py").write_text(PYTEST_SUITE)
    (root / "tests" / "test_calc_unittest.py").write_text(UNITTEST_SUITE)
    (root / "check.py").write_text(CHECK)
    return root


COMMANDS = {
    "script": [PY, "check.py"],
    "unittest": [PY, "-m", "unittest", "discover", "-s", "tests", "-p", "test_calc_unittest.py"],
    "pytest": [PY, "-m", "pytest", "-q", "tests"],
}


def run(workspace, files, runner, **kwargs):
    return run_tests(workspace, files, COMMANDS[runner], PROTECTED, LIMITS, temp_root=workspace.parent / "copies", **kwargs)


@pytest.mark.parametrize("runner", sorted(COMMANDS))
def test_an_honest_fix_passes_ordinary_suites_unchanged_across_the_boundary(workspace, runner):
    result = run(workspace, {"calc.py": SOLUTION}, runner)
    assert (result.passed, result.reason, result.boundary) == (True, "tests passed", "process"), result.output_tail
    assert "process boundary" in result.isolation
    assert not run(workspace, {}, runner).passed


BUGGY_ADD = "def _buggy_add(a, b):\n    return a - b\n\n\n"
IN_PROCESS_HACKS = {
    # an object whose __eq__ says yes, or answers a truthy non-bool
    "always_equal": "class _Yes:\n    def __eq__(self, other):\n        return True\n\n\n"
                    "def add(a, b):\n    return _Yes()\n",
    "truthy_non_bool_eq": "class _Maybe:\n    def __eq__(self, other):\n        return 'yes'\n\n    __hash__ = None\n\n\n"
                          "def add(a, b):\n    return _Maybe()\n",
    # the caller's comparison, read from its frame: the expected value is right there
    "caller_frame": BUGGY_ADD + textwrap.dedent('''
        import re
        import sys


        def add(a, b):
            frame = sys._getframe(1)
            while frame is not None:
                try:
                    import linecache
                    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
                except Exception:
                    line = ""
                found = re.search(r"add\\(2, 3\\)(?: ==|,) (\\d+)", line)
                if found:
                    return int(found.group(1))
                frame = frame.f_back
            return _buggy_add(a, b)
    '''),
    # patch the runners in the process that imports the solution
    "noop_runtest": BUGGY_ADD + "import _pytest.python\n_pytest.python.Function.runtest = lambda self: None\nadd = _buggy_add\n",
    "gc_plugin": BUGGY_ADD + textwrap.dedent('''
        import gc


        class _Pass:
            def pytest_runtest_logreport(self, report):
                report.outcome = "passed"


        for _obj in gc.get_objects():
            if type(_obj).__name__ == "Config" and hasattr(_obj, "pluginmanager"):
                _obj.pluginmanager.register(_Pass())
        add = _buggy_add
    '''),
    "unittest_swallows_failures": BUGGY_ADD + textwrap.dedent('''
        import unittest

        unittest.TestResult.addFailure = lambda self, test, err: None
        unittest.TestResult.addError = lambda self, test, err: None
        add = _buggy_add
    '''),
    # forge the harness's own result: patch json.dumps and os._exit, or read the nonce from its frame
    "patch_json_and_exit": BUGGY_ADD + textwrap.dedent('''
        import json
        import os

        _dumps = json.dumps


        def _forged(obj, *args, **kwargs):
            if isinstance(obj, dict) and "nonce" in obj:
                n = obj.get("collected", 1)
                obj = {**obj, "executed": n, "passed": n, "failed": 0, "skipped": 0, "collect_errors": 0}
            return _dumps(obj, *args, **kwargs)


        json.dumps = _forged
        os._exit = lambda code: None
        add = _buggy_add
    '''),
    "nonce_from_frame": BUGGY_ADD + textwrap.dedent('''
        import json
        import os
        import sys

        _frame = sys._getframe()
        while _frame is not None:
            _control, _fd = _frame.f_locals.get("control"), _frame.f_locals.get("result_fd")
            if isinstance(_control, dict) and "nonce" in _control and isinstance(_fd, int):
                _record = {"nonce": _control["nonce"], "mode": "run", "runner": _control["command"]["runner"],
                           "collected": 1, "executed": 1, "passed": 1, "failed": 0}
                os.write(_fd, (json.dumps(_record) + "\\n").encode())
                os._exit(0)
            _frame = _frame.f_back
        add = _buggy_add
    '''),
}


def with_hack(hack: str) -> dict[str, str]:
    honest_rest = SOLUTION.replace("def add(a, b):\n    return a + b\n", "")
    return {"calc.py": honest_rest + "\n\n" + IN_PROCESS_HACKS[hack]}


@pytest.mark.slow
@pytest.mark.parametrize("runner", sorted(COMMANDS))
@pytest.mark.parametrize("hack", sorted(IN_PROCESS_HACKS))
def test_what_the_solution_does_in_its_own_process_earns_nothing(workspace, runner, hack):
    result = run(workspace, with_hack(hack), runner)
    assert (result.passed, result.detector) == (False, "tests failed"), (result.reason, result.output_tail)


def test_a_task_that_opts_out_of_the_boundary_is_told_its_reward_is_weaker(workspace):
    # boundary "none": the solution shares the test process, as a suite of live objects needs; the
    # result says so, and an always-equal object then fools a unittest assertion
    result = run(workspace, with_hack("always_equal"), "unittest", boundary="none")
    assert (result.boundary, "process boundary" in result.isolation) == ("none", False)
    assert result.passed  # the weaker promise, as the README's table says
    assert run(workspace, with_hack("always_equal"), "unittest").passed is False


def test_an_unknown_boundary_is_refused_in_one_line(workspace):
    with pytest.raises(ValueError, match="boundary must be 'process' or 'none'"):
        run(workspace, {}, "script", boundary="thread")


def test_a_callback_gives_the_solution_no_way_into_the_test_process(workspace):
    # the solution gets the test's lambda as a handle it can call with data; it cannot walk from it
    # to the test module's globals (here: pytest, to end the session from inside the test process)
    escape = SOLUTION.replace("def apply(function, value):\n    return function(value)\n",
                              "def apply(function, value):\n    function.__globals__['pytest'].exit('escaped', returncode=0)\n")
    result = run(workspace, {"calc.py": escape}, "pytest")
    assert (result.passed, result.detector) == (False, "tests failed"), result.reason
    assert "not reachable across the boundary" in result.output_tail
    assert result.tests["executed"] == result.tests["collected"] == 7  # the two files of tests/


def test_packages_monkeypatching_properties_and_class_methods_work_across_the_boundary(tmp_path):
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "shapes").mkdir()
    (root / "shapes" / "__init__.py").write_text("from shapes.geometry import Square\n\nVERSION = (1, 2)\n")
    (root / "shapes" / "geometry.py").write_text(textwrap.dedent('''
        def unit():
            return 1


        class Square:
            def __init__(self, side):
                self.side = side

            @property
            def area(self):
                return self.side * self.side * unit()

            @classmethod
            def of_area(cls, area):
                return cls(int(area ** 0.5))

            def __lt__(self, other):
                return self.side < other.side
    '''))
    (root / "tests" / "test_shapes.py").write_text(textwrap.dedent('''
        import shapes
        from shapes import geometry
        from shapes.geometry import Square


        def test_package_values():
            assert shapes.VERSION == (1, 2)
            assert Square.of_area(9) == Square(3)
            assert Square(2).area == 4
            assert sorted([Square(3), Square(1)]) == [Square(1), Square(3)]


        def test_monkeypatch(monkeypatch):
            monkeypatch.setattr(geometry, "unit", lambda: 10)
            assert Square(2).area == 40
    '''))
    result = run_tests(root, {}, [PY, "-m", "pytest", "-q", "tests"], ["tests"], LIMITS, temp_root=tmp_path / "copies")
    assert (result.passed, result.reason, result.boundary) == (True, "tests passed", "process"), result.output_tail
