"""Recommendation over the real catalog and the real fitted performance model."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from planner.catalog import Catalog
from planner.engine import EngineConfig
from planner.perf.model import PerformanceModel, get_performance_model
from planner.perf.scenario import Scenario
from planner.plan import Plan, read_plan
from planner.recommend import (
    CapacityCache,
    Demand,
    RecommendRequest,
    SearchSpace,
    Slo,
    max_rate_meeting_slo,
    pareto_cost_vs_latency,
    pareto_throughput_vs_interactivity,
    perf_predictor,
    ranking_rows,
    recommend,
    sensitivity,
)
from planner.recommend.search import SHORTLIST
from planner.recommend_export import write_csv, write_html
from planner.vllm_command import vllm_serve_command
from planner.workload import LengthDistribution

LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"


@pytest.fixture(scope="module")
def perf(catalog: Catalog) -> PerformanceModel:
    return get_performance_model(catalog)


def _request(**search: object) -> RecommendRequest:
    return RecommendRequest(
        model=LLAMA_70B,
        input_len=2048,
        output_len=512,
        demand=Demand(avg_rate_rps=1.0, peak_rate_rps=2.0, spare_replicas=1),
        slo=Slo(ttft_p99_ms=5000, tpot_p99_ms=150),
        search=SearchSpace(**{"providers": ("aws",), "regions": ("us-east-1",), **search}),
    )


def test_top_choice_beats_the_naive_biggest_gpu_tp_everything(
    catalog: Catalog, perf: PerformanceModel
) -> None:
    request = _request()
    result = recommend(
        catalog, request, perf_predictor(catalog, request, perf), cache=CapacityCache()
    )
    assert result.best is not None
    # The naive choice: the biggest GPU AWS sells (B200, p6-b200.48xlarge), TP over all 8.
    naive_request = _request(instances=("p6-b200.48xlarge",), precisions=("bf16",))
    naive = recommend(catalog, naive_request, perf_predictor(catalog, naive_request, perf))
    tp8 = [r for r in naive.ranked if r.tp == 8] or [
        r for r in naive.rejected if r.tp == 8 and r.pp == 1
    ]
    assert tp8, "the naive layout must be evaluated"
    naive_cost = next(
        (r.usd_per_million_output_tokens for r in naive.ranked if r.tp == 8),
        None,
    )
    if naive_cost is not None:
        assert result.best.usd_per_million_output_tokens < naive_cost
    assert result.best.usd_per_hour < 113.9328 * 2  # what TP8 + one spare replica costs


def test_small_catalog_pins_why_tp_over_the_whole_instance_loses(
    catalog: Catalog, perf: PerformanceModel
) -> None:
    """On one p5.48xlarge (8 x H100, NVLink): a TP=8 replica serves the load, but the spare
    replica then costs a second instance. Smaller replicas (TP=4, DP=2) fit in one instance,
    spare included, so the bill halves: the naive layout loses on replica granularity. (A peak
    of 1 req/s of 2,048-token prompts: one TP=4 replica carries it inside the SLO.)"""
    request = _request(instances=("p5.48xlarge",), precisions=("bf16",)).model_copy(
        update={"demand": Demand(avg_rate_rps=0.5, peak_rate_rps=1.0, spare_replicas=1)}
    )
    result = recommend(catalog, request, perf_predictor(catalog, request, perf))
    best = result.best
    assert best is not None and best.instance == "p5.48xlarge"
    assert best.tp < 8 and best.dp >= 2 and best.instances_total == 1
    assert best.usd_per_hour == pytest.approx(55.04)
    tp8 = [r for r in result.rejected if r.tp == 8 and r.pp == 1]
    assert tp8, "TP=8 keeps its reason"
    assert all(re.search(r"\$|same instance|SLO", r.reason) for r in tp8)


def test_a_change_of_price_or_utilisation_reranks_without_new_predictions(
    catalog: Catalog, perf: PerformanceModel
) -> None:
    cache = CapacityCache()
    request = _request(instances=("g6e.12xlarge", "g6e.48xlarge", "p5.48xlarge"))
    predictor = perf_predictor(catalog, request, perf)
    first = recommend(catalog, request, predictor, cache=cache)
    assert first.evaluations > 0
    searched = {kind: n for kind, n in cache.misses_by_kind.items() if kind != "verified"}
    busier = request.model_copy(
        update={"demand": request.demand.model_copy(update={"utilisation": 0.9})}
    )
    second = recommend(catalog, busier, predictor, cache=cache)
    # no capacity is searched again; at most a layout that newly heads the shortlist is
    # simulated (the cheapest layout of an instance can change with the utilisation)
    assert {k: n for k, n in cache.misses_by_kind.items() if k != "verified"} == searched
    assert second.evaluations <= SHORTLIST
    assert second.best is not None and first.best is not None
    assert second.best.usd_per_million_output_tokens != first.best.usd_per_million_output_tokens
    spot = request.model_copy(
        update={"search": request.search.model_copy(update={"pricing": "spot"})}
    )
    assert recommend(catalog, spot, predictor, cache=cache).evaluations <= SHORTLIST
    assert {k: n for k, n in cache.misses_by_kind.items() if k != "verified"} == searched


def test_impossible_scenarios_return_reasons_not_errors(
    catalog: Catalog, perf: PerformanceModel
) -> None:
    too_big = RecommendRequest(
        model="meta-llama/Llama-3.1-405B-Instruct",
        input_len=2048,
        output_len=512,
        demand=Demand(avg_rate_rps=1.0),
        search=SearchSpace(instances=("g6.xlarge", "g5.2xlarge"), max_nodes=1),
    )
    result = recommend(catalog, too_big, perf_predictor(catalog, too_big, perf))
    assert result.ranked == []
    assert result.rejected and all("weights" in r.reason for r in result.rejected)

    too_fast = _request(instances=("g6e.12xlarge",)).model_copy(
        update={"slo": Slo(ttft_p99_ms=1.0, tpot_p99_ms=0.5)}
    )
    result = recommend(catalog, too_fast, perf_predictor(catalog, too_fast, perf))
    assert result.ranked == []
    assert any("> SLO" in r.reason for r in result.rejected)


def test_ranked_rows_carry_costs_latencies_and_the_command(
    catalog: Catalog, perf: PerformanceModel, tmp_path: Path
) -> None:
    request = _request(instances=("g6e.12xlarge", "g6e.48xlarge", "p5.48xlarge"))
    predictor = perf_predictor(catalog, request, perf)
    result = recommend(catalog, request, predictor)
    rows = ranking_rows(result)
    assert rows and [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    costs = [r["usd_per_million_output_tokens"] for r in rows]
    assert costs == sorted(costs)
    top = rows[0]
    assert top["vllm_command"].startswith(f"vllm serve {LLAMA_70B} --tensor-parallel-size")
    assert top["confidence"] in {"measured nearby", "interpolated", "extrapolated"}
    assert top["pred_ttft_ms_p99"] <= 5000 and top["pred_tpot_ms_p99"] <= 150
    assert top["price_source"] and top["price_as_of"]
    assert pareto_cost_vs_latency(result) and pareto_throughput_vs_interactivity(result)

    # the typed plan: what the Verify page runs is what was predicted, and it survives JSON
    best = result.ranked[0]
    plan = best.plan
    assert Plan.model_validate(plan.model_dump(mode="json")) == plan
    assert read_plan(json.loads(plan.model_dump_json())) == plan
    assert (plan.gpu, plan.tp, plan.pp, plan.replicas) == (
        best.gpu,
        best.tp,
        best.pp,
        best.replicas,
    )
    assert plan.engine == best.engine_settings and plan.engine.is_resolved
    assert plan.price is not None and plan.price.source == best.price_source
    assert plan.cost is not None and plan.cost.usd_per_hour == best.usd_per_hour
    assert vllm_serve_command(plan.vllm_config()) == best.vllm_command
    again = perf.predict(plan.scenario())
    assert plan.prediction is not None
    assert again.ttft_ms_p99 == plan.prediction.ttft_ms_p99 == best.pred_ttft_ms_p99
    assert again.output_tok_per_s == best.pred_output_tok_per_s_per_replica

    # a plan whose p99 interval reaches above an SLO its point meets says so (and still ranks)
    slo = request.slo
    for rec, row in zip(result.ranked, rows, strict=True):
        for name, high, limit in (
            ("TTFT", rec.pred_ttft_ms_p99_high, slo.ttft_p99_ms),
            ("TPOT", rec.pred_tpot_ms_p99_high, slo.tpot_p99_ms),
        ):
            at_risk = limit is not None and high is not None and high > limit
            assert any(f"p99 {name}" in s for s in rec.slo_straddles) == at_risk
        assert row["slo_straddle"] == "; ".join(rec.slo_straddles)

    csv = pd.read_csv(write_csv(result, tmp_path / "plan.csv"))
    assert list(csv["instance"]) == [r["instance"] for r in rows]
    assert "slo_straddle" in csv.columns
    page = write_html(result, catalog, tmp_path / "plan.html").read_text()
    assert "Sources and dates" in page and "Why the others were ruled out" in page
    assert not re.search(r"<script[^>]+src=", page)

    rows = sensitivity(catalog, request, predictor, change_pct=20, base=result)
    factors = {(r.factor, r.change_pct) for r in rows}
    assert ("price", 20.0) in factors and ("output_len", -20.0) in factors
    price_up = next(r for r in rows if r.factor == "price" and r.change_pct == 20.0)
    assert price_up.delta_pct == pytest.approx(20.0, abs=0.5)


def test_cli_prints_json_with_the_documented_keys() -> None:
    out = subprocess.run(
        [
            sys.executable, "-m", "planner", "recommend", "--model", LLAMA_70B,
            "--input-len", "2048", "--output-len", "512", "--rate", "1", "--peak-rate", "2",
            "--slo-ttft-p99-ms", "5000", "--slo-tpot-p99-ms", "150", "--provider", "aws",
            "--region", "us-east-1", "--gpu", "L40S", "--json",
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    keys = {
        "instance", "nodes", "tp", "pp", "replicas", "usd_per_hour",
        "usd_per_million_output_tokens", "pred_ttft_ms_p99", "pred_tpot_ms_p99", "vllm_command",
    }  # fmt: skip
    assert payload["ranked"] and keys <= set(payload["ranked"][0])
    assert all("reason" in r for r in payload["rejected"])
    top = read_plan(payload["ranked"][0]["plan"])  # what `import --plan FILE#1` reads
    assert top is not None and top.gpu == "L40S" and top.tp == payload["ranked"][0]["tp"]


def test_cli_bad_input_is_one_line_naming_the_field() -> None:
    out = subprocess.run(
        [
            sys.executable, "-m", "planner", "recommend", "--model", LLAMA_70B,
            "--input-len", "-5", "--output-len", "512", "--rate", "1",
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip().startswith("error: --input-len=-5")
    assert "Traceback" not in out.stderr


def test_a_search_that_judges_no_layout_says_why(catalog: Catalog) -> None:
    """DP-attention 3 divides no instance's GPUs: every shape is left out before it is judged,
    and the rejection list must not be empty."""
    from planner.commands.recommend import no_layout_reason

    request = _request(gpus=("L40S",)).model_copy(
        update={"engine": EngineConfig.of(engine="sglang", data_parallel_size=3)}
    )
    reason = no_layout_reason(catalog, request)
    assert reason.startswith("no layout to judge: --attention-dp=3 must divide")
    assert "have 1, 4, 8 GPUs each" in reason
    out = subprocess.run(
        [
            sys.executable, "-m", "planner", "recommend", "--model", LLAMA_70B,
            "--input-len", "2048", "--output-len", "512", "--rate", "1", "--provider", "aws",
            "--gpu", "L40S", "--engine", "sglang", "--attention-dp", "3",
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "--attention-dp=3 must divide the GPUs of an instance" in out.stdout


def test_concurrency_demand_buys_replicas_that_hold_it_inside_the_slo(
    catalog: Catalog, perf: PerformanceModel
) -> None:
    request = RecommendRequest(
        model=LLAMA_70B,
        input_len=2048,
        output_len=512,
        demand=Demand(concurrency=48, spare_replicas=0),
        slo=Slo(ttft_p99_ms=3000, tpot_p99_ms=100),
        search=SearchSpace(instances=("p5.48xlarge", "g6e.12xlarge"), precisions=("bf16",)),
    )
    result = recommend(catalog, request, perf_predictor(catalog, request, perf))
    assert result.ranked
    for rec in result.ranked:
        assert rec.pred_ttft_ms_p99 <= 3000 and rec.pred_tpot_ms_p99 <= 100
        assert rec.replicas >= 1
    fewer = request.model_copy(
        update={"demand": request.demand.model_copy(update={"concurrency": 8})}
    )
    smaller = recommend(catalog, fewer, perf_predictor(catalog, fewer, perf))
    assert smaller.best is not None and result.best is not None
    assert smaller.best.usd_per_hour <= result.best.usd_per_hour


def test_max_rate_meeting_slo_is_the_edge_of_the_slo(perf: PerformanceModel) -> None:
    base = Scenario(
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpu="L40S",
        input_len=1024,
        output_len=256,
        load="rate",
        request_rate=1.0,
        num_requests=300,
    )
    tight = max_rate_meeting_slo(perf, base, Slo(ttft_p99_ms=1500, tpot_p99_ms=60))
    loose = max_rate_meeting_slo(perf, base, Slo(ttft_p99_ms=6000, tpot_p99_ms=200))
    assert 0 < tight.max_rate <= loose.max_rate <= loose.saturation_rate
    assert tight.prediction is not None
    assert tight.prediction.ttft_ms_p99 <= 1500 and tight.prediction.tpot_ms_p99 <= 60
    assert tight.limited_by in ("ttft", "tpot")
    over = perf.predict(base.model_copy(update={"request_rate": tight.max_rate * 1.25}))
    assert over.ttft_ms_p99 > 1500 or over.tpot_ms_p99 > 60
    assert tight.evaluations <= 14


# ----- judged at the plan's context, within the KV headroom -------------------------------------
def _search(catalog: Catalog, perf: PerformanceModel, request: RecommendRequest) -> Any:
    return recommend(
        catalog, request, perf_predictor(catalog, request, perf), cache=CapacityCache()
    )


def test_layouts_are_judged_at_the_plans_context_and_the_command_states_it(
    catalog: Catalog, perf: PerformanceModel
) -> None:
    """Llama-3.1-70B on AWS single-node layouts: every request is 2,560 tokens, so no layout
    is ruled out for a 131,072-token sequence nobody sends; the vllm serve line says 2,560."""
    request = _request(max_nodes=1)
    result = _search(catalog, perf, request)
    assert result.ranked
    assert not [r for r in result.rejected if "131,072-token sequence" in r.reason]
    for rec in result.ranked:
        assert rec.plan.engine.max_model_len == 2560
        assert "--max-model-len 2560" in rec.vllm_command
    # a user's own max_model_len is what the layouts are judged at, and what is printed
    full = request.model_copy(update={"engine": EngineConfig(max_model_len=131072)})
    at_full = _search(catalog, perf, full)
    assert [r for r in at_full.rejected if "131,072-token sequence" in r.reason]
    assert all("--max-model-len 131072" in rec.vllm_command for rec in at_full.ranked)
    # lengths drawn from distributions: the longest request the prediction sends
    spread = request.model_copy(
        update={
            "input_dist": LengthDistribution.lognormal(2048, 512),
            "output_dist": LengthDistribution.uniform(256, 768),
            "search": request.search.model_copy(update={"instances": ("p5.48xlarge",)}),
        }
    )
    longest = spread.workload.longest_request
    assert longest == LengthDistribution.lognormal(2048, 512).max() + 768
    (top, *_) = _search(catalog, perf, spread).ranked
    assert top.plan.engine.max_model_len == longest
    assert f"--max-model-len {longest}" in top.vllm_command


def test_no_ranked_plan_runs_its_kv_cache_past_the_headroom(
    catalog: Catalog, perf: PerformanceModel
) -> None:
    """The brief's 70B at 2 req/s on AWS: without headroom the fullest ranked plan runs its KV
    cache near the preemption trap at peak (p5.4xlarge, TP1 x PP2 FP8: 83% in the fit of
    2026-12-05, 98% in earlier fits); with a headroom below that no ranked plan passes it, and
    a candidate held back by a headroom says so."""
    request = _request()
    assert request.slo.kv_occupancy_max == 0.9  # the default headroom
    no_headroom = request.model_copy(
        update={"slo": request.slo.model_copy(update={"kv_occupancy_max": None})}
    )
    unchecked = _search(catalog, perf, no_headroom)
    peak = max(r.kv_occupancy_peak or 0.0 for r in unchecked.ranked)
    assert peak > 0.5
    headroom = round(peak - 0.05, 2)
    bounded = request.model_copy(
        update={"slo": request.slo.model_copy(update={"kv_occupancy_max": headroom})}
    )
    result = _search(catalog, perf, bounded)
    assert result.ranked
    for rec in result.ranked:
        assert rec.kv_occupancy_peak is not None and rec.kv_occupancy_peak <= headroom, rec.label
    tight = request.model_copy(
        update={"slo": request.slo.model_copy(update={"kv_occupancy_max": 0.05})}
    )
    held = _search(catalog, perf, tight)
    assert any("KV cache" in r.reason and "headroom 5%" in r.reason for r in held.rejected)


def test_a_shortlisted_capacity_the_simulation_refutes_is_lowered_not_rejected() -> None:
    """The steady-state estimate is checked by simulation at falling shares of it, down to
    half, then once halfway back to the share that failed. A stand-in predictor (no
    simulation: the steps are the subject here) meets the SLO up to ``meets`` req/s only."""
    from planner.perf.edge_search import EdgeHint
    from planner.perf.scenario import Prediction
    from planner.recommend.capacity import CapacityResult, verified_capacity

    asked: list[float] = []

    def check(meets: float) -> CapacityResult:
        return check_with(meets, None)

    def check_with(meets: float, hint: EdgeHint | None) -> CapacityResult:
        def predictor(layout: object, settings: object, kind: object, load: float) -> Prediction:
            asked.append(round(load, 3))
            return Prediction.model_construct(
                ttft_ms_p99=1000.0 if load <= meets else 9000.0,
                tpot_ms_p99=50.0,
                e2e_ms_p99=0.0,
                kv_occupancy_max=0.5,
            )

        estimate = CapacityResult(1.0, predictor(None, None, "rate", 1.0), None, "tpot")
        asked.clear()
        return verified_capacity(
            predictor,  # type: ignore[arg-type]
            None,  # type: ignore[arg-type]
            EngineConfig(),
            _request(),
            "rate",
            estimate,
            hint,
        )

    lowered = check(meets=0.56)
    assert asked == [1.0, 0.94, 0.88, 0.8, 0.7, 0.6, 0.5, 0.55]
    assert lowered.max_load == pytest.approx(0.55) and lowered.reason is None
    refuted = check(meets=0.0)
    assert refuted.max_load == 0.0
    assert refuted.reason is not None and "simulated down to 0.5 req/s" in refuted.reason

    # The step the last verification passed at (or that none did) is where the next one
    # looks after the estimate fails: the same result, in fewer simulations.
    assert (lowered.edge, refuted.edge) == (EdgeHint(6, None), EdgeHint(7, None))
    for meets, hint, simulated in [
        (0.56, EdgeHint(6, None), [1.0, 0.5, 0.6, 0.55]),  # passes there: one step back up
        (0.65, EdgeHint(6, None), [1.0, 0.5, 0.6, 0.7, 0.65]),  # the edge moved up
        (0.56, EdgeHint(3, None), [1.0, 0.8, 0.7, 0.6, 0.5, 0.55]),  # ... or down
        (0.0, EdgeHint(7, None), [1.0, 0.5]),  # none passed, none passes
        (2.0, EdgeHint(7, None), [1.0]),  # the estimate is always simulated first
    ]:
        plain = check(meets)
        hinted = check_with(meets, hint)
        assert [round(a, 3) for a in asked] == simulated, (meets, hint)
        assert (hinted.max_load, hinted.reason, hinted.edge) == (
            plain.max_load, plain.reason, plain.edge
        )  # fmt: skip


def test_a_layout_whose_instances_alone_cost_too_much_is_not_predicted(
    catalog: Catalog, perf: PerformanceModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The price of the fewest replica groups stands in for a layout's saturated bound until
    it could make the shortlist: the ranking is the one every bound computed gives, with fewer
    saturated predictions, and what is rejected that way says so."""
    from planner.recommend import search as search_module

    request = _request(providers=(), regions=())  # every provider: many 8-GPU instances
    cache = CapacityCache()
    lazy = recommend(catalog, request, perf_predictor(catalog, request, perf), cache=cache)
    predicted = cache.misses_by_kind["saturated"]
    monkeypatch.setattr(search_module, "usd_per_hour_floor", lambda *_: 0.0)
    every = CapacityCache()
    eager = recommend(catalog, request, perf_predictor(catalog, request, perf), cache=every)
    assert [r.model_dump() for r in lazy.ranked] == [r.model_dump() for r in eager.ranked]
    assert predicted < every.misses_by_kind["saturated"]
    alone = [r for r in lazy.rejected if "its instances alone cost at least" in r.reason]
    assert alone and len(lazy.rejected) == len(eager.rejected)


@pytest.mark.parametrize(
    "demand", [Demand(avg_rate_rps=1.0, peak_rate_rps=2.0), Demand(concurrency=32)]
)
def test_a_new_workload_searched_from_the_last_ones_edges_ranks_as_from_scratch(
    catalog: Catalog, perf: PerformanceModel, monkeypatch: pytest.MonkeyPatch, demand: Demand
) -> None:
    """After a search, a new output length or SLO starts each candidate's capacity search at
    the edge the last search found for it (CapacityCache.edge_hint): the ranking and the
    rejections are those of a search with an empty cache."""
    from planner.perf.steady_state import SteadyStateModel

    hinted: list[bool] = []
    for name in ("max_rate", "max_concurrency"):
        original = getattr(SteadyStateModel, name)

        def spy(self: Any, *args: Any, _original: Any = original, **kw: Any) -> Any:
            hinted.append(kw.get("hint") is not None)
            return _original(self, *args, **kw)

        monkeypatch.setattr(SteadyStateModel, name, spy)
    request = _request().model_copy(update={"demand": demand})
    cache = CapacityCache()
    recommend(catalog, request, perf_predictor(catalog, request, perf), cache=cache)
    assert hinted and not any(hinted)
    shorter = request.model_copy(update={"output_len": 448})
    tighter = request.model_copy(update={"slo": Slo(ttft_p99_ms=5000, tpot_p99_ms=90)})
    for changed in (shorter, tighter):
        hinted.clear()
        warm = recommend(catalog, changed, perf_predictor(catalog, changed, perf), cache=cache)
        # the rest: layouts not searched before, or whose last search found no edge (81 of
        # 165 capacity searches of the rate demand's shorter answers started from a hint in
        # the fit of 2026-12-05)
        assert sum(hinted) >= 0.4 * len(hinted) > 0
        cold = recommend(
            catalog, changed, perf_predictor(catalog, changed, perf), cache=CapacityCache()
        )
        assert [r.model_dump() for r in warm.ranked] == [r.model_dump() for r in cold.ranked]
        assert [r.model_dump() for r in warm.rejected] == [r.model_dump() for r in cold.rejected]


@pytest.mark.parametrize("kv_headroom", [None, 0.15])
def test_a_new_peak_concurrency_reuses_the_capacities_an_slo_bounds_below_it(
    catalog: Catalog, perf: PerformanceModel, kv_headroom: float | None
) -> None:
    """A closed loop's capacity is searched up to the demand's concurrency; where a latency
    SLO broke below that ceiling, a search up to another ceiling above the edge finds the same
    edge, so it is not searched again: the ranking and rejections equal an empty cache's (with
    a KV headroom too, whose capacities are searched again)."""
    slo = Slo(ttft_p99_ms=5000, tpot_p99_ms=150, kv_occupancy_max=kv_headroom)
    request = _request().model_copy(update={"demand": Demand(concurrency=32), "slo": slo})
    cache = CapacityCache()
    recommend(catalog, request, perf_predictor(catalog, request, perf), cache=cache)
    if kv_headroom is not None:  # the case is there: capacities the headroom binds
        assert any(r.limited_by == "kv" for r in cache._data.values())
    for peak in (48, 24, 4):
        changed = request.model_copy(update={"demand": Demand(concurrency=peak)})
        before = cache.misses_by_kind["slo"]
        warm = recommend(catalog, changed, perf_predictor(catalog, changed, perf), cache=cache)
        fresh = CapacityCache()
        cold = recommend(catalog, changed, perf_predictor(catalog, changed, perf), cache=fresh)
        assert [r.model_dump() for r in warm.ranked] == [r.model_dump() for r in cold.ranked]
        assert [r.model_dump() for r in warm.rejected] == [r.model_dump() for r in cold.rejected]
        searched = cache.misses_by_kind["slo"] - before
        if peak > 4 and kv_headroom is None:  # the edges here are below 24 in flight
            assert searched < 0.5 * fresh.misses_by_kind["slo"], (peak, searched)


def test_a_layout_beaten_on_its_own_instance_is_rejected_naming_the_cheaper_one(
    catalog: Catalog, perf: PerformanceModel
) -> None:
    """Each instance type and precision keeps its cheapest layout; another layout of it that
    meets the SLO is rejected with both prices and the layout that beat it (only the kept
    candidates are written out as recommendations)."""
    request = _request(instances=("p5.48xlarge", "p4d.24xlarge", "g6e.48xlarge"))
    result = recommend(catalog, request, perf_predictor(catalog, request, perf))
    beaten = [r for r in result.rejected if "on the same instance does it for" in r.reason]
    assert beaten
    kept = {(r.instance, r.precision, r.kv_cache_dtype) for r in result.ranked}
    for r in beaten:
        found = re.search(r"at \$([\d,.]+)/M .*TP(\d+) PP(\d+) .* for \$([\d,.]+)/M", r.reason)
        assert found, r.reason
        own, theirs = (float(found.group(i).replace(",", "")) for i in (1, 4))
        assert own >= theirs
        assert (int(found.group(2)), int(found.group(3))) != (r.tp, r.pp)
        assert (r.instance, r.precision, r.kv_cache_dtype) in kept
        assert "seqs" in r.engine_settings  # the settings it was costed with, resolved


def test_a_layout_beaten_only_by_one_the_simulation_refutes_is_ranked_in_its_place(
    catalog: Catalog, perf: PerformanceModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An instance's steady-state winner that the simulation refutes leaves the ranking, and
    the next layout of that instance and precision is simulated and ranked in its place; the
    layouts it beats name it (before: every other layout had been rejected as beaten by the
    refuted one, and the instance was not ranked at all). Which candidate the simulation
    refutes is the subject, so a wrapper around the real verification refutes the winner's
    layout; every other candidate is simulated for real."""
    from planner.recommend import search as search_module
    from planner.recommend.capacity import CapacityResult

    request = _request(instances=("g6e.48xlarge",), precisions=("fp8",))

    def config(rec: Any) -> tuple[Any, ...]:
        return (rec.instance, rec.precision, rec.kv_cache_dtype)

    first = recommend(
        catalog, request, perf_predictor(catalog, request, perf), cache=CapacityCache()
    )
    winner = first.ranked[0]
    real = search_module.verified_capacity

    def refuting(*args: Any) -> CapacityResult:
        layout, estimate = args[1], args[5]
        if (layout.tp, layout.pp, layout.attention_dp) == (winner.tp, winner.pp, 1):
            return CapacityResult(0.0, estimate.prediction, "refuted by the stand-in", "ttft")
        return real(*args)

    monkeypatch.setattr(search_module, "verified_capacity", refuting)
    again = recommend(
        catalog, request, perf_predictor(catalog, request, perf), cache=CapacityCache()
    )
    (runner_up,) = [r for r in again.ranked if config(r) == config(winner)]
    assert (runner_up.tp, runner_up.pp) != (winner.tp, winner.pp)
    assert runner_up.prediction_method == "simulation"
    assert runner_up.usd_per_million_output_tokens >= winner.usd_per_million_output_tokens
    refuted = [r for r in again.rejected if r.reason == "refuted by the stand-in"]
    assert refuted and all((r.tp, r.pp) == (winner.tp, winner.pp) for r in refuted)
    beaten = [r for r in again.rejected if "on the same instance does it for" in r.reason]
    assert beaten
    for r in beaten:
        assert f"TP{runner_up.tp} PP{runner_up.pp} on the same instance" in r.reason, r.reason
        assert (r.tp, r.pp) != (winner.tp, winner.pp)
