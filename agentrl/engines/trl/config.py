"""The language-model engine's run config: TRL GRPO with a LoRA adapter on a local causal LM, on any task.

Launch -> **config** -> `agentrl.engines.trl.engine`. `TrlConfig` holds what the run needs and
builds TRL's `GRPOConfig` and PEFT's `LoraConfig` from it (in the engine, where torch is loaded);
`LMSettings` groups the model and adapter settings. `task` names what is trained (a built-in
task or a user's `path/to/file.py:attr`); it is loaded and checked as the config is built, so a
task that cannot train is one error line on the Launch form and the CLI, before anything starts.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from agentrl.config.base import RunConfig, Settings

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class LMSettings(Settings):
    """The model and its adapter, and how rollouts are sampled."""

    labels: ClassVar[dict[str, str]] = {
        "model": "model directory", "lora_rank": "LoRA rank", "lora_alpha": "LoRA alpha", "lora_targets": "LoRA targets",
        "max_completion_length": "max completion tokens", "max_tool_calls": "max tool calls", "beta": "KL beta",
        "machine_memory_gb": "machine memory (GB)",
    }

    model: str | None = Field(default=None, max_length=4096, description="Local Hugging Face causal-LM directory with its tokenizer (its config.json sizes the memory budget); empty: the task's own tiny model, or the built-in refund model.")
    lora_rank: int = Field(default=8, ge=1, le=1024, description="LoRA rank r of the adapter.")
    lora_alpha: int = Field(default=16, ge=1, le=4096, description="LoRA alpha (scale = alpha / r).")
    lora_targets: list[str] = Field(default_factory=lambda: list(LORA_TARGETS), min_length=1, json_schema_extra={"options": LORA_TARGETS}, description="Projection modules that get an adapter, in every layer.")
    tasks_per_step: int = Field(default=2, ge=1, le=1024, description="Prompts (tasks) per optimiser step; each is sampled group-size times.")
    max_completion_length: int = Field(default=96, ge=8, le=32_768, description="Token limit of one rollout's completion (all turns).")
    max_tool_calls: int = Field(default=6, ge=1, le=100, description="Tool-calling turns allowed in one rollout.")
    temperature: float = Field(default=1.0, gt=0, le=10, description="Sampling temperature of rollouts.")
    beta: float = Field(default=0.0, ge=0, le=10, description="KL coefficient against the base model (adapter disabled); 0 turns the KL term off.")
    machine_memory_gb: float | None = Field(default=None, gt=0, le=100_000, description="Memory the budget may assume, in GB; empty: this machine's total memory.")

    @field_validator("lora_targets")
    @classmethod
    def _named_targets(cls, value: list[str]) -> list[str]:
        names = [t.strip() for t in value]
        if any(not t for t in names):
            raise ValueError("every LoRA target must name a module, such as 'q_proj'")
        return names


class TrlConfig(RunConfig):
    """A language-model run: one TRL GRPO optimiser step per round on a task's tool-calling episodes."""

    labels: ClassVar[dict[str, str]] = {
        "rounds": "optimiser steps", "group_size": "group size", "lr": "learning rate", "clip": "clip epsilon",
        "eval_every": "evaluate every N steps", "step_delay": "step delay (s)", "decision_points": "decision points",
        "probe_every": "replay exploit probes every N steps", "on_onset": "at a hacking onset",
        "lm": "language model",
    }

    kind: Literal["trl"] = Field(default="trl", description="TRL's GRPOTrainer with a PEFT LoRA adapter on a causal LM.")
    name: str = Field(default="lm-refund", min_length=1, max_length=80, description="Human name of the run; the run id is derived from it.")
    task: str = Field(default="refund", min_length=1, max_length=4096, description=(
        "The task to train: a built-in one ('refund', 'coding') or your own Task object as 'path/to/file.py:NAME' or "
        "'module:NAME' (see README, 'Write your own task'). Checked as you type."))
    rounds: int = Field(default=60, gt=0, le=100_000, description="Optimiser steps: each samples tasks-per-step prompts group-size times.")
    group_size: int = Field(default=8, ge=2, le=4096, description="Sampled rollouts per task per round; advantages need at least 2.")
    lr: float = Field(default=1e-3, gt=0, le=1, description="AdamW learning rate of the LoRA adapter.")
    clip: float = Field(default=0.2, gt=0, le=10, description="TRL's epsilon: the PPO-style ratio clip of the GRPO loss.")
    eval_every: int = Field(default=10, ge=0, le=100_000, description="Greedy evaluation on the task's eval rows every N steps (0: only before and after training).")
    decision_points: list[str] = Field(default_factory=list, max_length=100, description=(
        "The task's decision points whose next-tool distribution is recorded every step, comma-separated; empty: all of them."))
    probe_every: int = Field(default=10, ge=0, le=100_000, description="Replay the task's exploit probes greedily every N steps while training (0: only at the end), so a hacking onset shows as it happens.")
    on_onset: Literal["warn", "stop"] = Field(default="warn", description="At a hacking onset (agentrl.monitor): 'warn' records it and goes on; 'stop' ends the run cleanly with the reason.")
    lm: LMSettings = Field(default_factory=LMSettings, description="The model, its adapter and how rollouts are sampled.")

    @field_validator("task")
    @classmethod
    def _loadable_task(cls, value: str) -> str:
        from agentrl.tasks.loader import TaskError, absolute_spec, load_task

        try:
            load_task(value)
        except TaskError as error:  # the field and the value are named by the config's error line
            raise ValueError(str(error).removeprefix(f"task {value.strip()!r}: ")) from None
        return absolute_spec(value)

    @model_validator(mode="after")
    def _known_decision_points(self) -> TrlConfig:
        from agentrl.tasks.loader import load_task

        known = list(load_task(self.task).decisions())
        unknown = [name for name in self.decision_points if name not in known]
        if unknown:
            raise ValueError(f"decision_points: the task has no decision point(s) {unknown}; it has {known or 'none'}")
        return self
