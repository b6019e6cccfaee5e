"""The eager floor (planner.perf.step_time, ``eager_floor``) as the shipped fit learnt it: an MoE
prefill run without CUDA graphs is bound by its launches at short prompts, and still takes
longer with more tokens under every fitted key (its slope below the roofline's)."""

from __future__ import annotations

import numpy as np
import pytest

from planner.catalog import Catalog
from planner.perf.calibration import scenario_from_measured
from planner.perf.deployment import Deployment
from planner.perf.model import PerformanceModel
from planner.perf.scenario import Scenario
from planner.perf.step_time import IDX, StepBatch, step_features

#: prompt tokens of one prefill step, from a graph-sized one to a long context's
PREFILL_TOKENS = (64, 256, 513, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


def _moe_deployments(model: PerformanceModel) -> list[Deployment]:
    """An SGLang MoE (every prefill eager) and a vLLM one (eager past 512 tokens)."""
    layouts = (
        ("deepseek-ai/DeepSeek-V3", "H200", 8, "sglang", "fp8"),
        ("Qwen/Qwen3-30B-A3B", "H100-SXM", 1, "vllm", "bf16"),
    )
    return [
        model.deployment(
            Scenario(
                model=name,
                gpu=gpu,
                tp=tp,
                precision=precision,
                engine=engine,
                input_len=512,
                output_len=128,
                concurrency=1,
                num_requests=4,
            )
        )
        for name, gpu, tp, engine, precision in layouts
    ]


def test_a_longer_eager_moe_prefill_takes_longer_under_every_fitted_key(
    model: PerformanceModel, catalog: Catalog
) -> None:
    """The floor's linear form subtracts its coefficient x the roofline: were that coefficient
    above the roofline's, a longer prompt would prefill faster and the capacity search, which
    takes latency to grow with load, would find edges that depend on where it starts."""
    fitted = model.fitted
    assert fitted is not None
    releases = sorted(fitted.levels.get("version", {}))
    deployments = _moe_deployments(model)
    checked = 0
    for family in ("vllm", "sglang", "trtllm"):
        for version in [None, *(v for v in releases if v.startswith(family))]:
            for gpu in catalog.gpus:
                c = model.coefficients_for(family, gpu, version, kind="moe")
                assert c[IDX["roofline"]] > c[IDX["eager_floor"]], (family, gpu, version)
                for dep in deployments:
                    steps = [
                        float(c @ step_features(StepBatch.of(prefill_chunks=[(n, 0)]), dep))
                        for n in PREFILL_TOKENS
                    ]
                    assert np.all(np.diff(steps) > 0.0), (family, gpu, version, steps)
                    checked += 1
    assert checked > 100


def test_sglang_prefills_a_large_moe_in_about_the_same_time_at_610_and_4194_tokens(
    model: PerformanceModel, catalog: Catalog
) -> None:
    """SGLang 0.5.6 on 8 x B200 measured DeepSeek-R1-0528's TTFT at one in flight at 153 and
    126 ms (610 prompt tokens) and 166 ms (4,194): 1.19x for 6.9x the prompt. With the floor's
    1 ms unit the fit predicted 101 and 167 ms (1.65x); with 4 ms, 120 and 172 (1.43x): the
    host's launches set more of the short prefill."""
    rows = [
        r
        for r in catalog.measured
        if r.model == "deepseek-ai/DeepSeek-R1-0528"
        and r.engine == "sglang"
        and r.gpu == "B200"
        and r.concurrency == 1
        and r.ttft_ms is not None
        and r.output_len == 421
    ]
    by_prompt = {r.input_len: r for r in rows}
    assert set(by_prompt) == {610, 4194}
    short, long = (model.predict(scenario_from_measured(by_prompt[n])) for n in (610, 4194))
    assert long.ttft_ms_mean / short.ttft_ms_mean < 1.5
    assert short.ttft_ms_mean == pytest.approx(by_prompt[610].ttft_ms, rel=0.25)
    assert long.ttft_ms_mean == pytest.approx(by_prompt[4194].ttft_ms, rel=0.25)


def test_an_engine_without_cuda_graphs_decodes_an_moe_at_its_launch_floor(
    model: PerformanceModel, catalog: Catalog
) -> None:
    """With ``enforce_eager`` every step launches its kernels one by one, decode steps too, so
    they take the eager floor; a decode step merely past the graph limit (a vLLM batch of more
    than 512 sequences, graphs on) does not. dstack's TensorRT-LLM 0.17 serve rows, whose PyTorch
    backend captured no graphs by default (pull request 5480 turned them on for 1.0), are marked
    so and simulated so."""
    dep = _moe_deployments(model)[1]  # vLLM, Qwen3-30B-A3B on one H100
    eager = model.deployment(dep.scenario.model_copy(update={"enforce_eager": True}))
    assert eager.enforce_eager and not dep.enforce_eager
    floor = IDX["eager_floor"]
    small = StepBatch.of(decode_contexts=[600] * 4)
    assert step_features(small, eager)[floor] > 0.0
    assert step_features(small, dep)[floor] == 0.0
    past_graphs = StepBatch.of(decode_contexts=[600] * 600)
    assert step_features(past_graphs, dep)[IDX["eager_layers"]] > 0.0
    assert step_features(past_graphs, dep)[floor] == 0.0

    rows = [m for m in catalog.measured if m.enforce_eager]
    assert len(rows) == 9
    assert {(m.source.split()[0], m.engine, m.engine_version[:11]) for m in rows} == {
        ("dstackai/benchmarks", "tensorrt-llm", "0.17.post1.")
    }
    assert all(scenario_from_measured(m).enforce_eager for m in rows)
    c = model.coefficients_for("vllm", catalog.gpu("H100-SXM"), None, kind="moe")
    assert float(c @ step_features(small, eager)) > 2 * float(c @ step_features(small, dep))
