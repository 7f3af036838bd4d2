"""The language-model engine's run config: TRL GRPO with a LoRA adapter on a local causal LM, on any task.

Launch -> **config** -> `agentrl.engines.trl.engine`. `TrlConfig` holds what the run needs and
builds TRL's `GRPOConfig` and PEFT's `LoraConfig` from it (in the engine, where torch is loaded);
`LMSettings` groups the model and adapter settings, `DistributedSettings` how many training
processes `accelerate launch` starts and how they share the model. `task` names what is trained
(a built-in task or a user's `path/to/file.py:attr`); it is loaded and checked as the config is
built, so a task that cannot train is one error line on the Launch form and the CLI, before
anything starts. What depends on the machine (GPUs, cores, DeepSpeed or vLLM installed) is
checked by the engine's preflight instead (`agentrl.engines.trl.distributed.machine_refusal`),
so a config recorded on a GPU machine still loads, and can be compared, anywhere.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from agentrl.config.base import RunConfig, Settings

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

# Sharding strategies, named after the accelerate configs TRL ships (trl/accelerate_configs/):
# what each splits across the processes (the memory budget, agentrl.engines.trl.sharding, counts it).
STRATEGIES = {
    "ddp": (),  # multi_gpu.yaml (and CPU processes over gloo): every process holds everything
    "zero1": ("optimizer",),  # DeepSpeed ZeRO stage 1
    "zero2": ("optimizer", "gradients"),  # ZeRO stage 2
    "zero3": ("optimizer", "gradients", "parameters"),  # ZeRO stage 3
    "fsdp": ("optimizer", "gradients", "parameters"),  # FSDP2, full shard (fsdp2.yaml)
}
VLLM_MODES = ("colocate", "server")


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


class DistributedSettings(Settings):
    """How many training processes a run uses and how they share the model (`accelerate launch`)."""

    labels: ClassVar[dict[str, str]] = {
        "num_processes": "processes", "strategy": "sharding strategy", "use_vllm": "generate with vLLM",
        "vllm_mode": "generation mode (vLLM)", "vllm_server_url": "server URL (vLLM)",
    }

    num_processes: int = Field(default=1, ge=1, le=1024, description=(
        "Training processes. 1: the run trains in its own process, as always. More: started with `accelerate launch`, "
        "one per GPU, or on a machine without CUDA that many CPU processes over gloo (at most its cores); they split "
        "each step's rollouts evenly and only the first one records."))
    strategy: str = Field(default="ddp", json_schema_extra={"options": list(STRATEGIES)}, description=(
        "How the processes share the model, after TRL's accelerate configs: 'ddp' gives every process the weights, "
        "gradients and optimiser state; DeepSpeed 'zero1' splits the optimiser state across them, 'zero2' also the "
        "gradients, 'zero3' and 'fsdp' also the weights. The ZeRO stages and FSDP need GPUs (untested here)."))
    use_vllm: bool = Field(default=False, description=(
        "Generate rollouts with vLLM (TRL's use_vllm) instead of transformers' generate; needs a GPU and vLLM "
        "installed. Untested here (no GPU)."))
    vllm_mode: str = Field(default="colocate", json_schema_extra={"options": list(VLLM_MODES)}, description=(
        "With vLLM: 'colocate' runs it inside each training process; 'server' sends generation to a running "
        "`trl vllm-serve`."))
    vllm_server_url: str | None = Field(default=None, max_length=2048, description=(
        "With vLLM in server mode: the server's base URL, e.g. http://127.0.0.1:8000; empty: TRL's default "
        "(port 8000 on this machine)."))

    @field_validator("strategy")
    @classmethod
    def _known_strategy(cls, value: str) -> str:
        if value not in STRATEGIES:
            raise ValueError(f"unknown sharding strategy {value!r}; use one of {list(STRATEGIES)}")
        return value

    @field_validator("vllm_mode")
    @classmethod
    def _known_vllm_mode(cls, value: str) -> str:
        if value not in VLLM_MODES:
            raise ValueError(f"unknown vLLM mode {value!r}; use 'colocate' or 'server'")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> DistributedSettings:
        if self.strategy != "ddp" and self.num_processes == 1:
            raise ValueError(f"strategy: {self.strategy!r} splits the model across processes; set processes to 2 or more, "
                             "or use 'ddp' for a run in one process")
        if self.vllm_server_url and not (self.use_vllm and self.vllm_mode == "server"):
            raise ValueError("vllm_server_url: a vLLM server URL is used only with vLLM in 'server' mode; "
                             "turn on vLLM and choose mode 'server', or leave the URL empty")
        return self


class TrlConfig(RunConfig):
    """A language-model run: one TRL GRPO optimiser step per round on a task's tool-calling episodes."""

    labels: ClassVar[dict[str, str]] = {
        "rounds": "optimiser steps", "group_size": "group size", "lr": "learning rate", "clip": "clip epsilon",
        "eval_every": "evaluate every N steps", "step_delay": "step delay (s)", "decision_points": "decision points",
        "probe_every": "replay exploit probes every N steps", "on_onset": "at a hacking onset",
        "lm": "language model", "distributed": "processes and GPUs",
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
    distributed: DistributedSettings = Field(default_factory=DistributedSettings, description=(
        "Training on several processes or GPUs with `accelerate launch` (README, \"One node, several GPUs\"); "
        "1 process: the run trains in its own process."))

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

    @field_validator("distributed")
    @classmethod
    def _rollouts_split_evenly(cls, value: DistributedSettings, info: ValidationInfo) -> DistributedSettings:
        lm, group_size = info.data.get("lm"), info.data.get("group_size")
        if lm is None or group_size is None:
            return value  # those fields are invalid themselves, and said so
        processes, rollouts = value.num_processes, lm.tasks_per_step * group_size
        if rollouts % processes:
            divisors = [n for n in range(2, rollouts + 1) if rollouts % n == 0][:6]
            raise ValueError(f"{processes} processes cannot split a step's {rollouts} rollouts (tasks per step "
                             f"{lm.tasks_per_step} x group size {group_size}) evenly; use 1 or a divisor of {rollouts} "
                             f"such as {divisors}")
        return value
