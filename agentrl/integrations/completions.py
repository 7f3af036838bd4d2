"""A GRPO completions table as trajectory rows: what TRL writes per logged step (and a tracker keeps).

TRL (`output_dir/completions/completions_NNNNN.parquet`, or a Trackio `Table`) -> **completions**
-> `agentrl.record` trajectories. A row of that table has `step`, `prompt`, `completion`, one
column per reward function, the columns reward functions added with `log_extra`, and
`advantage`. Prompt and completion are text, or chat messages (with `tool_calls` and `tool`
replies when the model called tools). A row becomes a `trajectories` row: the transcript as
text, each tool call as an action (the text it answered as its state), every reward function's
value as a component, the weighted total as the reward (a `reward` column, as a table a user
logs to Trackio may have, is the reward itself), the advantage, and the other columns
as `extras` (a `log_extra` column named `success`, `violation`, `eligible`, `vetoed` or
`task_id` also fills that field). Imports nothing heavy: the TRL callback and the Trackio
importer both use it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

BASE_COLUMNS = ("step", "prompt", "completion", "advantage", "reward")
FLAG_COLUMNS = ("success", "violation", "duplicate_effect", "eligible", "vetoed")
STATE_CHARS = 200  # a state is the text a tool call answered; long texts are cut to this


def reward_names(metrics: Mapping[str, Any]) -> list[str]:
    """The reward functions' names, from TRL's per-function metrics (`rewards/<name>/mean`), in order."""
    names = []
    for key in metrics:
        parts = str(key).split("/")
        if len(parts) >= 3 and parts[-3:-2] == ["rewards"] and parts[-1] == "mean":
            names.append(parts[-2])
    return names


def text_of(value: Any) -> str:
    """A prompt or completion as text: a string as it is, chat messages one per line."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        value = [value]
    lines = []
    for message in _messages(value):
        content = message.get("content")
        if not isinstance(content, str):
            content = "" if content is None else json.dumps(content, default=str)
        line = f"{message.get('role', '?')}: {content}".rstrip()
        for name, arguments in _calls(message):
            line += f"\n  -> {name}({arguments})"
        lines.append(line)
    return "\n".join(lines)


def tool_steps(prompt: Any, completion: Any) -> tuple[list[str], list[str]]:
    """(states, actions): each tool call of the completion, with the text it answered (the last
    message before the call: the prompt's last turn or the previous tool reply)."""
    states, actions = [], []
    last = ""
    for message in _messages(prompt if not isinstance(prompt, str) else []):
        last = _content(message)
    for message in _messages(completion if not isinstance(completion, str) else []):
        for name, _ in _calls(message):
            states.append(last[:STATE_CHARS])
            actions.append(name)
        if message.get("role") in ("tool", "user"):
            last = _content(message)
    return states, actions


def completion_rows(step: int, table: Sequence[Mapping[str, Any]], rewards: Sequence[str],
                    weights: Sequence[float] | None = None) -> list[dict]:
    """The trajectory rows (dicts for `Run.log_trajectories`) of one step's completions.

    `rewards` names the reward columns (see `reward_names`); `weights` are TRL's
    `reward_weights` (default 1 each). The reward is a row's own `reward` column when it has a
    number there, else TRL's: the weighted sum of the functions that returned a value (a None is
    left out, as TRL's nansum leaves it)."""
    weights = list(weights) if weights and len(weights) == len(rewards) else [1.0] * len(rewards)
    rows = []
    for i, record in enumerate(table):
        components = {name: float(record[name]) for name in rewards if _number(record.get(name))}
        reward = float(record["reward"]) if _number(record.get("reward")) and "reward" not in rewards else \
            sum(w * components[name] for name, w in zip(rewards, weights) if name in components)
        states, actions = tool_steps(record.get("prompt"), record.get("completion"))
        prompt, completion = text_of(record.get("prompt")), text_of(record.get("completion"))
        extras = {str(k): v for k, v in record.items() if k not in BASE_COLUMNS and k not in rewards}
        row: dict[str, Any] = {
            "step": step, "traj_idx": i, "reward": reward, "components": components, "states": states, "actions": actions,
            "prompt": prompt, "completion": completion,
            "task_id": str(extras.pop("task_id", None) or "prompt-" + hashlib.sha1(prompt.encode()).hexdigest()[:8]),
        }
        if _number(record.get("advantage")):
            row["advantages"] = [float(record["advantage"])]
        for flag in FLAG_COLUMNS:
            if isinstance(extras.get(flag), bool) or type(extras.get(flag)).__name__ == "bool_":
                row[flag] = bool(extras.pop(flag))
        if extras:
            row["extras"] = {k: v if isinstance(v, str) else json.dumps(v, default=str) for k, v in extras.items()}
        rows.append(row)
    return rows


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _messages(value: Any) -> list[Mapping]:
    if value is None or isinstance(value, (str, bytes)):
        return []
    if hasattr(value, "tolist"):  # a numpy array of messages (pandas reads lists of structs so)
        value = value.tolist()
    return [m for m in value if isinstance(m, Mapping)]


def _content(message: Mapping) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ("" if content is None else json.dumps(content, default=str))


def _calls(message: Mapping) -> list[tuple[str, str]]:
    """(name, arguments as text) of each tool call a message makes."""
    calls = message.get("tool_calls")
    if calls is None:
        return []
    if hasattr(calls, "tolist"):
        calls = calls.tolist()
    found = []
    for call in calls or []:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function") if isinstance(call.get("function"), Mapping) else call
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, default=str) if arguments not in (None, {}) else ""
        found.append((str(function.get("name", "?")), arguments))
    return found
