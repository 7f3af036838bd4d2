"""agentrl/tasks/loader.py: every way a task can be wrong is one clear line, before anything is written.

Each case writes a small task file that differs from a good one in one place, then asks the real
CLI to train it: the answer must be exit status 2, one `error:` line naming the problem, and no
runs directory. The same cases through `load_task` directly check the message without a process.
"""

from __future__ import annotations

import textwrap

import pytest

from agentrl.config import ConfigError, make_config
from agentrl.tasks import Task, TaskError, load_task
from helpers import REPO_ROOT, agentrl

GOOD = textwrap.dedent('''
    from agentrl.tasks import Task


    class Shelf:
        """A shelf of items; the agent takes what the row asks for."""

        def reset(self, item: str, **row) -> str:
            self.item, self.taken = item, []
            return f"Take the {item}."

        def take(self, name: str) -> str:
            """Take an item off the shelf.

            Args:
                name: The item to take.
            """
            self.taken.append(name)
            return "taken"


    def got_it(completions, environments=None, **kwargs):
        return [1.0 if e.item in e.taken else 0.0 for e in environments]


    def guard(completions, **kwargs):
        return [0.0] * len(completions)


    def verify(environment, completion):
        extra = [t for t in environment.taken if t != environment.item]
        return {"violation": bool(extra), "eligible": not extra, "reason": "took more" if extra else ""}


    ROWS = [{"prompt": [{"role": "user", "content": "Shop. "}], "item": "tea", "task_id": "tea"}]

    TASK = Task(name="shelf", environment_factory=Shelf, reward_funcs=[got_it], train_dataset=lambda: ROWS, verify=verify,
                decision_points={"start": [{"role": "user", "content": "Shop. Take the tea."}]})
''')

# (case, text replaced in GOOD, its replacement, what the one line must say)
CASES = [
    ("missing attribute", "TASK = Task(", "OTHER = Task(", "has no attribute 'TASK'; it defines OTHER"),
    ("syntax error", "class Shelf:", "class Shelf", "SyntaxError"),
    ("import raises", "from agentrl.tasks import Task", "from agentrl.tasks import Task\nraise RuntimeError('no database')",
     "importing task.py raised RuntimeError: no database"),
    ("not a task", "TASK = Task(", "TASK = dict(", "the object is a dict, not a Task"),
    ("factory takes arguments", '    """A shelf of items; the agent takes what the row asks for."""\n',
     '    """A shelf of items; the agent takes what the row asks for."""\n\n    def __init__(self, size):\n        self.size = size\n',
     "environment_factory 'Shelf' must take no arguments"),
    ("no reset", "def reset(self, item: str, **row) -> str:", "def start(self, item: str, **row) -> str:", "has no reset(**row) method"),
    ("tool without docstring", '''        """Take an item off the shelf.

        Args:
            name: The item to take.
        """
''', "", "tool 'take' of Shelf has no docstring"),
    ("tool without type hints", "def take(self, name: str) -> str:", "def take(self, name) -> str:",
     "parameter 'name' of tool 'take' of Shelf has no type hint"),
    ("tool parameter not described", "            name: The item to take.\n", "            count: How many.\n",
     "does not describe parameter 'name'"),
    ("reward function without **kwargs", "def got_it(completions, environments=None, **kwargs):",
     "def got_it(completions, environments=None):", "reward function 'got_it' must accept **kwargs"),
    ("reward function needs a column TRL does not pass", "def got_it(completions, environments=None, **kwargs):",
     "def got_it(completions, answer, environments=None, **kwargs):", "requires ['answer'], which TRL does not pass"),
    ("reward function returns the wrong length", "return [1.0 if e.item in e.taken else 0.0 for e in environments]",
     "return [0.0]", "reward function 'got_it' returned 1 value(s) for 2 completions"),
    ("reward function returns a number", "return [1.0 if e.item in e.taken else 0.0 for e in environments]",
     "return 1.0", "reward function 'got_it' returned a float"),
    ("reward function raises", "return [1.0 if e.item in e.taken else 0.0 for e in environments]",
     "return [e.price for e in environments]", "reward function 'got_it' on an empty completion raised AttributeError"),
    ("too many weights", "reward_funcs=[got_it],", "reward_funcs=[got_it], reward_weights=[1.0, 2.0],",
     "reward_weights has 2 weight(s) for 1 reward function(s)"),
    ("row without prompt", '"prompt": [{"role": "user", "content": "Shop. "}], ', "", "row 0 of train_dataset() has no 'prompt' column"),
    ("no rows", "train_dataset=lambda: ROWS", "train_dataset=lambda: []", "train_dataset() returned no rows"),
    ("reset cannot take the row", "def reset(self, item: str, **row) -> str:", "def reset(self, item: str) -> str:",
     "reset() of Shelf cannot take the row's columns"),
    ("verify with the wrong signature", "def verify(environment, completion):", "def verify(environment):",
     "verify must take (environment, completion)"),
    ("verify without a verdict", '"eligible": not extra, ', "", "verify's result has no 'eligible'"),
    ("decision point names a missing tool", '"start": [{"role": "user", "content": "Shop. Take the tea."}]',
     '"start": {"conversations": [{"role": "user", "content": "Shop."}], "calls": {"pay": {"name": "pay", "arguments": {}}}}',
     "call 'pay' names tool 'pay', which the environment Shelf does not have"),
    ("reward function named guard", "reward_funcs=[got_it]", "reward_funcs=[got_it, guard]",
     "a reward function is named 'guard'"),
]


def write_task(tmp_path, source: str):
    path = tmp_path / "task.py"
    path.write_text(source)
    return f"{path}:TASK"


def test_the_good_task_loads_with_its_defaults(tmp_path):
    task = load_task(write_task(tmp_path, GOOD))
    assert isinstance(task, Task) and task.name == "shelf"
    assert task.weights() == [1.0] and list(task.decisions()) == ["start"]
    assert task.eval_dataset() == task.train_dataset() and task.exploit_probes() == []


@pytest.mark.parametrize("case, old, new, expected", CASES, ids=[c[0] for c in CASES])
def test_each_malformed_task_is_one_clear_line(tmp_path, case, old, new, expected):
    assert old in GOOD, case
    spec = write_task(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(TaskError) as raised:
        load_task(spec)
    message = str(raised.value)
    assert expected in message and "\n" not in message and message.startswith(f"task {spec!r}: ")


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(TaskError, match=r"the file '.*nowhere.py' does not exist"):
        load_task(f"{tmp_path}/nowhere.py:TASK")


def test_a_missing_module_and_a_bad_reference_are_one_line():
    with pytest.raises(TaskError, match="no module named 'no_such_tasks'"):
        load_task("no_such_tasks:TASK")
    with pytest.raises(TaskError, match="is not a task reference"):
        load_task("just-a-name")


def test_the_config_names_the_task_field_and_resolves_a_relative_path(tmp_path, monkeypatch):
    write_task(tmp_path, GOOD)
    monkeypatch.chdir(tmp_path)
    config = make_config(kind="trl", task="task.py:TASK")
    assert config.task == f"{tmp_path / 'task.py'}:TASK"  # a run process started elsewhere finds it
    (tmp_path / "broken.py").write_text(GOOD.replace("def take(self, name: str)", "def take(self, name)"))
    with pytest.raises(ConfigError, match=r"^invalid run config: task: parameter 'name' of tool 'take'"):
        make_config(kind="trl", task="broken.py:TASK")
    with pytest.raises(ConfigError, match=r"the task has no decision point\(s\) \['checkout'\]; it has \['start'\]"):
        make_config(kind="trl", task="task.py:TASK", decision_points=["checkout"])


def test_an_edited_file_is_loaded_afresh(tmp_path):
    spec = write_task(tmp_path, GOOD)
    assert load_task(spec).name == "shelf"
    import os

    path = tmp_path / "task.py"
    path.write_text(GOOD.replace('name="shelf"', 'name="pantry"'))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert load_task(spec).name == "pantry"


@pytest.mark.parametrize("case, old, new, expected", [CASES[i] for i in (0, 6, 7, 11, 19)], ids=lambda v: v if isinstance(v, str) and " " in v else "")
def test_the_cli_refuses_a_malformed_task_in_one_line_and_writes_nothing(tmp_path, case, old, new, expected):
    assert old in GOOD, case
    spec = write_task(tmp_path, GOOD.replace(old, new, 1))
    runs_dir = tmp_path / "runs"
    result = agentrl("train", "--task", spec, "--runs-dir", runs_dir)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: invalid run config: task: ") and expected in lines[0], lines
    assert not runs_dir.exists()


def test_the_readme_example_is_a_task_the_loader_accepts(tmp_path):
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("## Write your own task", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(code.splitlines()) < 40
    (tmp_path / "readme_task.py").write_text(code)
    task = load_task(f"{tmp_path / 'readme_task.py'}:TASK")
    assert task.reward_names() == ["booked"] and len(task.train_dataset()) == 1
