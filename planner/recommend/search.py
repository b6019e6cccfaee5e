"""The search: the cheapest configurations that meet the SLOs, and why the others lose.

For one model, workload, demand and SLO:

1. every feasible layout of every catalog instance that passes the filters (provider, region,
   GPU, pricing mode), up to ``max_nodes`` instances per replica, for each precision and KV
   cache dtype asked for (``planner.layouts``); a layout that does not fit is rejected with
   the layouts module's reason;
2. one saturated prediction per layout bounds what it can cost at best; layouts are searched
   cheapest bound first, and those that cannot make the shortlist are rejected with the bound
   (a layout whose fewest instances alone cost more than the shortlist, without a prediction);
3. for each remaining layout and each point of a small grid of engine settings (max_num_seqs,
   max_num_batched_tokens, chunked prefill, prefix caching), the highest load one replica
   sustains inside the SLO (:mod:`planner.recommend.capacity`): with the performance model,
   from the steady state of continuous batching (:mod:`planner.perf.steady_state`, a few step
   evaluations a candidate, no simulation);
4. replicas, instances and costs (:mod:`planner.recommend.costing`); ranked by $/M output
   tokens;
5. the cheapest candidate of each of the top :data:`SHORTLIST` instance types and precisions
   of that ranking simulated (the discrete-event simulator at the steady-state capacity,
   lower while the simulation misses the SLO) and re-ranked, until the top is all simulated;
   what they show (latencies, intervals) is the simulation's (``prediction_method``);
6. the cheapest layout of each instance type and precision kept, every rejected candidate
   with its reason (a layout beaten by another of its instance names it; one the simulation
   refuted says so, and the next layout of its instance takes its place).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Literal

from planner.catalog import Catalog, ModelCard, Price
from planner.engine import EngineConfig
from planner.gc_pause import gc_paused
from planner.input_checks import check_search_names
from planner.layouts import LayoutCandidate, enumerate_layouts
from planner.perf.scenario import Scenario
from planner.recommend.capacity import (
    CAPACITY_CACHE,
    CapacityCache,
    CapacityResult,
    PerfPredictor,
    concurrency_ceiling,
    guarded,
    replica_capacity,
    saturated_capacity,
    seats,
    verified_capacity,
)
from planner.recommend.costing import (
    Quote,
    quote,
    recommendation_of,
    resolved_engine,
    usd_per_hour_bound,
    usd_per_hour_floor,
)
from planner.recommend.disaggregated import search_disaggregated
from planner.recommend.request import (
    Predictor,
    Recommendation,
    RecommendationResult,
    RecommendRequest,
    Rejected,
    SearchSpace,
)
from planner.recommend.startup import at_startup_memory


def filtered_instances(catalog: Catalog, search: SearchSpace) -> list[str]:
    names = []
    for name, inst in catalog.instances.items():
        if search.providers and inst.provider not in search.providers:
            continue
        if search.gpus and inst.gpu_id not in search.gpus:
            continue
        if search.instances and name not in search.instances:
            continue
        if not prices_in_scope(catalog, name, search):
            continue
        names.append(name)
    return names


def _at_lowest_load(capacity: CapacityResult) -> dict[str, float]:
    """The p99s of a candidate that broke an SLO even at the lowest load (none otherwise)."""
    prediction = capacity.prediction
    if prediction is None or capacity.max_load > 0:
        return {}
    return {
        "lowest_ttft_ms_p99": prediction.ttft_ms_p99,
        "lowest_tpot_ms_p99": prediction.tpot_ms_p99,
        "lowest_e2e_ms_p99": prediction.e2e_ms_p99,
    }


def empty_search_reason(catalog: Catalog, search: SearchSpace) -> str | None:
    """Why no instance passes the search's filters together, in a sentence naming each
    filter and what it alone allows; None when some instance passes."""
    if filtered_instances(catalog, search):
        return None
    everything = set(catalog.instances)

    def priced(regions: tuple[str, ...] | None) -> set[str]:
        return {
            p.instance
            for p in catalog.prices
            if p.pricing == search.pricing and (not regions or p.region in regions)
        }

    filters: list[tuple[str, set[str]]] = [
        (f"{search.pricing.replace('_', '-')} prices", priced(None))
    ]
    if search.providers:
        held = {n for n, i in catalog.instances.items() if i.provider in search.providers}
        filters.append((f"providers {', '.join(search.providers)}", held))
    if search.regions:
        filters.append((f"regions {', '.join(search.regions)}", priced(search.regions)))
    if search.gpus:
        held = {n for n, i in catalog.instances.items() if i.gpu_id in search.gpus}
        filters.append((f"GPUs {', '.join(search.gpus)}", held))
    if search.instances:
        held = {n for n in search.instances if n in everything}
        gpus = sorted({catalog.instances[n].gpu_id for n in held})
        label = f"instances {', '.join(search.instances)}"
        filters.append((label + (f" (of {', '.join(gpus)})" if gpus else ""), held))
    alone = [f"{label}: {len(held & everything)} instance(s)" for label, held in filters]
    return "no instance passes these filters together (" + "; ".join(alone) + ")"


def prices_in_scope(catalog: Catalog, instance: str, search: SearchSpace) -> list[Price]:
    """The instance's prices the search compares: at the search's pricing mode, or, for a
    server a team owns (``planner.owned``), its owned hourly cost whatever the mode (owning
    ranks beside renting)."""
    pricing = search.pricing
    if pricing != "owned" and catalog.instance(instance).provider == "owned":
        pricing = "owned"
    return [
        p
        for p in catalog.prices_for(instance, pricing=pricing)
        if not search.regions or p.region in search.regions
    ]


def engine_grid(request: RecommendRequest) -> list[EngineConfig]:
    """The request's engine settings at each point of the search space's grid (max_num_seqs,
    max_num_batched_tokens, chunked prefill, prefix caching: on when the workload shares a
    prefix, unless the search says)."""
    search = request.search
    prefix = search.prefix_caching
    if prefix is None:
        prefix = (True,) if request.prefix_share > 0 else (False,)
    return [
        request.engine.model_copy(
            update={
                "max_num_seqs": seqs,
                "max_num_batched_tokens": tokens,
                "enable_chunked_prefill": chunked,
                "enable_prefix_caching": cache,
            }
        )
        for seqs, tokens, chunked, cache in itertools.product(
            search.max_num_seqs, search.max_num_batched_tokens, search.chunked_prefill, prefix
        )
    ]


@gc_paused()  # see planner.gc_pause: its collections found nothing and cost a fifth of it
def recommend(
    catalog: Catalog,
    request: RecommendRequest,
    predictor: Predictor,
    *,
    layouts: Sequence[LayoutCandidate] | None = None,
    cache: CapacityCache = CAPACITY_CACHE,
) -> RecommendationResult:
    """Rank every candidate by $/M output tokens; keep every rejected one with its reason.

    ``predictor(layout, settings, kind, load)`` returns a performance prediction for one
    replica of ``layout`` at ``load`` (req/s for ``kind == "rate"``, sequences in flight for
    ``"concurrency"``). ``layouts`` defaults to ``planner.layouts.enumerate_layouts`` over the
    filtered instances.
    """
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
        engine = request.engine.model_copy(update={"max_model_len": request.max_model_len})
        layouts = _layouts(catalog, card, instances, search, engine)
    else:  # at the memory share each starts with, as the enumerated ones are
        layouts = at_startup_memory(catalog, card, layouts, request.engine)
    kind: Literal["rate", "concurrency"] = (
        "concurrency" if request.demand.concurrency is not None else "rate"
    )
    rejected: list[Rejected] = []
    misses_before = cache.misses
    grid = engine_grid(request)
    widest = max(grid, key=lambda s: (s.max_num_seqs or 0, s.max_num_batched_tokens or 0))
    if request.disaggregation == "on":  # disaggregated plans only: the aggregated search is off
        ranked = _disaggregated(catalog, request, predictor, layouts, widest, rejected)
        return _result(request, sorted(ranked, key=_rank_key), rejected, cache, misses_before)

    # Phase 1: what each layout can cost at best bounds it; layouts are searched cheapest bound
    # first. The bound is one saturated prediction per layout (at the grid's largest batch);
    # until it is needed, the price of the fewest replica groups stands in for it (never more
    # than it), so a layout whose instances alone cost more than the shortlist is rejected
    # without a prediction. The order is the saturated bounds' (a layout's stand-in comes out
    # of the heap before its own bound could, and is replaced by it).
    heap: list[tuple[float, int, bool, LayoutCandidate, dict[str, Any], Any]] = []
    for index, layout in enumerate(_replica_layouts(layouts)):
        base = _rejected_base(layout)
        if not layout.feasible:
            rejected.append(Rejected(**base, reason=layout.reason or "does not fit"))
            continue
        cheapest = min(p.usd_per_hour for p in prices_in_scope(catalog, layout.instance, search))
        floor = usd_per_hour_floor(request, layout, cheapest)
        heap.append((floor, index, False, layout, base, cheapest))
    heapq.heapify(heap)

    # Phase 2: the exact SLO search over the engine grid, for as long as a layout can still
    # make the shortlist.
    quotes: list[Quote] = []
    best_per_configuration: dict[tuple[Any, ...], float] = {}
    searched_layouts: dict[int, tuple[Any, dict[str, Any], CapacityResult]] = {}
    candidates: dict[tuple[Any, ...], _Candidate] = {}
    steady = isinstance(predictor, PerfPredictor) and predictor.steady

    def evaluate(
        layout: LayoutCandidate,
        base: dict[str, Any],
        saturated: CapacityResult,
        settings: EngineConfig,
    ) -> None:
        settings = _with_spec(settings, layout)
        # where a search of this candidate for another workload or SLO found its edge
        edge_key = (*_setup_key(catalog, predictor, request, layout, settings), kind)
        hint = cache.edge_hint(edge_key)
        key = _capacity_key("slo", catalog, predictor, request, layout, settings, kind)
        if kind == "concurrency" and cache.held(key) is None:
            _reuse_below_ceiling(cache, key, concurrency_ceiling(request, settings, layout), layout)
        capacity = cache.get_or_compute(
            key,
            functools.partial(
                guarded, replica_capacity, predictor, layout, settings, request, kind, saturated,
                hint,
            ),
        )  # fmt: skip
        cache.remember_edge(edge_key, capacity)
        if kind == "concurrency":
            _keep_below_ceiling(cache, key, capacity)
        if capacity.reason is not None or capacity.prediction is None:
            rejected.append(
                Rejected(
                    **base,
                    engine_settings=settings.label,
                    reason=capacity.reason or "",
                    **_at_lowest_load(capacity),
                )
            )
            return
        config = _configuration_key(layout)
        candidates[_candidate_key(layout, settings)] = (layout, base, settings, capacity)
        for price in prices_in_scope(catalog, layout.instance, search):
            priced = quote(catalog, request, layout, settings, capacity, price, kind)
            quotes.append(priced)
            best_per_configuration[config] = min(
                priced.usd_per_hour, best_per_configuration.get(config, math.inf)
            )

    while heap:
        bound, index, saturated_bound, layout, base, held = heapq.heappop(heap)
        shortlist = sorted(best_per_configuration.values())
        if len(shortlist) >= SHORTLIST and bound > shortlist[SHORTLIST - 1]:
            least = "even saturated it needs" if saturated_bound else "its instances alone cost"
            rejected.append(
                Rejected(
                    **base,
                    reason=(
                        f"cannot make the top {SHORTLIST}: {least} at least ${bound:,.2f}/h, "
                        f"the {SHORTLIST}th cheapest found costs "
                        f"${shortlist[SHORTLIST - 1]:,.2f}/h"
                    ),
                )
            )
            continue
        widest_here = _with_spec(widest, layout)
        if not saturated_bound:
            cheapest = held
            if kind == "rate":
                saturated = cache.get_or_compute(
                    (
                        "saturated",
                        *_prediction_key(catalog, predictor, request, layout, widest_here),
                    ),
                    functools.partial(guarded, saturated_capacity, predictor, layout, widest_here),
                )
                if saturated.reason is not None:
                    rejected.append(
                        Rejected(**base, engine_settings=widest_here.label, reason=saturated.reason)
                    )
                    continue
            else:  # a closed loop is bounded by max_num_seqs: nothing to predict for the bound
                saturated = CapacityResult(float(seats(layout, widest_here)), None, None)
            exact = usd_per_hour_bound(request, layout, widest_here, saturated, cheapest, kind)
            heapq.heappush(heap, (exact, index, True, layout, base, saturated))
            continue
        saturated = held
        config = _configuration_key(layout)
        if config in best_per_configuration and bound > best_per_configuration[config]:
            held_cost = best_per_configuration[config]
            rejected.append(
                Rejected(
                    **base,
                    reason=(
                        f"even saturated it needs ${bound:,.2f}/h; another layout of the same "
                        f"instance meets the SLO for ${held_cost:,.2f}/h"
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
    quotes.sort(key=_rank_key)
    verified: set[tuple[Any, ...]] = set()
    if steady:
        # Phase 4: the shortlist is simulated (the steady state ranked everything), before
        # each instance type and precision keeps its cheapest layout: a layout beaten only by
        # one the simulation refutes or lowers is ranked by its own figures
        quotes = _verify_shortlist(
            catalog, request, predictor, kind, cache, quotes, candidates, rejected, verified
        )
    kept, beaten = _best_per_configuration(catalog, request, quotes)
    rejected.extend(beaten)
    # only the kept candidates are written out (a plan, commands: most of what costing took)
    ranked = [recommendation_of(catalog, request, q) for q in kept]
    if steady:
        for rec, q in zip(ranked, kept, strict=True):
            if _candidate_key(q.layout, q.settings) not in verified:
                rec.prediction_method = "steady state"
    if request.disaggregation == "auto":  # both kinds ranked together
        pools = _disaggregated(catalog, request, predictor, layouts, widest, rejected)
        ranked = sorted([*ranked, *pools], key=_rank_key)
    return _result(request, ranked, rejected, cache, misses_before)


def _result(
    request: RecommendRequest,
    ranked: list[Recommendation],
    rejected: list[Rejected],
    cache: CapacityCache,
    misses_before: int,
) -> RecommendationResult:
    for i, rec in enumerate(ranked, start=1):
        rec.rank = i
    return RecommendationResult(
        request=request,
        ranked=ranked,
        rejected=rejected,
        evaluations=cache.misses - misses_before,
    )


def _disaggregated(
    catalog: Catalog,
    request: RecommendRequest,
    predictor: Predictor,
    layouts: Sequence[LayoutCandidate],
    settings: EngineConfig,
    rejected: list[Rejected],
) -> list[Recommendation]:
    """The search's disaggregated dimension (:mod:`planner.recommend.disaggregated`) over the
    same one-replica layouts and prices; its rejections join ``rejected``."""
    if not isinstance(predictor, PerfPredictor):
        rejected.append(
            Rejected(
                instance="*", nodes=0, tp=0, pp=0, dp=0, precision="*",
                engine_settings="disaggregated",
                reason="disaggregated: the pools are priced by the performance model only",
            )
        )  # fmt: skip
        return []
    perf_predictor = predictor

    def scenario_of(layout: LayoutCandidate, settings: EngineConfig, load: float) -> Scenario:
        return perf_predictor.scenario(layout, settings, "rate", load)

    # the pools are judged at their engine's default memory share (a raised one is left to
    # the aggregated plans: planner.recommend.startup)
    replica_layouts = [
        lay for lay in _replica_layouts(layouts) if lay.raised_memory_fraction is None
    ]
    prices = {
        name: prices_in_scope(catalog, name, request.search)
        for name in {layout.instance for layout in replica_layouts}
    }
    ranked, pool_rejected = search_disaggregated(
        catalog, request, predictor.perf, scenario_of, replica_layouts, settings, prices
    )
    rejected.extend(pool_rejected)
    return ranked


#: Hardware configurations (instance, precision, KV dtype) searched exactly; the rest are
#: ruled out by a cost bound from their saturated throughput. With the steady state, the
#: ranked configurations this deep are then checked by simulation.
SHORTLIST = 12

#: (layout, rejection base, engine settings, capacity) of a candidate that met the SLO
_Candidate = tuple[LayoutCandidate, dict[str, Any], EngineConfig, CapacityResult]


def _candidate_key(layout: LayoutCandidate, settings: EngineConfig) -> tuple[Any, ...]:
    return (layout.instance, layout.tp, layout.pp, layout.precision, layout.kv_cache_dtype,
            *_grid_point(settings))  # fmt: skip


def _grid_point(settings: EngineConfig) -> tuple[Any, ...]:
    """The knobs the grid varies (a recommendation's resolved settings keep them)."""
    return (
        settings.max_num_seqs,
        settings.max_num_batched_tokens,
        settings.enable_chunked_prefill,
        settings.enable_prefix_caching,
        settings.spec_method,
        settings.num_spec_tokens,
    )


def _verify_shortlist(
    catalog: Catalog,
    request: RecommendRequest,
    predictor: Predictor,
    kind: Literal["rate", "concurrency"],
    cache: CapacityCache,
    quotes: list[Quote],
    candidates: dict[tuple[Any, ...], _Candidate],
    rejected: list[Rejected],
    verified: set[tuple[Any, ...]],
) -> list[Quote]:
    """Simulate the cheapest quote of each of the top :data:`SHORTLIST` instance types and
    precisions of the steady-state ranking (:func:`~planner.recommend.capacity.
    verified_capacity`) and re-quote it at every price with the simulated capacity; until
    those heads are all simulated. A candidate whose simulated capacity is lower can drop
    below one that was not simulated yet, of another configuration or of its own (another
    layout or engine settings of the same instance and precision), which is then simulated
    too; a refuted candidate's quotes leave the ranking, so the next layout of its
    configuration heads it. ``verified``: the candidate keys simulated, filled in. Returns
    the quotes, re-sorted."""
    quotes = sorted(quotes, key=_rank_key)
    while True:
        todo = [
            q
            for q in _configuration_heads(quotes)[:SHORTLIST]
            if _candidate_key(q.layout, q.settings) not in verified
        ]
        if not todo:
            return quotes
        for head in todo:
            key = _candidate_key(head.layout, head.settings)
            verified.add(key)
            layout, base, settings, estimate = candidates[key]
            # the step at which this candidate's last verification met the SLO
            setup = _setup_key(catalog, predictor, request, layout, settings)
            edge_key = ("verified", *setup, kind)
            hint = cache.edge_hint(edge_key)
            capacity = cache.get_or_compute(
                _capacity_key("verified", catalog, predictor, request, layout, settings, kind),
                functools.partial(
                    guarded, verified_capacity, predictor, layout, settings, request, kind,
                    estimate, hint,
                ),
            )  # fmt: skip
            cache.remember_edge(edge_key, capacity)
            quotes = [q for q in quotes if _candidate_key(q.layout, q.settings) != key]
            if capacity.reason is not None or capacity.prediction is None:
                rejected.append(
                    Rejected(
                        **base,
                        engine_settings=settings.label,
                        reason=capacity.reason or "",
                        **_at_lowest_load(capacity),
                    )
                )
                continue
            quotes.extend(
                quote(catalog, request, layout, settings, capacity, price, kind)
                for price in prices_in_scope(catalog, layout.instance, request.search)
            )
        quotes.sort(key=_rank_key)


def _configuration_heads(quotes: Sequence[Quote]) -> list[Quote]:
    """The first quote of each instance type and precision, in the order of ``quotes``."""
    seen: set[tuple[Any, ...]] = set()
    heads = []
    for q in quotes:
        config = _configuration_key(q.layout)
        if config not in seen:
            seen.add(config)
            heads.append(q)
    return heads


def _rejected_base(layout: LayoutCandidate) -> dict[str, Any]:
    return {
        "instance": layout.instance,
        "nodes": layout.nodes,
        "tp": layout.tp,
        "pp": layout.pp,
        "dp": layout.dp,
        "precision": layout.precision,
        "kv_cache_dtype": layout.kv_cache_dtype,
        "moe_layout": layout.moe_label.strip(),
    }


def _configuration_key(layout: LayoutCandidate) -> tuple[Any, ...]:
    """An instance type, precision and KV dtype, with or without a speculative method: the
    ranking keeps the best plan of each (so the best plan with and without speculation)."""
    return (layout.instance, layout.precision, layout.kv_cache_dtype, layout.spec_method)


def _with_spec(settings: EngineConfig, layout: LayoutCandidate) -> EngineConfig:
    """The grid's settings with the layout's speculative method and draft length."""
    spec = layout.engine
    if (settings.spec_method, settings.num_spec_tokens) == (spec.spec_method, spec.num_spec_tokens):
        return settings
    return settings.model_copy(
        update={"spec_method": spec.spec_method, "num_spec_tokens": spec.num_spec_tokens}
    )


def _prediction_key(
    catalog: Catalog,
    predictor: Predictor,
    request: RecommendRequest,
    layout: LayoutCandidate,
    settings: EngineConfig,
) -> tuple[Any, ...]:
    """Everything a prediction depends on (prices, demand and utilisation are not)."""
    return (
        *_setup_key(catalog, predictor, request, layout, settings),
        request.input_len,
        request.output_len,
        request.input_dist,
        request.output_dist,
        request.prefix_share,
        request.spec_accept_len,
    )


def _setup_key(
    catalog: Catalog,
    predictor: Predictor,
    request: RecommendRequest,
    layout: LayoutCandidate,
    settings: EngineConfig,
) -> tuple[Any, ...]:
    """What a prediction depends on apart from the workload: the predictor, model, engine,
    hardware (not the instance name: providers selling the same box share it) and layout."""
    inst = catalog.instance(layout.instance)
    hardware = (inst.gpu_id, inst.gpus, inst.gpu_link, inst.gpu_link_bw_gbps, inst.network_gbps)
    return (
        getattr(predictor, "cache_key", id(predictor)),
        request.model.lower(),
        request.engine,
        request.engine.memory_stated,  # equal configs, stated or not, start differently
        hardware,
        layout.tp,
        layout.pp,
        layout.attention_dp,
        layout.expert_parallel,
        layout.precision,
        layout.kv_cache_dtype,
        layout.raised_memory_fraction,
        settings,
    )


#: the layouts of the last searches: (catalog, card, layouts) by what they were built from
_LAYOUTS: OrderedDict[tuple[Any, ...], tuple[Catalog, ModelCard, list[LayoutCandidate]]] = (
    OrderedDict()
)
_LAYOUTS_LOCK = threading.Lock()


def _layouts(
    catalog: Catalog,
    card: ModelCard,
    instances: list[str],
    search: SearchSpace,
    engine: EngineConfig,
) -> list[LayoutCandidate]:
    """:func:`planner.layouts.enumerate_layouts` of the search, memoised for re-ranks (a new
    price, demand or SLO searches the same layouts; building them plans each one's memory)."""
    key = (id(catalog), id(card), tuple(instances), search.max_nodes, search.precisions,
           search.kv_cache_dtypes, search.speculative, engine.model_dump_json(),
           engine.memory_stated)  # fmt: skip
    with _LAYOUTS_LOCK:
        held = _LAYOUTS.get(key)
        if held is not None and held[0] is catalog and held[1] is card:
            _LAYOUTS.move_to_end(key)
            return held[2]
    layouts = enumerate_layouts(
        catalog,
        card,
        instances=instances,
        max_nodes=search.max_nodes,
        precisions=search.precisions,
        kv_cache_dtypes=search.kv_cache_dtypes,
        engine=engine,
        speculative=search.speculative,
    )
    # each at the memory share its engine starts with: the default, or raised where the
    # default does not start it (planner.recommend.startup)
    layouts = at_startup_memory(catalog, card, layouts, engine)
    with _LAYOUTS_LOCK:
        _LAYOUTS[key] = (catalog, card, layouts)
        while len(_LAYOUTS) > 16:
            _LAYOUTS.popitem(last=False)
    return layouts


def _capacity_key(
    what: str,
    catalog: Catalog,
    predictor: Predictor,
    request: RecommendRequest,
    layout: LayoutCandidate,
    settings: EngineConfig,
    kind: Literal["rate", "concurrency"],
) -> tuple[Any, ...]:
    """The memo key of a capacity: ``what`` (searched, verified), what it depends on, the SLO."""
    ceiling = concurrency_ceiling(request, settings, layout) if kind == "concurrency" else None
    return (
        what,
        *_prediction_key(catalog, predictor, request, layout, settings),
        request.slo,
        kind,
        ceiling,
    )


def _below_ceiling_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """A closed loop's capacity key (:func:`_capacity_key`) less the ceiling searched up to."""
    return ("below ceiling", *key[1:-1])


def _keep_below_ceiling(cache: CapacityCache, key: tuple[Any, ...], found: CapacityResult) -> None:
    """Keep a steady-state closed-loop capacity that a latency SLO (not the ceiling) bounds, for
    a search of the same candidate up to another ceiling (another peak concurrency). Not one
    the KV headroom bounds: its search below the latency edge depends on the range it
    bisects."""
    if found.edge is not None and found.limited_by in ("ttft", "tpot", "e2e"):
        cache.keep(_below_ceiling_key(key), found)


def _reuse_below_ceiling(
    cache: CapacityCache, key: tuple[Any, ...], ceiling: int, layout: LayoutCandidate
) -> None:
    """Memoise under ``key`` (a search up to ``ceiling`` requests in flight) the capacity a
    search up to another ceiling found, when its edge lies below both: the SLO broke at
    ``edge + 1`` requests a scheduler, within this search's range too, so searching it again
    finds the same edge, state and prediction (for latencies that grow with the load)."""
    held = cache.held(_below_ceiling_key(key))
    if held is None or held.edge is None:
        return
    schedulers = max(layout.attention_dp, 1)
    if held.edge.index + 1 <= math.ceil(ceiling / schedulers):
        cache.keep(key, held)


def _rank_key(rec: Recommendation | Quote) -> tuple[float, ...]:
    # Equal bills (same instances bought) are told apart by the memory share (a plan at its
    # engine's default first: a raised one leaves less room for activation spikes and CUDA
    # graphs), then by speculation (a plan without it first: a speculating plan's capacity
    # rests on the acceptance the workload gives, which may fall short of the one assumed),
    # then headroom, then latency.
    headroom = rec.replicas * rec.max_rps_per_replica
    return (
        rec.usd_per_million_output_tokens,
        rec.usd_per_hour,
        float(rec.memory_raised),
        float(rec.spec_method != "none"),
        -headroom,
        rec.pred_ttft_ms_p99,
    )


def _replica_layouts(layouts: Sequence[LayoutCandidate]) -> list[Any]:
    """One layout per (instance, TP, PP, precision, KV dtype): the fewest instances that hold
    one replica. A layout with DP > 1 only repeats replicas, which the replica count covers."""
    best: dict[tuple[Any, ...], Any] = {}
    for layout in layouts:
        key = (
            layout.instance,
            layout.tp,
            layout.pp,
            layout.attention_dp,
            layout.expert_parallel,
            layout.precision,
            layout.kv_cache_dtype,
            layout.engine.spec_method,
            layout.engine.num_spec_tokens,
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
    catalog: Catalog, request: RecommendRequest, ranked: list[Quote]
) -> tuple[list[Quote], list[Rejected]]:
    """Keep the cheapest layout, engine settings and region of each instance type and
    precision (``ranked`` in rank order); the other layouts of it are rejected, saying what
    beat them."""
    best: dict[tuple[Any, ...], Quote] = {}
    kept, beaten = [], []
    seen_layouts: set[tuple[Any, ...]] = set()
    for q in ranked:
        layout = q.layout
        key = _configuration_key(layout)
        layout_key = (*key, layout.tp, layout.pp, layout.attention_dp, layout.expert_parallel)
        if key not in best:
            best[key] = q
            kept.append(q)
            seen_layouts.add(layout_key)
            continue
        if layout_key in seen_layouts:
            continue  # the same layout in a dearer region or with other engine settings
        seen_layouts.add(layout_key)
        winner = best[key].layout
        beaten.append(
            Rejected(
                instance=layout.instance,
                nodes=layout.nodes,
                tp=layout.tp,
                pp=layout.pp,
                dp=q.replicas_per_group,
                precision=layout.precision,
                kv_cache_dtype=layout.kv_cache_dtype,
                engine_settings=resolved_engine(catalog, request, layout, q.settings).label,
                reason=(
                    f"meets the SLO at ${q.usd_per_million_output_tokens:,.2f}/M output "
                    f"tokens; TP{winner.tp} PP{winner.pp} on the same instance does it for "
                    f"${best[key].usd_per_million_output_tokens:,.2f}/M"
                ),
            )
        )
    return kept, beaten
