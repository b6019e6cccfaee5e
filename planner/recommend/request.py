"""What a recommendation is asked (model, workload, demand, SLO, search space) and what it
answers (ranked plans, rejected candidates with their reasons), and the table rows of both."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.catalog import PricingMode
from planner.cost import DEFAULT_SPARE_REPLICAS
from planner.engine import EngineConfig, SpeculativeChoice
from planner.errors import InvalidInputError
from planner.input_checks import MAX_LOAD, MAX_REQUEST_TOKENS
from planner.layouts import LayoutCandidate
from planner.perf.scenario import Prediction
from planner.plan import Plan, PlanWorkload, Slo
from planner.workload import LengthDistribution

#: how the search treats prefill/decode disaggregation (``RecommendRequest.disaggregation``)
Disaggregation = Literal["auto", "off", "on"]
DISAGGREGATION_MODES: tuple[str, ...] = ("auto", "off", "on")


# ----- inputs ------------------------------------------------------------------------------------
class Demand(BaseModel):
    """The load to serve: an average and a peak request rate (req/s), or a peak concurrency
    (requests in flight) and its average (None: the peak), which decides the utilisation."""

    model_config = ConfigDict(frozen=True)

    avg_rate_rps: float | None = Field(default=None, gt=0, le=MAX_LOAD, allow_inf_nan=False)
    peak_rate_rps: float | None = Field(default=None, gt=0, le=MAX_LOAD, allow_inf_nan=False)
    concurrency: int | None = Field(default=None, ge=1, le=MAX_LOAD)
    avg_concurrency: float | None = Field(default=None, gt=0, le=MAX_LOAD, allow_inf_nan=False)
    spare_replicas: int = Field(default=DEFAULT_SPARE_REPLICAS, ge=0, le=1_000)
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
        if self.avg_concurrency is not None and self.avg_concurrency > (self.concurrency or 0):
            raise InvalidInputError(
                "avg_concurrency", self.avg_concurrency, f"<= concurrency ({self.concurrency})"
            )
        return self

    @property
    def peak(self) -> float | None:
        return self.peak_rate_rps or self.avg_rate_rps


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
    #: speculative decoding searched: "off"; one method; "auto": MTP where the model has the
    #: layers, EAGLE-3 where a draft is published, and n-gram for a model with neither (its
    #: acceptance being the workload's). planner.perf.speculative.auto_methods
    speculative: SpeculativeChoice = "off"


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
    #: prefill/decode disaggregation as a dimension of the search
    #: (:mod:`planner.recommend.disaggregated`): ``off`` aggregated replicas only, ``auto``
    #: both kinds ranked together, ``on`` disaggregated plans only
    disaggregation: Disaggregation = "off"
    #: the settings every candidate starts from (engine, gpu_memory_utilization, ...); the
    #: search space's grid sets the batch knobs, its KV dtypes the cache dtype
    engine: EngineConfig = EngineConfig()
    #: the workload's mean accepted tokens a speculative step (None: each method's default)
    spec_accept_len: float | None = Field(default=None, ge=1, le=17, allow_inf_nan=False)

    @property
    def max_model_len(self) -> int:
        """What every candidate is judged at and started with: the engine's ``max_model_len``
        when the request states one, else the longest request the workload sends."""
        return self.engine.max_model_len or self.workload.longest_request

    @property
    def workload(self) -> PlanWorkload:
        """The lengths the predictions sample (the distributions, else the fixed means)."""
        input_len = self.input_dist or self.input_len
        return PlanWorkload.of(
            input_len, self.output_dist or self.output_len, self.prefix_share, self.spec_accept_len
        )


# ----- what the performance model must provide ---------------------------------------------------
#: What a predictor is asked: "rate" (req/s), "concurrency" (requests in flight),
#: "saturation" (a full batch in flight, only to bound throughput: may be simulated coarsely).
PredictKind = Literal["rate", "concurrency", "saturation"]

#: (layout, engine settings, load kind, load) -> prediction of one replica.
Predictor = Callable[[LayoutCandidate, EngineConfig, PredictKind, float], Prediction]


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
    #: MoE layout: attention data-parallel ranks inside a replica, whole experts per GPU
    attention_dp: int = 1
    expert_parallel: bool = False
    precision: str
    kv_cache_dtype: str
    #: speculative decoding: the method (none without), its draft tokens a step and the mean
    #: accepted tokens a step the prediction used
    spec_method: str = "none"
    num_spec_tokens: int | None = None
    pred_spec_accept_len: float | None = None
    #: why the plan speculates with its method and what the acceptance rests on, in words
    #: (:func:`planner.perf.speculative.speculation_reason`); "" without speculation
    spec_reason: str = ""
    engine_settings: EngineConfig = Field(description="resolved: what the plan runs with")
    #: the engine's memory share the plan starts and is predicted with (vLLM's
    #: gpu_memory_utilization, SGLang's mem_fraction_static, TensorRT-LLM's
    #: kv_cache_free_gpu_memory_fraction; None: not stated, e.g. a disaggregated plan's)
    memory_fraction: float | None = None
    #: the layout starts only with the share raised above the engine's default
    #: (planner.recommend.startup); its launch command sets it
    memory_raised: bool = False
    #: what the raise costs, in words, with the engine's documentation ("" at the default)
    memory_note: str = ""
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
    #: what about the plan the measured data do not cover, in words (why it is uncertain)
    uncertain_because: list[str] = Field(default_factory=list)
    #: each p99 SLO the point prediction meets but whose 80% interval reaches above it, in
    #: words (:func:`planner.recommend.capacity.slo_straddles`); ranked by the point all the same
    slo_straddles: list[str] = Field(default_factory=list)
    #: which engine release's measurements the prediction used (Prediction.release_note)
    release_note: str | None = None
    #: the plan as ``vllm serve``; for an SGLang or TensorRT-LLM plan its vLLM equivalent, at
    #: vLLM's default memory share (:meth:`planner.plan.Plan.vllm_config`), not the command
    #: to run: that is ``launch_command``
    vllm_command: str
    #: the command of the request's engine (``vllm serve``, ``python -m sglang.launch_server``
    #: or ``trtllm-serve``); for vLLM the same as ``vllm_command``
    launch_command: str = ""
    price_source: str
    price_as_of: str
    #: energy at the plan's utilisation (planner.owned.deployment_energy); None: no power figure
    kwh_per_million_output_tokens: float | None = None
    joules_per_output_token: float | None = None
    energy_basis: str = ""
    prediction_method: Literal["simulation", "steady state"] = Field(
        default="simulation",
        description="how its capacity and latencies were predicted: simulated (the shortlist) "
        "or from the steady state of continuous batching (the rest of the ranking)",
    )
    #: a prefill pool and a decode pool (``plan.prefill``/``plan.decode``) in place of replicas
    disaggregated: bool = False
    #: the pools in words (``prefill 2 x p5en.48xlarge TP8 + decode ...``); "" when aggregated
    pools: str = ""
    plan: Plan = Field(description="one replica of it, typed, as the Verify page runs it")

    @property
    def label(self) -> str:
        if self.disaggregated:
            return f"{self.pools} {self.precision}"
        moe = f" DP-attention {self.attention_dp}" if self.attention_dp > 1 else ""
        moe += " EP" if self.expert_parallel else ""
        return f"{self.instance} TP{self.tp} PP{self.pp}{moe} {self.precision}"


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
    #: the p99s predicted at the lowest load searched, when even that load broke an SLO (what
    #: the configuration achieves at best; :func:`planner.recommend.analysis.unmet_slos`)
    lowest_ttft_ms_p99: float | None = None
    lowest_tpot_ms_p99: float | None = None
    lowest_e2e_ms_p99: float | None = None


#: Rejected's fields that are for the summary of unmet SLOs, not for the table of rejections
_SUMMARY_ONLY = {"lowest_ttft_ms_p99", "lowest_tpot_ms_p99", "lowest_e2e_ms_p99"}


class RecommendationResult(BaseModel):
    request: RecommendRequest
    ranked: list[Recommendation]
    rejected: list[Rejected]
    evaluations: int = Field(description="performance-model predictions made (cache misses)")

    @property
    def best(self) -> Recommendation | None:
        return self.ranked[0] if self.ranked else None


# ----- table rows --------------------------------------------------------------------------------
RANKING_COLUMNS = [
    "rank", "provider", "instance", "region", "pricing", "gpu", "nodes", "tp", "pp", "dp",
    "attention_dp", "expert_parallel", "precision", "kv_cache_dtype", "spec_method",
    "num_spec_tokens", "pred_spec_accept_len", "spec_reason", "engine_settings",
    "memory_fraction", "memory_raised", "memory_note", "replicas", "instances_total",
    "usd_per_hour", "usd_per_million_output_tokens", "usd_per_million_total_tokens",
    "usd_per_request", "monthly_usd", "utilisation", "max_rps_per_replica",
    "pred_ttft_ms_p99", "pred_ttft_ms_p99_low", "pred_ttft_ms_p99_high", "pred_tpot_ms_p99",
    "pred_tpot_ms_p99_low", "pred_tpot_ms_p99_high", "slo_straddle", "kv_occupancy_peak",
    "confidence",
    "far_from_data", "uncertain_because", "prediction_method", "vllm_command", "launch_command",
    "price_source", "price_as_of", "kwh_per_million_output_tokens", "joules_per_output_token",
    "energy_basis",
]  # fmt: skip


#: the columns a ranking adds when the search had disaggregation on (``auto``/``on``)
DISAGGREGATION_COLUMNS = ["disaggregated", "pools"]


def ranking_rows(result: RecommendationResult) -> list[dict[str, Any]]:
    columns = RANKING_COLUMNS
    if result.request.disaggregation != "off":
        columns = [*RANKING_COLUMNS[:2], *DISAGGREGATION_COLUMNS, *RANKING_COLUMNS[2:]]
    rows = []
    for rec in result.ranked:
        row = rec.model_dump(exclude={"plan"})
        row["engine_settings"] = rec.engine_settings.label
        row["uncertain_because"] = "; ".join(rec.uncertain_because)
        row["slo_straddle"] = "; ".join(rec.slo_straddles)
        rows.append({c: row.get(c) for c in columns})
    return rows


def rejected_rows(result: RecommendationResult) -> list[dict[str, Any]]:
    return [r.model_dump(exclude=_SUMMARY_ONLY) for r in result.rejected]


def grid_value(value: int | None, name: str) -> int:
    """A batch knob of a grid point (always stated there)."""
    if value is None:
        raise InvalidInputError(name, value, "a value of the search space's grid")
    return value
