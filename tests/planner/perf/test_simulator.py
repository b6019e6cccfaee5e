"""The continuous-batching simulation: exact step accounting, schedulers, loads, metrics."""

from __future__ import annotations

import bisect
import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.catalog import Catalog, load_catalog
from planner.perf.deployment import Deployment, resolve_deployment
from planner.perf.metrics import run_metrics, weighted_percentile
from planner.perf.scenario import Scenario, TraceRequest, dataset_lengths
from planner.perf.simulator import FRONT_END_SPACING, LiveEngine, request_arrivals, simulate
from planner.perf.step_time import (
    FORWARD_UNIT_S,
    IDX,
    StepBatch,
    full_coefficients,
    step_time_s,
)
from planner.workload import LengthDistribution

#: a coefficient per fitted term, in the order of step_time.FITTED
FITTED_COEFFICIENTS = [
    1.0,
    0.25,
    0.4,
    0.5,
    0.3,
    0.3,  # an FP8 cache's reads: as a 16-bit one's
    1.0,
    0.5,
    0.6,
    1.4,
    1.5,
    1.3,
    1.5,
    3,
    11,
    1.5,  # a fused all-reduce call: as a plain NVLink call
    1,
    1.2,
    1,
]
#: ... then layers, MoE layers, the layer floor (0: these worked numbers predate it), forward
#: passes, draft passes, sequences, the host's share under async scheduling, the eager floor
#: (0, likewise), the request path (5 x 10 ms) and its share that grows with the GPU processes
#: (0, likewise)
STEP_TAIL = (1.2, 1.0, 0.0, 1.6, 0.5, 0.15, 0.1, 0.0, 5.0, 0.0)
C = full_coefficients(np.array([*FITTED_COEFFICIENTS, *STEP_TAIL]))


def _scenario(**kw: object) -> Scenario:
    base: dict[str, object] = {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "gpu": "H100-SXM",
        "input_len": 100,
        "output_len": 50,
        "load": "concurrency",
        "concurrency": 1,
        "num_requests": 3,
        # these worked numbers count the host's per-step terms of a synchronous scheduler
        "async_scheduling": False,
    }
    base.update(kw)
    return Scenario(**base)


def test_closed_loop_of_one_counts_every_step_exactly(catalog: Catalog) -> None:
    dep = resolve_deployment(_scenario(), catalog)
    trace = simulate(dep)
    # each request: one prefill step (which samples its first token) + 49 decode steps
    assert trace.steps == 3 * 50
    assert trace.end[IDX["forward_passes"]] == pytest.approx(150 * 1e-3)
    # decode runs are advanced in bulk; linear terms must still be exact:
    # per request KV tokens read = 100 (prefill) + sum_{j=1..49} (100 + j)
    kv_tokens = 3 * (100 + sum(100 + j for j in range(1, 50)))
    assert trace.end[IDX["kv_read"]] == pytest.approx(kv_tokens * 131072 / 3.35e12, rel=1e-12)
    m = run_metrics(trace, C, 1)
    prefill = step_time_s(StepBatch.of(prefill_chunks=[(100, 0)]), dep, C)
    # the prefill step and a served request's path to its first token (5 x 10 ms in C)
    assert m.ttft_ms("p50") == pytest.approx(prefill * 1e3 + 50.0, rel=1e-9)
    assert trace.output_tokens == 150 and trace.requests == 3
    assert m.output_tok_per_s == pytest.approx(150 / m.duration_s)


def test_vllm_preempts_when_blocks_run_out_and_trtllm_never_does(catalog: Catalog) -> None:
    kw = {
        "model": "meta-llama/Llama-3.1-70B-Instruct",
        "gpu": "L40S",
        "tp": 4,
        "input_len": 2048,
        "output_len": 2048,
        "concurrency": 64,
        "num_requests": 64,
    }
    vllm = simulate(resolve_deployment(_scenario(instance="g6e.12xlarge", **kw), catalog))
    assert vllm.preemptions > 0
    assert vllm.kv_max > 0.95
    assert vllm.output_tokens == 64 * 2048  # every request still completes
    trt = simulate(
        resolve_deployment(_scenario(engine="tensorrt-llm", precision="fp8", **kw), catalog)
    )
    assert trt.preemptions == 0
    assert trt.output_tokens == 64 * 2048


def test_max_num_seqs_caps_the_running_batch(catalog: Catalog) -> None:
    dep = resolve_deployment(
        _scenario(concurrency=64, num_requests=256, max_num_seqs=16, output_len=200), catalog
    )
    m = run_metrics(simulate(dep), C, 1)
    assert 12 < m.mean_running_batch <= 16.0001
    # the other 48 queue: their TTFT includes waiting for a slot
    assert m.ttft_ms("p50") > 10 * m.tpot_ms("p50")


def test_chunked_prefill_splits_long_prompts_over_the_token_budget(catalog: Catalog) -> None:
    dep = resolve_deployment(
        _scenario(input_len=20000, output_len=2, max_num_batched_tokens=2048), catalog
    )
    trace = simulate(dep)
    # ceil(20000 / 2048) = 10 prefill steps, then one decode step, per request
    assert trace.steps == 3 * 11


def test_without_chunked_prefill_a_long_prompt_stalls_the_running_decodes(
    catalog: Catalog,
) -> None:
    # vLLM without chunked prefill: max_num_batched_tokens >= max_model_len, so a 16,000-token
    # prompt is prefilled in one step next to the decodes, which all wait for it
    lengths = LengthDistribution.empirical([256, 16000], [19, 1])
    kw = {"input_len": None, "input_dist": lengths, "output_len": 128, "concurrency": 32,
          "num_requests": 160}  # fmt: skip
    off = resolve_deployment(_scenario(enable_chunked_prefill=False, **kw), catalog)
    assert off.max_num_batched_tokens >= 16000 + 128
    on = resolve_deployment(_scenario(max_num_batched_tokens=2048, **kw), catalog)
    step = step_time_s(StepBatch.of([400] * 31, [(16000, 0)]), off, C)
    stalled = run_metrics(simulate(off), C, 1)
    chunked = run_metrics(simulate(on), C, 1)
    assert stalled.itl_s.max() == pytest.approx(step, rel=0.1)
    assert chunked.itl_s.max() < 0.5 * stalled.itl_s.max()


def test_poisson_rate_idles_between_sparse_requests(catalog: Catalog) -> None:
    dep = resolve_deployment(_scenario(load="rate", request_rate=0.05, num_requests=20), catalog)
    trace = simulate(dep, C)
    assert trace.time_driven and trace.end[IDX["idle"]] > 100  # mostly waiting for work
    m = run_metrics(trace, C, 1)
    prefill = step_time_s(StepBatch.of(prefill_chunks=[(100, 0)]), dep, C)
    # its prefill alone and the request's path (5 x 10 ms in C)
    assert m.ttft_ms("p50") == pytest.approx(prefill * 1e3 + 50.0, rel=0.05)


def test_bursty_arrivals_raise_tail_ttft(catalog: Catalog) -> None:
    kw = {
        "load": "rate",
        "request_rate": 8.0,
        "num_requests": 400,
        "input_len": 2000,
        "output_len": 200,
    }
    poisson = run_metrics(simulate(resolve_deployment(_scenario(**kw), catalog), C), C, 1)
    bursty = run_metrics(
        simulate(resolve_deployment(_scenario(burstiness_cv=4.0, **kw), catalog), C), C, 1
    )
    assert bursty.ttft_ms("p99") > 1.5 * poisson.ttft_ms("p99")


def test_prefix_caching_only_speeds_up_prefill(catalog: Catalog) -> None:
    kw = {"input_len": 4000, "output_len": 100, "concurrency": 4, "num_requests": 40}
    plain = run_metrics(simulate(resolve_deployment(_scenario(**kw), catalog)), C, 1)
    cached = run_metrics(
        simulate(
            resolve_deployment(
                _scenario(enable_prefix_caching=True, prefix_share=0.9, **kw), catalog
            )
        ),
        C,
        1,
    )
    assert cached.ttft_ms("mean") < 0.5 * plain.ttft_ms("mean")
    assert cached.tpot_ms("mean") <= plain.tpot_ms("mean") * 1.01


def test_trace_replay_and_length_distributions(catalog: Catalog) -> None:
    trace_reqs = tuple(
        TraceRequest(arrival_s=0.5 * i, input_len=100 + 10 * i, output_len=20 + i)
        for i in range(30)
    )
    dep = resolve_deployment(
        _scenario(load="trace", trace=trace_reqs, input_len=None, output_len=None), catalog
    )
    trace = simulate(dep, C)
    assert trace.requests == 30
    assert trace.output_tokens == sum(r.output_len for r in trace_reqs)
    dist = LengthDistribution.uniform(50, 150)
    dep = resolve_deployment(
        _scenario(output_len=None, output_dist=dist, concurrency=8, num_requests=400), catalog
    )
    sim = simulate(dep)
    assert sim.output_tokens / sim.requests == pytest.approx(dist.mean(), rel=0.05)


def test_a_closed_loop_of_uniform_lengths_does_not_arrive_in_bursts(catalog: Catalog) -> None:
    """SGLang bench_serving's uniform lengths are drawn as it draws them, not as a handful of
    binned lengths: requests of one answer length finish in one step, and in a closed loop their
    successors then arrive together and queue for one prefill batch after another (nine bins:
    13 requests arrived in one step of this run)."""
    scenario = Scenario(
        engine="sglang",
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpu="H100-SXM",
        load="concurrency",
        concurrency=64,
        num_requests=320,
        **dataset_lengths("uniform", 1000, 200),
    )
    trace = simulate(resolve_deployment(scenario, catalog))
    assert len(np.unique(trace.output_len)) > 100
    # requests arriving in each step after the first wave's (step 0)
    steps = np.round(np.asarray(trace.arrival)[:, IDX["forward_passes"]] / FORWARD_UNIT_S)
    later = steps > 0
    _, step_of = np.unique(steps[later], return_inverse=True)
    arrivals = np.bincount(step_of, weights=np.asarray(trace.count)[later])
    assert arrivals.sum() == 320 - 64
    assert arrivals.max() <= 4


#: an SGLang closed loop of 64 on one H100
SGLANG_LOOP_OF_64: dict[str, object] = {
    "engine": "sglang",
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "gpu": "H100-SXM",
    "load": "concurrency",
    "concurrency": 64,
}


def test_a_closed_loop_of_fixed_lengths_queues_in_waves_and_a_range_ratio_dissolves_them(
    catalog: Catalog,
) -> None:
    """Every answer of one length: the requests that started together finish together, and
    their successors queue behind one another's prefills wave after wave (SGLang runs a
    waiting prefill before the running decode). Drawn within 5% of the stated lengths (vLLM
    bench's --random-range-ratio 0.05), the answers end in different steps and a successor
    waits for little more than its own prefill, while the first wave, which arrives at once
    either way, keeps the p99."""
    base = {**SGLANG_LOOP_OF_64, "num_requests": 640, "max_num_batched_tokens": 8192}
    runs = {}
    for ratio in (None, 0.05):
        scenario = Scenario(**base, **dataset_lengths("random", 1024, 256, ratio))
        runs[ratio] = run_metrics(simulate(resolve_deployment(scenario, catalog), C), C, 1)
    fixed, spread = runs[None], runs[0.05]
    assert fixed.ttft_ms("mean") > 2.5 * spread.ttft_ms("mean")
    assert spread.ttft_ms("p99") == pytest.approx(fixed.ttft_ms("p99"), rel=0.15)


def test_data_parallel_replicas_share_the_load(catalog: Catalog) -> None:
    kw = {
        "load": "offline_batch",
        "concurrency": 64,
        "num_requests": 64,
        "input_len": 512,
        "output_len": 256,
    }
    one = run_metrics(simulate(resolve_deployment(_scenario(**kw), catalog)), C, 1)
    dep2 = resolve_deployment(
        _scenario(num_gpus=2, **{**kw, "num_requests": 128, "concurrency": 128}), catalog
    )
    two = run_metrics(simulate(dep2), C, dep2.replicas)
    assert dep2.replicas == 2
    assert two.output_tok_per_s == pytest.approx(2 * one.output_tok_per_s, rel=1e-9)


def test_weighted_percentile_matches_numpy_linear() -> None:
    rng = np.random.default_rng(1)
    values = rng.random(17)
    counts = rng.integers(1, 5, size=17)
    expanded = np.repeat(values, counts)
    for q in (0, 10, 50, 90, 99, 100):
        assert weighted_percentile(values, counts.astype(float), q) == pytest.approx(
            np.percentile(expanded, q)
        )


def test_sglang_prefills_before_it_decodes(catalog: Catalog) -> None:
    """SGLang runs a prefill batch whenever a request can be admitted (decodes wait); vLLM
    mixes the prompt chunks into the decode steps."""
    base = {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "gpu": "H100-SXM",
        "input_len": 4000,
        "output_len": 64,
        "load": "max_throughput",
        "num_requests": 40,
    }
    sglang = resolve_deployment(Scenario(engine="sglang", **base), catalog)
    # the same per-step host cost for both (C prices vLLM's async scheduling's far lower), so
    # what differs is the order of prefills and decodes
    vllm = resolve_deployment(Scenario(engine="vllm", async_scheduling=False, **base), catalog)
    assert sglang.max_num_batched_tokens == 8192  # chunked_prefill_size on an 80 GB GPU
    assert 0.8 < sglang.engine.gpu_memory_utilization < 0.9  # mem_fraction_static
    assert sglang.engine.enable_prefix_caching  # radix cache on by default
    ts, tv = simulate(sglang), simulate(vllm)
    ms, mv = run_metrics(ts, C, 1), run_metrics(tv, C, 1)
    # prompts first: every request has its first token sooner, then decodes longer
    assert ms.ttft_ms("mean") < mv.ttft_ms("mean")
    assert ms.tpot_ms("mean") > 0 and ts.output_tokens == tv.output_tokens == 40 * 64


def test_sglang_default_fraction_too_small_for_the_weights_is_raised_to_start(
    catalog: Catalog,
) -> None:
    # DeepSeek-R1 FP8 on 4 x B200 (179.06 GiB = 192.27 GB each), 8k prompts: SGLang's default
    # reserve is 512 MiB + 1.5 x 16,384 + 2 x 512 + 4 / 8 x 1,024 = 26,624 MiB, so
    # mem_fraction_static = (183,359 - 26,624) / 183,359 = 0.855 of the 175.34 GiB (188.27 GB)
    # SGLang finds free before loading (PR #9162's log) = 161.0 GB, below the 169.7 GB of
    # weights a GPU: no KV pool, the server would not start
    from planner.sglang_command import SglangServeConfig, sglang_launch_args

    base: dict[str, object] = {
        "engine": "sglang",
        "model": "deepseek-ai/DeepSeek-R1-0528",
        "precision": "fp8",
        "gpu": "B200",
        "num_gpus": 4,
        "tp": 4,
        "input_len": 8192,
        "output_len": 1024,
        "load": "concurrency",
        "concurrency": 32,
        "num_requests": 64,
    }
    dep = resolve_deployment(Scenario(**base), catalog)
    # 169.12 GB of FP8 weights, their float32 128 x 128 block scales (0.04 GB) and the 16-bit
    # copies of kv_b_proj absorbed MLA decode keeps (0.51 GB; planner.memory)
    assert dep.weights_bytes_per_gpu / 1e9 == pytest.approx(169.67, abs=0.01)
    # raised to leave outside the pool: one chunk's hidden states (16,384 x 7,168 x 2.56 B =
    # 0.30 GB), the logits of a 512-sequence graph batch (512 x 129,280 x 38.26 B = 2.53 GB),
    # non-torch 0.59 and CUDA graphs 1.07 GB: 4.5 GB of 188.27, 0.976, capped at 0.97; pool
    # 0.97 x 188.27 - 169.67 = 12.95 GB / 70,272 B a token (MLA latent 576 x 2 B x 61 layers,
    # on every rank) = 184.3k tokens, 19 requests of 9,216
    assert dep.engine.gpu_memory_utilization == pytest.approx(0.97)
    assert dep.kv_capacity_tokens == pytest.approx(184_300, rel=0.002)
    assert any("--mem-fraction-static 0.970" in note for note in dep.notes)
    # the launch command of the resolved engine asks for the raised fraction
    args = sglang_launch_args(SglangServeConfig(model=base["model"], engine=dep.engine))
    assert args[args.index("--mem-fraction-static") + 1] == "0.97"
    # a stated fraction is the user's: kept, even when it leaves no pool (one request's room)
    stated = resolve_deployment(Scenario(**base, gpu_memory_utilization=0.855), catalog)
    assert stated.engine.gpu_memory_utilization == 0.855
    assert stated.kv_capacity_tokens == 9216


def test_sglang_admission_reserves_room_for_the_running_outputs(catalog: Catalog) -> None:
    scenario = Scenario(
        engine="sglang",
        model="Qwen/Qwen3-32B",
        gpu="A100-80GB-SXM",
        input_len=1000,
        output_len=4000,
        load="max_throughput",
        num_requests=64,
    )
    dep = resolve_deployment(scenario, catalog)
    assert dep.new_token_ratio == pytest.approx(0.7)
    trace = simulate(dep)
    vllm = simulate(resolve_deployment(scenario.model_copy(update={"engine": "vllm"}), catalog))
    # it admits fewer at once than the blocks would hold, so it retracts less than vLLM
    # preempts (vLLM admits until its blocks run out)
    assert trace.preemptions <= vllm.preemptions
    assert trace.requests == 64


# ----- the live engine: the simulated server's clock -----------------------------------------
def _drive(
    engine: LiveEngine, scenario: Scenario, n: int
) -> tuple[list[float], list[float], float]:
    """A virtual clock: a closed loop's client sends a finished request's replacement, which
    reaches the engine the request path after the step that finished it, the replacements of
    one step's requests ``FRONT_END_SPACING`` x the path apart; a rate load submits each
    arrival at the first step boundary after it (as :func:`simulate`)."""
    lengths = (int(scenario.input_len or 1), int(scenario.output_len or 1))
    arrivals = request_arrivals(scenario)
    now, issued, next_arrival = 0.0, 0, 0
    arrived: dict[int, float] = {}
    on_the_way: list[float] = []  # a closed loop's replacements, when they reach the engine
    first: set[int] = set()
    ttft: list[float] = []
    e2e: list[float] = []
    if arrivals is None:
        for _ in range(int(scenario.concurrency or 1)):
            arrived[engine.submit(*lengths)] = now
            issued += 1
    while len(e2e) < n:
        while arrivals is not None and next_arrival < n and arrivals[next_arrival] <= now:
            arrived[engine.submit(*lengths)] = float(arrivals[next_arrival])
            next_arrival += 1
        while on_the_way and on_the_way[0] <= now:
            arrived[engine.submit(*lengths)] = on_the_way.pop(0)
        if engine.idle:
            now = float(arrivals[next_arrival]) if arrivals is not None else on_the_way[0]
            continue
        seconds = engine.step()
        assert seconds is not None
        now += seconds
        replaced = 0  # this step's replacements so far
        for rid in list(arrived):
            # a served request's tokens reach it the request path after their step
            if rid not in first and engine.generated(rid) >= 1:
                first.add(rid)
                ttft.append(now + engine.request_path_s - arrived[rid])
            if engine.finished(rid):
                e2e.append(now + engine.request_path_s - arrived.pop(rid))
                engine.forget(rid)
                if arrivals is None and issued < n:
                    spacing = FRONT_END_SPACING * engine.request_path_s
                    bisect.insort(on_the_way, now + engine.request_path_s + replaced * spacing)
                    replaced += 1
                    issued += 1
    return ttft, e2e, now


@pytest.mark.parametrize(
    "load",
    [
        {"load": "concurrency", "concurrency": 8, "num_requests": 24},
        {"load": "rate", "request_rate": 40.0, "num_requests": 30},
    ],
)
def test_the_live_engine_serves_a_load_as_the_simulation_predicts_it(
    catalog: Catalog, load: dict[str, object]
) -> None:
    """Stepped request by request (as the simulated server steps it), the engine gives every
    request the TTFT and end-to-end latency the simulation gives it: one timing model."""
    scenario = _scenario(input_len=1500, output_len=40, **load)
    dep = resolve_deployment(scenario, catalog)
    n = scenario.effective_num_requests()
    metrics = run_metrics(simulate(dep, C), C, 1)
    counts = metrics.weights.astype(int)
    ttft, e2e, duration = _drive(LiveEngine(dep, C), scenario, n)
    assert sorted(ttft) == pytest.approx(sorted(np.repeat(metrics.ttft_s, counts)), rel=1e-6)
    assert sorted(e2e) == pytest.approx(sorted(np.repeat(metrics.e2e_s, counts)), rel=1e-6)
    assert n * 40 / duration == pytest.approx(metrics.output_tok_per_s, rel=1e-6)


def test_the_live_engine_prefills_only_what_the_prefix_cache_misses(catalog: Catalog) -> None:
    dep = resolve_deployment(_scenario(input_len=1024), catalog)
    cold, warm = LiveEngine(dep, C), LiveEngine(dep, C)
    cold.submit(1024, 4)
    warm.submit(1024, 4, cached_tokens=1000)  # 62 whole 16-token blocks are cached
    cold_step, warm_step = cold.step(), warm.step()
    assert cold_step is not None and warm_step is not None
    expected = step_time_s(StepBatch.of(prefill_chunks=[(1024 - 992, 992)]), dep, C)
    assert warm_step == pytest.approx(expected, rel=1e-9) and warm_step < cold_step / 3


def test_a_cancelled_request_leaves_the_engine_and_its_blocks(catalog: Catalog) -> None:
    dep = resolve_deployment(_scenario(), catalog)
    engine = LiveEngine(dep, C)
    kept, dropped, queued = (engine.submit(100, 50) for _ in range(3))
    engine.step()
    engine.cancel(queued)  # never scheduled? still only queued or running: both are handled
    engine.step()
    engine.cancel(dropped)
    assert engine.running == 1 and engine.waiting == 0
    while not engine.finished(kept):
        engine.step()
    assert engine.generated(kept) == 50 and engine.idle and engine.kv_usage == 0.0


@given(
    bucket=st.lists(st.integers(0, 40), min_size=16, max_size=16),
    dstep=st.integers(0, 10_000),
    free=st.integers(0, 3_000),
    k_max=st.integers(1, 600),
)
def test_a_run_of_decode_steps_is_as_long_as_the_free_blocks_allow(
    bucket: list[int], dstep: int, free: int, k_max: int
) -> None:
    """pool_steps_within is the most steps (at most k_max) whose new blocks fit in ``free``,
    as counting them step by step says (its shortcut when the bound fits included)."""
    from planner.perf.simulator import _Engine

    engine = object.__new__(_Engine)  # only the decode pool's state (no deployment needed)
    engine.reserve, engine.bs, engine.dstep = False, 16, dstep
    engine.bucket, engine.pool_n = bucket, sum(bucket)
    if engine.pool_n == 0:
        engine.pool_n = 1  # sequences in the pool that need no new block
    fitting = max(k for k in range(k_max + 1) if engine.pool_block_demand(k) <= free)
    assert engine.pool_steps_within(free, k_max) == fitting


def test_a_served_request_pays_the_fitted_path_once_and_an_offline_one_never(
    catalog: Catalog,
) -> None:
    """The request path (step_time ``request_path``: 5 x 10 ms in C) is added once to a request
    an engine's own Python server serves (vllm serve, sglang.launch_server, trtllm-serve): TTFT
    and E2E move by exactly 50 ms, the steps, TPOT and throughput not at all; vLLM's offline
    class, trtllm-bench and Triton's C++ front end with the TensorRT-LLM backend pay none."""

    def timing(**kw: object) -> tuple[np.ndarray, np.ndarray, float, int]:
        dep = resolve_deployment(_scenario(concurrency=2, num_requests=6, **kw), catalog)
        trace = simulate(dep)
        ttft = trace.first @ C - trace.arrival @ C - trace.arrival_time
        tpot = (trace.finish @ C - trace.first @ C) / (trace.output_len - 1)
        return ttft, tpot, float(trace.end @ C), trace.steps

    for engine in ("vllm", "sglang", "trtllm"):
        served = timing(engine=engine)
        offline = timing(engine=engine, entrypoint="offline", enable_chunked_prefill=False)
        assert served[0] - offline[0] == pytest.approx(np.full(len(served[0]), 0.05))
        assert served[1] == pytest.approx(offline[1])
        assert served[2:] == offline[2:] or engine == "sglang"  # SGLang's offline is a server
    served = timing(engine="trtllm")
    triton = timing(engine="trtllm", entrypoint="triton")
    assert served[0] - triton[0] == pytest.approx(np.full(len(served[0]), 0.05))
    assert served[1] == pytest.approx(triton[1])
    assert served[2:] == triton[2:]


# ----- prefill scheduling as the engines' sources do it ---------------------------------------
def _first_token_steps(dep: Deployment) -> list[int]:
    """The step (1-based) out of which each request's first token comes, from the ``layers``
    term, which every step of this deployment adds once."""
    trace = simulate(dep)
    per_step = trace.end[IDX["layers"]] / trace.steps
    steps = (trace.first[:, IDX["layers"]] - trace.arrival[:, IDX["layers"]]) / per_step
    counts = trace.count.astype(int)
    return sorted(round(float(s)) for s, k in zip(steps, counts, strict=True) for _ in range(k))


def _wave(engine: str, gpu: str, **kw: object) -> Scenario:
    """32 prompts of 8,000 tokens sent at once (a closed loop's first wave), 100 tokens out."""
    return _scenario(
        engine=engine,
        gpu=gpu,
        input_len=8000,
        output_len=100,
        concurrency=32,
        num_requests=32,
        **kw,
    )


def test_sglang_prefill_batches_of_a_wave_of_8k_prompts(catalog: Catalog) -> None:
    # H100 (80 GB): chunked_prefill_size 8,192. Batch k runs the rest of prompt k (8,000 - r)
    # and the first r + 192 tokens of prompt k + 1 (r = 192 (k - 1)): prompt k is done in
    # batch ceil(8,000 k / 8,192) = k for every k <= 32, and no decode step runs before the
    # last batch (prefill first): the 32 first tokens come out of steps 1..32
    h100 = resolve_deployment(_wave("sglang", "H100-SXM"), catalog)
    assert h100.max_num_batched_tokens == 8192
    assert _first_token_steps(h100) == list(range(1, 33))
    # B200 (180 GB): chunk 16,384 = max_prefill_tokens: two prompts a batch (16,000 tokens),
    # the third's first 384 ride along: prompt k done in batch ceil(8,000 k / 16,384)
    b200 = resolve_deployment(_wave("sglang", "B200"), catalog)
    assert b200.max_num_batched_tokens == 16384
    assert _first_token_steps(b200) == [-(-8000 * k // 16384) for k in range(1, 33)]
    # no chunked prefill: a batch takes prompts while each is below what is left of
    # max_prefill_tokens (8,000 < 16,384 - 8,000 = 8,384; the third 8,000 >= 384): pairs
    whole = resolve_deployment(_wave("sglang", "H100-SXM", enable_chunked_prefill=False), catalog)
    assert _first_token_steps(whole) == [(k + 1) // 2 for k in range(1, 33)]
    # a chunk budget above max_prefill_tokens (--chunked-prefill-size 131072): the batch stops
    # once its new prompt tokens reach 16,384, the prompt that crosses it included: 3 a batch
    # (8,000 + 8,000 + 8,000), not 16 and a chunk
    big = resolve_deployment(_wave("sglang", "H100-SXM", max_num_batched_tokens=131072), catalog)
    assert big.max_num_batched_tokens == 131072
    assert _first_token_steps(big) == [(k + 2) // 3 for k in range(1, 33)]


def test_trtllm_schedules_one_8k_context_a_step_beside_the_generations(catalog: Catalog) -> None:
    # trtllm-serve: max_num_tokens 8,192, no context chunking. Step k holds the k - 1 earlier
    # requests' generation tokens (older, so first) and prompt k whole (8,000 + k - 1 <= 8,192);
    # prompt k + 1 does not fit beside it: one first token a step, steps 1..32
    dep = resolve_deployment(_wave("trtllm", "H100-SXM"), catalog)
    assert dep.max_num_batched_tokens == 8192 and not dep.engine.enable_chunked_prefill
    assert _first_token_steps(dep) == list(range(1, 33))


def _tight(**kw: object) -> Deployment:
    """SGLang on an H100 with its KV cut to 20,000 tokens (1,250 blocks of 16)."""
    dep = resolve_deployment(_scenario(engine="sglang", input_len=500, **kw), load_catalog())
    return dataclasses.replace(dep, kv_capacity_tokens=20_000)


def test_sglang_admission_reserves_a_new_requests_whole_output() -> None:
    # 16 requests of 500 + 1,500 at once (8,000 prompt tokens: one batch's chunk budget).
    # add_one_req admits while n x (32 prompt blocks + 1,500 / 16) = n x 125.75 < 1,250
    # blocks free: 9 (at the running ratio 0.7 a new request would reserve 97.6: 12). The
    # 10th is NO_TOKEN: batch_is_full holds every prefill back until the nine finish after
    # their 1,499 decode steps, although the decaying ratio (0.7 -> 0.098 over 600 steps)
    # leaves room for it from about the 300th: the other seven come out of step 1 + 1,499 + 1
    dep = _tight(output_len=1500, concurrency=16, num_requests=16)
    assert _first_token_steps(dep) == [1] * 9 + [1501] * 7
    assert simulate(dep).preemptions == 0


def test_sglang_without_radix_cache_admits_only_what_can_finish() -> None:
    # outputs of 6,000: the radix-cache rule clips an output at 4,096 when it reserves:
    # n x (32 + 4,096 / 16) = n x 288 < 1,250 admits 4. With the radix cache off and answers
    # of fixed length (ignore_eos), add_one_req_ignore_eos needs every admitted request to
    # be able to finish with its whole output: 20,000 - n x 512 (prompt blocks) - n x 6,000
    # > n admits 3 (3 x 6,513 = 19,539; 4 x 6,513 = 26,052), and the next waits until they
    # finish (step 1 + 5,999 decode steps + 1); the radix rule's four outgrow the 20,000
    # tokens (4 x 6,500) and one is retracted (recomputed once the others finish)
    radix = _tight(output_len=6000, concurrency=8, num_requests=8)
    admitted = _first_token_steps(radix)
    assert admitted[:4] == [1] * 4 and admitted[4] > 6000
    assert simulate(radix).preemptions > 0
    plain = _tight(output_len=6000, concurrency=8, num_requests=8, enable_prefix_caching=False)
    assert _first_token_steps(plain)[:4] == [1] * 3 + [6001]
    assert simulate(plain).preemptions == 0


def test_vllm_pipeline_macro_step_holds_a_budget_a_micro_batch_but_one_of_a_prompt(
    catalog: Catalog,
) -> None:
    """vLLM with PP 4 keeps four batches in flight, each with the whole 2,048-token budget, and
    a request in one of them at a time: one 20,000-token prompt still takes ceil(20000 / 2048)
    = 10 steps, while four of 2,000 tokens arriving together are prefilled in one macro-step
    (8,000 tokens over ceil(8000 / 2048) = 4 micro-batches), not four."""
    kw: dict[str, object] = {
        "model": "Qwen/Qwen3-32B",
        "gpu": "L4",
        "tp": 4,
        "pp": 4,
        "instance": "g6.12xlarge",
        "nodes": 4,
        "max_num_batched_tokens": 2048,
        "output_len": 2,
    }
    one = simulate(resolve_deployment(_scenario(input_len=20000, num_requests=1, **kw), catalog))
    assert one.steps == 11  # 10 prefill steps and a decode step
    four = resolve_deployment(
        _scenario(input_len=2000, concurrency=4, num_requests=4, **kw), catalog
    )
    wave = simulate(four)
    assert wave.steps == 2  # one prefill macro-step and a decode step
    m = run_metrics(wave, C, 1)
    chain = step_time_s(StepBatch.of(prefill_chunks=[(2000, 0)] * 4), four, C)
    assert m.ttft_ms("p50") == pytest.approx(chain * 1e3 + 50.0, rel=1e-9)


def test_a_served_closed_loops_replacements_queue_behind_each_others_prefills(
    catalog: Catalog,
) -> None:
    """The shape of Scicom's vLLM 0.19 runs (``data/measured_benchmaq.csv``: one-length
    prompts of 4,096 tokens, 128 out, 10 in flight): a replacement reaches the engine the
    request path (50 ms here) after its predecessor's last token, so a wave's replacements
    arrive together and queue for the prefill. Against each replaced at its predecessor's very
    step (the loop simulated in terms alone, no clock): TTFT longer, TPOT shorter, fewer
    tokens a second (each seat stands empty a path a request); the steady state agrees."""
    from planner.perf.simulator import closed_loop_turnaround_s
    from planner.perf.steady_state import SteadyStateModel

    dep = resolve_deployment(
        _scenario(input_len=4096, output_len=128, concurrency=10, num_requests=200), catalog
    )
    assert closed_loop_turnaround_s(dep, C) == pytest.approx(0.05)
    assert closed_loop_turnaround_s(dep, None) == 0.0
    at_once = run_metrics(simulate(dep), C, 1)
    trace = simulate(dep, C)
    assert trace.time_driven
    turned = run_metrics(trace, C, 1)
    assert turned.ttft_ms("mean") > 1.5 * at_once.ttft_ms("mean")
    assert turned.tpot_ms("mean") < 0.9 * at_once.tpot_ms("mean")
    assert turned.output_tok_per_s < at_once.output_tok_per_s
    steady = SteadyStateModel(dep, C).at_concurrency(10, run_requests=200)
    assert steady.ttft_mean_s * 1e3 == pytest.approx(turned.ttft_ms("mean"), rel=0.25)
    assert steady.output_tok_per_s == pytest.approx(turned.output_tok_per_s, rel=0.1)
    # offline (no request path) keeps replacing at the step, clock or not
    offline = resolve_deployment(dep.scenario.model_copy(update={"entrypoint": "offline"}), catalog)
    assert closed_loop_turnaround_s(offline, C) == 0.0
    assert not simulate(offline, C).time_driven


def test_a_vllm_closed_loops_waves_come_apart_over_its_data_parallel_replicas(
    catalog: Catalog,
) -> None:
    """Scicom's shape on two replicas (1,024 tokens in, 128 out, one length): vLLM's front end
    deals a wave's replacements over both replicas from counts a step behind, so the waves
    come apart (``spreads_first_wave``). Against one replica serving its half alone (the same
    seats, its wave kept together): TTFT far shorter, TPOT longer (the prompts now land among
    the decodes), and as many tokens a second a replica, within the one-time cost of spreading
    the first wave (10 / (2 x 400) here). SGLang keeps its waves: two replicas are exactly
    twice one."""
    from planner.perf.simulator import closed_loop_turnaround_s, spreads_first_wave

    loop = {"input_len": 1024, "output_len": 128, "concurrency": 10, "num_requests": 400}
    half = {**loop, "concurrency": 5, "num_requests": 200}
    runs = {}
    for engine in ("vllm", "sglang"):
        one = resolve_deployment(_scenario(engine=engine, **half), catalog)
        two = resolve_deployment(_scenario(engine=engine, num_gpus=2, **loop), catalog)
        assert two.loaded_replicas == 2 and one.loaded_replicas == 1
        turnaround = closed_loop_turnaround_s(two, C)
        assert spreads_first_wave(two, turnaround) == (engine == "vllm")
        assert not spreads_first_wave(one, closed_loop_turnaround_s(one, C))
        runs[engine] = (
            run_metrics(simulate(one, C), C, 1),
            run_metrics(simulate(two, C), C, two.loaded_replicas),
        )
    alone, apart = runs["vllm"]
    assert apart.ttft_ms("mean") < 0.6 * alone.ttft_ms("mean")
    assert apart.tpot_ms("mean") > 1.03 * alone.tpot_ms("mean")
    assert apart.output_tok_per_s == pytest.approx(2 * alone.output_tok_per_s, rel=0.03)
    sg_alone, sg_two = runs["sglang"]
    assert sg_two.ttft_ms("mean") == pytest.approx(sg_alone.ttft_ms("mean"), rel=1e-9)
    assert sg_two.output_tok_per_s == pytest.approx(2 * sg_alone.output_tok_per_s, rel=1e-9)


def test_a_waves_replacements_reach_the_engine_one_after_another(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scicom's TP 8 x 1 short-prompt shape (128 tokens in and out, 25 in flight): the front end
    takes a finished wave's replacements in one at a time, ``FRONT_END_SPACING`` x the path
    apart, and an idle engine starts a step with the first, so the wave's prompts are prefilled
    over several steps and wait less than for all of them at once (0.61x here), for as many
    tokens a second."""
    import planner.perf.simulator as simulator

    dep = resolve_deployment(
        _scenario(input_len=128, output_len=128, concurrency=25, num_requests=250), catalog
    )
    assert simulator.FRONT_END_SPACING > 0
    spaced = run_metrics(simulate(dep, C), C, 1)
    monkeypatch.setattr(simulator, "FRONT_END_SPACING", 0.0)
    together = run_metrics(simulate(dep, C), C, 1)
    assert spaced.ttft_ms("mean") < 0.75 * together.ttft_ms("mean")
    assert spaced.output_tok_per_s == pytest.approx(together.output_tok_per_s, rel=0.03)


def test_prompts_an_earlier_run_sent_come_from_the_prefix_cache_while_it_holds_them(
    catalog: Catalog,
) -> None:
    """A benchmark run repeating an earlier run's prompts on the same server (the same seed,
    no flush): its first wave, 64 prompts of about 4,000 tokens sent at once, would queue
    behind 250K tokens of prefill cold; warm, each prefills its last block only. Only the
    repeated requests gain, only on an engine caching prefixes, and only when they fit the
    KV cache (repeated in order, prompts that did not fit were evicted before the run gets
    to them)."""
    base = {**SGLANG_LOOP_OF_64, "num_requests": 320, **dataset_lengths("uniform", 4000, 500)}

    def run(warm: int, **kw: object) -> tuple[np.ndarray, float, float, int]:
        """TTFTs of the first wave (the requests sent at the start), the run's mean and p99
        TTFT, and the KV cache's tokens."""
        dep = resolve_deployment(Scenario(**base, **kw, warm_prompts=warm), catalog)
        trace = simulate(dep, C)
        ttft = trace.first @ C - trace.arrival @ C - trace.arrival_time
        sent = trace.arrival @ C + trace.arrival_time
        metrics = run_metrics(trace, C, 1)
        return (
            ttft[sent <= sent.min() + 1e-9],
            metrics.ttft_ms("mean"),
            metrics.ttft_ms("p99"),
            dep.kv_capacity_tokens,
        )

    cold_wave, cold_mean, cold_p99, capacity = run(0)
    assert capacity > 80 * 4500
    warm_wave, warm_mean, warm_p99, _ = run(80)
    assert warm_wave.max() < 0.2 * np.median(cold_wave)
    assert warm_p99 < 0.5 * cold_p99 and warm_mean < 0.7 * cold_mean
    # the same prompts on a server without a prefix cache, or repeated beyond what the KV
    # cache holds, are prefilled whole
    assert run(80, enable_prefix_caching=False)[1:3] == pytest.approx((cold_mean, cold_p99))
    small = run(0, gpu_memory_utilization=0.3)
    assert small[3] < 320 * 4500
    assert run(320, gpu_memory_utilization=0.3)[1:3] == pytest.approx(small[1:3])


def test_a_prompt_an_earlier_run_sent_shorter_prefills_only_what_it_adds(
    catalog: Catalog,
) -> None:
    """One request at a time, 4,096-token prompts whose first 3,072 tokens an earlier run sent
    (the same seed drew it shorter): each prefills the 1,024 it adds, as a cold 1,024-token
    prompt does, and a whole repeated prompt only its last token. vLLM finds them cached (its
    default, though the model's vLLM engine keeps prefix caching off unless a plan states it);
    a scenario that turns it off finds none."""
    base = {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "gpu": "H100-SXM",
        "output_len": 64,
        "load": "concurrency",
        "concurrency": 1,
        "num_requests": 4,
    }

    def ttft(input_len: int, **kw: object) -> float:
        scenario = Scenario(**base, input_len=input_len, **kw)
        return run_metrics(simulate(resolve_deployment(scenario, catalog), C), C, 1).ttft_ms("mean")

    cold, short = ttft(4096), ttft(1024)
    prefix = ttft(4096, warm_prompts=4, warm_prompt_tokens=3072)
    whole = ttft(4096, warm_prompts=4)
    assert whole < prefix < cold
    assert ttft(4096, warm_prompts=4, enable_prefix_caching=False) == pytest.approx(cold)
    # the prefix's 3,072 tokens are cached in whole 16-token blocks: the rest as a 1,024-token
    # prompt's prefill attends to 3,072 more keys
    assert prefix == pytest.approx(short, rel=0.15)
    with pytest.raises(ValueError, match="warm_prompt_tokens needs warm_prompts"):
        Scenario(**base, input_len=4096, warm_prompt_tokens=3072)


def test_a_step_that_preempts_all_it_scheduled_admits_the_queue(catalog: Catalog) -> None:
    """Llama-3.1-70B in FP8 on two A100-40GB at PP 2 holds 4,096 tokens of KV: two 2,048-token
    prompts fill it to the last block, and their first decode step needs one block more each.
    Where a step preempts all it was scheduling, the queue (the preempted first) is admitted in
    that step, as vLLM's next step does, and the run goes on one request at a time. It had
    ended in "the scheduler cannot make progress" (the recommender's simulation-only search hit
    it, benchmarks/recommend_bench.py)."""
    scenario = Scenario(
        model="meta-llama/Llama-3.1-70B-Instruct", precision="fp8", gpu="A100-40GB-SXM",
        num_gpus=2, tp=1, pp=2, instance="gpu_2x_a100", input_len=2048, output_len=512,
        load="concurrency", concurrency=32, num_requests=128, max_num_seqs=256,
        max_num_batched_tokens=8192, gpu_memory_utilization=0.93,
    )  # fmt: skip
    dep = resolve_deployment(scenario, catalog)
    assert dep.kv_capacity_blocks * dep.block_size == 4096
    trace = simulate(dep, C)
    assert trace.requests == 128 and trace.preemptions > 0
    # never two at once for long: the cache holds one request and a prompt's share of another
    metrics = run_metrics(trace, C, 1)
    assert metrics.mean_running_batch < 2.0


def test_a_cohort_short_of_blocks_preempts_only_the_members_it_must(catalog: Catalog) -> None:
    """vLLM preempts the last admitted request, one at a time, until the one it schedules has
    its block; each preempted request frees its own. Two 2,048-token prompts that filled the
    4,096 tokens of KV of the layout above need a block each for their first decode: the
    second is preempted and its 128 blocks hold the first's, which decodes on (one preemption,
    not two: the simulator once preempted as many members as the free blocks alone were short
    of, without counting what each preempted member frees)."""
    for n in (2, 3):
        scenario = Scenario(
            model="meta-llama/Llama-3.1-70B-Instruct", precision="fp8", gpu="A100-40GB-SXM",
            num_gpus=2, tp=1, pp=2, instance="gpu_2x_a100", input_len=2048, output_len=512,
            load="concurrency", concurrency=n, num_requests=n, max_num_seqs=256,
            max_num_batched_tokens=8192, gpu_memory_utilization=0.93,
        )  # fmt: skip
        trace = simulate(resolve_deployment(scenario, catalog), C)
        assert trace.requests == n and trace.preemptions == 1
