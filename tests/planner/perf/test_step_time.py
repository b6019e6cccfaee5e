"""Step-time terms: exact numbers for hand-computed batches, and the physics they must obey."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.catalog import Catalog
from planner.perf.deployment import Deployment, resolve_deployment
from planner.perf.scenario import Scenario
from planner.perf.step_time import (
    FEATURES,
    IDX,
    StepBatch,
    full_coefficients,
    roofline_coefficients,
    step_features,
    step_time_s,
)


def _dep(catalog: Catalog, **kw: object) -> Deployment:
    base = {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "gpu": "H100-SXM",
        "input_len": 128,
        "output_len": 128,
        "concurrency": 1,
    }
    base.update(kw)
    return resolve_deployment(Scenario(**base), catalog)


def test_an_fp8_kv_cache_is_read_in_its_own_term_at_half_the_bytes(catalog: Catalog) -> None:
    """An FP8 cache's reads are priced in ``kv_read_fp8`` (other kernels, fitted on their own),
    a 16-bit cache's in ``kv_read``; the roofline counts each at its bytes."""
    batch = StepBatch.of(decode_contexts=[1000] * 8)
    plain = step_features(batch, _dep(catalog))
    fp8 = step_features(batch, _dep(catalog, kv_cache_dtype="fp8"))
    assert plain[IDX["kv_read_fp8"]] == 0.0 and fp8[IDX["kv_read"]] == 0.0
    assert fp8[IDX["kv_read_fp8"]] == pytest.approx(plain[IDX["kv_read"]] / 2, rel=1e-12)
    assert plain[IDX["roofline"]] - fp8[IDX["roofline"]] == pytest.approx(
        plain[IDX["kv_read"]] / 2, rel=1e-9
    )


def test_roofline_of_one_decode_is_weights_plus_kv_over_bandwidth(catalog: Catalog) -> None:
    dep = _dep(catalog)
    x = step_features(StepBatch.of(decode_contexts=[1000]), dep)
    arch = catalog.model("meta-llama/Llama-3.1-8B-Instruct").architecture
    weights = arch.active_params * 2.0  # every matmul weight once, BF16
    kv = 1000 * arch.kv_bytes_per_token(2.0)  # 131,072 B per token
    assert arch.kv_bytes_per_token(2.0) == 131072
    assert x[IDX["roofline"]] == pytest.approx((weights + kv) / 3.35e12, rel=1e-12)
    assert x[IDX["weight_read"]] == pytest.approx(weights / 3.35e12, rel=1e-12)
    assert x[IDX["kv_read"]] == pytest.approx(kv / 3.35e12, rel=1e-12)
    # one GPU: no all-reduce, no pipeline
    for name in FEATURES:
        if name.startswith(("allreduce", "ar_calls", "pp_", "net_")):
            assert x[IDX[name]] == 0.0


def test_host_staged_allreduce_of_70b_tp4_on_g6e(catalog: Catalog) -> None:
    dep = _dep(
        catalog,
        model="meta-llama/Llama-3.1-70B-Instruct",
        gpu="L40S",
        tp=4,
        instance="g6e.12xlarge",
    )
    assert dep.link_class == "pcie_host"
    x = step_features(StepBatch.of(decode_contexts=[2048] * 10), dep)
    volume = 10 * 8192 * 2  # tokens x hidden x 2 B
    moved = 2 * (4 - 1) * volume  # through the shared host path
    calls = 2 * 80
    assert x[IDX["allreduce_pcie_host"]] == pytest.approx(calls * moved / 32e9, rel=1e-12)
    assert x[IDX["ar_calls_pcie_host"]] == pytest.approx(calls * 10e-6)
    # the same GPUs with peer-to-peer (no instance: a bare-metal PCIe server) move far less
    p2p = _dep(catalog, model="meta-llama/Llama-3.1-70B-Instruct", gpu="L40S", tp=4)
    assert p2p.link_class == "pcie_p2p"
    y = step_features(StepBatch.of(decode_contexts=[2048] * 10), p2p)
    assert y[IDX["allreduce_pcie_p2p"]] == pytest.approx(calls * 2 * 3 / 4 * volume / 31.5e9)
    assert y[IDX["allreduce_pcie_p2p"]] < x[IDX["allreduce_pcie_host"]] / 3


def test_moe_touches_top_k_experts_for_one_token_and_all_for_many(catalog: Catalog) -> None:
    dep = _dep(catalog, model="mistralai/Mixtral-8x7B-v0.1", tp=2)
    expert_bytes = 3 * 4096 * 14336 * 2 / 2  # one expert's SwiGLU, BF16, split over TP=2
    one = step_features(StepBatch.of(decode_contexts=[100]), dep)[IDX["expert_read"]]
    assert one == pytest.approx(2 * 32 * expert_bytes / 3.35e12, rel=1e-9)
    many = step_features(StepBatch.of(decode_contexts=[100] * 512), dep)[IDX["expert_read"]]
    assert many == pytest.approx(8 * 32 * expert_bytes / 3.35e12, rel=1e-6)


def test_prefill_attention_is_quadratic_in_the_chunk(catalog: Catalog) -> None:
    dep = _dep(catalog)
    a1 = step_features(StepBatch.of(prefill_chunks=[(2000, 0)]), dep)[IDX["attention"]]
    a2 = step_features(StepBatch.of(prefill_chunks=[(4000, 0)]), dep)[IDX["attention"]]
    assert a2 / a1 == pytest.approx(4000 * 4001 / (2000 * 2001), rel=1e-9)
    g1 = step_features(StepBatch.of(prefill_chunks=[(2000, 0)]), dep)[IDX["gemm"]]
    g2 = step_features(StepBatch.of(prefill_chunks=[(4000, 0)]), dep)[IDX["gemm"]]
    assert g2 < 2 * g1  # linear in tokens (the lm_head runs once a sequence)


def test_pipeline_stages_stream_the_whole_model_once_per_token(catalog: Catalog) -> None:
    one = _dep(
        catalog,
        model="meta-llama/Llama-3.1-70B-Instruct",
        gpu="L40S",
        tp=4,
        instance="g6e.48xlarge",
        # vLLM schedules synchronously with pipeline stages: the same scheduler for both
        async_scheduling=False,
    )
    two = _dep(
        catalog,
        model="meta-llama/Llama-3.1-70B-Instruct",
        gpu="L40S",
        tp=4,
        pp=2,
        instance="g6e.48xlarge",
    )
    batch = StepBatch.of(decode_contexts=[2048] * 30)
    x1, x2 = step_features(batch, one), step_features(batch, two)
    assert x2[IDX["weight_read"]] == pytest.approx(x1[IDX["weight_read"]])
    # two micro-batches: each GPU reads half the batch's KV and all-reduces half the volume
    assert x2[IDX["kv_read"]] == pytest.approx(x1[IDX["kv_read"]] / 2)
    assert x2[IDX["allreduce_pcie_host"]] == pytest.approx(x1[IDX["allreduce_pcie_host"]] / 2)
    assert x2[IDX["forward_passes"]] == 2 * x1[IDX["forward_passes"]]
    assert x2[IDX["pp_hops"]] > 0 and x2[IDX["net_hops"]] == 0  # one node


def test_async_scheduling_moves_the_host_terms_beside_the_step(catalog: Catalog) -> None:
    """vLLM 0.14+ (and the pinned release) schedule step n + 1 while the GPU runs step n: the
    forward pass's and the sequences' host units go to ``host_overlapped``, with its own
    coefficient; earlier releases, pipeline stages, n-gram speculation, a stated
    ``--no-async-scheduling`` and the other engines keep them in their own terms."""
    batch = StepBatch.of(decode_contexts=[600] * 10)
    host = (IDX["forward_passes"], IDX["sequences"], IDX["host_overlapped"])

    def host_terms(**kw: object) -> tuple[float, ...]:
        x = step_features(batch, _dep(catalog, **kw))
        return tuple(round(float(x[i]) * 1e6, 6) for i in host)  # microseconds

    overlapped = (0.0, 0.0, 2000.0)  # 1 ms a pass + 10 x 100 us
    synchronous = (1000.0, 1000.0, 0.0)
    assert host_terms() == overlapped  # the pinned release
    assert host_terms(engine_version="0.14.1") == overlapped
    assert host_terms(engine_version="v0.19.0") == overlapped
    assert host_terms(engine_version="0.13.0") == synchronous
    assert host_terms(engine_version="0.11.0", async_scheduling=True) == overlapped
    assert host_terms(async_scheduling=False) == synchronous
    assert not _dep(catalog, spec_method="ngram").async_scheduling
    assert _dep(catalog, spec_method="mtp", model="deepseek-ai/DeepSeek-V3", gpu="H200", tp=8,
                precision="fp8").async_scheduling  # fmt: skip
    assert host_terms(engine="sglang") == synchronous
    assert host_terms(engine="tensorrt-llm") == synchronous
    assert host_terms(engine_version="vllm") == synchronous  # no release number: not assumed
    # every other term is the same either way
    a = step_features(batch, _dep(catalog))
    b = step_features(batch, _dep(catalog, async_scheduling=False))
    rest = [i for i in range(len(a)) if i not in host]
    assert np.array_equal(a[rest], b[rest])


def test_pipeline_across_nodes_crosses_the_network(catalog: Catalog) -> None:
    dep = _dep(
        catalog, model="Qwen/Qwen3-32B", gpu="L4", tp=4, pp=3, instance="g6.12xlarge", nodes=3
    )
    x = step_features(StepBatch.of(decode_contexts=[500] * 12), dep)
    assert dep.net_boundaries == 2
    assert x[IDX["net_hops"]] == pytest.approx(2 * 1e-3)
    per_micro_tokens = 12 / 3
    assert x[IDX["net_transfer"]] == pytest.approx(2 * per_micro_tokens * 5120 * 2 / (40e9 / 8))


def test_step_time_is_the_dot_product_and_roofline_is_max(catalog: Catalog) -> None:
    dep = _dep(catalog)
    batch = StepBatch.of(decode_contexts=[500] * 8, prefill_chunks=[(1024, 0)])
    x = step_features(batch, dep)
    c = full_coefficients(np.linspace(0.1, 2.0, len(FEATURES) - 2))
    assert step_time_s(batch, dep, c) == pytest.approx(float(c @ x))
    roof = step_time_s(batch, dep, roofline_coefficients())
    memory = x[IDX["weight_read"]] + x[IDX["expert_read"]] + x[IDX["kv_read"]]
    compute = x[IDX["gemm"]] + x[IDX["attention"]]
    assert roof == pytest.approx(max(memory, compute))


@settings(max_examples=40, deadline=None)
@given(
    decodes=st.lists(st.integers(1, 30000), max_size=64),
    chunks=st.lists(st.tuples(st.integers(1, 8192), st.integers(0, 30000)), max_size=4),
    extra=st.integers(1, 4096),
)
def test_terms_are_non_negative_and_grow_with_work(
    catalog: Catalog, decodes: list[int], chunks: list[tuple[int, int]], extra: int
) -> None:
    dep = _dep(catalog, model="meta-llama/Llama-3.1-70B-Instruct", gpu="H100-SXM", tp=4)
    x = step_features(StepBatch.of(decodes, chunks), dep)
    assert (x >= 0).all()
    bigger = step_features(StepBatch.of([*decodes, extra], chunks), dep)
    for name in ("kv_read", "gemm", "attention", "allreduce_nvlink", "sequences", "roofline"):
        assert bigger[IDX[name]] >= x[IDX[name]] - 1e-15


# ----- MoE, MLA, sparse attention, expert and attention data parallelism -------------------------
def test_expert_gemm_counts_padded_rows_of_the_experts_a_batch_touches(catalog: Catalog) -> None:
    from planner.perf.step_time import MOE_TILE_ROWS, padded_rows_per_expert

    # Poisson(lambda) rows rounded up to 16-row tiles: ~lambda when large, 16 P(n >= 1) when small
    assert padded_rows_per_expert(1e-5) == pytest.approx(MOE_TILE_ROWS * 1e-5)
    assert padded_rows_per_expert(0.5) == pytest.approx(16 * (1 - np.exp(-0.5)), rel=1e-3)
    assert padded_rows_per_expert(5000) == pytest.approx(5000 + 7.5, rel=1e-6)
    dep = _dep(catalog, model="deepseek-ai/DeepSeek-R1-0528", precision="fp8", gpu="H200", tp=8)
    arch = catalog.model("deepseek-ai/DeepSeek-R1-0528").architecture
    x = step_features(StepBatch.of(decode_contexts=[1000] * 64), dep)
    lam = 64 * 8 / 256  # 2 tokens an expert at 64 decoding sequences
    rows = 256 * padded_rows_per_expert(lam)
    flops = 58 * rows * 2 * 3 * 7168 * 2048 / 8
    assert dep.num_moe_layers == len(arch.moe_layers) == 58  # 61 layers, the first 3 dense
    # narrow TP-sliced experts: 1 + 8192 x (2 / (3 x 7168) + 1 / (3 x 256)) = 12.4 x the time
    tile = 1 + 8192 * (2 / (3 * 7168) + 1 / (3 * 256))
    assert dep.expert_tile_factor == pytest.approx(tile)
    # block-scaled FP8 experts (weight_block_size 128 x 128) at 0.67 of the FP8 peak
    peak = 1979e12 * 0.67
    assert x[IDX["expert_gemm"]] == pytest.approx(tile * flops / peak, rel=1e-6)
    # ~7x the rows the assignments need: the grouped GEMM runs far below peak at decode
    assert rows / (64 * 8) > 6


def test_moe_activation_traffic_does_not_shrink_with_tensor_parallelism(catalog: Catalog) -> None:
    """Every TP rank moves every routed row's hidden-size activations (gather, down-GEMM
    output, combine); expert parallelism splits the rows instead."""
    from planner.perf.deployment import expert_activation_bytes_per_row
    from planner.perf.step_time import ep_imbalance

    kw = {"model": "deepseek-ai/DeepSeek-R1-0528", "precision": "fp8", "gpu": "H200"}
    tp8 = _dep(catalog, **kw, tp=8)
    ep8 = _dep(catalog, **kw, tp=8, enable_expert_parallel=True)
    assert tp8.expert_activation_bytes_per_row == pytest.approx(2 * (3 * 7168 + 6 * 2048 / 8))
    assert ep8.expert_activation_bytes_per_row == pytest.approx(2 * (3 * 7168 + 6 * 2048) / 8)
    assert expert_activation_bytes_per_row(7168, 2048, 1, False) == pytest.approx(
        expert_activation_bytes_per_row(7168, 2048, 1, True)
    )
    chunk = StepBatch.of(prefill_chunks=[(8192, 0)])
    x, y = step_features(chunk, tp8), step_features(chunk, ep8)
    rows = 8192 * 8
    assert x[IDX["expert_activation"]] == pytest.approx(
        58 * rows * tp8.expert_activation_bytes_per_row / 4.8e12, rel=1e-9
    )
    imbalance = ep_imbalance(8192 * 8 / 256, 256, 8)
    assert y[IDX["expert_activation"]] == pytest.approx(
        x[IDX["expert_activation"]] * imbalance * (3 * 7168 + 6 * 2048) / 8 / (3 * 7168 + 6 * 256),
        rel=1e-9,
    )
    # an 8k-token prefill chunk moves more activation bytes than the GPU's expert weights
    assert x[IDX["expert_activation"]] > x[IDX["expert_read"]]
    # dense models have no such term; it is part of the roofline's bytes
    dense = _dep(catalog)
    assert step_features(chunk, dense)[IDX["expert_activation"]] == 0.0
    assert dense.expert_tile_factor == 1.0


def test_narrow_experts_run_the_grouped_gemm_slower(catalog: Catalog) -> None:
    from planner.perf.deployment import expert_tile_factor

    # the two published Triton fused-MoE measurements the constants solve (VeOmni #460):
    # 1 / (1 + 0.5 x factor) = 22% at hidden 2048 / intermediate 768, 29% at 4096 / 1024
    assert 1 / (1 + 0.5 * expert_tile_factor(2048, 768, 1, False)) == pytest.approx(
        0.217, abs=0.002
    )
    assert 1 / (1 + 0.5 * expert_tile_factor(4096, 1024, 1, False)) == pytest.approx(
        0.286, abs=0.002
    )
    # TP slices the down GEMM's depth, EP keeps whole experts
    assert expert_tile_factor(7168, 2048, 8, False) > expert_tile_factor(7168, 2048, 8, True)
    assert expert_tile_factor(4096, 14336, 1, False) < expert_tile_factor(2048, 768, 1, False)


def test_sglang_on_blackwell_runs_some_models_experts_without_the_triton_tile_overhead(
    catalog: Catalog,
) -> None:
    """SGLang picks FlashInfer's TensorRT-LLM MoE kernels on data-center Blackwell for the
    models and precisions its server_args name, each from its release (planner.engine.
    SGLANG_TRTLLM_MOE); those experts run at the GEMM's FLOPs, the rest at the Triton fused
    MoE's tile overhead (12.4x for DeepSeek's 256-wide slices at TP 8)."""
    deepseek = {"model": "deepseek-ai/DeepSeek-R1-0528", "precision": "fp8", "tp": 8}

    def tile(**kw: object) -> float:
        scenario = {"engine": "sglang", "gpu": "B200", "engine_version": "0.5.6.post1"}
        scenario.update(kw)
        return _dep(catalog, **scenario).expert_tile_factor

    triton = 1 + 8192 * (2 / (3 * 7168) + 1 / (3 * 256))
    assert tile(**deepseek) == 1.0
    assert tile(gpu="B300", **deepseek) == 1.0
    assert tile(engine_version=None, **deepseek) == 1.0  # the pinned release
    # FP8 from 0.5.5 (NVFP4 from 0.5.4); on Hopper, and under vLLM and TensorRT-LLM, Triton's
    assert tile(engine_version="0.5.4", **deepseek) == pytest.approx(triton)
    assert tile(engine_version="0.5.5", **deepseek) == 1.0
    assert tile(gpu="H200", **deepseek) == pytest.approx(triton)
    assert tile(engine="vllm", engine_version="0.19.0", **deepseek) == pytest.approx(triton)
    assert tile(engine="tensorrt-llm", engine_version="1.1.0", **deepseek) == pytest.approx(triton)
    # by precision: BF16 Qwen3 MoE (until 0.5.8) and GLM-4.6 stay on Triton; gpt-oss's MXFP4
    # experts do not
    qwen = {"model": "Qwen/Qwen3-235B-A22B-Instruct-2507", "tp": 8}
    assert tile(precision="bf16", **qwen) > 1.0
    assert tile(precision="fp8", **qwen) == 1.0
    assert tile(precision="bf16", engine_version="0.5.7", **qwen) > 1.0
    assert tile(precision="bf16", engine_version="0.5.8", **qwen) == 1.0
    # Qwen3.5's architecture joined the Qwen3 MoE branch in 0.5.9, BF16 included
    qwen35 = {"model": "Qwen/Qwen3.5-397B-A17B", "precision": "bf16", "tp": 8}
    assert tile(engine_version="0.5.8", **qwen35) > 1.0
    assert tile(engine_version="0.5.9", **qwen35) == 1.0
    assert tile(engine_version=None, **qwen35) == 1.0
    assert tile(model="zai-org/GLM-4.6", precision="bf16", tp=8) > 1.0
    assert tile(model="openai/gpt-oss-120b", precision="fp4", tp=8) == 1.0
    assert tile(model="openai/gpt-oss-120b", precision="fp4", tp=8, gpu="H100-SXM") > 1.0
    # Kimi-K2.5's architecture joined DeepSeek's branch in 0.5.9
    kimi = {"model": "moonshotai/Kimi-K2.5", "precision": "fp4", "tp": 4}
    assert tile(engine_version="0.5.8", **kimi) > 1.0
    assert tile(engine_version="0.5.9", **kimi) == 1.0
    # Moonshot's own INT4 checkpoints from 0.5.10rc0
    native = {**kimi, "precision": "int4", "tp": 8}
    assert tile(engine_version="0.5.9", **native) > 1.0
    assert tile(engine_version="0.5.10rc0", **native) == 1.0


def test_expert_parallel_busiest_rank_sets_the_layer_time(catalog: Catalog) -> None:
    from planner.perf.step_time import ep_imbalance

    assert ep_imbalance(2.0, 256, 1) == 1.0
    assert ep_imbalance(2.0, 256, 8) == pytest.approx(1 + np.sqrt(2 * np.log(8) / 64))
    assert ep_imbalance(1e-3, 256, 8) == 8.0  # one token: all on one rank
    tp8 = _dep(catalog, model="Qwen/Qwen3-235B-A22B", precision="bf16", tp=8)
    ep8 = _dep(
        catalog, model="Qwen/Qwen3-235B-A22B", precision="bf16", tp=8, enable_expert_parallel=True
    )
    batch = StepBatch.of(decode_contexts=[500] * 32)
    x, y = step_features(batch, tp8), step_features(batch, ep8)
    assert y[IDX["expert_read"]] == pytest.approx(x[IDX["expert_read"]])  # same bytes a GPU
    # the busiest rank's rows, at whole experts' (not TP-sliced) tile overhead
    tiles = ep8.expert_tile_factor / tp8.expert_tile_factor
    assert tiles < 1
    assert y[IDX["expert_gemm"]] / x[IDX["expert_gemm"]] == pytest.approx(
        ep_imbalance(32 * 8 / 128, 128, 8) * tiles
    )


def test_mla_decode_is_absorbed_and_prefill_expanded(catalog: Catalog) -> None:
    dep = _dep(catalog, model="deepseek-ai/DeepSeek-R1-0528", precision="fp8", gpu="H200", tp=8)
    heads = 128 / 8
    peak = catalog.gpu("H200").bf16_dense_tflops * 1e12
    decode = step_features(StepBatch.of(decode_contexts=[4000]), dep)[IDX["attention"]]
    assert decode == pytest.approx(4000 * 2 * heads * (2 * 512 + 64) * 61 / peak, rel=1e-9)
    prefill = step_features(StepBatch.of(prefill_chunks=[(1000, 0)]), dep)[IDX["attention"]]
    pairs = 1000 * 1001 / 2
    assert prefill == pytest.approx(pairs * 2 * heads * (128 + 64 + 128) * 61 / peak, rel=1e-9)


def test_deepseek_sparse_attention_caps_the_main_attention_at_top_k(catalog: Catalog) -> None:
    v32 = _dep(catalog, model="deepseek-ai/DeepSeek-V3.2", precision="fp8", gpu="H200", tp=8)
    r1 = _dep(catalog, model="deepseek-ai/DeepSeek-R1-0528", precision="fp8", gpu="H200", tp=8)
    assert v32.sliding_window == 2048 and r1.sliding_window is None
    long = StepBatch.of(decode_contexts=[32000] * 4, window=2048)
    a32 = step_features(long, v32)
    a1 = step_features(StepBatch.of(decode_contexts=[32000] * 4), r1)
    # the latent is read for 2,048 keys, the indexer's 132 B keys for all 32,000
    latent = 576 * 2 * 61
    assert a32[IDX["kv_read"]] == pytest.approx(
        4 * (2048 * latent + 32000 * 132 * 61) / 4.8e12, rel=1e-9
    )
    # MLA over 2,048 keys a query, the indexer (64 heads x 128, replicated) over all 32,000
    peak = catalog.gpu("H200").bf16_dense_tflops * 1e12
    mla = 2048 * 2 * (128 / 8) * (2 * 512 + 64) * 61
    indexer = 32000 * 2 * 64 * 128 * 61
    assert a32[IDX["attention"]] == pytest.approx(4 * (mla + indexer) / peak, rel=1e-9)
    assert a32[IDX["attention"]] < a1[IDX["attention"]]


def test_attention_data_parallel_ranks_share_the_moe_layers(catalog: Catalog) -> None:
    dp8 = _dep(
        catalog,
        model="deepseek-ai/DeepSeek-R1-0528",
        precision="fp8",
        gpu="H200",
        tp=1,
        data_parallel_size=8,
        enable_expert_parallel=True,
    )
    assert (dp8.tp, dp8.data_parallel_size, dp8.moe_group, dp8.replicas) == (1, 8, 8, 8)
    assert dp8.link_class == "nvlink"
    x = step_features(StepBatch.of(decode_contexts=[1000] * 16), dp8)
    # the rank's 16 tokens with the other 7 ranks' 16 each reach the experts
    e, k = 256, 8
    touched = e * (1 - (1 - k / e) ** (16 * 8))
    assert x[IDX["expert_read"]] == pytest.approx(
        touched * 58 * dp8.expert_bytes_per_expert_layer / 4.8e12, rel=1e-9
    )
    # all-gather + reduce-scatter of all ranks' tokens in every MoE layer, no TP all-reduce
    moved = 2 * 58 * 7 / 8 * (16 * 8) * 7168 * 2
    assert x[IDX["allreduce_nvlink"]] == pytest.approx(moved / dp8.link_bw, rel=1e-9)
    assert x[IDX["ar_calls_nvlink"]] == pytest.approx(2 * 58 * 10e-6)
    # each rank holds the whole attention: its dense weights are not split
    tp8 = _dep(catalog, model="deepseek-ai/DeepSeek-R1-0528", precision="fp8", gpu="H200", tp=8)
    assert dp8.dense_weight_bytes == pytest.approx(8 * tp8.dense_weight_bytes)
    assert dp8.expert_bytes_per_expert_layer == pytest.approx(tp8.expert_bytes_per_expert_layer)


def test_mxfp4_experts_only_and_fp4_weight_only_before_blackwell(catalog: Catalog) -> None:
    h100 = _dep(catalog, model="openai/gpt-oss-120b", precision="fp4", gpu="H100-SXM")
    b200 = _dep(catalog, model="openai/gpt-oss-120b", precision="fp4", gpu="B200")
    arch = catalog.model("openai/gpt-oss-120b").architecture
    assert arch.experts_only_quantized and arch.quant_method == "mxfp4"
    routed = len(arch.moe_layers) * arch.experts_per_token * arch._expert_params()
    # attention, router, lm_head stay BF16; the experts stream 4-bit bytes
    assert h100.dense_weight_bytes == pytest.approx((arch.active_params - routed) * 2.0)
    assert h100.expert_bytes_per_expert_layer == pytest.approx(arch._expert_params() * 0.5)
    gpu_h, gpu_b = catalog.gpu("H100-SXM"), catalog.gpu("B200")
    assert h100.peak_flops_experts == pytest.approx(gpu_h.bf16_dense_tflops * 1e12)  # 16-bit math
    assert b200.peak_flops_experts == pytest.approx(gpu_b.fp4_dense_tflops * 1e12)  # native FP4
    assert b200.peak_flops == pytest.approx(gpu_b.bf16_dense_tflops * 1e12)
    a100_fp8 = _dep(catalog, model="Qwen/Qwen3-32B-FP8", precision="fp8", gpu="A100-80GB-SXM")
    assert a100_fp8.peak_flops == pytest.approx(
        catalog.gpu("A100-80GB-SXM").bf16_dense_tflops * 1e12
    )


def test_steps_beyond_the_cuda_graph_limit_launch_every_kernel(catalog: Catalog) -> None:
    dep = _dep(catalog)
    assert dep.cuda_graph_max_tokens == 512  # vLLM V1
    small = step_features(StepBatch.of(decode_contexts=[100] * 512), dep)
    big = step_features(StepBatch.of(decode_contexts=[100] * 513), dep)
    assert small[IDX["eager_layers"]] == 0.0
    assert big[IDX["eager_layers"]] == pytest.approx(32 * 10e-6)


def test_block_scaled_fp8_checkpoints_compute_below_the_per_tensor_fp8_rate(
    catalog: Catalog,
) -> None:
    from planner.perf.deployment import BLOCK_SCALED_FP8_RATE

    block = catalog.model("Qwen/Qwen3-14B-FP8").architecture
    assert (
        block.block_scaled_fp8 and not catalog.model("Qwen/Qwen3-14B").architecture.block_scaled_fp8
    )
    h100 = _dep(catalog, model="Qwen/Qwen3-14B-FP8", precision="fp8")
    assert h100.peak_flops == pytest.approx(1979e12 * BLOCK_SCALED_FP8_RATE)
    # a per-tensor FP8 checkpoint keeps the FP8 peak; A100 runs FP8 weight-only at 16-bit
    assert _dep(catalog, precision="fp8").peak_flops == pytest.approx(1979e12)
    a100 = _dep(catalog, model="Qwen/Qwen3-14B-FP8", precision="fp8", gpu="A100-80GB-SXM")
    assert a100.peak_flops == pytest.approx(312e12)
    # DeepSeek's experts are block-scaled too
    r1 = _dep(catalog, model="deepseek-ai/DeepSeek-R1-0528", precision="fp8", gpu="H200", tp=8)
    assert r1.peak_flops_experts == pytest.approx(1979e12 * BLOCK_SCALED_FP8_RATE)


def test_blackwell_runs_block_scaled_fp8_at_the_fp8_rate(catalog: Catalog) -> None:
    """Blackwell's tensor cores take the block scales as MMA operands (UE8M0 in DeepGEMM's
    SM100 kernels), Hopper promotes them on CUDA cores: DeepSeek-R1's block-scaled FP8 experts
    compute at the whole FP8 peak on B200 (4,500 dense TFLOPS, data/gpus.csv) and at 0.67 of
    it on H200 (1,979 x 0.67 = 1,326 TFLOPS)."""
    from planner.perf.deployment import BLOCK_SCALED_FP8_RATE, hardware_block_scaling

    blackwell = ("B200", "GB200", "B300", "GB300", "RTXPRO6000")
    assert all(hardware_block_scaling(catalog.gpu(g)) for g in blackwell)
    others = ("H100-SXM", "H200", "L40S", "A100-80GB-SXM", "MI300X", "MI355X")
    assert not any(hardware_block_scaling(catalog.gpu(g)) for g in others)
    r1 = {"model": "deepseek-ai/DeepSeek-R1-0528", "precision": "fp8", "tp": 8}
    b200 = _dep(catalog, gpu="B200", **r1)
    assert b200.peak_flops_experts == pytest.approx(4500e12)
    assert b200.peak_flops == pytest.approx(4500e12)  # the dense FP8 layers too
    h200 = _dep(catalog, gpu="H200", **r1)
    assert h200.peak_flops_experts == pytest.approx(1979e12 * BLOCK_SCALED_FP8_RATE)
    assert h200.peak_flops_experts == pytest.approx(1325.93e12)


# ----- pipeline parallelism: vLLM's micro-batches ------------------------------------------------
def test_vllm_pipeline_prompts_in_one_budget_travel_in_one_micro_batch(catalog: Catalog) -> None:
    """14 prompts of 128 tokens on PP 3 (1,792 tokens, under the 2,048-token budget of one
    micro-batch): vLLM schedules them into one batch, so one chain carries all 1,792 tokens,
    three times the even split's 597.3; a decode-only step is still split three ways."""
    from planner.perf.step_time import macro_step_token_budget

    dep = _dep(
        catalog, model="Qwen/Qwen3-32B", gpu="L4", tp=4, pp=3, instance="g6.12xlarge", nodes=3
    )
    assert dep.family == "vllm" and dep.max_num_batched_tokens == 2048
    assert macro_step_token_budget(dep) == 3 * 2048
    flops_per_token = dep.gemm_flops_per_token
    prompts = step_features(StepBatch.of(prefill_chunks=[(128, 0)] * 14), dep)
    lm_head = 14 * dep.lm_head_flops_per_seq  # all 14 sampled in the one chain
    assert prompts[IDX["gemm"]] == pytest.approx(
        (1792 * flops_per_token + lm_head) / dep.peak_flops, rel=1e-12
    )
    assert prompts[IDX["net_transfer"]] == pytest.approx(2 * 1792 * 5120 * 2 / (40e9 / 8))
    # 5,000 prompt tokens (a 3-budget macro-step): the first micro-batch is a full budget,
    # 2,048 tokens (5000 / 2048 micro-batches' worth, 2.44 of the 5 sequences sampled in it)
    wide = step_features(StepBatch.of(prefill_chunks=[(1000, 0)] * 5), dep)
    assert wide[IDX["gemm"]] == pytest.approx(
        (2048 * flops_per_token + 5 * 2048 / 5000 * dep.lm_head_flops_per_seq) / dep.peak_flops
    )
    # ... and one token more than a budget is never a shorter chain than a budget
    full = step_features(StepBatch.of(prefill_chunks=[(1024, 0)] * 2), dep)
    over = step_features(StepBatch.of(prefill_chunks=[(1024, 0)] * 2 + [(1, 0)]), dep)
    assert over[IDX["gemm"]] >= full[IDX["gemm"]]
    assert over[IDX["net_transfer"]] == pytest.approx(full[IDX["net_transfer"]])
    # two decodes beside one 1,024-token chunk: the chain holds 2/3 + 1,024 tokens
    mixed = step_features(StepBatch.of(decode_contexts=[500] * 2, prefill_chunks=[(1024, 0)]), dep)
    assert mixed[IDX["net_transfer"]] == pytest.approx(2 * (2 / 3 + 1024) * 5120 * 2 / (40e9 / 8))
    decodes = step_features(StepBatch.of(decode_contexts=[500] * 12), dep)
    assert decodes[IDX["net_transfer"]] == pytest.approx(2 * 4 * 5120 * 2 / (40e9 / 8))


def test_sglang_pipeline_keeps_the_even_split(catalog: Catalog) -> None:
    """The micro-batch rule is vLLM's scheduler; another engine's prompts stay split evenly."""
    from planner.perf.step_time import macro_step_token_budget

    dep = _dep(
        catalog,
        model="Qwen/Qwen3-32B",
        gpu="L4",
        tp=4,
        pp=3,
        instance="g6.12xlarge",
        nodes=3,
        engine="sglang",
    )
    assert macro_step_token_budget(dep) == dep.max_num_batched_tokens
    x = step_features(StepBatch.of(prefill_chunks=[(128, 0)] * 14), dep)
    assert x[IDX["net_transfer"]] == pytest.approx(2 * 1792 / 3 * 5120 * 2 / (40e9 / 8))


def test_layer_floor_is_what_a_layers_floor_exceeds_the_roofline_by(catalog: Catalog) -> None:
    """An early release's decode step is near-flat from 1 to 8 in flight (SGLang 0.4.10.post1,
    DeepSeek-V3 on 8 x MI300X: 33.9 / 33.5 / 35.0 / 38.9 ms). The floor term is 61 layers x
    150 us = 9.15 ms less the step's roofline (0.88 ms at one sequence of 768 tokens, 3.95 ms
    at eight): 8.27 and 5.20 ms; from ~24 sequences the work exceeds it and it is 0. A release
    fitted at 2.5 (what early SGLang's MoE kernels show) adds 20.7 ms to one sequence's step
    and 13.0 ms to eight's, against 0.1 x the term at the prior."""
    dep = _dep(
        catalog,
        model="deepseek-ai/DeepSeek-V3",
        gpu="MI300X",
        tp=8,
        precision="fp8",
        engine="sglang",
        engine_version="0.4.10.post1",
        input_len=512,
        output_len=512,
    )
    assert dep.num_layers == 61
    floor = {}
    for n in (1, 2, 4, 8, 32, 128):
        x = step_features(StepBatch.of(decode_contexts=[768] * n), dep)
        assert x[IDX["layer_floor"]] == pytest.approx(max(0.0, 61 * 150e-6 - x[IDX["roofline"]]))
        floor[n] = x[IDX["layer_floor"]]
    assert floor[1] == pytest.approx(9.15e-3 - 0.88e-3, abs=0.01e-3)
    assert floor[8] == pytest.approx(9.15e-3 - 3.95e-3, abs=0.01e-3)
    assert floor[1] > floor[2] > floor[4] > floor[8] > 0.0
    assert floor[32] == floor[128] == 0.0  # the work exceeds the floor: the term is gone
    c_prior = full_coefficients(np.ones(len(FEATURES) - 2))
    c_prior[IDX["layer_floor"]] = 0.1
    c_early = c_prior.copy()
    c_early[IDX["layer_floor"]] = 2.5
    for n, added_ms in ((1, 2.4 * 8.27), (8, 2.4 * 5.20), (32, 0.0)):
        batch = StepBatch.of(decode_contexts=[768] * n)
        added = step_time_s(batch, dep, c_early) - step_time_s(batch, dep, c_prior)
        assert added * 1e3 == pytest.approx(added_ms, abs=0.03)
    # an 8B dense model's one decode on an H100 reads 4.52 ms of weights and KV, nearly its
    # 32 layers' 4.8 ms floor: 0.28 ms of floor, 6% of the roofline (DeepSeek: 9.4 times)
    llama = step_features(StepBatch.of(decode_contexts=[1000]), _dep(catalog))
    assert llama[IDX["roofline"]] == pytest.approx(4.52e-3, abs=0.01e-3)
    assert llama[IDX["layer_floor"]] == pytest.approx(0.28e-3, abs=0.01e-3)


def test_sglang_prefill_runs_eagerly_and_an_moe_one_waits_on_its_launches(
    catalog: Catalog,
) -> None:
    """SGLang's CUDA graphs capture decode steps only (through 0.5.9): a 300-token prefill runs
    eagerly there (every layer's launches, and for an MoE model the eager floor, max(0, MoE
    layers x 4 ms - roofline)) where vLLM V1 replays a graph. The floor fades as the prefill's
    work grows; a dense model and a decode step have none."""
    moe = {"model": "deepseek-ai/DeepSeek-V3", "gpu": "H200", "tp": 8, "precision": "fp8"}
    sglang = _dep(catalog, engine="sglang", engine_version="0.5.9", **moe)
    assert sglang.prefill_graph_tokens is None
    vllm = _dep(catalog, engine="vllm", **moe)
    assert sglang.num_moe_layers == 58
    floor = {}
    for tokens in (300, 2000, 32000):
        x = step_features(StepBatch.of(prefill_chunks=[(tokens, 0)]), sglang)
        assert x[IDX["eager_layers"]] == pytest.approx(61 * 10e-6)
        assert x[IDX["eager_floor"]] == pytest.approx(max(0.0, 58 * 4e-3 - x[IDX["roofline"]]))
        floor[tokens] = x[IDX["eager_floor"]]
    assert floor[300] > floor[2000] > 0.0 and floor[32000] == 0.0
    graphed = step_features(StepBatch.of(prefill_chunks=[(300, 0)]), vllm)
    assert graphed[IDX["eager_layers"]] == graphed[IDX["eager_floor"]] == 0.0
    # SGLang's decode steps replay their graphs; past the graphs' batch a decode step launches
    # every kernel but is the GPU's work, not its launches' (no floor)
    decode = step_features(StepBatch.of(decode_contexts=[1000] * 8), sglang)
    assert decode[IDX["eager_layers"]] == decode[IDX["eager_floor"]] == 0.0
    assert sglang.cuda_graph_max_tokens is not None
    wide = step_features(
        StepBatch.of(decode_contexts=[100] * (sglang.cuda_graph_max_tokens + 1)), sglang
    )
    assert wide[IDX["eager_layers"]] > 0.0 and wide[IDX["eager_floor"]] == 0.0
    dense = _dep(catalog, engine="sglang", engine_version="0.5.9")
    x = step_features(StepBatch.of(prefill_chunks=[(300, 0)]), dense)
    assert x[IDX["eager_layers"]] == pytest.approx(32 * 10e-6)
    assert x[IDX["eager_floor"]] == 0.0


def test_sglang_from_0_5_10_runs_prefill_under_piecewise_graphs_up_to_its_limit(
    catalog: Catalog,
) -> None:
    """From 0.5.10 SGLang runs a prefill step of up to the chunked-prefill size (2,048 tokens
    for an MLA model) under piecewise CUDA graphs on NVIDIA GPUs: no eager launches, no eager
    floor. Past the limit, on AMD, with attention data parallelism, speculation, pipeline
    parallelism or an architecture SGLang keeps eager, the step runs eagerly as before."""
    moe = {"model": "deepseek-ai/DeepSeek-V3", "gpu": "H200", "tp": 8, "precision": "fp8"}

    def dep(**kw: object) -> Deployment:
        scenario: dict[str, object] = {"engine": "sglang", "engine_version": "0.5.10.post1"}
        scenario.update(moe)
        scenario.update(kw)
        return _dep(catalog, **scenario)

    def eager(d: Deployment, tokens: int) -> tuple[float, float]:
        x = step_features(StepBatch.of(prefill_chunks=[(tokens, 0)]), d)
        return x[IDX["eager_layers"]], x[IDX["eager_floor"]]

    mla = dep()
    assert mla.prefill_graph_tokens == 2048
    assert eager(mla, 300) == (0.0, 0.0) and eager(mla, 2048) == (0.0, 0.0)
    assert eager(mla, 2049)[0] == pytest.approx(61 * 10e-6) and eager(mla, 2049)[1] > 0.0
    assert dep(engine_version=None).prefill_graph_tokens == 2048  # the pinned release
    # a GQA model's graphs reach the chunked-prefill size
    minimax = dep(model="MiniMaxAI/MiniMax-M2.5")
    assert minimax.prefill_graph_tokens == minimax.max_num_batched_tokens
    assert minimax.prefill_graph_tokens is not None and minimax.prefill_graph_tokens > 2048
    for off in (
        dep(engine_version="0.5.9"),
        dep(gpu="MI300X"),
        dep(tp=1, data_parallel_size=8, enable_expert_parallel=True),
        dep(model="zai-org/GLM-5"),  # GlmMoeDsa: on SGLang's list of eager architectures
        dep(model="meta-llama/Llama-4-Scout-17B-16E-Instruct", precision="bf16"),  # multimodal
        dep(engine_version="0.5.10.post1", enforce_eager=True),
        dep(spec_method="mtp", num_spec_tokens=1),
        dep(model="MiniMaxAI/MiniMax-M2.5", tp=4, pp=2),
    ):
        assert off.prefill_graph_tokens is None
        assert eager(off, 300)[0] > 0.0
    # vLLM and TensorRT-LLM never take the rule
    assert dep(engine="vllm", engine_version="0.19.0").prefill_graph_tokens is None


def test_the_request_path_grows_with_the_engines_gpu_processes(catalog: Catalog) -> None:
    """A served request's fixed path is ``request_path`` x 10 ms plus ``request_path_ranks`` x
    10 ms x log2(TP x PP x attention-DP ranks): every rank receives the request before the
    step that prefills it. Its first token and its finish carry both, so TPOT does not."""
    from planner.perf.step_time import add_request_path, engine_ranks, request_path_s

    c = full_coefficients(np.ones(len(FEATURES) - 2))
    c[IDX["request_path"]], c[IDX["request_path_ranks"]] = 3.0, 0.5
    assert request_path_s(c, True, 1) == pytest.approx(0.030)
    assert request_path_s(c, True, 8) == pytest.approx(0.030 + 3 * 0.005)
    assert request_path_s(c, False, 8) == 0.0
    dep = _dep(catalog, model="meta-llama/Llama-3.1-70B-Instruct", tp=4)
    assert engine_ranks(dep) == 4
    assert engine_ranks(_dep(catalog)) == 1
    first, finish = np.zeros((2, len(FEATURES))), np.ones((2, len(FEATURES)))
    add_request_path(first, finish, engine_ranks(dep))
    assert first[:, IDX["request_path"]] == pytest.approx([10e-3] * 2)
    assert first[:, IDX["request_path_ranks"]] == pytest.approx([2 * 10e-3] * 2)
    assert (finish - first) == pytest.approx(np.ones((2, len(FEATURES))))


def test_fused_all_reduces_take_their_own_term_where_the_engine_fuses(catalog: Catalog) -> None:
    """vLLM 0.17+ at TP 2-8 on Hopper and data-center Blackwell over NVLink moves a step's
    tensor-parallel all-reduce calls to ``ar_calls_fused`` while the tensor fits the fused
    kernel's limit (0.5 MiB at TP 8 on Hopper: 32 tokens of Llama-3.1-70B's 8,192-wide hidden
    state); the bytes moved are the same either way. The rules are each release's own
    (planner.engine.fused_allreduce_tokens)."""
    llama = "meta-llama/Llama-3.1-70B-Instruct"

    def terms(tokens: int = 16, **kw: object) -> tuple[float, float, float]:
        scenario = {"model": llama, "tp": 8, "engine_version": "0.19.0"}
        scenario.update(kw)
        dep = _dep(catalog, **scenario)
        x = step_features(StepBatch.of(decode_contexts=[1000] * tokens), dep)
        return x[IDX["ar_calls_fused"]], x[IDX["ar_calls_nvlink"]], x[IDX["allreduce_nvlink"]]

    calls = 2 * 80 * 10e-6
    fused, plain, moved = terms()
    assert (fused, plain) == (pytest.approx(calls), 0.0)
    assert terms(tokens=32)[:2] == (pytest.approx(calls), 0.0)
    # a step past the limit, a release before 0.17, enforce_eager, another GPU or engine: plain
    assert terms(tokens=33)[:2] == (0.0, pytest.approx(calls))
    assert terms(engine_version="0.16.0")[:2] == (0.0, pytest.approx(calls))
    assert terms(engine_version="0.17.0")[:2] == (pytest.approx(calls), 0.0)
    assert terms(enforce_eager=True)[:2] == (0.0, pytest.approx(calls))
    assert terms(engine="sglang", engine_version="0.5.9")[:2] == (0.0, pytest.approx(calls))
    assert terms(gpu="A100-80GB-SXM")[:2] == (0.0, pytest.approx(calls))
    assert terms(gpu="MI300X")[:2] == (0.0, pytest.approx(calls))
    assert terms(engine_version="0.16.0")[2] == pytest.approx(moved)

    def tokens(**kw: object) -> int | None:
        return _dep(catalog, **kw).fused_allreduce_tokens

    # TP 4 on B200 takes 32 MiB (2,048 tokens); B300's own row (2 MiB at TP 8) from 0.19
    assert tokens(model=llama, tp=4, gpu="B200", engine_version="0.17.0") == 2048
    assert tokens(model=llama, tp=8, gpu="B300", engine_version="0.18.0") is None
    assert tokens(model=llama, tp=8, gpu="B300", engine_version="0.19.0") == 128
    # with data parallelism, off until 0.21
    qwen = {"model": "Qwen/Qwen3-30B-A3B", "tp": 2, "data_parallel_size": 2}
    assert tokens(engine_version="0.20.0", **qwen) is None
    assert tokens(engine_version="0.21.0", **qwen) is not None
    # SGLang: DeepSeek on Blackwell from 0.5.4, on Hopper from 0.5.7; GLM-4 MoE from 0.5.7
    deepseek = {"model": "deepseek-ai/DeepSeek-R1-0528", "precision": "fp8", "tp": 8}
    sglang = {"engine": "sglang", **deepseek}
    assert tokens(gpu="B200", engine_version="0.5.6.post1", **sglang) == 2048
    assert tokens(gpu="B200", engine_version="0.5.3", **sglang) is None
    assert tokens(gpu="H200", engine_version="0.5.6", **sglang) is None
    assert tokens(gpu="H200", engine_version="0.5.9", **sglang) == 2048
    glm = {"engine": "sglang", "model": "zai-org/GLM-4.6", "tp": 8, "gpu": "B200"}
    assert tokens(engine_version="0.5.6", **glm) is None
    assert tokens(engine_version="0.5.7", **glm) == 2048
    # DeepSeek-V3.2 (DeepseekV32ForCausalLM) joined the list in 0.5.11, with Qwen3-Next and GLM-5
    v32 = {"engine": "sglang", "model": "deepseek-ai/DeepSeek-V3.2", "tp": 8, "gpu": "B200"}
    assert tokens(engine_version="0.5.10.post1", precision="fp8", **v32) is None
    assert tokens(engine_version="0.5.11", precision="fp8", **v32) == 2048
    # the plan says so; without NVLink (H100 PCIe cards) nothing fuses
    fusing = _dep(catalog, model=llama, tp=8, engine_version="0.19.0")
    assert any("fuses each tensor-parallel all-reduce" in n for n in fusing.notes)
    pcie = _dep(catalog, model=llama, tp=8, gpu="H100-PCIe", engine_version="0.19.0")
    assert pcie.link_class != "nvlink" and pcie.fused_allreduce_tokens is None
    assert not any("all-reduce:" in n for n in pcie.notes)


def test_a_query_key_norm_across_every_head_adds_an_all_reduce_a_layer(catalog: Catalog) -> None:
    """MiniMax-M2's query and key norms span all heads (``qk_norm_type`` ``per_layer``): split
    over TP ranks, each rank's sums of squares are all-reduced before the norm applies, one
    call a layer (vLLM's and SGLang 0.5.8+'s ``forward_qk`` reduce both stacked; SGLang 0.5.7's
    q_norm and k_norm reduced one each). The calls are plain ones, not fused, and move next to
    nothing. Qwen3's per-head norm needs none, nor one GPU."""
    minimax = {"model": "MiniMaxAI/MiniMax-M2.5", "precision": "fp8", "gpu": "B200", "tp": 8}
    layers = catalog.model("MiniMaxAI/MiniMax-M2.5").architecture.num_layers
    assert catalog.model("MiniMaxAI/MiniMax-M2.5").architecture.qk_norm_across_heads
    assert not catalog.model("Qwen/Qwen3-30B-A3B").architecture.qk_norm_across_heads

    def plain_calls(**kw: object) -> float:
        dep = _dep(catalog, **{**minimax, **kw})
        x = step_features(StepBatch.of(decode_contexts=[1000] * 4), dep)
        return float(x[IDX["ar_calls_nvlink"]])

    residual = 2 * layers * 10e-6  # attention and MoE outputs, not fused for MiniMax here
    assert (
        _dep(catalog, engine="sglang", engine_version="0.5.8", **minimax).fused_allreduce_tokens
        is None
    )
    assert plain_calls(engine="sglang", engine_version="0.5.8") == pytest.approx(
        residual + layers * 10e-6
    )
    assert plain_calls(engine="sglang", engine_version="0.5.7") == pytest.approx(
        residual + 2 * layers * 10e-6
    )
    assert plain_calls(engine="vllm", engine_version="0.11.0") == pytest.approx(
        residual + layers * 10e-6
    )
    assert (
        _dep(catalog, engine="sglang", engine_version="0.5.13", **minimax).qk_norm_allreduce_calls
        == layers
    )
    one_gpu = _dep(catalog, **{**minimax, "tp": 1, "gpu": "B300", "engine": "sglang"})
    assert one_gpu.qk_norm_allreduce_calls == 0
    qwen = _dep(catalog, model="Qwen/Qwen3-30B-A3B", tp=8, engine="sglang")
    assert qwen.qk_norm_allreduce_calls == 0
