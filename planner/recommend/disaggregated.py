"""The search's disaggregated dimension: a prefill pool and a decode pool in place of replicas.

For each instance type, precision and KV dtype the aggregated search already laid out
(:func:`planner.layouts.enumerate_layouts`, the same feasible one-replica layouts), a
disaggregated candidate is built, bounded so the search keeps its speed:

1. **where it applies** (else one rejection with the reason): ``disaggregation`` not
   ``off``; a request-rate demand (a closed loop has no rate to split between the pools); an
   MoE model, or a dense one whose smallest replica needs at least :data:`DENSE_MIN_GPUS` GPUs
   (the published gains of the split are at that scale: DistServe's OPT-66B/175B, SGLang's and
   Dynamo's DeepSeek deployments; a smaller dense model is left aggregated, a bound of this
   search, not a finding); an instance with an inter-node network in the catalog
   (:func:`instance_link`), since the pools sit on separate instances;
2. **each pool's best layout**: every feasible one-instance layout of the configuration (TP x
   attention-DP, with or without EP; for an MoE model with EP also the wide-EP decode layouts
   over 2 and 4 instances, up to ``max_nodes``) is priced as a prefill pool and as a decode pool
   (:func:`planner.perf.disaggregated.disaggregated_model`); its capacity inside the SLO per GPU
   ranks it: the decode pool's highest rate whose p99 step (TPOT) meets the TPOT SLO and whose
   batch stays within the KV headroom, the prefill pool's highest rate whose p99 TTFT, plus the
   transfer and the decode pool's p99 step, meets the TTFT SLO. The best of each role is kept
   (:data:`POOL_LAYOUTS_KEPT`);
3. **the P:D ratio**: from :func:`planner.perf.disaggregated.balanced_pools` at those SLO
   capacities (the fewest replicas of each pool that carry the peak), then a few ratios around
   it (one more prefill or decode replica, :data:`RATIO_STEPS`), each predicted whole at the
   peak (:meth:`DisaggregatedModel.at_rate`) and kept when its p99 TTFT and TPOT meet the SLO;
   the cheapest pairing of the configuration is ranked, the others rejected with its price;
4. **cost**: both pools' instances (``ceil(replicas x GPUs an engine / GPUs an instance)``
   each, plus the demand's spare replicas on the decode pool) at the same price as the
   aggregated plans of that instance; $/M output tokens at the throughput served (the average
   rate, or the observed utilisation of the capacity bought), as :mod:`planner.cost` does.

Predictions come from the steady state of each pool (no simulation of two pools exists), so
a disaggregated recommendation's ``prediction_method`` is ``steady state`` and its
confidence ``extrapolated``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from planner.catalog import Catalog, Instance, Price
from planner.cost import usd_per_million_tokens
from planner.engine import EngineConfig
from planner.errors import InvalidInputError
from planner.layouts import LayoutCandidate
from planner.memo import memoised
from planner.perf.disaggregated import (
    DisaggregatedLayout,
    DisaggregatedModel,
    DisaggregatedPrediction,
    PoolLayout,
    balanced_pools,
    disaggregated_model,
)
from planner.perf.model import PerformanceModel
from planner.perf.scenario import Scenario
from planner.plan import Load, Plan, PlanPool, PlanPrediction
from planner.recommend.costing import plan_cost, plan_price, recommendation_costs
from planner.recommend.request import Recommendation, RecommendRequest, Rejected

#: the scenario one replica of a layout runs at a load, req/s (the predictor's)
ScenarioOf = Callable[[LayoutCandidate, EngineConfig, float], Scenario]
#: records a rejection of the configuration: (reason, the layout it concerns or None)
Reject = Callable[..., None]

#: a dense model is searched disaggregated from this many GPUs a replica (a bound, see above)
DENSE_MIN_GPUS = 8
#: pool layouts of each role kept per configuration (the best by SLO capacity per GPU)
POOL_LAYOUTS_KEPT = 2
#: (prefill, decode) replicas added to the balanced pools: the ratios tried around it
RATIO_STEPS: tuple[tuple[int, int], ...] = ((0, 0), (1, 0), (0, 1), (1, 1))
#: instances a wide-EP decode engine may span (each a multiple of the one-instance layout)
WIDE_EP_NODES: tuple[int, ...] = (2, 4)


def instance_link(instance: Instance) -> str | None:
    """The link the KV cache crosses between two instances of this type, or None when the
    catalog states no inter-node network: AWS's is EFA (p5/p5en/p6 3200 Gbps EFA, AWS instance
    specifications), any other stated network InfiniBand (Azure ND H100/H200 v5: 8 x 400 Gb/s
    NDR InfiniBand a VM, Azure's ND v5 series page)."""
    if not instance.network_gbps or instance.gpus < 2:
        return None
    return "efa" if instance.provider == "aws" else "infiniband"


@dataclass(frozen=True)
class _PoolOption:
    """One pool layout of a configuration and its SLO capacity in its role."""

    layout: LayoutCandidate
    pool: PoolLayout
    nodes: int  # instances one engine spans
    capacity_rps: float  # requests/s one engine carries inside the SLO (0: none)

    @property
    def rps_per_gpu(self) -> float:
        return self.capacity_rps / self.pool.gpus_per_replica


@dataclass(frozen=True)
class DisaggregatedQuote:
    """A disaggregated candidate at one price (the figures the ranking compares)."""

    prefill: _PoolOption
    decode: _PoolOption
    layout: DisaggregatedLayout
    prediction: DisaggregatedPrediction
    price: Price
    instances_total: int
    usd_per_hour: float
    usd_per_million_output_tokens: float
    usd_per_million_total_tokens: float
    utilisation: float
    served_rps: float
    capacity_rps: float


def search_disaggregated(
    catalog: Catalog,
    request: RecommendRequest,
    perf: PerformanceModel,
    scenario_of: ScenarioOf,
    layouts: Sequence[LayoutCandidate],
    settings: EngineConfig,
    prices: dict[str, list[Price]],
) -> tuple[list[Recommendation], list[Rejected]]:
    """The disaggregated candidates of ``layouts`` (the search's one-replica layouts, one per
    instance, TP, attention-DP and precision) as recommendations, the best pairing of each
    configuration (instance, precision, KV dtype), and every rejection with its reason.

    ``scenario_of(layout, settings, load)`` is the scenario one replica of ``layout`` would run
    at ``load`` req/s (the predictor's); ``prices`` the prices in scope by instance."""
    ranked: list[Recommendation] = []
    rejected: list[Rejected] = []
    card = catalog.model(request.model)
    arch = card.architecture
    feasible = [lay for lay in layouts if lay.feasible and lay.pp == 1]
    configurations: dict[tuple[str, str, str], list[LayoutCandidate]] = {}
    for lay in feasible:
        key = (lay.instance, lay.precision, lay.kv_cache_dtype)
        configurations.setdefault(key, []).append(lay)

    def reject(key: tuple[str, str, str], reason: str, lay: LayoutCandidate | None = None) -> None:
        rejected.append(
            Rejected(
                instance=key[0],
                nodes=lay.nodes if lay else 1,
                tp=lay.tp if lay else 0,
                pp=1,
                dp=1,
                precision=key[1],
                kv_cache_dtype=key[2],
                engine_settings="disaggregated",
                reason=f"disaggregated: {reason}",
            )
        )

    peak = request.demand.peak
    if request.disaggregation == "off":
        return ranked, rejected
    for key, members in configurations.items():
        if peak is None:
            reject(key, "a closed-loop demand has no request rate to split between the pools")
            continue
        if not arch.is_moe and min(m.gpus_per_replica for m in members) < DENSE_MIN_GPUS:
            reject(
                key,
                f"dense model under {DENSE_MIN_GPUS} GPUs a replica (the split is searched for "
                "MoE models and for dense ones of 8 GPUs and more)",
            )
            continue
        inst = catalog.instance(key[0])
        link = instance_link(inst)
        if link is None:
            reject(key, f"no inter-node link in the catalog for {key[0]} (network_gbps blank)")
            continue
        quote = _best_quote(
            catalog, request, perf, scenario_of, members, settings, inst, link, prices[key[0]],
            peak, lambda reason, lay=None, k=key: reject(k, reason, lay),
        )  # fmt: skip
        if quote is not None:
            ranked.append(recommendation_of_pools(catalog, request, quote, settings))
    return ranked, rejected


def _pool_options(
    members: Sequence[LayoutCandidate], inst: Instance, max_nodes: int, moe: bool
) -> list[tuple[LayoutCandidate, PoolLayout, int]]:
    """The pool layouts of a configuration: each one-instance layout, and with EP on an MoE
    model its wide-EP widenings over :data:`WIDE_EP_NODES` instances."""
    options: list[tuple[LayoutCandidate, PoolLayout, int]] = []
    for lay in members:
        group = lay.tp * lay.attention_dp
        ep = group if lay.expert_parallel else 1
        nodes = max(1, math.ceil(group / inst.gpus))
        options.append(
            (lay, PoolLayout(replicas=1, tp=lay.tp, ep=ep, attention_dp=lay.attention_dp), nodes)
        )
        if moe and lay.expert_parallel and group == inst.gpus:
            for wide in WIDE_EP_NODES:
                if wide > max_nodes:
                    continue
                dp = lay.attention_dp * wide
                options.append(
                    (lay, PoolLayout(replicas=1, tp=lay.tp, ep=lay.tp * dp, attention_dp=dp), wide)
                )
    return options


def _best_quote(
    catalog: Catalog,
    request: RecommendRequest,
    perf: PerformanceModel,
    scenario_of: ScenarioOf,
    members: Sequence[LayoutCandidate],
    settings: EngineConfig,
    inst: Instance,
    link: str,
    prices: list[Price],
    peak: float,
    reject: Reject,
) -> DisaggregatedQuote | None:
    slo = request.slo
    demand = request.demand
    ttft_s = None if slo.ttft_p99_ms is None else slo.ttft_p99_ms / 1e3
    tpot_s = None if slo.tpot_p99_ms is None else slo.tpot_p99_ms / 1e3
    prefill_options: list[_PoolOption] = []
    decode_options: list[_PoolOption] = []
    for lay, pool, nodes in _pool_options(
        members, inst, request.search.max_nodes, catalog.model(request.model).architecture.is_moe
    ):
        # what a pool's capacities depend on (not the demand): memoised on the fitted model,
        # so a re-rank or another load (the Plan page's curve) does not price them again
        inst_key = (inst.gpu_id, inst.gpus, inst.gpu_link_bw_gbps, inst.network_gbps)
        stated = request.engine.memory_stated
        key = ("disaggregated pool", request.model.lower(), request.engine, stated,
               request.workload, request.max_model_len, slo, inst_key, link, lay.precision,
               lay.kv_cache_dtype, settings, pool.tp, pool.ep, pool.attention_dp)  # fmt: skip
        try:
            decode_rps, prefill_rps = memoised(
                perf,
                key,
                functools.partial(
                    _pool_capacities,
                    perf,
                    scenario_of(lay, settings, peak),
                    pool,
                    link,
                    ttft_s,
                    tpot_s,
                    slo.kv_occupancy_max,
                ),
            )
        except InvalidInputError as exc:
            reject(f"pool TP{pool.tp} attention-DP {pool.attention_dp}: {exc}", lay)
            continue
        decode_options.append(_PoolOption(lay, pool, nodes, decode_rps))
        if nodes == 1:
            prefill_options.append(_PoolOption(lay, pool, nodes, prefill_rps))
    prefill_options = _best(prefill_options)
    decode_options = _best(decode_options)
    if not prefill_options or not decode_options:
        role = "prefill" if not prefill_options else "decode"
        reject(f"no {role} pool layout meets the SLO")
        return None
    quotes: list[DisaggregatedQuote] = []
    for pre in prefill_options:
        for dec in decode_options:
            p0, d0 = balanced_pools(peak, pre.capacity_rps, dec.capacity_rps)
            for dp_, dd in RATIO_STEPS:
                prefill = pre.pool.model_copy(update={"replicas": p0 + dp_})
                needed = dec.pool.model_copy(update={"replicas": d0 + dd})
                dm = disaggregated_model(
                    perf,
                    scenario_of(dec.layout, settings, peak),
                    DisaggregatedLayout(prefill=prefill, decode=needed, kv_link=link),
                )
                at_peak = dm.at_rate(peak)
                if not _meets(at_peak, slo.ttft_p99_ms, slo.tpot_p99_ms):
                    continue
                # the demand's spare replicas stand by in the decode pool, as the aggregated
                # plans' do beside theirs
                layout = DisaggregatedLayout(
                    prefill=prefill,
                    decode=needed.model_copy(
                        update={"replicas": needed.replicas + demand.spare_replicas}
                    ),
                    kv_link=link,
                )
                for price in prices:
                    quotes.append(
                        _quote(request, pre, dec, layout, at_peak, price, inst, peak, d0 + dd)
                    )
    if not quotes:
        reject("no P:D ratio around the balance meets the SLO at the peak rate")
        return None
    quotes.sort(key=lambda q: (q.usd_per_million_output_tokens, q.usd_per_hour))
    best = quotes[0]

    def pools_key(q: DisaggregatedQuote) -> tuple[int, ...]:
        p, d = q.layout.prefill, q.layout.decode
        return (p.replicas, p.tp, p.ep, p.attention_dp, d.replicas, d.tp, d.ep, d.attention_dp)

    seen = {pools_key(best)}
    for q in quotes[1:]:
        pools = pools_key(q)
        if pools in seen:
            continue
        seen.add(pools)
        reject(
            f"{_pools_words(q.layout)} meets the SLO at ${q.usd_per_million_output_tokens:,.2f}"
            f"/M output tokens; {_pools_words(best.layout)} does it for "
            f"${best.usd_per_million_output_tokens:,.2f}/M",
            q.decode.layout,
        )
    return best


def _pools_words(layout: DisaggregatedLayout) -> str:
    """``prefill 4 x TP2 DP4 : decode 7 x TP1 DP8`` (replicas x one engine, each pool)."""
    p, d = layout.prefill, layout.decode
    return (
        f"prefill {p.replicas} x TP{p.tp} DP{p.attention_dp} : "
        f"decode {d.replicas} x TP{d.tp} DP{d.attention_dp}"
    )


def _pool_capacities(
    perf: PerformanceModel,
    scenario: Scenario,
    pool: PoolLayout,
    link: str,
    ttft_s: float | None,
    tpot_s: float | None,
    kv_max: float | None,
) -> tuple[float, float]:
    """(decode, prefill) requests/s one engine of ``pool`` carries inside the SLO: the decode
    pool's at its TPOT and KV headroom, the prefill pool's at the TTFT left after the KV
    transfer and the decode pool's p99 step (both pools laid out as ``pool``)."""
    dm = disaggregated_model(
        perf, scenario, DisaggregatedLayout(prefill=pool, decode=pool, kv_link=link)
    )
    decode_rps = _decode_capacity(dm, tpot_s, kv_max)
    step_p99 = dm.decode_pool.at_rate(decode_rps / pool.attention_dp).step_p99_s
    budget = None if ttft_s is None else ttft_s - dm.transfer_s - step_p99
    return decode_rps, _prefill_capacity(dm, budget)


def _meets(at: DisaggregatedPrediction, ttft_ms: float | None, tpot_ms: float | None) -> bool:
    pred = at.prediction
    if not at.stable:
        return False
    if ttft_ms is not None and pred.ttft_ms_p99 > ttft_ms:
        return False
    return tpot_ms is None or pred.tpot_ms_p99 <= tpot_ms


def _best(options: list[_PoolOption]) -> list[_PoolOption]:
    useful = [o for o in options if o.capacity_rps > 0]
    useful.sort(key=lambda o: -o.rps_per_gpu)
    return useful[:POOL_LAYOUTS_KEPT]


def _decode_capacity(dm: DisaggregatedModel, tpot_s: float | None, kv_max: float | None) -> float:
    """Requests/s one decode engine carries with its p99 step within ``tpot_s`` and its batch
    within ``kv_max`` of its seats (bisection on the rate a rank)."""
    pool = dm.decode_pool
    ranks = dm.layout.decode.attention_dp

    def ok(rate: float) -> bool:
        state = pool.at_rate(rate)
        if not state.stable:
            return False
        if tpot_s is not None and state.step_p99_s > tpot_s:
            return False
        return kv_max is None or state.running <= kv_max * state.seats

    return _largest_rate(ok, pool.capacity_rate() * 0.999) * ranks


def _prefill_capacity(dm: DisaggregatedModel, budget_s: float | None) -> float:
    """Requests/s one prefill engine carries with its p99 TTFT within ``budget_s`` (bisection
    on the rate a rank)."""
    state = dm.prefill_state
    ranks = dm.layout.prefill.attention_dp
    hi = state.saturation_rate() * 0.999

    def ok(rate: float) -> bool:
        at = state.at_rate(rate)
        return at.stable and (budget_s is None or at.ttft_p99_s <= budget_s)

    if budget_s is not None and budget_s <= 0:
        return 0.0
    return _largest_rate(ok, hi) * ranks


def _largest_rate(ok: Callable[[float], bool], hi: float) -> float:
    """The largest rate a rank up to ``hi`` that ``ok`` accepts: ``hi`` itself when it does, 0
    when not even ``hi / 1000`` does, else 30 bisection steps between the two (the lower end
    of the last interval: a rate ``ok`` accepted)."""
    if ok(hi):
        return hi
    lo = hi * 1e-3
    if not ok(lo):
        return 0.0
    for _ in range(30):
        mid = (lo + hi) / 2.0
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _instances(pool: PoolLayout, nodes: int, inst: Instance) -> int:
    """Instances a pool takes: whole engines of ``nodes`` instances, or engines packed on one."""
    if nodes > 1:
        return pool.replicas * nodes
    return math.ceil(pool.gpus / inst.gpus)


def _quote(
    request: RecommendRequest,
    pre: _PoolOption,
    dec: _PoolOption,
    layout: DisaggregatedLayout,
    at_peak: DisaggregatedPrediction,
    price: Price,
    inst: Instance,
    peak: float,
    decode_needed: int,
) -> DisaggregatedQuote:
    demand = request.demand
    instances = _instances(layout.prefill, pre.nodes, inst) + _instances(
        layout.decode, dec.nodes, inst
    )
    usd_per_hour = instances * price.usd_per_hour
    capacity_rps = min(layout.prefill.replicas * pre.capacity_rps, decode_needed * dec.capacity_rps)
    capacity_rps = max(capacity_rps, peak)
    average = demand.avg_rate_rps or peak
    utilisation = demand.utilisation or min(1.0, average / capacity_rps)
    served = capacity_rps * utilisation
    return DisaggregatedQuote(
        prefill=pre,
        decode=dec,
        layout=layout,
        prediction=at_peak,
        price=price,
        instances_total=instances,
        usd_per_hour=usd_per_hour,
        usd_per_million_output_tokens=usd_per_million_tokens(
            usd_per_hour, served * request.output_len
        ),
        usd_per_million_total_tokens=usd_per_million_tokens(
            usd_per_hour, served * (request.input_len + request.output_len)
        ),
        utilisation=utilisation,
        served_rps=served,
        capacity_rps=capacity_rps,
    )


def _pool_engine(
    catalog: Catalog, request: RecommendRequest, lay: LayoutCandidate, pool: PoolLayout,
    settings: EngineConfig,
) -> EngineConfig:  # fmt: skip
    inst = catalog.instance(lay.instance)
    return settings.model_copy(
        update={
            "kv_cache_dtype": lay.kv_cache_dtype,
            "max_model_len": request.max_model_len,
            "data_parallel_size": pool.attention_dp,
            "enable_expert_parallel": pool.ep > 1,
        }
    ).resolved(catalog.gpu(inst.gpu_id))


def recommendation_of_pools(
    catalog: Catalog, request: RecommendRequest, q: DisaggregatedQuote, settings: EngineConfig
) -> Recommendation:
    """The :class:`Recommendation` of a disaggregated quote: its typed plan states both pools
    (:class:`planner.plan.PlanPool`); the row's TP, DP and engine settings are the decode
    pool's, ``replicas`` its engines, ``gpus`` both pools' GPUs."""
    inst = catalog.instance(q.prefill.layout.instance)
    pred = q.prediction.prediction
    price = q.price
    pools: dict[str, PlanPool] = {}
    for role, option, pool, util, cap in (
        ("prefill", q.prefill, q.layout.prefill, q.prediction.prefill_utilization,
         q.prediction.prefill_capacity_rps),
        ("decode", q.decode, q.layout.decode, q.prediction.decode_utilization,
         q.prediction.decode_capacity_rps),
    ):  # fmt: skip
        pools[role] = PlanPool(
            replicas=pool.replicas,
            tp=pool.tp,
            ep=pool.ep,
            attention_dp=pool.attention_dp,
            gpu=inst.gpu_id,
            instance=inst.instance,
            nodes=option.nodes,
            engine=_pool_engine(catalog, request, option.layout, pool, settings),
            utilisation=min(1.0, max(0.0, util)),
            capacity_rps_per_replica=cap,
        )
    decode = pools["decode"]
    cost = plan_cost(q, decode.replicas)
    plan = Plan(
        model=catalog.model(request.model).hf_id,
        precision=q.decode.layout.precision,
        gpu=inst.gpu_id,
        instance=inst.instance,
        tp=decode.tp,
        pp=1,
        nodes=decode.nodes,
        replicas=decode.replicas,
        engine=decode.engine,
        workload=request.workload,
        load=Load.rate(pred.request_per_s),
        slo=request.slo,
        prediction=PlanPrediction.of(pred),
        price=plan_price(inst.provider, price),
        cost=cost,
        prefill=pools["prefill"],
        decode=decode,
        kv_link=q.layout.kv_link,
    )
    return Recommendation(
        provider=inst.provider,
        instance=inst.instance,
        region=price.region,
        pricing=price.pricing,
        gpu=inst.gpu_id,
        nodes=decode.nodes,
        gpus=q.layout.gpus,
        tp=decode.tp,
        pp=1,
        dp=decode.replicas,
        attention_dp=decode.attention_dp,
        expert_parallel=decode.ep > 1,
        precision=plan.precision,
        kv_cache_dtype=q.decode.layout.kv_cache_dtype,
        engine_settings=decode.engine,
        replicas=decode.replicas,
        **recommendation_costs(cost),
        max_rps_per_replica=q.capacity_rps / max(decode.replicas, 1),
        pred_output_tok_per_s_per_replica=pred.output_tok_per_s / max(decode.replicas, 1),
        pred_ttft_ms_p99=pred.ttft_ms_p99,
        pred_ttft_ms_p99_low=pred.ttft_ms_p99_low,
        pred_ttft_ms_p99_high=pred.ttft_ms_p99_high,
        pred_tpot_ms_p99=pred.tpot_ms_p99,
        pred_tpot_ms_p99_low=pred.tpot_ms_p99_low,
        pred_tpot_ms_p99_high=pred.tpot_ms_p99_high,
        pred_e2e_ms_p99=pred.e2e_ms_p99,
        kv_occupancy_peak=pred.kv_occupancy_max,
        confidence=pred.confidence,
        far_from_data=pred.far_from_data,
        uncertain_because=list(pred.uncertain_because),
        vllm_command=f"# disaggregated: {plan.label} (see the deployment files)",
        launch_command=f"# disaggregated: {plan.label} (see the deployment files)",
        price_source=price.source,
        price_as_of=price.as_of.isoformat(),
        prediction_method="steady state",
        disaggregated=True,
        pools=f"prefill {pools['prefill'].label} + decode {decode.label} over {plan.kv_link}",
        plan=plan,
    )


__all__ = [
    "DENSE_MIN_GPUS",
    "POOL_LAYOUTS_KEPT",
    "RATIO_STEPS",
    "DisaggregatedQuote",
    "instance_link",
    "recommendation_of_pools",
    "search_disaggregated",
]
