"""Disaggregated prefill/decode: two pools, the KV transfer between them, wide expert parallelism.

A disaggregated deployment runs prompts on a *prefill pool* and answers on a *decode pool*,
each with its own replicas, TP, attention-DP and expert parallelism, and moves every request's
KV cache from one to the other over a link (DistServe, Zhong et al., OSDI 2024; Splitwise,
Patel et al., ISCA 2024; Mooncake, Qin et al., FAST 2025; NVIDIA Dynamo's disaggregated
serving; vLLM's NixlConnector). Each pool is priced by the same step-time model as an
aggregated replica (:mod:`planner.perf.step_time`, fitted coefficients of its engine and GPU);
only the work a pool's steps hold differs:

- **prefill pool**: prefill-only batches. Its requests generate one token (vLLM's disaggregated
  proxy, ``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`` @030ea52, sends the
  prefill instance the request with ``max_tokens=1`` and streaming off, waits for it, then
  streams the whole answer from the decode instance), so it is the steady state
  of :mod:`planner.perf.steady_state` for a workload of one-token answers: an M/D/1 queue for
  the token budget plus the prompt's own chunked steps. Its utilisation is the rate over the
  rate it saturates at.
- **KV transfer**: ``bytes = the request's KV`` (:func:`kv_transfer_bytes`, from the model's KV
  layout and the cache precision) over the link (:data:`KV_LINKS`):
  ``t = latency + bytes / (streams x per-GPU bandwidth x efficiency)``; the streams are the
  KV shards that travel in parallel, each from its own GPU's NIC (:func:`kv_streams`).
- **decode pool**: decode-only steps, no prefill interference. A request holds a seat for its
  ``O`` decode steps (the decode instance samples the first token too: the proxy streams the
  answer from it), so with ``d`` running sequences a step lasts ``T(d)`` and the rate is
  ``lambda = d / (O x T(d))`` (Little's law): solved for ``d`` by bisection (:class:`DecodePool`).
  TPOT = ``T(d)``; its p99 at ``d + 2.33 sqrt(d)`` neighbours (Poisson number in service).
- **TTFT** = prefill queue + prefill (the prefill pool's TTFT, its request path included) +
  KV transfer + the decode pool's entry: the rest of its step in progress (``(1 - e^-d) x
  T(d) / 2``), its first step and its own request path (the proxy's second request to a
  second server; :meth:`DisaggregatedModel.decode_first_token_s`). Against the same requests
  replayed through both pools' engines (:func:`replay_pools`), Llama-3.1-70B on one H100 TP4
  engine a pool, 2,048 in / 32 out, 3,000 Poisson requests, mean TTFT: +3.8% at 1 req/s,
  +3.4% at 2, +2.2% at 4, -3.2% at 6 (without the decode pool's entry: -11.4%, -11.5%,
  -10.6%, -12.0%; ``benchmarks/disaggregated_replay_bench.py``). **TPOT** from the decode
  pool alone.
- **balance**: a pool's capacity per replica (prefill: its saturation rate; decode: the rate
  at its largest batch, max_num_seqs or the KV cache); the P:D ratio that loads both equally is
  ``C_decode / C_prefill`` prefill replicas per decode replica (:func:`balanced_ratio`).
- **wide expert parallelism across nodes** (SGLang's large-scale EP on 96 H100, DeepSeek's own
  serving, Dynamo's wide-EP recipes): an EP group over ``R`` GPUs spanning nodes sends each
  token's hidden state to its top-``k`` experts and back (dispatch + combine, DeepEP):
  ``bytes = tokens x k x hidden x (dispatch B + combine B) x (1 - G / R)`` per MoE layer over
  each GPU's NIC, ``G`` the GPUs of a node (their experts are reached over NVLink), plus the
  link's latency twice a layer (:func:`ep_all_to_all_s`); the busiest rank's expert load is
  the step-time model's :func:`planner.perf.step_time.ep_imbalance` over all ``R`` ranks
  (random top-k routing: an expert-placement balancer such as SGLang's EPLB, which the SGLang
  team credits with 1.49x prefill and 2.54x decode speed-ups at scale, lmsys.org blog
  2025-05-05 "Deploying DeepSeek with PD disaggregation and large-scale expert parallelism on
  96 H100 GPUs", makes the busiest rank lighter than this).

**Fitted on the public disaggregated rows** (``data/measured_disaggregated.csv``): a pool of an
MoE model runs its steps ``scale`` times the step-time model's (:class:`PoolScales`: the
median ratio of predicted to measured time a token over the rows, one scale for both pools,
``data/disaggregated_fit.json``, written by ``python -m planner validate
--write-disaggregated-fit``; held out by source in ``planner validate``'s disaggregated slice,
:mod:`planner.perf.disaggregated_validation`). The rows are all large MoE deployments
tested one phase at a time, so a dense model's pools keep the step-time model's own figures and
every prediction stays flagged ``extrapolated``.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.catalog import GPU, Catalog, Instance, ModelArchitecture
from planner.catalog.loader import EMBEDDED_DATA_DIR
from planner.engine import EngineConfig
from planner.errors import InvalidInputError
from planner.perf.calibration import coefficient_key
from planner.perf.deployment import Deployment, resolve_deployment
from planner.perf.model import PerformanceModel
from planner.perf.scenario import ENGINE_FIELDS, Prediction, Scenario
from planner.perf.simulator import LiveEngine, request_arrivals
from planner.perf.steady_state import SteadyStateModel
from planner.perf.step_time import (
    AR_CALL_UNIT_S,
    IDX,
    StepBatch,
    deployment_request_path_s,
    step_features,
)
from planner.perf.uncertainty import interval_factors, term_shares, widen
from planner.workload import LengthDistribution, draw_lengths

KvLinkKind = Literal["nvlink", "infiniband", "roce", "efa"]


@dataclass(frozen=True)
class KvLink:
    """A link the KV cache (and a wide-EP all-to-all) crosses between GPUs of different pools.

    ``per_gpu_gbps``: line rate per GPU and direction (Gbit/s) when the instance does not say
    (an instance's ``network_gbps`` over its GPUs wins; NVLink: the GPU's own link);
    ``efficiency``: measured share of the line rate large RDMA transfers reach;
    ``latency_s``: fixed cost of one transfer (its round trips).
    """

    kind: KvLinkKind
    per_gpu_gbps: float
    efficiency: float
    latency_s: float
    source: str
    as_of: str


#: The links a disaggregated deployment's pools can be joined by (retrieved 2026-12-02).
KV_LINKS: dict[str, KvLink] = {
    "nvlink": KvLink(
        "nvlink",
        0.0,  # the GPU's NVLink (gpus.csv interconnect_bw_gbps / 2 a direction)
        0.96,
        5e-6,
        "efficiency: deepseek-ai/DeepEP docs/legacy.md @0297fc8 (intranode EP8 on H800: "
        "153-158 GB/s of ~160 GB/s NVLink); latency: assumption (one CUDA IPC copy's launch "
        "and completion, a few us), not measured",
        "2026-12-02",
    ),
    "infiniband": KvLink(
        "infiniband",
        400.0,
        0.86,
        10e-6,
        "rate: one ConnectX-7 NDR 400 Gb/s NIC a GPU (DeepEP's test cluster); efficiency: "
        "deepseek-ai/DeepEP docs/legacy.md @0297fc8 (internode EP16 dispatch and combine "
        "43 GB/s, low-latency dispatch at EP64 43 GB/s, of ~50 GB/s); latency: ~3 RDMA round "
        "trips a pull-based transfer (block request, reads, completion notice) at ~2-3 us each "
        "(single switch ~2 us, +1 us leaf-spine: kentino.com 'Latency dissection: where every "
        "microsecond goes in an AI cluster network')",
        "2026-12-02",
    ),
    "roce": KvLink(
        "roce",
        400.0,
        0.87,
        10e-6,
        "rate: 400 GbE a GPU; efficiency: kvcache-ai/Mooncake README (Transfer Engine, 40 GB "
        "of KV: 87 GB/s on 4 x 200 Gbps RoCE = 0.87; its 8 x 400 Gbps figure, 190 GB/s, is "
        "0.48 of the aggregate); latency: as InfiniBand's (RDMA round trips of a few us; "
        "kentino.com latency dissection)",
        "2026-12-02",
    ),
    "efa": KvLink(
        "efa",
        400.0,
        0.86,
        30e-6,
        "rate: p5/p5en/p6-b200 3200 Gbps EFA over 8 GPUs (AWS instance specifications, "
        "instances.csv); efficiency: assumption, InfiniBand's (no published EFA KV-transfer "
        "bandwidth found); latency: assumption, 3x InfiniBand's (SRD's multipath transport "
        "with receiver-side reordering, UCCL 'A practitioner guide to AWS EFA programming', "
        "2026-04-13, publishes no figure)",
        "2026-12-02",
    ),
}

#: bytes an activation element crosses the network as: DeepEP dispatches in FP8 and combines
#: in BF16 (deepseek-ai/DeepEP's benchmark settings, SGLang's DeepSeek deployment); 16-bit
#: models dispatch in BF16
COMBINE_BYTES = 2.0


def kv_link(name: str) -> KvLink:
    """The link named ``name``, or an error naming the allowed ones."""
    link = KV_LINKS.get(name.strip().lower())
    if link is None:
        raise InvalidInputError("kv_link", name, f"one of {', '.join(KV_LINKS)}")
    return link


def link_bytes_per_s(link: KvLink, gpu: GPU, instance: Instance | None) -> float:
    """Line rate per GPU and direction, bytes/s: NVLink from the instance or the GPU; a network
    from the instance's ``network_gbps`` shared by its GPUs, else the link's own figure."""
    if link.kind == "nvlink":
        if instance is not None and instance.gpu_link_bw_gbps:
            return instance.gpu_link_bw_gbps * 1e9 / 2
        return (gpu.interconnect_bw_gbps or 600.0) * 1e9 / 2
    if instance is not None and instance.network_gbps:
        return instance.network_gbps / instance.gpus * 1e9 / 8
    return link.per_gpu_gbps * 1e9 / 8


def kv_transfer_bytes(
    arch: ModelArchitecture, prompt_tokens: int, kv_bytes_per_element: float
) -> float:
    """KV bytes of one request's prompt: every attention layer's cache (sliding layers capped
    at their window, MLA's latent once a layer) plus any linear-attention state
    (:meth:`ModelArchitecture.kv_bytes_for_sequence`)."""
    return arch.kv_bytes_for_sequence(prompt_tokens, kv_bytes_per_element)


def kv_streams(arch: ModelArchitecture, prefill_tp: int, decode_tp: int) -> int:
    """KV shards that travel in parallel, each over its own GPU's NIC.

    GQA: TP splits the KV heads, so each of ``min(tp, kv_heads)`` GPUs a side holds a shard
    and the pools pair them up (vLLM's NixlConnector reads each shard from its owner, also
    with unequal TP); MLA: every TP rank holds the whole latent, so one copy travels (each
    decode rank pulls it over its own NIC at the same time).
    """
    if arch.is_mla:
        return 1
    kv_heads = max(arch.num_kv_heads, 1)
    return max(1, min(min(prefill_tp, kv_heads), min(decode_tp, kv_heads)))


def kv_transfer_s(bytes_: float, streams: int, bytes_per_s: float, link: KvLink) -> float:
    """``latency + bytes / (streams x per-GPU rate x efficiency)`` seconds."""
    return link.latency_s + bytes_ / (streams * bytes_per_s * link.efficiency)


def remote_copies_per_token(
    experts_per_token: int, ep_size: int, gpus_per_node: int, *, node_dedup: bool
) -> float:
    """Copies of a token's hidden state that cross the network in one dispatch (and come back
    in its combine), for a token whose ``k`` experts sit on random ranks of ``R`` over nodes
    of ``G`` GPUs.

    - DeepEP's *low-latency* kernels (decode) send each copy to its expert's rank over RDMA:
      ``k x (1 - G / R)`` copies leave the node (deepseek-ai/DeepEP README @0297fc8, "Low-
      latency kernels with pure RDMA").
    - DeepEP's *normal* kernels (prefill) send a token once to every other node that holds one
      of its experts and forward it to the experts' GPUs over NVLink there (README, "Normal
      kernels with NVLink and RDMA forwarding"; DeepSeek-V3 technical report, section 3.2.2):
      with ``n = R / G`` nodes a token reaches ``(n - 1) x (1 - (1 - 1/n)^k)`` other nodes on
      average (each expert on a node chosen uniformly). DeepSeek-V3 at EP32 (4 nodes, top-8):
      2.70 copies against 6 for the low-latency kernels.
    """
    if ep_size <= gpus_per_node:
        return 0.0
    k = float(experts_per_token)
    if not node_dedup:
        return k * (1.0 - gpus_per_node / ep_size)
    nodes = ep_size / gpus_per_node
    return (nodes - 1.0) * (1.0 - (1.0 - 1.0 / nodes) ** k)


def ep_all_to_all_s(
    tokens: float,
    *,
    hidden: int,
    experts_per_token: int,
    ep_size: int,
    gpus_per_node: int,
    moe_layers: int,
    dispatch_bytes: float,
    nic_bytes_per_s: float,
    link: KvLink,
    node_dedup: bool = False,
) -> float:
    """Seconds a step's MoE all-to-all spends on the network for ``tokens`` tokens of a rank.

    Per MoE layer each token's hidden state goes to its experts (dispatch, ``dispatch_bytes``
    an element) and comes back weighted (combine, BF16): ``tokens x copies x hidden x
    (dispatch + combine)`` bytes, ``copies`` those that leave the node
    (:func:`remote_copies_per_token`: one per expert with the low-latency kernels of decode,
    one per other node with the normal kernels of prefill, ``node_dedup``); over the NIC at
    the link's efficiency, plus its latency for each of the two messages. Zero when the group
    fits one node (``R <= G``). DeepEP's low-latency kernels at EP 128-256 (128 tokens, top-8,
    hidden 7168, FP8 dispatch) run at ~39 GB/s, bandwidth-bound (docs/legacy.md).
    """
    copies = remote_copies_per_token(
        experts_per_token, ep_size, gpus_per_node, node_dedup=node_dedup
    )
    if copies <= 0 or tokens <= 0 or moe_layers <= 0:
        return 0.0
    per_layer = tokens * copies * hidden * (dispatch_bytes + COMBINE_BYTES)
    return moe_layers * (per_layer / (nic_bytes_per_s * link.efficiency) + 2.0 * link.latency_s)


@dataclass(frozen=True)
class KvTransfer:
    """The KV transfer of one request between two resolved pools: :func:`kv_transfer_bytes` of
    its prompt over :func:`kv_streams` parallel shards at the slower side's line rate
    (:func:`link_bytes_per_s`), :func:`kv_transfer_s`. The prediction prices the mean prompt
    with it and the simulated two-pool endpoint delays each request by it
    (``benchmarks_runner.simulated.disaggregated``): one formula for both."""

    arch: ModelArchitecture
    kv_bytes_per_element: float
    streams: int
    bytes_per_s: float
    link: KvLink

    @classmethod
    def between(
        cls, prefill: Deployment, decode: Deployment, layout: DisaggregatedLayout, link: KvLink
    ) -> KvTransfer:
        arch = prefill.card.architecture
        # the slower side's NIC (or NVLink) sets the pace
        rate = min(
            link_bytes_per_s(link, prefill.gpu, prefill.instance),
            link_bytes_per_s(link, decode.gpu, decode.instance),
        )
        streams = kv_streams(arch, layout.prefill.tp, layout.decode.tp)
        return cls(arch, prefill.kv_dtype_bytes, streams, rate, link)

    def bytes_of(self, prompt_tokens: int) -> float:
        return kv_transfer_bytes(self.arch, prompt_tokens, self.kv_bytes_per_element)

    def seconds_of(self, prompt_tokens: int) -> float:
        return kv_transfer_s(
            self.bytes_of(prompt_tokens), self.streams, self.bytes_per_s, self.link
        )


def ep_all_to_all_nvlink_s(
    tokens: float,
    *,
    hidden: int,
    experts_per_token: int,
    ep_size: int,
    moe_layers: int,
    dispatch_bytes: float,
    nvlink_bytes_per_s: float,
) -> float:
    """Seconds a step's MoE all-to-all takes inside one NVLink domain (a GB200/GB300 NVL72
    rack, or an HGX board): ``tokens x k x hidden x (dispatch + combine) x (1 - 1/R)`` bytes a
    layer over the GPU's NVLink (one direction) at :data:`KV_LINKS` ``nvlink``'s efficiency,
    plus its latency twice a layer. DeepEP's NVLink path (Blackwell DeepEP maps the peers'
    memory, lmsys.org GB200 part I, 2025-06-16) moves each copy once; the all-gather of every
    rank's tokens that SGLang's DP attention runs without DeepEP is not what large EP runs."""
    if ep_size <= 1 or tokens <= 0 or moe_layers <= 0:
        return 0.0
    nv = KV_LINKS["nvlink"]
    per_layer = (
        tokens
        * experts_per_token
        * hidden
        * (dispatch_bytes + COMBINE_BYTES)
        * (1.0 - 1.0 / ep_size)
    )
    return moe_layers * (per_layer / (nvlink_bytes_per_s * nv.efficiency) + 2.0 * nv.latency_s)


# ----- the fit on the disaggregated rows ---------------------------------------------------------
#: the scales fitted on ``data/measured_disaggregated.csv`` (see :class:`PoolScales`)
FIT_FILE = EMBEDDED_DATA_DIR / "disaggregated_fit.json"


@dataclass(frozen=True)
class PoolScales:
    """What a disaggregated MoE pool's steps take against the step-time model's: the pool's
    coefficients (every term, the all-to-all's ``idle`` included) are multiplied by
    ``prefill`` or ``decode``. The step-time model is fitted on aggregated replicas; a pool
    that runs one phase (DeepGEMM's grouped GEMMs over 16K-token prefill batches, decode-only
    CUDA graphs with DeepEP's low-latency kernels) is faster than that fit's mixed steps, and
    the public disaggregated rows measure by how much. 1.0 each: the step-time model as is."""

    prefill: float = 1.0
    decode: float = 1.0
    rows: int = 0
    source: str = "not fitted"

    def of(self, role: Literal["prefill", "decode"]) -> float:
        return self.prefill if role == "prefill" else self.decode


@lru_cache(maxsize=4)
def _load_scales(path: Path) -> PoolScales:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return PoolScales(
            prefill=float(data["prefill_step_scale"]),
            decode=float(data["decode_step_scale"]),
            rows=int(data["rows"]),
            source=f"{path.name} ({data['rows']} public rows, {data['as_of']})",
        )
    except (OSError, ValueError, KeyError, TypeError):
        return PoolScales()


def fitted_scales(path: Path | None = None) -> PoolScales:
    """The shipped scales (``data/disaggregated_fit.json``); missing or unreadable: 1.0."""
    return _load_scales(path or FIT_FILE)


# ----- the layout ---------------------------------------------------------------------------
class PoolLayout(BaseModel):
    """One pool: ``replicas`` engines of ``tp x attention_dp`` GPUs; ``ep`` 1 (experts sliced
    by TP) or ``tp x attention_dp`` (whole experts over every GPU of the engine, vLLM's
    ``--enable-expert-parallel``, SGLang's ``--ep-size``). ``gpu``, ``instance`` and
    ``engine_settings`` (Scenario engine fields: max_num_seqs, max_num_batched_tokens,
    gpu_memory_utilization, kv_cache_dtype, ...) override the scenario's for this pool only
    (None / empty: the scenario's)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    replicas: int = Field(gt=0)
    tp: int = Field(default=1, gt=0)
    ep: int = Field(default=1, gt=0)
    attention_dp: int = Field(default=1, gt=0)
    gpu: str | None = None
    instance: str | None = None
    engine_settings: dict[str, Any] = Field(default_factory=dict)

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.attention_dp

    @property
    def gpus(self) -> int:
        return self.replicas * self.gpus_per_replica


class DisaggregatedLayout(BaseModel):
    """A prefill pool, a decode pool and the link between them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prefill: PoolLayout
    decode: PoolLayout
    kv_link: str = "infiniband"

    @property
    def gpus(self) -> int:
        return self.prefill.gpus + self.decode.gpus


#: the scenario columns of a disaggregated deployment (``planner predict --scenarios``)
POOL_COLUMNS: tuple[str, ...] = (
    "prefill_replicas",
    "prefill_tp",
    "prefill_ep",
    "prefill_attention_dp",
    "decode_replicas",
    "decode_tp",
    "decode_ep",
    "decode_attention_dp",
)
LAYOUT_COLUMNS: tuple[str, ...] = (*POOL_COLUMNS, "kv_link")


def layout_from_row(row: dict[str, Any]) -> DisaggregatedLayout | None:
    """The disaggregated layout of a scenario row; None when every pool column is blank (an
    aggregated deployment, as before). Bad cells raise one InvalidInputError naming the column,
    its value and what is allowed."""
    cells = {name: str(row.get(name) or "").strip() for name in LAYOUT_COLUMNS}
    if not any(cells.values()):
        return None
    for role in ("prefill", "decode"):
        if not cells[f"{role}_replicas"]:
            raise InvalidInputError(
                f"{role}_replicas",
                "",
                "a whole number >= 1 (a disaggregated row states both pools' replicas; leave "
                "every pool column blank for an aggregated deployment)",
            )
    pools: dict[str, dict[str, int]] = {"prefill": {}, "decode": {}}
    for name in POOL_COLUMNS:
        text = cells[name]
        if not text:
            continue
        role, field = name.split("_", 1)
        try:
            number = float(text)
        except ValueError:
            raise InvalidInputError(name, text, "a whole number >= 1") from None
        if not number.is_integer() or number < 1:
            raise InvalidInputError(name, text, "a whole number >= 1")
        pools[role][field] = int(number)
    link = kv_link(cells["kv_link"] or "infiniband").kind
    for role, values in pools.items():
        tp, dp, ep = values.get("tp", 1), values.get("attention_dp", 1), values.get("ep", 1)
        if ep not in (1, tp * dp):
            raise InvalidInputError(
                f"{role}_ep", ep, f"1 or {role}_tp x {role}_attention_dp = {tp * dp}"
            )
    try:
        return DisaggregatedLayout(
            prefill=PoolLayout(**pools["prefill"]),
            decode=PoolLayout(**pools["decode"]),
            kv_link=link,
        )
    except ValidationError as exc:  # pragma: no cover - the checks above come first
        first = exc.errors()[0]
        raise InvalidInputError("layout", str(first["loc"]), str(first["msg"])) from None


# ----- the pools ----------------------------------------------------------------------------
def pool_scenario(
    scenario: Scenario, pool: PoolLayout, role: Literal["prefill", "decode"]
) -> Scenario:
    """The scenario one pool runs: its layout, GPU, instance and engine settings, and for the
    prefill pool one-token answers."""
    allowed = [f for f in ENGINE_FIELDS if f not in _LAYOUT_FIELDS]
    unknown = sorted(set(pool.engine_settings) - set(allowed))
    if unknown:
        raise InvalidInputError(
            f"{role}.engine_settings",
            unknown[0],
            f"one of {', '.join(allowed)} (the layout sets tp, attention_dp and ep)",
        )
    settings = dict(pool.engine_settings)
    try:
        EngineConfig(engine=scenario.engine, version=scenario.engine_version, **settings)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise InvalidInputError(
            f"{role}.engine_settings.{loc}", settings.get(loc), str(first["msg"])
        ) from None
    update: dict[str, Any] = {
        **settings,
        "tp": pool.tp,
        "pp": 1,
        "num_gpus": pool.gpus,
        "nodes": None,
        "data_parallel_size": pool.attention_dp if pool.attention_dp > 1 else None,
        "enable_expert_parallel": True if pool.ep > 1 else None,
    }
    if pool.gpu is not None:
        update["gpu"] = pool.gpu
    if pool.instance is not None:
        update["instance"] = pool.instance
    if role == "prefill":
        update.update({"output_len": 1, "output_dist": None})
    return scenario.model_copy(update=update)


#: engine fields a pool's layout sets (not its engine_settings)
_LAYOUT_FIELDS = ("enable_expert_parallel", "data_parallel_size")


def _nodes_of(dep: Deployment) -> int:
    """GPUs a node holds for this deployment (the instance's, 72 for GB200/GB300 NVL72)."""
    if dep.instance is not None:
        return dep.instance.gpus
    return 72 if dep.gpu.gpu_id.upper().startswith("GB") else 8


def _validate_pool(dep: Deployment, pool: PoolLayout, role: str) -> None:
    node = _nodes_of(dep)
    arch = dep.card.architecture
    if pool.gpus_per_replica > node and pool.ep == 1:
        raise InvalidInputError(
            f"{role}_ep",
            pool.ep,
            f"{pool.gpus_per_replica} (TP x attention-DP): an engine larger than one "
            f"{node}-GPU node spans nodes only with expert parallelism",
        )
    if pool.ep > 1 and not arch.is_moe:
        raise InvalidInputError(f"{role}_ep", pool.ep, f"1 for the dense {dep.card.hf_id}")


def _wide_ep_dispatch_bytes(precision: str) -> float:
    """Bytes an activation element is dispatched as: FP8 (DeepEP's FP8 dispatch), NVFP4 with
    its FP8 scale a 16-element block for FP4 models (0.5 + 1/16: SGLang fuses NVFP4 quantisation
    into DeepEP's dispatch, lmsys.org GB200 part II 2025-09-25; vLLM's NVFP4 MoE dispatch,
    blog.vllm.ai 2026-02-03), BF16 otherwise."""
    p = precision.strip().lower()
    if p == "fp4":
        return 0.5 + 1.0 / 16.0
    return 1.0 if p == "fp8" else 2.0


#: share of the shorter of compute and a cross-node all-to-all that the two-batch overlap hides:
#: SGLang's decode ablation on 96 H100 (lmsys.org 2025-05-05, "Ablation Study: Two-batch
#: Overlap"): +25.5% throughput at 256 sequences a GPU; the step-time model prices that step at
#: 104 ms of compute and 54 ms of all-to-all, so 158 / 1.255 = 126 ms: 0.405 of the all-to-all
#: stays exposed, 0.595 is hidden
OVERLAP_EFFICIENCY = 0.595

#: GPUs of one HGX board: an EP group larger than this runs a DeepEP-style all-to-all (SGLang's
#: large-scale EP with ``--moe-a2a-backend deepep``, vLLM's DeepEP all2all backends, TensorRT-
#: LLM's wide EP), also inside a GB200/GB300 NVLink domain; up to it, the attention-DP gather
#: and scatter the step-time model was fitted on
BOARD_GPUS = 8


@dataclass(frozen=True)
class PoolContext:
    """A pool's resolved deployment, coefficients and what its all-to-all crosses.

    ``role`` picks DeepEP's kernels: normal (one copy a node, prefill) or low-latency (one
    copy an expert, decode). A cross-node all-to-all runs beside the other micro-batch's
    compute (SGLang's two-batch overlap, vLLM's dual-batch overlap, both after DeepSeek's
    profile-data): the step pays ``max(compute, all-to-all) + (1 - eta) x min(compute,
    all-to-all)``, ``eta`` = :data:`OVERLAP_EFFICIENCY` from SGLang's own ablation (its H100
    post, lmsys.org 2025-05-05, measures the overlap's gain at 27-35% in prefill and 25.5% at
    256 sequences in decode); its GB200 part I post turns the overlap off inside NVLink, where
    the all-to-all is short: no overlap there.
    """

    scenario: Scenario
    dep: Deployment
    c: np.ndarray
    nic_bytes_per_s: float
    link: KvLink
    dispatch_bytes: float
    role: Literal["prefill", "decode"] = "decode"

    @property
    def large_ep(self) -> bool:
        """An expert-parallel group beyond one board: its MoE layers run an all-to-all."""
        return self.dep.expert_parallel and self.dep.moe_group > BOARD_GPUS

    @property
    def wide_ep(self) -> bool:
        """The all-to-all leaves the NVLink domain (over the network)."""
        return self.dep.expert_parallel and self.dep.moe_group > _nodes_of(self.dep)

    def all_to_all_s(self, tokens: float) -> float:
        """Seconds a step's all-to-all takes for ``tokens`` tokens of a rank (before any
        overlap): on the network when the group spans NVLink domains, on NVLink when it is
        large but inside one, else 0 (the step-time model's own terms)."""
        dep = self.dep
        if not self.large_ep:
            return 0.0
        if self.wide_ep:
            return ep_all_to_all_s(
                tokens,
                hidden=dep.hidden_size,
                experts_per_token=dep.experts_per_token,
                ep_size=dep.moe_group,
                gpus_per_node=_nodes_of(dep),
                moe_layers=dep.num_moe_layers,
                dispatch_bytes=self.dispatch_bytes,
                nic_bytes_per_s=self.nic_bytes_per_s,
                link=self.link,
                node_dedup=self.role == "prefill",
            )
        return ep_all_to_all_nvlink_s(
            tokens,
            hidden=dep.hidden_size,
            experts_per_token=dep.experts_per_token,
            ep_size=dep.moe_group,
            moe_layers=dep.num_moe_layers,
            dispatch_bytes=self.dispatch_bytes,
            nvlink_bytes_per_s=link_bytes_per_s(KV_LINKS["nvlink"], dep.gpu, dep.instance),
        )

    def apply_all_to_all(self, x: np.ndarray, tokens: float) -> np.ndarray:
        """``x`` (step terms of ``tokens`` tokens a rank) with large EP's all-to-all in place of
        the attention-DP gather and scatter the step-time model prices, in ``idle`` (a time at
        coefficient 1 before the pool's scale: spec rate x measured efficiency); across nodes
        only what the overlap does not hide (``max(0, all-to-all - compute) + (1 - eta) x
        min(all-to-all, compute)``)."""
        if not self.large_ep:
            return x
        dep = self.dep
        x = x.copy()
        d, n_moe = dep.data_parallel_size, dep.num_moe_layers
        if d > 1 and n_moe and dep.link_class in ("nvlink", "pcie_p2p", "pcie_host"):
            activation = tokens * dep.hidden_size * 2.0
            x[IDX[f"allreduce_{dep.link_class}"]] -= 2 * n_moe * (d - 1) * activation / dep.link_bw
            x[IDX[f"ar_calls_{dep.link_class}"]] -= 2 * n_moe * AR_CALL_UNIT_S
            x[IDX[f"allreduce_{dep.link_class}"]] = max(0.0, x[IDX[f"allreduce_{dep.link_class}"]])
            x[IDX[f"ar_calls_{dep.link_class}"]] = max(0.0, x[IDX[f"ar_calls_{dep.link_class}"]])
        a2a = self.all_to_all_s(tokens)
        if self.wide_ep:
            compute = float(self.c @ x)
            a2a = max(0.0, a2a - compute) + (1.0 - OVERLAP_EFFICIENCY) * min(a2a, compute)
        x[IDX["idle"]] += a2a
        return x

    def features(self, batch: StepBatch) -> np.ndarray:
        """Step terms of ``batch`` on this pool (:meth:`apply_all_to_all`)."""
        return self.apply_all_to_all(step_features(batch, self.dep), batch.tokens)

    def fill_step_terms(self, out: np.ndarray, batch: StepBatch, dep: Deployment) -> None:
        """:meth:`features` into ``out``: the step terms a pool's engine runs on
        (:class:`planner.perf.simulator.LiveEngine` ``step_terms``), so the simulated pools
        and this prediction time a step with one function, all-to-all included."""
        out[:] = self.features(batch)

    def step_s(self, batch: StepBatch) -> float:
        return float(self.c @ self.features(batch))


class _PrefillSteadyState(SteadyStateModel):
    """The steady state of a prefill pool whose steps also pay a large-EP all-to-all."""

    def __init__(self, pool: PoolContext) -> None:
        super().__init__(pool.dep, pool.c)
        self.pool = pool

    def _terms(self, decode: float, chunks: float, chunk: float, done: float) -> np.ndarray:
        x = super()._terms(decode, chunks, chunk, done)
        if self.pool.large_ep:
            x = self.pool.apply_all_to_all(x, max(decode + chunks * chunk, 1.0))
        return x


@dataclass(frozen=True)
class DecodeState:
    """The decode pool, one engine (attention-DP rank), at a rate."""

    rate: float  # requests/s per rank
    running: float  # d
    seats: float  # the most sequences the rank holds
    step_s: float  # T(d) = TPOT
    step_p99_s: float
    capacity_rate: float  # requests/s per rank at the full batch
    stable: bool
    terms: np.ndarray


class DecodePool:
    """Decode-only steps of a rank: ``lambda = d / (O x T(d))``, solved for ``d``."""

    def __init__(self, pool: PoolContext, input_len: float, output_len: float) -> None:
        self.pool = pool
        dep = pool.dep
        self.output_len = max(output_len, 1.0)
        #: mean tokens a decoding sequence attends to
        self.context = input_len + output_len / 2.0
        per_seq = self.context + dep.block_size / 2.0
        self.seats = float(min(dep.max_num_seqs, dep.kv_capacity_tokens / max(per_seq, 1.0)))
        self.seats = max(self.seats, 1.0)

    def _batch(self, running: float) -> StepBatch:
        batch = StepBatch()
        batch.add_decode(max(running, 1.0), self.context, self.pool.dep.sliding_window)
        return batch

    def step_s(self, running: float) -> float:
        return self.pool.step_s(self._batch(running))

    def rate_at(self, running: float) -> float:
        return running / (self.output_len * self.step_s(running))

    def capacity_rate(self) -> float:
        return self.rate_at(self.seats)

    def at_rate(self, rate: float) -> DecodeState:
        cap = self.capacity_rate()
        if rate >= cap:
            running, stable = self.seats, False
        else:
            lo, hi = 0.0, self.seats
            for _ in range(60):
                mid = (lo + hi) / 2.0
                if self.rate_at(mid) < rate:
                    lo = mid
                else:
                    hi = mid
            running, stable = (lo + hi) / 2.0, True
        p99_running = min(self.seats, running + 2.326 * math.sqrt(max(running, 0.0)))
        return DecodeState(
            rate=rate,
            running=running,
            seats=self.seats,
            step_s=self.step_s(running),
            step_p99_s=self.step_s(p99_running),
            capacity_rate=cap,
            stable=stable,
            terms=self.pool.features(self._batch(running)),
        )


def balanced_ratio(prefill_capacity_rps: float, decode_capacity_rps: float) -> float:
    """Prefill replicas per decode replica that load both pools equally:
    ``C_decode / C_prefill`` (each a replica's capacity in requests/s). A decode replica that
    serves 6 req/s beside prefill replicas that serve 2 each needs 3 of them."""
    if prefill_capacity_rps <= 0 or decode_capacity_rps <= 0:
        raise InvalidInputError(
            "capacity", (prefill_capacity_rps, decode_capacity_rps), "both above 0 requests/s"
        )
    return decode_capacity_rps / prefill_capacity_rps


def balanced_pools(
    rate_rps: float,
    prefill_capacity_rps: float,
    decode_capacity_rps: float,
    utilization: float = 1.0,
) -> tuple[int, int]:
    """(prefill, decode) replicas that carry ``rate_rps`` with each pool at most
    ``utilization`` busy: ``ceil(rate / (C x utilization))`` each."""
    if not 0 < utilization <= 1:
        raise InvalidInputError("utilization", utilization, "above 0 and at most 1")
    balanced_ratio(prefill_capacity_rps, decode_capacity_rps)  # both capacities positive
    prefill = max(1, math.ceil(rate_rps / (prefill_capacity_rps * utilization) - 1e-9))
    decode = max(1, math.ceil(rate_rps / (decode_capacity_rps * utilization) - 1e-9))
    return prefill, decode


# ----- the prediction -----------------------------------------------------------------------
class DisaggregatedPrediction(BaseModel):
    """A disaggregated deployment's prediction: the usual figures (``prediction``, whole
    deployment, vLLM bench definitions) and each pool's."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    prediction: Prediction
    gpus: int
    output_tok_per_s_per_gpu: float
    prefill_gpus: int
    decode_gpus: int
    prefill_utilization: float
    decode_utilization: float
    #: requests/s one replica of each pool carries at saturation
    prefill_capacity_rps: float
    decode_capacity_rps: float
    #: prefill replicas per decode replica that load both pools equally
    balanced_prefill_per_decode: float
    kv_transfer_bytes: float
    kv_transfer_ms: float
    decode_running_per_rank: float
    #: seconds a step spends on the wide-EP all-to-all (0 within a node), decode pool
    decode_all_to_all_ms: float
    stable: bool


@dataclass(frozen=True)
class DisaggregatedModel:
    """Both pools of a scenario, resolved once; :meth:`at_rate` answers a load."""

    scenario: Scenario
    layout: DisaggregatedLayout
    prefill: PoolContext
    decode: PoolContext
    prefill_state: SteadyStateModel
    decode_pool: DecodePool
    transfer_bytes: float
    transfer_s: float
    model: PerformanceModel
    scales: PoolScales = PoolScales()

    @property
    def prefill_ranks(self) -> int:
        return self.prefill.dep.replicas

    @property
    def decode_ranks(self) -> int:
        return self.decode.dep.replicas

    def capacity_rps(self) -> tuple[float, float]:
        """(prefill, decode) requests/s a replica of each pool carries at saturation."""
        p = self.prefill_state.saturation_rate() * self.layout.prefill.attention_dp
        d = self.decode_pool.capacity_rate() * self.layout.decode.attention_dp
        return p, d

    @property
    def decode_request_path_s(self) -> float:
        """The decode pool's own request path: the router's second request (vLLM's PD proxy,
        ``toy_proxy_server.py``, posts the prompt to the prefill server, then again to the
        decode server, which streams the answer) pays a served request's fixed path again."""
        return deployment_request_path_s(self.decode.c, self.decode.dep)

    def decode_first_token_s(self, dec: DecodeState, step_s: float) -> float:
        """From a request's KV reaching its decode rank to its first token streamed: the step
        in progress ends (busy with probability ``1 - exp(-d)`` for ``d`` running, Poisson
        occupancy; a step's remaining half on average), its own first step ``step_s`` (the
        prompt's last partial block and one token), then the decode request path."""
        busy = 1.0 - math.exp(-max(dec.running, 0.0))
        return busy * dec.step_s / 2.0 + step_s + self.decode_request_path_s

    def e2e_mean_s(self, rate: float) -> float:
        pre = self.prefill_state.at_rate(rate / self.prefill_ranks)
        dec = self.decode_pool.at_rate(rate / self.decode_ranks)
        if not (pre.stable and dec.stable):
            return math.inf
        ttft = pre.ttft_mean_s + self.transfer_s + self.decode_first_token_s(dec, dec.step_s)
        return ttft + (self.scenario.mean_output_len - 1) * dec.step_s

    def rate_for_concurrency(self, in_flight: float) -> float:
        """The rate a closed loop of ``in_flight`` requests settles at: ``N = rate x E2E``
        (Little's law), by bisection below the smaller pool's capacity."""
        p, d = self.capacity_rps()
        hi = min(p * self.layout.prefill.replicas, d * self.layout.decode.replicas) * 0.999
        lo = 0.0
        for _ in range(50):
            mid = (lo + hi) / 2.0
            if mid * self.e2e_mean_s(mid) < in_flight:
                lo = mid
            else:
                hi = mid
        return lo

    def at_rate(self, rate: float) -> DisaggregatedPrediction:
        sc, layout = self.scenario, self.layout
        pre = self.prefill_state.at_rate(rate / self.prefill_ranks)
        dec = self.decode_pool.at_rate(rate / self.decode_ranks)
        stable = pre.stable and dec.stable
        out_len = sc.mean_output_len
        tail = self.transfer_s + self.decode_first_token_s(dec, dec.step_s)
        ttft_mean = pre.ttft_mean_s + tail if stable else math.inf
        ttft_p50 = pre.ttft_p50_s + tail if stable else math.inf
        ttft_p99 = (
            pre.ttft_p99_s + self.transfer_s + self.decode_first_token_s(dec, dec.step_p99_s)
            if stable
            else math.inf
        )
        served = (
            rate
            if stable
            else min(pre.rate * self.prefill_ranks, dec.capacity_rate * self.decode_ranks)
        )
        out_tps = served * out_len
        total_tps = out_tps + served * sc.mean_input_len
        tpot, tpot_p99 = dec.step_s, dec.step_p99_s
        e2e_mean = ttft_mean + (out_len - 1) * tpot
        e2e_p99 = ttft_p99 + (out_len - 1) * tpot_p99

        dep = self.decode.dep
        key = coefficient_key(self.decode.scenario, dep)
        scaled = dep.card.architecture.is_moe and self.scales.rows > 0
        reasons = [
            *self.model.uncertainty_reasons(self.decode.scenario, dep),
            (
                f"disaggregated prefill/decode: pools scaled by the fit on {self.scales.rows} "
                "public large-MoE rows, each measured one phase at a time"
                if scaled
                else "disaggregated prefill/decode: no measured disaggregated result of a "
                "dense model in the fit"
            ),
        ]
        fitted = self.model.fitted

        classes = dep.card.architecture.model_classes

        def widened(own: tuple[float, float], metric: str) -> tuple[float, float]:
            # each metric's own multipliers (a p99 its p99's), with the load shape's, the engine
            # family's and its architecture group's factors on them, as an aggregated prediction's
            return widen(
                own,
                len(reasons),
                metric,
                family=key.family,
                model_classes=classes,
                load=self.decode.scenario.load,
            )

        decode_shares = term_shares(dec.terms, self.decode.c)
        thr_own = interval_factors(fitted, key, "output_tok_per_s", decode_shares)
        tpot_own = interval_factors(fitted, key, "itl", decode_shares)
        prefill_shares = term_shares(pre.step_terms, self.prefill.c)
        ttft_own = interval_factors(fitted, key, "ttft", prefill_shares)
        thr_lo, thr_hi = widened(thr_own, "output_tok_per_s")
        tpot_lo, tpot_hi = widened(tpot_own, "tpot")
        tpot99_lo, tpot99_hi = widened(tpot_own, "tpot_p99")
        ttft_lo, ttft_hi = widened(ttft_own, "ttft")
        ttft99_lo, ttft99_hi = widened(ttft_own, "ttft_p99")
        ms = 1e3
        p_cap, d_cap = self.capacity_rps()
        notes = (
            *self.prefill.dep.notes,
            *dep.notes,
            f"disaggregated: {layout.prefill.gpus} prefill + {layout.decode.gpus} decode GPUs "
            f"over {layout.kv_link}; KV transfer {self.transfer_s * ms:.3g} ms a request",
        )
        prediction = Prediction(
            output_tok_per_s=out_tps,
            output_tok_per_s_low=out_tps * thr_lo,
            output_tok_per_s_high=out_tps * thr_hi,
            total_tok_per_s=total_tps,
            total_tok_per_s_low=total_tps * thr_lo,
            total_tok_per_s_high=total_tps * thr_hi,
            request_per_s=served,
            ttft_ms_mean=ttft_mean * ms,
            ttft_ms_mean_low=ttft_mean * ms * ttft_lo,
            ttft_ms_mean_high=ttft_mean * ms * ttft_hi,
            ttft_ms_p50=ttft_p50 * ms,
            ttft_ms_p50_low=ttft_p50 * ms * ttft_lo,
            ttft_ms_p50_high=ttft_p50 * ms * ttft_hi,
            ttft_ms_p90=(ttft_p50 + 0.7 * (ttft_p99 - ttft_p50)) * ms if stable else math.inf,
            ttft_ms_p99=ttft_p99 * ms,
            ttft_ms_p99_low=ttft_p99 * ms * ttft99_lo,
            ttft_ms_p99_high=ttft_p99 * ms * ttft99_hi,
            tpot_ms_mean=tpot * ms,
            tpot_ms_mean_low=tpot * ms * tpot_lo,
            tpot_ms_mean_high=tpot * ms * tpot_hi,
            tpot_ms_p50=tpot * ms,
            tpot_ms_p50_low=tpot * ms * tpot_lo,
            tpot_ms_p50_high=tpot * ms * tpot_hi,
            tpot_ms_p90=(tpot + 0.7 * (tpot_p99 - tpot)) * ms,
            tpot_ms_p99=tpot_p99 * ms,
            tpot_ms_p99_low=tpot_p99 * ms * tpot99_lo,
            tpot_ms_p99_high=tpot_p99 * ms * tpot99_hi,
            itl_ms_mean=tpot * ms,
            itl_ms_p50=tpot * ms,
            itl_ms_p99=tpot_p99 * ms,
            e2e_ms_mean=e2e_mean * ms,
            e2e_ms_p50=(ttft_p50 + (out_len - 1) * tpot) * ms,
            e2e_ms_p99=e2e_p99 * ms,
            duration_s=0.0,
            mean_running_batch=dec.running * self.decode_ranks,
            kv_occupancy_mean=min(1.0, dec.running / self.decode_pool.seats),
            kv_occupancy_max=min(1.0, dec.running / self.decode_pool.seats),
            kv_capacity_tokens=dep.kv_capacity_tokens,
            preemptions=0,
            far_from_data=True,
            confidence="extrapolated",
            nearest_measured=(
                f"the public disaggregated rows ({self.scales.source})"
                if scaled
                else "no measured disaggregated result in the fit"
            ),
            distance=99.0,
            uncertain_because=tuple(reasons),
            release_note=None,
            notes=notes,
        )
        gpus = layout.gpus
        return DisaggregatedPrediction(
            prediction=prediction,
            gpus=gpus,
            output_tok_per_s_per_gpu=out_tps / gpus,
            prefill_gpus=layout.prefill.gpus,
            decode_gpus=layout.decode.gpus,
            prefill_utilization=min(1.0, rate / (p_cap * layout.prefill.replicas)),
            decode_utilization=min(1.0, rate / (d_cap * layout.decode.replicas)),
            prefill_capacity_rps=p_cap,
            decode_capacity_rps=d_cap,
            balanced_prefill_per_decode=balanced_ratio(p_cap, d_cap),
            kv_transfer_bytes=self.transfer_bytes,
            kv_transfer_ms=self.transfer_s * ms,
            decode_running_per_rank=dec.running,
            decode_all_to_all_ms=self.decode.all_to_all_s(dec.running) * ms,
            stable=stable,
        )


def pool_deployment(scenario: Scenario, catalog: Catalog) -> Deployment:
    """The resolved deployment of a pool's scenario (:func:`pool_scenario`): its engines may
    span nodes with wide EP (the all-to-all priced by :class:`PoolContext`)."""
    return resolve_deployment(scenario, catalog, cross_node_moe=True)


def _pool_context(
    model: PerformanceModel,
    scenario: Scenario,
    link: KvLink,
    catalog: Catalog,
    role: Literal["prefill", "decode"],
    scales: PoolScales,
) -> PoolContext:
    dep = pool_deployment(scenario, catalog)
    scale = scales.of(role) if dep.card.architecture.is_moe else 1.0
    return pool_context(scenario, dep, model.coefficients_of(scenario, dep) * scale, link, role)


def pool_context(
    scenario: Scenario,
    dep: Deployment,
    coefficients: Sequence[float] | np.ndarray,
    link: KvLink,
    role: Literal["prefill", "decode"],
) -> PoolContext:
    """A pool of ``scenario`` resolved as ``dep`` (:func:`pool_deployment`), its steps timed by
    ``coefficients`` (a full vector, the pool's scale applied) with its all-to-all over
    ``link`` (a cross-node EP group inside an NVLink-linked plan crosses InfiniBand)."""
    network = link if link.kind != "nvlink" else KV_LINKS["infiniband"]
    return PoolContext(
        scenario=scenario,
        dep=dep,
        c=np.asarray(coefficients, dtype=float),
        nic_bytes_per_s=link_bytes_per_s(network, dep.gpu, dep.instance),
        link=network,
        dispatch_bytes=_wide_ep_dispatch_bytes(scenario.precision),
        role=role,
    )


def disaggregated_model(
    model: PerformanceModel,
    scenario: Scenario,
    layout: DisaggregatedLayout,
    scales: PoolScales | None = None,
) -> DisaggregatedModel:
    """Resolve both pools of ``scenario`` (its model, GPU, engine, precision and lengths) laid
    out as ``layout``; bad layouts raise InvalidInputError naming the column. ``scales``: the
    pools' fitted step scales (None: the shipped ones, :func:`fitted_scales`)."""
    scales = scales if scales is not None else fitted_scales()
    catalog = model.catalog
    link = kv_link(layout.kv_link)
    pre_sc = pool_scenario(scenario, layout.prefill, "prefill")
    dec_sc = pool_scenario(scenario, layout.decode, "decode")
    prefill = _pool_context(model, pre_sc, link, catalog, "prefill", scales)
    decode = _pool_context(model, dec_sc, link, catalog, "decode", scales)
    _validate_pool(prefill.dep, layout.prefill, "prefill")
    _validate_pool(decode.dep, layout.decode, "decode")
    if link.kind == "nvlink":
        domain = _nodes_of(decode.dep)
        if layout.gpus > domain:
            raise InvalidInputError(
                "kv_link",
                "nvlink",
                f"a network link (infiniband, roce, efa): {layout.gpus} GPUs do not fit one "
                f"{domain}-GPU NVLink domain",
            )
    transfer = KvTransfer.between(prefill.dep, decode.dep, layout, link)
    transfer_bytes = transfer.bytes_of(round(scenario.mean_input_len))
    return DisaggregatedModel(
        scenario=scenario,
        layout=layout,
        prefill=prefill,
        decode=decode,
        prefill_state=_PrefillSteadyState(prefill),
        decode_pool=DecodePool(decode, scenario.mean_input_len, scenario.mean_output_len),
        transfer_bytes=transfer_bytes,
        transfer_s=transfer.seconds_of(round(scenario.mean_input_len)),
        model=model,
        scales=scales,
    )


# ----- a run's requests through both pools -------------------------------------------------------
@dataclass(frozen=True)
class PoolsReplay:
    """Each request of a run served by both pools on a virtual clock (:func:`replay_pools`):
    TTFT and TPOT in seconds (TPOT NaN for a one-token answer)."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray


def _replay_rank(
    engine: LiveEngine, arrivals: list[tuple[float, int, int, int, int]]
) -> dict[int, tuple[float, float]]:
    """One engine (a pool's rank) serving ``arrivals`` (time, key, prompt, output, cached
    tokens; sorted by time) as the simulated server steps it in real time
    (:class:`benchmarks_runner.simulated.perf_timing.EngineTiming`, an open loop): idle, it
    starts a step when a request arrives; busy, the requests that arrived during a step join
    the next one. Returns key -> (end of the step that made its first token, of its last)."""
    clock, i = 0.0, 0
    live: dict[int, int] = {}
    first: dict[int, float] = {}
    out: dict[int, tuple[float, float]] = {}
    while i < len(arrivals) or not engine.idle:
        if engine.idle:
            clock = max(clock, arrivals[i][0])
        while i < len(arrivals) and arrivals[i][0] <= clock:
            _, key, prompt, output, cached = arrivals[i]
            live[engine.submit(prompt, output, cached)] = key
            i += 1
        seconds = engine.step()
        if seconds is None:  # nothing fits: the next arrival (or nothing left to serve)
            if i >= len(arrivals):
                break
            clock = max(clock, arrivals[i][0])
            continue
        clock += seconds
        for rid, key in list(live.items()):
            if key not in first and engine.generated(rid) >= 1:
                first[key] = clock
            if engine.finished(rid):
                out[key] = (first[key], clock)
                engine.cancel(rid)
                del live[rid]
    return out


def replay_pools(
    prefill: PoolContext,
    decode: PoolContext,
    transfer: KvTransfer,
    arrivals_s: Sequence[float] | np.ndarray,
    input_lens: Sequence[int] | np.ndarray,
    output_lens: Sequence[int] | np.ndarray,
    seed: int = 0,
) -> PoolsReplay:
    """A run's requests through both pools, each engine stepped as the simulated endpoint steps
    it (:func:`_replay_rank`, the pool's own :meth:`PoolContext.fill_step_terms`), its route as
    the router's (vLLM's disaggregated proxy): the prompt on a prefill rank (one token, its
    answer the rank's request path after that step), the prompt's KV over the link
    (:meth:`KvTransfer.seconds_of`), then the answer on a decode rank that holds the prompt's
    KV as cached blocks (its first step computes the prompt's last partial block), each token
    streamed the decode rank's request path after its step. Each pool draws a rank for each
    request in the order they reach it, from ``random.Random(seed)`` (prefill) and
    ``random.Random(seed + 1)`` (decode), as the endpoint's pools do with its ``--seed``.

    TTFT = decode first token + request path - arrival; TPOT = (last - first token) /
    (output - 1); E2E = last token + request path - arrival."""
    n = len(arrivals_s)

    def engines(pool: PoolContext) -> list[LiveEngine]:
        return [
            LiveEngine(pool.dep, pool.c, step_terms=pool.fill_step_terms)
            for _ in range(pool.dep.replicas)
        ]

    def serve(
        pool: PoolContext,
        times: Sequence[float] | np.ndarray,
        outputs: Sequence[int],
        cached: bool,
        rng_seed: int,
    ) -> tuple[np.ndarray, np.ndarray, float]:
        ranks = engines(pool)
        rng = random.Random(rng_seed)
        by_rank: list[list[tuple[float, int, int, int, int]]] = [[] for _ in ranks]
        for key in sorted(range(n), key=lambda k: (times[k], k)):
            prompt = int(input_lens[key])
            by_rank[rng.randrange(len(ranks))].append(
                (float(times[key]), key, prompt, int(outputs[key]), prompt if cached else 0)
            )
        first, last = np.full(n, np.nan), np.full(n, np.nan)
        for engine, arrivals in zip(ranks, by_rank, strict=True):
            for key, (f, last_s) in _replay_rank(engine, arrivals).items():
                first[key], last[key] = f, last_s
        return first, last, ranks[0].request_path_s

    arrivals = np.asarray(arrivals_s, dtype=float)
    ones = [1] * n
    pre_first, _, pre_path = serve(prefill, arrivals, ones, False, seed)
    at_decode = [
        float(pre_first[k] + pre_path + transfer.seconds_of(int(input_lens[k]))) for k in range(n)
    ]
    first, last, path = serve(decode, at_decode, list(output_lens), True, seed + 1)
    outputs = np.asarray(output_lens, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(outputs > 1, (last - first) / (outputs - 1), np.nan)
    return PoolsReplay(ttft_s=first + path - arrivals, tpot_s=tpot, e2e_s=last + path - arrivals)


def _replayable(scenario: Scenario) -> bool:
    """A rate run of a stated number of requests, each prompt computed whole (no shared
    prefix to find in a cache): the requests the runner sends (:func:`request_arrivals`)."""
    return (
        scenario.load == "rate"
        and scenario.num_requests is not None
        and not scenario.trace
        and not scenario.prefix_share
        and scenario.replicas == 1
    )


def _with_replay(prediction: Prediction, replay: PoolsReplay) -> Prediction:
    """``prediction`` with its latencies those of ``replay`` (numpy's linear percentiles; the
    intervals keep their factors around the new centres)."""
    ms = 1e3
    update: dict[str, Any] = {}
    for metric, values in (("ttft", replay.ttft_s), ("tpot", replay.tpot_s)):
        ok = values[np.isfinite(values)]
        if not ok.size:
            continue
        for stat, value in (
            ("mean", float(ok.mean())),
            ("p50", float(np.percentile(ok, 50))),
            ("p90", float(np.percentile(ok, 90))),
            ("p99", float(np.percentile(ok, 99))),
        ):
            name = f"{metric}_ms_{stat}"
            old = getattr(prediction, name)
            update[name] = value * ms
            for side in ("low", "high"):
                bound = getattr(prediction, f"{name}_{side}", None)
                if bound is not None and old and math.isfinite(old):
                    update[f"{name}_{side}"] = value * ms * bound / old
    if "tpot_ms_mean" in update:
        update |= {
            "itl_ms_mean": update["tpot_ms_mean"],
            "itl_ms_p50": update["tpot_ms_p50"],
            "itl_ms_p99": update["tpot_ms_p99"],
        }
    e2e = replay.e2e_s[np.isfinite(replay.e2e_s)]
    if e2e.size:
        update |= {
            "e2e_ms_mean": float(e2e.mean()) * ms,
            "e2e_ms_p50": float(np.percentile(e2e, 50)) * ms,
            "e2e_ms_p99": float(np.percentile(e2e, 99)) * ms,
        }
    update["notes"] = (
        *prediction.notes,
        f"latencies: the run's {replay.ttft_s.size} requests replayed through both pools "
        "(its seeded arrivals and lengths, each pool's engines stepped as the endpoint's)",
    )
    return prediction.model_copy(update=update)


def predict_disaggregated(
    model: PerformanceModel,
    scenario: Scenario,
    layout: DisaggregatedLayout,
    scales: PoolScales | None = None,
) -> DisaggregatedPrediction:
    """The scenario's load (a request rate, or a closed loop of ``concurrency`` requests) on a
    disaggregated deployment; see the module docstring. A closed loop is priced as Poisson
    arrivals at the rate it settles at (:meth:`DisaggregatedModel.rate_for_concurrency`): its
    prefill queue is, if anything, shorter than that.

    A rate run of a stated number of requests (a Verify run) is, as the aggregated simulator
    predicts one, those very requests: the latencies are its seeded arrivals and lengths
    replayed through both pools (:func:`replay_pools`) when the steady state is stable. A
    short run's queue wanders from the steady state's mean: 40 arrivals at 4 req/s on one
    Llama-3.1-70B prefill engine, seed 1, bunch into a mean TTFT 48% above it, seeds 0 and 2
    lie 7% above; the replay follows each."""
    if scenario.load not in ("rate", "concurrency"):
        raise InvalidInputError(
            "load", scenario.load, "rate or concurrency for a disaggregated deployment"
        )
    dm = disaggregated_model(model, scenario, layout, scales)
    if scenario.load == "rate":
        rate = scenario.request_rate or 0.0
    else:
        rate = dm.rate_for_concurrency(scenario.concurrency or 1.0)
    result = dm.at_rate(rate)
    arrivals = request_arrivals(scenario) if _replayable(scenario) else None
    if result.stable and arrivals is not None:
        lengths = draw_lengths(
            scenario.input_dist or LengthDistribution.fixed(int(scenario.input_len or 1)),
            scenario.output_dist or LengthDistribution.fixed(int(scenario.output_len or 1)),
            arrivals.size,
            scenario.seed,
        )
        transfer = KvTransfer.between(
            dm.prefill.dep, dm.decode.dep, layout, kv_link(layout.kv_link)
        )
        replay = replay_pools(dm.prefill, dm.decode, transfer, arrivals, *lengths)
        result = result.model_copy(update={"prediction": _with_replay(result.prediction, replay)})
    return result


__all__ = [
    "FIT_FILE",
    "KV_LINKS",
    "OVERLAP_EFFICIENCY",
    "DecodePool",
    "DisaggregatedLayout",
    "DisaggregatedModel",
    "DisaggregatedPrediction",
    "KvLink",
    "KvTransfer",
    "PoolLayout",
    "PoolScales",
    "PoolsReplay",
    "balanced_pools",
    "balanced_ratio",
    "disaggregated_model",
    "ep_all_to_all_nvlink_s",
    "ep_all_to_all_s",
    "fitted_scales",
    "kv_link",
    "kv_streams",
    "kv_transfer_bytes",
    "kv_transfer_s",
    "layout_from_row",
    "link_bytes_per_s",
    "pool_context",
    "pool_deployment",
    "pool_scenario",
    "predict_disaggregated",
    "remote_copies_per_token",
    "replay_pools",
]
