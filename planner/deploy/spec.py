"""What the deployment files of a plan need beyond the plan itself, and the cold start.

The files render a typed :class:`~planner.plan.Plan` (the recommendation's, or one read back
from a run): its model, TP x PP, precision, :class:`~planner.engine.EngineConfig` (the engine,
its release, attention data parallelism and expert parallelism included), the instances one
replica spans, the replicas, the price (provider, region, on-demand or spot) and the cost.
:class:`DeploySpec` adds only what the plan does not say and the catalog does (the GPU's vendor,
the GPUs of the instance, its network, the checkpoint's size) plus the deployment's own choices
(the port, the waiting-requests target of the autoscaler); :func:`spec_from_plan` builds it. No
engine setting is restated here: the engine command comes from the plan
(:mod:`planner.engine_command`).

One *replica* is one engine process on ``plan.gpus_per_replica`` GPUs (one pod, one ``docker
run``, one SkyServe replica), spanning ``plan.nodes`` instances; where a replica needs fewer
GPUs than an instance has, ``replicas_per_instance`` of them share it (the plan was priced so:
a Kubernetes scheduler packs their pods on one node, the docker files start them on their own
GPUs and ports).

Replicas: the plan's count at the peak; at the average load the plan's utilisation says how
many are busy (``ceil(utilisation x replicas)``, the minimum the autoscaler keeps).

Cold start (:func:`cold_start_estimate`): the checkpoint is downloaded once over the
instance's network (``network_gbps`` of ``instances.csv``; 10 Gbit/s assumed where the catalog
has none) and read from the local disk into the GPUs (1 GB/s assumed: an EBS gp3 volume's
maximum throughput is 1,000 MiB/s, local NVMe is faster). Engine initialisation (CUDA graphs,
compilation) comes on top and is not estimated. The Hugging Face Hub may serve slower than the
NIC: the estimate is a lower bound of the first start.
"""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.catalog import Catalog
from planner.catalog.names import NVIDIA_SMI_NAMES
from planner.errors import InvalidInputError
from planner.plan import Plan

DEFAULT_PORT = 8000
#: assumptions of the cold-start estimate (see the module docstring)
DEFAULT_NETWORK_GBPS = 10.0
DEFAULT_DISK_READ_GB_PER_S = 1.0
#: HPA/KEDA: scale out when a group has more than this many requests waiting, on average.
DEFAULT_WAITING_TARGET = 4.0

#: Bytes per parameter of the checkpoint a precision is served from. vLLM quantises a 16-bit
#: checkpoint to fp8 when it loads it (``--quantization fp8``), so fp8 downloads bf16 weights;
#: int8/int4/fp4 need a checkpoint already quantised (W8A8, AWQ/GPTQ, NVFP4/MXFP4).
CHECKPOINT_BYTES_PER_PARAM = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 2.0,
    "int8": 1.0,
    "int4": 0.5,
    "fp4": 0.5,
}

#: NVIDIA GPU feature discovery labels ``nvidia.com/gpu.product``: the name nvidia-smi reports
#: (:data:`planner.catalog.names.NVIDIA_SMI_NAMES`), spaces replaced by dashes. GPUs without a
#: confirmed name get no product selector.
GPU_PRODUCT_LABELS = {gpu: name.replace(" ", "-") for gpu, name in NVIDIA_SMI_NAMES.items()}


class ColdStart(BaseModel):
    """Seconds to bring the weights of one group from nowhere (or from its disk) to its GPUs."""

    model_config = ConfigDict(frozen=True)

    checkpoint_gb: float
    network_gbps: float
    network_assumed: bool
    disk_read_gb_per_s: float
    download_s: float
    load_s: float

    @property
    def first_start_s(self) -> float:
        return self.download_s + self.load_s

    def describe(self) -> str:
        network = f"{self.network_gbps:g} Gbit/s" + (" (assumed)" if self.network_assumed else "")
        return (
            f"{self.checkpoint_gb:,.0f} GB of weights: first start about "
            f"{_minutes(self.first_start_s)} (download at {network}, then read from disk at "
            f"{self.disk_read_gb_per_s:g} GB/s), a restart with the weights on disk about "
            f"{_minutes(self.load_s)}; engine start-up (CUDA graphs) comes on top."
        )


def _minutes(seconds: float) -> str:
    return f"{seconds:,.0f} s" if seconds < 120 else f"{seconds / 60:,.1f} min"


def cold_start_estimate(
    checkpoint_bytes: float,
    network_gbps: float | None,
    *,
    disk_read_gb_per_s: float = DEFAULT_DISK_READ_GB_PER_S,
) -> ColdStart:
    """download = bytes / (network Gbit/s / 8); load = bytes / disk GB/s (module docstring)."""
    if checkpoint_bytes <= 0:
        raise InvalidInputError("checkpoint_bytes", checkpoint_bytes, "a size > 0")
    if disk_read_gb_per_s <= 0:
        raise InvalidInputError("disk_read_gb_per_s", disk_read_gb_per_s, "a rate > 0")
    bandwidth = network_gbps or DEFAULT_NETWORK_GBPS
    return ColdStart(
        checkpoint_gb=checkpoint_bytes / 1e9,
        network_gbps=bandwidth,
        network_assumed=network_gbps is None,
        disk_read_gb_per_s=disk_read_gb_per_s,
        download_s=checkpoint_bytes / (bandwidth * 1e9 / 8),
        load_s=checkpoint_bytes / (disk_read_gb_per_s * 1e9),
    )


def dns_name(text: str, *, limit: int = 40) -> str:
    """A DNS-1123 label (lower-case letters, digits, '-') for Kubernetes and SkyPilot names."""
    name = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-")
    if not name or not name[0].isalpha():
        name = f"llm-{name}".strip("-")
    return name


class DeploySpec(BaseModel):
    """A plan and what its files need that it does not carry (module docstring)."""

    model_config = ConfigDict(frozen=True)

    plan: Plan
    name: str = Field(pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    vendor: Literal["nvidia", "amd"]
    gpus_per_node: int = Field(ge=1, description="GPUs of one instance")
    checkpoint_bytes: float = Field(gt=0)
    network_gbps: float | None = Field(default=None, gt=0)
    port: int = Field(default=DEFAULT_PORT, ge=1, le=65535)
    waiting_target: float = Field(default=DEFAULT_WAITING_TARGET, gt=0)

    @model_validator(mode="after")
    def _shape(self) -> DeploySpec:
        check_deployable(self.plan, self.gpus_per_node)
        return self

    # ----- read from the plan --------------------------------------------------------------
    @property
    def instance(self) -> str:
        assert self.plan.instance is not None  # checked by the validator
        return self.plan.instance

    @property
    def provider(self) -> str:
        assert self.plan.price is not None
        return self.plan.price.provider

    @property
    def region(self) -> str:
        assert self.plan.price is not None
        return self.plan.price.region

    @property
    def pricing(self) -> str:
        assert self.plan.price is not None
        return self.plan.price.pricing

    @property
    def spot(self) -> bool:
        return self.pricing == "spot"

    @property
    def family(self) -> str:
        """The engine family (``vllm``, ``sglang``, ``trtllm``)."""
        return self.plan.engine.family

    @property
    def nodes(self) -> int:
        """Instances one replica spans."""
        return self.plan.nodes

    @property
    def replicas(self) -> int:
        """Replicas at the planned peak, spares included."""
        return self.plan.replicas

    @property
    def min_replicas(self) -> int:
        """Replicas the average load keeps busy: ``ceil(utilisation x replicas)``; without a
        cost (a plan written by hand) the deployment is fixed at its replicas."""
        cost = self.plan.cost
        if cost is None:
            return self.replicas
        return min(self.replicas, max(1, math.ceil(cost.utilisation * self.replicas - 1e-9)))

    @property
    def request_rate_per_replica(self) -> float | None:
        """Requests per second one replica was predicted to serve at the plan's load."""
        prediction = self.plan.prediction
        return prediction.request_per_s if prediction is not None else None

    # ----- derived with the catalog ----------------------------------------------------------
    @property
    def gpus_per_pod(self) -> int:
        """GPUs of one process (one pod, one container): a replica's share of one instance."""
        return self.plan.gpus_per_replica // self.nodes

    @property
    def replicas_per_instance(self) -> int:
        """Replicas sharing one instance (1 for a replica spanning instances)."""
        return self.gpus_per_node // self.gpus_per_pod if self.nodes == 1 else 1

    @property
    def instances(self) -> int:
        """Instances at the peak: the replicas packed ``replicas_per_instance`` to one."""
        return math.ceil(self.replicas / self.replicas_per_instance) * self.nodes

    @property
    def gpu_product_label(self) -> str | None:
        return GPU_PRODUCT_LABELS.get(self.plan.gpu) if self.vendor == "nvidia" else None

    @property
    def disk_gb(self) -> int:
        """Disk for one node: the weights + 20%, plus 50 GB for the image and the system,
        rounded up to 10 GB."""
        return int(math.ceil((self.checkpoint_bytes / 1e9 * 1.2 + 50) / 10) * 10)

    def cold_start(self) -> ColdStart:
        return cold_start_estimate(self.checkpoint_bytes, self.network_gbps)


def check_deployable(plan: Plan, gpus_per_node: int) -> None:
    """InvalidInputError unless the plan names its instance and price, and a replica fills
    whole instances or shares one evenly with others."""
    if plan.instance is None:
        raise InvalidInputError("plan.instance", None, "the instance type the plan runs on")
    if plan.price is None:
        raise InvalidInputError(
            "plan.price", None, "the price the plan was costed at (provider, region)"
        )
    gpus = plan.gpus_per_replica
    if plan.nodes > 1:
        fits = gpus == plan.nodes * gpus_per_node
    else:
        fits = gpus <= gpus_per_node and gpus_per_node % gpus == 0
    if not fits:
        raise InvalidInputError(
            "plan.nodes",
            plan.nodes,
            f"instances that replicas of TP x PP x DP-attention = {gpus} GPUs fill "
            f"({plan.instance} has {gpus_per_node})",
        )


def checkpoint_bytes(total_params: float, precision: str) -> float:
    """Bytes of the checkpoint a plan at ``precision`` downloads
    (:data:`CHECKPOINT_BYTES_PER_PARAM`)."""
    per_param = CHECKPOINT_BYTES_PER_PARAM.get(precision)
    if per_param is None:
        allowed = ", ".join(CHECKPOINT_BYTES_PER_PARAM)
        raise InvalidInputError("plan.precision", precision, f"one of {allowed}")
    return total_params * per_param


def spec_from_plan(plan: Plan, catalog: Catalog, *, port: int = DEFAULT_PORT) -> DeploySpec:
    """The :class:`DeploySpec` of ``plan``: the plan, and from the catalog its instance's GPUs
    and network, its GPU's vendor and its model's checkpoint size."""
    if plan.instance is None:
        raise InvalidInputError("plan.instance", None, "the instance type the plan runs on")
    instance = catalog.instance(plan.instance)
    check_deployable(plan, instance.gpus)
    gpu = catalog.gpu(instance.gpu_id)
    card = catalog.model(plan.model)
    return DeploySpec(
        plan=plan,
        name=dns_name(card.hf_id.split("/")[-1]),
        vendor=gpu.vendor,
        gpus_per_node=instance.gpus,
        checkpoint_bytes=checkpoint_bytes(card.architecture.total_params, plan.precision),
        network_gbps=instance.network_gbps,
        port=port,
    )
