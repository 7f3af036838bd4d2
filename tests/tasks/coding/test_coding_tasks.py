"""Coding tasks (agentrl/coding_tasks.py, SPEC section 10): the three repositories, their dataset
rows, and the six scripted attempts scored with the default weights (tests 2.0, format 0.5,
budget 1.0), one test per figure.
"""

from __future__ import annotations

import pytest

from agentrl.tasks.coding.tasks import (
    ATTEMPTS,
    CODING_TASKS,
    TOOLS,
    dataset_rows,
    materialize,
    score_scripted_attempts,
    scripted_attempts,
)
from agentrl.rewards import build_reward_functions, schema_reward, tool_calls
from agentrl.sandbox.runner import run_tests


@pytest.fixture(scope="module")
def scored():
    """Every scripted attempt of every task, scored once: {(task_id, attempt): record}."""
    return {(r.task_id, r.attempt): r for r in score_scripted_attempts()}


def records(scored, attempt):
    return [scored[(task_id, attempt)] for task_id in CODING_TASKS]


def test_every_task_has_the_six_attempts_in_order(scored):
    assert list(ATTEMPTS) == ["honest_fix_one_read", "honest_fix_no_call", "fix_after_twelve_reads", "rewrites_tests", "claims_success", "leaked_tool_call"]
    assert sorted(scored) == sorted((t, a) for t in CODING_TASKS for a in ATTEMPTS)


def test_honest_fix_with_one_read_scores_2_5_the_top(scored):
    for record in records(scored, "honest_fix_one_read"):
        assert record.components == {"tests": 1.0, "format": 1.0, "budget": 0.0}
        assert (record.reward, record.passed, record.reason, record.tool_calls) == (2.5, True, "tests passed", 1)
        assert record.reward == max(r.reward for r in scored.values() if r.task_id == record.task_id)


def test_honest_fix_without_a_call_scores_2_5_too(scored):
    for record in records(scored, "honest_fix_no_call"):
        assert (record.reward, record.tool_calls, record.reason) == (2.5, 0, "tests passed")


def test_fix_after_twelve_reads_scores_1_5(scored):
    # 2.0 + 0.5 - 4 calls over the budget of 8 x 0.25
    for record in records(scored, "fix_after_twelve_reads"):
        assert record.components == {"tests": 1.0, "format": 1.0, "budget": -1.0}
        assert (record.reward, record.tool_calls) == (1.5, 12)


def test_rewriting_the_tests_is_refused_and_scores_tests_0(scored):
    for record in records(scored, "rewrites_tests"):
        test_file = next(p for p in CODING_TASKS[record.task_id].files if p.startswith("tests/"))
        assert record.files_written == [test_file]
        assert (record.components["tests"], record.reward, record.passed) == (0.0, 0.5, False)
        assert record.reason == f"refused: protected path {test_file}"


def test_claiming_success_scores_tests_0(scored):
    for record in records(scored, "claims_success"):
        assert "All tests passed" in record.completion_text and record.files_written == []
        assert (record.components["tests"], record.reward, record.reason) == (0.0, 0.5, "no files written")


def test_leaked_tool_call_passes_the_tests_but_loses_format_2_0(scored):
    for record in records(scored, "leaked_tool_call"):
        assert "<tool_call>" in record.completion_text and record.tool_calls == 0
        assert record.components == {"tests": 1.0, "format": 0.0, "budget": 0.0}
        assert record.reward == 2.0


def test_attempts_are_chat_messages_with_real_tool_calls():
    attempts = scripted_attempts(CODING_TASKS["median"])
    assert list(attempts) == list(ATTEMPTS)
    assert [len(tool_calls(c)) for c in attempts.values()] == [1, 0, 12, 1, 0, 0]
    first_call = attempts["honest_fix_one_read"][0]["tool_calls"][0]
    assert first_call["type"] == "function" and first_call["function"] == {"name": "read_file", "arguments": {"path": "stats.py"}}
    assert attempts["honest_fix_one_read"][1]["role"] == "tool"


@pytest.mark.parametrize("task_id", sorted(CODING_TASKS))
def test_each_repository_fails_its_tests_until_fixed(task_id, tmp_path):
    task = CODING_TASKS[task_id]
    workspace = materialize(task, tmp_path)
    assert run_tests(workspace, {}, task.test_command, task.protected).reason == "tests failed (exit 1)"
    fixed = run_tests(workspace, task.fix, task.test_command, task.protected)
    assert fixed.reason == "tests passed"  # how long it took is a benchmark's business, not a test's


def test_dataset_rows_are_what_the_trainer_and_the_rewards_read(tmp_path):
    rows = dataset_rows(tmp_path)
    assert [r["task_id"] for r in rows] == ["slugify", "median", "roman"]
    for row in rows:
        task = CODING_TASKS[row["task_id"]]
        assert [m["role"] for m in row["prompt"]] == ["system", "user"] and task.description in row["prompt"][1]["content"]
        assert "```file:PATH" in row["prompt"][0]["content"]
        assert sorted(p.relative_to(row["workspace"]).as_posix() for p in (tmp_path / task.task_id).rglob("*.*")) == sorted(task.files)
        assert (row["test_command"], row["protected"]) == (task.test_command, ["tests", "run_tests.py"])
        assert [t["function"]["name"] for t in row["tools"]] == ["read_file", "run_tests"] and row["tools"] is TOOLS


def test_the_reward_functions_take_the_call_trls_grpo_trainer_makes(tmp_path):
    # GRPOTrainer._calculate_rewards: every column but the prompt, one entry per completion,
    # plus prompts, completion_ids, trainer_state and the logging hooks.
    rows = dataset_rows(tmp_path, ["roman"]) * 2
    attempts = scripted_attempts(CODING_TASKS["roman"])
    completions = [attempts["honest_fix_one_read"], attempts["fix_after_twelve_reads"]]
    columns = {key: [row[key] for row in rows] for key in rows[0] if key != "prompt"}
    trl_call = dict(prompts=[r["prompt"] for r in rows], completions=completions, completion_ids=[[1], [2]], trainer_state=None,
                    log_extra=lambda *a: None, log_metric=lambda *a: None, **columns)
    rewards = build_reward_functions()
    assert {f.__name__: f(**trl_call) for f in rewards.functions} == {"tests": [1.0, 1.0], "format": [1.0, 1.0], "budget": [0.0, -1.0]}
    assert schema_reward(**trl_call) == [1.0, 1.0]


def test_unknown_task_ids_say_which_exist():
    with pytest.raises(ValueError, match="choose from"):
        score_scripted_attempts(["fizzbuzz"])
