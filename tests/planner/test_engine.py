"""Engine settings: one typed object, the engines' defaults per GPU, errors that name the field."""

from __future__ import annotations

import pytest

from planner.catalog import Catalog, load_catalog
from planner.engine import EngineConfig, engine_defaults
from planner.errors import InvalidInputError


@pytest.fixture(scope="module")
def gpus() -> dict[str, object]:
    return dict(load_catalog().gpus)


def test_vllm_serve_defaults_follow_the_gpu(gpus: dict) -> None:
    # vllm/engine/arg_utils.py: >= 70 GiB and not an A100 -> 1024 / 8192, else 256 / 2048
    h100 = engine_defaults("vllm", gpus["H100-SXM"])
    l40s = engine_defaults("vllm", gpus["L40S"])
    a100 = engine_defaults("vllm", gpus["A100-80GB-SXM"])
    assert (h100.max_num_seqs, h100.max_num_batched_tokens) == (1024, 8192)
    assert (l40s.max_num_seqs, l40s.max_num_batched_tokens) == (256, 2048)
    assert (a100.max_num_seqs, a100.max_num_batched_tokens) == (256, 2048)
    assert h100.gpu_memory_utilization == 0.9 and h100.block_size == 16
    assert h100.enable_chunked_prefill and not h100.enable_prefix_caching
    assert h100.is_resolved and h100.max_model_len is None


def test_offline_class_and_trtllm_defaults(gpus: dict) -> None:
    offline = engine_defaults("vllm", gpus["L40S"], entrypoint="offline")
    assert (offline.max_num_seqs, offline.max_num_batched_tokens) == (256, 8192)
    big = engine_defaults("vllm", gpus["H100-SXM"], entrypoint="offline")
    assert big.max_num_batched_tokens == 16384
    trt = engine_defaults("nim-tensorrt-llm", gpus["H100-SXM"])
    assert (trt.max_num_seqs, trt.max_num_batched_tokens, trt.block_size) == (2048, 8192, 32)
    assert trt.family == "trtllm"
    # context chunking: off in TensorRT-LLM's server (LLM API default), on in trtllm-bench
    assert not trt.enable_chunked_prefill
    assert engine_defaults(
        "tensorrt-llm", gpus["H100-SXM"], entrypoint="offline"
    ).enable_chunked_prefill
    assert (
        EngineConfig(engine="tensorrt-llm").resolved(gpus["H100-SXM"]).enable_chunked_prefill
        is False
    )
    asked = EngineConfig(engine="tensorrt-llm", enable_chunked_prefill=True)
    assert asked.resolved(gpus["H100-SXM"]).enable_chunked_prefill
    # the server's options file asks for chunking only when the plan does
    from planner.trtllm_command import TrtllmServeConfig, trtllm_extra_options

    served = TrtllmServeConfig(model="m", engine=EngineConfig(engine="tensorrt-llm"))
    assert "enable_chunked_prefill" not in trtllm_extra_options(served)
    chunked = served.model_copy(update={"engine": asked.resolved(gpus["H100-SXM"])})
    assert trtllm_extra_options(chunked)["enable_chunked_prefill"] is True


def test_resolved_keeps_what_is_stated(gpus: dict) -> None:
    stated = EngineConfig(max_num_seqs=64, gpu_memory_utilization=0.8, kv_cache_dtype="fp8")
    resolved = stated.resolved(gpus["H100-SXM"])
    assert resolved.max_num_seqs == 64 and resolved.max_num_batched_tokens == 8192
    assert resolved.gpu_memory_utilization == 0.8 and resolved.kv_bytes_per_element == 1.0
    assert resolved.resolved(gpus["L40S"]) is resolved  # nothing left to fill in


def test_an_engine_config_round_trips_through_json() -> None:
    config = EngineConfig(
        engine="sglang",
        version="0.4.6",
        max_num_seqs=128,
        max_model_len=2560,
        enable_expert_parallel=True,
        data_parallel_size=4,
    )
    assert EngineConfig.model_validate(config.model_dump(mode="json")) == config
    assert "expert parallel" in config.label and "attention DP 4" in config.label
    # async scheduling shows only where stated against the release's default
    assert "async" not in EngineConfig().label
    assert EngineConfig(async_scheduling=False).label.endswith(", no async scheduling")
    assert EngineConfig(async_scheduling=True).label.endswith(", async scheduling")


@pytest.mark.parametrize(
    ("values", "field", "allowed"),
    [
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization", "a fraction in (0, 1]"),
        ({"max_num_seqs": 0}, "max_num_seqs", "an integer >= 1"),
        ({"data_parallel_size": 0}, "data_parallel_size", "an integer >= 1"),
        ({"kv_cache_dtype": "int2"}, "kv_cache_dtype", "one of auto, bf16"),
        ({"engine": "tgi"}, "engine", "one of nim, nim-tensorrt-llm, sglang"),
        ({"max_num_sequences": 8}, "max_num_sequences", "Extra inputs are not permitted"),
        ({"async_scheduling": "sometimes"}, "async_scheduling", "true or false"),
    ],
)
def test_bad_settings_name_the_field_the_value_and_what_is_allowed(
    values: dict, field: str, allowed: str
) -> None:
    with pytest.raises(InvalidInputError) as info:
        EngineConfig.of(**values)
    assert info.value.field == field
    assert allowed in str(info.value) and repr(next(iter(values.values()))) in str(info.value)


def test_only_tensorrt_llm_is_served_by_triton() -> None:
    """``triton`` names Triton's TensorRT-LLM backend; a vLLM or SGLang config with it is
    refused, naming the field, the value and what is allowed."""
    assert EngineConfig.of(engine="tensorrt-llm", entrypoint="triton").entrypoint == "triton"
    for engine in ("vllm", "sglang"):
        with pytest.raises(InvalidInputError) as raised:
            EngineConfig.of(engine=engine, entrypoint="triton")
        assert raised.value.field == "entrypoint"
        assert raised.value.value == "triton"
        assert "tensorrt-llm only" in raised.value.allowed


def test_sglang_reserves_more_for_a_draft_head_and_large_dp_attention_graphs(
    gpus: dict,
) -> None:
    """SGLang's default ``mem_fraction_static`` (0.5.3-0.5.9 ``_handle_gpu_memory_settings``):
    on an H200 at TP 8 the reserve is 512 + 1.5 x 8192 + 2 x 512 + 1024 MiB = 14,848 MiB; a
    draft head (EAGLE, MTP) adds 2 GiB after the 10 GiB floor; DP attention over 8 ranks adds
    3 x 512 x 8 MiB, and 1.5 x 512 x 8 MiB more since the graph batch (512) is over 300."""
    from planner.engine import sglang_defaults

    h200 = gpus["H200"]
    mem = h200.memory_bytes / 2**20

    def fraction(reserved: float) -> float:
        return round((mem - reserved) / mem, 3)

    plain = sglang_defaults(h200, tp=8)
    assert plain.cuda_graph_max_bs == 512
    assert plain.mem_fraction_static == fraction(512 + 1.5 * 8192 + 2 * 512 + 1024)
    drafting = sglang_defaults(h200, tp=8, spec_method="mtp", release=(0, 5, 9))
    assert drafting.mem_fraction_static == fraction(512 + 1.5 * 8192 + 2 * 512 + 1024 + 2048)
    dp8 = sglang_defaults(h200, 8, tp=8)
    dp_reserve = 512 + 1.5 * 8192 + 2 * 512 + 1024 + 3 * 512 * 8 + 1.5 * 512 * 8
    assert dp8.mem_fraction_static == fraction(dp_reserve)
    # a small GPU's graph batch (80 at TP 4 under 35 GiB) stays under 300: no extra reserve
    l4 = gpus["L4"]
    small = sglang_defaults(l4, 2, tp=4)
    l4_mem = l4.memory_bytes / 2**20
    assert small.cuda_graph_max_bs == 80
    reserve = 512 + 1.5 * 2048 + 2 * 80 + 4 / 8 * 1024 + 3 * 80 * 2
    assert small.mem_fraction_static == round((l4_mem - reserve) / l4_mem, 3)


def test_sglang_0_5_10_reserves_for_its_prefill_graphs_and_twice_for_a_draft_head(
    gpus: dict, catalog: Catalog
) -> None:
    """From 0.5.10 (``_handle_gpu_memory_settings`` in the 0.5.10rc0 and 0.5.10.post1 wheels) a
    server whose prefill steps run under piecewise CUDA graphs reserves 1.5 GiB more for an MLA
    model, else 8 MiB per captured size, and a draft head reserves 4 GiB, not 2."""
    from planner.engine import sglang_defaults, sglang_piecewise_capture_sizes
    from planner.perf.deployment import resolve_deployment
    from planner.perf.scenario import Scenario

    # SGLang's list: 8 sizes to 32, 14 to 256, 8 to 512, 8 to 1,024, 12 to 4,096, then per 512
    assert len(sglang_piecewise_capture_sizes(2048)) == 8 + 14 + 8 + 8 + 4
    assert len(sglang_piecewise_capture_sizes(8192)) == 8 + 14 + 8 + 8 + 12 + 8
    assert sglang_piecewise_capture_sizes(16384)[-3:] == [15360, 15872, 16384]
    b200, h100 = gpus["B200"], gpus["H100-SXM"]
    b200_mem, h100_mem = b200.memory_bytes / 2**20, h100.memory_bytes / 2**20
    base = 512 + 1.5 * 16384 + 2 * 512 + 1024  # TP 8 on a B200: 27,136 MiB

    def b200_fraction(reserved: float) -> float:
        return round((b200_mem - reserved) / b200_mem, 3)

    old = sglang_defaults(b200, tp=8, release=(0, 5, 9), prefill_graph_tokens=2048, mla=True)
    assert old.mem_fraction_static == b200_fraction(base)
    for release in ((0, 5, 10), None):  # and the pinned release
        mla = sglang_defaults(b200, tp=8, release=release, prefill_graph_tokens=2048, mla=True)
        assert mla.mem_fraction_static == b200_fraction(base + 1536)
    gqa = sglang_defaults(b200, tp=8, release=(0, 5, 10), prefill_graph_tokens=16384)
    assert gqa.mem_fraction_static == b200_fraction(base + 8 * (58 + 16))
    off = sglang_defaults(b200, tp=8, release=(0, 5, 10), prefill_graph_tokens=None, mla=True)
    assert off.mem_fraction_static == b200_fraction(base)
    h100_base = 512 + 1.5 * 8192 + 2 * 512 + 1024
    for release, draft in (((0, 5, 9), 2048), ((0, 5, 10), 4096)):
        drafting = sglang_defaults(h100, tp=8, spec_method="eagle3", release=release)
        assert drafting.mem_fraction_static == round((h100_mem - h100_base - draft) / h100_mem, 3)

    # a deployment takes it: DeepSeek-R1 (MLA) on 8 x B200 keeps 0.852 on 0.5.9, 0.844 on
    # 0.5.10; with MTP there are no prefill graphs, and the draft head's reserve doubles
    scenario = Scenario(
        engine="sglang", model="deepseek-ai/DeepSeek-R1", gpu="B200", tp=8, precision="fp8",
        input_len=1000, output_len=1000, concurrency=16,
    )  # fmt: skip
    shares = {
        (version, spec): resolve_deployment(
            scenario.model_copy(update={"engine_version": version, "spec_method": spec}),
            catalog,
        ).engine.gpu_memory_utilization
        for version in ("0.5.9", "0.5.10")
        for spec in ("none", "mtp")
    }
    assert shares[("0.5.9", "none")] == b200_fraction(base) == 0.852
    assert shares[("0.5.10", "none")] == b200_fraction(base + 1536) == 0.844
    assert shares[("0.5.9", "mtp")] == b200_fraction(base + 2048)
    assert shares[("0.5.10", "mtp")] == b200_fraction(base + 4096)


def test_sglang_releases_before_0_5_3_keep_their_own_memory_and_graph_defaults(gpus):
    """Read in the wheels (planner.engine._sglang_defaults_before_0_5_3): up to 0.4.5 a share
    by --tp-size (0.81 at 8) on every GPU, chunked prefill 8,192 and decode graphs up to 160;
    0.4.8 to 0.5.2 a fixed reserve by memory tier ((12 + TP x PP / 2) GiB on an H200, 32 GiB
    on a B200 or an MI300X), 2 GiB more when speculating, 4 GiB more with DP attention,
    graphs up to 256 over 90 GiB and 512 over 160,000 MiB; 0.4.7 its own mix. A release
    without a number is the pinned one, which uses the 0.5.3 formula."""
    from planner.engine import engine_defaults, sglang_defaults

    h200, b200, mi300x = gpus["H200"], gpus["B200"], gpus["MI300X"]
    h200_mem = h200.memory_bytes / 2**20
    current = sglang_defaults(h200, tp=8)
    assert sglang_defaults(h200, tp=8, release=(0, 5, 3)) == current

    early = sglang_defaults(h200, tp=8, release=(0, 4, 3))
    assert early.mem_fraction_static == 0.81
    assert (early.chunked_prefill_size, early.cuda_graph_max_bs) == (8192, 160)
    assert sglang_defaults(mi300x, tp=4, release=(0, 4, 2)).mem_fraction_static == 0.85

    tiered = sglang_defaults(h200, tp=8, release=(0, 5, 2))
    assert tiered.mem_fraction_static == round((h200_mem - 16 * 1024) / h200_mem, 3)
    assert tiered.cuda_graph_max_bs == 256
    drafting = sglang_defaults(h200, tp=8, spec_method="mtp", release=(0, 5, 2))
    assert drafting.mem_fraction_static == round((h200_mem - 18 * 1024) / h200_mem, 3)
    dp8 = sglang_defaults(h200, 8, tp=8, release=(0, 4, 10))
    assert dp8.mem_fraction_static == round((h200_mem - 20 * 1024) / h200_mem, 3)
    mi300x_mem = mi300x.memory_bytes / 2**20
    old_amd = sglang_defaults(mi300x, tp=8, release=(0, 4, 10))
    assert old_amd.mem_fraction_static == round((mi300x_mem - 32 * 1024) / mi300x_mem, 3)
    assert (old_amd.chunked_prefill_size, old_amd.cuda_graph_max_bs) == (16384, 512)
    # 0.4.7: 0.79 over 180,000 MiB on CUDA; an H200 keeps min(0.88 + 48 GiB x 0.12 / memory,
    # (memory - 18 GiB) / memory)
    assert sglang_defaults(b200, tp=8, release=(0, 4, 7)).mem_fraction_static == 0.79
    assert sglang_defaults(h200, tp=8, release=(0, 4, 7)).mem_fraction_static == round(
        (h200_mem - 18 * 1024) / h200_mem, 3
    )

    # the engine's resolved config follows its release's chunked prefill
    assert engine_defaults("sglang", mi300x).max_num_batched_tokens == 16384
    old = engine_defaults("sglang", mi300x, version="0.4.2.post4 (rocm/sglang-staging:20250212)")
    assert old.max_num_batched_tokens == 8192


def test_sglang_runs_up_to_its_request_pool_which_a_large_kv_cache_raises_to_4096() -> None:
    """SGLang's request pool (``ModelRunner.init_memory_pool`` 0.5.9, ``_resolve_max_num_reqs``
    0.5.10): int(KV tokens / context length x 512) held between 2,048 and 4,096; from 0.5.10
    an unset pool is at most half the KV tokens and a stated ``--max-running-requests`` at most
    the pool."""
    from planner.engine import sglang_request_pool

    # MiniMax-M2.7 on 8 x MI300X with an FP8 cache: ~7.4 M tokens for a 196,608-token context
    assert sglang_request_pool(7_367_120, 196_608, stated=None, release=(0, 5, 13)) == 4096
    # DeepSeek-R1 on 8 x B200: 1.07 M tokens for 163,840: int(3,334.9)
    assert sglang_request_pool(1_067_136, 163_840, stated=None, release=(0, 5, 6)) == 3334
    # a small cache keeps the pool's lower bound, and from 0.5.10 half its tokens at most
    assert sglang_request_pool(100_000, 131_072, stated=None, release=(0, 5, 9)) == 2048
    assert sglang_request_pool(3_000, 131_072, stated=None, release=(0, 5, 9)) == 2048
    assert sglang_request_pool(3_000, 131_072, stated=None, release=(0, 5, 10)) == 1500
    assert sglang_request_pool(3_000, 131_072, stated=None, release=None) == 1500  # pinned
    # a stated value stands through 0.5.9 and is held to the pool from 0.5.10
    assert sglang_request_pool(100_000, 131_072, stated=8192, release=(0, 5, 9)) == 8192
    assert sglang_request_pool(100_000, 131_072, stated=8192, release=(0, 5, 10)) == 2048
    assert sglang_request_pool(100_000, 131_072, stated=64, release=(0, 5, 10)) == 64
    # no context length known: the lower bound
    assert sglang_request_pool(7_367_120, None, stated=None, release=(0, 5, 9)) == 2048


def test_a_deployment_takes_sglangs_request_pool(catalog: Catalog) -> None:
    """The deployment's running-request cap is the pool its KV cache gives SGLang (4,096 for
    MiniMax-M2.5 on 8 x B200), not the pool's lower bound; a speculating server keeps its own
    cap, and vLLM its ``max_num_seqs``."""
    from planner.perf.deployment import resolve_deployment
    from planner.perf.scenario import Scenario

    base = {
        "model": "MiniMaxAI/MiniMax-M2.5",
        "gpu": "B200",
        "tp": 8,
        "precision": "fp8",
        "input_len": 500,
        "output_len": 500,
        "concurrency": 4096,
    }
    sglang = resolve_deployment(Scenario(engine="sglang", engine_version="0.5.8", **base), catalog)
    assert sglang.max_num_seqs == sglang.engine.max_num_seqs == 4096
    vllm = resolve_deployment(Scenario(engine="vllm", engine_version="0.19.0", **base), catalog)
    assert vllm.max_num_seqs == 1024
