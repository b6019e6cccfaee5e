"""Disaggregated prefill/decode as a dimension of the search (issue 25, item 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pages.charts.disaggregation import AGGREGATED, DISAGGREGATED, disaggregation_figure
from planner.catalog import Catalog
from planner.perf.disaggregated import predict_disaggregated
from planner.perf.model import PerformanceModel, get_performance_model
from planner.plan import read_plan
from planner.recommend import (
    RANKING_COLUMNS,
    CapacityCache,
    Demand,
    RecommendationResult,
    RecommendRequest,
    SearchSpace,
    Slo,
    disaggregation_curve,
    perf_predictor,
    ranking_rows,
    recommend,
)

DEEPSEEK_R1 = "deepseek-ai/DeepSeek-R1-0528"


@pytest.fixture(scope="module")
def perf(catalog: Catalog) -> PerformanceModel:
    return get_performance_model(catalog)


def _request(mode: str, **search: object) -> RecommendRequest:
    """DeepSeek-R1 at 100 req/s under a 2 s p99 TTFT and a 30 ms p99 TPOT (issue 25)."""
    return RecommendRequest(
        model=DEEPSEEK_R1,
        input_len=2048,
        output_len=512,
        demand=Demand(avg_rate_rps=100.0, peak_rate_rps=100.0),
        slo=Slo(ttft_p99_ms=2000, tpot_p99_ms=30),
        search=SearchSpace(
            **{"providers": ("aws",), "gpus": ("B200", "H200"), "precisions": ("fp8",), **search}
        ),
        disaggregation=mode,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def searched(catalog: Catalog, perf: PerformanceModel) -> dict[str, RecommendationResult]:
    results = {}
    for mode in ("off", "auto", "on"):
        request = _request(mode)
        results[mode] = recommend(
            catalog, request, perf_predictor(catalog, request, perf), cache=CapacityCache()
        )
    return results


def test_auto_ranks_both_kinds_under_the_same_slo(
    searched: dict[str, RecommendationResult], catalog: Catalog, perf: PerformanceModel
) -> None:
    ranked = searched["auto"].ranked
    kinds = {rec.disaggregated for rec in ranked}
    assert kinds == {True, False}, [rec.label for rec in ranked]
    costs = [rec.usd_per_million_output_tokens for rec in ranked]
    assert costs == sorted(costs)
    assert [rec.rank for rec in ranked] == list(range(1, len(ranked) + 1))
    for rec in ranked:
        assert rec.pred_ttft_ms_p99 <= 2000 and rec.pred_tpot_ms_p99 <= 30
    best = next(rec for rec in ranked if rec.disaggregated)
    plan = best.plan
    assert plan.prefill is not None and plan.decode is not None and plan.kv_link == "efa"
    assert best.gpus == plan.prefill.gpus + plan.decode.gpus
    # both pools' instances at the same hourly price
    gpus_an_instance = catalog.instance(best.instance).gpus
    instances = -(-plan.prefill.gpus // gpus_an_instance) + -(-plan.decode.gpus // gpus_an_instance)
    assert best.instances_total == instances
    assert best.usd_per_hour == pytest.approx(instances * plan.price.usd_per_hour)  # type: ignore[union-attr]
    # the plan's pools carry through JSON, and predict the same figures again
    again = read_plan(json.loads(plan.model_dump_json()))
    assert again == plan
    layout = again.disaggregated_layout()  # type: ignore[union-attr]
    assert layout is not None and layout.decode.replicas == plan.decode.replicas
    row = next(r for r in ranking_rows(searched["auto"]) if r["rank"] == best.rank)
    assert row["disaggregated"] is True and row["pools"].startswith("prefill ")
    # the spare replica stands by in the decode pool: without it the peak still meets the SLO
    needed = layout.model_copy(
        update={"decode": layout.decode.model_copy(update={"replicas": layout.decode.replicas - 1})}
    )
    scenario = again.scenario(seed=0)  # type: ignore[union-attr]
    at_peak = predict_disaggregated(
        perf, scenario.model_copy(update={"request_rate": 100.0}), needed
    )
    assert at_peak.prediction.ttft_ms_p99 <= 2000 and at_peak.prediction.tpot_ms_p99 <= 30


def test_off_is_todays_ranking_and_on_only_disaggregated(
    searched: dict[str, RecommendationResult],
) -> None:
    off, auto, on = searched["off"], searched["auto"], searched["on"]
    assert off.ranked and not any(rec.disaggregated for rec in off.ranked)
    assert not any(r.engine_settings == "disaggregated" for r in off.rejected)
    assert list(ranking_rows(off)[0]) == RANKING_COLUMNS  # no new column
    # auto's aggregated plans are off's, in the same order with the same figures
    aggregated = [rec for rec in auto.ranked if not rec.disaggregated]
    assert [rec.model_dump(exclude={"rank"}) for rec in aggregated] == [
        rec.model_dump(exclude={"rank"}) for rec in off.ranked
    ]
    assert on.ranked and all(rec.disaggregated for rec in on.ranked)
    assert {rec.label for rec in on.ranked} == {
        rec.label for rec in auto.ranked if rec.disaggregated
    }


def test_where_the_split_does_not_apply_says_why(catalog: Catalog, perf: PerformanceModel) -> None:
    # GCP's H200 instance states no network: the pools cannot sit on two of them
    request = _request("on", providers=("gcp",))
    result = recommend(catalog, request, perf_predictor(catalog, request, perf))
    assert not result.ranked
    reasons = [r.reason for r in result.rejected if r.engine_settings == "disaggregated"]
    assert any("no inter-node link in the catalog for a3-ultragpu-8g" in r for r in reasons)
    dense = RecommendRequest(
        model="Qwen/Qwen3-32B",
        input_len=1024,
        output_len=256,
        demand=Demand(avg_rate_rps=2.0),
        slo=Slo(ttft_p99_ms=2000, tpot_p99_ms=50),
        search=SearchSpace(providers=("aws",), gpus=("H100-SXM",), precisions=("bf16",)),
        disaggregation="on",
    )
    result = recommend(catalog, dense, perf_predictor(catalog, dense, perf))
    assert not result.ranked
    assert any("dense model under 8 GPUs" in r.reason for r in result.rejected)


def test_the_curve_and_its_chart_hold_both_kinds(catalog: Catalog, perf: PerformanceModel) -> None:
    request = _request("auto", gpus=("B200",))
    points = disaggregation_curve(
        catalog, request, perf_predictor(catalog, request, perf), factors=(0.5, 1.0)
    )
    assert [p.peak_rate_rps for p in points] == [50.0, 100.0]
    at_100 = points[1]
    assert at_100.aggregated_usd_per_million_output_tokens is not None
    assert at_100.disaggregated_usd_per_million_output_tokens is not None
    fig = disaggregation_figure(points)
    series = {trace.name: trace for trace in fig.data}
    assert set(series) == {AGGREGATED, DISAGGREGATED}
    assert list(series[DISAGGREGATED].y)[1] == at_100.disaggregated_usd_per_million_output_tokens
    assert list(series[AGGREGATED].x) == [50.0, 100.0]


def test_cli_bad_disaggregation_value_is_one_line() -> None:
    out = subprocess.run(
        [
            sys.executable, "-m", "planner", "recommend", "--model", DEEPSEEK_R1,
            "--input-len", "2048", "--output-len", "512", "--rate", "100",
            "--disaggregation", "sometimes",
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "--disaggregation" in lines[0] and "sometimes" in lines[0]
    assert "auto" in lines[0] and "off" in lines[0] and "Traceback" not in out.stderr
