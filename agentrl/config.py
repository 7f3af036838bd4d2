"""Run configuration: the typed, validated `RunConfig` every run starts from, and the presets.

Sits at the head of the flow (launch -> run process): the Launch page and the CLI build a
`RunConfig`, validation happens at construction, and nothing starts on an invalid one. The JSON
Schema in `schemas/run_config.schema.json` is generated from this module (`python -m agentrl
export-schema`); a test fails when the two drift.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .gym import STATES
from .scoring import SCORERS
from .tasks import EVAL_TASKS, EXPERT_TASKS, TRAIN_TASKS

CONFIG_SCHEMA_VERSION = 1
PRESETS_DIR = Path(__file__).parent / "presets"
SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "run_config.schema.json"


class ConfigError(ValueError):
    """A config that cannot start a run; the message says what to change, on one line."""


class TaskSpec(BaseModel):
    """One refund task of a taskset."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str = Field(min_length=1, description="Unique name of the task, shown in every table.")
    amount: int = Field(ge=0, description="Refund amount; above 50 is high-value and needs approval.")
    start_state: str = Field(default="start", description="State the episode starts in: 'start' or 'recover'.")

    @field_validator("start_state")
    @classmethod
    def _known_state(cls, value: str) -> str:
        if value not in STATES:
            raise ValueError(f"unknown state {value!r}; use one of {list(STATES)}")
        return value


LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class LMSettings(BaseModel):
    """Settings of the language-model engine (kind 'trl'); ignored by the other engines."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = Field(default=None, description="Local Hugging Face causal-LM directory with its tokenizer; empty: the built-in tiny model.")
    lora_rank: int = Field(default=8, ge=1, le=1024, description="LoRA rank r of the adapter.")
    lora_alpha: int = Field(default=16, ge=1, le=4096, description="LoRA alpha (scale = alpha / r).")
    lora_targets: list[str] = Field(default_factory=lambda: list(LORA_TARGETS), min_length=1, description="Projection modules that get an adapter, in every layer.")
    tasks_per_step: int = Field(default=2, ge=1, le=1024, description="Prompts (tasks) per optimiser step; each is sampled group_size times.")
    max_completion_length: int = Field(default=96, ge=8, le=32_768, description="Token limit of one rollout's completion (all turns).")
    max_tool_calls: int = Field(default=6, ge=1, le=100, description="Tool-calling turns allowed in one rollout.")
    temperature: float = Field(default=1.0, gt=0, le=10, description="Sampling temperature of rollouts.")
    beta: float = Field(default=0.0, ge=0, le=10, description="KL coefficient against the base model (adapter disabled); 0 turns the KL term off.")
    machine_memory_gb: float | None = Field(default=None, gt=0, le=100_000, description="Memory the budget may assume; empty: this machine's total memory.")


def _tasks(tasks) -> list[TaskSpec]:
    return [TaskSpec(task_id=t.task_id, amount=t.amount, start_state=t.start_state) for t in tasks]


class RunConfig(BaseModel):
    """Everything a run needs; the defaults are SPEC section 8's outcome-only run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = Field(default=CONFIG_SCHEMA_VERSION, description="Version of this config format.")
    name: str = Field(default="refund", min_length=1, max_length=80, description="Human name of the run; the run id is derived from it.")
    kind: Literal["tabular", "trl", "coding"] = Field(default="tabular", description="Engine: 'tabular' (the SPEC policy, seconds on a CPU), 'trl' (TRL GRPO with a LoRA adapter on a language model), 'coding' (score coding attempts with the sandboxed test runner).")
    scorer: str = Field(default="outcome", description="Reward: 'outcome' (success only) or 'guarded' (penalties plus a veto on violations); 'tests' for kind 'coding'.")
    rounds: int = Field(default=30, gt=0, le=100_000, description="Training rounds (one optimiser step of the dashboard each).")
    group_size: int = Field(default=8, ge=2, le=4096, description="Sampled rollouts per task per round; advantages need at least 2.")
    lr: float = Field(default=0.04, gt=0, le=100, description="Policy-gradient step size (tabular); AdamW learning rate (trl).")
    clip: float = Field(default=0.2, gt=0, le=10, description="Ratio clip: a step whose ratio leaves [1-clip, 1+clip] in the advantage's direction is skipped (TRL's epsilon for trl).")
    epochs: int = Field(default=2, ge=1, le=100, description="Passes over each round's batch (tabular only; trl takes one optimiser step per batch).")
    seed: int = Field(default=7, ge=0, description="Seed of the run's random.Random; the only source of randomness.")
    max_steps: int = Field(default=7, ge=1, le=1000, description="Turn limit of one episode.")
    dagger: bool = Field(default=False, description="Run one DAgger round on the cloned policy before RL (closes the recovery gap by imitation; tabular only).")
    clone_epochs: int = Field(default=40, ge=0, le=10_000, description="Behaviour-cloning epochs over the expert demonstrations (tabular only: the LM's warm start is built into its model).")
    clone_lr: float = Field(default=0.25, gt=0, le=100, description="Behaviour-cloning step size.")
    eval_every: int = Field(default=5, ge=0, description="Greedy held-out evaluation every N rounds (0: only before and after training).")
    step_delay: float = Field(default=0.0, ge=0, le=3600, description="Seconds to pause after each round, so a fast tabular run can be watched live.")
    sensitive_states: list[str] = Field(default_factory=lambda: ["known_high"], description="States whose action distribution is recorded every round.")
    tasks: list[TaskSpec] = Field(default_factory=lambda: _tasks(TRAIN_TASKS), min_length=1, description="Training tasks, sampled in this order every round.")
    eval_tasks: list[TaskSpec] = Field(default_factory=lambda: _tasks(EVAL_TASKS), min_length=1, description="Held-out tasks for greedy evaluation.")
    expert_tasks: list[TaskSpec] = Field(default_factory=lambda: _tasks(EXPERT_TASKS), min_length=1, description="Tasks the expert demonstrates for behaviour cloning.")
    lm: LMSettings = Field(default_factory=LMSettings, description="Language-model engine settings (kind 'trl' only).")
    workers: int | None = Field(default=None, ge=1, le=256, description="Parallel sandboxed test runs (kind 'coding'); empty: one per CPU core.")

    @field_validator("scorer")
    @classmethod
    def _known_scorer(cls, value: str) -> str:
        if value not in SCORERS and value != "tests":
            raise ValueError(f"unknown scorer {value!r}; use one of {sorted(SCORERS) + ['tests']}")
        return value

    @model_validator(mode="after")
    def _scorer_fits_kind(self) -> "RunConfig":
        if self.kind == "coding" and self.scorer != "tests":
            raise ValueError(f"kind 'coding' is scored by 'tests', not {self.scorer!r}; set scorer to 'tests'")
        if self.kind != "coding" and self.scorer == "tests":
            raise ValueError(f"scorer 'tests' needs kind 'coding' (got kind {self.kind!r}); use 'outcome' or 'guarded'")
        return self

    @field_validator("sensitive_states")
    @classmethod
    def _known_states(cls, value: list[str]) -> list[str]:
        unknown = [s for s in value if s not in STATES]
        if unknown:
            raise ValueError(f"unknown state(s) {unknown}; use states from {list(STATES)}")
        return value

    @field_validator("tasks", "eval_tasks", "expert_tasks")
    @classmethod
    def _unique_ids(cls, value: list[TaskSpec]) -> list[TaskSpec]:
        ids = [t.task_id for t in value]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"task ids must be unique; repeated: {dupes}")
        return value

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    @property
    def total_steps(self) -> int:
        """Steps the run will report: one per round, or for kind 'coding' one per task per round."""
        if self.kind == "coding":
            from .coding_tasks import CODING_TASKS

            return self.rounds * len(CODING_TASKS)
        return self.rounds


def _one_line(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "config"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] != "extra_forbidden" and "input" in item and not isinstance(item["input"], (dict, list)):
            message += f" (got {item['input']!r})"
        elif item["type"] == "extra_forbidden":
            message = "unknown setting; remove it or check its spelling"
        parts.append(f"{where}: {message}")
    return "invalid run config: " + "; ".join(parts)


def make_config(**values: Any) -> RunConfig:
    """Build a RunConfig, turning validation errors into one `ConfigError` line."""
    try:
        return RunConfig(**values)
    except ValidationError as error:
        raise ConfigError(_one_line(error)) from None


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.json"))


def load_preset(preset: str, **overrides: Any) -> RunConfig:
    path = PRESETS_DIR / f"{preset}.json"
    if not path.is_file():
        raise ConfigError(f"unknown preset {preset!r}; choose one of {preset_names()}")
    values = json.loads(path.read_text())
    values.update({k: v for k, v in overrides.items() if v is not None})
    return make_config(**values)


def load_config_file(path: str | Path, **overrides: Any) -> RunConfig:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read config file {str(path)!r}: {error.strerror or error}") from None
    try:
        values = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"config file {str(path)!r} is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}") from None
    if not isinstance(values, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a JSON object of settings, not {type(values).__name__}")
    values.update({k: v for k, v in overrides.items() if v is not None})
    return make_config(**values)


def json_schema() -> dict:
    schema = RunConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "agentrl/run_config.schema.json"
    return schema


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
