"""Agent-task rewards in the shape TRL's GRPO trainer calls (SPEC section 10).

Run process -> **rewards** -> sandbox. Each reward is `f(completions, **dataset_columns) ->
list[float]`, one float per completion; a completion is a string or a list of chat messages
(`{"role", "content", "tool_calls"}` with OpenAI/TRL-shaped calls). Dataset columns arrive as
lists with one entry per completion, as TRL passes them.

- `format_reward`: 1 when no tool call leaked into the visible text, else 0.
- `schema_reward`: the fraction of structured tool calls whose arguments fit the declared schema.
- `tests_reward`: 1 when the workspace's tests pass in a sandbox copy with the completion's files
  written in, else 0; a group's runs go through a worker pool sized to the cores.
- `budget_reward`: 0 within `max_steps` tool calls, `-penalty` per call over it.
- `HeldOutReward`: the tests reward with the task's held-out tests added (the column `held_out`),
  a component of its own (weight 0) whose gap to `tests` shows special-casing.

`build_reward_functions` bundles a kind's functions with their weights (for `GRPOConfig`'s
`reward_weights`); `score_group` scores completions with every function and keeps each component
and the sandbox's reason, as the run process stores them per trajectory. What a guarded run does
with a scored completion (penalties, the veto, exploit fixtures) is decided in `agentrl.scorers`,
the one place every engine asks.

    >>> format_reward(["The answer is 4.", "<tool_call>{...}</tool_call>"])
    [1.0, 0.0]
    >>> call = {"type": "function", "function": {"name": "read_file", "arguments": {"path": "a.py"}}}
    >>> budget_reward([[{"role": "assistant", "content": None, "tool_calls": [call] * 10}]], max_steps=8)
    [-0.5]
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.rewards.verifier import hack_flags
from agentrl.sandbox.runner import SandboxLimits, SandboxResult, run_tests

Message = dict[str, Any]
Completion = str | list[Message]
RewardFunc = Callable[..., list[float]]

TOOL_CALL_MARKERS = ("<tool_call>", "</tool_call>", "<|channel|>commentary", "[TOOL_REQUEST]", "<function=", "<tool_use>")
"""Text that means a tool call was written as prose instead of being made (Hermes/Qwen, Harmony,
LM Studio, Llama, Anthropic-style)."""

DEFAULT_WEIGHTS = {"tests": 2.0, "format": 0.5, "budget": 1.0}
"""Weights of the 'tests' kind: the outcome dominates."""

_FILE_BLOCK = re.compile(r"^[ \t]*(?P<fence>`{3,})file:(?P<path>[^\n`]*?)[ \t]*\n(?P<body>.*?)^[ \t]*(?P=fence)[ \t]*$", re.MULTILINE | re.DOTALL)
_GRPO_RESERVED_COLUMNS = ("prompt", "completion", "completion_ids")  # TRL does not pass these on


# ---------------------------------------------------------------------------------------------
# Reading a completion
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    """One structured tool call; `arguments` is None when they were not a JSON object."""

    name: str
    arguments: dict[str, Any] | None


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return "\n".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def _model_messages(completion: Completion) -> list[Message]:
    # Tool results (role "tool") are the environment's words, not the model's.
    return [m for m in completion if m.get("role", "assistant") == "assistant"]


def visible_text(completion: Completion) -> str:
    """The text the model showed: the string itself, or its assistant messages' content."""
    if isinstance(completion, str):
        return completion
    return "\n".join(_content_text(m.get("content")) for m in _model_messages(completion))


def tool_calls(completion: Completion) -> list[ToolCall]:
    """The structured tool calls the model made (none for a plain string)."""
    if isinstance(completion, str):
        return []
    calls = []
    for message in _model_messages(completion):
        for call in message.get("tool_calls") or []:
            function = call.get("function", call)
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments) if arguments.strip() else {}
                except json.JSONDecodeError:
                    arguments = None
            calls.append(ToolCall(name=str(function.get("name", "")), arguments=arguments if isinstance(arguments, dict) else None))
    return calls


def written_files(completion: Completion) -> dict[str, str]:
    """Files written in fenced blocks tagged ```file:PATH; a later block for a path wins."""
    return {m["path"].strip(): m["body"] for m in _FILE_BLOCK.finditer(visible_text(completion))}


def _per_row(value: Any, n: int, is_single: Callable[[Any], bool], column: str) -> list[Any]:
    """A column as one value per completion: TRL passes lists; a single value is repeated."""
    if is_single(value):
        return [value] * n
    if not isinstance(value, (list, tuple)) or len(value) != n:
        raise ValueError(f"column {column!r} must hold one entry per completion ({n}), got {value!r:.200}")
    return list(value)


def _is_str_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)


def _is_tool_list(value: Any) -> bool:
    return value is None or (isinstance(value, (list, tuple)) and all(isinstance(v, dict) for v in value))


# ---------------------------------------------------------------------------------------------
# The reward functions
# ---------------------------------------------------------------------------------------------


def format_reward(completions: Sequence[Completion], **kwargs: Any) -> list[float]:
    """1.0 when no tool-call marker leaked into the visible text, else 0.0.

    >>> format_reward(["Done.", "[TOOL_REQUEST] read_file"])
    [1.0, 0.0]
    """
    return [0.0 if any(marker in visible_text(c) for marker in TOOL_CALL_MARKERS) else 1.0 for c in completions]


format_reward.__name__ = "format"

def argument_errors(arguments: dict[str, Any] | None, parameters: dict[str, Any]) -> list[str]:
    """What is wrong with `arguments` under the whole JSON Schema a tool declares (`jsonschema`,
    in the draft the schema names, 2020-12 by default), each as `where: what`. Empty when they
    fit. One rule is ours: an argument the schema does not name is an error unless it sets
    `additionalProperties` itself (a call that invents an argument is not a well-formed call).

    >>> argument_errors({"path": 3}, {"properties": {"path": {"type": "string"}}, "required": ["path"]})
    ["path: 3 is not of type 'string'"]
    >>> argument_errors({"ids": ["a", None]}, {"properties": {"ids": {"type": "array", "items": {"type": "string"}}}})
    ["ids/1: None is not of type 'string'"]
    """
    if not isinstance(arguments, dict):
        return ["arguments are not a JSON object"]
    validator = _validator(json.dumps(parameters, sort_keys=True))
    if isinstance(validator, str):
        return [validator]
    errors = sorted(validator.iter_errors(arguments), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    return [f"{'/'.join(map(str, e.absolute_path)) or '(arguments)'}: {e.message}" for e in errors]


@functools.lru_cache(maxsize=256)
def _validator(parameters_json: str) -> Any:
    """A validator of a tool's declared schema (cached: a group checks the same few schemas over
    and over), or why the schema itself cannot be used."""
    import jsonschema

    schema = json.loads(parameters_json)
    if not isinstance(schema, dict):
        return f"the tool's parameters are not a JSON Schema object (got {type(schema).__name__})"
    schema = {"type": "object", **schema}
    schema.setdefault("additionalProperties", False)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as err:
        return f"the tool's schema is invalid: {err.message}"
    return cls(schema)


def tool_schemas(tools: Any) -> dict[str, dict[str, Any]]:
    """Parameters schema by tool name, from OpenAI-style tools (`{"type": "function", "function":
    {...}}`), bare `{"name", "parameters"}` dicts, or a JSON string of either."""
    if isinstance(tools, str):
        tools = json.loads(tools) if tools.strip() else []
    schemas = {}
    for tool in tools or []:
        function = tool.get("function", tool)
        if "name" in function:
            schemas[function["name"]] = function.get("parameters") or {"type": "object", "properties": {}}
    return schemas


def schema_reward(completions: Sequence[Completion], tools: Any = None, **kwargs: Any) -> list[float]:
    """The fraction of structured tool calls whose arguments fit the declared schema; 0.0 when a
    completion made no call or no schemas were declared. `tools`: one list for every completion,
    or (as a dataset column) one list per completion."""
    n = len(completions)
    per_row = _per_row(tools, n, _is_tool_list, "tools")
    scores = []
    for completion, row_tools in zip(completions, per_row):
        calls, schemas = tool_calls(completion), tool_schemas(row_tools)
        if not calls or not schemas:
            scores.append(0.0)
            continue
        valid = sum(1 for c in calls if c.name in schemas and not argument_errors(c.arguments, schemas[c.name]))
        scores.append(valid / len(calls))
    return scores


schema_reward.__name__ = "schema"


def budget_reward(completions: Sequence[Completion], max_steps: int = 8, penalty: float = 0.25, **kwargs: Any) -> list[float]:
    """0.0 within `max_steps` tool calls, `-penalty` per call over it: a brake, never a bonus.

    Counts structured calls only; a leaked call is `format_reward`'s business.
    """
    overs = [max(0, len(tool_calls(c)) - max_steps) for c in completions]
    return [-penalty * over if over else 0.0 for over in overs]


budget_reward.__name__ = "budget"


@dataclass(frozen=True)
class TestsOutcome:
    """The tests reward of one completion and why; `sandbox` is None when nothing ran."""

    __test__ = False  # not a pytest test class, whatever its name says
    score: float
    passed: bool
    reason: str
    sandbox: SandboxResult | None = None
    flags: tuple[str, ...] = ()
    """The verifier's flags on the files written (`agentrl.rewards.verifier`); they do not change
    the score."""


def tests_outcomes(
    completions: Sequence[Completion],
    workspace: Any = None,
    test_command: Any = None,
    protected: Any = None,
    *,
    writable: Any = None,
    answer_keys: Any = None,
    boundary: Any = None,
    held_out: Any = None,
    workers: int | None = None,
    limits: SandboxLimits | None = None,
    temp_root: Path | None = None,
) -> list[TestsOutcome]:
    """Run each completion's files against its workspace's tests, `workers` sandboxes at a time
    (default: one per core). Columns may be single values or one entry per completion;
    `writable` (the task's allow-list of paths an attempt may write) and `answer_keys` (a
    directory of answer keys the test process alone receives) may be None for a row; `boundary`
    ("process", the default, or "none" for a suite that needs the solution's live objects in the
    test process, a weaker reward: `agentrl.sandbox.run_tests`) may be None for a row."""
    n = len(completions)
    if workspace is None or test_command is None:
        raise ValueError("tests_reward needs the dataset columns 'workspace' and 'test_command' (and 'protected'); see agentrl.coding_tasks.dataset_rows")
    workspaces = _per_row(workspace, n, lambda v: isinstance(v, (str, Path)), "workspace")
    commands = _per_row(test_command, n, _is_str_list, "test_command")
    protected_paths = _per_row(protected or [], n, _is_str_list, "protected")
    allow_lists = _per_row(writable, n, lambda v: v is None or _is_str_list(v), "writable")
    keys = _per_row(answer_keys, n, lambda v: v is None or isinstance(v, (str, Path)), "answer_keys")
    boundaries = _per_row(boundary, n, lambda v: v is None or v in ("process", "none"), "boundary")
    hidden = _per_row(held_out, n, lambda v: v is None or isinstance(v, (str, Path, dict)), "held_out")
    limits = limits or SandboxLimits()

    def one(i: int) -> TestsOutcome:
        files = written_files(completions[i])
        if not files:
            return TestsOutcome(score=0.0, passed=False, reason="no files written")
        flags = tuple(hack_flags(files))
        result = run_tests(Path(workspaces[i]), files, list(commands[i]), list(protected_paths[i]), limits,
                           temp_root=temp_root, writable=allow_lists[i], answer_keys=keys[i],
                           boundary=boundaries[i] or "process", held_out=hidden[i])
        return TestsOutcome(score=1.0 if result.passed else 0.0, passed=result.passed, reason=result.reason, sandbox=result,
                            flags=flags)

    workers = max(1, min(workers or os.cpu_count() or 1, n or 1))
    if workers == 1:
        return [one(i) for i in range(n)]
    # Threads suffice: each one waits on a sandboxed subprocess, which is where the work is.
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandbox") as pool:
        return list(pool.map(one, range(n)))


def tests_reward(completions: Sequence[Completion], workspace: Any = None, test_command: Any = None, protected: Any = None, **kwargs: Any) -> list[float]:
    """1.0 when the workspace's tests pass with the completion's ```file:PATH blocks written into
    a sandbox copy, else 0.0: no files, a refused path (absolute, `..`, a protected test) or a
    failing run all score 0, and so does merely claiming success."""
    return [o.score for o in tests_outcomes(completions, workspace, test_command, protected)]


tests_reward.__name__ = "tests"
tests_reward.__test__ = False  # type: ignore[attr-defined]  # pytest would collect it by its name
tests_outcomes.__test__ = False  # type: ignore[attr-defined]


class TestsReward:
    """`tests_reward` with its pool size, sandbox limits and temp root bound (picklable, unlike a
    closure); TRL logs it as `rewards/tests/mean`."""

    __test__ = False  # not a pytest test class, whatever its name says
    __name__ = "tests"

    def __init__(self, workers: int | None = None, limits: SandboxLimits | None = None, temp_root: Path | None = None):
        self.workers = workers
        self.limits = limits
        self.temp_root = temp_root

    def outcomes(self, completions: Sequence[Completion], workers: int | None = None, **columns: Any) -> list[TestsOutcome]:
        return tests_outcomes(
            completions,
            columns.get("workspace"),
            columns.get("test_command"),
            columns.get("protected"),
            writable=columns.get("writable"),
            answer_keys=columns.get("answer_keys"),
            boundary=columns.get("boundary"),
            workers=workers or self.workers,
            limits=self.limits,
            temp_root=self.temp_root,
        )

    def __call__(self, completions: Sequence[Completion], **columns: Any) -> list[float]:
        return [o.score for o in self.outcomes(completions, **columns)]


class HeldOutReward(TestsReward):
    """The tests reward with the task's held-out tests added (the dataset column `held_out`: a
    directory of test files, or path -> content), which the policy never sees: they are written
    into the sandbox copy after the attempt's files. Give it weight 0 to log it as a component of
    its own beside `tests` (`RewardFunctions`); an attempt that special-cases the visible cases
    passes `tests` and fails this one, and the gap between the two pass rates is the monitor's
    `test_gap`. A row without held-out tests runs the visible suite alone."""

    __name__ = "held_out"

    def outcomes(self, completions: Sequence[Completion], workers: int | None = None, **columns: Any) -> list[TestsOutcome]:
        return tests_outcomes(
            completions,
            columns.get("workspace"),
            columns.get("test_command"),
            columns.get("protected"),
            writable=columns.get("writable"),
            answer_keys=columns.get("answer_keys"),
            boundary=columns.get("boundary"),
            held_out=columns.get("held_out"),
            workers=workers or self.workers,
            limits=self.limits,
            temp_root=self.temp_root,
        )


class BudgetReward:
    """`budget_reward` with `max_steps` and `penalty` bound, so dataset columns cannot shadow them."""

    __name__ = "budget"

    def __init__(self, max_steps: int = 8, penalty: float = 0.25):
        self.max_steps = max_steps
        self.penalty = penalty

    def __call__(self, completions: Sequence[Completion], **columns: Any) -> list[float]:
        return budget_reward(completions, max_steps=self.max_steps, penalty=self.penalty)


# ---------------------------------------------------------------------------------------------
# Bundles and scoring
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RewardFunctions:
    """A kind's reward functions and their weights, in the same order (TRL's `reward_funcs` and
    `GRPOConfig.reward_weights`)."""

    functions: list[RewardFunc]
    weights: list[float]

    @property
    def names(self) -> list[str]:
        return [f.__name__ for f in self.functions]

    def weight(self, name: str) -> float:
        return self.weights[self.names.index(name)]


def build_reward_functions(
    kind: str = "tests",
    weights: dict[str, float] | None = None,
    max_steps: int = 8,
    penalty: float = 0.25,
    workers: int | None = None,
    limits: SandboxLimits | None = None,
    held_out: bool = False,
) -> RewardFunctions:
    """The reward functions of `kind` with their weights (defaults `DEFAULT_WEIGHTS`; `weights`
    overrides some by name; `limits` bound the sandboxed test runs). Only 'tests' is defined:
    tests, format, budget, and with `held_out` (a task names held-out tests) `held_out` at weight
    0: logged as a component of its own, never paid, the other side of the monitor's `test_gap`."""
    if kind != "tests":
        raise ValueError(f"unknown reward kind {kind!r}; the agent-task rewards define kind 'tests'")
    if max_steps < 0 or penalty < 0:
        raise ValueError(f"max_steps and penalty must be >= 0 (got {max_steps}, {penalty}); the budget is a brake, not a bonus")
    merged = {**DEFAULT_WEIGHTS, **({"held_out": 0.0} if held_out else {})}
    unknown = set(weights or {}) - set(merged)
    if unknown:
        raise ValueError(f"unknown reward names {sorted(unknown)}; the 'tests' kind has {list(merged)}")
    merged.update(weights or {})
    functions: list[RewardFunc] = [TestsReward(workers=workers, limits=limits), format_reward, BudgetReward(max_steps, penalty)]
    if held_out:
        functions.append(HeldOutReward(workers=workers, limits=limits))
    return RewardFunctions(functions=functions, weights=[merged[f.__name__] for f in functions])


@dataclass(frozen=True)
class ScoredCompletion:
    """Every reward component of one completion (by function name), the weighted total, and
    whether and why its tests passed, as stored per trajectory."""

    components: dict[str, float]
    reward: float
    passed: bool
    reason: str
    sandbox: SandboxResult | None = field(default=None, compare=False)
    flags: tuple[str, ...] = ()
    """The verifier's flags on the files written (`agentrl.rewards.verifier`)."""


def score_group(
    completions: Sequence[Completion],
    rows: Sequence[dict[str, Any]],
    workers: int | None = None,
    rewards: RewardFunctions | None = None,
) -> list[ScoredCompletion]:
    """Score completions (one dataset row each) with every function of `rewards` (default: the
    'tests' kind), the sandboxed runs `workers` at a time."""
    if len(completions) != len(rows):
        raise ValueError(f"{len(completions)} completions but {len(rows)} rows; give one row per completion")
    rewards = rewards or build_reward_functions(workers=workers, held_out=any(row.get("held_out") for row in rows))
    columns = {k: [row.get(k) for row in rows] for k in (rows[0] if rows else {}) if k not in _GRPO_RESERVED_COLUMNS}
    by_name: dict[str, list[float]] = {}
    outcomes: list[TestsOutcome] | None = None
    for function in rewards.functions:
        if isinstance(function, TestsReward):
            found = function.outcomes(completions, workers=workers, **columns)
            by_name[function.__name__] = [o.score for o in found]
            if outcomes is None or not isinstance(function, HeldOutReward):  # pass and reason: the visible tests'
                outcomes = found
        else:
            by_name[function.__name__] = [float(v) for v in function(completions, **columns)]
    scored = []
    for i in range(len(completions)):
        components = {name: values[i] for name, values in by_name.items()}
        total = sum(w * components[name] for name, w in zip(rewards.names, rewards.weights))
        outcome = outcomes[i] if outcomes is not None else None
        scored.append(
            ScoredCompletion(
                components=components,
                reward=total,
                passed=outcome.passed if outcome else False,
                reason=outcome.reason if outcome else "",
                sandbox=outcome.sandbox if outcome else None,
                flags=outcome.flags if outcome else (),
            )
        )
    return scored


def score_completion(completion: Completion, row: dict[str, Any], rewards: RewardFunctions | None = None) -> ScoredCompletion:
    """`score_group` for one completion."""
    return score_group([completion], [row], workers=1, rewards=rewards)[0]
