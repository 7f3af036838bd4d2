"""Agent-task rewards (agentrl/rewards.py, SPEC section 10): format, schema, tests, step budget,
the default weights, and scoring that keeps every component and the sandbox's reason.

Completions are built here by code: strings, or chat messages with OpenAI/TRL-shaped tool calls.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from agentrl.rewards import (
    TOOL_CALL_MARKERS,
    HeldOutReward,
    RewardFunctions,
    TestsReward,
    argument_errors,
    budget_reward,
    build_reward_functions,
    format_reward,
    schema_reward,
    score_completion,
    score_group,
    tests_outcomes,
    tests_reward,
    written_files,
)
from agentrl.monitor import RunMonitor
from agentrl.store import queries

PY = sys.executable
READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "mode": {"type": "string", "enum": ["text", "bytes"]}, "limit": {"type": "integer"}},
            "required": ["path"],
        },
    },
}


def call(name: str, arguments) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def turn(content: str | None = "", calls: list[dict] | None = None) -> dict:
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return message


def file_block(path: str, content: str) -> str:
    return f"```file:{path}\n{content}```\n"


@pytest.fixture
def workspace(tmp_path) -> Path:
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "tests" / "test_calc.py").write_text("import sys\nsys.path.insert(0, '.')\nfrom calc import add\nassert add(2, 3) == 5\n")
    return root


@pytest.fixture
def columns(workspace) -> dict:
    """The dataset columns of one row, as single values."""
    return {"workspace": str(workspace), "test_command": [PY, "tests/test_calc.py"], "protected": ["tests"]}


FIX = file_block("calc.py", "def add(a, b):\n    return a + b\n")


# --- format -----------------------------------------------------------------------------------


@pytest.mark.parametrize("marker", TOOL_CALL_MARKERS)
def test_format_is_0_when_a_tool_call_leaked_into_the_text(marker):
    assert format_reward([f"Let me look. {marker} read_file"]) == [0.0]


def test_format_is_1_for_clean_text_and_structured_calls():
    completion = [turn("Reading the file.", [call("read_file", {"path": "a.py"})]), turn("Done.")]
    assert format_reward(["The answer is 4.", completion]) == [1.0, 1.0]


def test_format_reads_the_models_turns_not_the_tool_results():
    completion = [turn("", [call("read_file", {"path": "log"})]), {"role": "tool", "content": "<tool_call> in a log file"}, turn("Done.")]
    assert format_reward([completion]) == [1.0]


def test_format_reads_content_parts():
    completion = [{"role": "assistant", "content": [{"type": "text", "text": "<tool_use>read</tool_use>"}]}]
    assert format_reward([completion]) == [0.0]


# --- schema -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments, score",
    [
        ({"path": "a.py"}, 1.0),
        ('{"path": "a.py", "mode": "text", "limit": 10}', 1.0),  # OpenAI's JSON-string arguments
        ({}, 0.0),  # required
        ({"path": "a.py", "recursive": True}, 0.0),  # unknown argument
        ({"path": 3}, 0.0),  # type
        ({"path": "a.py", "limit": True}, 0.0),  # a boolean is not an integer
        ({"path": "a.py", "mode": "binary"}, 0.0),  # enum
        ("{not json", 0.0),
    ],
)
def test_schema_checks_required_unknown_type_and_enum(arguments, score):
    assert schema_reward([[turn("", [call("read_file", arguments)])]], tools=[READ_FILE]) == [score]


FETCH = {
    "type": "function",
    "function": {
        "name": "fetch",
        "parameters": {
            "type": "object",
            "properties": {
                "ids": {"type": "array", "items": {"type": "string"}},
                "n": {"type": "integer", "minimum": 0},
                "when": {"type": "object", "properties": {"day": {"type": "string"}}, "required": ["day"]},
            },
            "required": ["ids"],
        },
    },
}


def test_schema_checks_the_whole_declared_schema_so_a_wrongly_typed_nested_argument_earns_nothing():
    wrong = {"ids": ["a", None], "n": -5, "when": {}}
    assert argument_errors(wrong, FETCH["function"]["parameters"]) == [
        "ids/1: None is not of type 'string'",
        "n: -5 is less than the minimum of 0",
        "when: 'day' is a required property",
    ]
    assert schema_reward([[turn("", [call("fetch", wrong)])]], tools=[FETCH]) == [0.0]
    right = {"ids": ["a", "b"], "n": 5, "when": {"day": "mon"}}
    assert schema_reward([[turn("", [call("fetch", right)])]], tools=[FETCH]) == [1.0]


def test_schema_says_so_when_the_tool_declares_an_invalid_schema():
    assert argument_errors({"n": 1}, {"properties": {"n": {"type": "integr"}}}) == [
        "the tool's schema is invalid: 'integr' is not valid under any of the given schemas"]


def test_schema_is_the_fraction_of_valid_calls():
    completion = [turn("", [call("read_file", {"path": "a.py"}), call("read_file", {"path": 1}), call("delete_all", {}), call("read_file", {"path": "b"})])]
    assert schema_reward([completion], tools=[READ_FILE]) == [0.5]


def test_schema_is_0_with_no_calls_or_no_schemas():
    assert schema_reward(["plain text", [turn("no calls")]], tools=[READ_FILE]) == [0.0, 0.0]
    assert schema_reward([[turn("", [call("read_file", {"path": "a"})])]], tools=None) == [0.0]


def test_schema_takes_tools_per_row_from_a_column():
    completions = [[turn("", [call("read_file", {"path": "a"})])]] * 2
    assert schema_reward(completions, tools=[[READ_FILE], []]) == [1.0, 0.0]
    assert schema_reward(completions, tools=[json.dumps([READ_FILE]), None]) == [1.0, 0.0]


# --- budget -----------------------------------------------------------------------------------


@pytest.mark.parametrize("n_calls, reward", [(0, 0.0), (8, 0.0), (9, -0.25), (12, -1.0)])
def test_budget_is_0_within_max_steps_and_minus_penalty_per_call_over(n_calls, reward):
    completion = [turn("", [call("read_file", {"path": "a"})]) for _ in range(n_calls)]
    assert budget_reward([completion], max_steps=8, penalty=0.25) == [reward]


def test_budget_is_never_a_bonus_for_brevity():
    assert budget_reward(["short", [turn("short")]]) == [0.0, 0.0]


# --- tests ------------------------------------------------------------------------------------


def test_files_come_from_fenced_blocks_tagged_with_their_path():
    text = "Here.\n" + file_block("a.py", "x = 1\n") + "```python\nnot = 'a file'\n```\n" + file_block("a.py", "x = 2\n") + "````file:b.md\n```\nnested fence\n```\n````\n"
    assert written_files(text) == {"a.py": "x = 2\n", "b.md": "```\nnested fence\n```\n"}


def test_tests_reward_is_1_when_the_tests_pass_with_the_files_written(columns):
    assert tests_reward(["Fixed.\n" + FIX, [turn("Fixed.\n" + FIX)]], **columns) == [1.0, 1.0]


def test_tests_reward_is_0_when_they_fail(columns):
    assert tests_reward([file_block("calc.py", "def add(a, b):\n    return 0\n")], **columns) == [0.0]


def test_merely_claiming_success_scores_0(columns):
    [outcome] = tests_outcomes(["I fixed calc.py. All tests passed."], **columns)
    assert (outcome.score, outcome.reason, outcome.sandbox) == (0.0, "no files written", None)


def test_rewriting_the_tests_scores_0_with_the_refusal_as_reason(columns):
    forged = FIX + file_block("tests/test_calc.py", "pass\n")
    [outcome] = tests_outcomes([forged], **columns)
    assert (outcome.score, outcome.reason) == (0.0, "refused: protected path tests/test_calc.py")


def test_tests_reward_takes_columns_per_row_as_trl_passes_them(columns, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(columns["workspace"], other)
    (other / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    per_row = {k: [v, v] for k, v in columns.items()}
    per_row["workspace"] = [columns["workspace"], str(other)]
    unrelated = file_block("notes.md", "nothing\n")
    assert tests_reward([unrelated, unrelated], **per_row, trainer_state=None) == [0.0, 1.0]


def test_tests_reward_says_which_columns_it_needs():
    with pytest.raises(ValueError, match="'workspace' and 'test_command'"):
        tests_reward([FIX])


def test_a_groups_runs_go_through_the_pool_at_once(columns):
    # Each run prints when it started and ended: side by side, each starts before the other ends
    # (however loaded the machine); one after the other, the second would start after the first ended.
    clock = "import time; print('start', time.time(), flush=True); time.sleep(1.0); print('end', time.time())"
    slow = {**columns, "test_command": [PY, "-c", clock]}
    outcomes = tests_outcomes([FIX, FIX], **slow, workers=2)
    spans = []
    for outcome in outcomes:
        times = dict(line.split() for line in outcome.sandbox.output_tail.splitlines() if line.startswith(("start", "end")))
        spans.append((float(times["start"]), float(times["end"])))
    (first_start, first_end), (second_start, second_end) = sorted(spans)
    assert second_start < first_end


# --- bundles and scoring ----------------------------------------------------------------------


def test_default_weights_of_the_tests_kind():
    rewards = build_reward_functions()
    assert rewards.names == ["tests", "format", "budget"]
    assert rewards.weights == [2.0, 0.5, 1.0]


def test_weights_and_budget_can_be_changed():
    rewards = build_reward_functions(weights={"format": 1.0}, max_steps=2, penalty=0.5, workers=3)
    assert rewards.weights == [2.0, 1.0, 1.0]
    assert rewards.functions[2]([[turn("", [call("read_file", {"path": "a"})] * 4)]], max_steps=99) == [-1.0]
    assert isinstance(rewards.functions[0], TestsReward) and rewards.functions[0].workers == 3


def test_unknown_kinds_and_weights_say_what_exists():
    with pytest.raises(ValueError, match="kind 'tests'"):
        build_reward_functions(kind="vibes")
    with pytest.raises(ValueError, match="unknown reward names"):
        build_reward_functions(weights={"style": 1.0})


def test_score_completion_keeps_each_component_the_total_and_the_reason(columns):
    row = {"prompt": [{"role": "user", "content": "fix calc.py"}], **columns}
    scored = score_completion([turn("", [call("read_file", {"path": "calc.py"})]), turn("Fixed.\n" + FIX)], row)
    assert scored.components == {"tests": 1.0, "format": 1.0, "budget": 0.0}
    assert (scored.reward, scored.passed, scored.reason) == (2.5, True, "tests passed")
    assert scored.sandbox is not None and scored.sandbox.returncode == 0


def test_score_group_scores_every_completion_with_its_row(columns):
    completions = ["All tests passed.", "<tool_call>run_tests</tool_call>\n" + FIX]
    scored = score_group(completions, [columns, columns], workers=2)
    assert [(s.components["tests"], s.components["format"], s.reward, s.reason) for s in scored] == [
        (0.0, 1.0, 0.5, "no files written"),
        (1.0, 0.0, 2.0, "tests passed"),
    ]


def test_held_out_tests_are_a_component_of_their_own_so_special_casing_shows_as_a_gap(columns, tmp_path):
    # the visible test checks add(2, 3); the held-out one, which the policy never sees, add(4, 4)
    held_out = tmp_path / "held-out"
    (held_out / "tests").mkdir(parents=True)
    (held_out / "tests" / "test_more.py").write_text("import sys\nsys.path.insert(0, '.')\nfrom calc import add\n"
                                                    "assert add(4, 4) == 8\n")
    row = {**columns, "test_command": [PY, "-m", "pytest", "-q", "tests"], "held_out": str(held_out)}
    (Path(columns["workspace"]) / "tests" / "test_calc.py").write_text(
        "import sys\nsys.path.insert(0, '.')\nfrom calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    (held_out / "tests" / "test_more.py").write_text(
        "import sys\nsys.path.insert(0, '.')\nfrom calc import add\n\n\ndef test_more():\n    assert add(4, 4) == 8\n")
    special_case = file_block("calc.py", "def add(a, b):\n    return 5 if (a, b) == (2, 3) else a - b\n")
    rewards = RewardFunctions(functions=[TestsReward(), HeldOutReward()], weights=[2.0, 0.0])
    scored = score_group([FIX, special_case], [row, row], rewards=rewards)
    assert [(s.components["tests"], s.components["held_out"], s.reason) for s in scored] == [
        (1.0, 1.0, "tests passed"), (1.0, 0.0, "tests passed")]
    assert not (Path(columns["workspace"]) / "tests" / "test_more.py").exists()  # never in the workspace


def test_special_casing_the_visible_cases_raises_the_monitors_test_gap(columns, tmp_path):
    # a task that names held-out tests gets their reward in the default bundle (weight 0), and the
    # monitor reads the gap between the two: special-casing crosses test_gap's threshold, an honest fix reads 0
    held_out = tmp_path / "held-out"
    (held_out / "tests").mkdir(parents=True)
    (held_out / "tests" / "test_more.py").write_text(
        "import sys\nsys.path.insert(0, '.')\nfrom calc import add\n\n\ndef test_more():\n    assert add(4, 4) == 8\n")
    (Path(columns["workspace"]) / "tests" / "test_calc.py").write_text(
        "import sys\nsys.path.insert(0, '.')\nfrom calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    row = {**columns, "test_command": [PY, "-m", "pytest", "-q", "tests"], "held_out": str(held_out)}
    special_case = file_block("calc.py", "def add(a, b):\n    return 5 if (a, b) == (2, 3) else a - b\n")
    scored = score_group([FIX, special_case], [row, row], workers=2)
    assert "held_out" in build_reward_functions(held_out=True).names and build_reward_functions(held_out=True).weight("held_out") == 0.0
    assert [(s.components["tests"], s.components["held_out"], s.reward) for s in scored] == [(1.0, 1.0, 2.5), (1.0, 0.0, 2.5)]  # the same pay
    gaps = {}
    for name, one in (("honest", scored[0]), ("special-cased", scored[1])):
        monitor, onset = RunMonitor(), None
        for step in range(1, 4):
            onset = monitor.observe(step, [(one.reward, False, one.passed)] * 4, components=[one.components] * 4) or onset
        gaps[name] = (monitor.latest["test_gap"], onset.signal if onset else None)
    assert gaps == {"honest": (0.0, None), "special-cased": (1.0, "test_gap")}


def test_the_store_reads_test_gap_from_the_held_out_component(tmp_path):
    from agentrl.monitor import store_signals
    from agentrl.store.db import connect

    con = connect(tmp_path)
    con.execute("INSERT INTO step_components VALUES ('r', 1, 'tests', 4, 4), ('r', 1, 'held_out', 1, 4), "
                "('r', 2, 'tests', 3, 4), ('r', 3, 'held_out', 2, 4)")
    assert queries.monitor_test_pass_rates(con, "r") == {1: (1.0, 0.25)}  # steps 2 and 3 lack one side
    assert store_signals(con, "r")[1]["test_gap"] == pytest.approx(0.75)


def test_temp_copies_are_removed(columns):
    root = Path(tempfile.mkdtemp(prefix="agentrl-sandbox-test-"))
    root.chmod(0o711)
    try:
        TestsReward(temp_root=root)([FIX], **columns)
        assert list(root.iterdir()) == []
    finally:
        shutil.rmtree(root, ignore_errors=True)
