"""config.json values of public models, as their Hugging Face repositories publish them (the fields
that set their shapes), for the budget's count tests and the table in the README."""

LLAMA_3_1_8B = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 128256, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 131072, "rope_theta": 500000.0, "tie_word_embeddings": False,
}
GEMMA_2_2B = {
    "model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "vocab_size": 256000, "hidden_size": 2304,
    "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
    "head_dim": 256, "sliding_window": 4096, "query_pre_attn_scalar": 256, "final_logit_softcapping": 30.0,
    "attn_logit_softcapping": 50.0, "tie_word_embeddings": True,
}
PHI_3_MINI = {
    "model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "vocab_size": 32064, "hidden_size": 3072,
    "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
    "sliding_window": 2047, "max_position_embeddings": 4096, "tie_word_embeddings": False,
}
MIXTRAL_8X7B = {
    "model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "vocab_size": 32000, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "num_local_experts": 8, "num_experts_per_tok": 2, "tie_word_embeddings": False,
}
QWEN3_30B_A3B = {
    "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 151936, "hidden_size": 2048,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1,
    "mlp_only_layers": [], "norm_topk_prob": True, "tie_word_embeddings": False,
}
DEEPSEEK_V2_LITE = {
    "model_type": "deepseek_v2", "architectures": ["DeepseekV2ForCausalLM"], "vocab_size": 102400, "hidden_size": 2048,
    "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 27, "num_attention_heads": 16,
    "num_key_value_heads": 16, "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
    "first_k_dense_replace": 1, "moe_layer_freq": 1, "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "topk_method": "greedy", "n_group": 1, "topk_group": 1,
    "tie_word_embeddings": False,
}
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 129280, "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "n_group": 8, "topk_group": 4, "tie_word_embeddings": False,
}
QWEN2_5_7B = {
    "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 152064, "hidden_size": 3584,
    "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
    "tie_word_embeddings": False,
}
MISTRAL_7B_V0_1 = {
    "model_type": "mistral", "architectures": ["MistralForCausalLM"], "vocab_size": 32000, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "sliding_window": 4096, "tie_word_embeddings": False,
}
GPT_OSS_20B = {
    "model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "vocab_size": 201088, "hidden_size": 2880,
    "intermediate_size": 2880, "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8,
    "head_dim": 64, "num_local_experts": 32, "num_experts_per_tok": 4, "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 12, "tie_word_embeddings": False,
}
QWEN3_1_7B = {
    "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "vocab_size": 151936, "hidden_size": 2048,
    "intermediate_size": 6144, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
    "head_dim": 128, "tie_word_embeddings": True,
}

PUBLIC = {
    "Llama-3.1-8B": LLAMA_3_1_8B, "Gemma-2-2B": GEMMA_2_2B, "Phi-3-mini-4k": PHI_3_MINI, "Mixtral-8x7B": MIXTRAL_8X7B,
    "Qwen3-30B-A3B": QWEN3_30B_A3B, "DeepSeek-V2-Lite": DEEPSEEK_V2_LITE, "DeepSeek-V3": DEEPSEEK_V3,
    "Qwen2.5-7B": QWEN2_5_7B, "Mistral-7B-v0.1": MISTRAL_7B_V0_1, "gpt-oss-20b": GPT_OSS_20B, "Qwen3-1.7B": QWEN3_1_7B,
}


def with_layers(config: dict, layers: int) -> dict:
    """The same family with fewer decoder layers (a test's count stays quick), per-layer lists cut to match."""
    out = {**config, "num_hidden_layers": layers}
    if "layer_types" in out:
        out["layer_types"] = out["layer_types"][:layers]
    return out
