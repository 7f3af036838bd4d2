"""The one door a task comes through: `load_task("module:attr" | "path/to/file.py:attr" | "refund")`.

Launch form / CLI `--task` / run config -> **loader** -> `Task` -> engine. The built-in tasks
(`refund`, `coding`) come through the same door as a user's. Before anything starts, the loader
imports the object and checks it against the contract (`agentrl.tasks.contract`), and each way a
task can be wrong is one `TaskError` line that says what to change: a file or attribute that is
not there, a missing or uncallable field, a tool without a docstring or type hints (TRL builds
the tool's JSON schema from them), a reward function with the wrong signature or one that returns
the wrong number of values, rows without a `prompt`, a `reset` that cannot take the row's columns,
a `verify` whose result is not a verdict, decision points that name tools the environment lacks.

The checks build one environment, reset it on the first training row and call every reward
function and `verify` on two empty completions: cheap, and it is what TRL will do first. A loaded
task is cached by its spec and its file's modification time, so the Launch page can validate it
as the person types. Torch and TRL are never imported here.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import enum
import math
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrl.tasks.contract import Task, reward_name, tool_methods, tool_names

BUILTIN_TASKS: dict[str, str] = {
    "refund": "agentrl.tasks.refund.task:REFUND_TASK",
    "coding": "agentrl.tasks.coding.task:CODING_TASK",
}
"""Built-in tasks by name; each is an ordinary `module:attr` spec."""

# What TRL passes every reward function besides the dataset columns.
TRL_REWARD_ARGUMENTS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments")
PROBE_COMPLETION = [{"role": "assistant", "content": ""}]

_CACHE: dict[tuple[str, float | None], Task] = {}


class TaskError(ValueError):
    """A task that cannot be trained; the message is one line naming the task and what to change."""


def load_task(spec: str) -> Task:
    """The checked `Task` of `spec`; raises `TaskError` (one line) when it cannot be trained."""
    if not isinstance(spec, str) or not spec.strip():
        raise TaskError("no task given; use a built-in name " f"({', '.join(BUILTIN_TASKS)}), 'module:attr' or 'path/to/file.py:attr'")
    spec = spec.strip()
    key = (spec, _mtime(spec))
    if key in _CACHE:
        return _CACHE[key]
    task = _as_task(_resolve(spec), spec)
    try:
        check_task(task)
    except TaskError as error:
        raise TaskError(_one_line(f"task {spec!r}: {error}")) from None
    _CACHE[key] = task
    return task


def task_error(spec: str) -> str | None:
    """The one-line reason `spec` cannot be trained, or None when it can."""
    try:
        load_task(spec)
    except TaskError as error:
        return str(error)
    return None


def absolute_spec(spec: str) -> str:
    """`spec` with a relative file path made absolute (a run process may start elsewhere)."""
    target, sep, attr = spec.strip().rpartition(":")
    if sep and _is_file_spec(target):
        return f"{Path(target).expanduser().resolve()}:{attr}"
    return spec.strip()


# -- finding the object ---------------------------------------------------------------------------


def _is_file_spec(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def _mtime(spec: str) -> float | None:
    target, _, _ = spec.rpartition(":")
    if target and _is_file_spec(target):
        try:
            return Path(target).expanduser().stat().st_mtime
        except OSError:
            return None
    return None


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _resolve(spec: str) -> Any:
    target_spec = BUILTIN_TASKS.get(spec, spec)
    target, sep, attr = target_spec.rpartition(":")
    if not sep or not target or not attr:
        raise TaskError(f"task {spec!r} is not a task reference; use a built-in name ({', '.join(BUILTIN_TASKS)}), "
                        "'module:attr' or 'path/to/file.py:attr'")
    if not all(part.isidentifier() for part in attr.split(".")):
        raise TaskError(f"task {spec!r}: {attr!r} is not an attribute name; write the name of the Task object after the colon")
    module = _import_file(spec, target) if _is_file_spec(target) else _import_module(spec, target)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            found = sorted(n for n, v in vars(module).items() if isinstance(v, Task))
            hint = f"; it defines {', '.join(found)}" if found else "; define a Task object there"
            raise TaskError(f"task {spec!r}: {target} has no attribute {part!r}{hint}")
        obj = getattr(obj, part)
    if inspect.isfunction(obj):  # a factory, as entry points often are
        try:
            obj = obj()
        except Exception as error:
            raise TaskError(_one_line(f"task {spec!r}: {attr}() raised {type(error).__name__}: {error}")) from None
    return obj


def _import_file(spec: str, target: str):
    path = Path(target).expanduser()
    if not path.exists():
        raise TaskError(f"task {spec!r}: the file {str(path)!r} does not exist")
    if not path.is_file():
        raise TaskError(f"task {spec!r}: {str(path)!r} is not a file; give the path of a .py file")
    path = path.resolve()
    # One module name per file (and version), so two task files never shadow each other and an
    # edited file is imported afresh.
    name = "agentrl_task_" + hashlib.sha1(f"{path}:{path.stat().st_mtime_ns}".encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise TaskError(f"task {spec!r}: {str(path)!r} cannot be imported as Python")
    module = importlib.util.module_from_spec(module_spec)
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))  # so the file can import its neighbours
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except SyntaxError as error:
        del sys.modules[name]
        raise TaskError(f"task {spec!r}: {path.name} line {error.lineno}: SyntaxError: {error.msg}") from None
    except Exception as error:
        del sys.modules[name]
        raise TaskError(_one_line(f"task {spec!r}: importing {path.name} raised {type(error).__name__}: {error}")) from None
    return module


def _import_module(spec: str, target: str):
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as error:
        if error.name and (target == error.name or target.startswith(error.name + ".")):
            raise TaskError(f"task {spec!r}: no module named {target!r}; give an importable module or a path/to/file.py") from None
        raise TaskError(_one_line(f"task {spec!r}: importing {target} raised ModuleNotFoundError: {error}")) from None
    except SyntaxError as error:
        raise TaskError(f"task {spec!r}: {Path(error.filename or target).name} line {error.lineno}: SyntaxError: {error.msg}") from None
    except Exception as error:
        raise TaskError(_one_line(f"task {spec!r}: importing {target} raised {type(error).__name__}: {error}")) from None


def _as_task(obj: Any, spec: str) -> Task:
    """A `Task`, or any object with the contract's attributes wrapped into one."""
    if isinstance(obj, Task):
        return obj
    missing = [a for a in ("environment_factory", "reward_funcs", "train_dataset") if not hasattr(obj, a)]
    if missing:
        raise TaskError(f"task {spec!r}: the object is a {type(obj).__name__}, not a Task: it has no {', '.join(missing)}; "
                        "build it with agentrl.tasks.Task(...)")
    optional = {k: getattr(obj, k) for k in ("eval_dataset", "verify", "reward_weights", "decision_points", "exploit_probes",
                                             "violation_penalty", "description", "trajectory_fields", "sandbox_bytes", "demonstrations", "default_model",
                                             "fixture_matches")
                if getattr(obj, k, None) is not None}
    return Task(name=str(getattr(obj, "name", spec.rpartition(":")[2])), environment_factory=obj.environment_factory,
                reward_funcs=obj.reward_funcs, train_dataset=obj.train_dataset, **optional)


# -- checking it against the contract ---------------------------------------------------------


def _call(what: str, function: Callable, *args: Any, **kwargs: Any) -> Any:
    try:
        return function(*args, **kwargs)
    except TaskError:
        raise
    except Exception as error:
        raise TaskError(_one_line(f"{what} raised {type(error).__name__}: {error}")) from None


def check_task(task: Task) -> None:
    """Every check of the contract, in the order a person would fix them; raises `TaskError`."""
    if not isinstance(task.name, str) or not task.name.strip():
        raise TaskError("name must be a non-empty string")
    environment = _check_environment(task)
    functions = _check_reward_funcs(task)
    train = _check_rows(task.train_dataset, "train_dataset()")
    _check_rows(task.eval_dataset, "eval_dataset()")
    _check_verify_signature(task)
    _reset(environment, train[0])
    _probe_rewards(task, functions, train[0], environment)
    _check_decision_points(task, environment)
    probes = _call("exploit_probes()", task.exploit_probes)
    for i, row in enumerate(probes):
        _check_row(row, i, "exploit_probes()")
    if task.fixture_match is not None and not callable(task.fixture_match):
        raise TaskError("fixture_matches must be a function (fixture_behaviour, behaviour) -> bool")
    if isinstance(task.violation_penalty, bool) or not isinstance(task.violation_penalty, (int, float)) or not math.isfinite(task.violation_penalty):
        raise TaskError(f"violation_penalty must be a finite number, not {task.violation_penalty!r}")


def _check_environment(task: Task) -> Any:
    factory = task.environment_factory
    if not callable(factory):
        raise TaskError(f"environment_factory must be a class or a function with no arguments, not {type(factory).__name__}")
    try:
        inspect.signature(factory).bind()
    except TypeError:
        raise TaskError(f"environment_factory {getattr(factory, '__name__', factory)!r} must take no arguments; "
                        "TRL calls environment_factory() once per rollout (use functools.partial for settings)") from None
    except ValueError:
        pass  # a builtin without a signature; calling it tells
    environment = _call("environment_factory()", factory)
    kind = type(environment).__name__
    if not callable(getattr(environment, "reset", None)):
        raise TaskError(f"the environment {kind} has no reset(**row) method; TRL starts every rollout with it")
    names = tool_names(environment)
    if not names:
        raise TaskError(f"the environment {kind} has no tools; its public methods (other than reset) are the tools")
    for name, method in zip(names, tool_methods(environment)):
        _check_tool(name, method, kind)
    return environment


# The Google-style "Args:" block as transformers' `get_json_schema` (which TRL calls) reads it;
# copied so that checking a task loads neither transformers nor torch.
_ARGS_BLOCK = re.compile(r"\n\s*Args:\n(.*?)[\n\s]*(Returns:|Raises:|\Z)", re.DOTALL)
_ARG_LINE = re.compile(r"(?:^|\n)([ \t]*)(\w+):\s*(.*?)\s*(?=\n(?!\1[ \t])[ \t]*\w+:|\Z)", re.DOTALL)
_JSON_TYPES = (str, int, float, bool, list, dict, tuple, type(None), Any)


def _json_type(hint: Any) -> bool:
    """Whether TRL can write `hint` into a tool's JSON schema (basic types, Literal, Enum, and
    list/tuple/dict/Union of them)."""
    origin = typing.get_origin(hint)
    if origin is None:
        return hint in _JSON_TYPES or (isinstance(hint, type) and issubclass(hint, enum.Enum))
    if origin is typing.Literal:
        return True
    return origin in (list, dict, tuple, typing.Union, types.UnionType) and all(
        _json_type(a) for a in typing.get_args(hint) if a is not Ellipsis)


def _check_tool(name: str, method: Callable, kind: str) -> None:
    doc = inspect.getdoc(method)
    if not doc:
        raise TaskError(f"tool {name!r} of {kind} has no docstring; TRL shows it to the model as the tool's description "
                        "(a summary line, then 'Args:' with one line per parameter)")
    block = _ARGS_BLOCK.search("\n" + doc)
    described = {m[1] for m in _ARG_LINE.findall("\n".join(l for l in block.group(1).split("\n") if l.strip()))} if block else set()
    try:
        hints = typing.get_type_hints(method)
    except Exception as error:
        raise TaskError(_one_line(f"the type hints of tool {name!r} of {kind} cannot be read ({type(error).__name__}: {error})")) from None
    for parameter in inspect.signature(method).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TaskError(f"tool {name!r} of {kind} takes *{parameter.name}; a tool's parameters must be named, typed and documented")
        if parameter.name not in hints:
            raise TaskError(f"parameter {parameter.name!r} of tool {name!r} of {kind} has no type hint; "
                            "TRL builds the tool's JSON schema from the hints")
        if not _json_type(hints[parameter.name]):
            raise TaskError(f"parameter {parameter.name!r} of tool {name!r} of {kind} is a {hints[parameter.name]!r}; "
                            "a tool takes JSON values: str, int, float, bool, Literal, Enum, or lists/dicts of them")
        if parameter.name not in described:
            raise TaskError(f"tool {name!r} of {kind} does not describe parameter {parameter.name!r}; add it under 'Args:' "
                            f"in its docstring ('{parameter.name}: what it is'), as TRL requires")


def _check_reward_funcs(task: Task) -> list[Callable]:
    functions = task.reward_funcs
    if not isinstance(functions, Sequence) or isinstance(functions, str) or not functions:
        raise TaskError("reward_funcs must be a non-empty list of functions")
    names = []
    for function in functions:
        if not callable(function):
            raise TaskError(f"reward_funcs holds {function!r}, which is not a function")
        name = reward_name(function)
        try:
            parameters = inspect.signature(function).parameters.values()
        except (TypeError, ValueError):
            parameters = []
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            raise TaskError(f"reward function {name!r} must accept **kwargs: TRL calls it as f(prompts=..., completions=..., "
                            "completion_ids=..., environments=..., <every dataset column>=...)")
        names.append(name)
    if "guard" in names:
        raise TaskError("a reward function is named 'guard', the name of the guarded scorer's own column; rename it")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise TaskError(f"reward function names must be unique (each is a stored reward component); repeated: {repeated}")
    weights = task.reward_weights
    if weights is not None:
        if not isinstance(weights, Sequence) or len(weights) != len(functions):
            count = len(weights) if isinstance(weights, Sequence) else type(weights).__name__
            raise TaskError(f"reward_weights has {count} weight(s) for {len(functions)} reward function(s); give one per function")
        for w in weights:
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w):
                raise TaskError(f"reward_weights must be finite numbers, not {w!r}")
    return list(functions)


def _check_row(row: Any, index: int, where: str) -> None:
    if not isinstance(row, Mapping):
        raise TaskError(f"row {index} of {where} is a {type(row).__name__}, not a dict of columns")
    if "prompt" not in row:
        raise TaskError(f"row {index} of {where} has no 'prompt' column (a string or a list of chat messages)")
    prompt = row["prompt"]
    if not isinstance(prompt, str) and not (isinstance(prompt, Sequence) and prompt
                                            and all(isinstance(m, Mapping) and "role" in m for m in prompt)):
        raise TaskError(f"row {index} of {where}: 'prompt' must be a string or a non-empty list of messages with a 'role'")


def _check_rows(method: Callable[[], list], where: str) -> list[dict]:
    rows = _call(where, method)
    if not rows:
        raise TaskError(f"{where} returned no rows")
    columns = None
    for i, row in enumerate(rows):
        _check_row(row, i, where)
        if columns is None:
            columns = set(row)
        elif set(row) != columns:
            raise TaskError(f"row {i} of {where} has columns {sorted(row)} but row 0 has {sorted(columns)}; every row needs the same columns")
    return rows


def _check_verify_signature(task: Task) -> None:
    try:
        inspect.signature(task.verifier).bind(object(), [])
    except TypeError:
        raise TaskError("verify must take (environment, completion) and return {'violation': bool, 'eligible': bool, 'reason': str}") from None
    except ValueError:
        pass


def _reset(environment: Any, row: dict) -> Any:
    try:
        inspect.signature(environment.reset).bind(**row)
    except TypeError as error:
        raise TaskError(f"reset() of {type(environment).__name__} cannot take the row's columns {sorted(row)} ({error}); "
                        "TRL calls reset(**row), so accept them or add **kwargs") from None
    except ValueError:
        pass
    observation = _call(f"reset() of {type(environment).__name__}", environment.reset, **row)
    if observation is not None and not isinstance(observation, str):
        raise TaskError(f"reset() of {type(environment).__name__} returned a {type(observation).__name__}; return a string (appended to the user message) or None")
    return observation


def _probe_rewards(task: Task, functions: list[Callable], row: dict, environment: Any) -> None:
    """Call every reward function and `verify` on two empty completions, as TRL calls them."""
    second = _call("environment_factory()", task.environment_factory)
    _reset(second, row)
    environments = [environment, second]
    columns = {k: [v, v] for k, v in row.items() if k != "prompt"}
    arguments = dict(prompts=[row["prompt"]] * 2, completions=[PROBE_COMPLETION] * 2, completion_ids=[[], []],
                     trainer_state=None, log_extra=lambda *a, **k: None, log_metric=lambda *a, **k: None,
                     environments=environments, **columns)
    for function in functions:
        name = reward_name(function)
        required = [p.name for p in inspect.signature(function).parameters.values()
                    if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        unknown = [p for p in required if p not in arguments]
        if unknown:
            raise TaskError(f"reward function {name!r} requires {unknown}, which TRL does not pass (it passes "
                            f"{list(TRL_REWARD_ARGUMENTS)} and the dataset columns {sorted(columns)})")
        values = _call(f"reward function {name!r} on an empty completion", function, **arguments)
        if not isinstance(values, Sequence) or isinstance(values, (str, bytes)):
            raise TaskError(f"reward function {name!r} returned a {type(values).__name__}; return a list with one float (or None) per completion")
        if len(values) != 2:
            raise TaskError(f"reward function {name!r} returned {len(values)} value(s) for 2 completions; return one float (or None) per completion")
        for value in values:
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise TaskError(f"reward function {name!r} returned {value!r}; each value must be a float or None")
    for env in environments:
        try:
            task.verify(env, PROBE_COMPLETION)
        except TypeError as error:
            raise TaskError(str(error)) from None
        except Exception as error:
            raise TaskError(_one_line(f"verify raised {type(error).__name__}: {error}")) from None
    if task.trajectory_fields is not None:
        if not callable(task.trajectory_fields):
            raise TaskError("trajectory_fields must be a function of the environment")
        fields = _call("trajectory_fields(environment)", task.trajectory_fields, environment)
        kinds = {"states": list, "actions": list, "amount": int, "duplicate_effect": bool}
        if not isinstance(fields, Mapping) or set(fields) - set(kinds):
            raise TaskError(f"trajectory_fields must return a dict with some of {list(kinds)}, not {fields!r:.80}")
        for key, value in fields.items():
            if value is not None and not isinstance(value, kinds[key]):
                raise TaskError(f"trajectory_fields' {key!r} must be a {kinds[key].__name__}, not {value!r:.80}")


def _check_decision_points(task: Task, environment: Any) -> None:
    points = _call("decision_points", task.decisions)
    tools = set(tool_names(environment))
    for name, point in points.items():
        for label, call in point.calls.items():
            tool = call.get("name")
            if tool not in tools:
                raise TaskError(f"decision point {name!r}: call {label!r} names tool {tool!r}, which the environment "
                                f"{type(environment).__name__} does not have (its tools: {sorted(tools)})")
            if not isinstance(call.get("arguments", {}), Mapping):
                raise TaskError(f"decision point {name!r}: the arguments of call {label!r} must be a dict")

