"""The open models of 2026 in the embedded catalog (issue 28): parameter counts against the
published figures, KV bytes per token worked by hand for each attention class, and the parser's
reading of the fields new to these families (see planner.catalog.architecture's docstring).

The published figures and their sources are each file's ``_servewise`` block; the table below
repeats them so that a file edited by mistake fails here.
"""

from __future__ import annotations

import pytest

from planner.catalog import Catalog, architecture_from_config
from planner.catalog.architecture import ModelArchitecture

#: hf_id: (published total, published active) in billions, as each file's params_source quotes
#: them: Kimi K2 report's 1.04T / 32B (K2.5 keeps K2's language model), GLM-5 README 744B / 40B,
#: MiniMax-M2 230B / 10B (M2.5 the same shapes), Qwen cards 397B / 17B and 80B / 3B, Meta's
#: Llama 4 post 109B and 400B / 17B, DeepSeek-V3.1's card 671B / 37B (for deepseek-ai's FP8
#: checkpoint and NVIDIA's NVFP4 one alike)
PUBLISHED_2026_B = {
    "moonshotai/Kimi-K2-Instruct": (1040.0, 32.0),
    "moonshotai/Kimi-K2.5": (1040.0, 32.0),
    "zai-org/GLM-5": (744.0, 40.0),
    "MiniMaxAI/MiniMax-M2.5": (230.0, 10.0),
    "Qwen/Qwen3.5-397B-A17B": (397.0, 17.0),
    "Qwen/Qwen3-Next-80B-A3B-Thinking": (80.0, 3.0),
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": (109.0, 17.0),
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": (400.0, 17.0),
    "nvidia/DeepSeek-V3.1-NVFP4": (671.0, 37.0),
    "deepseek-ai/DeepSeek-V3.1": (671.0, 37.0),
}


def _arch(catalog: Catalog, hf_id: str) -> ModelArchitecture:
    return catalog.model(hf_id).architecture


# ----- parameter counts ---------------------------------------------------------------------


@pytest.mark.parametrize("hf_id", sorted(PUBLISHED_2026_B))
def test_2026_models_total_parameters_within_two_percent_of_published(
    catalog: Catalog, hf_id: str
) -> None:
    card = catalog.model(hf_id)
    total_b, active_b = PUBLISHED_2026_B[hf_id]
    assert (card.published_total_params_b, card.published_active_params_b) == (total_b, active_b)
    assert card.architecture.total_params / 1e9 == pytest.approx(total_b, rel=0.02)


@pytest.mark.parametrize(
    "hf_id", sorted(set(PUBLISHED_2026_B) - {"Qwen/Qwen3-Next-80B-A3B-Thinking"})
)
def test_2026_models_active_parameters_match_the_rounded_published_figure(
    catalog: Catalog, hf_id: str
) -> None:
    """The cards round the active figure to whole billions and some count the input embedding
    (Kimi, Qwen3.5, Llama 4: see the architecture module's conventions): within 5% of either
    reading. Qwen3-Next's "3B" is below both (3.56B with the lm_head) and is left out."""
    model = _arch(catalog, hf_id)
    active_b = PUBLISHED_2026_B[hf_id][1]
    with_embedding = (model.active_params + model.embedding_params) / 1e9
    error = min(abs(model.active_params / 1e9 - active_b), abs(with_embedding - active_b))
    assert error / active_b < 0.05


def test_every_catalog_model_is_within_two_percent_of_its_published_total(
    catalog: Catalog,
) -> None:
    checked = []
    for card in catalog.models.values():
        if card.origin != "embedded" or card.published_total_params_b is None:
            continue
        computed_b = card.architecture.total_params / 1e9
        assert computed_b == pytest.approx(card.published_total_params_b, rel=0.02), card.hf_id
        checked.append(card.hf_id)
    assert len(checked) >= 39


def test_llama_4_maverick_alternates_dense_and_moe_layers_with_a_shared_expert(
    catalog: Catalog,
) -> None:
    model = _arch(catalog, "meta-llama/Llama-4-Maverick-17B-128E-Instruct")
    assert model.moe_layers == tuple(range(1, 48, 2))  # interleave_moe_layer_step 2
    h = 5120
    attention = h * 40 * 128 + 2 * h * 8 * 128 + 40 * 128 * h  # q, k+v, o; QK norm weightless
    norms = 2 * h
    assert model.layer_params(0) == norms + attention + 3 * h * 16384  # intermediate_size_mlp
    expert = 3 * h * 8192
    assert model.layer_params(1) == norms + attention + 128 * expert + expert + h * 128
    # a token: one routed expert and the shared one
    assert model.layer_params(1, active_only=True) == norms + attention + 2 * expert + h * 128
    scout = _arch(catalog, "meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert scout.moe_layers == tuple(range(48)) and scout.shared_expert_intermediate_size == 8192


def test_minimax_m2_norms_queries_and_keys_per_layer(catalog: Catalog) -> None:
    model = _arch(catalog, "MiniMaxAI/MiniMax-M2.5")
    h = 3072
    assert model.qk_norm_params == (48 + 8) * 128
    attention = h * 48 * 128 + 2 * h * 8 * 128 + 48 * 128 * h + (48 + 8) * 128
    experts = 256 * 3 * h * 1536 + h * 256  # every layer MoE, no shared expert, the router
    assert model.layer_params(0) == 2 * h + attention + experts
    assert model.block_scaled_fp8 and len(model.moe_layers) == 62


def test_qwen3_5_gates_its_attention_output_and_counts_qwen_norms(catalog: Catalog) -> None:
    model = _arch(catalog, "Qwen/Qwen3.5-397B-A17B")
    assert model.attention_output_gate and model.qk_norm_params == 2 * 256
    h = 4096
    gated_attention = 2 * h * 32 * 256 + 2 * h * 2 * 256 + 32 * 256 * h + 2 * 256
    assert model.layer_kinds[3] == "full"
    assert model._mixer_params(3) == gated_attention


def test_kimi_k2_5_reads_its_text_config_and_int4_experts(catalog: Catalog) -> None:
    k25 = _arch(catalog, "moonshotai/Kimi-K2.5")
    k2 = _arch(catalog, "moonshotai/Kimi-K2-Instruct")
    assert k25.total_params == k2.total_params and k25.num_experts == 384
    assert k25.max_position_embeddings == 262_144 and k2.max_position_embeddings == 131_072
    # compressed-tensors' ignore list skips self_attn: only the routed experts are INT4
    assert k25.quant_method == "compressed-tensors" and k25.experts_only_quantized
    assert k2.quant_method == "fp8" and k2.block_scaled_fp8 and not k2.experts_only_quantized


def test_deepseek_v3_1_has_deepseek_v3s_shapes(catalog: Catalog) -> None:
    v31 = _arch(catalog, "nvidia/DeepSeek-V3.1-NVFP4")
    assert v31.total_params == _arch(catalog, "deepseek-ai/DeepSeek-V3").total_params
    # its NVFP4 quantisation lives in hf_quant_config.json, not in config.json
    assert v31.quant_method is None and v31.kv_bytes_per_token(2.0) == 70_272
    # deepseek-ai's own checkpoint: the same shapes, its FP8 weights in 128 x 128 blocks
    fp8 = _arch(catalog, "deepseek-ai/DeepSeek-V3.1")
    assert fp8.total_params == v31.total_params and fp8.active_params == v31.active_params
    assert fp8.quant_method == "fp8" and fp8.block_scaled_fp8


# ----- KV bytes per token, by hand, one test per attention class --------------------------------


def test_mla_kv_is_the_latent_and_rope_key_per_layer(catalog: Catalog) -> None:
    """Kimi-K2: 61 MLA layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes."""
    model = _arch(catalog, "moonshotai/Kimi-K2-Instruct")
    assert model.model_classes == ("fine-grained MoE", "MLA")
    assert model.kv_bytes_per_token(2.0) == 61 * (512 + 64) * 2 == 70_272
    glm5 = _arch(catalog, "zai-org/GLM-5")  # 78 layers; the DSA indexer's keys are separate
    assert glm5.kv_bytes_per_token(2.0) == 78 * 576 * 2 == 89_856
    assert glm5.sparse_attention_topk == 2048


def test_gqa_kv_is_two_kv_heads_times_head_dim_per_layer(catalog: Catalog) -> None:
    """MiniMax-M2.5: 62 layers x 2 (K, V) x 8 KV heads x 128 x 2 bytes."""
    model = _arch(catalog, "MiniMaxAI/MiniMax-M2.5")
    assert model.model_classes == ("fine-grained MoE",)
    assert model.kv_bytes_per_token(2.0) == 62 * 2 * 8 * 128 * 2 == 253_952
    assert model.kv_bytes_per_token(1.0) == 126_976  # FP8 KV cache


def test_llama_4_chunked_layers_hold_one_chunk_and_nope_layers_every_token(
    catalog: Catalog,
) -> None:
    """48 layers x 2 x 8 KV heads x 128 x 2 bytes a token; past 8192 tokens the 36 chunked
    (RoPE) layers stop growing at the chunk, the 12 NoPE layers (every 4th) keep every token."""
    model = _arch(catalog, "meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert model.model_classes == ("coarse MoE", "sliding-window")
    assert model.layer_kinds[:4] == ("sliding", "sliding", "sliding", "full")
    assert (model.num_sliding_layers, model.num_full_layers) == (36, 12)
    per_layer = 2 * 8 * 128 * 2
    assert model.kv_bytes_per_token(2.0) == 48 * per_layer == 196_608
    assert model.sliding_window == 8192
    assert model.kv_bytes_for_sequence(100_000) == per_layer * (12 * 100_000 + 36 * 8192)
    assert model.kv_bytes_for_sequence(4000) == 196_608 * 4000  # within a chunk: every layer


def test_llama_4_reads_an_explicit_no_rope_layers_list(catalog: Catalog) -> None:
    config = dict(catalog.model("meta-llama/Llama-4-Scout-17B-16E-Instruct").config)
    text = dict(config["text_config"])
    text["no_rope_layers"] = [1, 0] * 24  # every 2nd layer NoPE (full), the rest chunked
    model = architecture_from_config({**config, "text_config": text})
    assert (model.num_sliding_layers, model.num_full_layers) == (24, 24)
    assert model.layer_kinds[:2] == ("sliding", "full")


def test_sliding_window_kv_caps_half_of_gpt_oss_20b_at_128_tokens(catalog: Catalog) -> None:
    """gpt-oss-20b: 24 layers alternating sliding (128) and full, 8 KV heads x 64."""
    model = _arch(catalog, "openai/gpt-oss-20b")
    per_layer = 2 * 8 * 64 * 2
    assert (model.num_sliding_layers, model.num_full_layers) == (12, 12)
    assert model.kv_bytes_per_token(2.0) == 24 * per_layer == 49_152
    assert model.kv_bytes_for_sequence(131_072) == per_layer * (12 * 131_072 + 12 * 128)


def test_hybrid_linear_kv_is_the_full_layers_plus_a_fixed_state(catalog: Catalog) -> None:
    """Qwen3.5-397B: 15 gated-attention layers x 2 x 2 KV heads x 256 x 2 bytes a token; 45
    Gated DeltaNet layers of conv state (2 x 16 x 128 + 64 x 128) x 3 and delta-rule state
    64 x 128 x 128 each, in 16-bit, a sequence."""
    model = _arch(catalog, "Qwen/Qwen3.5-397B-A17B")
    assert (model.num_full_layers, model.num_linear_layers) == (15, 45)
    assert model.kv_bytes_per_token(2.0) == 15 * 2 * 2 * 256 * 2 == 30_720
    state = 45 * ((2 * 16 * 128 + 64 * 128) * 3 + 64 * 128 * 128) * 2
    assert state == 97_689_600
    assert model.kv_bytes_for_sequence(1000) == 30_720 * 1000 + state


def test_bad_llama_4_chunk_fields_are_named(catalog: Catalog) -> None:
    config = dict(catalog.model("meta-llama/Llama-4-Scout-17B-16E-Instruct").config)
    text = dict(config["text_config"])
    for field, value, allowed in (
        ("no_rope_layer_interval", 0, "a layer count from 1"),
        ("attention_chunk_size", 10**9, "at most"),
    ):
        bad = {**config, "text_config": {**text, field: value}}
        with pytest.raises(ValueError, match=f"'{field}' is .*{allowed}"):
            architecture_from_config(bad)
