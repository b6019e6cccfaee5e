"""Recommendation: the cheapest configurations that meet the SLOs, and why the others lose.

By job: :mod:`~planner.recommend.request` (what is asked and answered),
:mod:`~planner.recommend.capacity` (the load one replica carries inside the SLO, memoised),
:mod:`~planner.recommend.search` (layouts x engine settings, bounded, ranked),
:mod:`~planner.recommend.costing` (replicas and money, with :mod:`planner.cost`),
:mod:`~planner.recommend.analysis` (Pareto frontiers, sensitivity).

    request = RecommendRequest(model=..., input_len=2048, output_len=512,
                               demand=Demand(avg_rate_rps=1, peak_rate_rps=2),
                               slo=Slo(ttft_p99_ms=3000, tpot_p99_ms=100))
    result = recommend(catalog, request, perf_predictor(catalog, request))
    result.best, result.rejected
"""

from planner.recommend.analysis import (
    DISAGGREGATION_LOAD_FACTORS,
    SENSITIVITY_FACTORS,
    DisaggregationPoint,
    SensitivityRow,
    disaggregation_curve,
    pareto_cost_vs_latency,
    pareto_front,
    pareto_throughput_vs_interactivity,
    sensitivity,
    unmet_slos,
)
from planner.recommend.capacity import (
    CAPACITY_CACHE,
    CapacityCache,
    CapacityResult,
    RateSearchResult,
    max_rate_meeting_slo,
    perf_predictor,
    search_capacity,
)
from planner.recommend.request import (
    DISAGGREGATION_MODES,
    RANKING_COLUMNS,
    Demand,
    Disaggregation,
    PredictKind,
    Predictor,
    Recommendation,
    RecommendationResult,
    RecommendRequest,
    Rejected,
    SearchSpace,
    Slo,
    ranking_rows,
    rejected_rows,
)
from planner.recommend.search import (
    empty_search_reason,
    engine_grid,
    filtered_instances,
    recommend,
)

__all__ = [
    "CAPACITY_CACHE",
    "DISAGGREGATION_LOAD_FACTORS",
    "DISAGGREGATION_MODES",
    "RANKING_COLUMNS",
    "SENSITIVITY_FACTORS",
    "CapacityCache",
    "CapacityResult",
    "Demand",
    "Disaggregation",
    "DisaggregationPoint",
    "PredictKind",
    "Predictor",
    "RateSearchResult",
    "RecommendRequest",
    "Recommendation",
    "RecommendationResult",
    "Rejected",
    "SearchSpace",
    "SensitivityRow",
    "Slo",
    "disaggregation_curve",
    "empty_search_reason",
    "engine_grid",
    "filtered_instances",
    "max_rate_meeting_slo",
    "pareto_cost_vs_latency",
    "pareto_front",
    "pareto_throughput_vs_interactivity",
    "perf_predictor",
    "ranking_rows",
    "recommend",
    "rejected_rows",
    "search_capacity",
    "sensitivity",
    "unmet_slos",
]
