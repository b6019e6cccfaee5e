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
