"""What a candidate that meets the SLO costs: replicas for the demand, instances, $/hour,
$/M output and total tokens at the observed utilisation, $/request and $/month, with the
arithmetic of :mod:`planner.cost`, and the energy it draws (:mod:`planner.owned`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from planner.catalog import Catalog, ModelCard, Price
from planner.cost import HOURS_PER_MONTH, cost_per_request, usd_per_million_tokens
from planner.engine import EngineConfig
from planner.engine_command import launch_command
from planner.errors import InvalidInputError
from planner.layouts import LayoutCandidate
from planner.owned import deployment_energy
from planner.perf.deployment import SPECULATION_NOTE, default_memory_fraction
from planner.perf.speculative import speculation_reason
from planner.plan import Plan, PlanCost, PlanPrediction, PlanPrice
from planner.recommend.capacity import (
    CapacityResult,
    plan_load,
    raised_memory,
    seats,
    slo_straddles,
)
from planner.recommend.request import Recommendation, RecommendRequest
from planner.recommend.startup import memory_note
from planner.vllm_command import vllm_serve_command


@dataclass(frozen=True)
class Quote:
    """A candidate at one price: the figures the ranking compares (same names as a
    :class:`Recommendation`'s), before the recommendation is written out. A search quotes
    every candidate at every price and writes out only those it keeps
    (:func:`recommendation_of`)."""

    layout: LayoutCandidate
    settings: EngineConfig
    capacity: CapacityResult
    price: Price
    kind: Literal["rate", "concurrency"]
    replicas: int
    replicas_per_group: int
    instances_total: int
    usd_per_hour: float
    usd_per_million_output_tokens: float
    usd_per_million_total_tokens: float
    utilisation: float
    served_rps: float
    max_rps_per_replica: float
    pred_output_tok_per_s_per_replica: float
    pred_ttft_ms_p99: float

    @property
    def memory_raised(self) -> bool:
        """The layout starts only at a memory share raised above its engine's default."""
        return self.layout.raised_memory_fraction is not None

    @property
    def spec_method(self) -> str:
        """The layout's speculative method ("none" without one)."""
        return self.layout.spec_method


def quote(
    catalog: Catalog,
    request: RecommendRequest,
    layout: LayoutCandidate,
    settings: EngineConfig,
    capacity: CapacityResult,
    price: Price,
    kind: Literal["rate", "concurrency"],
) -> Quote:
    """The candidate at ``price``: replicas = ceil(peak / capacity of one replica) + spares,
    grouped DP to an instance group; utilisation = average demand / capacity bought (or the
    observed one); $/M tokens at the throughput actually served."""
    demand = request.demand
    prediction = capacity.prediction
    assert prediction is not None
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
        average = demand.avg_concurrency or demand.concurrency
        average_rps = per_replica_rps * average / capacity.max_load
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
    return Quote(
        layout=layout,
        settings=settings,
        capacity=capacity,
        price=price,
        kind=kind,
        replicas=replicas,
        replicas_per_group=replicas_per_group,
        instances_total=instances_total,
        usd_per_hour=usd_per_hour,
        usd_per_million_output_tokens=usd_per_million_tokens(usd_per_hour, output_tps),
        usd_per_million_total_tokens=usd_per_million_tokens(usd_per_hour, total_tps),
        utilisation=utilisation,
        served_rps=served_rps,
        max_rps_per_replica=per_replica_rps,
        pred_output_tok_per_s_per_replica=replica_output_tps,
        pred_ttft_ms_p99=float(prediction.ttft_ms_p99),
    )


def resolved_engine(
    catalog: Catalog, request: RecommendRequest, layout: LayoutCandidate, settings: EngineConfig
) -> EngineConfig:
    """The engine settings a plan of ``layout`` runs with, every default filled in."""
    inst = catalog.instance(layout.instance)
    return settings.model_copy(
        update={
            "kv_cache_dtype": layout.kv_cache_dtype,
            "max_model_len": request.max_model_len,
            "data_parallel_size": layout.attention_dp,
            "enable_expert_parallel": layout.expert_parallel,
            "spec_method": layout.engine.spec_method,
            "num_spec_tokens": layout.engine.num_spec_tokens,
            **raised_memory(layout),
        }
    ).resolved(catalog.gpu(inst.gpu_id))


def memory_columns(
    catalog: Catalog, card: ModelCard, layout: LayoutCandidate, engine: EngineConfig
) -> dict[str, object]:
    """A plan's memory share: what its engine runs with (``memory_fraction``: vLLM's
    gpu_memory_utilization, SGLang's mem_fraction_static, TensorRT-LLM's
    kv_cache_free_gpu_memory_fraction), whether it is raised above the engine's default and
    the note that says what that costs (:mod:`planner.recommend.startup`)."""
    gpu = catalog.gpu(catalog.instance(layout.instance).gpu_id)
    default = default_memory_fraction(engine, gpu, card.architecture, tp=layout.tp, pp=layout.pp)
    raised = layout.raised_memory_fraction
    return {
        "memory_fraction": engine.gpu_memory_utilization if engine.memory_stated else default,
        "memory_raised": raised is not None,
        "memory_note": "" if raised is None else memory_note(engine.family, raised, default),
    }


class _Costed(Protocol):
    """What a plan's costs are read from: a quote of one pool or of a prefill/decode pair."""

    @property
    def instances_total(self) -> int: ...
    @property
    def usd_per_hour(self) -> float: ...
    @property
    def usd_per_million_output_tokens(self) -> float: ...
    @property
    def usd_per_million_total_tokens(self) -> float: ...
    @property
    def served_rps(self) -> float: ...
    @property
    def utilisation(self) -> float: ...


def plan_cost(q: _Costed, replicas: int) -> PlanCost:
    """The :class:`PlanCost` of a quote (``replicas``: the plan's replica count)."""
    return PlanCost(
        replicas=replicas,
        instances_total=q.instances_total,
        usd_per_hour=q.usd_per_hour,
        usd_per_million_output_tokens=q.usd_per_million_output_tokens,
        usd_per_million_total_tokens=q.usd_per_million_total_tokens,
        usd_per_request=cost_per_request(q.usd_per_hour, q.served_rps),
        monthly_usd=q.usd_per_hour * HOURS_PER_MONTH,
        utilisation=q.utilisation,
    )


#: the columns of a Recommendation that repeat its plan's costs
_COST_COLUMNS = {
    "instances_total",
    "usd_per_hour",
    "usd_per_million_output_tokens",
    "usd_per_million_total_tokens",
    "usd_per_request",
    "monthly_usd",
    "utilisation",
}


def recommendation_costs(cost: PlanCost) -> dict[str, float]:
    """A :class:`Recommendation`'s cost columns: its plan's :class:`PlanCost`, as
    :func:`plan_cost` made it from the quote (aggregated and disaggregated plans alike)."""
    return cost.model_dump(include=_COST_COLUMNS)


def plan_price(provider: str, price: Price) -> PlanPrice:
    """The price a plan states: the provider's, at the catalog price's region, mode, $/hour,
    source and date (aggregated and disaggregated plans alike)."""
    return PlanPrice(
        provider=provider,
        region=price.region,
        pricing=price.pricing,
        usd_per_hour=price.usd_per_hour,
        source=price.source,
        as_of=price.as_of,
    )


def _acceptance_note(notes: Sequence[str]) -> str | None:
    """The prediction's note on its speculation (method, draft length, acceptance and its
    source), without its prefix; None when it made none."""
    return next(
        (n.removeprefix(SPECULATION_NOTE) for n in notes if n.startswith(SPECULATION_NOTE)), None
    )


def recommendation_of(catalog: Catalog, request: RecommendRequest, q: Quote) -> Recommendation:
    """The :class:`Recommendation` of a quote: its plan, prediction, costs and commands."""
    layout, price, capacity = q.layout, q.price, q.capacity
    prediction = capacity.prediction
    assert prediction is not None
    inst = catalog.instance(layout.instance)
    card = catalog.model(request.model)
    engine = resolved_engine(catalog, request, layout, q.settings)
    cost = plan_cost(q, q.replicas)
    plan = Plan(
        model=card.hf_id,
        precision=layout.precision,
        gpu=inst.gpu_id,
        instance=layout.instance,
        tp=layout.tp,
        pp=layout.pp,
        nodes=max(1, math.ceil(layout.nodes / q.replicas_per_group)),
        replicas=q.replicas,
        engine=engine,
        workload=request.workload,
        load=plan_load(q.kind, capacity.max_load),
        slo=request.slo,
        prediction=PlanPrediction.of(prediction),
        price=plan_price(inst.provider, price),
        cost=cost,
    )
    energy = deployment_energy(
        catalog, layout.instance, q.instances_total, q.utilisation,
        q.served_rps * request.output_len,
    )  # fmt: skip
    return Recommendation(
        provider=inst.provider,
        instance=layout.instance,
        region=price.region,
        pricing=price.pricing,
        gpu=inst.gpu_id,
        nodes=layout.nodes,
        gpus=layout.gpus_per_replica * q.replicas_per_group,
        tp=layout.tp,
        pp=layout.pp,
        dp=q.replicas_per_group,
        attention_dp=layout.attention_dp,
        expert_parallel=layout.expert_parallel,
        precision=layout.precision,
        kv_cache_dtype=layout.kv_cache_dtype,
        spec_method=engine.spec_method,
        num_spec_tokens=engine.num_spec_tokens,
        pred_spec_accept_len=prediction.spec_accept_len,
        **memory_columns(catalog, card, layout, engine),
        spec_reason=speculation_reason(
            card,
            engine.family,
            engine.spec_method,
            _acceptance_note(prediction.notes),
        ),
        engine_settings=engine,
        replicas=q.replicas,
        **recommendation_costs(cost),
        max_rps_per_replica=q.max_rps_per_replica,
        pred_output_tok_per_s_per_replica=q.pred_output_tok_per_s_per_replica,
        pred_ttft_ms_p99=q.pred_ttft_ms_p99,
        pred_ttft_ms_p99_low=prediction.ttft_ms_p99_low,
        pred_ttft_ms_p99_high=prediction.ttft_ms_p99_high,
        pred_tpot_ms_p99=float(prediction.tpot_ms_p99),
        pred_tpot_ms_p99_low=prediction.tpot_ms_p99_low,
        pred_tpot_ms_p99_high=prediction.tpot_ms_p99_high,
        pred_e2e_ms_p99=prediction.e2e_ms_p99,
        kv_occupancy_peak=prediction.kv_occupancy_max,
        confidence=prediction.confidence,
        far_from_data=prediction.far_from_data,
        uncertain_because=list(prediction.uncertain_because),
        slo_straddles=slo_straddles(prediction, request.slo),
        release_note=prediction.release_note,
        vllm_command=vllm_serve_command(plan.vllm_config()),
        launch_command=_launch_line(plan),
        price_source=price.source,
        price_as_of=price.as_of.isoformat(),
        kwh_per_million_output_tokens=energy.kwh_per_million_output_tokens if energy else None,
        joules_per_output_token=energy.joules_per_output_token if energy else None,
        energy_basis=energy.basis if energy else "no power figure for this GPU",
        plan=plan,
    )


def usd_per_hour_bound(
    request: RecommendRequest,
    layout: LayoutCandidate,
    settings: EngineConfig,
    saturated: CapacityResult,
    usd_per_instance_hour: float,
    kind: Literal["rate", "concurrency"],
) -> float:
    """The least this candidate can cost: replicas at their saturated throughput."""
    demand = request.demand
    if kind == "rate":
        ceiling_rps = saturated.output_tok_per_s / request.output_len
        needed = math.ceil((demand.peak or 0.0) / max(ceiling_rps, 1e-9) - 1e-9)
    else:
        needed = math.ceil((demand.concurrency or 1) / seats(layout, settings) - 1e-9)
    replicas = max(needed, 1) + demand.spare_replicas
    groups = math.ceil(replicas / max(layout.dp, 1))
    return groups * layout.nodes * usd_per_instance_hour


def usd_per_hour_floor(
    request: RecommendRequest, layout: LayoutCandidate, usd_per_instance_hour: float
) -> float:
    """Less than :func:`usd_per_hour_bound` can ever be, without a prediction: the fewest
    replica groups any demand needs (one replica and the spares) at the cheapest price."""
    groups = math.ceil((1 + request.demand.spare_replicas) / max(layout.dp, 1))
    return groups * layout.nodes * usd_per_instance_hour


def _launch_line(plan: Plan) -> str:
    """The plan's launch command (:mod:`planner.engine_command`), or why its engine cannot
    spell the layout, as a shell comment (a ranking row never fails for it)."""
    try:
        return launch_command(plan)
    except InvalidInputError as exc:
        return f"# {exc}"
