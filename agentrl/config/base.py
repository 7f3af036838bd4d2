"""What every run config shares: the common fields, the refund task list type, and the one-line
error a config that cannot start a run turns into.

Launch -> **config** -> launcher. Each engine declares its own config class on top of `RunConfig`
(`agentrl/engines/<kind>/config.py`): a field that means something different per engine (`lr`
is a policy-gradient step size for the tabular engine and an AdamW learning rate for TRL) is
declared by that engine with its own help text. `agentrl.config` picks the class by `kind`.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentrl.tasks.refund.gym import STATES

CONFIG_SCHEMA_VERSION = 1


class ConfigError(ValueError):
    """A config that cannot start a run; the message says what to change, on one line.

    `problems` lists the fields at fault as a form names them (the Launch page shows those; the
    command line shows the message, which names the config keys)."""

    def __init__(self, message: str, problems: list[Problem] | None = None):
        super().__init__(message)
        self.problems = list(problems or [])


@dataclass(frozen=True)
class Problem:
    """One invalid field: its key path ('lm.tasks_per_step'), its label ('Tasks per step'), and
    what is wrong in words ('must be at least 1 (you entered 0)')."""

    path: str
    label: str
    message: str


# Every field's value is a plain JSON value; `strict` refuses `true` for an int and "3" for a
# float, and `allow_inf_nan=False` refuses NaN, so what validates is what the record can hold.
MODEL_CONFIG = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class TaskSpec(BaseModel):
    """One refund task of a taskset."""

    model_config = MODEL_CONFIG

    task_id: str = Field(min_length=1, max_length=200, description="Unique name of the task, shown in every table.")
    amount: int = Field(ge=0, le=2**31 - 1, description="Refund amount; above 50 is high-value and needs approval.")
    start_state: str = Field(default="start", description="State the episode starts in: 'start' or 'recover'.")

    @field_validator("start_state")
    @classmethod
    def _known_state(cls, value: str) -> str:
        if value not in STATES:
            raise ValueError(f"unknown state {value!r}; use one of {list(STATES)}")
        return value


def unique_task_ids(value: list[TaskSpec]) -> list[TaskSpec]:
    ids = [t.task_id for t in value]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"task ids must be unique; repeated: {dupes}")
    return value


class Settings(BaseModel):
    """A group of typed settings with human labels for forms and error messages."""

    model_config = MODEL_CONFIG
    #: Human labels of fields ("lr" -> "learning rate"); a field without one is its name in words.
    labels: ClassVar[dict[str, str]] = {}

    @classmethod
    def label(cls, name: str) -> str:
        return cls.labels.get(name, name.replace("_", " "))


class FixtureSpec(BaseModel):
    """An exploit fixture a run vetoes (`agentrl.scorers.FixtureRef`): its id and behaviour."""

    model_config = MODEL_CONFIG

    fixture_id: int = Field(ge=0, le=2**63 - 1, description="The fixture's id in the store (agentrl review fixtures).")
    behaviour: str = Field(min_length=1, max_length=1000, description="The behaviour a rollout must not repeat.")
    states: list[str] | None = Field(default=None, max_length=1000, description="The state before each of its actions, when its run recorded them: a rollout that also records states repeats it only through the same states.")


class ScannerSpec(BaseModel):
    """A scanner a run enforces (`agentrl.scan.enforce`): where it is loaded from, the version the run
    judges with, and its held-out figures against review decisions when the run was launched."""

    model_config = MODEL_CONFIG

    spec: str = Field(min_length=3, max_length=1000, description="PATH:NAME (a .py or .json file, or a module) or builtin:NAME.")
    version: str | None = Field(default=None, max_length=200, description="The rule's version; recorded at construction.")
    validation: dict[str, Any] | None = Field(default=None, description="Held-out precision, recall, F1 and label counts "
                                                                       "at launch (agentrl scan RUN --validate).")

    @model_validator(mode="before")
    @classmethod
    def _loads(cls, value: Any) -> Any:
        from agentrl.scan.loader import load_scanner
        from agentrl.scan.scanner import ScanError

        value = {"spec": value} if isinstance(value, str) else value
        if not isinstance(value, dict) or not isinstance(value.get("spec"), str):
            return value
        try:
            scanner = load_scanner(value["spec"])
        except ScanError as error:
            raise ValueError(str(error)) from None
        if value.get("version") is not None and not value["spec"].startswith("builtin:verify") \
                and str(value["version"]) != scanner.version:
            raise ValueError(f"scanner {value['spec']} is now version {scanner.version}, not {value['version']}; "
                             "remove the version to enforce the rule as it is now")
        where, name = value["spec"].rsplit(":", 1)
        if where.endswith((".py", ".json")):  # the run process may start elsewhere: the file by its absolute path
            from pathlib import Path

            value = {**value, "spec": f"{Path(where).resolve()}:{name}"}
        return {**value, "version": value.get("version") or scanner.version}


class RunConfig(Settings):
    """The fields every engine's config has. Subclasses set `kind` to a Literal and add their own."""

    schema_version: int = Field(default=CONFIG_SCHEMA_VERSION, ge=1, le=CONFIG_SCHEMA_VERSION, description="Version of this config format.")
    name: str = Field(default="run", min_length=1, max_length=80, description="Human name of the run; the run id is derived from it.")
    kind: str = Field(default="tabular", description="Engine that runs this config.")
    scorer: str = Field(default="outcome", description="Reward: 'outcome' (the task's own reward) or 'guarded' (penalties plus a veto on violations).")
    rounds: int = Field(default=30, gt=0, le=100_000, description="Training steps the run reports.")
    seed: int = Field(default=7, ge=0, le=2**63 - 1, description="Seed of the run; the only source of randomness.")
    step_delay: float = Field(default=0.0, ge=0, le=3600, description="Seconds to pause after each step, so a fast run can be watched live.")
    fixtures: list[FixtureSpec] | None = Field(
        default=None, max_length=10_000, json_schema_extra={"form": "hidden"},
        description="The exploit fixtures of this run's task the run flags (and, guarded, vetoes); empty: the fixtures "
                    "stored when the run is launched, written here then, so the run's config says which it used.")
    scanners: list[ScannerSpec] | None = Field(
        default=None, max_length=100, json_schema_extra={"form": "hidden"},
        description="Scanners the run enforces like exploit fixtures: each hit is flagged, and under 'guarded' "
                    "penalised (scanner_penalty:NAME) and vetoed.")

    @field_validator("scorer")
    @classmethod
    def _known_scorer(cls, value: str) -> str:
        from agentrl.scorers import SCORERS

        if value not in SCORERS:
            raise ValueError(f"unknown scorer {value!r}; use one of {sorted(SCORERS)}")
        return value

    @property
    def total_steps(self) -> int:
        """Steps the run will report (the Live page's 'step x of N')."""
        return self.rounds

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)



def _key(part: object) -> str:
    """A field path's part as the message shows it: a key a user typed with a newline or another
    control character in it is shown quoted and escaped, so the error stays one line."""
    text = str(part)
    return text if text.isprintable() else repr(text)


def one_line(error: ValidationError, config_type: type[BaseModel] | None = None) -> str:
    """A pydantic error as one line that names each field the way the form does."""
    parts = []
    for item in error.errors():
        loc = [_key(p) for p in item["loc"]]
        label = config_type.label(loc[0]) if (config_type is not None and loc and hasattr(config_type, "label")) else None
        where = (label + (f" ({'.'.join(loc)})" if label != ".".join(loc) else "")) if label else ".".join(loc) or "config"
        message = item["msg"].removeprefix("Value error, ")
        value = item.get("input")
        if item["type"] == "extra_forbidden":
            message = "unknown setting; remove it or check its spelling"
        elif isinstance(value, float) and not math.isfinite(value):
            message = f"must be a finite number (got {value!r})"
        elif not isinstance(value, (dict, list)) and "input" in item:
            message += f" (got {value!r})"
        parts.append(f"{where}: {message}")
    return "invalid run config: " + "; ".join(parts)


def _nested_type(model_type, name: str):
    """The Settings class of field `name` of `model_type` (for `X | None` too), or None."""
    field = getattr(model_type, "model_fields", {}).get(name)
    if field is None:
        return None
    for candidate in (field.annotation, *typing.get_args(field.annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _in_words(item: dict) -> str:
    """A pydantic error as a person reads it next to a form field."""
    ctx, kind, value = item.get("ctx") or {}, item["type"], item.get("input")
    said = {
        "greater_than": lambda: f"must be more than {ctx.get('gt')}",
        "greater_than_equal": lambda: f"must be at least {ctx.get('ge')}",
        "less_than": lambda: f"must be less than {ctx.get('lt')}",
        "less_than_equal": lambda: f"must be at most {ctx.get('le')}",
        "int_type": lambda: "must be a whole number",
        "int_from_float": lambda: "must be a whole number",
        "float_type": lambda: "must be a number",
        "string_too_short": lambda: "must not be empty",
        "extra_forbidden": lambda: "unknown setting; remove it or check its spelling",
    }.get(kind)
    message = said() if said else item["msg"].removeprefix("Value error, ")
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number (you entered {value!r})"
    if kind != "extra_forbidden" and value is not None and not isinstance(value, (dict, list)):
        message += f" (you entered {value!r})"
    return message


def problems(error: ValidationError, config_type: type[BaseModel]) -> list[Problem]:
    """Each invalid field of `error`, labelled as the Launch form labels it (nested settings too)."""
    found = []
    for item in error.errors():
        loc = [_key(p) for p in item["loc"]]
        owner, label = config_type, None
        for part in loc:
            if owner is None or not hasattr(owner, "label"):
                break
            label = owner.label(part)
            owner = _nested_type(owner, part)
        label = (label or ".".join(loc) or "config")
        found.append(Problem(".".join(loc), label[:1].upper() + label[1:], _in_words(item)))
    return found


def reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`json.loads` hook: a key given twice is an error, not a silent 'last one wins'."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ConfigError(f"the config gives {key!r} twice; keep one")
        seen[key] = value
    return seen
