"""The Task contract: what a task is, in TRL's own shapes, plus what review needs.

A task (a user's, or the built-in refund and coding tasks) -> **contract** -> loader -> engine.
A task is one `Task` object:

- `environment_factory`: a TRL environment class (or any zero-argument callable returning one):
  `reset(**row)` starts a rollout from a dataset row and may return text appended to the user
  message; its public methods, each with type hints and a Google-style docstring, are the tools;
- `reward_funcs` and `reward_weights`: functions in TRL's signature, `f(prompts, completions,
  completion_ids, environments, **columns) -> list[float | None]`, one value per completion;
- `train_dataset()` / `eval_dataset()`: rows (dicts) with a `prompt` and whatever `reset` reads;
- `verify(environment, completion) -> Verdict`: the guard's flags, `{violation, eligible,
  reason}`, read from the environment's private state (never from what the model said);
- `decision_points` (optional): named conversation prefixes where the next-tool distribution is
  recorded every step, the language model's sensitive states;
- `exploit_probes()` (optional): rows the run plays greedily at its end, for the promotion gate;
- `demonstrations()` (optional): complete conversations to warm-start a tiny model on;
- `behaviour(environment, completion) -> str` (optional): what a rollout did, said better than the
  default (its tool calls' names joined by " > ", `agentrl.record.behaviour`): the Behaviours view,
  review by behaviour and the gate's coverage group rollouts by it.
- `fixture_matches(fixture_behaviour, behaviour) -> bool` (optional): whether a rollout repeats a
  stored exploit fixture (default: equal behaviour); a guarded run vetoes every rollout that
  repeats a fixture of its task (`agentrl.scorers`), and the gate replays fixtures through
  `environment_factory`, the reward functions and `verify` (`agentrl.tasks.replay`).

The scorers (`agentrl.scorers`) are the same for every task: `outcome` pays the weighted sum of
the reward functions; `guarded` adds the verdict's penalties and vetoes what is not eligible.
Nothing here imports torch or TRL; `agentrl.tasks.loader` checks a task before anything runs.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentrl.record.behaviour import clip, default_behaviour
from agentrl.scorers import called_tools  # noqa: F401  (part of the task contract's API)
from typing import Any

Message = dict[str, Any]
Row = dict[str, Any]

DEFAULT_VIOLATION_PENALTY = 1.0


@dataclass(frozen=True)
class Verdict:
    """What `verify` says about one rollout.

    `violation`: the rollout broke a rule (counted in the violation rate, shown as a flag).
    `eligible`: whether the guarded scorer lets it teach; a violation is usually not eligible.
    `reason`: one line a reviewer reads. `success` (optional): whether the task was done; when
    None, a rollout succeeds when its weighted reward is above 0. `penalties` (optional): named
    reward terms the guarded scorer adds (negative numbers); when empty, a violation costs the
    task's `violation_penalty`.
    """

    violation: bool
    eligible: bool
    reason: str = ""
    success: bool | None = None
    penalties: Mapping[str, float] = field(default_factory=dict)

    KEYS = ("violation", "eligible", "reason", "success", "penalties")

    @classmethod
    def of(cls, value: Any) -> Verdict:
        """A `Verdict` from what `verify` returned: a Verdict or a mapping with its keys."""
        if isinstance(value, Verdict):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(f"verify must return a dict with 'violation', 'eligible' and 'reason' (or a Verdict), not {type(value).__name__}")
        missing = [k for k in ("violation", "eligible") if k not in value]
        if missing:
            raise TypeError(f"verify's result has no {' or '.join(repr(k) for k in missing)}; return {{'violation': bool, 'eligible': bool, 'reason': str}}")
        unknown = sorted(set(value) - set(cls.KEYS))
        if unknown:
            raise TypeError(f"verify's result has unknown key(s) {unknown}; use only {list(cls.KEYS)}")
        for key in ("violation", "eligible"):
            if not isinstance(value[key], bool):
                raise TypeError(f"verify's {key!r} must be True or False, not {value[key]!r}")
        success = value.get("success")
        if success is not None and not isinstance(success, bool):
            raise TypeError(f"verify's 'success' must be True, False or None, not {success!r}")
        penalties = dict(value.get("penalties") or {})
        for name, amount in penalties.items():
            if not isinstance(name, str) or isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount):
                raise TypeError(f"verify's penalties must map names to finite numbers, not {name!r}: {amount!r}")
        return cls(value["violation"], value["eligible"], str(value.get("reason") or ""), success,
                   {k: float(v) for k, v in penalties.items()})

    def penalty_terms(self, default_penalty: float) -> dict[str, float]:
        """The reward terms the guarded scorer adds for this verdict."""
        if self.penalties:
            return dict(self.penalties)
        return {"violation_penalty": -abs(default_penalty) if self.violation else 0.0}


def never_violates(environment: Any, completion: Any) -> Verdict:
    """The verify of a task without rules: every rollout is eligible."""
    return Verdict(violation=False, eligible=True, reason="")


@dataclass(frozen=True)
class DecisionPoint:
    """A named place in a conversation where the policy's next tool call is recorded every step.

    `conversations`: one or more prefixes (the prompt with the observation `reset` appends, then
    assistant tool calls and tool results); the distribution is averaged over them. `calls`:
    the candidate next calls, label -> `{"name": tool, "arguments": {...}}`; empty: every tool
    with no arguments. The distribution is over the candidates (each complete call scored by the
    model, then normalised).
    """

    name: str
    conversations: tuple[tuple[Message, ...], ...]
    calls: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, value: Any) -> DecisionPoint:
        if isinstance(value, DecisionPoint):
            return value
        if isinstance(value, Mapping) and "conversations" in value:
            conversations, calls = value["conversations"], value.get("calls") or {}
        else:
            conversations, calls = value, {}
        if not isinstance(conversations, Sequence) or isinstance(conversations, str) or not conversations:
            raise TypeError(f"decision point {name!r} must be a conversation (a list of messages) or a list of them")
        if all(isinstance(m, Mapping) for m in conversations):
            conversations = [conversations]
        normalised = []
        for conversation in conversations:
            if (not isinstance(conversation, Sequence) or not conversation
                    or not all(isinstance(m, Mapping) and "role" in m for m in conversation)):
                raise TypeError(f"decision point {name!r}: each conversation must be a non-empty list of messages with a 'role'")
            normalised.append(tuple(dict(m) for m in conversation))
        if not isinstance(calls, Mapping):
            raise TypeError(f"decision point {name!r}: calls must map a label to {{'name': tool, 'arguments': {{...}}}}")
        return cls(str(name), tuple(normalised), {str(k): dict(v) for k, v in calls.items()})


def _rows(value: Any, where: str) -> list[Row]:
    rows = value() if callable(value) else value
    if hasattr(rows, "to_list") and not isinstance(rows, list):  # a datasets.Dataset
        rows = rows.to_list()
    if not isinstance(rows, Sequence) or isinstance(rows, (str, bytes)):
        raise TypeError(f"{where} must return a list of rows (dicts), not {type(rows).__name__}")
    return [dict(r) if isinstance(r, Mapping) else r for r in rows]


class Task:
    """A task to train on. Build one with keyword arguments; `agentrl.tasks.load_task` checks it.

    `train_dataset`, `eval_dataset` and `exploit_probes` may be lists of rows or functions that
    return them (or a `datasets.Dataset`); `verify` is a function `(environment, completion)`.
    `trajectory_fields(environment)` (optional) returns extra columns of a trajectory row
    (`states`, `actions`, `amount`, `duplicate_effect`; by default the actions are the tools
    called). `sandbox_bytes`: memory the task's tools use outside the trainer (sandboxed test
    runs), for the memory budget. `demonstrations()` (optional): complete conversations a tiny
    model can be cloned on (`python -m agentrl build-tiny-model --task ...`). `behaviour(environment,
    completion)` (optional) names what a rollout did (default: its tool calls). `default_model`
    (optional): the model folder a run uses when its config names none (the built-in tasks' tiny
    models); without one, such a run uses the built-in refund model.
    """

    def __init__(self, name: str, environment_factory: Callable[[], Any], reward_funcs: Sequence[Callable[..., list]],
                 train_dataset: Callable[[], Any] | Sequence[Row], eval_dataset: Callable[[], Any] | Sequence[Row] | None = None,
                 verify: Callable[[Any, Any], Any] | None = None, reward_weights: Sequence[float] | None = None,
                 decision_points: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
                 exploit_probes: Callable[[], Any] | Sequence[Row] = (), violation_penalty: float = DEFAULT_VIOLATION_PENALTY,
                 description: str = "", trajectory_fields: Callable[[Any], Mapping[str, Any]] | None = None,
                 sandbox_bytes: int = 0, demonstrations: Callable[[], list] | None = None,
                 default_model: str | Path | None = None, behaviour: Callable[[Any, Any], str] | None = None,
                 fixture_matches: Callable[[str, str], bool] | None = None):
        self.name = name
        self.environment_factory = environment_factory
        self.reward_funcs = list(reward_funcs) if isinstance(reward_funcs, Sequence) else reward_funcs
        self.train_rows = train_dataset
        self.eval_rows = eval_dataset
        self.verifier = verify or never_violates
        self.reward_weights = reward_weights
        self.decision_points = decision_points if decision_points is not None else {}
        self.exploit_probe_rows = exploit_probes
        self.violation_penalty = violation_penalty
        self.description = description
        self.trajectory_fields = trajectory_fields
        self.sandbox_bytes = sandbox_bytes
        self.demonstrations = demonstrations
        self.default_model = default_model
        self.behaviour_of = behaviour
        self.fixture_match = fixture_matches

    def __repr__(self) -> str:
        return f"Task({self.name!r})"

    # -- the contract as the engines call it ----------------------------------------------------

    def train_dataset(self) -> list[Row]:
        """The rows training samples from, each with a `prompt`."""
        return _rows(self.train_rows, f"task {self.name!r}: train_dataset")

    def eval_dataset(self) -> list[Row]:
        """The held-out rows played greedily during and after training (default: the train rows)."""
        if self.eval_rows is None:
            return self.train_dataset()
        return _rows(self.eval_rows, f"task {self.name!r}: eval_dataset")

    def exploit_probes(self) -> list[Row]:
        """Rows where a shortcut pays; the run plays them at its end and the gate admits no violation."""
        return _rows(self.exploit_probe_rows, f"task {self.name!r}: exploit_probes")

    def verify(self, environment: Any, completion: Any) -> Verdict:
        return Verdict.of(self.verifier(environment, completion))

    def behaviour(self, environment: Any, completion: Any, actions: Sequence[str]) -> str:
        """What the rollout did: the task's own `behaviour`, else its calls joined by " > "."""
        if self.behaviour_of is None:
            return default_behaviour(actions)
        said = self.behaviour_of(environment, completion)
        if not isinstance(said, str):
            raise TypeError(f"task {self.name!r}: behaviour must return a str, not {type(said).__name__}")
        return clip(said)

    def matches_fixture(self, fixture_behaviour: str, behaviour: str) -> bool:
        """Whether a rollout of `behaviour` repeats the exploit fixture of `fixture_behaviour`: the
        task's own `fixture_matches`, else equal behaviours."""
        if self.fixture_match is None:
            return fixture_behaviour == behaviour
        return bool(self.fixture_match(fixture_behaviour, behaviour))

    def weights(self) -> list[float]:
        """One weight per reward function (default 1.0 each)."""
        if self.reward_weights is None:
            return [1.0] * len(self.reward_funcs)
        return [float(w) for w in self.reward_weights]

    def reward_names(self) -> list[str]:
        """The component name of each reward function (TRL names them by `__name__`)."""
        return [reward_name(f) for f in self.reward_funcs]

    def decisions(self) -> dict[str, DecisionPoint]:
        """The decision points by name."""
        points = self.decision_points() if callable(self.decision_points) else self.decision_points
        if isinstance(points, Sequence) and not isinstance(points, str):
            return {p.name: p for p in (DecisionPoint.of(getattr(p, "name", str(i)), p) for i, p in enumerate(points))}
        if not isinstance(points, Mapping):
            raise TypeError(f"task {self.name!r}: decision_points must map a name to a conversation prefix")
        return {str(name): DecisionPoint.of(name, value) for name, value in points.items()}


def reward_name(function: Callable) -> str:
    return getattr(function, "__name__", None) or type(function).__name__


def tool_names(environment: Any) -> list[str]:
    """The tools an environment offers, in the order TRL lists them: public functions of its class,
    alphabetical, without `reset` and `get_reward`."""
    return [name for name, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)
            if not name.startswith("_") and name not in ("reset", "get_reward")]


def tool_methods(environment: Any) -> list[Callable]:
    """The bound tool methods of an environment (what TRL renders as tool schemas)."""
    return [getattr(environment, name) for name in tool_names(environment)]


