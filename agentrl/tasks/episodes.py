"""Driving a chat model on any task outside the trainer: greedy episodes and decision-point distributions.

Task -> **episodes** <- the LM engine (launch -> run process -> chunks): before, during and after
GRPO the engine plays the task's eval rows and exploit probes greedily with the current policy, and
measures the policy's next tool call at each of the task's decision points. Both use the task's
own environment and TRL's own chat rendering and response parser, so what is measured here is
what a rollout sees. Torch and TRL are imported inside the functions that need a model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.tasks.contract import DecisionPoint, Task, tool_methods

Message = dict[str, Any]


def render_ids(tokenizer, messages: list[Message], tools: list, add_generation_prompt: bool) -> list[int]:
    """Token ids of a conversation as TRL renders it (tools in the system block)."""
    ids = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=False,
    )
    return list(ids[0] if ids and isinstance(ids[0], list) else ids)


def call_message(name: str, arguments: Mapping[str, Any] | None = None) -> Message:
    """An assistant turn that makes one tool call."""
    return {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": dict(arguments or {})}}]}


def call_continuations(tokenizer, tools: list, calls: Mapping[str, Mapping[str, Any]]) -> dict[str, list[int]]:
    """The tokens a model emits to make each call, up to and including its end-of-turn token.

    Derived from the chat template (a rendered call minus the generation prompt), so any
    tool-calling template works.
    """
    base = [{"role": "user", "content": "x"}]
    prefix = render_ids(tokenizer, base, tools, add_generation_prompt=True)
    continuations = {}
    for label, call in calls.items():
        full = render_ids(tokenizer, base + [call_message(call["name"], call.get("arguments"))], tools, add_generation_prompt=False)
        if full[: len(prefix)] != prefix:
            raise ValueError("the chat template does not render a tool call after its generation prompt; it cannot be probed")
        tail = full[len(prefix):]
        end = tail.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in tail else len(tail)
        continuations[label] = tail[:end]
    return continuations


def tool_suffix_ids(tokenizer, tool_messages: list[Message]) -> list[int]:
    """The tokens between a tool call's end-of-turn and the next generation: TRL's `_get_tool_suffix_ids`.

    TRL does not re-render a conversation between turns; it appends these ids to the token
    stream. Warm-starting and probing build the same stream, so a model is trained and measured
    on exactly what it sees in a GRPO rollout.
    """
    calls = [{"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}]
    dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": calls}]
    prefix = tokenizer.apply_chat_template(dummy, add_generation_prompt=False, tokenize=True, return_dict=False)
    full = tokenizer.apply_chat_template(dummy + tool_messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    eos_positions = [i for i, token in enumerate(prefix) if token == tokenizer.eos_token_id]
    if eos_positions:
        prefix = prefix[: eos_positions[-1] + 1]
    if full[: len(prefix)] != prefix:
        raise ValueError("the chat template does not preserve the prefix of a tool call; it cannot run tool episodes")
    return list(full[len(prefix):])


@dataclass
class TokenStream:
    """A conversation as the token stream of a GRPO rollout: the prompt, then generated turns and tool results."""

    ids: list[int]
    generated: list[tuple[int, int]]  # [start, end) of every assistant turn the model produced
    decisions: list[tuple[int, str]]  # (position of the first token of a tool call, the tool called)


def token_stream(tokenizer, messages: list[Message], tools: list) -> TokenStream:
    """Encode a transcript (prompt messages, then assistant/tool turns) the way TRL's tool loop builds it:
    each tool call as the tokens the model emits for it, each group of tool results as TRL's suffix."""
    first = next(k for k, m in enumerate(messages) if m["role"] == "assistant")
    ids = render_ids(tokenizer, messages[:first], tools, add_generation_prompt=True)
    generated, decisions = [], []
    k = first
    while k < len(messages):
        message = messages[k]
        start = len(ids)
        if message.get("tool_calls"):
            function = message["tool_calls"][0]["function"]
            decisions.append((start, function["name"]))
            ids += call_continuations(tokenizer, tools, {"call": function})["call"]
            generated.append((start, len(ids)))
            results = []
            k += 1
            while k < len(messages) and messages[k]["role"] == "tool":
                results.append(messages[k])
                k += 1
            if results:
                ids += tool_suffix_ids(tokenizer, results)
        else:
            ids += tokenizer.encode(message["content"], add_special_tokens=False) + [tokenizer.eos_token_id]
            generated.append((start, len(ids)))
            k += 1
    return TokenStream(ids=ids, generated=generated, decisions=decisions)


def candidate_calls(point: DecisionPoint, tools: list) -> dict[str, dict[str, Any]]:
    """A decision point's candidate calls: its own, or every tool with no arguments."""
    if point.calls:
        return {label: dict(call) for label, call in point.calls.items()}
    return {tool.__name__: {"name": tool.__name__, "arguments": {}} for tool in tools}


def next_call_distribution(model, tokenizer, conversations: Sequence[Sequence[Message]], tools: list,
                           calls: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """p(next call = c) after each conversation, averaged over the conversations.

    Each complete candidate call is scored (the sum of its token log-probs under the model) and
    the candidates are normalised: the policy's choice among well-formed calls.
    """
    import torch

    continuations = call_continuations(tokenizer, tools, calls)
    labels = list(calls)
    sequences, spans = [], []
    for conversation in conversations:
        prompt = render_ids(tokenizer, list(conversation), tools, add_generation_prompt=True)
        for label in labels:
            sequences.append(prompt + continuations[label])
            spans.append((len(prompt), len(continuations[label])))
    width = max(len(s) for s in sequences)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device = next(model.parameters()).device
    input_ids = torch.tensor([s + [pad] * (width - len(s)) for s in sequences], device=device)
    attention = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences], device=device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(input_ids=input_ids, attention_mask=attention).logits.float()
    finally:
        model.train(was_training)
    logps = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1).cpu()
    totals = {label: 0.0 for label in labels}
    for h in range(len(conversations)):
        scores = []
        for a in range(len(labels)):
            row = h * len(labels) + a
            start, length = spans[row]
            scores.append(logps[row, start - 1 : start - 1 + length].sum())
        probs = torch.softmax(torch.stack(scores), dim=0).tolist()
        for label, p in zip(labels, probs):
            totals[label] += p / len(conversations)
    return totals


def decision_distributions(model, tokenizer, task: Task, names: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    """The next-call distribution at each of the task's decision points (or those named)."""
    environment = task.environment_factory()
    tools = tool_methods(environment)
    points = task.decisions()
    out = {}
    for name in names or list(points):
        point = points[name]
        out[name] = next_call_distribution(model, tokenizer, point.conversations, tools, candidate_calls(point, tools))
    return out


def run_tool_call(environment: Any, call: Mapping[str, Any], tools: Sequence) -> Message:
    """Execute one parsed tool call the way TRL's tool loop does; returns the tool message."""
    function = call.get("function", call)
    name = str(function.get("name"))
    by_name = {tool.__name__: tool for tool in tools}
    try:
        if name not in by_name:
            raise ValueError(f"Tool {name} not found.")
        result = by_name[name](**(function.get("arguments") or {}))
    except Exception as error:  # TRL turns a failing call into an error result, not a crash
        result = {"error": str(error)}
    return {"role": "tool", "name": name, "content": result if isinstance(result, list) else str(result)}


def start_conversation(environment: Any, row: Mapping[str, Any]) -> list[Message]:
    """The prompt of a row with what `reset(**row)` returned appended to its last message, as TRL does."""
    prompt = row["prompt"]
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    observation = environment.reset(**row)
    if isinstance(observation, str):
        messages[-1] = {**messages[-1], "content": (messages[-1].get("content") or "") + observation}
    return messages


@dataclass
class Episode:
    """One greedy tool-calling episode: the row, its environment afterwards, and the conversation."""

    row: dict[str, Any]
    environment: Any
    messages: list[Message]
    prompt_length: int  # messages of the prompt; the rest is the completion
    parse_failures: int = 0  # assistant turns that were neither a parseable call nor plain text
    completion: list[Message] = field(init=False)

    def __post_init__(self) -> None:
        self.completion = self.messages[self.prompt_length:]


def play_greedy(model, tokenizer, task: Task, rows: Sequence[Mapping[str, Any]], max_turns: int = 8,
                max_new_tokens: int = 64) -> list[Episode]:
    """Greedy episodes of all `rows` at once: generate a turn, run its tool calls, repeat.

    An episode ends at a plain-text turn or after `max_turns + 1` turns. Tool calls are parsed with
    TRL's own parser.
    """
    import torch
    from trl.chat_template_utils import add_response_schema, parse_response

    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        add_response_schema(tokenizer)
    rows = [dict(r) for r in rows]
    environments = [task.environment_factory() for _ in rows]
    tools = [tool_methods(env) for env in environments]
    conversations = [start_conversation(env, row) for env, row in zip(environments, rows)]
    prompt_lengths = [len(c) for c in conversations]
    failures = [0] * len(rows)
    active = list(range(len(rows)))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        for _ in range(max_turns + 1):
            if not active:
                break
            prompts = [render_ids(tokenizer, conversations[i], tools[i], add_generation_prompt=True) for i in active]
            width = max(len(p) for p in prompts)
            input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
            attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
            with torch.no_grad():
                out = model.generate(
                    input_ids=input_ids, attention_mask=attention, max_new_tokens=max_new_tokens, do_sample=False,
                    eos_token_id=tokenizer.eos_token_id, pad_token_id=pad,
                )
            still = []
            for row, i in enumerate(active):
                generated = out[row, width:].tolist()
                if tokenizer.eos_token_id in generated:
                    generated = generated[: generated.index(tokenizer.eos_token_id) + 1]
                message = parse_response(tokenizer, generated, prefix=prompts[row], tools=tools[i])
                calls = message.get("tool_calls") or []
                if not calls:
                    if "<tool_call>" in (message.get("content") or ""):
                        failures[i] += 1
                    conversations[i].append({"role": "assistant", "content": message.get("content") or ""})
                    continue
                conversations[i].append({"role": "assistant", "content": message.get("content") or "", "tool_calls": calls})
                for call in calls:
                    conversations[i].append(run_tool_call(environments[i], call, tools[i]))
                still.append(i)
            active = still
    finally:
        model.train(was_training)
    return [Episode(row, env, messages, n, fails)
            for row, env, messages, n, fails in zip(rows, environments, conversations, prompt_lengths, failures)]
