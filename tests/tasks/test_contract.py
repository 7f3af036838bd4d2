"""agentrl/tasks/contract.py: the Task object's defaults, the verdict and decision-point shapes."""

from __future__ import annotations

import pytest

from agentrl.tasks.contract import DecisionPoint, Task, Verdict, called_tools, tool_names


class Env:
    def reset(self, **row) -> None:
        return None

    def b_tool(self) -> str:
        """B."""
        return "b"

    def a_tool(self) -> str:
        """A."""
        return "a"

    def _private(self) -> None:
        pass

    @property
    def state(self) -> str:
        return "s"


def reward(completions, **kwargs):
    return [1.0] * len(completions)


def test_a_task_takes_rows_or_functions_and_defaults_eval_to_train():
    task = Task(name="t", environment_factory=Env, reward_funcs=[reward], train_dataset=[{"prompt": "hi"}])
    assert task.train_dataset() == task.eval_dataset() == [{"prompt": "hi"}]
    assert task.weights() == [1.0] and task.reward_names() == ["reward"] and task.exploit_probes() == []
    assert task.verify(Env(), []) == Verdict(False, True, "")
    assert task.decisions() == {}


def test_tools_are_the_public_functions_in_trls_order():
    assert tool_names(Env()) == ["a_tool", "b_tool"]  # no reset, no private method, no property


def test_a_verdict_from_a_dict_checks_its_keys_and_types():
    assert Verdict.of({"violation": True, "eligible": False, "reason": "x"}) == Verdict(True, False, "x")
    with pytest.raises(TypeError, match="has no 'eligible'"):
        Verdict.of({"violation": True})
    with pytest.raises(TypeError, match=r"unknown key\(s\) \['penalty'\]"):
        Verdict.of({"violation": True, "eligible": False, "penalty": -1})
    with pytest.raises(TypeError, match="must be True or False"):
        Verdict.of({"violation": 1, "eligible": False})
    assert Verdict(True, False).penalty_terms(2.0) == {"violation_penalty": -2.0}
    assert Verdict(False, True).penalty_terms(2.0) == {"violation_penalty": 0.0}
    assert Verdict(True, False, penalties={"a": -1.0, "b": -0.5}).penalty_terms(2.0) == {"a": -1.0, "b": -0.5}


def test_a_decision_point_is_one_conversation_or_several():
    one = [{"role": "user", "content": "x"}]
    assert DecisionPoint.of("p", one).conversations == (tuple(one),)
    assert len(DecisionPoint.of("p", [one, one]).conversations) == 2
    calls = {"go": {"name": "a_tool", "arguments": {}}}
    assert DecisionPoint.of("p", {"conversations": one, "calls": calls}).calls == calls
    with pytest.raises(TypeError, match="non-empty list of messages"):
        DecisionPoint.of("p", [["not a message"]])


def test_called_tools_reads_structured_calls_only():
    completion = [
        {"role": "assistant", "content": "<tool_call>leaked</tool_call>"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "a_tool", "arguments": {}}}]},
        {"role": "tool", "name": "a_tool", "content": "a"},
    ]
    assert called_tools(completion) == ["a_tool"] and called_tools("plain text") == []


def test_a_rollouts_behaviour_is_its_calls_unless_the_task_says_it_better():
    plain = Task(name="t", environment_factory=Env, reward_funcs=[reward], train_dataset=[{"prompt": "hi"}])
    assert plain.behaviour(Env(), "", ["a_tool", "b_tool"]) == "a_tool > b_tool"
    assert plain.behaviour(Env(), "", []) == "(no tool calls)"
    named = Task(name="t", environment_factory=Env, reward_funcs=[reward], train_dataset=[{"prompt": "hi"}],
                 behaviour=lambda environment, completion: f"said  {environment.state}\n" + "x" * 600)
    said = named.behaviour(Env(), "", ["a_tool"])
    assert said.startswith("said s x") and len(said) == 500 and said.endswith("…")  # one line, cut
    wrong = Task(name="t", environment_factory=Env, reward_funcs=[reward], train_dataset=[{"prompt": "hi"}],
                 behaviour=lambda environment, completion: 3)
    with pytest.raises(TypeError, match="behaviour must return a str, not int"):
        wrong.behaviour(Env(), "", [])
