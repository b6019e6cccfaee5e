"""An impossible SLO is named with the best figure any candidate achieves; filters that hold
no instance together are a sentence naming them (not "none GPUs each")."""

from __future__ import annotations

import pytest

from planner.catalog import Catalog
from planner.cli import main
from planner.perf.model import PerformanceModel, get_performance_model
from planner.recommend import (
    Demand,
    RecommendRequest,
    SearchSpace,
    Slo,
    empty_search_reason,
    perf_predictor,
    recommend,
    unmet_slos,
)


@pytest.fixture(scope="module")
def perf(catalog: Catalog) -> PerformanceModel:
    return get_performance_model(catalog)


def test_an_impossible_ttft_slo_is_named_with_the_best_achievable(
    catalog: Catalog, perf: PerformanceModel
) -> None:
    request = RecommendRequest(
        model="meta-llama/Llama-3.1-8B-Instruct",
        input_len=1024,
        output_len=128,
        demand=Demand(concurrency=4),
        slo=Slo(ttft_p99_ms=1, tpot_p99_ms=1000),
        search=SearchSpace(instances=("g6e.xlarge", "g6e.12xlarge"), max_nodes=1),
    )
    result = recommend(catalog, request, perf_predictor(catalog, request, perf))
    assert not result.ranked and result.rejected
    lines = unmet_slos(result)
    assert len(lines) == 1, lines  # the TPOT SLO is met by some candidate: not named
    line = lines[0]
    assert line.startswith("p99 TTFT <= 1 ms cannot be met: the best of ")
    best = min(r.lowest_ttft_ms_p99 for r in result.rejected if r.lowest_ttft_ms_p99 is not None)
    assert f"predicts {best:,.0f} ms even at the lowest load" in line
    assert best > 1


def test_filters_that_hold_no_instance_together_are_a_sentence(
    catalog: Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    search = SearchSpace(gpus=("H100-SXM",), instances=("g6e.xlarge",))
    reason = empty_search_reason(catalog, search)
    assert reason is not None and "none" not in reason
    assert "GPUs H100-SXM" in reason and "instances g6e.xlarge (of L40S): 1 instance" in reason
    assert empty_search_reason(catalog, SearchSpace(instances=("g6e.xlarge",))) is None
    code = main(
        [
            "recommend", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--input-len", "512",
            "--output-len", "128", "--concurrency", "4", "--gpu", "H100-SXM",
            "--instance", "g6e.xlarge",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "no instance passes these filters together" in out, out
    assert "GPUs each" not in out
