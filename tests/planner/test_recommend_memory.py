"""Layouts that start only with more memory given to the engine: candidates of the one search,
predicted and launched at the raised share, after the plans at the default at an equal cost
(planner.recommend.startup)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from planner.catalog import Catalog
from planner.engine import EngineConfig, sglang_defaults
from planner.perf.capacity import MAX_RAISED_FRACTION
from planner.perf.model import PerformanceModel, get_performance_model
from planner.plan import read_plan
from planner.recommend import (
    CapacityCache,
    Demand,
    RecommendationResult,
    RecommendRequest,
    SearchSpace,
    Slo,
    perf_predictor,
    ranking_rows,
    recommend,
)
from planner.recommend.search import _rank_key
from planner.recommend_export import best_configuration_text, write_csv
from planner.serve_flags import parse_serve_command
from tests.planner.test_sglang_command import SGLANG_DOCUMENTED_FLAGS
from tests.planner.test_vllm_command import DOCUMENTED_FLAGS_0_27_1

LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"
#: one H100 80 GB: Llama-3.1-70B in FP8 (~71 GB of weights) leaves no KV cache inside vLLM's
#: default 0.9 of it, and starts at 0.97 (planner.perf.capacity's ceiling; what leaves its CUDA
#: graphs and start-up buffers outside the budget is a little more)
ONE_H100 = "p5.4xlarge"


@pytest.fixture(scope="module")
def perf(catalog: Catalog) -> PerformanceModel:
    return get_performance_model(catalog)


def _search(
    catalog: Catalog,
    perf: PerformanceModel,
    instances: tuple[str, ...],
    engine: EngineConfig | None = None,
) -> RecommendationResult:
    request = RecommendRequest(
        model=LLAMA_70B,
        input_len=1000,
        output_len=200,
        demand=Demand(avg_rate_rps=0.2, peak_rate_rps=0.2, spare_replicas=0),
        slo=Slo(ttft_p99_ms=20_000, tpot_p99_ms=300),
        search=SearchSpace(
            providers=("aws",),
            regions=("us-east-1",),
            instances=instances,
            max_nodes=1,
            precisions=("fp8",),
            max_num_seqs=(64,),
            max_num_batched_tokens=(2048,),
        ),
        engine=engine or EngineConfig(),
    )
    return recommend(
        catalog, request, perf_predictor(catalog, request, perf), cache=CapacityCache()
    )


def _after(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def test_a_layout_that_starts_only_at_a_raised_share_is_ranked_with_its_flag(
    catalog: Catalog, perf: PerformanceModel, tmp_path: Path
) -> None:
    """The instance's only layout (TP1 on one H100) does not start at vLLM's 0.9: before, the
    search had no plan; now it ranks it at 0.97, the command sets it and the note says why."""
    result = _search(catalog, perf, (ONE_H100,))
    assert result.best is not None, [r.reason for r in result.rejected]
    rec = result.best
    assert (rec.instance, rec.tp, rec.pp) == (ONE_H100, 1, 1)
    assert rec.memory_raised and rec.memory_fraction == pytest.approx(MAX_RAISED_FRACTION)
    words = shlex.split(rec.launch_command)
    assert words[:2] == ["vllm", "serve"]
    assert {w for w in words if w.startswith("--")} <= DOCUMENTED_FLAGS_0_27_1
    assert _after(words, "--gpu-memory-utilization") == "0.97"
    assert parse_serve_command(rec.launch_command).gpu_memory_utilization == pytest.approx(0.97)
    assert rec.vllm_command == rec.launch_command
    assert "starts only with --gpu-memory-utilization 0.97" in rec.memory_note
    assert "default gpu_memory_utilization 0.9" in rec.memory_note
    assert "docs.vllm.ai" in rec.memory_note and "CUDA graphs" in rec.memory_note
    # predicted at the raised share: the plan (what the Verify page runs) states it, through
    # its JSON too
    assert rec.plan.engine.gpu_memory_utilization == pytest.approx(0.97)
    again = read_plan(rec.plan.model_dump(mode="json"))
    assert again is not None and again.scenario().gpu_memory_utilization == pytest.approx(0.97)
    assert rec.pred_output_tok_per_s_per_replica > 0

    # the export carries the share: the ranking rows (the CLI's JSON, the Plan page's table)
    # and the CSV
    row = ranking_rows(result)[0]
    assert row["memory_fraction"] == pytest.approx(0.97) and row["memory_raised"] is True
    assert row["memory_note"] == rec.memory_note
    frame = pd.read_csv(write_csv(result, tmp_path / "ranking.csv"))
    assert frame.loc[0, "memory_fraction"] == pytest.approx(0.97)
    assert bool(frame.loc[0, "memory_raised"]) is True


def test_sglang_raises_its_mem_fraction_static_and_says_so(
    catalog: Catalog, perf: PerformanceModel
) -> None:
    result = _search(catalog, perf, (ONE_H100,), EngineConfig(engine="sglang"))
    assert result.best is not None, [r.reason for r in result.rejected]
    rec = result.best
    # the pinned release reserves for its prefill graphs, up to the chunk: 8,192 on an H100
    h100 = catalog.gpu("H100-SXM")
    default = sglang_defaults(h100, tp=1, prefill_graph_tokens=8192).mem_fraction_static
    assert rec.memory_raised and default < rec.memory_fraction <= MAX_RAISED_FRACTION
    words = shlex.split(rec.launch_command)
    assert words[:3] == ["python3", "-m", "sglang.launch_server"]
    assert {w for w in words if w.startswith("--")} <= SGLANG_DOCUMENTED_FLAGS
    assert float(_after(words, "--mem-fraction-static")) == pytest.approx(rec.memory_fraction)
    assert parse_serve_command(rec.launch_command).gpu_memory_utilization == pytest.approx(
        rec.memory_fraction
    )
    assert f"raised from SGLang's default mem_fraction_static {default:g}" in rec.memory_note
    assert "docs.sglang.ai" in rec.memory_note


def test_a_plan_at_the_default_keeps_it_and_a_stated_share_is_kept(
    catalog: Catalog, perf: PerformanceModel
) -> None:
    """A layout that starts at the default keeps it (vLLM's command states 0.9, SGLang's no
    share at all); a share the user states is never raised (the one-H100 layout stays out)."""
    for engine in ("vllm", "sglang"):
        result = _search(catalog, perf, ("p5.48xlarge",), EngineConfig(engine=engine))
        at_default = [r for r in result.ranked if not r.memory_raised]
        assert at_default, engine
        for rec in at_default:
            assert rec.memory_note == ""
            words = shlex.split(rec.launch_command)
            if engine == "vllm":
                assert _after(words, "--gpu-memory-utilization") == "0.9"
                assert rec.memory_fraction == pytest.approx(0.9)
            else:
                assert "--mem-fraction-static" not in words
                gpu = catalog.gpu("H100-SXM")
                dp = rec.attention_dp
                # the pinned release runs its prefill steps under piecewise CUDA graphs up to
                # the plan's chunk without attention DP or pipeline stages, and reserves for
                # them
                plain = dp == 1 and rec.pp == 1
                graphs = rec.engine_settings.max_num_batched_tokens if plain else None
                default = sglang_defaults(
                    gpu, dp, tp=rec.tp * dp, pp=rec.pp, prefill_graph_tokens=graphs
                )
                assert rec.memory_fraction == pytest.approx(default.mem_fraction_static)
            # what the Verify page predicts of the plan is what the search predicted
            again = perf.predict(rec.plan.scenario())
            assert rec.plan.prediction is not None
            assert again.ttft_ms_p99 == rec.plan.prediction.ttft_ms_p99
    stated = _search(catalog, perf, (ONE_H100,), EngineConfig(gpu_memory_utilization=0.9))
    assert stated.best is None
    fix = re.compile(r"--gpu-memory-utilization 0\.9[1-7] starts it")
    assert any(r.tp == 1 and fix.search(r.reason) for r in stated.rejected)


def test_at_an_equal_cost_the_plan_at_the_default_ranks_first() -> None:
    """The tie-break: the same $/M and $/hour, the default share before the raised one even
    with less headroom."""
    common = {
        "usd_per_million_output_tokens": 2.0,
        "usd_per_hour": 10.0,
        "replicas": 2,
        "pred_ttft_ms_p99": 500.0,
        "spec_method": "none",
    }
    raised = SimpleNamespace(**common, max_rps_per_replica=3.0, memory_raised=True)
    default = SimpleNamespace(**common, max_rps_per_replica=2.0, memory_raised=False)
    ranked = sorted([raised, default], key=_rank_key)  # type: ignore[arg-type]
    assert ranked == [default, raised]
    cheaper = SimpleNamespace(**{**common, "usd_per_million_output_tokens": 1.9},
                              max_rps_per_replica=3.0, memory_raised=True)  # fmt: skip
    assert sorted([default, cheaper], key=_rank_key)[0] is cheaper  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("engine", "program", "own_flag"),
    [
        ("sglang", "python3 -m sglang.launch_server", "--mem-fraction-static"),
        ("trtllm", "trtllm-serve", "--kv_cache_free_gpu_memory_fraction"),
    ],
)
def test_another_engines_plan_exports_its_own_command_and_a_vllm_equivalent_at_vllms_share(
    catalog: Catalog, perf: PerformanceModel, engine: str, program: str, own_flag: str
) -> None:
    """A plan stating SGLang's or TensorRT-LLM's memory share launches with it under its own
    flag; its vllm_command (the vLLM equivalent) never passes that share as vLLM's
    --gpu-memory-utilization, and the export's "Best configuration" is the plan's own command
    first, the vLLM equivalent below it, labelled."""
    stated = EngineConfig(engine=engine, gpu_memory_utilization=0.85)
    result = _search(catalog, perf, ("p5.48xlarge",), stated)
    assert result.ranked, [r.reason for r in result.rejected]
    for rec in result.ranked:
        own = shlex.split(rec.launch_command)
        assert rec.launch_command.startswith(program) and _after(own, own_flag) == "0.85"
        words = shlex.split(rec.vllm_command)
        assert words[:2] == ["vllm", "serve"] and "--gpu-memory-utilization" not in words
    best = result.best
    assert best is not None
    text = best_configuration_text(best)
    first, label, equivalent = text.split("\n\n")
    assert first == best.launch_command
    assert label.startswith("vLLM equivalent (not the plan") and equivalent == best.vllm_command
    # a vLLM plan's is its command alone; no plan, the sentence
    vllm_best = _search(catalog, perf, ("p5.48xlarge",)).best
    assert vllm_best is not None
    assert best_configuration_text(vllm_best) == vllm_best.launch_command
    assert best_configuration_text(None) == "No configuration meets the SLOs."
