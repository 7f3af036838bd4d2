"""The budget counts a model as its own class does: one test per architecture family (dense, tied
embeddings, fused projections, mixture of experts, latent attention), each from a config.json of
public shapes, against the model built independently here on PyTorch's meta device.

Layer counts are cut to 4 (the family's structure kept: alternating sliding layers, DeepSeek's
first dense layer) so each count takes seconds; the full-size figures are in the README's table.
"""

from __future__ import annotations

import json

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM

from agentrl.engines.trl.budget import GB, BudgetError, ModelShape, estimate_budget
from agentrl.engines.trl.model_count import CACHE_ENV, ModelCounts, cache_dir, load_counts, model_counts
from public_configs import (DEEPSEEK_V3, GEMMA_2_2B, GPT_OSS_20B, LLAMA_3_1_8B, MIXTRAL_8X7B, PHI_3_MINI,
                            QWEN3_30B_A3B, with_layers)

LAYERS = 4


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))


def model_dir(tmp_path, name: str, config: dict):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def meta_model(config: dict):
    """The model class built on the meta device, independently of the budget's own build."""
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))


def meta_count(config: dict) -> int:
    return sum(p.numel() for p in meta_model(config).parameters())  # parameters() yields a tied weight once


def meta_trainable(config: dict, rank: int, **targets) -> int:
    peft_model = get_peft_model(meta_model(config), LoraConfig(r=rank, task_type="CAUSAL_LM", **targets))
    return sum(p.numel() for p in peft_model.parameters() if p.requires_grad)


def expert_parameters(config: dict) -> int:
    return sum(p.numel() for name, p in meta_model(config).named_parameters() if ".experts." in name)


def test_dense_llama_3_1_8b_counts_equal_its_class(tmp_path):
    config = with_layers(LLAMA_3_1_8B, LAYERS)
    counts = load_counts(model_dir(tmp_path, "llama", config), 16, "all-linear")
    assert counts.parameters == counts.active_parameters == meta_count(config)
    assert counts.trainable == meta_trainable(config, 16, target_modules="all-linear")
    # Grouped-query attention: keys and values of 8 heads of 128, every layer full.
    assert counts.kv_layers == ((None, 2 * 8 * 128),) * LAYERS
    assert counts.counted_by == "LlamaForCausalLM on the meta device"


def test_dense_counts_equal_the_shape_arithmetic_for_llama_3_1_8b(tmp_path):
    """The full-size model: the class's count is the published 8.03B, the old arithmetic's too."""
    counts = load_counts(model_dir(tmp_path, "llama", LLAMA_3_1_8B), 16, ["q_proj", "v_proj"])
    shape = ModelShape.from_config(LLAMA_3_1_8B)
    assert counts.parameters == shape.computed_parameters() == 8_030_261_248
    assert counts.trainable == shape.lora_parameters(16, ["q_proj", "v_proj"])


def test_tied_embeddings_of_gemma_2_2b_count_once(tmp_path):
    config = with_layers(GEMMA_2_2B, LAYERS)
    counts = load_counts(model_dir(tmp_path, "gemma", config), 16, ["q_proj", "k_proj", "v_proj", "o_proj"])
    assert counts.parameters == meta_count(config)
    untied = meta_count({**config, "tie_word_embeddings": False})
    assert untied - counts.parameters == 256000 * 2304  # the LM head is the embedding, counted once
    assert counts.trainable == meta_trainable(config, 16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    # Sliding-window layers (every other one) keep at most 4,096 tokens; 4 KV heads of 256.
    assert counts.kv_layers == ((4096, 2 * 4 * 256), (None, 2 * 4 * 256)) * (LAYERS // 2)


def test_fused_projections_of_phi_3_mini_are_lora_targets(tmp_path):
    config = with_layers(PHI_3_MINI, LAYERS)
    counts = load_counts(model_dir(tmp_path, "phi3", config), 16, ["qkv_proj", "gate_up_proj"])
    assert counts.parameters == meta_count(config)
    assert counts.trainable == meta_trainable(config, 16, target_modules=["qkv_proj", "gate_up_proj"])
    assert counts.trainable == LAYERS * 16 * ((3072 + 3 * 3072) + (3072 + 2 * 8192))


@pytest.mark.parametrize("in_child", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_a_target_the_model_lacks_is_one_line_naming_the_ones_it_has(tmp_path, in_child):
    folder = model_dir(tmp_path, "phi3", with_layers(PHI_3_MINI, LAYERS))
    with pytest.raises(BudgetError) as caught:
        model_counts(folder, 16, ["q_proj", "o_proj"], in_child=in_child)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("LoRA target q_proj not in Phi3ForCausalLM")
    assert "it has: down_proj, gate_up_proj, o_proj, qkv_proj" in message


def test_mixture_of_experts_mixtral_holds_every_expert_and_computes_with_two(tmp_path):
    config = with_layers(MIXTRAL_8X7B, LAYERS)
    counts = load_counts(model_dir(tmp_path, "mixtral", config), 16, ["q_proj", "v_proj"])
    total = meta_count(config)
    experts = expert_parameters(config)
    assert experts == LAYERS * 8 * 3 * 4096 * 14336
    assert counts.parameters == total
    assert counts.active_parameters == total - experts * 6 // 8  # 2 of 8 experts per token
    assert counts.trainable == meta_trainable(config, 16, target_modules=["q_proj", "v_proj"])


def test_mixture_of_experts_qwen3_30b_a3b_lora_on_expert_parameters(tmp_path):
    config = with_layers(QWEN3_30B_A3B, LAYERS)
    targets = ["q_proj", "mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
    counts = load_counts(model_dir(tmp_path, "qwen3moe", config), 8, targets)
    experts = expert_parameters(config)
    assert counts.parameters == meta_count(config)
    assert counts.active_parameters == counts.parameters - experts * 120 // 128  # 8 of 128 experts per token
    assert counts.trainable == meta_trainable(config, 8, target_modules=["q_proj"],
                                              target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"])
    assert counts.trainable > meta_trainable(config, 8, target_modules=["q_proj"])


def test_latent_attention_deepseek_v3_caches_the_latent(tmp_path):
    config = with_layers(DEEPSEEK_V3, LAYERS)  # 3 dense layers, then mixture-of-experts layers
    counts = load_counts(model_dir(tmp_path, "deepseek", config), 16, ["q_a_proj", "kv_a_proj_with_mqa"])
    assert counts.parameters == meta_count(config)
    routed = expert_parameters(config)  # the shared expert is not routed: always active
    assert routed == (LAYERS - 3) * 256 * 3 * 7168 * 2048
    assert counts.active_parameters == counts.parameters - routed * 248 // 256
    assert counts.trainable == meta_trainable(config, 16, target_modules=["q_a_proj", "kv_a_proj_with_mqa"])
    # Multi-head latent attention: kv_lora_rank + qk_rope_head_dim values per token and layer.
    assert counts.kv_layers == ((None, 512 + 64),) * LAYERS


def test_gpt_oss_sliding_layers_hold_their_window(tmp_path):
    config = with_layers(GPT_OSS_20B, LAYERS)
    counts = load_counts(model_dir(tmp_path, "gptoss", config), 16, ["q_proj"])
    assert counts.parameters == meta_count(config)
    assert counts.kv_layers == ((128, 2 * 8 * 64), (None, 2 * 8 * 64)) * (LAYERS // 2)
    assert counts.kv_bytes(2048, 2) == (128 + 2048) * 2 * 8 * 64 * 2 * (LAYERS // 2)


@pytest.mark.slow  # a child process imports torch, transformers and PEFT: about 5 s
def test_counts_are_cached_per_config_and_lora_settings(tmp_path):
    folder = model_dir(tmp_path, "llama", with_layers(LLAMA_3_1_8B, 2))
    first = model_counts(folder, 16, ["q_proj"], in_child=True)  # as the dashboard and the CLI count: torch not loaded
    assert first.parameters == meta_count(with_layers(LLAMA_3_1_8B, 2))
    assert len(list(cache_dir().glob("*.json"))) == 1
    assert load_counts(folder, 16, ["q_proj"]) == first
    assert len(list(cache_dir().glob("*.json"))) == 1
    load_counts(folder, 8, ["q_proj"])
    assert len(list(cache_dir().glob("*.json"))) == 2
    # The cached answer is read back without a child: an edited cache file is what comes back.
    path = next(p for p in cache_dir().glob("*.json") if json.loads(p.read_text())["counts"]["trainable"] == first.trainable)
    data = json.loads(path.read_text())
    data["counts"]["parameters"] = 7
    path.write_text(json.dumps(data))
    assert load_counts(folder, 16, ["q_proj"]).parameters == 7


def test_a_config_transformers_has_no_class_for_is_counted_from_its_shape(tmp_path):
    config = {**with_layers(LLAMA_3_1_8B, 2), "model_type": "not-a-model-type"}
    counts = load_counts(model_dir(tmp_path, "custom", config), 16, ["q_proj"])
    assert counts.parameters == ModelShape.from_config(config).computed_parameters()
    assert counts.counted_by.startswith("config.json's shape")


def test_the_budget_of_a_mixture_of_experts_counts_every_expert_in_its_weights(tmp_path):
    counts = load_counts(model_dir(tmp_path, "qwen3moe", with_layers(QWEN3_30B_A3B, LAYERS)), 16, ["q_proj", "v_proj"])
    budget = estimate_budget(counts, 16, ["q_proj", "v_proj"], sequences=8, tokens_per_sequence=2048, machine_bytes=80 * GB)
    assert budget.weights == counts.parameters * 2
    assert budget.kv_cache == 8 * 2048 * LAYERS * 2 * 4 * 128 * 2
    assert budget.forward_flops_per_token == 2 * counts.active_parameters
    assert "active" in budget.table_text().splitlines()[-2]


def test_shape_counts_keep_the_spec_arithmetic():
    shape = ModelShape.from_config({**QWEN3_30B_A3B, "model_type": "qwen3"})
    counts = ModelCounts.from_shape(shape, 16, "all-linear")
    assert counts.kv_bytes(2048, 2) == 2048 * shape.kv_bytes_per_token(2)
    assert counts.active_parameters == counts.parameters
