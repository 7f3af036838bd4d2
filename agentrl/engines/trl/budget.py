"""The memory budget of a run, computed before it starts (SPEC section 11), and its store rows.

Sits at launch: the Launch page and the CLI read a model's shape from its local `config.json`,
call `estimate_budget`, show `Budget.table_text()` and refuse a run whose budget does not fit
(`Budget.refusal()`). The run writes `Budget.rows(run_id)` (source 'estimate') and, when it
ends, `measured_rows(...)` (source 'measured') to the `budgets` table, so the Hardware page can
set the estimate against what the run measured.

Units: every figure is in bytes; "GB" means 10^9 bytes. The SPEC's worked example is only
consistent in decimal units: 1.72e9 parameters x 2 bytes is 3.4 GB (3.2 GiB), its KV cache of
8 x 2,048 tokens x 112 KiB is 1.9 GB (1.75 GiB), and 16 GB minus the rest leaves 6.2 GB.
The per-token KV size is the one figure the SPEC gives in binary units (112 KiB = 114,688 B).

No separate reference model is counted: the reference policy is the base model with the
adapter disabled, so it shares the weights.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

GB = 10**9

ADAM_BYTES_PER_TRAINABLE_PARAM = 16  # fp32 weight, gradient and Adam's two moments: 4 x 4 bytes
PROJECTIONS = ("q", "k", "v", "o", "gate", "up", "down")

# What a person can change when a component dominates a budget that does not fit.
_REMEDIES = {
    "weights": "a smaller model",
    "adapter": "a smaller LoRA rank or fewer target modules",
    "kv_cache": "fewer rollouts or fewer tokens per rollout",
    "activations_logits": "fewer tokens per rollout",
}

_LABELS = {
    "weights": "weights",
    "adapter": "adapter + gradients + optimiser",
    "kv_cache": "KV cache",
    "activations_logits": "activations and logits",
    "sandbox": "sandbox",
    "os_reserve": "OS reserve",
    "runtime": "Python + torch runtime",
    "free": "free",
}


class BudgetError(ValueError):
    """A model directory or budget input that cannot be estimated; one line saying what to change."""


def _count(n: int) -> str:
    """A parameter count as a person reads it: 1.72B, 16.4M, 119,360."""
    if n >= 1e9:
        return f"{n / 1e9:.2f}B"
    if n >= 1e6:
        return f"{n / 1e6:.1f}M"
    return f"{n:,}"


def format_bytes(n_bytes: float) -> str:
    """Bytes in decimal units with one decimal: 3_441_149_952 -> '3.4 GB'. Below 0.1 GB in MB
    (524_288 -> '0.5 MB'), so a small component never reads '0.0 GB'."""
    if abs(n_bytes) >= 0.1 * GB:
        return f"{n_bytes / GB:.1f} GB"
    return f"{n_bytes / 1e6:.1f} MB"


@dataclass(frozen=True)
class ModelShape:
    """The shape of a Llama/Qwen-style decoder-only model, as its `config.json` gives it."""

    num_hidden_layers: int
    """Decoder layers."""
    hidden_size: int
    """Width of the residual stream."""
    num_attention_heads: int
    """Query heads."""
    num_key_value_heads: int
    """Key/value heads (fewer than query heads under grouped-query attention)."""
    head_dim: int
    """Width of one attention head."""
    intermediate_size: int
    """Width of the gated MLP (gate/up project to it, down projects back)."""
    vocab_size: int
    """Rows of the embedding and of the LM head."""
    tie_word_embeddings: bool
    """True when the LM head reuses the embedding matrix (no extra parameters)."""
    attention_bias: bool = False
    """Biases on the q/k/v projections (Qwen2) or on all four (Llama's `attention_bias`)."""
    mlp_bias: bool = False
    """Biases on gate/up/down (Llama's `mlp_bias`)."""
    qk_norm: bool = False
    """Per-head RMSNorm on queries and keys (Qwen3)."""
    parameter_count: int | None = None
    """Explicit parameter count (a model card's or a checkpoint's); None: computed from the shape."""

    @classmethod
    def from_config(cls, config: dict, parameter_count: int | None = None, source: str = "config.json") -> ModelShape:
        """The shape from a parsed `config.json`; `source` names it in error messages."""
        def positive_int(name: str, default: int | None = None) -> int:
            value = config.get(name)
            if value is None:
                if default is None:
                    raise BudgetError(
                        f"{source} has no '{name}'; the budget needs a Llama/Qwen-style decoder config "
                        "(num_hidden_layers, hidden_size, num_attention_heads, intermediate_size, vocab_size)"
                    )
                return default
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise BudgetError(f"{source}: '{name}' must be a positive integer, not {value!r}")
            return value

        layers = positive_int("num_hidden_layers")
        hidden = positive_int("hidden_size")
        heads = positive_int("num_attention_heads")
        kv_heads = positive_int("num_key_value_heads", default=heads)
        if config.get("head_dim") is None and hidden % heads:
            raise BudgetError(f"{source}: hidden_size {hidden} is not a multiple of num_attention_heads {heads}; add 'head_dim'")
        head_dim = positive_int("head_dim", default=hidden // heads)
        model_type = str(config.get("model_type", ""))
        if parameter_count is not None and (isinstance(parameter_count, bool) or not isinstance(parameter_count, int) or parameter_count <= 0):
            raise BudgetError(f"parameter count must be a positive integer, not {parameter_count!r}")
        return cls(
            num_hidden_layers=layers,
            hidden_size=hidden,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=positive_int("intermediate_size"),
            vocab_size=positive_int("vocab_size"),
            # Absent means untied (the Llama/Qwen class default): counting the LM head errs high.
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            # Qwen2 has q/k/v biases without a config flag; Llama says so in `attention_bias`.
            attention_bias=bool(config.get("attention_bias", model_type == "qwen2")),
            mlp_bias=bool(config.get("mlp_bias", False)),
            qk_norm=model_type.startswith("qwen3"),
            parameter_count=parameter_count,
        )

    @classmethod
    def from_config_dir(cls, model_dir: str | Path, parameter_count: int | None = None) -> ModelShape:
        """The shape from `<model_dir>/config.json`, read as plain JSON (no transformers, no hub)."""
        model_dir = Path(model_dir)
        if not model_dir.is_dir():
            raise BudgetError(f"model directory {model_dir} does not exist; point the config at a local Hugging Face model folder")
        config_path = model_dir / "config.json"
        if not config_path.is_file():
            raise BudgetError(f"{model_dir} has no config.json; point the config at a Hugging Face model folder (the one with config.json)")
        try:
            config = json.loads(config_path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise BudgetError(f"{config_path} is not readable JSON ({type(error).__name__}: {error}); restore the model's config.json") from None
        if not isinstance(config, dict):
            raise BudgetError(f"{config_path} is not a JSON object; restore the model's config.json")
        return cls.from_config(config, parameter_count=parameter_count, source=str(config_path))

    def projection_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of every linear projection of one layer, by short name."""
        q_width = self.num_attention_heads * self.head_dim
        kv_width = self.num_key_value_heads * self.head_dim
        return {
            "q": (self.hidden_size, q_width),
            "k": (self.hidden_size, kv_width),
            "v": (self.hidden_size, kv_width),
            "o": (q_width, self.hidden_size),
            "gate": (self.hidden_size, self.intermediate_size),
            "up": (self.hidden_size, self.intermediate_size),
            "down": (self.intermediate_size, self.hidden_size),
        }

    def computed_parameters(self) -> int:
        """Parameters of the decoder from its shape: embeddings, layers, final norm, LM head unless tied."""
        shapes = self.projection_shapes()
        per_layer = sum(n_in * n_out for n_in, n_out in shapes.values())
        per_layer += 2 * self.hidden_size  # input and post-attention RMSNorm weights
        if self.qk_norm:
            per_layer += 2 * self.head_dim
        if self.attention_bias:
            per_layer += sum(shapes[name][1] for name in ("q", "k", "v"))
        if self.mlp_bias:
            per_layer += sum(shapes[name][1] for name in ("gate", "up", "down"))
        embeddings = self.vocab_size * self.hidden_size
        lm_head = 0 if self.tie_word_embeddings else embeddings
        return embeddings + self.num_hidden_layers * per_layer + self.hidden_size + lm_head

    @property
    def parameters(self) -> int:
        """The explicit parameter count when given, else the one computed from the shape."""
        return self.parameter_count if self.parameter_count is not None else self.computed_parameters()

    def kv_bytes_per_token(self, bytes_per_value: int = 2) -> int:
        """KV cache of one token: keys and values of every layer (114,688 B = 112 KiB for Qwen3-1.7B)."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * bytes_per_value

    def lora_parameters(self, rank: int, targets: list[str] | tuple[str, ...] | str) -> int:
        """Trainable LoRA parameters: rank x (in + out) per adapted projection, over every layer."""
        shapes = self.projection_shapes()
        per_layer = sum(rank * sum(shapes[name]) for name in normalise_targets(targets))
        return self.num_hidden_layers * per_layer


def normalise_targets(targets: list[str] | tuple[str, ...] | str) -> tuple[str, ...]:
    """PEFT target names ('q_proj', ..., or 'all-linear') as short projection names, deduplicated."""
    if isinstance(targets, str):
        targets = [targets]
    names: list[str] = []
    for target in targets:
        if target == "all-linear":
            names.extend(PROJECTIONS)
            continue
        short = target.removesuffix("_proj")
        if short not in PROJECTIONS:
            raise BudgetError(f"unknown LoRA target {target!r}; use some of {[p + '_proj' for p in PROJECTIONS]} or 'all-linear'")
        names.append(short)
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Budget:
    """A run's memory budget in bytes, component by component, against the machine's memory."""

    machine_bytes: int
    """Memory the run may assume (the machine's total, or what the config says)."""
    weights: int
    """Base model weights: parameters x bytes per parameter."""
    adapter: int
    """LoRA adapter with its gradients and Adam states: trainable parameters x 16 bytes."""
    kv_cache: int
    """KV cache of every rollout at full length."""
    activations_logits: int
    """Peak of the loss pass, dominated by the logits (see `estimate_budget`)."""
    sandbox: int
    """Room for the sandbox processes the tools run in."""
    os_reserve: int
    """Left to the operating system and everything else on the machine."""
    parameters: int
    """Parameters of the base model."""
    trainable_parameters: int
    """Parameters of the LoRA adapter."""
    runtime: int = 0
    """The training process's fixed cost (interpreter, torch, transformers, TRL, pyarrow); not in
    SPEC section 11's arithmetic, so 0 unless the caller sets it (`run_budget` does)."""
    active_parameters: int | None = None
    """Parameters a token passes through (a mixture of experts routes it to a few): what compute
    follows, 2 x active FLOPs per token forward. None: all of them (dense)."""
    counted_by: str = ""
    """Where the counts come from (the model's class on the meta device, or config.json's shape)."""

    COMPONENTS = ("weights", "adapter", "kv_cache", "activations_logits", "sandbox", "os_reserve")

    def components(self) -> list[tuple[str, int]]:
        """(component, bytes) of everything the budget sets aside, in the SPEC's order."""
        parts = [(name, getattr(self, name)) for name in self.COMPONENTS]
        return parts + ([("runtime", self.runtime)] if self.runtime else [])

    @property
    def used(self) -> int:
        return sum(n_bytes for _, n_bytes in self.components())

    @property
    def free(self) -> int:
        """What is left of the machine; negative when the budget does not fit."""
        return self.machine_bytes - self.used

    @property
    def run_total(self) -> int:
        """The run's own memory (everything but the OS reserve): what its process tree should peak at."""
        return self.used - self.os_reserve

    @property
    def fits(self) -> bool:
        return self.free >= 0

    @property
    def active(self) -> int:
        """Active parameters (all of them for a dense model)."""
        return self.parameters if self.active_parameters is None else self.active_parameters

    @property
    def forward_flops_per_token(self) -> int:
        """Compute of one token's forward pass, about 2 x active parameters: a mixture of experts
        pays for the experts a token is routed to, not for every expert it holds."""
        return 2 * self.active

    def to_json(self) -> dict:
        """Counts and every row in bytes, for `agentrl budget --json`."""
        rows = {name: int(n) for name, n in self.components()}
        rows.update(free=int(self.free), total=int(self.run_total), machine=int(self.machine_bytes))
        return {"parameters": self.parameters, "active_parameters": self.active, "trainable": self.trainable_parameters,
                "counted_by": self.counted_by, "fits": self.fits, "rows": rows}

    def count_line(self) -> str:
        """'(30.53B parameters, 3.34B active, 6.7M trainable)'."""
        active = f", {_count(self.active)} active" if self.active != self.parameters else ""
        return f"({_count(self.parameters)} parameters{active}, {_count(self.trainable_parameters)} trainable)"

    def rows(self, run_id: str) -> list[dict]:
        """Rows of the `budgets` table (source 'estimate'), ready for `ChunkWriter.append('budgets', ...)`.

        The components, then 'free' and 'total' (the run's own memory, which lines up with the
        'total' of `measured_rows`).
        """
        figures = [*self.components(), ("free", self.free), ("total", self.run_total)]
        return [{"run_id": run_id, "component": name, "bytes": int(n_bytes), "source": "estimate"} for name, n_bytes in figures]

    def table_text(self) -> str:
        """The budget as an aligned text table, one decimal, in GB (MB below 0.1 GB), for the terminal and the Launch page."""
        # A component the run does not use (no sandbox for an LM run) is left out, not printed as 0.
        figures = [*[(name, n) for name, n in self.components() if n], ("free", self.free)]
        width = max(len(label) for label in _LABELS.values())
        lines = [f"{_LABELS[name]:<{width}}  {format_bytes(n_bytes):>9}" for name, n_bytes in figures]
        lines.append(f"{'machine':<{width}}  {format_bytes(self.machine_bytes):>9}")
        lines.append(self.count_line())
        if self.counted_by:
            lines.append(f"counted from {self.counted_by}")
        return "\n".join(lines)

    def refusal(self) -> str | None:
        """One line saying why the run cannot start and what to change; None when the budget fits."""
        if self.fits:
            return None
        # Only what the run's settings drive is named: the sandbox and OS allowances are fixed room.
        driven = [item for item in self.components() if item[0] in _REMEDIES]
        largest = sorted(driven, key=lambda item: item[1], reverse=True)[:2]
        dominant = "; ".join(f"{_LABELS[name]} {format_bytes(n_bytes)} (use {_REMEDIES[name]})" for name, n_bytes in largest)
        return (
            f"memory budget does not fit: needs {format_bytes(self.used)} but the machine has {format_bytes(self.machine_bytes)} "
            f"({format_bytes(-self.free)} short); largest: {dominant}"
        )


def estimate_budget(
    shape,
    lora_rank: int,
    lora_targets: list[str] | tuple[str, ...] | str,
    sequences: int,
    tokens_per_sequence: int,
    machine_bytes: float,
    bytes_per_param: int = 2,
    sandbox_bytes: float = 1 * GB,
    os_reserve_bytes: float = 2 * GB,
    micro_batch_sequences: int = 1,
    logit_bytes: int = 4,
    runtime_bytes: float = 0,
) -> Budget:
    """SPEC section 11's arithmetic for a LoRA GRPO run, on `shape`: a `ModelCounts` (the model's
    own class counted it, for `lora_rank` and `lora_targets`) or a `ModelShape` (counted from its shape).

    `sequences` rollouts of `tokens_per_sequence` tokens (prompt plus completion) are generated
    together, so all of their KV caches are held at once; the KV cache uses `bytes_per_param`
    per value (the model's dtype).

    Activations and logits: `micro_batch_sequences x tokens_per_sequence x vocab_size x
    logit_bytes`. The loss pass handles one micro-batch at a time, and its largest tensors are
    the logits over the whole vocabulary: in BF16, the logits and their gradient in the backward
    pass, 2 + 2 = 4 bytes per entry (or one FP32 copy for the log-softmax, also 4). For the
    SPEC's example that is 1 x 2,048 x 151,936 x 4 = 1.24 GB, which the SPEC rounds to 1.2 GB.
    Hidden states kept under gradient checkpointing (layers x tokens x hidden x 2 bytes,
    0.24 GB there) are not added: the SPEC's 1.2 GB leaves no room for them, and they are small
    next to the logits whenever the vocabulary is large.
    """
    for name, value in (
        ("lora_rank", lora_rank),
        ("sequences", sequences),
        ("tokens_per_sequence", tokens_per_sequence),
        ("bytes_per_param", bytes_per_param),
        ("micro_batch_sequences", micro_batch_sequences),
        ("logit_bytes", logit_bytes),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise BudgetError(f"{name} must be a positive integer, not {value!r}")
    # Byte amounts may arrive as floats (a config's machine_memory_gb x GB); they are rounded.
    for name, value, least in (("machine_bytes", machine_bytes, 1), ("sandbox_bytes", sandbox_bytes, 0), ("os_reserve_bytes", os_reserve_bytes, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not least <= value < float("inf"):
            raise BudgetError(f"{name} must be a number of bytes of at least {least}, not {value!r}")
    from agentrl.engines.trl.model_count import ModelCounts

    counts = ModelCounts.from_shape(shape, lora_rank, lora_targets) if isinstance(shape, ModelShape) else shape
    trainable, parameters = counts.trainable, counts.parameters
    return Budget(
        machine_bytes=round(machine_bytes),
        weights=parameters * bytes_per_param,
        adapter=trainable * ADAM_BYTES_PER_TRAINABLE_PARAM,
        kv_cache=sequences * counts.kv_bytes(tokens_per_sequence, bytes_per_param),
        activations_logits=min(micro_batch_sequences, sequences) * tokens_per_sequence * counts.vocab_size * logit_bytes,
        sandbox=round(sandbox_bytes),
        os_reserve=round(os_reserve_bytes),
        parameters=parameters,
        trainable_parameters=trainable,
        runtime=round(runtime_bytes),
        active_parameters=counts.active_parameters,
        counted_by=counts.counted_by if isinstance(shape, ModelCounts) else "",
    )


def measured_rows(run_id: str, peak_rss_bytes: int, gpu_peak_bytes: int | None = None) -> list[dict]:
    """Rows of the `budgets` table (source 'measured') from what a run measured at its end.

    'process_peak_rss' is the peak resident memory of the run's process tree (sandboxes
    included), 'gpu_peak' the peak GPU memory torch allocated when there was a GPU, and 'total'
    their sum: the run's own memory, set against the estimate's 'total' (which leaves out the OS
    reserve for the same reason).
    """
    if isinstance(peak_rss_bytes, bool) or not isinstance(peak_rss_bytes, int) or peak_rss_bytes < 0:
        raise BudgetError(f"peak_rss_bytes must be a non-negative integer, not {peak_rss_bytes!r}")
    figures = [("process_peak_rss", peak_rss_bytes)]
    if gpu_peak_bytes is not None:
        if isinstance(gpu_peak_bytes, bool) or not isinstance(gpu_peak_bytes, int) or gpu_peak_bytes < 0:
            raise BudgetError(f"gpu_peak_bytes must be a non-negative integer, not {gpu_peak_bytes!r}")
        figures.append(("gpu_peak", gpu_peak_bytes))
    figures.append(("total", sum(n_bytes for _, n_bytes in figures)))
    return [{"run_id": run_id, "component": name, "bytes": int(n_bytes), "source": "measured"} for name, n_bytes in figures]


# Tokens the prompt of one rollout may take, before the model's tokenizer has measured it (the
# Launch page and the CLI check a run before anything loads; the run itself measures its prompt).
PROMPT_TOKENS_ALLOWANCE = 256

# The language-model run process's fixed cost, whatever the model: measured here, importing
# torch, transformers, TRL and PEFT takes 0.36 GB of RSS, and a run of the built-in tiny model
# (whose own tensors are a few MB) peaked at 0.70-0.82 GB over many runs on this machine (0.8 GB
# was once exceeded by 14 MB). Rounded up so the estimate stays an upper bound for small models;
# for a real model the weights, KV cache and logits dominate.
RUNTIME_BYTES = int(0.9 * GB)
# A run on several processes also holds the `accelerate launch` process (torch's elastic agent,
# which imports torch) and the light run process that watches it: measured here, see
# docs/drafts/accelerate.md.
LAUNCHER_BYTES = int(0.4 * GB)


def run_budget(config, model_dir: str | Path, prompt_tokens: int = PROMPT_TOKENS_ALLOWANCE, bytes_per_param: int = 4,
               sandbox_bytes: int = 0):
    """The budget of a language-model run config (`config.lm`, `config.group_size`): a `Budget`
    for one process, a `sharding.ShardedBudget` for several (`config.distributed`).

    `bytes_per_param` defaults to 4 because the CPU path trains in float32. `sandbox_bytes` is the
    room the task's tools need outside the trainer (its `sandbox_bytes`: 0 for tools that run
    in-process, such as the refund tools; the coding task's sandboxed test runs set some aside).
    """
    import psutil

    from agentrl.engines.trl.model_count import load_counts

    lm = config.lm
    machine = lm.machine_memory_gb * GB if lm.machine_memory_gb else psutil.virtual_memory().total
    one = estimate_budget(
        load_counts(model_dir, lm.lora_rank, list(lm.lora_targets)), lm.lora_rank, list(lm.lora_targets),
        sequences=lm.tasks_per_step * config.group_size,
        tokens_per_sequence=prompt_tokens + lm.max_completion_length,
        machine_bytes=machine, bytes_per_param=bytes_per_param, sandbox_bytes=sandbox_bytes, runtime_bytes=RUNTIME_BYTES,
    )
    processes = config.distributed.num_processes
    if processes == 1:
        return one
    # Several processes (accelerate launch): each one's share under the strategy, on CPU or one GPU each.
    from agentrl.engines.trl.distributed import gpu_memory
    from agentrl.engines.trl.sharding import shard_budget

    gpus = gpu_memory()[:processes]
    return shard_budget(one, processes, config.distributed.strategy, launcher_bytes=LAUNCHER_BYTES,
                        device_bytes=min(gpus) if gpus else None)
