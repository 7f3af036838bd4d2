"""A recorded rollout played again on any task: its tool calls re-executed against a fresh
environment reset from its dataset row, then scored by the task's own reward functions and `verify`.

Review (a fixture is stored) / gate (a fixture is checked) -> **replay** -> the Task contract. What
a trajectory row recorded is turned back into what the task needs: the dataset row it was reset
with (found by its `task_id` among the task's train, eval and probe rows), and its calls, parsed
from the completion text a language-model run recorded (`<tool_call>{"name", "arguments"}</tool_call>`
blocks, as TRL's parser reads them; or `assistant -> NAME({arguments})` lines, as the coding
engine records them) or, for a run that recorded only the actions (the tabular engine), the
actions as calls without arguments. Nothing here knows a built-in task.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentrl.tasks.contract import Message, Row, Task, tool_methods

_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)
# A completion rendered as lines, one call a line: "assistant -> NAME({json arguments})" (the coding engine's record).
_TURN = re.compile(r"^(?=assistant: |assistant -> |tool\[)", re.MULTILINE)
_CALL_LINE = re.compile(r"^assistant -> ([A-Za-z_]\w*)\((.*)\)\s*$", re.MULTILINE)


class ReplayError(ValueError):
    """A recorded rollout that cannot be replayed on its task; the message says why."""


def recorded_calls(completion: str | None, actions: Sequence[str] | None) -> list[dict[str, Any]]:
    """The tool calls of a recorded rollout, in order: parsed from the completion's tool-call
    blocks (or call lines) when it has any, else its actions, each as a call without arguments.
    A last item `{"answer": text}` is the rollout's final plain-text turn."""
    calls = []
    # A completion rendered as lines (the coding engine's) is read as lines: a tool-call block in
    # its text is a call the agent leaked into its answer, not one it made.
    rendered = _TURN.search(completion or "") is not None
    for block in [] if rendered else _TOOL_CALL.findall(completion or ""):
        try:
            call = json.loads(block)
        except json.JSONDecodeError:
            continue
        if isinstance(call, Mapping) and isinstance(call.get("name"), str):
            arguments = call.get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except json.JSONDecodeError:
                    arguments = {}
            calls.append({"name": call["name"], "arguments": dict(arguments) if isinstance(arguments, Mapping) else {}})
    if rendered:
        for name, arguments in _CALL_LINE.findall(completion or ""):
            try:
                parsed = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError:
                parsed = {}
            calls.append({"name": name, "arguments": dict(parsed) if isinstance(parsed, Mapping) else {}})
        # The rendered record's last turn, when it is the agent's text: its final answer (the
        # coding task reads the files it writes in fenced blocks there).
        turns = _TURN.split(completion or "")
        if turns and turns[-1].startswith("assistant: "):
            calls.append({"answer": turns[-1][len("assistant: "):].rstrip("\n")})
    if calls:
        return calls
    return [{"name": str(a), "arguments": {}} for a in (actions or ()) if a is not None]


def find_row(task: Task, task_id: str) -> Row | None:
    """The row of `task` whose `task_id` column is `task_id` (train rows first, then eval, then
    probes); a rollout named `ROW:VARIANT` (the coding engine's `roman:rewrite-tests`) is ROW's."""
    candidates = [str(task_id)] + ([str(task_id).split(":", 1)[0]] if ":" in str(task_id) else [])
    for wanted in candidates:
        for rows in (task.train_dataset, task.eval_dataset, task.exploit_probes):
            for row in rows():
                if str(row.get("task_id")) == wanted:
                    return dict(row)
    return None


def row_for_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row as plain JSON values (a fixture stores it)."""
    try:
        return json.loads(json.dumps(dict(row), default=str))
    except (TypeError, ValueError) as error:
        raise ReplayError(f"the row cannot be stored as JSON: {error}") from None


@dataclass
class Replayed:
    """One recorded rollout played again: its row, the environment afterwards and the conversation."""

    row: Row
    environment: Any
    prompt: list[Message]
    completion: list[Message]


def replay(task: Task, row: Mapping[str, Any], calls: Sequence[Mapping[str, Any]]) -> Replayed:
    """Reset a fresh environment of `task` with `row` and execute `calls` on it, as TRL's tool loop
    does (a failing call becomes an error result). The completion ends with the recorded final
    answer (`{"answer": text}` in `calls`), else "Done."."""
    from agentrl.tasks.episodes import run_tool_call, start_conversation

    row = dict(row)
    environment = task.environment_factory()
    try:
        prompt = start_conversation(environment, row)
    except Exception as error:
        raise ReplayError(f"task {task.name!r}: reset(**row) raised {type(error).__name__}: {error}") from None
    tools = tool_methods(environment)
    completion: list[Message] = []
    answer = "Done."
    for call in calls:
        if "answer" in call:
            answer = str(call["answer"])
            continue
        call = {"name": str(call.get("name")), "arguments": dict(call.get("arguments") or {})}
        completion.append({"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]})
        completion.append(run_tool_call(environment, call, tools))
    completion.append({"role": "assistant", "content": answer})
    return Replayed(row, environment, prompt, completion)


def score_replay(task: Task, scorer: str, replayed: Replayed, fixtures: Sequence[Any] = ()):
    """The replayed rollout scored as a training batch is (`agentrl.scorers.score_rollouts`)."""
    from agentrl.scorers import call_reward_funcs, score_rollouts

    values = call_reward_funcs(task, [replayed.prompt], [replayed.completion], [replayed.environment], [replayed.row])
    return score_rollouts(task, scorer, values, [replayed.completion], [replayed.environment], fixtures=fixtures)[0]
