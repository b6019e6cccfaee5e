"""Parameter counts and KV bytes of planner.catalog.architecture, on published configs.

Inline configs are the architecture fields of each model's Hugging Face config.json; the same
checks run on the embedded catalog's files when they are present.
"""

from __future__ import annotations

from typing import Any

import pytest

from planner.catalog import Catalog, architecture_from_config
from planner.catalog.architecture import ModelArchitecture

GIB = 2**30

LLAMA_3_70B: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
LLAMA_3_8B: dict[str, Any] = {
    **LLAMA_3_70B,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
}
MISTRAL_7B_V01: dict[str, Any] = {
    "model_type": "mistral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "sliding_window": 4096,
    "tie_word_embeddings": False,
}
DEEPSEEK_V3: dict[str, Any] = {
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_shared_experts": 1,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "tie_word_embeddings": False,
}
GPT_OSS_120B: dict[str, Any] = {
    "model_type": "gpt_oss",
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_hidden_layers": 36,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "num_local_experts": 128,
    "experts_per_token": 4,
    "vocab_size": 201088,
    "sliding_window": 128,
    "attention_bias": True,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
}
QWEN3_NEXT_80B: dict[str, Any] = {
    "model_type": "qwen3_next",
    "hidden_size": 2048,
    "intermediate_size": 5120,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "num_hidden_layers": 48,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "full_attention_interval": 4,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "vocab_size": 151936,
    "max_position_embeddings": 262144,
    "tie_word_embeddings": False,
}
MIXTRAL_8X7B: dict[str, Any] = {
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "sliding_window": None,
    "tie_word_embeddings": False,
}


def arch(config: dict[str, Any]) -> ModelArchitecture:
    return architecture_from_config(config)


# ----- parameter counts: exact sums of the published shapes ---------------------------------------


@pytest.mark.parametrize(
    ("config", "total", "active"),
    [
        # 80 x 855,654,400 + 2 x 128,256 x 8,192 + 8,192 (meta-llama card: 70.6B)
        (LLAMA_3_70B, 70_553_706_496, None),
        (LLAMA_3_8B, 8_030_261_248, None),
        (MISTRAL_7B_V01, 7_241_732_096, None),
        # 3 dense + 58 MoE layers (256 routed + 1 shared), MLA; main model without MTP: 671B / 37B
        (DEEPSEEK_V3, 671_026_404_352, 36_625_603_584),
        # OpenAI's gpt-oss model card: 116.83B total, 5.13B active
        (GPT_OSS_120B, 116_829_156_672, 5_132_849_472),
        (MIXTRAL_8X7B, 46_702_792_704, 12_748_853_248),
    ],
)
def test_parameter_counts_are_exact(config: dict[str, Any], total: int, active: int | None) -> None:
    model = arch(config)
    assert model.total_params == total
    if active is not None:
        assert model.active_params == active


def test_qwen3_next_is_80b_with_three_in_four_layers_linear() -> None:
    model = arch(QWEN3_NEXT_80B)
    assert model.total_params / 1e9 == pytest.approx(79.67, abs=0.01)
    assert (model.num_full_layers, model.num_linear_layers) == (12, 36)
    assert model.layer_kinds[:4] == ("linear", "linear", "linear", "full")


# ----- KV bytes per token -------------------------------------------------------------------------


def test_llama_3_70b_bf16_kv_is_320_kib_a_token_and_40_gib_at_128k() -> None:
    model = arch(LLAMA_3_70B)
    assert model.kv_bytes_per_token(2.0) == 327_680 == 320 * 1024
    assert model.kv_bytes_for_sequence(131_072, 2.0) == 40 * GIB
    assert model.kv_bytes_for_sequence(2_048, 2.0) == 640 * 2**20
    assert 64 * model.kv_bytes_for_sequence(2_048, 2.0) == 40 * GIB


def test_fp8_kv_cache_halves_llama_3_70b() -> None:
    model = arch(LLAMA_3_70B)
    assert model.kv_bytes_per_token(1.0) == 163_840
    assert model.kv_bytes_for_sequence(131_072, 1.0) == 20 * GIB


def test_deepseek_v3_caches_the_mla_latent_not_the_heads() -> None:
    model = arch(DEEPSEEK_V3)
    assert model.is_mla
    assert model.kv_elements_per_token_per_layer() == 512 + 64
    assert model.kv_bytes_per_token(2.0) == 61 * 576 * 2 == 70_272
    # uncompressed, 128 heads of K (128 + 64) and V (128) would be 71x more
    assert 128 * (192 + 128) / model.kv_elements_per_token_per_layer() == pytest.approx(71.1, 0.01)


def test_gpt_oss_sliding_layers_cap_at_128_tokens() -> None:
    model = arch(GPT_OSS_120B)
    per_layer = 2 * 8 * 64 * 2
    assert (model.num_full_layers, model.num_sliding_layers) == (18, 18)
    assert model.kv_bytes_for_sequence(131_072) == per_layer * (18 * 131_072 + 18 * 128)
    # below the window every layer holds every token
    assert model.kv_bytes_for_sequence(100) == per_layer * 36 * 100


def test_mistral_7b_v01_window_caps_every_layer_at_4096() -> None:
    model = arch(MISTRAL_7B_V01)
    assert model.sliding_window == 4096 and model.num_sliding_layers == 32
    per_token = 32 * 2 * 8 * 128 * 2
    assert model.kv_bytes_for_sequence(32_768) == per_token * 4096
    assert model.kv_bytes_for_sequence(4096) == model.kv_bytes_for_sequence(32_768)


def test_qwen3_next_counts_kv_only_in_full_attention_layers() -> None:
    model = arch(QWEN3_NEXT_80B)
    assert model.kv_bytes_per_token(2.0) == 12 * 2 * 2 * 256 * 2 == 24_576
    state = model.linear_state_bytes_per_sequence()
    # per linear layer: conv (2 x 2048 + 4096) x 3 + delta state 32 x 128 x 128, in bf16
    assert state == 36 * ((2 * 2048 + 4096) * 3 + 32 * 128 * 128) * 2
    assert model.kv_bytes_for_sequence(1000) == 24_576 * 1000 + state


# ----- the embedded catalog's files ---------------------------------------------------------------

CATALOG_EXPECTATIONS = {
    "meta-llama/Llama-3.1-70B-Instruct": (70_553_706_496, 327_680),
    "meta-llama/Llama-3.3-70B-Instruct": (70_553_706_496, 327_680),
    "meta-llama/Llama-3.1-8B-Instruct": (8_030_261_248, 131_072),
    "mistralai/Mistral-7B-v0.1": (7_241_732_096, 131_072),
    "deepseek-ai/DeepSeek-V3": (671_026_404_352, 70_272),
    "openai/gpt-oss-120b": (116_829_156_672, 73_728),
    "Qwen/Qwen3-Next-80B-A3B-Instruct": (None, 24_576),
}


@pytest.mark.parametrize("hf_id", sorted(CATALOG_EXPECTATIONS))
def test_embedded_model_files_match_the_published_shapes(catalog: Catalog, hf_id: str) -> None:
    total, kv = CATALOG_EXPECTATIONS[hf_id]
    model = catalog.model(hf_id).architecture
    if total is not None:
        assert model.total_params == total
    assert model.kv_bytes_per_token(2.0) == kv


def test_embedded_sliding_windows(catalog: Catalog) -> None:
    wanted = {
        "openai/gpt-oss-120b": 128,
        "openai/gpt-oss-20b": 128,
        "mistralai/Mistral-7B-v0.1": 4096,
    }
    for hf_id, window in wanted.items():
        if hf_id.lower() in catalog.models:
            assert catalog.model(hf_id).architecture.sliding_window == window
