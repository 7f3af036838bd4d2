"""The scanners every run can use without writing one (`builtin:NAME`), and the task's own `verify`
as a scanner (`builtin:verify`), so it is scored against review decisions like any rule.

Loader (`builtin:NAME`) -> **builtin** -> scanner. The four the field expects (reward_scope's
alarms, per trajectory here, each citing what decided it):
- `dominant_component`: one reward component holds at least 90% of the absolute reward;
- `reward_spike`: the reward is more than 3 standard deviations above its step's mean (needs the
  step's rewards: a stored run's; a run scoring one rollout at a time has none, so no hit);
- `repeated_call`: the same tool called with the same arguments more than once;
- `schema_arguments`: a call's arguments break the tool's JSON Schema (`agentrl.rewards.argument_errors`,
  jsonschema; each schema from the tool's signature, as transformers' `get_json_schema` writes it).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable

from agentrl.scan.scanner import NO_HIT, ScanError, Scanner, ScanResult, code_scanner
from agentrl.scan.trajectory import Trajectory

DOMINANT_SHARE = 0.9
SPIKE_SIGMAS = 3.0
SPIKE_MIN_BATCH = 4


def dominant_component(trajectory: Trajectory) -> ScanResult:
    """One reward component holds at least 90% of the trajectory's absolute reward (two or more recorded)."""
    terms = {k: abs(v) for k, v in trajectory.components.items()}
    total = sum(terms.values())
    if len(terms) < 2 or total <= 0:
        return NO_HIT
    name, biggest = max(terms.items(), key=lambda item: item[1])
    share = biggest / total
    if share < DOMINANT_SHARE:
        return NO_HIT
    return ScanResult(True, f"component {name!r} is {share:.0%} of the reward ({trajectory.components[name]:+.3f})")


def reward_spike(trajectory: Trajectory) -> ScanResult:
    """The reward is more than 3 standard deviations above the mean of its step's rewards."""
    batch = trajectory.step_rewards or []
    if trajectory.reward is None or len(batch) < SPIKE_MIN_BATCH:
        return NO_HIT
    mean, spread = statistics.fmean(batch), statistics.pstdev(batch)
    if spread <= 0 or (trajectory.reward - mean) / spread <= SPIKE_SIGMAS:
        return NO_HIT
    return ScanResult(True, f"reward {trajectory.reward:.3f} is {(trajectory.reward - mean) / spread:.1f} sd above "
                            f"its step's mean {mean:.3f}")


def repeated_call(trajectory: Trajectory) -> ScanResult:
    """The same tool called with the same arguments more than once."""
    seen: dict[str, int] = {}
    for item in trajectory.calls():
        key = item.searchable()
        if key in seen:
            return ScanResult(True, f"{key:.100} called again (first at item {seen[key]})", (seen[key], item.index))
        seen[key] = item.index
    return NO_HIT


_JSON = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", tuple: "array", dict: "object"}


def _json_schema(hint) -> dict:
    """A parameter's JSON Schema from its type hint, as transformers' `get_json_schema` (which TRL
    renders tools with) writes it for the types a tool may take (`agentrl.tasks.loader` checks
    them); written here so a scan loads neither transformers nor torch."""
    import enum
    import types
    import typing

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        options = [_json_schema(a) for a in args if a is not type(None)]
        schema = options[0] if len(options) == 1 else {"anyOf": options}
        return {**schema, "nullable": True} if type(None) in args and "type" in schema else schema
    if origin in (list, tuple):
        return {"type": "array", **({"items": _json_schema(args[0])} if args and args[0] is not Ellipsis else {})}
    if origin is dict:
        return {"type": "object"}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    return {"type": _JSON[hint]} if hint in _JSON else {}


def _tool_schemas(task) -> dict[str, dict]:
    """Parameters schema by tool name, from the tools' signatures and type hints."""
    import inspect
    import typing

    from agentrl.tasks.contract import tool_methods, tool_names

    cached = getattr(task, "_scan_tool_schemas", None)
    if cached is None:
        environment = task.environment_factory()
        cached = {}
        for name, method in zip(tool_names(environment), tool_methods(environment)):
            hints = typing.get_type_hints(method)
            parameters = [p for p in inspect.signature(method).parameters.values() if p.name in hints]
            cached[name] = {"type": "object", "properties": {p.name: _json_schema(hints[p.name]) for p in parameters},
                            "required": [p.name for p in parameters if p.default is inspect.Parameter.empty]}
        try:
            task._scan_tool_schemas = cached
        except AttributeError:
            pass
    return cached


def schema_arguments(trajectory: Trajectory) -> ScanResult:
    """A call names no tool of the task, or its arguments break the tool's JSON Schema."""
    from agentrl.rewards import argument_errors

    if trajectory.task is None:
        return NO_HIT
    schemas = _tool_schemas(trajectory.task)
    for item in trajectory.calls():
        if item.name not in schemas:
            return ScanResult(True, f"call to {item.name!r}, which is no tool of the task", (item.index,))
        errors = argument_errors(dict(item.arguments or {}), schemas[item.name])
        if errors:
            return ScanResult(True, f"{item.name}: {errors[0]}", (item.index,))
    return NO_HIT


def verify(trajectory: Trajectory) -> ScanResult:
    """The task's own `verify`: a hit when it flags a violation. A stored trajectory is replayed
    through the task first (its dataset row, its tool calls), as the gate replays fixtures."""
    task = trajectory.task
    if task is None:
        raise ScanError("builtin:verify needs the run's task; the run names none")
    environment, completion = trajectory.environment, None
    if environment is None:
        from agentrl.tasks.replay import ReplayError, find_row, recorded_calls, replay

        row = find_row(task, str(trajectory.task_id))
        if row is None:
            return ScanResult(False, f"no dataset row {trajectory.task_id!r} to replay")
        stored = trajectory.row or {}
        try:
            replayed = replay(task, row, recorded_calls(stored.get("completion"), trajectory.actions))
        except ReplayError as error:
            return ScanResult(False, f"not replayed: {error}")
        environment, completion = replayed.environment, replayed.completion
    verdict = task.verify(environment, completion)
    calls = trajectory.calls()
    return ScanResult(bool(verdict.violation), verdict.reason or ("violation" if verdict.violation else ""),
                      (calls[-1].index,) if verdict.violation and calls else ())


BUILTINS: dict[str, Callable[[Trajectory], ScanResult]] = {
    "dominant_component": dominant_component, "reward_spike": reward_spike, "repeated_call": repeated_call,
    "schema_arguments": schema_arguments, "verify": verify,
}


def builtin(name: str) -> Scanner:
    if name not in BUILTINS:
        raise ScanError(f"no built-in scanner {name!r}; use one of {sorted(BUILTINS)}")
    function = BUILTINS[name]
    scanner = code_scanner(function, name=name)
    return Scanner(scanner.name, scanner.version, scanner.kind, scanner.scan_fn, scanner.source, f"builtin:{name}")


def describe() -> str:
    return json.dumps({name: (f.__doc__ or "").split("\n")[0] for name, f in BUILTINS.items()}, indent=2)
