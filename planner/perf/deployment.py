"""Resolve a :class:`Scenario` against the catalog into the physical constants a step needs.

Everything here is per GPU of one replica: the bytes of weights a forward pass streams, the KV
bytes one token adds, FLOPs per token, the link a tensor-parallel all-reduce crosses and the
network a pipeline boundary crosses. Validation against the model and the hardware happens here
and fails with :class:`~planner.errors.InvalidInputError` naming field, value and what is allowed.

Interconnect, when the scenario names an instance: the instance's ``gpu_link`` and its bandwidth;
pipeline stages on other instances talk over ``network_gbps``. Without an instance the GPU's own
platform is assumed (domain.md): NVLink for SXM and superchip parts, Infinity Fabric for AMD OAM
parts, and PCIe *with* peer-to-peer for PCIe cards (bare-metal servers enable P2P; the AWS
instances that do not are in ``instances.csv`` as ``pcie``). A replica larger than one node
(8 GPUs, 72 for GB200 NVL72) spans nodes joined by a 400 Gbit/s fabric (assumption, documented).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.catalog import BYTES_PER_PARAM, GPU, Catalog, Instance, ModelCard
from planner.engine import FAMILIES, EngineConfig
from planner.errors import InvalidInputError
from planner.perf.capacity import plan_capacity
from planner.perf.scenario import Scenario

#: per-direction PCIe x16 bandwidth by generation, bytes/s (PCI-SIG: 16/32/64/128 GT/s x16).
PCIE_BYTES_PER_S = {3: 15.75e9, 4: 31.5e9, 5: 63.0e9, 6: 121.0e9}
DEFAULT_FABRIC_GBPS = 400.0
ACTIVATION_BYTES = 2.0  # all-reduce and pipeline tensors travel in 16-bit


@dataclass(frozen=True)
class Deployment:
    """Per-GPU constants of one replica of a scenario (all rates in bytes/s or FLOP/s)."""

    scenario: Scenario
    family: str
    gpu: GPU
    card: ModelCard
    instance: Instance | None
    tp: int
    pp: int
    nodes: int
    replicas: int
    num_layers: int
    hidden_size: int
    # memory traffic per chain (one micro-batch through every stage), per GPU
    dense_weight_bytes: float
    expert_bytes_per_expert_layer: float
    num_moe_layers: int
    num_experts: int
    experts_per_token: int
    kv_bytes_per_token_full: float  # over all full-attention layers, per GPU
    kv_bytes_per_token_window: float  # over all sliding-window layers, per GPU
    sliding_window: int | None
    # FLOPs per token, per GPU
    gemm_flops_per_token: float
    lm_head_flops_per_seq: float
    attn_flops_per_pair_full: float
    attn_flops_per_pair_window: float
    # rates
    memory_bw: float
    peak_flops: float
    peak_flops_16bit: float
    link_class: str
    link_bw: float  # per direction, bytes/s
    network_bw: float  # bytes/s between nodes
    net_boundaries: int  # pipeline boundaries that cross nodes
    # engine: every setting resolved (planner.engine), max_model_len included
    engine: EngineConfig
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_capacity_tokens: int
    weights_bytes_per_gpu: float
    kv_dtype_bytes: float
    enforce_eager: bool
    notes: tuple[str, ...] = ()

    @property
    def kv_capacity_blocks(self) -> int:
        return self.kv_capacity_tokens // self.block_size

    @property
    def kv_bytes_per_token(self) -> float:
        return self.kv_bytes_per_token_full + self.kv_bytes_per_token_window


def _gpu_link(gpu: GPU, instance: Instance | None) -> tuple[str, float]:
    """Link class and per-direction bandwidth (bytes/s) of the TP group."""
    pcie = PCIE_BYTES_PER_S.get(gpu.pcie_gen or 4, PCIE_BYTES_PER_S[4])
    if instance is not None:
        link = instance.gpu_link
        bw = instance.gpu_link_bw_gbps * 1e9 / 2 if instance.gpu_link_bw_gbps else None
        if link in ("nvlink", "infinity_fabric"):
            fallback = (gpu.interconnect_bw_gbps or 600.0) * 1e9 / 2
            return "nvlink", bw or fallback
        if link == "pcie_p2p":
            return "pcie_p2p", bw or pcie
        return "pcie_host", bw or pcie
    if gpu.interconnect in ("nvlink", "infinity_fabric"):
        return "nvlink", (gpu.interconnect_bw_gbps or 600.0) * 1e9 / 2
    return "pcie_p2p", pcie


def kv_dtype_bytes(engine: EngineConfig, precision: str) -> float:
    """KV element size: fp8 when asked, or (TensorRT-LLM) when the weights are FP8/FP4."""
    if engine.family == "trtllm" and precision in ("fp8", "fp4"):
        return 1.0  # trtllm-bench quantises the KV cache with FP8/NVFP4 checkpoints
    return engine.kv_bytes_per_element


def _validate_layout(scenario: Scenario, card: ModelCard, instance: Instance | None) -> None:
    arch = card.architecture
    heads = arch.num_attention_heads
    if heads % scenario.tp:
        divisors = [d for d in range(1, heads + 1) if heads % d == 0 and d <= 64]
        raise InvalidInputError(
            "tp",
            scenario.tp,
            f"a divisor of the {heads} attention heads of {card.hf_id}: {divisors}",
        )
    kv = arch.num_kv_heads
    if not arch.is_mla and kv % scenario.tp and scenario.tp % kv:
        raise InvalidInputError(
            "tp", scenario.tp, f"a divisor or multiple of the {kv} KV heads of {card.hf_id}"
        )
    if scenario.pp > arch.num_layers:
        raise InvalidInputError("pp", scenario.pp, f"at most the {arch.num_layers} layers")
    if instance is not None and scenario.tp > instance.gpus:
        raise InvalidInputError(
            "tp",
            scenario.tp,
            f"at most the {instance.gpus} GPUs of one {instance.instance} (TP stays in one node)",
        )


def resolve_deployment(scenario: Scenario, catalog: Catalog) -> Deployment:
    """Everything a step-time evaluation and the simulator need, or a typed error."""
    family = scenario.engine_family
    if family not in FAMILIES:
        raise InvalidInputError(
            "engine", scenario.engine, "one of vllm, tensorrt-llm, nim-tensorrt-llm, sglang"
        )
    card = catalog.model(scenario.model)
    gpu = catalog.gpu(scenario.gpu)
    engine = resolve_engine(scenario, gpu)
    instance = catalog.instance(scenario.instance) if scenario.instance else None
    precision = scenario.precision.strip().lower()
    if precision not in BYTES_PER_PARAM:
        raise InvalidInputError("precision", scenario.precision, f"one of {list(BYTES_PER_PARAM)}")
    _validate_layout(scenario, card, instance)
    arch = card.architecture
    tp, pp = scenario.tp, scenario.pp
    notes: list[str] = []

    # ----- weights ----------------------------------------------------------------------------
    bpp = BYTES_PER_PARAM[precision]
    expert_params = arch._expert_params() if arch.is_moe else 0
    n_moe = len(arch.moe_layers)
    routed_active = n_moe * arch.experts_per_token * expert_params
    lm_head = arch.vocab_size * arch.hidden_size
    dense_active = arch.active_params - routed_active  # attention, dense MLP, shared, lm_head
    dense_weight_bytes = dense_active * bpp / tp
    expert_bytes = expert_params * bpp / tp  # experts are TP-sharded (no expert parallelism)

    # ----- KV --------------------------------------------------------------------------------
    kv_bpe = kv_dtype_bytes(engine, precision)
    if arch.is_mla:
        per_layer_gpu = arch.kv_elements_per_token_per_layer() * kv_bpe  # latent replicated
    else:
        kv_heads_gpu = max(1.0, arch.num_kv_heads / tp)
        per_layer_gpu = 2 * kv_heads_gpu * arch.head_dim * kv_bpe
    sliding_layers = arch.num_sliding_layers
    window = arch.sliding_window
    if family == "trtllm":
        # trtllm-bench runs every layer with full attention unless max_attention_window is
        # set (its Mistral-7B rows perform like Llama-3.1-8B at 20k tokens)
        sliding_layers, window = 0, None
    full_layers = arch.num_full_layers + arch.num_sliding_layers - sliding_layers
    kv_full = per_layer_gpu * full_layers
    kv_window = per_layer_gpu * sliding_layers

    # ----- FLOPs -----------------------------------------------------------------------------
    gemm = 2.0 * (arch.active_params - lm_head) / tp
    lm_head_flops = 2.0 * lm_head / tp
    if arch.is_mla:
        qk = (arch.qk_nope_head_dim or 0) + (arch.qk_rope_head_dim or 0)
        v = arch.v_head_dim or arch.head_dim
    else:
        qk = v = arch.head_dim
    per_pair = 2.0 * arch.num_attention_heads * (qk + v) / tp
    attn_full = per_pair * full_layers
    attn_window = per_pair * sliding_layers

    # ----- rates -----------------------------------------------------------------------------
    memory_bw = gpu.memory_bw_gbps * 1e9
    peak = gpu.compute_tflops(precision) * 1e12
    peak16 = (gpu.bf16_dense_tflops or gpu.fp16_dense_tflops) * 1e12
    if kv_bpe == 1.0 and gpu.fp8_dense_tflops:
        peak16 = gpu.fp8_dense_tflops * 1e12  # FP8 attention kernels with an FP8 KV cache
    link_class, link_bw = _gpu_link(gpu, instance)

    gpus_per_replica = tp * pp
    if instance is not None:
        per_node = instance.gpus
        if instance.gpu_id != gpu.gpu_id:
            notes.append(
                f"instance {instance.instance} holds {instance.gpu_id}, the scenario says "
                f"{gpu.gpu_id}: links and network from the instance, the rest from the GPU"
            )
        network_gbps = instance.network_gbps or DEFAULT_FABRIC_GBPS
    else:
        per_node = 72 if gpu.gpu_id.upper().startswith("GB") else 8
        network_gbps = DEFAULT_FABRIC_GBPS
    nodes = scenario.nodes or math.ceil(gpus_per_replica / per_node) * scenario.replicas
    nodes_per_replica = max(1, math.ceil(nodes / scenario.replicas))
    # stages split evenly over nodes: (nodes - 1) boundaries cross the network
    net_boundaries = min(pp - 1, nodes_per_replica - 1) if nodes_per_replica > 1 else 0
    if gpus_per_replica > per_node * nodes_per_replica:
        raise InvalidInputError(
            "nodes", nodes, f"enough {per_node}-GPU nodes for TP x PP = {gpus_per_replica}"
        )

    assert engine.max_num_seqs and engine.max_num_batched_tokens and engine.block_size
    plan = plan_capacity(
        card,
        gpu,
        tp=tp,
        pp=pp,
        precision=precision,
        engine=engine.model_copy(update={"kv_cache_dtype": "fp8" if kv_bpe == 1.0 else "auto"}),
    )
    return Deployment(
        scenario=scenario,
        family=family,
        gpu=gpu,
        card=card,
        instance=instance,
        tp=tp,
        pp=pp,
        nodes=nodes,
        replicas=scenario.replicas,
        num_layers=arch.num_layers,
        hidden_size=arch.hidden_size,
        dense_weight_bytes=dense_weight_bytes,
        expert_bytes_per_expert_layer=expert_bytes,
        num_moe_layers=n_moe,
        num_experts=arch.num_experts,
        experts_per_token=arch.experts_per_token,
        kv_bytes_per_token_full=kv_full,
        kv_bytes_per_token_window=kv_window,
        sliding_window=window,
        gemm_flops_per_token=gemm,
        lm_head_flops_per_seq=lm_head_flops,
        attn_flops_per_pair_full=attn_full,
        attn_flops_per_pair_window=attn_window,
        memory_bw=memory_bw,
        peak_flops=peak,
        peak_flops_16bit=peak16,
        link_class=link_class if tp > 1 else "none",
        link_bw=link_bw,
        network_bw=network_gbps * 1e9 / 8,
        net_boundaries=net_boundaries,
        engine=engine,
        block_size=engine.block_size,
        max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=engine.max_num_batched_tokens,
        kv_capacity_tokens=plan.kv_capacity_tokens,
        weights_bytes_per_gpu=plan.weights_bytes,
        kv_dtype_bytes=kv_bpe,
        enforce_eager=engine.enforce_eager,
        notes=tuple(notes),
    )


def resolve_engine(scenario: Scenario, gpu: GPU) -> EngineConfig:
    """The scenario's engine settings with every default filled in for ``gpu``:
    ``max_model_len`` the longest request unless stated, and without chunked prefill a batch
    budget of at least ``max_model_len``, as vLLM sets it (``SchedulerConfig``: a whole prompt
    must fit one step next to the running decodes)."""
    engine = scenario.engine_config().resolved(gpu)
    updates: dict[str, int] = {}
    max_model_len = engine.max_model_len or _longest_request(scenario)
    if engine.max_model_len is None:
        updates["max_model_len"] = max_model_len
    assert engine.max_num_batched_tokens is not None
    if not engine.enable_chunked_prefill:
        updates["max_num_batched_tokens"] = max(
            engine.max_num_batched_tokens, max_model_len, _longest_prompt(scenario)
        )
    return engine.model_copy(update=updates) if updates else engine


def _longest_prompt(scenario: Scenario) -> int:
    if scenario.trace:
        return max(r.input_len for r in scenario.trace)
    if scenario.input_len is not None:
        return scenario.input_len
    assert scenario.input_dist is not None
    return int(scenario.input_dist.max())


def _longest_request(scenario: Scenario) -> int:
    """Tokens of the longest request (what ``--max-model-len`` must admit)."""
    if scenario.trace:
        return max(r.input_len + r.output_len for r in scenario.trace)
    longest = 0
    for fixed, dist in (
        (scenario.input_len, scenario.input_dist),
        (scenario.output_len, scenario.output_dist),
    ):
        if fixed is not None:
            longest += fixed
        else:
            assert dist is not None
            longest += int(dist.max())
    return longest
