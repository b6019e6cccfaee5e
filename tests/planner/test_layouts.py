"""Layout enumeration: TP x PP x DP over instances, every ruled-out candidate with its reason."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.catalog import Catalog, load_catalog
from planner.engine import EngineConfig
from planner.errors import InvalidInputError, UnknownEntityError
from planner.layouts import (
    LayoutCandidate,
    check_layout,
    enumerate_layouts,
    evaluate_layout,
    precision_support,
)
from tests.planner.test_architecture import LLAMA_3_8B, LLAMA_3_70B

QWEN2_5_7B: dict[str, Any] = {
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
}

SOURCE = {"source": "test fixture", "as_of": "2025-06-01"}
GPU_ROWS = [
    # gpu_id, vendor, memory_gb, reported MiB, GB/s, fp16, fp8, int8, fp4, form, interconnect
    ("A10G", "nvidia", 24, 23028, 600, 70, None, None, None, "pcie", "pcie"),
    ("L4", "nvidia", 24, 23034, 300, 121, 242, 242, None, "pcie", "pcie"),
    ("L40S", "nvidia", 48, 46068, 864, 362.05, 733, 733, None, "pcie", "pcie"),
    ("H100-SXM", "nvidia", 80, 81559, 3350, 989.5, 1979, 1979, None, "sxm", "nvlink"),
    ("H200", "nvidia", 141, 143771, 4800, 989.5, 1979, 1979, None, "sxm", "nvlink"),
    ("MI300X", "amd", 192, 196288, 5300, 1307.4, 2614.9, 2614.9, None, "oam", "infinity_fabric"),
]
INSTANCE_ROWS = [
    # provider, instance, gpu, gpus, link, [(region, pricing, usd)]
    ("aws", "g5.xlarge", "A10G", 1, "none", [("us-east-1", "on_demand", 1.006)]),
    ("aws", "g5.2xlarge", "A10G", 1, "none", [("us-east-1", "on_demand", 1.212)]),
    ("aws", "g6.xlarge", "L4", 1, "none", [("us-east-1", "on_demand", 0.8048)]),
    ("aws", "g6.2xlarge", "L4", 1, "none", [("us-east-1", "on_demand", 0.9776)]),
    (
        "aws",
        "g6e.xlarge",
        "L40S",
        1,
        "none",
        [("us-east-1", "on_demand", 1.861), ("us-east-1", "spot", 0.9)],
    ),
    ("aws", "g6e.2xlarge", "L40S", 1, "none", [("us-east-1", "on_demand", 2.24208)]),
    (
        "aws",
        "g6e.12xlarge",
        "L40S",
        4,
        "pcie",
        [
            ("us-east-1", "on_demand", 10.49264),
            ("us-west-2", "on_demand", 10.49264),
            ("us-east-1", "spot", 4.5),
        ],
    ),
    ("aws", "p5.48xlarge", "H100-SXM", 8, "nvlink", [("us-east-1", "on_demand", 55.04)]),
    ("azure", "ND_MI300X_v5", "MI300X", 8, "infinity_fabric", [("eastus", "on_demand", 48.0)]),
]


def build_catalog(directory: Path, models: dict[str, dict[str, Any]] | None = None) -> Catalog:
    """A small catalog written as the data/ files are (loaded by the real loader)."""
    directory.mkdir(parents=True, exist_ok=True)
    gpu_header = [
        "gpu_id",
        "name",
        "vendor",
        "memory_gb",
        "memory_reported_mib",
        "memory_bw_gbps",
        "fp16_dense_tflops",
        "fp8_dense_tflops",
        "int8_dense_tops",
        "fp4_dense_tflops",
        "form_factor",
        "interconnect",
        "source",
        "as_of",
    ]
    with (directory / "gpus.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(gpu_header)
        for gid, vendor, gb, mib, bw, fp16, fp8, int8, fp4, form, link in GPU_ROWS:
            row = [gid, gid, vendor, gb, mib, bw, fp16, fp8, int8, fp4, form, link]
            writer.writerow(["" if v is None else v for v in row] + list(SOURCE.values()))
    with (directory / "instances.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        header = ["provider", "instance", "gpu_id", "gpus", "gpu_link", "network_gbps"]
        writer.writerow([*header, "source", "as_of"])
        for provider, name, gid, gpus, link, _ in INSTANCE_ROWS:
            network = 100 if name == "g6e.12xlarge" else ""  # EC2 guide: 100 Gbit/s
            writer.writerow([provider, name, gid, gpus, link, network, *SOURCE.values()])
    with (directory / "prices.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["provider", "instance", "region", "pricing", "usd_per_hour", "source", "as_of"]
        )
        for provider, name, _, _, _, prices in INSTANCE_ROWS:
            for region, pricing, usd in prices:
                writer.writerow([provider, name, region, pricing, usd, *SOURCE.values()])
    (directory / "models").mkdir(exist_ok=True)
    all_models = {
        "meta-llama/Llama-3.1-70B-Instruct": LLAMA_3_70B,
        "meta-llama/Llama-3.1-8B-Instruct": LLAMA_3_8B,
        "Qwen/Qwen2.5-7B-Instruct": QWEN2_5_7B,
        **(models or {}),
    }
    for hf_id, config in all_models.items():
        body = {**config, "_servewise": {"hf_id": hf_id, **SOURCE}}
        (directory / "models" / f"{hf_id.replace('/', '__')}.json").write_text(json.dumps(body))
    return load_catalog(data_dir=directory)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    return build_catalog(tmp_path_factory.mktemp("catalog"))


def by_shape(candidates: list[LayoutCandidate]) -> dict[tuple[int, int], LayoutCandidate]:
    return {(c.tp, c.pp): c for c in candidates}


# ----- the check: Llama-3.1-70B BF16 on one g6e.12xlarge ---------------------------------


def test_llama_70b_bf16_on_one_g6e_12xlarge(small: Catalog) -> None:
    model = small.model("meta-llama/Llama-3.1-70B-Instruct")
    layouts = enumerate_layouts(
        small,
        model,
        instances=["g6e.12xlarge"],
        max_nodes=1,
        engine=EngineConfig(max_model_len=4096),
    )
    shapes = by_shape(layouts)
    assert set(shapes) == {(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (4, 1)}
    tp4 = shapes[(4, 1)]
    assert tp4.feasible and tp4.reason is None and tp4.dp == 1
    assert tp4.memory is not None and 65_000 < tp4.memory.kv_capacity_tokens < 78_000
    one = shapes[(1, 1)]
    assert not one.feasible and one.dp == 4
    assert one.reason == "weights 141.1 GB > 1 x 47.8 GB x 0.90 usable"
    assert shapes[(2, 1)].reason == "weights 141.2 GB > 2 x 47.8 GB x 0.90 usable"
    # TP=8 is ruled out: one g6e.12xlarge has 4 GPUs
    tp8 = evaluate_layout(model, small.instance("g6e.12xlarge"), small.gpu("L40S"), tp=8)
    assert not tp8.feasible
    assert tp8.reason == "TP=8 x PP=1 needs 8 GPUs a replica; 1 x g6e.12xlarge has 4"
    # ... and across two of them, TP would leave the instance
    two = enumerate_layouts(
        small, model, instances=["g6e.12xlarge"], nodes=[2], engine=EngineConfig(max_model_len=4096)
    )
    tp8_two = by_shape(two)[(8, 1)]
    assert tp8_two.reason == "TP=8 must stay inside one instance; g6e.12xlarge has 4 GPUs"
    assert by_shape(two)[(4, 2)].feasible  # PP may cross instances
    # ... but only where the network between the instances is known
    p5 = small.instance("p5.48xlarge")
    blind = evaluate_layout(model, p5, small.gpu("H100-SXM"), nodes=2, tp=8, pp=2)
    assert not blind.feasible
    assert blind.reason is not None and "network bandwidth" in blind.reason


def test_vllm_default_max_model_len_rules_out_tp4_on_l40s(small: Catalog) -> None:
    model = small.model("meta-llama/Llama-3.1-70B-Instruct")
    tp4 = evaluate_layout(model, small.instance("g6e.12xlarge"), small.gpu("L40S"), tp=4)
    assert not tp4.feasible and tp4.memory is not None
    assert tp4.reason is not None and tp4.reason.startswith("one 131,072-token sequence needs")
    assert "max_model_len <= " in tp4.reason


def test_tensorrt_llm_is_not_offered_on_amd_gpus(small: Catalog) -> None:
    """TensorRT-LLM builds CUDA kernels only: an MI300X layout is ruled out in words for it
    and stays feasible for vLLM (an owned AMD server once won a TensorRT-LLM search)."""
    model = small.model("meta-llama/Llama-3.1-70B-Instruct")
    instance, gpu = small.instance("ND_MI300X_v5"), small.gpu("MI300X")
    engine = EngineConfig(engine="tensorrt-llm", max_model_len=4096)
    trt = evaluate_layout(model, instance, gpu, tp=8, engine=engine)
    assert not trt.feasible
    assert trt.reason == (
        "TensorRT-LLM runs on NVIDIA GPUs only; MI300X is AMD: serve it with vLLM or SGLang"
    )
    vllm = evaluate_layout(model, instance, gpu, tp=8, engine=EngineConfig(max_model_len=4096))
    assert vllm.feasible, vllm.reason


def test_tp_not_dividing_heads_is_ruled_out_in_words(small: Catalog) -> None:
    model = small.model("Qwen/Qwen2.5-7B-Instruct")  # 28 heads, 4 KV heads
    shapes = by_shape(enumerate_layouts(small, model, instances=["p5.48xlarge"], max_nodes=1))
    assert shapes[(8, 1)].reason == (
        "tp=8 is not allowed: a divisor of the 28 attention heads: 1, 2, 4, 7, 14, 28"
    )
    assert shapes[(4, 2)].feasible and shapes[(1, 1)].feasible and shapes[(1, 1)].dp == 8


def test_precision_support(small: Catalog) -> None:
    assert precision_support(small.gpu("H100-SXM"), "fp8") == (True, None)
    ok, note = precision_support(small.gpu("A10G"), "fp8")
    assert ok and note is not None and "weight-only (Marlin)" in note
    ok, note = precision_support(small.gpu("L40S"), "fp4")
    assert ok and note is not None and "FP4 weight-only" in note
    ok, note = precision_support(small.gpu("MI300X"), "fp4")
    assert not ok and note is not None and "no FP4 kernels" in note
    model = small.model("meta-llama/Llama-3.1-8B-Instruct")
    amd = enumerate_layouts(
        small, model, instances=["ND_MI300X_v5"], max_nodes=1, precisions=("fp4",)
    )
    assert amd and all(not c.feasible and "no FP4 kernels" in (c.reason or "") for c in amd)
    a10g = enumerate_layouts(
        small,
        model,
        instances=["g5.2xlarge"],
        max_nodes=1,
        precisions=("fp8", "int4"),
        engine=EngineConfig(max_model_len=8192),
    )
    assert [c.precision for c in a10g if c.feasible] == ["fp8", "int4"]
    assert a10g[0].notes and "Marlin" in a10g[0].notes[0]
    with pytest.raises(InvalidInputError, match="precision"):
        precision_support(small.gpu("L4"), "fp6")


def test_every_candidate_is_a_full_layout_and_every_rejection_says_why(small: Catalog) -> None:
    model = small.model("meta-llama/Llama-3.1-70B-Instruct")
    layouts = enumerate_layouts(
        small,
        model,
        max_nodes=2,
        precisions=("bf16", "fp8"),
        kv_cache_dtypes=("auto", "fp8"),
        engine=EngineConfig(max_model_len=8192),
    )
    assert len({c.instance for c in layouts}) == len(INSTANCE_ROWS)
    for c in layouts:
        assert c.tp * c.pp * c.dp == c.gpus == c.nodes * small.instance(c.instance).gpus
        assert c.feasible == (c.reason is None)
        if not c.feasible:
            assert len(c.reason or "") > 20
    assert any(c.feasible for c in layouts)


def test_unknown_instance_or_model(small: Catalog) -> None:
    model = small.model("meta-llama/Llama-3.1-8B-Instruct")
    with pytest.raises(UnknownEntityError, match=r"instance='g9\.huge'"):
        enumerate_layouts(small, model, instances=["g9.huge"])
    with pytest.raises(UnknownEntityError, match="model"):
        small.model("nobody/nothing")
    with pytest.raises(UnknownEntityError, match=r"gpu='Z100' is not allowed: one of A10G"):
        small.gpu("Z100")
    with pytest.raises(InvalidInputError, match="max_nodes"):
        enumerate_layouts(small, model, max_nodes=0)


def test_check_layout_raises_typed_errors(small: Catalog) -> None:
    model = small.model("meta-llama/Llama-3.1-70B-Instruct")
    check_layout(model, 4, 1, gpus=8, gpus_per_instance=4)
    with pytest.raises(InvalidInputError) as info:
        check_layout(model, 3)
    assert info.value.field == "tp" and "64 attention heads" in str(info.value)
    with pytest.raises(InvalidInputError, match="one instance"):
        check_layout(model, 8, gpus_per_instance=4)
    with pytest.raises(InvalidInputError, match=r"tp x pp=8 is not allowed"):
        check_layout(model, 4, 2, gpus=12)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    model_id=st.sampled_from(
        [
            "meta-llama/Llama-3.1-70B-Instruct",
            "meta-llama/Llama-3.1-8B-Instruct",
            "Qwen/Qwen2.5-7B-Instruct",
        ]
    ),
    instance=st.sampled_from([row[1] for row in INSTANCE_ROWS]),
    nodes=st.integers(1, 3),
    util=st.floats(0.5, 0.97),
    max_len=st.integers(256, 65_536),
    precision=st.sampled_from(["bf16", "fp8", "int4"]),
)
def test_a_feasible_layout_always_fits_in_memory(
    small: Catalog,
    model_id: str,
    instance: str,
    nodes: int,
    util: float,
    max_len: int,
    precision: str,
) -> None:
    layouts = enumerate_layouts(
        small,
        small.model(model_id),
        instances=[instance],
        nodes=[nodes],
        precisions=(precision,),
        engine=EngineConfig(max_model_len=max_len, gpu_memory_utilization=util),
    )
    for c in layouts:
        assert c.tp * c.pp * c.dp == c.gpus
        if not c.feasible:
            continue
        plan = c.memory
        assert plan is not None
        for stage in plan.stages:
            in_budget = (
                stage.weights_bytes + stage.activation_bytes + plan.non_torch_bytes + stage.kv_bytes
            )
            assert in_budget <= plan.budget_bytes * (1 + 1e-9)
            assert stage.kv_blocks * 16 * stage.kv_bytes_per_token <= stage.kv_bytes
        assert plan.budget_bytes + plan.framework_overhead_bytes <= plan.cuda_visible_bytes
        assert plan.kv_capacity_tokens >= max_len


# ----- the embedded catalog ----------------------------------------------------------------------


def test_embedded_catalog_70b_on_g6e_12xlarge(catalog: Catalog) -> None:
    if "g6e.12xlarge" not in catalog.instances:
        pytest.skip("data/instances.csv does not list g6e.12xlarge yet")
    model = catalog.model("meta-llama/Llama-3.1-70B-Instruct")
    shapes = by_shape(
        enumerate_layouts(
            catalog,
            model,
            instances=["g6e.12xlarge"],
            max_nodes=1,
            engine=EngineConfig(max_model_len=4096),
        )
    )
    assert shapes[(4, 1)].feasible
    assert not shapes[(1, 1)].feasible and not shapes[(2, 1)].feasible
    tp4 = shapes[(4, 1)].memory
    assert tp4 is not None and abs(tp4.kv_capacity_tokens - 71_300) / 71_300 < 0.10
    tp8 = evaluate_layout(
        model,
        catalog.instance("g6e.12xlarge"),
        catalog.gpu("L40S"),
        tp=8,
        engine=EngineConfig(max_model_len=4096),
    )
    assert not tp8.feasible and "has 4" in (tp8.reason or "")


# ----- expert and attention data parallelism ----------------------------------------------------
def test_moe_layouts_are_enumerated_with_reasons(catalog: Catalog) -> None:
    from planner.layouts import evaluate_layout

    deepseek = catalog.model("deepseek-ai/DeepSeek-R1-0528")
    p5e = catalog.instance("p5e.48xlarge")
    h200 = catalog.gpu(p5e.gpu_id)
    layouts = enumerate_layouts(
        catalog, deepseek, instances=["p5e.48xlarge"], max_nodes=1, precisions=("fp8",)
    )
    shapes = {(c.tp, c.pp, c.attention_dp, c.expert_parallel) for c in layouts}
    # TP8 with experts sliced, TP8 with whole experts, attention DP over 8 ranks with EP
    assert {(8, 1, 1, False), (8, 1, 1, True), (1, 1, 8, True)} <= shapes
    dep8 = next(c for c in layouts if (c.tp, c.pp, c.attention_dp) == (1, 1, 8))
    assert dep8.feasible and dep8.dp == 1 and dep8.gpus_per_replica == 8
    assert dep8.moe_label == " DP-attention 8 EP"
    assert dep8.memory is not None and dep8.memory.kv_capacity_tokens > 0
    # a dense model has no MoE layers to share
    llama = catalog.model("meta-llama/Llama-3.1-70B-Instruct")
    dense = evaluate_layout(llama, p5e, h200, tp=1, engine=EngineConfig(data_parallel_size=8))
    assert not dense.feasible and "needs an MoE model" in (dense.reason or "")
    assert all(
        not c.expert_parallel and c.attention_dp == 1
        for c in enumerate_layouts(catalog, llama, instances=["p5e.48xlarge"], max_nodes=1)
    )
    # the expert-parallel size (TP x DP) must divide the experts
    from planner.layouts import _moe_layout_problem

    mixtral = catalog.model("mistralai/Mixtral-8x7B-v0.1").architecture
    assert _moe_layout_problem(mixtral, 2, 4, True) is None  # 8 experts over 8 GPUs
    reason = _moe_layout_problem(mixtral, 2, 3, True)
    assert reason is not None and "does not divide the 8 experts" in reason
    glm = catalog.model("zai-org/GLM-4.6")
    dp8 = evaluate_layout(
        glm,
        p5e,
        h200,
        tp=1,
        precision="fp8",
        engine=EngineConfig(data_parallel_size=8, enable_expert_parallel=True, max_model_len=8192),
    )
    assert dp8.feasible, dp8.reason  # 160 experts = 8 x 20


def test_dp_attention_keeps_only_its_requests_kv_and_raises_mla_capacity(catalog: Catalog) -> None:
    from planner.layouts import evaluate_layout

    deepseek = catalog.model("deepseek-ai/DeepSeek-R1-0528")
    p5e = catalog.instance("p5e.48xlarge")
    h200 = catalog.gpu(p5e.gpu_id)
    tp8 = evaluate_layout(deepseek, p5e, h200, tp=8, precision="fp8")
    dp8 = evaluate_layout(
        deepseek,
        p5e,
        h200,
        tp=1,
        precision="fp8",
        engine=EngineConfig(data_parallel_size=8, enable_expert_parallel=True),
    )
    assert tp8.memory is not None and dp8.memory is not None
    # TP=8 replicates the MLA latent on every GPU; 8 DP ranks each hold their own requests'
    tp8_tokens = tp8.memory.kv_capacity_tokens
    dp8_tokens = 8 * dp8.memory.kv_capacity_tokens  # one rank's pool, eight ranks
    assert dp8_tokens > 4 * tp8_tokens
