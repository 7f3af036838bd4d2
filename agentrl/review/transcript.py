"""One trajectory as a reviewer reads it: the turn table (state, action, behaviour probability,
advantage), its flags, its reward components, and for a language-model run the conversation as
turns instead of the chat template's raw text.

queries.trajectory -> **transcript** -> Review page. Pure functions on the record dict; columns
a run did not record (an LM run has no per-action behaviour probability) are left out rather than
shown as a column of blanks.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

import pandas as pd

# (flag, True is bad): a violation is bad when set, a success is bad when missing.
FLAGS = (("success", False), ("violation", True), ("duplicate_effect", True), ("eligible", False),
         ("vetoed", True), ("updated", False))


@dataclass(frozen=True)
class Flag:
    name: str
    value: bool
    bad: bool  # what the reviewer should look at


def key(step: int, traj_idx: int) -> str:
    """A trajectory's name within its run, as the Review page's URL carries it: 'STEP/IDX'."""
    return f"{int(step)}/{int(traj_idx)}"


_KEY = re.compile(r"([0-9]{1,19})/([0-9]{1,19})")


def parse_key(text: str | None) -> tuple[int, int] | None:
    """(step, traj_idx) from 'STEP/IDX'; None for anything else."""
    # ASCII digits only ('²' passes str.isdigit but not int()), and no more than a BIGINT holds.
    match = _KEY.fullmatch(text or "")
    if match is None:
        return None
    step, idx = int(match[1]), int(match[2])
    return (step, idx) if max(step, idx) < 2**63 else None


def flags(record: dict) -> list[Flag]:
    """The verifier's and the trainer's flags of one trajectory, each marked bad or fine."""
    out = []
    for name, bad_when_set in FLAGS:
        value = record.get(name)
        if value is None:
            continue
        out.append(Flag(name, bool(value), bool(value) == bad_when_set))
    return out


def turn_table(record: dict) -> pd.DataFrame:
    """One row per action: turn, state, action, behaviour prob, advantage (recorded columns only)."""
    actions = list(record.get("actions") or [])
    n = len(actions)

    def padded(values) -> list:
        values = list(values or [])[:n]
        return values + [None] * (n - len(values))

    logps = padded(record.get("behavior_logps"))
    columns = {
        "turn": list(range(1, n + 1)),
        "state": padded(record.get("states")),
        "action": actions,
        "behaviour prob": [None if v is None else math.exp(v) for v in logps],
        "advantage": padded(record.get("advantages")),
    }
    table = pd.DataFrame(columns)
    recorded = [c for c in table.columns if c in ("turn", "action") or table[c].notna().any()]
    return table[recorded]


def components_table(record: dict) -> pd.DataFrame:
    components = record.get("components") or {}
    return pd.DataFrame({"component": list(components), "value": [float(v) for v in components.values()]})


# ChatML, the template of Qwen-style models (the built-in tiny model's): <|im_start|>role\n...<|im_end|>
_CHATML = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|\Z)", re.S)
_TOOLS = re.compile(r"<tools>\s*(.*?)\s*</tools>", re.S)
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_TOOL_RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.S)


def _tool_names(block: str) -> list[str]:
    names = []
    for line in block.splitlines():
        try:
            spec = json.loads(line)
        except json.JSONDecodeError:
            continue
        name = (spec.get("function") or spec).get("name") if isinstance(spec, dict) else None
        if name:
            names.append(str(name))
    return names


def _call_text(call: str) -> str:
    try:
        parsed = json.loads(call)
    except json.JSONDecodeError:
        return call.strip()
    arguments = parsed.get("arguments") or {}
    args = ", ".join(f"{k}={v!r}" for k, v in arguments.items()) if isinstance(arguments, dict) else str(arguments)
    return f"{parsed.get('name', '?')}({args})"


def chat_turns(prompt: str | None, completion: str | None) -> pd.DataFrame:
    """The conversation of an LM trajectory, one row per message: who (system, user, assistant,
    tool), what, and whether the model generated it. The system prompt's tool schema becomes one
    line naming the tools; a tool call reads `lookup()`. Text in no template we know is one row for
    the prompt and one for the completion (only the completion is the model's)."""
    prompt, completion = prompt or "", completion or ""
    text = prompt + completion
    rows = []
    for match in _CHATML.finditer(text):
        role, body = match.group(1), match.group(2).strip()
        generated = match.start() >= len(prompt) or match.end() > len(prompt)
        if role == "system":
            # The schema block is the last <tools>...</tools> (the template's prose names the tags too).
            names = [name for block in _TOOLS.findall(body) for name in _tool_names(block)]
            head = body.split("# Tools")[0].strip()
            if names:
                head += ("\n" if head else "") + "tools: " + ", ".join(names)
            rows.append(("system", head, False))
        elif role == "user" and _TOOL_RESPONSE.search(body):
            for response in _TOOL_RESPONSE.findall(body):
                rows.append(("tool", response.strip(), False))
        elif role == "assistant":
            calls = _TOOL_CALL.findall(body)
            rest = _TOOL_CALL.sub("", body).strip()
            for call in calls:
                rows.append(("assistant", "call " + _call_text(call), generated))
            if rest or not calls:
                if rest or match.end() < len(text):
                    rows.append(("assistant", rest, generated))
        else:
            rows.append((role, body, False))
    if not rows:
        rows = [("text", part.strip(), generated) for part, generated in ((prompt, False), (completion, True)) if part.strip()]
    return pd.DataFrame(rows, columns=["role", "message", "generated"])
