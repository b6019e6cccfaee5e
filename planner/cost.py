"""What a deployment costs: per hour, per token, per request, per month, and per unit of GPU.

Formulas (``docs/domain.md``):

- $/hour of a deployment = instance price x nodes (on-demand, spot or reserved where listed).
- $/M tokens = $/hour / (tokens/s x utilisation x 3600) x 1e6, at the throughput the deployment
  achieves when busy and the share of the time it is busy. At 20 % utilisation a token costs
  5x what it costs at 100 %.
- $/request = $/hour / 3600 / (requests/s x utilisation).
- Monthly cost of a demand curve: replicas for the peak, ceil(peak / replica req/s), plus N
  spares, every hour of the month (730 h); an ideal autoscaler would pay for
  average / replica req/s replicas plus the spares.
- GPU economics from spec sheets: $/GPU-hour over dense TFLOPS, GB of memory and GB/s of
  bandwidth (the brief's Figure 1).
- Cold start = weight bytes / load bandwidth (+ stated fixed start-up seconds).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from planner.catalog.loader import Catalog
from planner.catalog.schema import PRICING_MODES, Instance
from planner.errors import InvalidInputError, UnknownEntityError

HOURS_PER_MONTH = 730.0  # 8,760 h / 12
#: Replicas kept beyond what the peak needs (one failure or restart does not break the SLO).
DEFAULT_SPARE_REPLICAS = 1

#: Instances of the brief's Figure 1 (AWS us-east-1 on-demand, 2xlarge sizes).
FIGURE_1_INSTANCES: dict[str, str] = {
    "L40S": "g6e.2xlarge",
    "A10G": "g5.2xlarge",
    "L4": "g6.2xlarge",
}

_TFLOPS_PRECISIONS = ("fp16", "bf16", "fp8", "int8", "fp4")


def _positive(field: str, value: float, what: str = "a number > 0") -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise InvalidInputError(field, value, what)


def _utilisation(value: float) -> None:
    if not (isinstance(value, int | float) and 0 < value <= 1):
        raise InvalidInputError("utilisation", value, "a fraction in (0, 1]")


def deployment_usd_per_hour(
    catalog: Catalog,
    instance: str,
    nodes: int = 1,
    region: str | None = None,
    pricing: str = "on_demand",
) -> float:
    """Price of ``nodes`` x ``instance`` per hour (the cheapest region when none is named)."""
    if pricing not in PRICING_MODES:
        raise InvalidInputError("pricing", pricing, f"one of {', '.join(PRICING_MODES)}")
    if not isinstance(nodes, int) or nodes < 1:
        raise InvalidInputError("nodes", nodes, "an integer >= 1")
    return catalog.price(instance, region=region, pricing=pricing).usd_per_hour * nodes


def usd_per_million_tokens(
    usd_per_hour: float, tokens_per_s: float, utilisation: float = 1.0
) -> float:
    """$/hour / (tokens/s x utilisation x 3600) x 1e6."""
    _positive("usd_per_hour", usd_per_hour)
    _positive("tokens_per_s", tokens_per_s)
    _utilisation(utilisation)
    return usd_per_hour / (tokens_per_s * utilisation * 3600.0) * 1e6


class TokenCosts(BaseModel):
    model_config = ConfigDict(frozen=True)

    usd_per_hour: float
    utilisation: float
    usd_per_million_output_tokens: float
    usd_per_million_total_tokens: float


def token_costs(
    usd_per_hour: float,
    *,
    output_tokens_per_s: float,
    total_tokens_per_s: float,
    utilisation: float = 1.0,
) -> TokenCosts:
    """$/M output tokens and $/M total (input + output) tokens at one throughput."""
    if total_tokens_per_s < output_tokens_per_s:
        raise InvalidInputError(
            "total_tokens_per_s",
            total_tokens_per_s,
            f">= output_tokens_per_s ({output_tokens_per_s})",
        )
    return TokenCosts(
        usd_per_hour=usd_per_hour,
        utilisation=utilisation,
        usd_per_million_output_tokens=usd_per_million_tokens(
            usd_per_hour, output_tokens_per_s, utilisation
        ),
        usd_per_million_total_tokens=usd_per_million_tokens(
            usd_per_hour, total_tokens_per_s, utilisation
        ),
    )


def cost_per_request(usd_per_hour: float, requests_per_s: float, utilisation: float = 1.0) -> float:
    """$ per request: $/hour / 3600 / (requests/s x utilisation)."""
    _positive("usd_per_hour", usd_per_hour)
    _positive("requests_per_s", requests_per_s)
    _utilisation(utilisation)
    return usd_per_hour / 3600.0 / (requests_per_s * utilisation)


class MonthlyCost(BaseModel):
    """A month of serving a demand curve (average and peak req/s) with N spare replicas."""

    model_config = ConfigDict(frozen=True)

    avg_requests_per_s: float
    peak_requests_per_s: float
    replica_requests_per_s: float
    spare_replicas: int
    replicas_for_peak: int
    replicas: int = Field(description="replicas for the peak plus the spares, always on")
    usd_per_hour: float
    usd_per_month: float
    avg_utilisation: float
    usd_per_request: float
    usd_per_month_autoscaled: float = Field(
        description="ideal autoscaler: average / replica req/s replicas + spares"
    )


def monthly_cost(
    usd_per_replica_hour: float,
    *,
    avg_requests_per_s: float,
    peak_requests_per_s: float,
    replica_requests_per_s: float,
    spare_replicas: int = DEFAULT_SPARE_REPLICAS,
    hours_per_month: float = HOURS_PER_MONTH,
) -> MonthlyCost:
    """Replicas = ceil(peak / replica req/s) + spares, running every hour of the month.

    avg utilisation = average / (replicas x replica req/s); $/request over the month =
    monthly cost / (average req/s x seconds in the month).
    """
    _positive("usd_per_replica_hour", usd_per_replica_hour)
    _positive("avg_requests_per_s", avg_requests_per_s)
    _positive("replica_requests_per_s", replica_requests_per_s)
    _positive("hours_per_month", hours_per_month)
    if peak_requests_per_s < avg_requests_per_s:
        raise InvalidInputError(
            "peak_requests_per_s",
            peak_requests_per_s,
            f"a rate >= avg_requests_per_s ({avg_requests_per_s})",
        )
    if not isinstance(spare_replicas, int) or spare_replicas < 0:
        raise InvalidInputError("spare_replicas", spare_replicas, "an integer >= 0")
    for_peak = math.ceil(peak_requests_per_s / replica_requests_per_s - 1e-9)
    replicas = for_peak + spare_replicas
    per_hour = usd_per_replica_hour * replicas
    per_month = per_hour * hours_per_month
    autoscaled = (
        usd_per_replica_hour
        * hours_per_month
        * (avg_requests_per_s / replica_requests_per_s + spare_replicas)
    )
    return MonthlyCost(
        avg_requests_per_s=avg_requests_per_s,
        peak_requests_per_s=peak_requests_per_s,
        replica_requests_per_s=replica_requests_per_s,
        spare_replicas=spare_replicas,
        replicas_for_peak=for_peak,
        replicas=replicas,
        usd_per_hour=per_hour,
        usd_per_month=per_month,
        avg_utilisation=avg_requests_per_s / (replicas * replica_requests_per_s),
        usd_per_request=per_month / (avg_requests_per_s * hours_per_month * 3600.0),
        usd_per_month_autoscaled=autoscaled,
    )


class GpuEconomics(BaseModel):
    """Spec-sheet economics of one GPU at one instance's price (per GPU)."""

    model_config = ConfigDict(frozen=True)

    gpu_id: str
    instance: str
    gpus_per_instance: int
    region: str
    pricing: str
    usd_per_gpu_hour: float
    usd_per_dense_tflop_hour: dict[str, float] = Field(
        description="$/GPU-hour over the dense TFLOPS (TOPS for int8) of each precision"
    )
    usd_per_gb_hour: float = Field(description="per GB of memory (as marketed)")
    usd_per_gbps_hour: float = Field(description="per GB/s of memory bandwidth")
    flops_per_byte_bf16: float


def _single_gpu_choice(
    catalog: Catalog, gpu_id: str, region: str, pricing: str, provider: str | None
) -> Instance | None:
    priced = [
        inst
        for inst in catalog.instances.values()
        if inst.gpu_id == gpu_id
        and (provider is None or inst.provider == provider)
        and catalog.prices_for(inst.instance, region=region, pricing=pricing)
    ]
    if not priced:
        return None

    # The smallest single-GPU instance (cheapest), else the cheapest per GPU.
    def key(inst: Instance) -> tuple[int, float]:
        price = catalog.price(inst.instance, region=region, pricing=pricing).usd_per_hour
        return (0 if inst.gpus == 1 else 1, price / inst.gpus)

    return min(priced, key=key)


def gpu_economics(
    catalog: Catalog,
    region: str = "us-east-1",
    pricing: str = "on_demand",
    *,
    instances: dict[str, str] | None = None,
    provider: str | None = None,
) -> list[GpuEconomics]:
    """$/dense-TFLOP-hour, $/GB-hour and $/(GB/s)-hour of each GPU priced in ``region``.

    The price per GPU comes from the cheapest single-GPU instance of the GPU (else the cheapest
    per GPU of the multi-GPU ones), unless ``instances`` maps a GPU id to the instance to use:
    ``instances=FIGURE_1_INSTANCES`` reproduces the brief's Figure 1 (2xlarge sizes, whose
    price includes more vCPU and RAM than the smallest size). ``provider`` keeps one cloud.
    """
    if pricing not in PRICING_MODES:
        raise InvalidInputError("pricing", pricing, f"one of {', '.join(PRICING_MODES)}")
    chosen = instances or {}
    for gpu_id, name in chosen.items():
        inst = catalog.instance(name)
        if inst.gpu_id.lower() != gpu_id.lower():
            raise InvalidInputError(
                f"instances[{gpu_id!r}]",
                name,
                f"an instance with {gpu_id} GPUs (it has {inst.gpu_id})",
            )
    rows = []
    for gpu in sorted(catalog.gpus.values(), key=lambda g: g.gpu_id):
        override = next((v for k, v in chosen.items() if k.lower() == gpu.gpu_id.lower()), None)
        if override is not None:
            instance = catalog.instance(override)
            if not catalog.prices_for(override, region=region, pricing=pricing):
                raise UnknownEntityError(
                    "price",
                    f"{override} in {region} ({pricing})",
                    sorted({f"{p.region}/{p.pricing}" for p in catalog.prices_for(override)}),
                )
        else:
            found = _single_gpu_choice(catalog, gpu.gpu_id, region, pricing, provider)
            if found is None:
                continue
            instance = found
        price = catalog.price(instance.instance, region=region, pricing=pricing).usd_per_hour
        per_gpu = price / instance.gpus
        per_tflop = {
            p: per_gpu / tflops
            for p in _TFLOPS_PRECISIONS
            if (tflops := gpu.dense_tflops(p)) is not None
        }
        rows.append(
            GpuEconomics(
                gpu_id=gpu.gpu_id,
                instance=instance.instance,
                gpus_per_instance=instance.gpus,
                region=region,
                pricing=pricing,
                usd_per_gpu_hour=per_gpu,
                usd_per_dense_tflop_hour=per_tflop,
                usd_per_gb_hour=per_gpu / gpu.memory_gb,
                usd_per_gbps_hour=per_gpu / gpu.memory_bw_gbps,
                flops_per_byte_bf16=gpu.flops_per_byte("bf16"),
            )
        )
    return rows


def cold_start_s(weight_bytes: float, load_gbps: float, fixed_s: float = 0.0) -> float:
    """Seconds to load the weights: bytes / (GB/s x 1e9) + a stated fixed start-up time
    (engine init, torch.compile, CUDA graph capture: tens of seconds in vLLM logs)."""
    if not (weight_bytes >= 0 and math.isfinite(weight_bytes)):
        raise InvalidInputError("weight_bytes", weight_bytes, "bytes >= 0")
    _positive("load_gbps", load_gbps, "GB/s > 0")
    if fixed_s < 0:
        raise InvalidInputError("fixed_s", fixed_s, "seconds >= 0")
    return weight_bytes / (load_gbps * 1e9) + fixed_s


__all__ = [
    "DEFAULT_SPARE_REPLICAS",
    "FIGURE_1_INSTANCES",
    "HOURS_PER_MONTH",
    "GpuEconomics",
    "MonthlyCost",
    "TokenCosts",
    "cold_start_s",
    "cost_per_request",
    "deployment_usd_per_hour",
    "gpu_economics",
    "monthly_cost",
    "token_costs",
    "usd_per_million_tokens",
]
