"""Tests of agentrl/budget.py: SPEC section 11's memory arithmetic, figure by figure.

The worked example (Qwen3-1.7B, rank 16 on every projection, 8 rollouts of 2,048 tokens, a
16 GB machine) is read from a config.json the test writes, as a user's model folder would be.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.engines.trl.budget import GB, Budget, BudgetError, ModelShape, estimate_budget, format_bytes, measured_rows

QWEN3_1_7B = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "num_hidden_layers": 28,
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 6144,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}
ALL_PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def write_model_dir(root: Path, config: dict) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config))
    return root


@pytest.fixture
def qwen3_shape(tmp_path) -> ModelShape:
    return ModelShape.from_config_dir(write_model_dir(tmp_path / "Qwen3-1.7B", QWEN3_1_7B))


@pytest.fixture
def spec_budget(qwen3_shape) -> Budget:
    return estimate_budget(
        qwen3_shape, lora_rank=16, lora_targets=ALL_PROJECTIONS, sequences=8, tokens_per_sequence=2048, machine_bytes=16 * GB
    )


def gb(n_bytes: int) -> str:
    return format_bytes(n_bytes).removesuffix(" GB")


# --- SPEC 11's worked example, one test per published figure ---------------------------------


def test_spec_worked_example_weights_3_4_gb(spec_budget):
    assert 1.7e9 <= spec_budget.parameters < 1.75e9
    assert gb(spec_budget.weights) == "3.4"


def test_spec_worked_example_adapter_0_3_gb_about_17_million_trainable(spec_budget):
    assert round(spec_budget.trainable_parameters / 1e6) == 17
    assert gb(spec_budget.adapter) == "0.3"


def test_spec_worked_example_kv_cache_1_9_gb_112_kib_per_token(qwen3_shape, spec_budget):
    assert qwen3_shape.kv_bytes_per_token() == 112 * 1024
    assert gb(spec_budget.kv_cache) == "1.9"


def test_spec_worked_example_activations_and_logits_1_2_gb(spec_budget):
    assert gb(spec_budget.activations_logits) == "1.2"


def test_spec_worked_example_sandbox_1_gb_and_os_2_gb(spec_budget):
    assert spec_budget.sandbox == 1 * GB
    assert spec_budget.os_reserve == 2 * GB


def test_spec_worked_example_free_6_2_gb(spec_budget):
    assert gb(spec_budget.free) == "6.2"
    assert spec_budget.fits
    assert spec_budget.refusal() is None


def test_spec_worked_example_table_text(spec_budget):
    lines = spec_budget.table_text().splitlines()
    figures = {line.rsplit(None, 2)[0].strip(): line.rsplit(None, 2)[1] for line in lines if line.endswith(" GB")}
    assert figures == {
        "weights": "3.4",
        "adapter + gradients + optimiser": "0.3",
        "KV cache": "1.9",
        "activations and logits": "1.2",
        "sandbox": "1.0",
        "OS reserve": "2.0",
        "free": "6.2",
        "machine": "16.0",
    }


# --- the shape and the arithmetic behind the figures -----------------------------------------


def test_lora_parameters_are_rank_times_in_plus_out_over_every_layer(qwen3_shape):
    per_layer = (2048 + 2048) + 2 * (2048 + 1024) + (2048 + 2048) + 2 * (2048 + 6144) + (6144 + 2048)
    assert qwen3_shape.lora_parameters(16, ALL_PROJECTIONS) == 28 * 16 * per_layer
    assert qwen3_shape.lora_parameters(16, ["q", "v"]) == 28 * 16 * (4096 + 3072)
    assert qwen3_shape.lora_parameters(16, "all-linear") == qwen3_shape.lora_parameters(16, ALL_PROJECTIONS)


def test_untied_model_counts_its_lm_head(tmp_path):
    tied = ModelShape.from_config(QWEN3_1_7B)
    untied = ModelShape.from_config({**QWEN3_1_7B, "tie_word_embeddings": False})
    assert untied.parameters - tied.parameters == 151936 * 2048


def test_defaults_kv_heads_to_heads_and_head_dim_to_hidden_over_heads():
    shape = ModelShape.from_config({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100})
    assert (shape.num_key_value_heads, shape.head_dim) == (4, 16)


def test_explicit_parameter_count_overrides_the_shape(tmp_path):
    shape = ModelShape.from_config_dir(write_model_dir(tmp_path / "m", QWEN3_1_7B), parameter_count=2_031_739_904)
    assert shape.parameters == 2_031_739_904
    assert shape.computed_parameters() != shape.parameters


def test_budget_rows_for_the_store(spec_budget):
    rows = spec_budget.rows("run-1")
    assert {row["source"] for row in rows} == {"estimate"}
    assert {row["run_id"] for row in rows} == {"run-1"}
    by_component = {row["component"]: row["bytes"] for row in rows}
    assert list(by_component) == ["weights", "adapter", "kv_cache", "activations_logits", "sandbox", "os_reserve", "free", "total"]
    assert by_component["total"] == 16 * GB - by_component["free"] - by_component["os_reserve"]


def test_measured_rows_line_up_with_the_estimate():
    rows = measured_rows("run-1", peak_rss_bytes=3 * GB, gpu_peak_bytes=5 * GB)
    assert [(row["component"], row["bytes"], row["source"]) for row in rows] == [
        ("process_peak_rss", 3 * GB, "measured"),
        ("gpu_peak", 5 * GB, "measured"),
        ("total", 8 * GB, "measured"),
    ]
    assert [row["component"] for row in measured_rows("run-1", peak_rss_bytes=1)] == ["process_peak_rss", "total"]


def test_format_bytes_is_decimal_gb_with_one_decimal():
    assert format_bytes(3_441_149_952) == "3.4 GB"
    assert format_bytes(16 * GB) == "16.0 GB"


# --- refusals and errors ---------------------------------------------------------------------


def test_model_too_big_for_the_machine_is_refused_naming_the_weights(qwen3_shape):
    budget = estimate_budget(qwen3_shape, 16, ALL_PROJECTIONS, sequences=8, tokens_per_sequence=2048, machine_bytes=8 * GB)
    assert not budget.fits
    refusal = budget.refusal()
    assert "\n" not in refusal
    assert "does not fit" in refusal
    assert "largest: weights 3.4 GB (use a smaller model)" in refusal


def test_too_many_rollouts_are_refused_naming_the_kv_cache(qwen3_shape):
    budget = estimate_budget(qwen3_shape, 16, ALL_PROJECTIONS, sequences=64, tokens_per_sequence=4096, machine_bytes=16 * GB)
    assert not budget.fits
    assert "largest: KV cache 30.1 GB (use fewer rollouts or fewer tokens per rollout)" in budget.refusal()


def test_missing_model_dir_is_a_budget_error(tmp_path):
    with pytest.raises(BudgetError, match="does not exist"):
        ModelShape.from_config_dir(tmp_path / "nowhere")


def test_model_dir_without_config_json_is_a_budget_error(tmp_path):
    with pytest.raises(BudgetError, match="no config.json"):
        ModelShape.from_config_dir(tmp_path)


def test_config_missing_a_field_is_a_budget_error_naming_it(tmp_path):
    config = {key: value for key, value in QWEN3_1_7B.items() if key != "intermediate_size"}
    with pytest.raises(BudgetError, match="no 'intermediate_size'"):
        ModelShape.from_config_dir(write_model_dir(tmp_path / "m", config))


def test_config_that_is_not_json_is_a_budget_error(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(BudgetError, match="not readable JSON"):
        ModelShape.from_config_dir(tmp_path)


def test_unknown_lora_target_is_a_budget_error(qwen3_shape):
    with pytest.raises(BudgetError, match="unknown LoRA target 'lm_head'"):
        estimate_budget(qwen3_shape, 16, ["lm_head"], sequences=8, tokens_per_sequence=2048, machine_bytes=16 * GB)


def test_the_tiny_models_table_prints_no_zero_gb_lines():
    """Issue 13, finding 10: small components in MB, an unused one left out, counts as read."""
    from agentrl.config import load_preset
    from agentrl.engines.trl.budget import run_budget
    from agentrl.tasks.refund.tiny_model import MODEL_DIR

    text = run_budget(load_preset("lm-refund-guarded"), MODEL_DIR).table_text()
    assert "0.0 GB" not in text and "0.0 MB" not in text
    assert "MB" in text and "(119,360 parameters, 16,384 trainable)" in text
