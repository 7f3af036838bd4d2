"""A model's counts from its own class: parameters (every expert), active parameters, LoRA trainable
parameters and the KV cache its attention stores, all read off the model built on PyTorch's meta device.

config.json -> **model_count** -> `budget.estimate_budget` (the Launch preflight, `agentrl budget`,
the run's estimate). `model_counts(model_dir, rank, targets)` answers from a cache (one JSON file per
config.json, LoRA settings and library versions) without importing torch; on a miss it runs this
module in a child process (`python -m agentrl.engines.trl.model_count`), so the dashboard never
loads torch. The child builds `AutoModelForCausalLM.from_config` under `accelerate.init_empty_weights`
(nothing is allocated, nothing is downloaded: only config.json is read), counts each distinct
parameter once (tied embeddings count once), and builds the PEFT model on the meta device with the
run's `LoraConfig` to count the adapter (`ModelCounts`; `load_counts` is what the budget calls).
`lora_config` is the one place a run's LoRA targets become
PEFT's `target_modules` / `target_parameters`: the run trains what the budget counted.

A config whose `model_type` transformers has no class for is counted from its shape
(`budget.ModelShape`, the Llama/Qwen arithmetic), and the table says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from agentrl.engines.trl.budget import BudgetError, ModelShape

COUNT_VERSION = 1  # bump when what is counted changes: older cache files are then ignored
CACHE_ENV = "AGENTRL_BUDGET_CACHE"
CHILD_TIMEOUT_S = 300.0
# Names of the expert count and of the experts each token is routed to, across transformers' MoE configs.
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
EXPERTS_PER_TOKEN_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_topk")
# Cache layers whose size grows with the tokens (transformers' cache_utils layer types).
PER_TOKEN_LAYERS = ("full_attention", "sliding_attention", "chunked_attention", "hybrid_sliding")


@dataclass(frozen=True)
class ModelCounts:
    """What a model holds, as its own class counts it (`agentrl.engines.trl.model_count`) or, for a
    config transformers has no class for, as `ModelShape` computes it (`from_shape`)."""

    parameters: int
    """Every parameter, each counted once (tied embeddings once; every expert of a mixture)."""
    active_parameters: int
    """Parameters a token passes through: `parameters` less the routed experts it is not sent to
    (routed x (1 - experts_per_token / experts)); equal to `parameters` for a dense model."""
    trainable: int
    """LoRA parameters PEFT builds for the run's rank and targets."""
    vocab_size: int
    """Rows of the LM head (the logits' width)."""
    kv_layers: tuple[tuple[int | None, int], ...]
    """Per layer with a per-token cache: (sliding window or None, values stored per token)."""
    counted_by: str = "config.json's shape"
    """Where the counts come from, for the table."""

    @classmethod
    def from_shape(cls, shape: ModelShape, lora_rank: int, lora_targets, note: str = "") -> ModelCounts:
        """The Llama/Qwen arithmetic of `ModelShape`: dense, every layer full attention."""
        values = 2 * shape.num_key_value_heads * shape.head_dim
        return cls(parameters=shape.parameters, active_parameters=shape.parameters,
                   trainable=shape.lora_parameters(lora_rank, lora_targets), vocab_size=shape.vocab_size,
                   kv_layers=((None, values),) * shape.num_hidden_layers,
                   counted_by="config.json's shape" + (f"; {note}" if note else ""))

    def kv_bytes(self, tokens: int, bytes_per_value: int = 2) -> int:
        """KV cache of one sequence of `tokens` tokens: every layer's values per token times the
        tokens it keeps (all of them, or at most its sliding window)."""
        return sum((tokens if window is None else min(tokens, window)) * values for window, values in self.kv_layers) * bytes_per_value

    def to_json(self) -> dict:
        return {"parameters": self.parameters, "active_parameters": self.active_parameters, "trainable": self.trainable,
                "vocab_size": self.vocab_size, "kv_layers": [list(layer) for layer in self.kv_layers], "counted_by": self.counted_by}

    @classmethod
    def from_json(cls, data: dict) -> ModelCounts:
        return cls(parameters=int(data["parameters"]), active_parameters=int(data["active_parameters"]),
                   trainable=int(data["trainable"]), vocab_size=int(data["vocab_size"]),
                   kv_layers=tuple((None if w is None else int(w), int(v)) for w, v in data["kv_layers"]),
                   counted_by=str(data.get("counted_by", "")))


def load_counts(model_dir: str | Path, lora_rank: int, lora_targets) -> ModelCounts:
    """The counts of a local model folder for a LoRA adapter: from the model's own class
    (`model_count.model_counts`, cached), or from config.json's shape when transformers has no
    class for it. Raises `BudgetError` with one line."""
    counts = model_counts(model_dir, lora_rank, lora_targets)
    if counts is not None:
        return counts
    shape = ModelShape.from_config_dir(model_dir)
    return ModelCounts.from_shape(shape, lora_rank, lora_targets, note="transformers has no class for its model_type")


def cache_dir() -> Path:
    """Where counts are kept: $AGENTRL_BUDGET_CACHE, else $XDG_CACHE_HOME/agentrl/budget, else ~/.cache/agentrl/budget."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agentrl" / "budget"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def cache_key(config_text: bytes, lora_rank: int, lora_targets: list[str]) -> str:
    """The cache file's name: config.json's bytes, the LoRA settings and the versions that count them."""
    digest = hashlib.sha256(config_text)
    digest.update(json.dumps([COUNT_VERSION, lora_rank, list(lora_targets), _version("transformers"), _version("peft")]).encode())
    return digest.hexdigest()[:32]


def model_counts(model_dir: str | Path, lora_rank: int, lora_targets: list[str] | tuple[str, ...] | str,
                 cache: Path | None = None, in_child: bool | None = None) -> ModelCounts | None:
    """The counts of `<model_dir>/config.json` with a LoRA adapter of `lora_rank` on `lora_targets`;
    None when transformers has no class for the config (the caller counts from the shape).
    Raises `BudgetError` (one line) for a target the model lacks or a config its class refuses.

    A miss is counted in a child process (`in_child`), unless this process has torch loaded
    already (a training process), where counting in place costs no import."""
    targets = [lora_targets] if isinstance(lora_targets, str) else list(lora_targets)
    config_path = Path(model_dir) / "config.json"
    try:
        text = config_path.read_bytes()
        config = json.loads(text)
    except (OSError, ValueError):
        return None  # ModelShape.from_config_dir says what is wrong with the folder
    if not isinstance(config, dict) or not config.get("model_type"):
        return None
    folder = cache or cache_dir()
    path = folder / f"{cache_key(text, lora_rank, targets)}.json"
    answer = _read_cached(path)
    if answer is None:
        if in_child is None:
            in_child = "torch" not in sys.modules
        answer = _count_in_child(config_path, lora_rank, targets) if in_child else count_answer(str(config_path), lora_rank, targets)
        _write_cached(path, answer)
    if "error" in answer:
        raise BudgetError(answer["error"])
    if "unsupported" in answer:
        return None
    return ModelCounts.from_json(answer["counts"])


def _read_cached(path: Path) -> dict | None:
    try:
        answer = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return answer if isinstance(answer, dict) and answer.keys() & {"counts", "error", "unsupported"} else None


def _write_cached(path: Path, answer: dict) -> None:
    try:  # a cache that cannot be written only costs the next call the count again
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as handle:
            json.dump(answer, handle)
        os.replace(handle.name, path)
    except OSError:
        pass


def _count_in_child(config_path: Path, lora_rank: int, targets: list[str]) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "TRANSFORMERS_VERBOSITY": "error", "PYTHONWARNINGS": "ignore"}
    argv = [sys.executable, "-m", __name__, str(config_path), str(lora_rank), json.dumps(targets)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise BudgetError(f"counting the model of {config_path} took over {CHILD_TIMEOUT_S:.0f} s; try again, or check its config.json") from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise BudgetError(f"could not count the model of {config_path} ({tail})")
    return json.loads(lines[-1])


# -- in the child (torch loaded) -----------------------------------------------------------------


def _linear_names(model) -> list[str]:
    """Leaf names of the model's linear layers (what `target_modules` can name), LM head excluded."""
    import torch

    names = {name.rsplit(".", 1)[-1] for name, module in model.named_modules()
             if isinstance(module, torch.nn.Linear) and not name.endswith("lm_head")}
    return sorted(names)


def _expert_parameter_names(model) -> list[str]:
    """Parameters of fused expert modules (`mlp.experts.gate_up_proj`): what `target_parameters` can name."""
    names = set()
    for name, _ in model.named_parameters():
        parts = name.split(".")
        if "experts" in parts[:-1] and not parts[-1].isdigit() and parts[parts.index("experts") + 1:] == parts[-1:]:
            names.add(".".join(parts[parts.index("experts") - 1:]))  # e.g. mlp.experts.gate_up_proj
    return sorted(names)


def lora_config(model, rank: int, targets: list[str], alpha: int | None = None, dropout: float = 0.0):
    """PEFT's `LoraConfig` for `targets` on `model`: module names go to `target_modules`, names of
    expert parameters (`mlp.experts.gate_up_proj`, `experts.down_proj`) to `target_parameters`.
    Raises `BudgetError` naming a target the model lacks and the ones it has."""
    from peft import LoraConfig

    if "all-linear" in targets:
        if len(targets) > 1:
            raise BudgetError("LoRA target 'all-linear' already adapts every linear layer; give it alone")
        return LoraConfig(r=rank, lora_alpha=alpha or 2 * rank, target_modules="all-linear", lora_dropout=dropout, task_type="CAUSAL_LM")
    module_names = {name for name, _ in model.named_modules()}
    parameter_names = {name for name, _ in model.named_parameters()}

    def ends(names: set[str], target: str) -> bool:
        return any(name == target or name.endswith("." + target) for name in names)

    modules, parameters, missing = [], [], []
    fused = {"gate_proj", "up_proj", "down_proj"}  # PEFT maps these onto fused experts (gate_up_proj, down_proj)
    has_fused_experts = bool(_expert_parameter_names(model))
    for target in targets:
        if ends(module_names, target):
            modules.append(target)
        elif ends(parameter_names, target) and "experts" in target.split("."):
            parameters.append(target)
        elif target in fused and has_fused_experts:
            modules.append(target)  # PEFT converts it to target_parameters itself
        else:
            missing.append(target)
    if missing:
        has = _linear_names(model) + _expert_parameter_names(model)
        raise BudgetError(
            f"LoRA target{'s' if len(missing) > 1 else ''} {', '.join(missing)} not in {type(model).__name__}; "
            f"it has: {', '.join(has)} (or use 'all-linear')")
    extra = {"target_parameters": parameters} if parameters else {}
    return LoraConfig(r=rank, lora_alpha=alpha or 2 * rank, target_modules=modules or None, lora_dropout=dropout,
                      task_type="CAUSAL_LM", **extra)


def _config_value(config, keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def routed_expert_parameters(model) -> int:
    """Parameters of the routed experts (under a module named `experts`; shared experts excluded)."""
    return sum(p.numel() for name, p in model.named_parameters() if "experts" in name.split(".")[:-1])


def kv_layers(config) -> list[tuple[int | None, int]]:
    """Per layer that keeps a per-token cache: (window or None, values stored per token), as
    transformers' `DynamicCache` builds it (`cache_utils.get_layer_types_and_kwargs`).

    - grouped-query attention: keys and values of each KV head, 2 x num_key_value_heads x head_dim;
    - multi-head latent attention (DeepSeek-V2/V3, `kv_lora_rank`): the compressed latent and the
      shared rotary key, kv_lora_rank + qk_rope_head_dim;
    - sliding-window and chunked layers hold at most `sliding_window` tokens.
    """
    try:
        from transformers.cache_utils import get_layer_types_and_kwargs

        types, kwargs = get_layer_types_and_kwargs(config)
        layer_configs = list(config.per_layer_config)
    except Exception:  # an older transformers: every layer full attention
        count = getattr(config, "num_hidden_layers")
        types, kwargs, layer_configs = ["full_attention"] * count, [{}] * count, [config] * count
    layers = []
    for layer_type, layer_kwargs, layer_config in zip(types, kwargs, layer_configs):
        if layer_type not in PER_TOKEN_LAYERS:
            continue  # no cache (KV shared with another layer) or a fixed-size recurrent state
        if getattr(layer_config, "kv_lora_rank", None):
            values = layer_config.kv_lora_rank + layer_config.qk_rope_head_dim
        else:
            heads = layer_config.num_attention_heads
            kv_heads = getattr(layer_config, "num_key_value_heads", None) or heads
            head_dim = getattr(layer_config, "head_dim", None) or layer_config.hidden_size // heads
            values = 2 * kv_heads * head_dim
        layers.append((layer_kwargs.get("sliding_window"), values))
    return layers


def count_config(config, lora_rank: int, targets: list[str]) -> ModelCounts:
    """The counts of a transformers config object, from its model class built on the meta device."""
    import accelerate
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    with accelerate.init_empty_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    # init_empty_weights re-registers every parameter on meta, which unties the LM head from the
    # embeddings (164,608 parameters for the tiny refund model instead of its 119,360): tie them again.
    model.tie_weights()
    parameters = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=True))
    routed = routed_expert_parameters(model)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    experts, per_token = _config_value(text, EXPERT_COUNT_KEYS), _config_value(text, EXPERTS_PER_TOKEN_KEYS)
    inactive = routed - routed * per_token // experts if routed and experts and per_token else 0
    model_class = type(model).__name__
    # The adapter on meta too: PEFT would otherwise allocate and initialise it on the CPU (4 GB and
    # 9 s of kaiming init for Qwen3-30B-A3B's all-linear adapter).
    with torch.device("meta"):
        peft_model = get_peft_model(model, lora_config(model, lora_rank, targets), low_cpu_mem_usage=True)
    trainable = sum(p.numel() for _, p in peft_model.named_parameters(remove_duplicate=True) if p.requires_grad)
    return ModelCounts(parameters=parameters, active_parameters=parameters - inactive, trainable=trainable,
                       vocab_size=int(text.vocab_size), kv_layers=tuple(kv_layers(text)),
                       counted_by=f"{model_class} on the meta device")


def count_answer(config_path: str, lora_rank: int, targets: list[str]) -> dict:
    """{'counts': ...}, {'unsupported': why} or {'error': one line}: what the cache keeps."""
    import warnings

    from transformers import AutoConfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            config = AutoConfig.from_pretrained(str(Path(config_path).parent), local_files_only=True)
        except (ValueError, KeyError) as error:
            return {"unsupported": f"transformers {_version('transformers')} has no class for it ({str(error).splitlines()[0][:200]})"}
        except OSError as error:
            return {"error": f"cannot read {config_path}: {error}"}
        try:
            return {"counts": count_config(config, lora_rank, targets).to_json()}
        except BudgetError as error:
            return {"error": str(error)}
        except Exception as error:  # the class or PEFT refused the config: one line, not a traceback
            message = str(error).splitlines()[0][:300] if str(error) else ""
            return {"error": f"{config_path}: the model class or PEFT refused it ({type(error).__name__}: {message})"}


if __name__ == "__main__":
    print(json.dumps(count_answer(sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]))))
