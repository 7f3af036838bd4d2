"""One trajectory as a scanner reads it: a flat list of items (each message, each tool call with its
arguments, each tool output), the actions, the behaviour and the reward terms.

A trajectory row in the store, or a rollout being scored -> **trajectory** -> a scanner. Both
sources become the same `Trajectory`, so a rule validated on a recorded run is the rule a guarded
run enforces. An item's `index` is what a `ScanResult`'s references cite; the Review page shows the
same items with the cited one highlighted. Stored language-model completions are read back from
their chat-template text (ChatML `<tool_call>` / `<tool_response>` blocks, as TRL records them) or
from the `assistant -> NAME({...})` lines the coding engine records; a tabular run's trajectory is
its actions (each a call without arguments) and the states it saw.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Item:
    """One thing that happened: `role` is system, user, assistant, tool or state; `part` is message,
    call (an assistant's tool call: `name` and `arguments` set) or output (a tool's result)."""

    index: int
    role: str
    part: str
    text: str
    name: str | None = None
    arguments: Mapping[str, Any] | None = None

    def searchable(self) -> str:
        """The text a regex reads: a call as `name({"arg": value})` (keys sorted), else the text."""
        if self.part == "call":
            return f"{self.name}({json.dumps(dict(self.arguments or {}), sort_keys=True, default=str)})"
        return self.text


@dataclass
class Trajectory:
    """What a scanner is given. `items` in order; `actions` the tools called (or a gym's actions);
    `components` every reward term by name; `step_rewards` the rewards of the trajectory's step
    (for a rule that compares it with its batch); `task` and `environment` when known (the task's
    `verify` is scored through them)."""

    items: list[Item]
    actions: list[str] = field(default_factory=list)
    behaviour: str | None = None
    reward: float | None = None
    components: dict[str, float] = field(default_factory=dict)
    step_rewards: list[float] | None = None
    run_id: str | None = None
    step: int | None = None
    traj_idx: int | None = None
    task_id: str | None = None
    task: Any = None
    environment: Any = None
    row: dict | None = field(default=None, repr=False)  # the stored row it came from

    def calls(self) -> list[Item]:
        return [i for i in self.items if i.part == "call"]

    @classmethod
    def of_messages(cls, messages: Sequence[Mapping[str, Any]], **fields: Any) -> Trajectory:
        """From chat messages (a prompt and a completion as TRL passes them to reward functions)."""
        items: list[Item] = []
        for message in messages or ():
            if not isinstance(message, Mapping):
                continue
            role = str(message.get("role", "assistant"))
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content, default=str) if content else ""
            if role == "tool":
                items.append(Item(len(items), "tool", "output", text, name=message.get("name")))
                continue
            if text:
                items.append(Item(len(items), role, "message", text))
            for call in message.get("tool_calls") or []:
                function = call.get("function", call) if isinstance(call, Mapping) else {}
                arguments = _arguments(function.get("arguments"))
                items.append(Item(len(items), role, "call", "", name=str(function.get("name", "")), arguments=arguments))
        if "actions" not in fields:
            fields["actions"] = [i.name for i in items if i.part == "call"]
        return cls(items, **fields)

    @classmethod
    def of_row(cls, row: Mapping[str, Any], **fields: Any) -> Trajectory:
        """From a stored trajectory row (`queries.trajectory` or `scan_inputs`)."""
        items = parse_text(row.get("prompt"), row.get("completion"))
        actions = [str(a) for a in (row.get("actions") if row.get("actions") is not None else []) if a is not None]
        if not any(i.part == "call" for i in items):
            states = list(row.get("states") if row.get("states") is not None else [])
            for n, action in enumerate(actions):  # a gym's episode: the state seen, then the action taken
                if n < len(states) and states[n] is not None:
                    items.append(Item(len(items), "state", "output", str(states[n])))
                items.append(Item(len(items), "assistant", "call", "", name=action, arguments={}))
        components = row.get("components")
        if components is not None and not isinstance(components, Mapping):
            components = dict(components)  # DuckDB MAP fetched as a list of pairs
        reward = row.get("reward")
        return cls(items, actions=actions or [i.name for i in items if i.part == "call"], behaviour=row.get("behaviour"),
                   reward=None if reward is None else float(reward),
                   components={str(k): float(v) for k, v in (components or {}).items() if v is not None},
                   run_id=row.get("run_id"), step=_int(row.get("step")), traj_idx=_int(row.get("traj_idx")),
                   task_id=row.get("task_id"), row=dict(row), **fields)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _arguments(value: Any) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            return {"(unparsed)": value}
    return dict(value) if isinstance(value, Mapping) else {}


_CHATML = re.compile(r"<\|im_start\|>(\w+)\n?(.*?)(?:<\|im_end\|>|$)", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_TOOL_RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.DOTALL)
_LINE = re.compile(r"^(?:(\w+) -> ([A-Za-z_]\w*)\((.*)\)|tool\[([^\]]*)\]: (.*)|(system|user|assistant): (.*))$")


def parse_text(prompt: str | None, completion: str | None) -> list[Item]:
    """Items of a recorded prompt and completion: ChatML turns, else one call or output a line
    (`assistant -> name({...})`, `tool[name]: ...`, `role: text`), else the text as one message."""
    text = (prompt or "") + (completion or "")
    items: list[Item] = []
    for match in _CHATML.finditer(text):
        role, body = match.group(1), match.group(2).strip()
        responses = _TOOL_RESPONSE.findall(body)
        if role in ("user", "tool") and responses:
            items += [Item(len(items) + n, "tool", "output", r.strip()) for n, r in enumerate(responses)]
            continue
        calls = _TOOL_CALL.findall(body) if role == "assistant" else []
        rest = _TOOL_CALL.sub("", body).strip() if calls else body
        if rest:
            items.append(Item(len(items), role, "message", rest))
        for call in calls:
            try:
                parsed = json.loads(call)
            except json.JSONDecodeError:
                parsed = {"name": call.strip()}
            parsed = parsed if isinstance(parsed, Mapping) else {"name": str(parsed)}
            items.append(Item(len(items), "assistant", "call", "", name=str(parsed.get("name", "")),
                              arguments=_arguments(parsed.get("arguments"))))
    if items:
        return items
    for line in text.splitlines():
        match = _LINE.match(line.strip())
        if match is None:
            if line.strip() and items:
                last = items[-1]
                items[-1] = Item(last.index, last.role, last.part, last.text + "\n" + line, last.name, last.arguments)
            elif line.strip():
                items.append(Item(len(items), "text", "message", line))
            continue
        if match.group(2):
            items.append(Item(len(items), match.group(1), "call", "", name=match.group(2), arguments=_arguments(match.group(3))))
        elif match.group(4) is not None:
            items.append(Item(len(items), "tool", "output", match.group(5), name=match.group(4)))
        else:
            items.append(Item(len(items), match.group(6), "message", match.group(7)))
    return items


def chatml(messages: Sequence[Mapping[str, Any]]) -> str:
    """Chat messages as ChatML text with `<tool_call>` and `<tool_response>` blocks, the shape TRL
    records a rollout in and `parse_text` reads back (for a script recording its own rollouts)."""
    parts = []
    for message in messages:
        role = str(message.get("role", "assistant"))
        if role == "tool":
            parts.append(f"<|im_start|>user\n<tool_response>\n{message.get('content') or ''}\n</tool_response><|im_end|>\n")
            continue
        body = str(message.get("content") or "")
        for call in message.get("tool_calls") or []:
            function = call.get("function", call)
            body += "\n<tool_call>\n" + json.dumps({"name": function.get("name"), "arguments": function.get("arguments") or {}}) \
                + "\n</tool_call>"
        parts.append(f"<|im_start|>{role}\n{body.strip()}<|im_end|>\n")
    return "".join(parts)
