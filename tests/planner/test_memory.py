"""Memory per GPU, KV capacity, concurrency and occupancy, against vLLM's own numbers.

Observed figures come from vLLM 0.11.0 start-up logs on one H100 80GB HBM3 (79.18 GiB seen by
CUDA), max_num_seqs 1024, max_num_batched_tokens 8192, gpu_memory_utilization 0.9, published
in llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-results.md ("Model loading took",
"torch peak memory increase", "Available KV cache memory").
"""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.catalog import GPU, architecture_from_config
from planner.catalog.architecture import ModelArchitecture
from planner.engine import EngineConfig, vllm_serve_defaults
from planner.errors import InvalidInputError
from planner.memory import (
    MemoryPlan,
    check_parallelism,
    kv_bytes_per_token_per_layer_per_gpu,
    kv_occupancy,
    max_concurrent_sequences,
    plan_memory,
    pp_layer_split,
    stage_weight_bytes,
    weight_bytes,
)
from planner.workload import LengthDistribution, Workload
from tests.planner.test_architecture import (
    DEEPSEEK_V3,
    GPT_OSS_120B,
    LLAMA_3_8B,
    LLAMA_3_70B,
    MISTRAL_7B_V01,
    QWEN3_NEXT_80B,
)

GIB = 2**30

QWEN3_32B: dict[str, Any] = {
    "model_type": "qwen3",
    "hidden_size": 5120,
    "intermediate_size": 25600,
    "num_hidden_layers": 64,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
}
QWEN3_0_6B: dict[str, Any] = {
    **QWEN3_32B,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "tie_word_embeddings": True,
}


def make_gpu(gpu_id: str, memory_gb: float, reported_mib: float | None, **extra: Any) -> GPU:
    fields: dict[str, Any] = {
        "gpu_id": gpu_id,
        "name": gpu_id,
        "vendor": "nvidia",
        "memory_gb": memory_gb,
        "memory_reported_mib": reported_mib,
        "memory_bw_gbps": 1000,
        "fp16_dense_tflops": 100,
        "form_factor": "pcie",
        "interconnect": "pcie",
        "source": "test",
        "as_of": date(2025, 1, 1),
    }
    fields.update(extra)
    return GPU(**fields)


H100 = make_gpu(
    "H100-SXM", 80, 81559, memory_bw_gbps=3350, fp16_dense_tflops=989.5, fp8_dense_tflops=1979
)
L40S = make_gpu(
    "L40S", 48, 46068, memory_bw_gbps=864, fp16_dense_tflops=362.05, fp8_dense_tflops=733
)
A10G = make_gpu("A10G", 24, 23028, memory_bw_gbps=600, fp16_dense_tflops=70)


def arch(config: dict[str, Any]) -> ModelArchitecture:
    return architecture_from_config(config)


def mem(
    model: ModelArchitecture,
    gpu: GPU,
    *,
    tp: int,
    pp: int = 1,
    precision: str = "bf16",
    **engine: Any,
) -> MemoryPlan:
    """``plan_memory`` under vLLM's settings with ``engine`` stated (EngineConfig names)."""
    return plan_memory(
        model, gpu, tp=tp, pp=pp, precision=precision, engine=EngineConfig.of(**engine)
    )


H100_SERVE = {"max_num_seqs": 1024, "max_num_batched_tokens": 8192, "max_model_len": 16000}


# ----- observed: vLLM 0.11 on H100 ----------------------------------------------------------------


def test_cuda_sees_79_18_gib_of_an_h100_and_0_9_requests_71_26() -> None:
    plan = mem(arch(LLAMA_3_8B), H100, tp=1, **H100_SERVE)
    assert plan.cuda_visible_bytes / GIB == pytest.approx(79.18, abs=0.01)
    assert plan.budget_bytes / GIB == pytest.approx(71.26, abs=0.01)


def test_llama_3_1_8b_on_one_h100_matches_vllm() -> None:
    plan = mem(arch(LLAMA_3_8B), H100, tp=1, **H100_SERVE)
    assert plan.weights_bytes / GIB == pytest.approx(14.99, abs=0.01)  # observed 14.99
    assert plan.activation_bytes / GIB == pytest.approx(4.76, rel=0.02)  # observed 4.76
    assert plan.kv_bytes / GIB == pytest.approx(51.38, rel=0.01)  # observed 51.38
    assert plan.kv_capacity_tokens == plan.kv_capacity_blocks * 16
    assert plan.fits


def test_llama_3_3_70b_fp8_on_two_h100_matches_vllm() -> None:
    plan = mem(arch(LLAMA_3_70B), H100, tp=2, precision="fp8", **H100_SERVE)
    assert plan.weights_bytes / GIB == pytest.approx(33.88, rel=0.005)  # observed 33.88
    assert plan.kv_bytes / GIB == pytest.approx(32.0, rel=0.01)  # observed 32.0
    # observed at TP=1: weights 67.72 GiB, "No available memory for the cache blocks"
    single = mem(arch(LLAMA_3_70B), H100, tp=1, precision="fp8", **H100_SERVE)
    assert single.weights_bytes / GIB == pytest.approx(67.72, rel=0.005)
    assert single.kv_bytes == 0 and single.kv_capacity_tokens == 0
    assert not single.fits and "no memory left for the KV cache" in single.problems[0]


def test_qwen3_32b_fits_one_h100_at_16k_but_not_32k_as_vllm_reported() -> None:
    plan = mem(arch(QWEN3_32B), H100, tp=1, **H100_SERVE)
    assert plan.weights_bytes / GIB == pytest.approx(61.03, rel=0.005)
    assert plan.activation_bytes / GIB == pytest.approx(5.64, rel=0.02)
    assert plan.kv_bytes / GIB == pytest.approx(4.45, rel=0.03)  # observed 4.45
    assert plan.fits
    longer = mem(arch(QWEN3_32B), H100, tp=1, **{**H100_SERVE, "max_model_len": 32000})
    assert not longer.fits
    assert "one 32,000-token sequence" in longer.problems[0]
    two = mem(arch(QWEN3_32B), H100, tp=2, **H100_SERVE)
    assert two.kv_bytes / GIB == pytest.approx(34.49, rel=0.01)  # observed 34.49


def test_tied_qwen3_0_6b_matches_vllm() -> None:
    plan = mem(arch(QWEN3_0_6B), H100, tp=1, **H100_SERVE)
    assert plan.weights_bytes / GIB == pytest.approx(1.12, abs=0.01)
    assert plan.kv_bytes / GIB == pytest.approx(64.45, rel=0.005)


# ----- derived: Llama-3.1-70B BF16, TP=4 on g6e.12xlarge (4 x L40S) -------------------------------


def test_llama_3_1_70b_bf16_tp4_on_l40s_is_within_10_percent_of_vllm() -> None:
    """vLLM 0.10/0.11 ``vllm serve`` on 4 x L40S (46,068 MiB each), utilisation 0.9.

    Expected, from vLLM's accounting (gpu_worker.determine_available_memory):
    - requested 40.07 GiB: observed in a vLLM start-up error on a 46,068-MiB card,
      "Free memory on device cuda:0 (39.96/44.52 GiB) ... (0.9, 40.07 GiB)";
    - weights 32.87 GiB a GPU: 70,553,706,496 params, linears/4, vocab-parallel embed and
      lm_head/4, in bf16, plus the 32-MiB rotary cache;
    - activation ~1.21 GiB: vllm serve on a < 70 GiB GPU runs max_num_seqs 256,
      max_num_batched_tokens 2048 (engine/arg_utils.py); the sampler warm-up's fp32 logits for
      256 x 128,256 entries at the ~38 B each the H100 logs show;
    - non-torch 0.55 GiB: observed at TP=2 on H100;
    => 5.44 GiB of KV a GPU / (80 layers x 2 KV heads x 128 x 2 x 2 B = 81,920 B a token)
       = 71,300 tokens (4,456 blocks of 16). Derived, not observed: no public log of this exact
       configuration was found.
    """
    seqs, batched = vllm_serve_defaults(L40S)
    assert (seqs, batched) == (256, 2048)
    plan = mem(
        arch(LLAMA_3_70B),
        L40S,
        tp=4,
        max_num_seqs=seqs,
        max_num_batched_tokens=batched,
        max_model_len=4096,
    )
    assert plan.fits
    assert plan.budget_bytes / GIB == pytest.approx(40.07, abs=0.01)
    assert plan.kv_bytes_per_token_per_gpu == 81_920
    expected_tokens = 71_300
    assert abs(plan.kv_capacity_tokens - expected_tokens) / expected_tokens < 0.10
    # vLLM's default max_model_len (131,072) needs 10 GiB a GPU: it refuses to start
    default_len = mem(
        arch(LLAMA_3_70B), L40S, tp=4, max_num_seqs=seqs, max_num_batched_tokens=batched
    )
    assert not default_len.fits
    assert "131,072-token sequence" in default_len.problems[0]


def test_weights_per_gpu_follow_vllm_sharding() -> None:
    model = arch(LLAMA_3_70B)
    whole = weight_bytes(model)
    assert whole == pytest.approx(70_553_706_496 * 2 + 131072 * 128 * 2)
    # TP shards every linear layer, the embedding and the lm_head; norms are replicated
    assert stage_weight_bytes(model, tp=4) == pytest.approx(whole / 4, rel=0.001)
    # fp8 and int4 quantize the linears only; embeddings and lm_head stay 16-bit
    embed_and_head = 2 * 128_256 * 8192 * 2
    assert weight_bytes(model, "fp8") == pytest.approx(
        (whole - embed_and_head) / 2 + embed_and_head, rel=0.001
    )
    assert weight_bytes(model, "int4") < weight_bytes(model, "fp8") * 0.6


def test_pp_splits_layers_as_vllm_get_pp_indices() -> None:
    assert [e - s for s, e in pp_layer_split(61, 4)] == [15, 15, 16, 15]
    assert [e - s for s, e in pp_layer_split(80, 3)] == [27, 27, 26]
    assert [e - s for s, e in pp_layer_split(32, 4)] == [8, 8, 8, 8]
    with pytest.raises(InvalidInputError, match="pp"):
        pp_layer_split(4, 5)


def test_pp_puts_embedding_first_and_lm_head_last_and_binds_on_the_smallest_pool() -> None:
    model = arch(LLAMA_3_70B)
    plan = mem(model, H100, tp=2, pp=2, max_model_len=8192)
    first, last = plan.stages
    assert first.end_layer == last.first_layer == 40
    # same layers, each stage holds one of embed / lm_head: equal weights, sampler on the last
    assert first.weights_bytes == pytest.approx(last.weights_bytes)
    assert last.activation_bytes > first.activation_bytes
    assert plan.binding_stage == 1 and plan.kv_capacity_blocks == last.kv_blocks
    total = sum(s.weights_bytes for s in plan.stages) * 2
    assert total == pytest.approx(weight_bytes(model), rel=0.002)


def test_kv_heads_are_replicated_when_tp_exceeds_them() -> None:
    model = arch(LLAMA_3_70B)  # 8 KV heads
    assert kv_bytes_per_token_per_layer_per_gpu(model, 8) == 2 * 1 * 128 * 2
    assert kv_bytes_per_token_per_layer_per_gpu(model, 16) == 2 * 1 * 128 * 2  # replicated
    assert kv_bytes_per_token_per_layer_per_gpu(model, 4) == 2 * 2 * 128 * 2


def test_mla_latent_is_not_sharded_by_tp() -> None:
    model = arch(DEEPSEEK_V3)
    for tp in (1, 8):
        assert kv_bytes_per_token_per_layer_per_gpu(model, tp) == 576 * 2


def test_fp8_kv_cache_doubles_the_tokens() -> None:
    model = arch(LLAMA_3_70B)
    bf16 = mem(model, H100, tp=4, max_model_len=8192)
    fp8 = mem(model, H100, tp=4, kv_cache_dtype="fp8", max_model_len=8192)
    assert fp8.kv_bytes_per_token == bf16.kv_bytes_per_token / 2 == 163_840
    assert fp8.kv_capacity_tokens == pytest.approx(2 * bf16.kv_capacity_tokens, abs=32)


def test_outside_the_budget_cuda_graphs_and_startup_memory() -> None:
    model = arch(LLAMA_3_8B)
    eager = mem(model, H100, tp=1, enforce_eager=True, max_model_len=8192)
    graphs = mem(model, H100, tp=1, max_model_len=8192)
    assert eager.cuda_graph_bytes == 0 and graphs.cuda_graph_bytes == GIB
    assert eager.kv_bytes == graphs.kv_bytes  # vLLM's budget does not see CUDA graphs
    assert graphs.free_bytes == pytest.approx(eager.free_bytes - GIB)
    parts = (
        graphs.weights_bytes + graphs.activation_bytes + graphs.non_torch_bytes + graphs.kv_bytes
    )
    assert parts == pytest.approx(graphs.budget_bytes)
    # utilisation 1.0: the CUDA context already holds memory, vLLM refuses to start
    full = mem(model, H100, tp=1, gpu_memory_utilization=1.0, max_model_len=8192)
    assert not full.fits and "refuses to start" in full.problems[-1]
    tight = mem(model, H100, tp=1, gpu_memory_utilization=0.985, max_model_len=8192)
    assert tight.fits and any("CUDA graphs" in w for w in tight.warnings)


# ----- invalid input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field", "allowed"),
    [
        ({"tp": 3}, "tp", "a divisor of the 64 attention heads: 1, 2, 4, 8, 16, 32, 64"),
        ({"tp": 0}, "tp", "an integer >= 1"),
        ({"tp": 1, "pp": 81}, "pp", "at most the 80 layers"),
        ({"tp": 1, "gpu_memory_utilization": 0.0}, "gpu_memory_utilization", "(0, 1]"),
        (
            {"tp": 1, "gpu_memory_utilization": 1.2},
            "gpu_memory_utilization",
            "(0, 1]",
        ),
        ({"tp": 1, "precision": "fp12"}, "precision", "bf16, fp16, fp8, int8, int4, fp4"),
        ({"tp": 1, "kv_cache_dtype": "int2"}, "kv_cache_dtype", "fp8"),
        ({"tp": 1, "max_num_seqs": 0}, "max_num_seqs", ">= 1"),
    ],
)
def test_invalid_input_names_field_value_and_allowed(
    kwargs: dict[str, Any], field: str, allowed: str
) -> None:
    with pytest.raises(InvalidInputError) as info:
        mem(arch(LLAMA_3_70B), H100, **kwargs)
    assert info.value.field == field
    assert allowed in str(info.value)
    assert repr(info.value.value) in str(info.value)


def test_tp_must_divide_or_be_a_multiple_of_kv_heads() -> None:
    # head_dim given: 48 heads do not divide Llama 3 8B's hidden size, which a config must say
    config = {**LLAMA_3_8B, "num_attention_heads": 48, "num_key_value_heads": 12, "head_dim": 128}
    with pytest.raises(InvalidInputError, match="KV heads"):
        check_parallelism(arch(config), 8)
    check_parallelism(arch(config), 24)  # 24 = 2 x 12: replicated


# ----- concurrency and occupancy ------------------------------------------------------------------


def l40s_plan() -> Any:
    return mem(
        arch(LLAMA_3_70B),
        L40S,
        tp=4,
        max_num_seqs=256,
        max_num_batched_tokens=2048,
        max_model_len=8192,
    )


def test_max_concurrent_sequences_counts_whole_blocks_of_the_tail() -> None:
    plan = l40s_plan()
    blocks_per_seq = 2560 // 16  # 2,048 in + 512 out
    assert max_concurrent_sequences(plan, Workload.fixed(2048, 512)) == (
        plan.kv_capacity_blocks // blocks_per_seq
    )
    assert max_concurrent_sequences(plan, 2561) == plan.kv_capacity_blocks // (blocks_per_seq + 1)
    # a long tail: sized by its p99, not its mean
    tail = Workload(
        input_len=LengthDistribution.lognormal(1500, 3000, max_tokens=7000),
        output_len=LengthDistribution.fixed(200),
    )
    p99 = tail.context_quantile(0.99)
    assert p99 > 3 * tail.input_len.mean()
    assert max_concurrent_sequences(plan, tail) == plan.kv_capacity_blocks // -(-p99 // 16)
    assert max_concurrent_sequences(plan, tail, quantile=0.5) > 3 * max_concurrent_sequences(
        plan, tail
    )
    # never above the scheduler's own cap
    assert max_concurrent_sequences(plan, 16) == 256
    assert max_concurrent_sequences(plan, 16, cap_at_max_num_seqs=False) > 256


def test_sliding_windows_cap_per_sequence_kv() -> None:
    mistral = arch(MISTRAL_7B_V01)
    plan = mem(mistral, L40S, tp=1, max_model_len=32768)
    at_4k = max_concurrent_sequences(plan, 4096, model=mistral, cap_at_max_num_seqs=False)
    at_32k = max_concurrent_sequences(plan, 32768, model=mistral, cap_at_max_num_seqs=False)
    assert at_32k == plan.kv_capacity_blocks // (4096 // 16 + 1)
    assert at_4k >= at_32k
    gpt_oss = arch(GPT_OSS_120B)
    plan = mem(gpt_oss, H100, tp=2, precision="fp4", max_model_len=131072)
    long = max_concurrent_sequences(plan, 131072, model=gpt_oss, cap_at_max_num_seqs=False)
    # half the layers hold 129 tokens: about 2x the sequences of a model without windows
    assert long == max_concurrent_sequences(plan, 131072, cap_at_max_num_seqs=False)
    no_window = plan.model_copy(update={"sliding_window": None})
    assert long == pytest.approx(
        2 * max_concurrent_sequences(no_window, 131072, cap_at_max_num_seqs=False), rel=0.02
    )


def test_linear_attention_state_is_a_fixed_cost_per_sequence() -> None:
    model = arch(QWEN3_NEXT_80B)
    plan = mem(model, H100, tp=2, precision="fp8", max_model_len=32768)
    assert plan.linear_state_bytes == model.linear_state_bytes_per_sequence()
    assert plan.kv_bytes_per_token == 24_576
    stage = plan.stages[0]
    per_seq = 64 * stage.kv_bytes_per_token + stage.linear_state_bytes_per_sequence
    assert max_concurrent_sequences(plan, 64, cap_at_max_num_seqs=False) == int(
        stage.kv_bytes // per_seq
    )


def test_occupancy_of_fixed_requests() -> None:
    plan = l40s_plan()
    workload = Workload.fixed(2048, 512)
    occupancy = kv_occupancy(plan, workload, 8)
    # each slot holds 2,048 + ~256 tokens on average
    assert occupancy.expected_demand_tokens == pytest.approx(8 * (2048 + 256), rel=0.03)
    assert occupancy.expected == pytest.approx(
        occupancy.expected_demand_tokens / plan.kv_capacity_tokens, rel=0.02
    )
    assert occupancy.p99 >= occupancy.expected
    assert occupancy.p_wait_or_preempt == 0.0
    breakdown = occupancy.per_gpu_breakdown
    assert breakdown.kv_used_bytes + breakdown.kv_idle_bytes == pytest.approx(plan.kv_bytes)
    full = kv_occupancy(plan, workload, max_concurrent_sequences(plan, workload) * 3)
    assert full.expected == 1.0 and full.p_wait_or_preempt == 1.0


def test_occupancy_tail_and_prefix_caching() -> None:
    plan = l40s_plan()
    seqs = max_concurrent_sequences(plan, Workload.fixed(2048, 512))
    mixed = Workload(
        input_len=LengthDistribution.lognormal(1500, 1500, max_tokens=7000),
        output_len=LengthDistribution.uniform(100, 900),
        prefix_share=0.5,
    )
    shared = kv_occupancy(plan, mixed, seqs)
    private = kv_occupancy(plan, mixed, seqs, prefix_caching=False)
    assert shared.expected < private.expected
    assert 0 < private.p_wait_or_preempt < 1
    assert private.p99_demand_tokens > private.expected_demand_tokens
    over = kv_occupancy(plan, Workload.fixed(100, 10), 300)
    assert over.p_scheduler_wait == 1.0  # more than max_num_seqs = 256 in flight
    with pytest.raises(InvalidInputError, match="concurrency"):
        kv_occupancy(plan, mixed, 0)


# ----- invariants --------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    layers=st.integers(2, 96),
    hidden_k=st.integers(1, 16),
    kv_heads=st.sampled_from([1, 2, 4, 8]),
    vocab=st.integers(1000, 260_000),
    gpu_gib=st.integers(16, 200),
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.integers(1, 4),
    util=st.floats(0.3, 0.98),
    precision=st.sampled_from(["bf16", "fp8", "int4"]),
    kv_dtype=st.sampled_from(["auto", "fp8"]),
    max_len=st.integers(128, 131_072),
)
def test_a_plan_that_fits_fits(
    layers: int,
    hidden_k: int,
    kv_heads: int,
    vocab: int,
    gpu_gib: int,
    tp: int,
    pp: int,
    util: float,
    precision: str,
    kv_dtype: str,
    max_len: int,
) -> None:
    hidden = 1024 * hidden_k
    config = {
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": 4 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": hidden // 128,
        "num_key_value_heads": min(kv_heads, hidden // 128),
        "vocab_size": vocab,
        "max_position_embeddings": 131072,
    }
    model = arch(config)
    if (hidden // 128) % tp or pp > layers:
        with pytest.raises(InvalidInputError):
            mem(model, H100, tp=tp, pp=pp)
        return
    gpu = make_gpu("G", gpu_gib * 1.07, gpu_gib * 1024)
    plan = mem(
        model,
        gpu,
        tp=tp,
        pp=pp,
        precision=precision,
        kv_cache_dtype=kv_dtype,
        gpu_memory_utilization=util,
        max_model_len=max_len,
    )
    for stage in plan.stages:
        used = stage.weights_bytes + stage.activation_bytes + plan.non_torch_bytes
        assert stage.kv_blocks * 16 * stage.kv_bytes_per_token <= stage.kv_bytes + 1e-6
        if plan.fits:
            assert used + stage.kv_bytes <= plan.budget_bytes * (1 + 1e-9)
    if plan.fits:
        assert plan.kv_capacity_tokens >= max_len
        assert plan.budget_bytes <= plan.cuda_visible_bytes - plan.framework_overhead_bytes


@pytest.mark.parametrize(
    ("config", "tp", "pp", "precision"),
    [(LLAMA_3_70B, 4, 2, "fp8"), (QWEN3_NEXT_80B, 4, 1, "bf16"), (LLAMA_3_8B, 1, 1, "bf16")],
)
def test_a_plan_for_another_max_model_len_reuses_the_stages_and_equals_a_fresh_one(
    config: dict[str, Any], tp: int, pp: int, precision: str
) -> None:
    """The stages do not depend on max_model_len, so a search asking a layout at a new context
    reuses them; the plan is the one a model never planned before gets (feasibility included:
    the longest context does not fit)."""
    model = arch(config)
    plans = [
        mem(model, H100, tp=tp, pp=pp, precision=precision, max_model_len=n)
        for n in (2_048, 4_096, 10_000_000)
    ]
    assert plans[0].stages[0] is plans[1].stages[0] is plans[2].stages[0]
    assert plans[0].fits and not plans[2].fits
    for plan, n in zip(plans, (2_048, 4_096, 10_000_000), strict=True):
        fresh = mem(arch(config), H100, tp=tp, pp=pp, precision=precision, max_model_len=n)
        assert plan == fresh
        assert plan.max_model_len == n
    # another setting the stages depend on is planned again
    other = mem(model, H100, tp=tp, pp=pp, precision=precision, max_model_len=2_048,
                gpu_memory_utilization=0.8)  # fmt: skip
    assert other.stages[0] is not plans[0].stages[0]
    assert other.kv_capacity_tokens < plans[0].kv_capacity_tokens


# ----- large MoE checkpoints: FP8 block scales, the KV pool at the edge (issue 26 item 5) -----

DEEPSEEK_V3_FP8_BLOCK = {
    **DEEPSEEK_V3,
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
}


def test_block_scaled_fp8_adds_one_float32_scale_per_128_by_128_block() -> None:
    block = arch(DEEPSEEK_V3_FP8_BLOCK)
    plain = arch(DEEPSEEK_V3)
    assert block.block_scaled_fp8 and not plain.block_scaled_fp8
    fp8_block = stage_weight_bytes(block, tp=4, precision="fp8")
    fp8_plain = stage_weight_bytes(plain, tp=4, precision="fp8")
    # linear weights a GPU holds: what bf16 adds over fp8 (one more byte each)
    linear = stage_weight_bytes(plain, tp=4, precision="bf16") - fp8_plain
    assert fp8_block - fp8_plain == pytest.approx(linear * 4 / (128 * 128), rel=1e-9)
    # worked number: 167.96e9 linear weights a GPU of DeepSeek-R1 on TP 4 -> 39.1 MiB of scales
    assert linear / 1e9 == pytest.approx(167.96, abs=0.01)
    assert (fp8_block - fp8_plain) / 2**20 == pytest.approx(39.1, abs=0.1)
    # bf16 checkpoints and per-tensor FP8 carry no block scales
    assert stage_weight_bytes(block, tp=4, precision="bf16") == stage_weight_bytes(
        plain, tp=4, precision="bf16"
    )


def test_deepseek_v3_fp8_weights_on_the_first_of_four_pp_stages_match_vllm_log() -> None:
    """vLLM 0.6.6, DeepSeek-V3 FP8 at TP 8 x PP 4 with 61 layers split 15/15/16/15: rank 0
    logged "Loading model weights took 16.9583 GB" (GiB; deepseek-ai/DeepSeek-V3 issue #205,
    2025-01-02). The first stage holds the embedding and layers 0-14 (three dense, twelve MoE)."""
    first = stage_weight_bytes(arch(DEEPSEEK_V3_FP8_BLOCK), tp=8, pp=4, stage=0, precision="fp8")
    assert first / GIB == pytest.approx(16.9583, rel=0.02)


def _r1_b200(catalog: Any, engine: str, **values: Any) -> Any:
    """DeepSeek-R1-0528 FP8 on 4 x B200 at 8k prompts, 1k answers, 32 in flight (issue 26
    item 5), resolved as ``planner predict`` resolves a scenario row."""
    from planner.perf.deployment import resolve_deployment
    from planner.perf.scenario import Scenario

    scenario = Scenario(
        engine=engine,
        model="deepseek-ai/DeepSeek-R1-0528",
        precision="fp8",
        gpu="B200",
        num_gpus=4,
        tp=4,
        input_len=8192,
        output_len=1024,
        concurrency=32,
        num_requests=320,
        **values,
    )
    return resolve_deployment(scenario, catalog)


def test_deepseek_r1_fp8_on_four_b200_leaves_room_for_19_long_requests(catalog: Any) -> None:
    """The edge case of issue 26 item 5: DeepSeek-R1 FP8 on 4 x B200, 8k prompts and 1k answers
    at 32 in flight. The weights take 158.0 GiB of a GPU's 179.1 (157.5 in the checkpoint's
    layout plus the 16-bit copies of kv_b_proj for absorbed MLA decode, 0.48 GiB at TP 4; the
    MTP layer is not loaded without MTP speculation). SGLang's default mem_fraction_static
    (0.855 at TP 4 on a 180 GB GPU) is a share of the 175.34 GiB it finds free before loading
    (sgl-project/sglang PR #9162's 4 x B200 log), 149.9 GiB: below the weights, so the plan
    raises it to what starts the server, 0.97: 0.97 x 175.34 - 158.02 = 12.06 GiB / 70,272 B a
    token (MLA latent 512 + 64 values x 61 layers x 2 B, on every TP rank) = 184k tokens, 19
    requests of 9,216 at once, not 32; an FP8 KV cache doubles that and holds all 32."""
    card = catalog.model("deepseek-ai/DeepSeek-R1-0528")
    assert card.architecture.kv_bytes_per_token(2.0) == 70_272 * 1  # one copy, all layers
    weights = stage_weight_bytes(card, tp=4, precision="fp8")
    assert weights / GIB == pytest.approx(158.02, abs=0.05)
    dep = _r1_b200(catalog, "sglang")
    assert dep.engine.gpu_memory_utilization == pytest.approx(0.97)
    bf16 = dep.kv_capacity_tokens
    assert bf16 * 70_272 / GIB == pytest.approx(0.97 * 175.34 - 158.02, abs=0.06)
    assert bf16 // (8192 + 1024) == 19
    fp8 = _r1_b200(catalog, "sglang", kv_cache_dtype="fp8").kv_capacity_tokens
    assert fp8 // (8192 + 1024) >= 32
    assert fp8 == pytest.approx(2 * bf16, rel=0.01)


def test_sglang_fraction_is_a_share_of_the_memory_free_before_loading(catalog: Any) -> None:
    """SGLang's pool = free after loading - free before loading x (1 - mem_fraction_static)
    (ModelRunner.profile_max_num_token, 0.5.x): the fraction applies to what it measured free
    before loading, which PR #9162 (2025-08-13) logged as "avail mem=175.34 GB" (GiB) on a
    183,359 MiB B200 at TP 4, not to the whole GPU."""
    from planner.perf.capacity import sglang_preload_free_bytes

    gpu = catalog.gpu("B200")
    plan = plan_memory(catalog.model("deepseek-ai/DeepSeek-R1-0528"), gpu, tp=4,
                       precision="fp8")  # fmt: skip
    assert gpu.memory_bytes / GIB == pytest.approx(179.06, abs=0.005)
    assert sglang_preload_free_bytes(plan) / GIB == pytest.approx(175.34, abs=0.005)


def _qwen3_30b_sglang(catalog: Any, gpu: str, version: str, **values: Any) -> Any:
    """Qwen3-30B-A3B (BF16, a 40,960-token context) on one GPU under SGLang, resolved as
    ``planner predict`` resolves a scenario row."""
    from planner.perf.deployment import resolve_deployment
    from planner.perf.scenario import Scenario

    scenario = Scenario(
        engine="sglang", engine_version=version, model="Qwen/Qwen3-30B-A3B", gpu=gpu,
        num_gpus=1, tp=1, input_len=1000, output_len=1000, concurrency=8, num_requests=80,
        **values,
    )  # fmt: skip
    return resolve_deployment(scenario, catalog)


def test_sglang_on_rocm_keeps_085_of_its_fraction_when_the_context_is_long(catalog: Any) -> None:
    """SGLang's aiter attention backend (its default on ROCm) multiplies mem_fraction_static
    by 0.85 when the context exceeds 8,192 tokens (server_args.py). sgl-project/sglang issue
    18262 logged it on one MI355X (rocm/sgl-dev v0.5.7 image): 287.20 GB free before
    loading, 12.79 GB of weights, a KV pool of 2 x 104.83 GB. The default fraction there is
    0.911; the planner's pool with its own free memory (286.92 GiB) and the logged weights is
    0.911 x 0.85 x 286.92 - 12.79 = 209.4 GiB, where the log says 209.66 (249 without the
    factor). A stated --context-length of 8,192 keeps the whole fraction, and so do NVIDIA
    GPUs and SGLang 0.4, whose ROCm backend choice was not read."""
    from planner.engine import sglang_defaults, sglang_memory_share
    from planner.perf.capacity import sglang_preload_free_bytes

    mi355x = catalog.gpu("MI355X")
    card = catalog.model("Qwen/Qwen3-30B-A3B")
    assert card.architecture.max_position_embeddings == 40_960
    fraction = sglang_defaults(mi355x, tp=1).mem_fraction_static
    assert fraction == 0.911
    plan = plan_memory(card, mi355x, tp=1, precision="bf16")
    free = sglang_preload_free_bytes(plan) / GIB
    engine = EngineConfig(engine="sglang", version="0.5.7")
    share = sglang_memory_share(engine, mi355x, card.architecture.max_position_embeddings)
    assert share == 0.85
    assert fraction * share * free - 12.79 == pytest.approx(2 * 104.83, abs=0.5)

    per_token = kv_bytes_per_token_per_layer_per_gpu(card, 1) * card.architecture.num_layers
    weights = stage_weight_bytes(card, tp=1, precision="bf16") / GIB
    long_context = _qwen3_30b_sglang(catalog, "MI355X", "0.5.7")
    pool = long_context.kv_capacity_tokens * per_token / GIB
    assert pool == pytest.approx(0.911 * 0.85 * free - weights, abs=0.05)
    assert any("keeps 0.85 of --mem-fraction-static" in n for n in long_context.notes)

    short = _qwen3_30b_sglang(catalog, "MI355X", "0.5.7", max_model_len=8192)
    assert short.kv_capacity_tokens * per_token / GIB == pytest.approx(
        0.911 * free - weights, abs=0.05
    )
    assert not any("aiter" in n for n in short.notes)
    # 0.4.10 keeps the whole of its own default: a 32 GiB reserve (sglang_defaults)
    older_fraction = sglang_defaults(mi355x, tp=1, release=(0, 4, 10)).mem_fraction_static
    assert older_fraction == round((294_912 - 32 * 1024) / 294_912, 3) == 0.889
    older = _qwen3_30b_sglang(catalog, "MI355X", "0.4.10.post1")
    assert older.kv_capacity_tokens * per_token / GIB == pytest.approx(
        older_fraction * free - weights, abs=0.05
    )
    assert sglang_memory_share(engine, catalog.gpu("B200"), 163_840) == 1.0
    vllm = EngineConfig(engine="vllm", version="0.11.0")
    assert sglang_memory_share(vllm, mi355x, 163_840) == 1.0


def test_sglang_on_rocm_that_cannot_keep_the_weights_says_the_server_refuses(
    catalog: Any,
) -> None:
    """DeepSeek-R1 FP8 on 4 x MI300X: 0.85 of the largest fraction a deployment raises to
    (0.97) is less than the weights' share of a GPU, so the plan gives one request's room and
    says SGLang may refuse it; with a stated 8,192-token context the raised fraction starts it."""
    from planner.perf.deployment import resolve_deployment
    from planner.perf.scenario import Scenario

    def r1(**values: Any) -> Any:
        scenario = Scenario(
            engine="sglang", engine_version="0.5.9", model="deepseek-ai/DeepSeek-R1-0528",
            precision="fp8", gpu="MI300X", num_gpus=4, tp=4, input_len=4096, output_len=1024,
            concurrency=8, num_requests=80, **values,
        )  # fmt: skip
        return resolve_deployment(scenario, catalog)

    refused = r1()
    assert refused.kv_capacity_tokens == 4096 + 1024
    assert any("0.85 of it kept on ROCm" in n and "refuse" in n for n in refused.notes)
    started = r1(max_model_len=8192)
    assert started.kv_capacity_tokens // (4096 + 1024) >= 8  # all eight in flight
    assert not any("refuse" in n for n in started.notes)


def test_vllm_default_utilization_leaves_r1_fp8_on_four_b200_no_kv_so_it_is_raised(
    catalog: Any,
) -> None:
    """vLLM 0.11 at its default gpu_memory_utilization 0.9 of the 178.59 GiB CUDA reports on a
    B200: 160.7 GiB for 158.0 GiB of weights + 4.9 GiB of profile-run activations (1,024
    sampler rows x 129,280 vocab x 38.26 B + 8,192 x 7,168 x 2.56 B) + 0.55 GiB non-torch:
    no KV cache, and vLLM refuses to start ("No available memory for the cache blocks"). A
    deployment that serves raises the utilisation; the plan takes the largest that leaves the
    CUDA graphs (1.0 GiB) and the context/communication buffers (1.54 GiB) outside the budget,
    0.985, capped at 0.97: 0.97 x 178.59 - 158.02 - 4.86 - 0.55 = 9.8 GiB = 149,840 tokens,
    16 requests of 9,216 (twice as many with an FP8 KV cache). A stated 0.9 is kept: the plan
    then gives one request's room and says the engine refuses it."""
    from planner.perf.capacity import vllm_utilization_that_starts

    model = catalog.model("deepseek-ai/DeepSeek-R1-0528")
    at_default = plan_memory(model, catalog.gpu("B200"), tp=4, precision="fp8",
                             engine=EngineConfig(max_model_len=9216))  # fmt: skip
    assert at_default.kv_capacity_tokens == 0
    assert "no memory left for the KV cache" in at_default.problems[0]
    # the reason a search shows says what starts it: (163.4 GiB + one 9,216-token request's
    # 0.60 GiB) / 178.59 = 0.9185, and the FP8 KV cache
    assert "--gpu-memory-utilization 0.92 starts it" in at_default.problems[0]
    assert "--kv-cache-dtype fp8" in at_default.problems[0]
    assert vllm_utilization_that_starts(at_default) == 0.97
    h100 = plan_memory(catalog.model("meta-llama/Llama-3.1-8B-Instruct"),
                       catalog.gpu("H100-SXM"), tp=2)  # fmt: skip
    assert vllm_utilization_that_starts(h100) == 0.96  # (79.18 - 1.0 - 1.54) / 79.18 = 0.968

    dep = _r1_b200(catalog, "vllm")
    assert dep.engine.gpu_memory_utilization == 0.97
    assert dep.kv_capacity_tokens == 149_840
    assert dep.kv_capacity_tokens // (8192 + 1024) == 16
    assert any("--gpu-memory-utilization 0.970" in note for note in dep.notes)
    fp8 = _r1_b200(catalog, "vllm", kv_cache_dtype="fp8").kv_capacity_tokens
    assert fp8 // (8192 + 1024) >= 32
    stated = _r1_b200(catalog, "vllm", gpu_memory_utilization=0.9)
    assert stated.engine.gpu_memory_utilization == 0.9
    assert stated.kv_capacity_tokens == 9216
    assert any("may refuse" in note for note in stated.notes)
    # on 8 x H200 the default starts (41 GiB of KV a GPU) and is kept
    from planner.perf.deployment import resolve_deployment
    from planner.perf.scenario import Scenario

    eight = resolve_deployment(
        Scenario(engine="vllm", model="deepseek-ai/DeepSeek-R1-0528", precision="fp8",
                 gpu="H200", num_gpus=8, tp=8, input_len=8192, output_len=1024,
                 concurrency=32, num_requests=320),
        catalog,
    )  # fmt: skip
    assert eight.engine.gpu_memory_utilization == 0.9
    assert eight.kv_capacity_tokens // (8192 + 1024) == 67


def test_trtllm_kv_cache_is_fp8_with_fp8_weights_unless_a_16_bit_cache_is_stated(
    catalog: Any,
) -> None:
    """TensorRT-LLM plans an FP8 KV cache for FP8/FP4 weights (its ModelOpt checkpoints state
    kv_cache_quant_algo FP8): DeepSeek-R1 on 4 x B200 at free_gpu_memory_fraction 0.9 holds
    0.9 x (177.05 - 159.9) GiB = 15.4 GiB / 35,136 B = 471k tokens, 51 requests of 9,216. A
    stated bf16 cache (what deepseek-ai's block-scaled FP8 checkpoint gets by TensorRT-LLM's
    source, which ``auto`` does not yet follow: see kv_dtype_bytes) is kept: half of that."""
    from planner.perf.deployment import kv_dtype_bytes

    assert kv_dtype_bytes(EngineConfig(engine="trtllm"), "fp8") == 1.0
    assert kv_dtype_bytes(EngineConfig(engine="trtllm"), "bf16") == 2.0
    assert kv_dtype_bytes(EngineConfig(engine="trtllm", kv_cache_dtype="bf16"), "fp8") == 2.0
    auto = _r1_b200(catalog, "trtllm")
    assert auto.kv_dtype_bytes == 1.0
    assert auto.kv_capacity_tokens // (8192 + 1024) == 51
    bf16 = _r1_b200(catalog, "trtllm", kv_cache_dtype="bf16")
    assert bf16.kv_dtype_bytes == 2.0
    assert bf16.kv_capacity_tokens // (8192 + 1024) == 25


def test_trtllm_kv_pool_is_the_stated_share_of_the_memory_left_after_the_weights(
    catalog: Any,
) -> None:
    """A TensorRT-LLM config's memory share is ``kv_cache_free_gpu_memory_fraction``: the KV
    pool is that share of the memory left after the weights (``KvCacheConfig``), so a stated
    0.5 holds 0.5 / 0.9 of the default's 471,520 tokens (whole 32-token blocks): 261,952, 28
    requests of 9,216. Unstated, the share is TensorRT-LLM's default 0.9, as a stated 0.9."""
    default = _r1_b200(catalog, "trtllm").kv_capacity_tokens
    assert default == 471_520
    assert _r1_b200(catalog, "trtllm", gpu_memory_utilization=0.9).kv_capacity_tokens == default
    half = _r1_b200(catalog, "trtllm", gpu_memory_utilization=0.5).kv_capacity_tokens
    assert half == 261_952 and half // (8192 + 1024) == 28
    assert half == pytest.approx(default * 0.5 / 0.9, abs=32)


# ----- engines' own start-up logs of large MoE checkpoints (issue 26, item 5) -------------------
# vLLM: RedHat AI dashboard runs parsed into ashishkamra/vllm-memory-estimator
# test_data/validation_db.json @8b0e21d1ec49357383758a164129515209b37e7f (2026-05-17): flags
# --tensor-parallel-size N --gpu-memory-utilization 0.92 --max-model-len 8192
# --no-enable-prefix-caching, KV cache auto. benchmarks/memory_logs_bench.py prints them all.


def _vllm_plan(catalog: Any, model: str, gpu: str, tp: int, precision: str) -> MemoryPlan:
    engine = EngineConfig(gpu_memory_utilization=0.92, max_model_len=8192)
    return plan_memory(catalog.model(model), catalog.gpu(gpu), tp=tp, precision=precision,
                       engine=engine)  # fmt: skip


def test_deepseek_r1_fp8_at_tp8_matches_vllm_0_18_on_h200_and_b200(catalog: Any) -> None:
    """DeepSeek-R1-0528 FP8, TP 8, vLLM 0.18.0: "Model loading took 79.74 GiB" on H200 and
    79.88 on B200; "Available KV cache memory: 42.79 GiB" / "GPU KV cache size: 653,808 tokens"
    on H200, 79.81 GiB / 1,219,424 on B200. Weights include vLLM's 16-bit W_UK_T / W_UV copies
    of kv_b_proj for absorbed MLA decode (0.24 GiB a GPU at TP 8): without them the planner was
    0.5% / 0.7% short."""
    for gpu, weights, tokens, token_tol in (
        ("H200", 79.74, 653_808, 0.03),
        ("B200", 79.88, 1_219_424, 0.01),
    ):
        plan = _vllm_plan(catalog, "deepseek-ai/DeepSeek-R1-0528", gpu, 8, "fp8")
        assert plan.weights_bytes / GIB == pytest.approx(weights, rel=0.005), gpu
        assert plan.kv_bytes_per_token_per_gpu == 70_272  # (512 + 64) x 2 B x 61 layers
        assert plan.kv_capacity_tokens == pytest.approx(tokens, rel=token_tol), gpu
    h200 = _vllm_plan(catalog, "deepseek-ai/DeepSeek-R1-0528", "H200", 8, "fp8")
    assert h200.weights_bytes / GIB == pytest.approx(79.74, rel=0.003)


def test_deepseek_v3_2_caches_the_indexer_keys_beside_the_latent(catalog: Any) -> None:
    """DeepSeek Sparse Attention caches one fp8 index key (128 B + a 4-byte scale) a token a
    layer beside the MLA latent. vLLM 0.18.0 on 8 x H200: 41.76 GiB for 572,480 tokens =
    78,325 B a token = 61 x (1,152 + 132). SGLang with --tp 8 --dp 8 --enable-dp-attention and
    an FP8 cache on 8 x B200 (sgl-project/sglang PR #11309, 2025-10-07): "KV Cache is allocated.
    #tokens: 975424, KV size: 43.67 GB" = 48,072 B = 61 x (656 + 132), the FP8 latent being
    512 fp8 values, four float32 scales and the 64 RoPE values in 16-bit."""
    card = catalog.model("deepseek-ai/DeepSeek-V3.2")
    layers = card.architecture.num_attention_layers
    assert kv_bytes_per_token_per_layer_per_gpu(card, 8) * layers == 61 * (1_152 + 132)
    fp8 = kv_bytes_per_token_per_layer_per_gpu(card, 1, "fp8") * layers
    assert fp8 == 61 * (656 + 132)
    sglang_tokens = 43.67 * GIB / fp8
    assert sglang_tokens == pytest.approx(975_424, rel=0.001)
    plan = _vllm_plan(catalog, "deepseek-ai/DeepSeek-V3.2", "H200", 8, "fp8")
    assert plan.kv_bytes_per_token == 61 * (1_152 + 132)
    assert plan.kv_capacity_tokens == pytest.approx(572_480, rel=0.03)
    # the indexer's replicated wq_b / wk / weights_proj: "Model loading took 80.76 GiB"
    assert plan.weights_bytes / GIB == pytest.approx(80.76, rel=0.01)
    # no indexer, no extra bytes
    r1 = catalog.model("deepseek-ai/DeepSeek-R1-0528")
    assert kv_bytes_per_token_per_layer_per_gpu(r1, 8, "fp8") == 576


def test_kimi_k2_5_int4_experts_in_groups_of_32_match_vllm(catalog: Any) -> None:
    """Kimi-K2.5's compressed-tensors INT4 experts: symmetric groups of 32 with a bf16 scale
    (2 / 32 B a weight, not AWQ's 2.5 / 128), shared experts and dense MLPs left 16-bit by its
    ignore list. vLLM 0.18.0 on 8 x H200: "Model loading took 72.02 GiB", 51.63 GiB /
    788,928 tokens of KV. The planner said 65.4 GiB and 866k tokens before."""
    arch_ = catalog.model("moonshotai/Kimi-K2.5").architecture
    assert (arch_.quant_group_size, arch_.quant_zero_point) == (32, False)
    plan = _vllm_plan(catalog, "moonshotai/Kimi-K2.5", "H200", 8, "int4")
    assert plan.weights_bytes / GIB == pytest.approx(72.02, rel=0.02)
    assert plan.kv_capacity_tokens == pytest.approx(788_928, rel=0.02)


def test_qwen3_235b_bf16_at_tp4_on_h200_matches_vllm(catalog: Any) -> None:
    """Qwen3-235B-A22B-Instruct-2507 BF16, 4 x H200, vLLM 0.11.2: "Model loading took
    109.6068 GiB", 12.73 GiB / 284,080 tokens (48,128 B a token a GPU: 94 layers x K and V x
    one of the 4 KV heads x 128 x 2 B). No fix here: the worked number guards the rest."""
    plan = _vllm_plan(catalog, "Qwen/Qwen3-235B-A22B-Instruct-2507", "H200", 4, "bf16")
    assert plan.weights_bytes / GIB == pytest.approx(109.6068, rel=0.001)
    assert plan.kv_bytes_per_token_per_gpu == 94 * 2 * 1 * 128 * 2
    assert plan.kv_capacity_tokens == pytest.approx(284_080, rel=0.02)


@pytest.mark.parametrize(
    ("quantization_config", "group", "zero_point", "bytes_per_weight"),
    [
        # AWQ g128 with 4-bit zero points: what the planner always assumed
        ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, 128, True,
         0.5 + 2.5 / 128),
        # GPTQ symmetric g64: scales only
        ({"quant_method": "gptq", "bits": 4, "group_size": 64, "sym": True}, 64, False,
         0.5 + 2 / 64),
        # compressed-tensors pack-quantized, symmetric groups of 32 (Kimi-K2.5)
        ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": {
            "num_bits": 4, "group_size": 32, "symmetric": True}}}}, 32, False, 0.5 + 2 / 32),
    ],
)  # fmt: skip
def test_int4_scales_follow_the_checkpoint_group_size(
    quantization_config: dict[str, Any], group: int, zero_point: bool, bytes_per_weight: float
) -> None:
    quantised = arch({**LLAMA_3_8B, "quantization_config": quantization_config})
    assert (quantised.quant_group_size, quantised.quant_zero_point) == (group, zero_point)
    plain = arch(LLAMA_3_8B)
    linear = stage_weight_bytes(plain, tp=1, precision="bf16") - stage_weight_bytes(
        plain, tp=1, precision="fp8"
    )  # one byte a linear weight
    int4 = stage_weight_bytes(quantised, tp=1, precision="int4")
    int8 = stage_weight_bytes(plain, tp=1, precision="fp8")
    assert int4 - (int8 - linear) == pytest.approx(linear * bytes_per_weight, rel=1e-9)


def test_derived_mla_copies_take_kv_room_but_do_not_make_a_checkpoint_unloadable(
    catalog: Any,
) -> None:
    """vLLM's DeepSeek-R1 FP4 prefill ranks on GB200 (TP 1, experts over 2 ranks; the public
    disaggregated row offloads half its weights): the checkpoint's 196.4 GB fit a GPU's
    198.2 GB, the 2.05 GB of 16-bit W_UK_T / W_UV copies at TP 1 do not. The plan keeps the
    layout (no KV room: its problem says so) instead of refusing it as unloadable."""
    from planner.perf.capacity import plan_capacity

    card, gpu = catalog.model("deepseek-ai/DeepSeek-R1-0528"), catalog.gpu("GB200")
    engine = EngineConfig(
        max_model_len=4096, data_parallel_size=2, enable_expert_parallel=True
    ).resolved(gpu)
    plan = plan_capacity(card, gpu, tp=1, pp=1, precision="fp4", engine=engine)
    assert plan.problem is not None
    memory = plan_memory(card, gpu, tp=1, precision="fp4", engine=engine)
    derived = memory.stages[0].derived_weights_bytes
    assert derived / 1e9 == pytest.approx(61 * 512 * 128 * 256 * 2 / 1e9)
    assert memory.weights_bytes - derived < memory.cuda_visible_bytes < memory.weights_bytes
