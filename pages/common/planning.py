"""Cached calls into the planner, keyed on exactly what each depends on.

A widget change reruns the page; only the functions whose keys changed recompute. Keys are
strings and tuples (the catalog's file signature, the model id, the scenario's workload key),
never the large objects themselves, which are passed as ``_``-prefixed (unhashed) arguments.
"""

from __future__ import annotations

import copy
import json
import math

import pandas as pd
import streamlit as st

from pages.common.resources import (
    CatalogRef,
    ingestion_progress,
    measured_results,
    settings,
    user_results_key,
)
from pages.common.scenario import Scenario
from planner.catalog import Catalog, MeasuredResult, ModelCard
from planner.engine import EngineConfig
from planner.layouts import LayoutCandidate, enumerate_layouts
from planner.memory import KvOccupancy, kv_occupancy, max_concurrent_sequences
from planner.perf import PerformanceModel, Prediction, get_performance_model
from planner.perf.calibration import scenario_from_measured
from planner.perf.latency_stats import is_median
from planner.perf.model import fit_is_cached, performance_model_nowait
from planner.perf.validation import measured_metrics
from planner.recommend import (
    Demand,
    DisaggregationPoint,
    RecommendationResult,
    RecommendRequest,
    SearchSpace,
    SensitivityRow,
    Slo,
    disaggregation_curve,
    empty_search_reason,
    filtered_instances,
    perf_predictor,
    recommend,
    sensitivity,
)
from planner.runs import calibration_results
from planner.store import Store
from planner.verification import (
    move_rows,
    newest_run_id,
    prediction_moves,
    recommendation_scenarios,
    without_run,
)

#: Context lengths (tokens) the capacity curve is drawn at: powers of two from 256.
CONTEXT_POINTS = tuple(2**k for k in range(8, 21))


def search_space(scenario: Scenario) -> SearchSpace:
    """The scenario's filters as the recommender's search space."""
    return SearchSpace(
        providers=scenario.providers or None,
        regions=scenario.regions or None,
        pricing=scenario.pricing,
        precisions=scenario.precisions or ("bf16",),
        kv_cache_dtypes=(scenario.engine.kv_cache_dtype,),
        speculative=scenario.speculative,
    )


def scenario_instances(catalog: Catalog, scenario: Scenario) -> list[str]:
    """Instances of the scenario's providers with a price in its regions and pricing mode."""
    return sorted(filtered_instances(catalog, search_space(scenario)))


@st.cache_data(show_spinner=False, max_entries=64)
def _layouts(
    catalog_key: str,
    model_id: str,
    instances: tuple[str, ...],
    precisions: tuple[str, ...],
    engine: EngineConfig,
    _catalog: Catalog,
    _card: ModelCard,
) -> list[LayoutCandidate]:
    return enumerate_layouts(
        _catalog,
        _card,
        instances=list(instances),
        max_nodes=2,
        precisions=precisions,
        engine=engine,
    )


def all_layouts(ref: CatalogRef, scenario: Scenario, max_model_len: int) -> list[LayoutCandidate]:
    """Every layout (feasible or not) of the scenario's model on the scenario's instances,
    judged at the sidebar's engine settings and ``max_model_len``."""
    card = scenario.model_card(ref.catalog)
    return _layouts(
        ref.key,
        scenario.model_id,
        tuple(scenario_instances(ref.catalog, scenario)),
        scenario.precisions or ("bf16",),
        scenario.engine.model_copy(update={"max_model_len": max_model_len}),
        ref.catalog,
        card,
    )


def feasible_layouts(
    ref: CatalogRef, scenario: Scenario, max_model_len: int
) -> list[LayoutCandidate]:
    return [layout for layout in all_layouts(ref, scenario, max_model_len) if layout.feasible]


def sequences_by_context(layout: LayoutCandidate, card: ModelCard) -> list[dict[str, int]]:
    """Maximum concurrent sequences of ``layout`` at each context length it can hold."""
    assert layout.memory is not None
    points: list[dict[str, int]] = []
    for tokens in CONTEXT_POINTS:
        if tokens > layout.memory.max_model_len * 2 and points:
            break
        count = max_concurrent_sequences(
            layout.memory, tokens, model=card, cap_at_max_num_seqs=False
        )
        if count < 1:
            break
        points.append({"context_tokens": tokens, "max_sequences": count})
    return points


@st.cache_data(show_spinner=False, max_entries=512)
def _occupancy(
    layout_key: tuple[object, ...],
    model_id: str,
    workload_key: tuple[object, ...],
    concurrency: int,
    _layout: LayoutCandidate,
    _card: ModelCard,
    _scenario: Scenario,
) -> KvOccupancy:
    assert _layout.memory is not None
    # Fewer Monte Carlo draws at high concurrency: each draw already averages many requests.
    draws = max(300, min(2000, int(40_000 / math.sqrt(concurrency))))
    return kv_occupancy(
        _layout.memory, _scenario.workload(), concurrency, model=_card, scenarios=draws
    )


def occupancy(
    layout: LayoutCandidate, card: ModelCard, scenario: Scenario, concurrency: int
) -> KvOccupancy:
    """``planner.memory.kv_occupancy`` of one replica of ``layout`` at ``concurrency``."""
    key = (
        layout.instance,
        layout.nodes,
        layout.tp,
        layout.pp,
        layout.precision,
        layout.kv_cache_dtype,
        layout.memory.model_dump_json() if layout.memory else "",
    )
    return _occupancy(
        key, scenario.model_id, scenario.workload_key(), concurrency, layout, card, scenario
    )


# ----- the performance model and the recommender ------------------------------------------------
@st.cache_resource(show_spinner=False, max_entries=4)
def _performance_model(
    catalog_key: str, results_key: str, _catalog: Catalog, _user_results: list[MeasuredResult]
) -> PerformanceModel:
    return get_performance_model(_catalog, _user_results)


@st.cache_resource(show_spinner=False, max_entries=8)
def _with_uploaded_model(
    base_key: str, model_id: str, config_json: str, _base: PerformanceModel, _catalog: Catalog
) -> PerformanceModel:
    extended = copy.copy(_base)
    extended.catalog = _catalog
    return extended


#: Session key of the Verify page's switch: simulated runs refit the model too.
FIT_SIMULATED = "fit_simulated_runs"


def fit_simulated() -> bool:
    """Whether simulated runs refit the model: the Verify page's switch, else the setting."""
    from pages.common.resources import settings

    return bool(st.session_state.get(FIT_SIMULATED, settings().fit_simulated_runs))


def fit_results(ref: CatalogRef, store: Store) -> list[MeasuredResult]:
    """The user's results the model fits on (simulated runs only when asked)."""
    user = (r for r in measured_results(ref, store) if r.origin == "user")
    return calibration_results(user, include_simulated=fit_simulated())


def performance_model(
    ref: CatalogRef, store: Store, scenario: Scenario
) -> tuple[PerformanceModel, str]:
    """The model fitted on the public results and the user's runs (refitted when runs
    change), and a key that names it.

    For a model uploaded in this session the fitted model is reused with a catalog that also
    holds the uploaded card (the fit does not depend on it).
    """
    user = fit_results(ref, store)
    key = f"{ref.key}:{user_results_key(user)}"
    if user and refitting(ref, store, user):
        # the fit with the new runs goes on in the background: the last one meanwhile
        user = _last_fit.get(ref.key, [])
        key = f"{ref.key}:{user_results_key(user)}"
    model = _performance_model(ref.key, key, ref.catalog, user)
    _last_fit[ref.key] = user
    if scenario.model_id.lower() in ref.catalog.models:
        return model, key
    card = scenario.model_card(ref.catalog)
    config_json = json.dumps(card.config, sort_keys=True)
    extended = _with_uploaded_model(
        key, scenario.model_id, config_json, model, scenario.catalog_with_model(ref.catalog)
    )
    return extended, f"{key}:{hash(config_json)}"


#: per catalog key, the user results of the last fit a page was given (what a page shows while
#: a refit on new runs goes on in the background)
_last_fit: dict[str, list[MeasuredResult]] = {}


def refitting(
    ref: CatalogRef, store: Store, user: list[MeasuredResult], *, wait: bool = True
) -> bool:
    """Whether the fit on ``user``'s runs is still to come: a page must not wait the ~10-30 s
    a refit on new runs takes. While run files are being ingested the refit waits for all of
    them; then it runs in the background (started here). ``wait``: give it the
    ``ingest_wait_s`` setting to land first (the page's model does; a notice asked after it
    in the same run does not wait again)."""
    progress = ingestion_progress(store)
    if progress is not None and progress.running:
        return not fit_is_cached(ref.catalog, user)
    wait_s = settings().ingest_wait_s if wait else 0.0
    return performance_model_nowait(ref.catalog, user, wait_s=wait_s) is None


def refit_pending(ref: CatalogRef, store: Store) -> int:
    """Runs whose fit is still in the background (0 once the model shown has them)."""
    user = [r for r in measured_results(ref, store) if r.origin == "user"]
    progress = ingestion_progress(store)
    if progress is not None and progress.running:
        return 0  # the ingestion's own notice says what is coming
    if not user or not refitting(ref, store, user, wait=False):
        return 0
    return max(len(user) - len(_last_fit.get(ref.key, [])), 1)


def search_inputs(
    ref: CatalogRef, store: Store, scenario: Scenario
) -> tuple[str, str, Catalog, PerformanceModel, RecommendRequest]:
    """What a cached search of the scenario takes, in the order the cached functions take it:
    the model's key, the request as JSON (the cache keys), the catalog with the scenario's
    model, the fitted model and the request."""
    model, model_key = performance_model(ref, store, scenario)
    request = recommend_request(scenario)
    catalog = scenario.catalog_with_model(ref.catalog)
    return model_key, request.model_dump_json(), catalog, model, request


def recommend_request(scenario: Scenario) -> RecommendRequest:
    """The scenario as the recommender's request (one engine setting a layout: vLLM's
    256 sequences and 8,192 batched tokens, one instance a replica)."""
    workload = scenario.workload()
    if scenario.load_mode == "concurrency":
        demand = Demand(
            concurrency=max(1, round(scenario.load_peak)),
            avg_concurrency=scenario.load_avg,
            utilisation=scenario.utilisation,
        )
    else:
        demand = Demand(
            avg_rate_rps=scenario.load_avg,
            peak_rate_rps=scenario.load_peak,
            utilisation=scenario.utilisation,
        )
    search = search_space(scenario).model_copy(
        update={"max_nodes": 1, "max_num_seqs": (256,), "max_num_batched_tokens": (8192,)}
    )
    fixed = workload.input_len.kind == "fixed" and workload.output_len.kind == "fixed"
    return RecommendRequest(
        model=scenario.model_id,
        input_len=max(1, round(workload.input_len.mean())),
        output_len=max(1, round(workload.output_len.mean())),
        input_dist=None if fixed else workload.input_len,
        output_dist=None if fixed else workload.output_len,
        prefix_share=workload.prefix_share,
        spec_accept_len=scenario.spec_accept_len,
        demand=demand,
        slo=Slo(
            ttft_p99_ms=scenario.slo_ttft_ms,
            tpot_p99_ms=scenario.slo_tpot_ms,
            kv_occupancy_max=scenario.kv_headroom,
        ),
        search=search,
        engine=scenario.engine,
        disaggregation=scenario.disaggregation,
    )


@st.cache_data(show_spinner=False, max_entries=32)
def _recommendations(
    model_key: str,
    request_json: str,
    _catalog: Catalog,
    _model: PerformanceModel,
    _request: RecommendRequest,
) -> RecommendationResult:
    # The recommender's own capacity cache is keyed on what predictions depend on (model fit,
    # hardware, layout, workload, SLO): a change of price, region, pricing or utilisation
    # re-ranks without a new prediction.
    return recommend(_catalog, _request, perf_predictor(_catalog, _request, _model))


def recommendations(ref: CatalogRef, store: Store, scenario: Scenario) -> RecommendationResult:
    """``planner.recommend.recommend`` for the scenario."""
    # A background ingestion pass holds off meanwhile: a large one starting with this page
    # (a team's runs folder on a fresh store) begins once the search is done; a small one the
    # page waits for runs at once.
    with store.ingest_job.foreground():
        return _recommendations(*search_inputs(ref, store, scenario))


def filters_conflict(ref: CatalogRef, scenario: Scenario) -> str | None:
    """The sentence ``recommend`` prints when the scenario's filters hold no instance together
    (each filter and what it alone allows), None when some instance passes them."""
    return empty_search_reason(
        scenario.catalog_with_model(ref.catalog), recommend_request(scenario).search
    )


# ----- predicted against measured ---------------------------------------------------------------
def _prediction_points(
    index: int, result: MeasuredResult, p: Prediction
) -> list[dict[str, object]]:
    """The prediction with the statistic the measured row reports (as ``planner.perf.validation``
    compares them): output tok/s; mean or p50 TTFT; p50 TPOT or mean ITL (a median read off
    vLLM's histogram is shown against the predicted median)."""
    measured = measured_metrics(result)
    ttft = "p50" if is_median(result.ttft_stat) else "mean"
    tpot_p50 = is_median(result.itl_stat)
    predicted = {
        "output_tok_per_s": (p.output_tok_per_s, p.output_tok_per_s_low, p.output_tok_per_s_high),
        "ttft": (
            getattr(p, f"ttft_ms_{ttft}"),
            getattr(p, f"ttft_ms_{ttft}_low"),
            getattr(p, f"ttft_ms_{ttft}_high"),
        ),
        "tpot": (p.tpot_ms_p50, p.tpot_ms_p50_low, p.tpot_ms_p50_high)
        if tpot_p50
        else (p.itl_ms_mean, math.nan, math.nan),
        # where the row publishes its p99s (planner.perf.validation.P99_METRICS)
        "ttft_p99": (p.ttft_ms_p99, p.ttft_ms_p99_low, p.ttft_ms_p99_high),
        "tpot_p99": (p.tpot_ms_p99, p.tpot_ms_p99_low, p.tpot_ms_p99_high),
    }
    metric_names = {
        "output_tok_per_s": "output_tok_per_s",
        "ttft": "ttft_ms",
        "tpot": "itl_ms",
        "ttft_p99": "ttft_p99_ms",
        "tpot_p99": "tpot_p99_ms",
    }
    label = (
        f"{result.engine} {result.model} {result.precision} {result.num_gpus}x{result.gpu} "
        f"TP{result.tp} PP{result.pp}, {result.input_len}/{result.output_len}, {result.load}"
    )
    return [
        {
            "row": index,
            "metric": metric_names[name],
            "gpu": result.gpu,
            "label": label,
            "measured": value,
            "predicted": predicted[name][0],
            "low": predicted[name][1],
            "high": predicted[name][2],
            "confidence": p.confidence,
        }
        for name, value in measured.items()
    ]


@st.cache_data(show_spinner=False, max_entries=4)
def _predicted_vs_measured(
    model_key: str, _model: PerformanceModel, _results: list[MeasuredResult]
) -> pd.DataFrame:
    rows: list[dict[str, object]] = []
    scenarios = [scenario_from_measured(r) for r in _results]
    for index, (result, prediction) in enumerate(
        zip(_results, _model.predict_many(scenarios), strict=True)
    ):
        if isinstance(prediction, Prediction):
            rows.extend(_prediction_points(index, result, prediction))
    columns = [
        "row",
        "metric",
        "gpu",
        "label",
        "measured",
        "predicted",
        "low",
        "high",
        "confidence",
    ]
    return pd.DataFrame(rows, columns=columns)


def predicted_vs_measured(
    ref: CatalogRef, store: Store, scenario: Scenario, results: list[MeasuredResult]
) -> pd.DataFrame:
    """Every measured result next to the model's prediction of it (the model was fitted on
    them: in-sample). ``row`` is the result's index in ``results``."""
    model, model_key = performance_model(ref, store, scenario)
    return _predicted_vs_measured(f"{model_key}:{len(results)}", model, results)


# ----- what the latest verification run changed ---------------------------------------------------
@st.cache_data(show_spinner=False, max_entries=8)
def _latest_run_moves(
    model_key: str,
    run_id: str,
    request_json: str,
    _catalog: Catalog,
    _user: list[MeasuredResult],
    _result: RecommendationResult,
    _request: RecommendRequest,
) -> pd.DataFrame:
    before = get_performance_model(_catalog, without_run(_user, run_id))
    after = get_performance_model(_catalog, _user)
    scenarios = recommendation_scenarios(rec.plan for rec in _result.ranked[:10])
    moves = prediction_moves(before, after, scenarios, min_change_pct=0.5)
    return pd.DataFrame(move_rows(moves))


def latest_run_moves(
    ref: CatalogRef, store: Store, scenario: Scenario, result: RecommendationResult
) -> tuple[str | None, pd.DataFrame]:
    """The newest verification run and how the Plan page's top predictions moved when the
    model refitted on it (before = fitted without that run)."""
    user = fit_results(ref, store)
    run_id = newest_run_id(user)
    if run_id is None:
        return None, pd.DataFrame()
    _, model_key = performance_model(ref, store, scenario)
    request = recommend_request(scenario)
    frame = _latest_run_moves(
        model_key, run_id, request.model_dump_json(), ref.catalog, user, result, request
    )
    return run_id, frame


@st.cache_data(show_spinner=False, max_entries=16)
def _sensitivity(
    model_key: str,
    request_json: str,
    change_pct: float,
    _catalog: Catalog,
    _model: PerformanceModel,
    _request: RecommendRequest,
    _result: RecommendationResult,
) -> list[SensitivityRow]:
    predictor = perf_predictor(_catalog, _request, _model)
    return sensitivity(_catalog, _request, predictor, change_pct=change_pct, base=_result)


def plan_sensitivity(
    ref: CatalogRef,
    store: Store,
    scenario: Scenario,
    result: RecommendationResult,
    change_pct: float,
) -> list[SensitivityRow]:
    """``planner.recommend.sensitivity`` of the scenario's recommendation (tornado data)."""
    model_key, request_json, catalog, model, request = search_inputs(ref, store, scenario)
    return _sensitivity(model_key, request_json, change_pct, catalog, model, request, result)


@st.cache_data(show_spinner=False, max_entries=16)
def _disaggregation_points(
    model_key: str,
    request_json: str,
    _catalog: Catalog,
    _model: PerformanceModel,
    _request: RecommendRequest,
) -> list[DisaggregationPoint]:
    predictor = perf_predictor(_catalog, _request, _model)
    return disaggregation_curve(_catalog, _request, predictor)


def disaggregation_points(
    ref: CatalogRef, store: Store, scenario: Scenario
) -> list[DisaggregationPoint]:
    """``planner.recommend.disaggregation_curve`` of the scenario: the best aggregated and
    disaggregated plans' $/M output tokens at a few multiples of its peak rate."""
    return _disaggregation_points(*search_inputs(ref, store, scenario))
