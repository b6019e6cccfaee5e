"""Recommendation: the cheapest configurations that meet the SLOs, and why the others lose.

The search, for one model, workload, demand and SLO:

1. every feasible layout of every catalog instance that passes the filters (provider, region,
   GPU, pricing mode), up to ``max_nodes`` instances per replica, for each precision and KV
   cache dtype asked for (``planner.layouts``); a layout that does not fit is rejected with
   the layouts module's reason;
2. for each layout and each point of a small grid of engine settings (max_num_seqs,
   max_num_batched_tokens, chunked prefill, prefix caching), the highest request rate one
   replica sustains with predicted p99 TTFT, p99 TPOT (and p99 E2E if asked) inside the SLO:
   a bisection over the rate, each step a performance-model prediction (``planner.perf``);
3. replicas = ceil(peak rate / max rate per replica) + spare replicas; instances, $/hour,
   $/M output and total tokens at the observed average utilisation (average rate over the
   capacity bought), monthly cost;
4. ranked by $/M output tokens; Pareto frontiers; every rejected candidate keeps its reason.

Rate searches are memoised on what they depend on (model, layout, precision, engine settings,
workload, SLO): a change of price, region, pricing mode, utilisation or demand re-ranks
without a single new prediction.
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.catalog import Catalog, Price, PricingMode
from planner.engine import EngineConfig
from planner.errors import InvalidInputError
from planner.input_checks import MAX_LOAD, MAX_REQUEST_TOKENS, MAX_SLO_MS, check_search_names
from planner.vllm_command import VllmServeConfig, vllm_serve_command
from planner.workload import LengthDistribution

HOURS_PER_MONTH = 730.0


# ----- inputs ------------------------------------------------------------------------------------
class Slo(BaseModel):
    model_config = ConfigDict(frozen=True)

    ttft_p99_ms: float | None = Field(default=None, gt=0, le=MAX_SLO_MS, allow_inf_nan=False)
    tpot_p99_ms: float | None = Field(default=None, gt=0, le=MAX_SLO_MS, allow_inf_nan=False)
    e2e_p99_ms: float | None = Field(default=None, gt=0, le=MAX_SLO_MS, allow_inf_nan=False)


class Demand(BaseModel):
    """The load to serve: an average and a peak request rate (req/s), or a concurrency."""

    model_config = ConfigDict(frozen=True)

    avg_rate_rps: float | None = Field(default=None, gt=0, le=MAX_LOAD, allow_inf_nan=False)
    peak_rate_rps: float | None = Field(default=None, gt=0, le=MAX_LOAD, allow_inf_nan=False)
    concurrency: int | None = Field(default=None, ge=1, le=MAX_LOAD)
    spare_replicas: int = Field(default=1, ge=0, le=1_000)
    #: observed average utilisation of the capacity bought; None: average rate / capacity.
    utilisation: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_load(self) -> Demand:
        if self.avg_rate_rps is None and self.concurrency is None:
            raise InvalidInputError(
                "demand", "neither rate nor concurrency", "give avg_rate_rps or concurrency"
            )
        peak, avg = self.peak_rate_rps, self.avg_rate_rps
        if peak is not None and avg is not None and peak < avg:
            raise InvalidInputError(
                "peak_rate_rps", self.peak_rate_rps, f">= avg_rate_rps ({self.avg_rate_rps})"
            )
        return self

    @property
    def peak(self) -> float | None:
        return self.peak_rate_rps or self.avg_rate_rps


class EngineSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False

    @property
    def label(self) -> str:
        parts = [f"seqs {self.max_num_seqs}", f"batch {self.max_num_batched_tokens} tok"]
        if not self.enable_chunked_prefill:
            parts.append("no chunked prefill")
        if self.enable_prefix_caching:
            parts.append("prefix caching")
        return ", ".join(parts)


class SearchSpace(BaseModel):
    model_config = ConfigDict(frozen=True)

    providers: tuple[str, ...] | None = None
    regions: tuple[str, ...] | None = None
    gpus: tuple[str, ...] | None = None
    instances: tuple[str, ...] | None = None
    pricing: PricingMode = "on_demand"
    max_nodes: int = Field(default=2, ge=1, le=16)
    precisions: tuple[str, ...] = ("bf16", "fp8")
    kv_cache_dtypes: tuple[str, ...] = ("auto",)
    max_num_seqs: tuple[int, ...] = (64, 256)
    max_num_batched_tokens: tuple[int, ...] = (2048, 8192)
    chunked_prefill: tuple[bool, ...] = (True,)
    prefix_caching: tuple[bool, ...] | None = None  # None: on only when the workload shares


class RecommendRequest(BaseModel):
    """What to plan for. ``input_len``/``output_len`` are the mean lengths (costs per request
    use them); ``input_dist``/``output_dist``, when given, are what the predictions sample."""

    model_config = ConfigDict(frozen=True)

    model: str
    input_len: int = Field(gt=0, le=MAX_REQUEST_TOKENS)
    output_len: int = Field(gt=0, le=MAX_REQUEST_TOKENS)
    input_dist: LengthDistribution | None = None
    output_dist: LengthDistribution | None = None
    prefix_share: float = Field(default=0.0, ge=0, lt=1, allow_inf_nan=False)
    demand: Demand
    slo: Slo = Slo()
    search: SearchSpace = SearchSpace()
    engine: str = "vllm"


# ----- what the performance model must provide ---------------------------------------------------
class PredictionLike(Protocol):
    output_tok_per_s: float
    total_tok_per_s: float
    ttft_ms_p99: float
    tpot_ms_p99: float
    e2e_ms_p99: float


#: (layout, engine settings, load kind, load) -> prediction of one replica. Kinds: "rate"
#: (req/s), "concurrency" (requests in flight), "saturation" (a full batch in flight, only
#: to bound throughput: may be simulated more coarsely).
Predictor = Callable[[Any, EngineSettings, str, float], Any]


# ----- outputs -----------------------------------------------------------------------------------
class Recommendation(BaseModel):
    rank: int = 0
    provider: str
    instance: str
    region: str
    pricing: str
    gpu: str
    nodes: int = Field(description="instances per replica group (TP x PP x DP of the layout)")
    gpus: int = Field(description="GPUs of one layout (all its replicas)")
    tp: int
    pp: int
    dp: int
    precision: str
    kv_cache_dtype: str
    engine_settings: EngineSettings
    replicas: int
    instances_total: int
    usd_per_hour: float
    usd_per_million_output_tokens: float
    usd_per_million_total_tokens: float
    usd_per_request: float
    monthly_usd: float
    utilisation: float
    max_rps_per_replica: float
    pred_output_tok_per_s_per_replica: float
    pred_ttft_ms_p99: float
    pred_ttft_ms_p99_low: float | None = None
    pred_ttft_ms_p99_high: float | None = None
    pred_tpot_ms_p99: float
    pred_tpot_ms_p99_low: float | None = None
    pred_tpot_ms_p99_high: float | None = None
    pred_e2e_ms_p99: float | None = None
    kv_occupancy_peak: float | None = None
    confidence: str = "extrapolated"
    far_from_data: bool = True
    vllm_command: str
    price_source: str
    price_as_of: str

    @property
    def label(self) -> str:
        return f"{self.instance} TP{self.tp} PP{self.pp} {self.precision}"


class Rejected(BaseModel):
    instance: str
    nodes: int
    tp: int
    pp: int
    dp: int
    precision: str
    kv_cache_dtype: str = "auto"
    engine_settings: str = ""
    reason: str


class RecommendationResult(BaseModel):
    request: RecommendRequest
    ranked: list[Recommendation]
    rejected: list[Rejected]
    evaluations: int = Field(description="performance-model predictions made (cache misses)")

    @property
    def best(self) -> Recommendation | None:
        return self.ranked[0] if self.ranked else None


# ----- the rate search ---------------------------------------------------------------------------
@dataclass(frozen=True)
class CapacityResult:
    """The highest load one replica sustains inside the SLO, and the prediction there."""

    max_load: float  # req/s (rate) or sequences (concurrency); 0 when even the least fails
    prediction: Any | None
    reason: str | None


def _violations(prediction: Any, slo: Slo) -> list[str]:
    broken = []
    if slo.ttft_p99_ms is not None and prediction.ttft_ms_p99 > slo.ttft_p99_ms:
        broken.append(f"p99 TTFT {prediction.ttft_ms_p99:,.0f} ms > SLO {slo.ttft_p99_ms:,.0f} ms")
    if slo.tpot_p99_ms is not None and prediction.tpot_ms_p99 > slo.tpot_p99_ms:
        broken.append(f"p99 TPOT {prediction.tpot_ms_p99:,.1f} ms > SLO {slo.tpot_p99_ms:,.1f} ms")
    if slo.e2e_p99_ms is not None and prediction.e2e_ms_p99 > slo.e2e_p99_ms:
        broken.append(f"p99 E2E {prediction.e2e_ms_p99:,.0f} ms > SLO {slo.e2e_p99_ms:,.0f} ms")
    return broken


def search_capacity(
    predict_at: Callable[[float], Any],
    slo: Slo,
    *,
    kind: Literal["rate", "concurrency"],
    lowest: float,
    highest: float,
    steps: int = 7,
) -> CapacityResult:
    """Bisection for the highest load meeting the SLO (latency grows with load).

    ``predict_at(load)`` returns a prediction. With no SLO at all the answer is the load at
    which throughput stops growing, approximated by ``highest``.
    """
    low_prediction = predict_at(lowest)
    broken = _violations(low_prediction, slo)
    if broken:
        unit = "req/s" if kind == "rate" else "concurrent requests"
        return CapacityResult(
            0.0, low_prediction, f"even at {lowest:g} {unit}: {'; '.join(broken)}"
        )
    high_prediction = predict_at(highest)
    if not _violations(high_prediction, slo):
        return CapacityResult(highest, high_prediction, None)
    good, good_prediction, bad = lowest, low_prediction, highest
    for _ in range(steps):
        if kind == "concurrency" and bad - good <= 1:
            break
        mid = math.sqrt(good * bad) if kind == "rate" else float(int((good + bad) / 2))
        prediction = predict_at(mid)
        if _violations(prediction, slo):
            bad = mid
        else:
            good, good_prediction = mid, prediction
    return CapacityResult(good, good_prediction, None)


class CapacityCache:
    """Memo of capacity searches keyed by everything a prediction depends on: the predictor
    (a refitted model is another predictor), the hardware (not the instance name: providers
    selling the same box share it), layout, engine settings, workload and SLO."""

    def __init__(self, max_entries: int = 50_000) -> None:
        self._lock = threading.Lock()
        self._data: dict[tuple[Any, ...], CapacityResult] = {}
        self.max_entries = max_entries
        self.misses = 0

    def get_or_compute(
        self, key: tuple[Any, ...], compute: Callable[[], CapacityResult]
    ) -> CapacityResult:
        with self._lock:
            if key in self._data:
                return self._data[key]
        result = compute()
        with self._lock:
            if len(self._data) >= self.max_entries:  # oldest first: dicts keep insertion order
                del self._data[next(iter(self._data))]
            self._data[key] = result
            self.misses += 1
        return result

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


CAPACITY_CACHE = CapacityCache()


# ----- the search --------------------------------------------------------------------------------
def filtered_instances(catalog: Catalog, search: SearchSpace) -> list[str]:
    names = []
    for name, inst in catalog.instances.items():
        if search.providers and inst.provider not in search.providers:
            continue
        if search.gpus and inst.gpu_id not in search.gpus:
            continue
        if search.instances and name not in search.instances:
            continue
        if not _prices(catalog, name, search):
            continue
        names.append(name)
    return names


def _prices(catalog: Catalog, instance: str, search: SearchSpace) -> list[Price]:
    return [
        p
        for p in catalog.prices_for(instance, pricing=search.pricing)
        if not search.regions or p.region in search.regions
    ]


def engine_grid(search: SearchSpace, prefix_share: float) -> list[EngineSettings]:
    prefix = search.prefix_caching
    if prefix is None:
        prefix = (True,) if prefix_share > 0 else (False,)
    return [
        EngineSettings(
            max_num_seqs=seqs,
            max_num_batched_tokens=tokens,
            enable_chunked_prefill=chunked,
            enable_prefix_caching=cache,
        )
        for seqs, tokens, chunked, cache in itertools.product(
            search.max_num_seqs, search.max_num_batched_tokens, search.chunked_prefill, prefix
        )
    ]


def recommend(
    catalog: Catalog,
    request: RecommendRequest,
    predictor: Predictor,
    *,
    layouts: Sequence[Any] | None = None,
    cache: CapacityCache = CAPACITY_CACHE,
) -> RecommendationResult:
    """Rank every candidate by $/M output tokens; keep every rejected one with its reason.

    ``predictor(layout, settings, kind, load)`` returns a performance prediction for one
    replica of ``layout`` at ``load`` (req/s for ``kind == "rate"``, sequences in flight for
    ``"concurrency"``). ``layouts`` defaults to ``planner.layouts.enumerate_layouts`` over the
    filtered instances.
    """
    from planner.layouts import enumerate_layouts

    card = catalog.model(request.model)
    search = request.search
    check_search_names(
        catalog,
        providers=search.providers,
        regions=search.regions,
        gpus=search.gpus,
        instances=search.instances,
        precisions=search.precisions,
    )
    if layouts is None:
        instances = filtered_instances(catalog, search)
        layouts = enumerate_layouts(
            catalog,
            card,
            instances=instances,
            max_nodes=search.max_nodes,
            precisions=search.precisions,
            kv_cache_dtypes=search.kv_cache_dtypes,
        )
    kind: Literal["rate", "concurrency"] = (
        "concurrency" if request.demand.concurrency is not None else "rate"
    )
    rejected: list[Rejected] = []
    misses_before = cache.misses
    grid = engine_grid(search, request.prefix_share)

    # Phase 1: one saturated prediction per layout (at the grid's largest batch) bounds what
    # the layout can cost at best; layouts are then searched cheapest bound first.
    widest = max(grid, key=lambda s: (s.max_num_seqs, s.max_num_batched_tokens))
    bounded: list[tuple[float, Any, dict[str, Any], CapacityResult]] = []
    for layout in _replica_layouts(layouts):
        base = _rejected_base(layout)
        if not layout.feasible:
            rejected.append(Rejected(**base, reason=layout.reason or "does not fit"))
            continue
        cheapest = min(p.usd_per_hour for p in _prices(catalog, layout.instance, search))
        if kind == "rate":
            saturated = cache.get_or_compute(
                ("saturated", *_prediction_key(catalog, predictor, request, layout, widest)),
                functools.partial(_saturated, predictor, layout, widest),
            )
        else:  # a closed loop is bounded by max_num_seqs: nothing to predict for the bound
            saturated = CapacityResult(float(widest.max_num_seqs), None, None)
        bound = _usd_per_hour_bound(request, layout, widest, saturated, cheapest, kind)
        bounded.append((bound, layout, base, saturated))
    bounded.sort(key=lambda item: item[0])

    # Phase 2: the exact SLO search over the engine grid, for as long as a layout can still
    # make the shortlist.
    ranked: list[Recommendation] = []
    best_per_configuration: dict[tuple[Any, ...], float] = {}
    searched_layouts: dict[int, tuple[Any, dict[str, Any], CapacityResult]] = {}

    def evaluate(
        layout: Any, base: dict[str, Any], saturated: CapacityResult, settings: EngineSettings
    ) -> None:
        capacity = cache.get_or_compute(
            (
                "slo",
                *_prediction_key(catalog, predictor, request, layout, settings),
                request.slo,
                kind,
                _concurrency_ceiling(request, settings) if kind == "concurrency" else None,
            ),
            functools.partial(_capacity, predictor, layout, settings, request, kind, saturated),
        )
        if capacity.reason is not None or capacity.prediction is None:
            rejected.append(
                Rejected(**base, engine_settings=settings.label, reason=capacity.reason or "")
            )
            return
        config = _configuration_key(layout)
        for price in _prices(catalog, layout.instance, search):
            rec = _costed(catalog, request, layout, settings, capacity, price, kind)
            ranked.append(rec)
            best_per_configuration[config] = min(
                rec.usd_per_hour, best_per_configuration.get(config, math.inf)
            )

    for bound, layout, base, saturated in bounded:
        config = _configuration_key(layout)
        shortlist = sorted(best_per_configuration.values())
        if len(shortlist) >= SHORTLIST and bound > shortlist[SHORTLIST - 1]:
            rejected.append(
                Rejected(
                    **base,
                    reason=(
                        f"cannot make the top {SHORTLIST}: even saturated it needs at least "
                        f"${bound:,.2f}/h, the {SHORTLIST}th cheapest found costs "
                        f"${shortlist[SHORTLIST - 1]:,.2f}/h"
                    ),
                )
            )
            continue
        if config in best_per_configuration and bound > best_per_configuration[config]:
            held = best_per_configuration[config]
            rejected.append(
                Rejected(
                    **base,
                    reason=(
                        f"even saturated it needs ${bound:,.2f}/h; another layout of the same "
                        f"instance meets the SLO for ${held:,.2f}/h"
                    ),
                )
            )
            continue
        # The widest settings first; the rest of the grid only for the shortlist (below).
        searched_layouts[id(layout)] = (layout, base, saturated)
        evaluate(layout, base, saturated, widest)

    # Phase 3: the other engine settings, for the layouts of the shortlisted configurations.
    shortlisted = sorted(best_per_configuration, key=best_per_configuration.__getitem__)
    shortlisted_set = set(shortlisted[:SHORTLIST])
    for layout, base, saturated in searched_layouts.values():
        if _configuration_key(layout) not in shortlisted_set:
            continue
        for settings in grid:
            if settings != widest:
                evaluate(layout, base, saturated, settings)
    ranked.sort(key=_rank_key)
    ranked, beaten = _best_per_configuration(ranked)
    rejected.extend(beaten)
    for i, rec in enumerate(ranked, start=1):
        rec.rank = i
    return RecommendationResult(
        request=request,
        ranked=ranked,
        rejected=rejected,
        evaluations=cache.misses - misses_before,
    )


#: Hardware configurations (instance, precision, KV dtype) searched exactly; the rest are
#: ruled out by a cost bound from their saturated throughput.
SHORTLIST = 12


def _rejected_base(layout: Any) -> dict[str, Any]:
    return {
        "instance": layout.instance,
        "nodes": layout.nodes,
        "tp": layout.tp,
        "pp": layout.pp,
        "dp": layout.dp,
        "precision": layout.precision,
        "kv_cache_dtype": getattr(layout, "kv_cache_dtype", "auto"),
    }


def _configuration_key(layout: Any) -> tuple[Any, ...]:
    return (layout.instance, layout.precision, getattr(layout, "kv_cache_dtype", "auto"))


def _prediction_key(
    catalog: Catalog,
    predictor: Predictor,
    request: RecommendRequest,
    layout: Any,
    settings: EngineSettings,
) -> tuple[Any, ...]:
    """Everything a prediction depends on (prices, demand and utilisation are not)."""
    inst = catalog.instance(layout.instance)
    hardware = (inst.gpu_id, inst.gpus, inst.gpu_link, inst.gpu_link_bw_gbps, inst.network_gbps)
    return (
        getattr(predictor, "cache_key", id(predictor)),
        request.model.lower(),
        request.engine,
        hardware,
        layout.tp,
        layout.pp,
        layout.precision,
        getattr(layout, "kv_cache_dtype", "auto"),
        settings,
        request.input_len,
        request.output_len,
        request.input_dist,
        request.output_dist,
        request.prefix_share,
    )


def _rank_key(rec: Recommendation) -> tuple[float, ...]:
    # Equal bills (same instances bought) are told apart by headroom, then latency.
    headroom = rec.replicas * rec.max_rps_per_replica
    return (rec.usd_per_million_output_tokens, rec.usd_per_hour, -headroom, rec.pred_ttft_ms_p99)


def _saturated(predictor: Predictor, layout: Any, settings: EngineSettings) -> CapacityResult:
    prediction = predictor(layout, settings, "saturation", float(settings.max_num_seqs))
    return CapacityResult(float(settings.max_num_seqs), prediction, None)


def _usd_per_hour_bound(
    request: RecommendRequest,
    layout: Any,
    settings: EngineSettings,
    saturated: CapacityResult,
    usd_per_instance_hour: float,
    kind: Literal["rate", "concurrency"],
) -> float:
    """The least this candidate can cost: replicas at their saturated throughput."""
    demand = request.demand
    if kind == "rate":
        assert saturated.prediction is not None
        ceiling_rps = float(saturated.prediction.output_tok_per_s) / request.output_len
        needed = math.ceil((demand.peak or 0.0) / max(ceiling_rps, 1e-9) - 1e-9)
    else:
        needed = math.ceil((demand.concurrency or 1) / settings.max_num_seqs - 1e-9)
    replicas = max(needed, 1) + demand.spare_replicas
    groups = math.ceil(replicas / max(layout.dp, 1))
    return groups * layout.nodes * usd_per_instance_hour


def _capacity(
    predictor: Predictor,
    layout: Any,
    settings: EngineSettings,
    request: RecommendRequest,
    kind: Literal["rate", "concurrency"],
    saturated: CapacityResult,
) -> CapacityResult:
    if kind == "concurrency":
        # No replica ever holds more than the whole demand: search only up to it.
        return search_capacity(
            lambda load: predictor(layout, settings, "concurrency", load),
            request.slo,
            kind="concurrency",
            lowest=1,
            highest=float(_concurrency_ceiling(request, settings)),
        )
    # The rate bracket comes from the replica's saturated throughput, so a tiny model on a
    # big GPU and a 405B model on L4s are searched over rates that matter for them.
    assert saturated.prediction is not None
    ceiling = max(float(saturated.prediction.output_tok_per_s) / request.output_len * 1.2, 1e-3)
    return search_capacity(
        lambda load: predictor(layout, settings, "rate", load),
        request.slo,
        kind="rate",
        lowest=ceiling / 200,
        highest=ceiling,
    )


def _concurrency_ceiling(request: RecommendRequest, settings: EngineSettings) -> int:
    return min(settings.max_num_seqs, request.demand.concurrency or settings.max_num_seqs)


def _replica_layouts(layouts: Sequence[Any]) -> list[Any]:
    """One layout per (instance, TP, PP, precision, KV dtype): the fewest instances that hold
    one replica. A layout with DP > 1 only repeats replicas, which the replica count covers."""
    best: dict[tuple[Any, ...], Any] = {}
    for layout in layouts:
        key = (
            layout.instance,
            layout.tp,
            layout.pp,
            layout.precision,
            getattr(layout, "kv_cache_dtype", "auto"),
        )
        held = best.get(key)
        if held is None or (layout.feasible, -layout.nodes, -layout.dp) > (
            held.feasible,
            -held.nodes,
            -held.dp,
        ):
            best[key] = layout
    return list(best.values())


def _best_per_configuration(
    ranked: list[Recommendation],
) -> tuple[list[Recommendation], list[Rejected]]:
    """Keep the cheapest layout, engine settings and region of each instance type and
    precision; the other layouts of it are rejected, saying what beat them."""
    best: dict[tuple[Any, ...], Recommendation] = {}
    kept, beaten = [], []
    seen_layouts: set[tuple[Any, ...]] = set()
    for rec in ranked:
        key = (rec.instance, rec.precision, rec.kv_cache_dtype)
        layout_key = (*key, rec.tp, rec.pp)
        if key not in best:
            best[key] = rec
            kept.append(rec)
            seen_layouts.add(layout_key)
            continue
        if layout_key in seen_layouts:
            continue  # the same layout in a dearer region or with other engine settings
        seen_layouts.add(layout_key)
        winner = best[key]
        beaten.append(
            Rejected(
                instance=rec.instance,
                nodes=rec.nodes,
                tp=rec.tp,
                pp=rec.pp,
                dp=rec.dp,
                precision=rec.precision,
                kv_cache_dtype=rec.kv_cache_dtype,
                engine_settings=rec.engine_settings.label,
                reason=(
                    f"meets the SLO at ${rec.usd_per_million_output_tokens:,.2f}/M output "
                    f"tokens; TP{winner.tp} PP{winner.pp} on the same instance does it for "
                    f"${winner.usd_per_million_output_tokens:,.2f}/M"
                ),
            )
        )
    return kept, beaten


def _costed(
    catalog: Catalog,
    request: RecommendRequest,
    layout: Any,
    settings: EngineSettings,
    capacity: CapacityResult,
    price: Price,
    kind: Literal["rate", "concurrency"],
) -> Recommendation:
    demand = request.demand
    prediction = capacity.prediction
    assert prediction is not None
    inst = catalog.instance(layout.instance)
    replica_output_tps = float(prediction.output_tok_per_s)
    if kind == "rate":
        per_replica_rps = capacity.max_load
        peak = demand.peak or 0.0
        needed = math.ceil(peak / per_replica_rps - 1e-9) if peak else 1
        average_rps = demand.avg_rate_rps or peak
    else:
        assert demand.concurrency is not None
        per_replica_rps = replica_output_tps / request.output_len
        needed = math.ceil(demand.concurrency / capacity.max_load - 1e-9)
        average_rps = per_replica_rps * demand.concurrency / capacity.max_load
    replicas = max(needed, 1) + demand.spare_replicas
    replicas_per_group = max(layout.dp, 1)
    groups = math.ceil(replicas / replicas_per_group)
    instances_total = groups * layout.nodes
    usd_per_hour = instances_total * price.usd_per_hour
    capacity_rps = replicas * per_replica_rps
    utilisation = demand.utilisation or min(1.0, average_rps / capacity_rps)
    served_rps = capacity_rps * utilisation
    output_tps = served_rps * request.output_len
    total_tps = served_rps * (request.input_len + request.output_len)
    per_million_output = usd_per_hour / (output_tps * 3600) * 1e6
    per_million_total = usd_per_hour / (total_tps * 3600) * 1e6
    return Recommendation(
        provider=inst.provider,
        instance=layout.instance,
        region=price.region,
        pricing=price.pricing,
        gpu=inst.gpu_id,
        nodes=layout.nodes,
        gpus=layout.tp * layout.pp * replicas_per_group,
        tp=layout.tp,
        pp=layout.pp,
        dp=replicas_per_group,
        precision=layout.precision,
        kv_cache_dtype=getattr(layout, "kv_cache_dtype", "auto"),
        engine_settings=settings,
        replicas=replicas,
        instances_total=instances_total,
        usd_per_hour=usd_per_hour,
        usd_per_million_output_tokens=per_million_output,
        usd_per_million_total_tokens=per_million_total,
        usd_per_request=usd_per_hour / 3600 / served_rps,
        monthly_usd=usd_per_hour * HOURS_PER_MONTH,
        utilisation=utilisation,
        max_rps_per_replica=per_replica_rps,
        pred_output_tok_per_s_per_replica=replica_output_tps,
        pred_ttft_ms_p99=float(prediction.ttft_ms_p99),
        pred_ttft_ms_p99_low=getattr(prediction, "ttft_ms_p99_low", None),
        pred_ttft_ms_p99_high=getattr(prediction, "ttft_ms_p99_high", None),
        pred_tpot_ms_p99=float(prediction.tpot_ms_p99),
        pred_tpot_ms_p99_low=getattr(prediction, "tpot_ms_p99_low", None),
        pred_tpot_ms_p99_high=getattr(prediction, "tpot_ms_p99_high", None),
        pred_e2e_ms_p99=getattr(prediction, "e2e_ms_p99", None),
        kv_occupancy_peak=getattr(prediction, "kv_occupancy_max", None),
        confidence=str(getattr(prediction, "confidence", "extrapolated")),
        far_from_data=bool(getattr(prediction, "far_from_data", True)),
        vllm_command=vllm_serve_command(
            VllmServeConfig(
                model=catalog.model(request.model).hf_id,
                tensor_parallel_size=layout.tp,
                pipeline_parallel_size=layout.pp,
                precision=layout.precision,
                engine=EngineConfig(
                    max_num_seqs=settings.max_num_seqs,
                    max_num_batched_tokens=settings.max_num_batched_tokens,
                    max_model_len=request.input_len + request.output_len,
                    kv_cache_dtype=getattr(layout, "kv_cache_dtype", "auto"),
                    enable_prefix_caching=settings.enable_prefix_caching,
                    enable_chunked_prefill=settings.enable_chunked_prefill,
                ),
            )
        ),
        price_source=price.source,
        price_as_of=price.as_of.isoformat(),
    )


# ----- Pareto frontiers, sensitivity, export -----------------------------------------------------
def pareto_front(
    points: Sequence[tuple[float, float]], *, maximise: tuple[bool, bool]
) -> list[int]:
    """Indices of the points no other point beats on both axes (ties kept)."""
    signs = [1.0 if m else -1.0 for m in maximise]
    front = []
    for i, (x, y) in enumerate(points):
        xi, yi = x * signs[0], y * signs[1]
        dominated = any(
            (ox * signs[0] >= xi and oy * signs[1] >= yi)
            and (ox * signs[0] > xi or oy * signs[1] > yi)
            for j, (ox, oy) in enumerate(points)
            if j != i
        )
        if not dominated:
            front.append(i)
    return front


def pareto_throughput_vs_interactivity(result: RecommendationResult) -> list[Recommendation]:
    """Output tok/s per GPU against tok/s per user (1000 / p99 TPOT): both to maximise."""
    points = [
        (
            r.pred_output_tok_per_s_per_replica / max(r.tp * r.pp, 1),
            1000.0 / r.pred_tpot_ms_p99 if r.pred_tpot_ms_p99 > 0 else 0.0,
        )
        for r in result.ranked
    ]
    return [result.ranked[i] for i in pareto_front(points, maximise=(True, True))]


def pareto_cost_vs_latency(result: RecommendationResult) -> list[Recommendation]:
    """$/M output tokens against p99 TTFT: both to minimise."""
    points = [(r.usd_per_million_output_tokens, r.pred_ttft_ms_p99) for r in result.ranked]
    return [result.ranked[i] for i in pareto_front(points, maximise=(False, False))]


class SensitivityRow(BaseModel):
    factor: str
    change_pct: float
    best: str | None
    usd_per_million_output_tokens: float | None
    delta_pct: float | None = Field(description="change of the best $/M output vs the base case")
    best_changed: bool


SENSITIVITY_CONTENDERS = 3
SENSITIVITY_FACTORS = ("price", "input_len", "output_len", "prefix_share", "utilisation")


def _scaled_prices(catalog: Catalog, factor: float) -> Catalog:
    scaled = [
        p.model_copy(update={"usd_per_hour": p.usd_per_hour * factor}) for p in catalog.prices
    ]
    return Catalog(
        gpus=catalog.gpus,
        instances=catalog.instances,
        prices=scaled,
        models=catalog.models,
        measured=catalog.measured,
    )


def sensitivity(
    catalog: Catalog,
    request: RecommendRequest,
    predictor: Predictor,
    *,
    change_pct: float = 20.0,
    base: RecommendationResult | None = None,
    layouts: Sequence[Any] | None = None,
) -> list[SensitivityRow]:
    """How the best choice and its $/M output tokens move when one input moves by +-change_pct.

    Data for a tornado chart: one row per factor and direction.
    """
    if not 0 < change_pct < 100:
        raise InvalidInputError("change_pct", change_pct, "between 0 and 100 (exclusive)")
    base = base or recommend(catalog, request, predictor, layouts=layouts)
    base_best = base.best
    if base_best is not None:
        # Re-search only the leading instance types with the winning engine settings: the
        # question is how the choice among the contenders moves, and it stays interactive.
        contenders = tuple(dict.fromkeys(r.instance for r in base.ranked[:SENSITIVITY_CONTENDERS]))
        settings = base_best.engine_settings
        narrowed = request.search.model_copy(
            update={
                "instances": contenders,
                "max_num_seqs": (settings.max_num_seqs,),
                "max_num_batched_tokens": (settings.max_num_batched_tokens,),
                "chunked_prefill": (settings.enable_chunked_prefill,),
            }
        )
        request = request.model_copy(update={"search": narrowed})
    rows = []
    for factor in SENSITIVITY_FACTORS:
        for sign in (-1.0, 1.0):
            scale = 1.0 + sign * change_pct / 100
            varied_catalog = catalog
            varied = request
            if factor == "price":
                varied_catalog = _scaled_prices(catalog, scale)
            elif factor == "input_len":
                varied = request.model_copy(
                    update={
                        "input_len": max(1, round(request.input_len * scale)),
                        "input_dist": None,
                    }
                )
            elif factor == "output_len":
                varied = request.model_copy(
                    update={
                        "output_len": max(1, round(request.output_len * scale)),
                        "output_dist": None,
                    }
                )
            elif factor == "prefix_share":
                share = min(
                    0.95,
                    max(
                        0.0,
                        request.prefix_share * scale if request.prefix_share else 0.1 * (sign > 0),
                    ),
                )
                varied = request.model_copy(update={"prefix_share": share})
            else:
                current = base_best.utilisation if base_best else 0.5
                demand = request.demand.model_copy(
                    update={"utilisation": min(1.0, current * scale)}
                )
                varied = request.model_copy(update={"demand": demand})
            result = recommend(
                varied_catalog,
                varied,
                predictor,
                layouts=layouts if factor in ("price", "utilisation") else None,
            )
            best = result.best
            delta = None
            if best and base_best:
                delta = 100 * (
                    best.usd_per_million_output_tokens / base_best.usd_per_million_output_tokens - 1
                )
            rows.append(
                SensitivityRow(
                    factor=factor,
                    change_pct=sign * change_pct,
                    best=best.label if best else None,
                    usd_per_million_output_tokens=best.usd_per_million_output_tokens
                    if best
                    else None,
                    delta_pct=delta,
                    best_changed=(best.label if best else None)
                    != (base_best.label if base_best else None),
                )
            )
    return rows


RANKING_COLUMNS = [
    "rank", "provider", "instance", "region", "pricing", "gpu", "nodes", "tp", "pp", "dp",
    "precision", "kv_cache_dtype", "engine_settings", "replicas", "instances_total",
    "usd_per_hour", "usd_per_million_output_tokens", "usd_per_million_total_tokens",
    "usd_per_request", "monthly_usd", "utilisation", "max_rps_per_replica",
    "pred_ttft_ms_p99", "pred_ttft_ms_p99_low", "pred_ttft_ms_p99_high", "pred_tpot_ms_p99",
    "pred_tpot_ms_p99_low", "pred_tpot_ms_p99_high", "kv_occupancy_peak", "confidence",
    "far_from_data", "vllm_command", "price_source", "price_as_of",
]  # fmt: skip


def ranking_rows(result: RecommendationResult) -> list[dict[str, Any]]:
    rows = []
    for rec in result.ranked:
        row = rec.model_dump()
        row["engine_settings"] = rec.engine_settings.label
        rows.append({c: row.get(c) for c in RANKING_COLUMNS})
    return rows


def rejected_rows(result: RecommendationResult) -> list[dict[str, Any]]:
    return [r.model_dump() for r in result.rejected]


# ----- the performance model as a predictor ------------------------------------------------
def perf_predictor(
    catalog: Catalog, request: RecommendRequest, model: Any | None = None
) -> Predictor:
    """Predict one replica of a layout with :mod:`planner.perf` (fitted on the store's data).

    Rate searches simulate ``RATE_SEARCH_REQUESTS`` Poisson arrivals: enough for a p99 that
    moves smoothly with the rate, few enough to search hundreds of candidates in seconds.
    """
    from planner.perf.model import get_performance_model
    from planner.perf.scenario import Scenario

    perf = model if model is not None else get_performance_model(catalog)
    card = catalog.model(request.model)

    def predict(layout: Any, settings: EngineSettings, kind: str, load: float) -> Any:
        inst = catalog.instance(layout.instance)
        gpus = layout.tp * layout.pp
        scenario = Scenario(
            engine=request.engine,
            model=card.hf_id,
            precision=layout.precision,
            gpu=inst.gpu_id,
            num_gpus=gpus,
            tp=layout.tp,
            pp=layout.pp,
            input_len=None if request.input_dist else request.input_len,
            output_len=None if request.output_dist else request.output_len,
            input_dist=request.input_dist,
            output_dist=request.output_dist,
            load="rate" if kind == "rate" else "concurrency",  # saturation: a full closed loop
            request_rate=load if kind == "rate" else None,
            concurrency=None if kind == "rate" else load,
            num_requests=_requests_to_simulate(kind, load),
            instance=layout.instance,
            nodes=math.ceil(gpus / inst.gpus),
            max_num_seqs=settings.max_num_seqs,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            enable_chunked_prefill=settings.enable_chunked_prefill,
            enable_prefix_caching=settings.enable_prefix_caching,
            prefix_share=request.prefix_share,
            kv_cache_dtype=getattr(layout, "kv_cache_dtype", "auto"),
        )
        return perf.predict(scenario)

    predict.cache_key = ("perf", id(perf))  # type: ignore[attr-defined]
    return predict


RATE_SEARCH_REQUESTS = 160


def _requests_to_simulate(kind: str, load: float) -> int:
    if kind == "rate":
        return RATE_SEARCH_REQUESTS
    if kind == "saturation":  # two waves of a full batch: past ramp-up, cheap to simulate
        return max(int(load) * 2, 64)
    return max(int(load) * 4, 64)
