"""The suite helper the sandbox gives every test run, importable there as `agentrl_suite`: how a
protected test suite keeps the code under test at arm's length and its answer key out of reach.

Sandbox runner -> stub -> harness -> the task's tests -> **agentrl_suite**. The harness copies this
file beside itself (outside the workspace) and puts that directory on the test process's path,
so a test file writes `from agentrl_suite import answer_key, call_in_child`. Standard library
only. Two tools:

- `call_in_child(module, function, calls)`: the code under test runs in a fresh interpreter and
  only plain JSON values come back. Nothing it does there (exit early, print a forged report,
  patch the standard library or `unittest`, walk the stack for expected values) reaches the
  process that asserts, and an object whose `__eq__` always says True cannot come back as
  itself: it is serialised, or the call fails.
- `answer_key(name)`: a reference implementation or table of expected values that the task
  declared as an answer key. The sandbox hands it to the harness through a descriptor that only
  the test process holds, never as a file in the workspace, so the code under test cannot import
  it (`from tests.test_x import reference` finds nothing to take).

    from agentrl_suite import answer_key, call_in_child

    def test_random_titles(self):
        titles = ["Hello, World", "a  b"]
        expected = [answer_key("reference").slugify(t) for t in titles]
        self.assertEqual(call_in_child("text", "slugify", [[t] for t in titles]), expected)
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import types

_KEYS: dict[str, str] = {}
_LOADED: dict[str, types.ModuleType] = {}


def _install_keys(keys: dict[str, str]) -> None:
    """Called by the harness with the answer keys of the run (name -> Python source)."""
    _KEYS.update(keys)


def answer_key(name: str) -> types.ModuleType:
    """The answer key `name` of this task, as a module (its source runs once, here only)."""
    if name not in _LOADED:
        if name not in _KEYS:
            raise AssertionError(f"no answer key {name!r} in this run: the task declares {sorted(_KEYS) or 'none'}")
        module = types.ModuleType(f"agentrl_answer_key_{name}")
        exec(compile(_KEYS[name], f"<answer key {name}>", "exec"), module.__dict__)  # noqa: S102 - the task's own key
        _LOADED[name] = module
    return _LOADED[name]


def call_in_child(module: str, function: str, calls: list[list], timeout: float = 20.0) -> list:
    """`module.function(*args)` for each `args` in `calls`, evaluated in a fresh interpreter whose
    import path is the workspace; returns the results as plain JSON values.

    Raises AssertionError when the code under test fails, returns something JSON cannot hold, or
    exits before it answered (`os._exit(0)` at import shows here as 'exited before answering').
    """
    if not (module.isidentifier() and function.isidentifier()):
        raise ValueError(f"module and function must be identifiers, got {module!r}, {function!r}")
    marker = "agentrl-answer-" + secrets.token_hex(8) + ":"
    program = (
        "import json, sys\n"
        "_calls = json.loads(sys.stdin.read())\n"
        "sys.path.insert(0, '.')\n"
        f"from {module} import {function} as _function\n"
        "_answers = json.dumps([_function(*args) for args in _calls])\n"
        f"sys.stdout.write('\\n{marker}' + _answers + '\\n')\n"
        "sys.stdout.flush()\n"
    )
    done = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", program], input=json.dumps(calls),
                          capture_output=True, text=True, timeout=timeout)
    answers = [line[len(marker):] for line in done.stdout.splitlines() if line.startswith(marker)]
    if done.returncode != 0:
        raise AssertionError(f"the code under test failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    if len(answers) != 1:
        raise AssertionError(f"the code under test exited before answering (exit {done.returncode}):\n{done.stdout[-500:]}")
    return json.loads(answers[0])
