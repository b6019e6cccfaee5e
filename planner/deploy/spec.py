"""What a deployment file needs to know about a plan, and nothing more.

:class:`DeploySpec` is the narrow input of the renderers in :mod:`planner.deploy`: the engine
command of one replica group, where it runs (provider, region, instance, spot or not), how many
groups at the planned peak and how few at the average load, and the bytes of weights a cold
start moves. It is built from a ranked :class:`~planner.recommend.Recommendation` by
:func:`spec_from_recommendation`. (It is not a second plan: when the typed ``Plan`` of
``planner/plan.py`` lands, a ``spec_from_plan`` replaces this builder and the renderers stay.)

A *replica group* is what the recommender prices: ``nodes_per_group`` instances carrying
``data_parallel_size`` engine replicas of TP x PP GPUs each. One group is one ``vllm serve``
process (``--data-parallel-size`` runs the replicas of a group as engine cores behind one
endpoint, for dense and MoE models alike: docs.vllm.ai "Data Parallel Deployment"), so a
Kubernetes pod, a SkyServe replica and a ``docker run`` are each one group.

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

from planner.catalog import Catalog, PricingMode
from planner.engine import EngineConfig
from planner.errors import InvalidInputError
from planner.recommend import Recommendation, RecommendRequest
from planner.vllm_command import VllmServeConfig

#: vLLM version of the optional extra (requirements-vllm.txt): the image tag and the pip pin.
VLLM_VERSION = "0.27.1"
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

#: NVIDIA GPU feature discovery labels ``nvidia.com/gpu.product``: the name nvidia-smi reports,
#: spaces replaced by dashes (the nvidia-smi names are those quoted in data/gpus.csv's sources
#: and in the outputs found for them). GPUs without a confirmed name get no product selector.
GPU_PRODUCT_LABELS = {
    "A10G": "NVIDIA-A10G",
    "L4": "NVIDIA-L4",
    "L40S": "NVIDIA-L40S",
    "A100-40GB-SXM": "NVIDIA-A100-SXM4-40GB",
    "A100-80GB-SXM": "NVIDIA-A100-SXM4-80GB",
    "H100-SXM": "NVIDIA-H100-80GB-HBM3",
    "H200": "NVIDIA-H200",
    "B200": "NVIDIA-B200",
    "B300": "NVIDIA-B300-SXM6-AC",
    "RTXPRO6000": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
}


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
    """One replica group's engine command, where it runs and how many of it (module doc)."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    model: str
    engine: Literal["vllm"] = "vllm"
    engine_version: str = VLLM_VERSION
    serve: VllmServeConfig  # one group's engine: TP x PP, precision, EngineConfig (its DP)
    provider: str
    region: str
    instance: str
    pricing: PricingMode
    gpu_id: str
    vendor: Literal["nvidia", "amd"]
    gpus_per_node: int = Field(ge=1)
    nodes_per_group: int = Field(default=1, ge=1)
    groups: int = Field(ge=1, description="groups planned for the peak, spares included")
    min_groups: int = Field(ge=1, description="groups enough for the average load")
    group_rps: float | None = Field(default=None, gt=0, description="req/s a group sustains")
    checkpoint_bytes: float = Field(gt=0)
    network_gbps: float | None = Field(default=None, gt=0)
    port: int = Field(default=DEFAULT_PORT, ge=1, le=65535)
    waiting_target: float = Field(default=DEFAULT_WAITING_TARGET, gt=0)

    @model_validator(mode="after")
    def _shape(self) -> DeploySpec:
        per_group = (
            self.serve.tensor_parallel_size
            * self.serve.pipeline_parallel_size
            * self.data_parallel_size
        )
        if per_group != self.gpus_per_node * self.nodes_per_group:
            raise InvalidInputError(
                "serve.engine.data_parallel_size",
                self.data_parallel_size,
                f"TP x PP x DP = the {self.gpus_per_node * self.nodes_per_group} GPUs of a group "
                f"({self.nodes_per_group} x {self.instance})",
            )
        if self.min_groups > self.groups:
            raise InvalidInputError("min_groups", self.min_groups, f"<= groups ({self.groups})")
        return self

    @property
    def data_parallel_size(self) -> int:
        """Engine replicas of TP x PP GPUs a group runs (``--data-parallel-size``)."""
        return self.serve.engine.data_parallel_size

    @property
    def spot(self) -> bool:
        return self.pricing == "spot"

    @property
    def gpus_per_group(self) -> int:
        return self.gpus_per_node * self.nodes_per_group

    @property
    def gpu_product_label(self) -> str | None:
        return GPU_PRODUCT_LABELS.get(self.gpu_id) if self.vendor == "nvidia" else None

    @property
    def disk_gb(self) -> int:
        """Disk for one node: the weights + 20%, plus 50 GB for the image and the system,
        rounded up to 10 GB."""
        return int(math.ceil((self.checkpoint_bytes / 1e9 * 1.2 + 50) / 10) * 10)

    def cold_start(self) -> ColdStart:
        return cold_start_estimate(self.checkpoint_bytes, self.network_gbps)


def spec_from_recommendation(
    rec: Recommendation,
    request: RecommendRequest,
    catalog: Catalog,
    *,
    average_load_fraction: float | None = None,
) -> DeploySpec:
    """The :class:`DeploySpec` of a ranked recommendation for ``request``.

    The minimum number of groups follows the demand curve: average / peak rate of the request,
    or ``average_load_fraction`` where the caller knows it (the Plan page's average and peak
    concurrency); spare replicas stay in the minimum. Without a curve the deployment is fixed
    at the planned groups.
    """
    instance = catalog.instance(rec.instance)
    gpu = catalog.gpu(instance.gpu_id)
    card = catalog.model(request.model)
    demand = request.demand
    if average_load_fraction is None and demand.avg_rate_rps and demand.peak_rate_rps:
        average_load_fraction = demand.avg_rate_rps / demand.peak_rate_rps
    groups = max(1, rec.instances_total // max(rec.nodes, 1))
    min_groups = groups
    if average_load_fraction is not None:
        if not 0 < average_load_fraction <= 1:
            raise InvalidInputError(
                "average_load_fraction", average_load_fraction, "average / peak, in (0, 1]"
            )
        spare = demand.spare_replicas
        at_peak = max(rec.replicas - spare, 1)
        at_average = math.ceil(at_peak * average_load_fraction - 1e-9) + spare
        min_groups = min(groups, max(1, math.ceil(at_average / max(rec.dp, 1))))
    settings = rec.engine_settings
    serve = VllmServeConfig(
        model=card.hf_id,
        tensor_parallel_size=rec.tp,
        pipeline_parallel_size=rec.pp,
        precision=rec.precision,
        engine=EngineConfig(
            max_num_seqs=settings.max_num_seqs,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            max_model_len=request.input_len + request.output_len,
            kv_cache_dtype=rec.kv_cache_dtype,
            enable_prefix_caching=settings.enable_prefix_caching,
            enable_chunked_prefill=settings.enable_chunked_prefill,
            data_parallel_size=rec.dp,
        ),
    )
    return DeploySpec(
        name=dns_name(card.hf_id.split("/")[-1]),
        model=card.hf_id,
        serve=serve,
        provider=rec.provider,
        region=rec.region,
        instance=rec.instance,
        pricing=rec.pricing,
        gpu_id=gpu.gpu_id,
        vendor=gpu.vendor,
        gpus_per_node=instance.gpus,
        nodes_per_group=rec.nodes,
        groups=groups,
        min_groups=min_groups,
        group_rps=rec.max_rps_per_replica * rec.dp if rec.max_rps_per_replica > 0 else None,
        checkpoint_bytes=card.architecture.total_params
        * CHECKPOINT_BYTES_PER_PARAM.get(rec.precision, 2.0),
        network_gbps=instance.network_gbps,
    )
