"""A plan: what to deploy, how it is loaded, and what it was predicted to do, as one typed value.

A :class:`Plan` goes from the recommendation (:attr:`planner.recommend.Recommendation.plan`) to
the Verify page, into a verification run's ``run.json`` (``plan``, as
``plan.model_dump(mode="json")``), to the verification ledger (:func:`Plan.scenario` is what a
run of it is predicted by) and back (:func:`read_plan`), with no field re-read by hand:

- the deployment of one replica: model, weight precision, GPU, instance, TP x PP, the
  instances it spans, and how many replicas the deployment runs;
- the engine settings, resolved (:class:`planner.engine.EngineConfig`: what the printed
  ``vllm serve`` line states, ``max_model_len`` included);
- the workload (the length distributions the prediction sampled) and the load one replica
  was sized for (:class:`Load`, one vocabulary: :data:`planner.workload.LoadKind`);
- the SLO, the prediction with its 80% intervals, the price with its source and date, and
  the cost at that price.

Run files written before plans were typed hold a flat object (``engine``, ``model``, ``gpu``,
``tp``, ``max_num_seqs``, ...): :func:`read_plan` reads both.
"""

from __future__ import annotations

import math
from datetime import date
from functools import lru_cache
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    ValidationError,
    field_serializer,
    model_validator,
)

from planner.engine import EngineConfig
from planner.errors import InvalidInputError
from planner.input_checks import MAX_SLO_MS
from planner.loads import LoadKind
from planner.perf.disaggregated import DisaggregatedLayout, PoolLayout
from planner.perf.scenario import Prediction, Scenario, engine_fields
from planner.vllm_command import VllmServeConfig
from planner.workload import LengthDistribution

#: Peak KV-cache occupancy a plan may reach by default: above it a burst or a long answer
#: makes vLLM preempt (recompute) requests, and latency jumps.
DEFAULT_KV_HEADROOM = 0.9


class Slo(BaseModel):
    """What a plan must keep: latency targets at the 99th percentile (None: no limit) and the
    KV-cache headroom, the peak share of the KV pool its requests may hold (None: the pool)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ttft_p99_ms: float | None = Field(default=None, gt=0, le=MAX_SLO_MS, allow_inf_nan=False)
    tpot_p99_ms: float | None = Field(default=None, gt=0, le=MAX_SLO_MS, allow_inf_nan=False)
    e2e_p99_ms: float | None = Field(default=None, gt=0, le=MAX_SLO_MS, allow_inf_nan=False)
    kv_occupancy_max: float | None = Field(default=DEFAULT_KV_HEADROOM, gt=0, le=1)


class Load(BaseModel):
    """How requests are offered (:data:`planner.workload.LoadKind`) and how many are sent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: LoadKind = "concurrency"
    concurrency: float | None = Field(default=None, gt=0)
    request_rate: float | None = Field(default=None, gt=0)
    num_requests: int | None = Field(default=None, gt=0)
    burstiness_cv: float = Field(default=1.0, gt=0)

    @model_validator(mode="after")
    def _parameter(self) -> Load:
        if self.kind in ("concurrency", "offline_batch") and self.concurrency is None:
            raise ValueError(f"concurrency is required for load '{self.kind}'")
        if self.kind == "rate" and self.request_rate is None:
            raise ValueError("request_rate is required for load 'rate'")
        return self

    @classmethod
    def closed_loop(cls, concurrency: float, num_requests: int | None = None) -> Load:
        return cls(kind="concurrency", concurrency=concurrency, num_requests=num_requests)

    @classmethod
    def rate(cls, request_rate: float, num_requests: int | None = None) -> Load:
        return cls(kind="rate", request_rate=request_rate, num_requests=num_requests)

    @property
    def value(self) -> float:
        """Requests in flight, or requests per second."""
        value = self.request_rate if self.kind == "rate" else self.concurrency
        return float(value or 0.0)

    def scenario_fields(self) -> dict[str, Any]:
        """The load as :class:`~planner.perf.scenario.Scenario` keyword arguments."""
        return {
            "load": self.kind,
            "concurrency": None if self.kind == "rate" else self.concurrency,
            "request_rate": self.request_rate if self.kind == "rate" else None,
            "num_requests": self.num_requests,
            "burstiness_cv": self.burstiness_cv,
        }

    def describe(self) -> str:
        if self.kind == "rate":
            return f"{self.request_rate:g} req/s"
        return f"{self.concurrency:g} in flight" if self.kind == "concurrency" else self.kind


def _engine_as_stated(engine: EngineConfig, info: SerializationInfo) -> dict[str, Any]:
    """A plan's engine settings as the plan states them: only the fields that were set, so a
    plan read back (:func:`read_plan`) has the same settings stated and the rest at their
    defaults. A full dump would read back with every field stated, and the launch command would
    then pass each of them, e.g. an SGLang plan ``--mem-fraction-static 0.9`` (the 0.9 an
    :class:`~planner.engine.EngineConfig` holds for vLLM) in place of SGLang's own default."""
    return engine.model_dump(mode=info.mode, exclude_unset=True)


class PlanWorkload(BaseModel):
    """Prompt and answer lengths (what the prediction sampled) and the shared-prefix share."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_len: LengthDistribution
    output_len: LengthDistribution
    prefix_share: float = Field(default=0.0, ge=0, lt=1)
    #: mean tokens a speculative step accepts (bonus included) on this workload; None: the
    #: method's published default (planner.perf.speculative)
    spec_accept_len: float | None = Field(default=None, ge=1)

    @classmethod
    def of(
        cls,
        input_len: int | LengthDistribution,
        output_len: int | LengthDistribution,
        prefix_share: float = 0.0,
        spec_accept_len: float | None = None,
    ) -> PlanWorkload:
        def dist(length: int | LengthDistribution) -> LengthDistribution:
            return length if isinstance(length, LengthDistribution) else _fixed(length)

        return cls(
            input_len=dist(input_len),
            output_len=dist(output_len),
            prefix_share=prefix_share,
            spec_accept_len=spec_accept_len,
        )

    @property
    def mean_input_len(self) -> int:
        return max(1, round(self.input_len.mean()))

    @property
    def mean_output_len(self) -> int:
        return max(1, round(self.output_len.mean()))

    @property
    def longest_request(self) -> int:
        """Tokens of the longest request it sends: what ``--max-model-len`` must admit."""
        return self.input_len.max() + self.output_len.max()

    def scenario_fields(self) -> dict[str, Any]:
        """Fixed lengths as ``*_len``, any other distribution as ``*_dist``."""
        fields: dict[str, Any] = {"prefix_share": self.prefix_share}
        if self.spec_accept_len is not None:
            fields["spec_accept_len"] = self.spec_accept_len
        for side, dist in (("input", self.input_len), ("output", self.output_len)):
            if dist.kind == "fixed":
                fields[f"{side}_len"] = dist.quantile(1.0)
            else:
                fields[f"{side}_dist"] = dist
        return fields


def _fixed(length: int) -> LengthDistribution:
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise InvalidInputError("length", length, "a token count >= 1")
    return _fixed_distribution(length)


@lru_cache(maxsize=1024)
def _fixed_distribution(length: int) -> LengthDistribution:
    """One (frozen) fixed distribution per length: a search builds a request's workload per
    candidate, and validating a new one each time is most of what that costs."""
    return LengthDistribution.fixed(length)


class PlanPrediction(BaseModel):
    """What one replica was predicted to do at the plan's load (80% intervals where known)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    output_tok_per_s: float
    output_tok_per_s_low: float | None = None
    output_tok_per_s_high: float | None = None
    request_per_s: float | None = None
    ttft_ms_p99: float
    ttft_ms_p99_low: float | None = None
    ttft_ms_p99_high: float | None = None
    tpot_ms_p99: float
    tpot_ms_p99_low: float | None = None
    tpot_ms_p99_high: float | None = None
    e2e_ms_p99: float | None = None
    kv_occupancy_peak: float | None = None
    confidence: str = "extrapolated"
    far_from_data: bool = True
    nearest_measured: str | None = None
    #: mean accepted tokens a speculative step the prediction used (None: no speculation)
    spec_accept_len: float | None = None

    @classmethod
    def of(cls, prediction: Prediction) -> PlanPrediction:
        def finite(value: float) -> float | None:
            return value if math.isfinite(value) else None

        return cls(
            output_tok_per_s=prediction.output_tok_per_s,
            output_tok_per_s_low=finite(prediction.output_tok_per_s_low),
            output_tok_per_s_high=finite(prediction.output_tok_per_s_high),
            request_per_s=finite(prediction.request_per_s),
            ttft_ms_p99=prediction.ttft_ms_p99,
            ttft_ms_p99_low=finite(prediction.ttft_ms_p99_low),
            ttft_ms_p99_high=finite(prediction.ttft_ms_p99_high),
            tpot_ms_p99=prediction.tpot_ms_p99,
            tpot_ms_p99_low=finite(prediction.tpot_ms_p99_low),
            tpot_ms_p99_high=finite(prediction.tpot_ms_p99_high),
            e2e_ms_p99=finite(prediction.e2e_ms_p99),
            kv_occupancy_peak=finite(prediction.kv_occupancy_max),
            confidence=prediction.confidence,
            far_from_data=prediction.far_from_data,
            nearest_measured=prediction.nearest_measured,
            spec_accept_len=prediction.spec_accept_len,
        )


class PlanPrice(BaseModel):
    """The price of one instance the plan was costed at, with its source and date."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str
    region: str
    pricing: str
    usd_per_hour: float = Field(gt=0)
    source: str
    as_of: date


class PlanCost(BaseModel):
    """The deployment at that price (every replica, spares included)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    replicas: int = Field(ge=1)
    instances_total: int = Field(ge=1)
    usd_per_hour: float
    usd_per_million_output_tokens: float
    usd_per_million_total_tokens: float
    usd_per_request: float
    monthly_usd: float
    utilisation: float


class Verification(BaseModel):
    """How a run verified the plan (kept in run.json with it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoint: str
    slowdown: float = 1.0
    faults: dict[str, float] = Field(default_factory=dict)


class PlanPool(BaseModel):
    """One pool of a disaggregated plan (:mod:`planner.perf.disaggregated`): ``replicas``
    engines of ``tp x attention_dp`` GPUs each, on ``nodes`` instances of ``instance`` an
    engine; ``ep`` 1 (experts sliced by TP) or ``tp x attention_dp`` (whole experts a GPU);
    ``engine`` its resolved settings (``data_parallel_size`` = ``attention_dp``,
    ``enable_expert_parallel`` = ``ep > 1``). ``utilisation`` is the share of the pool's
    capacity the plan's load keeps busy, ``capacity_rps_per_replica`` the requests/s one
    engine of it carries at saturation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    replicas: int = Field(ge=1)
    tp: int = Field(default=1, ge=1)
    ep: int = Field(default=1, ge=1)
    attention_dp: int = Field(default=1, ge=1)
    gpu: str
    instance: str | None = None
    nodes: int = Field(default=1, ge=1)
    engine: EngineConfig = EngineConfig()
    utilisation: float | None = Field(default=None, ge=0, le=1)
    capacity_rps_per_replica: float | None = Field(default=None, gt=0)

    @field_serializer("engine")
    def _engine(self, engine: EngineConfig, info: SerializationInfo) -> dict[str, Any]:
        return _engine_as_stated(engine, info)

    @model_validator(mode="after")
    def _ep(self) -> PlanPool:
        if self.ep not in (1, self.tp * self.attention_dp):
            raise ValueError(f"ep must be 1 or tp x attention_dp = {self.tp * self.attention_dp}")
        return self

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.attention_dp

    @property
    def gpus(self) -> int:
        return self.replicas * self.gpus_per_replica

    @property
    def label(self) -> str:
        """``4 x p5en.48xlarge TP8 EP`` (replicas x one engine's layout)."""
        dp = f" DP-attention {self.attention_dp}" if self.attention_dp > 1 else ""
        ep = " EP" if self.ep > 1 else ""
        return f"{self.replicas} x {self.instance or self.gpu} TP{self.tp}{dp}{ep}"


class Plan(BaseModel):
    """One deployment, its engine settings, its workload and load, and what was predicted.

    ``nodes`` are the instances one replica spans; ``replicas`` how many the deployment runs
    behind a load balancer (a verification run measures one). ``workload`` and ``load`` are
    what the plan was sized for; a plan written by hand may leave them to the run.

    A *disaggregated* plan also states ``prefill`` and ``decode``, its two pools, and
    ``kv_link``, what the KV cache crosses between them (a key of
    :data:`planner.perf.disaggregated.KV_LINKS`); its top-level ``gpu``, ``instance``,
    ``tp``, ``nodes``, ``replicas`` and ``engine`` repeat the decode pool's, and ``load``,
    ``prediction`` and ``cost`` are the whole deployment's (both pools). An aggregated plan
    leaves all three None.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    precision: str = "bf16"
    gpu: str
    instance: str | None = None
    tp: int = Field(default=1, ge=1)
    pp: int = Field(default=1, ge=1)
    nodes: int = Field(default=1, ge=1)
    replicas: int = Field(default=1, ge=1)
    engine: EngineConfig = EngineConfig()
    workload: PlanWorkload | None = None
    load: Load | None = None
    slo: Slo = Slo()
    prediction: PlanPrediction | None = None
    price: PlanPrice | None = None
    cost: PlanCost | None = None

    @field_serializer("engine")
    def _engine(self, engine: EngineConfig, info: SerializationInfo) -> dict[str, Any]:
        return _engine_as_stated(engine, info)

    verification: Verification | None = None
    prefill: PlanPool | None = None
    decode: PlanPool | None = None
    kv_link: str | None = None

    @model_validator(mode="after")
    def _pools(self) -> Plan:
        stated = (self.prefill is not None, self.decode is not None, self.kv_link is not None)
        if any(stated) and not all(stated):
            raise ValueError("a disaggregated plan states prefill, decode and kv_link together")
        return self

    @property
    def disaggregated(self) -> bool:
        """Whether the plan runs separate prefill and decode pools."""
        return self.prefill is not None and self.decode is not None

    @property
    def gpus_per_replica(self) -> int:
        """TP x PP x attention-DP ranks (an MoE engine with attention data parallelism runs one
        attention rank a TP group, all sharing the MoE layers)."""
        return self.tp * self.pp * self.engine.data_parallel_size

    @property
    def label(self) -> str:
        """``g6e.12xlarge TP4 PP1 bf16`` (``p5en.48xlarge TP1 PP1 DP-attention 8 EP fp8`` for
        an MoE layout), or the GPU where the plan names no instance."""
        moe = ""
        if self.engine.data_parallel_size > 1:
            moe += f" DP-attention {self.engine.data_parallel_size}"
        if self.engine.enable_expert_parallel:
            moe += " EP"
        if self.prefill is not None and self.decode is not None:
            return (
                f"prefill {self.prefill.label} + decode {self.decode.label} over "
                f"{self.kv_link} {self.precision}"
            )
        return f"{self.instance or self.gpu} TP{self.tp} PP{self.pp}{moe} {self.precision}"

    def disaggregated_layout(self) -> DisaggregatedLayout | None:
        """The pools as :func:`planner.perf.disaggregated.predict_disaggregated` takes them
        (each pool's GPU, instance and batch settings with it); None for an aggregated plan."""
        if self.prefill is None or self.decode is None or self.kv_link is None:
            return None

        def pool(p: PlanPool) -> PoolLayout:
            settings = {
                name: getattr(p.engine, name)
                for name in ("max_num_seqs", "max_num_batched_tokens", "kv_cache_dtype")
                if getattr(p.engine, name) is not None
            }
            return PoolLayout(
                replicas=p.replicas,
                tp=p.tp,
                ep=p.ep,
                attention_dp=p.attention_dp,
                gpu=p.gpu,
                instance=p.instance,
                engine_settings=settings,
            )

        return DisaggregatedLayout(
            prefill=pool(self.prefill), decode=pool(self.decode), kv_link=self.kv_link
        )

    def engine_scenario_fields(self) -> dict[str, Any]:
        """The plan's engine settings as :class:`~planner.perf.scenario.Scenario` keyword
        arguments, as its launch command starts the engine: an SGLang plan that states no
        memory share runs at SGLang's own default for the GPU and layout (the command leaves
        ``--mem-fraction-static`` out), not at the 0.9 an EngineConfig holds for vLLM."""
        fields = engine_fields(self.engine)
        if self.engine.family == "sglang" and not self.engine.memory_stated:
            fields["gpu_memory_utilization"] = None
        return fields

    def scenario(
        self,
        *,
        workload: PlanWorkload | None = None,
        load: Load | None = None,
        seed: int = 0,
    ) -> Scenario:
        """One replica of the plan under ``workload`` and ``load`` (default: the plan's own),
        as the performance model predicts it; ``seed`` fixes the draw of the lengths."""
        workload = workload or self.workload
        load = load or self.load
        if workload is None:
            raise InvalidInputError("workload", None, "the plan's lengths, or lengths to run")
        if load is None:
            raise InvalidInputError("load", None, "the plan's load, or a load to run")
        return Scenario(
            **self.engine_scenario_fields(),
            model=self.model,
            precision=self.precision,
            gpu=self.gpu,
            num_gpus=self.gpus_per_replica,
            tp=self.tp,
            pp=self.pp,
            instance=self.instance,
            nodes=self.nodes,
            **workload.scenario_fields(),
            **load.scenario_fields(),
            seed=seed,
        )

    def vllm_config(self, *, host: str | None = None, port: int | None = None) -> VllmServeConfig:
        """The ``vllm serve`` configuration of one replica (every engine setting stated).

        For an SGLang or TensorRT-LLM plan, its vLLM equivalent: the same layout and settings
        on vLLM, with vLLM's default memory share (no ``--gpu-memory-utilization``): the plan's
        own share is SGLang's ``mem_fraction_static`` (weights and KV pool over the memory free
        before loading) or TensorRT-LLM's ``kv_cache_free_gpu_memory_fraction`` (the KV pool
        over the memory left after the weights), neither of which is vLLM's share of the GPU.
        The engine's release number is not vLLM's either, and is dropped."""
        engine = self.engine
        own_engine = engine.family == "vllm"
        if not own_engine:
            settings = engine.model_dump(
                exclude_unset=True, exclude={"engine", "version", "gpu_memory_utilization"}
            )
            engine = EngineConfig(engine="vllm", **settings)
        return VllmServeConfig(
            model=self.model,
            tensor_parallel_size=self.tp,
            pipeline_parallel_size=self.pp,
            precision=self.precision,
            engine=engine,
            host=host,
            port=port,
            state_memory_share=own_engine,
        )


# ----- reading a stored plan ---------------------------------------------------------------------
#: Keys of the flat plans run files held before plans were typed, that are engine settings.
_LEGACY_ENGINE_KEYS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "kv_cache_dtype",
    "gpu_memory_utilization",
    "max_model_len",
)


def read_plan(obj: Any) -> Plan | None:
    """The plan of a run file or a ``--plan`` file: typed (``Plan.model_dump(mode="json")``) or
    the flat object older run files hold; None for no plan. A malformed one raises
    :class:`~planner.errors.InvalidInputError` naming the field."""
    if obj is None or obj == {}:
        return None
    if isinstance(obj, Plan):
        return obj
    if not isinstance(obj, dict):
        raise InvalidInputError("plan", type(obj).__name__, "a JSON object")
    values = obj if isinstance(obj.get("engine"), dict) else _from_flat(obj)
    try:
        return Plan.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "plan"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise InvalidInputError(f"plan.{field}", first.get("input"), message) from None


def plan_label(obj: Plan | dict[str, Any]) -> str:
    """The label of a plan, typed or flat (``g6e.12xlarge TP4 PP1 bf16``)."""
    if isinstance(obj, Plan):
        return obj.label
    where = obj.get("instance") or obj.get("gpu")
    return f"{where} TP{obj.get('tp') or 1} PP{obj.get('pp') or 1} {obj.get('precision') or 'bf16'}"


def flat_plan(obj: Any) -> dict[str, Any] | None:
    """A stored plan as one flat mapping (the shape older run files hold: ``engine`` the
    engine's name, the engine settings beside the deployment), for readers that look keys up
    by name; ``usd_per_hour`` is one replica's share of the plan's cost. A flat plan, or one that
    does not read, is returned as it is."""
    if isinstance(obj, dict) and not isinstance(obj.get("engine"), dict):
        return dict(obj)
    try:
        plan = read_plan(obj)
    except InvalidInputError:
        return dict(obj) if isinstance(obj, dict) else None
    if plan is None:
        return None
    engine = plan.engine
    flat: dict[str, Any] = {
        "engine": engine.engine,
        "engine_version": engine.version,
        "model": plan.model,
        "precision": plan.precision,
        "gpu": plan.gpu,
        "num_gpus": plan.gpus_per_replica,
        "tp": plan.tp,
        "pp": plan.pp,
        "instance": plan.instance,
        "nodes": plan.nodes,
        "label": plan.label,
    }
    flat.update(engine.model_dump(exclude={"engine", "version"}, exclude_none=True))
    if plan.slo is not None and plan.slo.tpot_p99_ms:
        flat["slo_tpot_p99_ms"] = plan.slo.tpot_p99_ms
    if plan.workload is not None and plan.workload.spec_accept_len is not None:
        flat["spec_accept_len"] = plan.workload.spec_accept_len
    if plan.cost is not None and plan.price is not None:
        flat["usd_per_hour"] = plan.cost.usd_per_hour / plan.replicas
        flat["price_source"] = f"{plan.price.source} ({plan.price.as_of})"
    if plan.verification is not None:
        flat["verification"] = plan.verification.model_dump()
    if plan.prefill is not None and plan.decode is not None:
        flat["prefill"] = plan.prefill.model_dump(mode="json")
        flat["decode"] = plan.decode.model_dump(mode="json")
        flat["kv_link"] = plan.kv_link
    return flat


def _from_flat(obj: dict[str, Any]) -> dict[str, Any]:
    engine: dict[str, Any] = {"engine": obj.get("engine") or "vllm"}
    if obj.get("engine_version"):
        engine["version"] = obj["engine_version"]
    for key in _LEGACY_ENGINE_KEYS:
        if obj.get(key) is not None:
            engine[key] = obj[key]
    values: dict[str, Any] = {
        "model": obj.get("model"),
        "gpu": obj.get("gpu"),
        "engine": engine,
    }
    for key in ("precision", "instance", "tp", "pp", "nodes"):
        if obj.get(key) is not None:
            values[key] = obj[key]
    verification = obj.get("verification")
    if isinstance(verification, dict) and verification.get("endpoint"):
        values["verification"] = verification
    if obj.get("prefill") is not None and obj.get("decode") is not None:  # disaggregated
        for key in ("prefill", "decode", "kv_link", "replicas"):
            if obj.get(key) is not None:
                values[key] = obj[key]
    return values


__all__ = [
    "Load",
    "Plan",
    "PlanCost",
    "PlanPool",
    "PlanPrediction",
    "PlanPrice",
    "PlanWorkload",
    "Slo",
    "Verification",
    "flat_plan",
    "plan_label",
    "read_plan",
]
