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

from planner.catalog import BYTES_PER_PARAM, GPU, Catalog, Instance, ModelArchitecture, ModelCard
from planner.errors import InvalidInputError
from planner.memory import vllm_serve_defaults
from planner.perf.capacity import plan_capacity
from planner.perf.scenario import Scenario

LINK_CLASSES = ("nvlink", "pcie_p2p", "pcie_host")
#: per-direction PCIe x16 bandwidth by generation, bytes/s (PCI-SIG: 16/32/64/128 GT/s x16).
PCIE_BYTES_PER_S = {3: 15.75e9, 4: 31.5e9, 5: 63.0e9, 6: 121.0e9}
DEFAULT_FABRIC_GBPS = 400.0
ACTIVATION_BYTES = 2.0  # all-reduce and pipeline tensors travel in 16-bit
KNOWN_FAMILIES = ("vllm", "trtllm", "sglang")
#: KV block size of each engine family (vLLM 16 tokens; TensorRT-LLM tokens_per_block 32;
#: SGLang allocates token by token (page_size 1) and is simulated in 16-token blocks).
ENGINE_DEFAULTS = {
    "vllm": {"block_size": 16},
    "trtllm": {"block_size": 32},
    "sglang": {"block_size": 16},
}
#: TensorRT-LLM LLM API / trtllm-bench defaults: max_batch_size 2048, max_num_tokens 8192.
TRTLLM_DEFAULTS = (2048, 8192)
#: vLLM V1 captures CUDA graphs for steps of up to this many tokens (compilation config
#: max_capture_size); larger steps launch every kernel.
VLLM_CUDA_GRAPH_MAX_TOKENS = 512
#: SGLang's max_running_requests when not set: the request pool, min(max(tokens / context x 512,
#: 2048), 4096) (model_runner), whose lower bound binds before the KV pool on these workloads.
SGLANG_MAX_RUNNING_REQUESTS = 2048
MIB = 2**20


def engine_defaults(family: str, gpu: GPU, load: str) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) the engine picks when the scenario does not.

    vLLM (vllm/engine/arg_utils.py, V1): ``vllm serve`` 1024 / 8192 on GPUs with >= 70 GiB
    other than A100s, else 256 / 2048 (:func:`planner.memory.vllm_serve_defaults`); the offline
    ``LLM`` class (load ``offline_batch``) 1024 / 16384, else 256 / 8192. SGLang: see
    :func:`sglang_defaults`.
    """
    if family == "trtllm":
        return TRTLLM_DEFAULTS
    if family == "sglang":
        defaults = sglang_defaults(gpu, tp=1, pp=1, dp=1)
        return defaults.max_running_requests, defaults.chunked_prefill_size
    seqs, batched = vllm_serve_defaults(gpu)
    if load == "offline_batch":
        batched = 16384 if batched >= 8192 else 8192
    return seqs, batched


@dataclass(frozen=True)
class SglangDefaults:
    """What ``python -m sglang.launch_server`` picks for a GPU and layout (0.5.x)."""

    chunked_prefill_size: int  # per attention-DP rank
    cuda_graph_max_bs: int
    mem_fraction_static: float
    max_running_requests: int
    #: initial share of a running request's remaining output its admission reserves
    #: (SGLANG_INIT_NEW_TOKEN_RATIO 0.7 x schedule_conservativeness, x 0.3 with DP attention)
    new_token_ratio: float


def sglang_defaults(gpu: GPU, *, tp: int, pp: int, dp: int) -> SglangDefaults:
    """SGLang 0.5.x server defaults (python/sglang/srt/server_args.py,
    ``_handle_gpu_memory_settings`` and ``_handle_data_parallelism``).

    By GPU memory: < 35 GiB chunked prefill 2048 (CUDA graphs up to 24 sequences below TP 4,
    80 from TP 4); < 60 GiB 4096 (32 / 160); < 160 GiB 8192 (256 / 512: A100 80 GB, H100,
    H200); larger 16384 (512: B200, MI300X). mem_fraction_static (weights + KV pool over the
    GPU) = (memory - reserved) / memory with reserved MiB = 512 + 1.5 x max(chunked prefill,
    2048) + 2 x cuda_graph_max_bs + TP x PP / 8 x 1024 (+ 3 x cuda_graph_max_bs x DP with DP
    attention), at least 10 GiB on GPUs above 60 GiB. With DP attention the chunked prefill
    size is divided by the DP size and the schedule conservativeness multiplied by 0.3.
    """
    mem_mib = gpu.memory_bytes / MIB
    big = tp >= 4
    if mem_mib < 35 * 1024:
        chunk, graphs = 2048, (80 if big else 24)
    elif mem_mib < 60 * 1024:
        chunk, graphs = 4096, (160 if big else 32)
    elif mem_mib < 160 * 1024:
        chunk, graphs = 8192, (512 if big else 256)
    else:
        chunk, graphs = 16384, 512
    reserved = 512 + 1.5 * max(chunk, 2048) + 2 * graphs + tp * pp / 8 * 1024
    if dp > 1:
        reserved += 3 * graphs * dp
    if mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    fraction = round((mem_mib - reserved) / mem_mib, 3)
    return SglangDefaults(
        chunked_prefill_size=chunk // dp if dp > 1 else chunk,
        cuda_graph_max_bs=graphs,
        mem_fraction_static=fraction,
        max_running_requests=SGLANG_MAX_RUNNING_REQUESTS,
        new_token_ratio=0.7 * (0.3 if dp > 1 else 1.0),
    )


@dataclass(frozen=True)
class WeightBytes:
    """Bytes per parameter of a model's non-expert linear layers and of its routed experts."""

    dense: float
    experts: float


def weight_bytes_per_param(arch: ModelArchitecture, precision: str) -> WeightBytes:
    """Bytes a parameter streams: the precision's, except that a checkpoint quantising only its
    experts (gpt-oss's MXFP4: attention, router, embeddings and lm_head stay BF16, per its
    ``quantization_config.modules_to_not_convert``) keeps 16-bit dense layers."""
    bpp = BYTES_PER_PARAM[precision]
    dense = 2.0 if arch.experts_only_quantized and bpp < 2.0 else bpp
    return WeightBytes(dense=dense, experts=bpp)


@dataclass(frozen=True)
class AttentionFlops:
    """FLOPs per (query, key) pair per GPU, summed over the layers, of decode and prefill
    queries, for the full-context and the capped (sliding-window or top-k) attention."""

    full_decode: float
    full_prefill: float
    window_decode: float
    window_prefill: float


def attention_constants(
    arch: ModelArchitecture, tp: int, full_layers: int, sliding_layers: int
) -> AttentionFlops:
    """Score plus value FLOPs of one (query, key) pair, per GPU (heads split over TP).

    GQA: 2 x heads x (head_dim + head_dim). MLA (DeepSeek-V2/V3): decode runs the absorbed form
    against the cached latent (2 x heads x (kv_lora_rank + rope + kv_lora_rank): the latent is
    the key with the RoPE part and the value), prefill the expanded one (2 x heads x
    (qk_nope + rope + v_head)), as vLLM and SGLang's MLA backends do. DeepSeek Sparse Attention
    (DeepSeek-V3.2): the MLA part attends over the index_topk selected keys (the capped pairs)
    while the lightning indexer scores every earlier key with index_n_heads x index_head_dim
    (2 x heads x dim FLOPs a pair, its small projections replicated on every GPU).
    """
    heads = arch.num_attention_heads / tp
    if not arch.is_mla:
        per_pair = 2.0 * heads * 2 * arch.head_dim
        return AttentionFlops(
            per_pair * full_layers,
            per_pair * full_layers,
            per_pair * sliding_layers,
            per_pair * sliding_layers,
        )
    assert arch.kv_lora_rank is not None
    rope = arch.qk_rope_head_dim or 0
    nope = arch.qk_nope_head_dim or 0
    v = arch.v_head_dim or arch.head_dim
    decode = 2.0 * heads * (2 * arch.kv_lora_rank + rope)
    prefill = 2.0 * heads * (nope + rope + v)
    if arch.sparse_attention_topk:
        indexer = 2.0 * arch.index_n_heads * arch.index_head_dim * full_layers
        return AttentionFlops(indexer, indexer, decode * full_layers, prefill * full_layers)
    return AttentionFlops(
        decode * full_layers,
        prefill * full_layers,
        decode * sliding_layers,
        prefill * sliding_layers,
    )


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
    #: schedulers the load is split over: replicas x attention-DP ranks (one is simulated)
    replicas: int
    num_layers: int
    hidden_size: int
    # memory traffic per chain (one micro-batch through every stage), per GPU
    dense_weight_bytes: float
    expert_bytes_per_expert_layer: float
    num_moe_layers: int
    num_experts: int
    experts_per_token: int
    data_parallel_size: int  # attention-DP ranks stepping together (their MoE is shared)
    expert_parallel: bool
    moe_group: int  # GPUs of a stage each MoE layer is split over (TP x DP)
    expert_flops_per_row: float  # one token through one routed expert, per GPU
    kv_bytes_per_token_full: float  # over all full-attention layers, per GPU
    kv_bytes_per_token_window: float  # over all sliding-window layers, per GPU
    sliding_window: int | None
    # FLOPs per token, per GPU
    gemm_flops_per_token: float
    lm_head_flops_per_seq: float
    attn_flops_per_pair_full: float  # prefill queries
    attn_flops_per_pair_window: float
    attn_flops_per_pair_full_decode: float
    attn_flops_per_pair_window_decode: float
    # rates
    memory_bw: float
    peak_flops: float
    peak_flops_experts: float
    peak_flops_16bit: float
    link_class: str
    link_bw: float  # per direction, bytes/s
    network_bw: float  # bytes/s between nodes
    net_boundaries: int  # pipeline boundaries that cross nodes
    # engine
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_capacity_tokens: int
    weights_bytes_per_gpu: float
    kv_dtype_bytes: float
    enforce_eager: bool
    #: steps of more tokens than this run without CUDA graphs (None: no such limit modelled)
    cuda_graph_max_tokens: int | None = None
    #: SGLang: share of a running request's remaining output its admission reserves
    new_token_ratio: float = 0.0
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


def kv_dtype_bytes(scenario: Scenario, family: str) -> float:
    """KV element size: fp8 when asked, or (TensorRT-LLM) when the weights are FP8/FP4."""
    if scenario.kv_cache_dtype.startswith("fp8"):
        return 1.0
    if family == "trtllm" and scenario.precision in ("fp8", "fp4"):
        return 1.0  # trtllm-bench quantises the KV cache with FP8/NVFP4 checkpoints
    return 2.0


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
    if family not in ENGINE_DEFAULTS:
        raise InvalidInputError(
            "engine", scenario.engine, "one of vllm, tensorrt-llm, nim-tensorrt-llm, sglang"
        )
    card = catalog.model(scenario.model)
    gpu = catalog.gpu(scenario.gpu)
    instance = catalog.instance(scenario.instance) if scenario.instance else None
    precision = scenario.precision.strip().lower()
    if precision not in BYTES_PER_PARAM:
        raise InvalidInputError("precision", scenario.precision, f"one of {list(BYTES_PER_PARAM)}")
    _validate_layout(scenario, card, instance)
    arch = card.architecture
    tp, pp = scenario.tp, scenario.pp
    notes: list[str] = []

    # ----- layout of the MoE layers ----------------------------------------------------------
    dp = scenario.data_parallel_size or 1
    expert_parallel = bool(scenario.enable_expert_parallel) and arch.is_moe
    if dp > 1 and not arch.is_moe:
        raise InvalidInputError(
            "data_parallel_size",
            dp,
            f"1 for the dense {card.hf_id} (attention data parallelism needs MoE layers to "
            "share; run replicas instead)",
        )
    moe_group = tp * dp  # GPUs of a stage the MoE layers are split over
    if expert_parallel and arch.num_experts % moe_group:
        raise InvalidInputError(
            "enable_expert_parallel",
            True,
            f"an expert-parallel size (TP x DP = {moe_group}) dividing the {arch.num_experts} "
            f"experts of {card.hf_id}",
        )

    # ----- weights ----------------------------------------------------------------------------
    weights = weight_bytes_per_param(arch, precision)
    expert_params = arch._expert_params() if arch.is_moe else 0
    n_moe = len(arch.moe_layers)
    routed_active = n_moe * arch.experts_per_token * expert_params
    lm_head = arch.vocab_size * arch.hidden_size
    dense_active = arch.active_params - routed_active  # attention, dense MLP, shared, lm_head
    dense_weight_bytes = dense_active * weights.dense / tp
    expert_bytes = expert_params * weights.experts / moe_group

    # ----- KV --------------------------------------------------------------------------------
    kv_bpe = kv_dtype_bytes(scenario, family)
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
    attention = attention_constants(arch, tp, full_layers, sliding_layers)
    kv_full = per_layer_gpu * full_layers
    kv_window = per_layer_gpu * sliding_layers
    topk = arch.sparse_attention_topk
    if topk:
        # DeepSeek Sparse Attention: the main attention reads the index_topk selected latents
        # (the simulator's window), the indexer reads its own FP8 keys of every earlier token
        # (index_head_dim bytes + a 4-byte scale a token a layer, DeepSeek-V3.2's indexer cache)
        window = topk
        kv_window = per_layer_gpu * full_layers
        kv_full = (arch.index_head_dim + 4.0) * full_layers

    # ----- FLOPs -----------------------------------------------------------------------------
    gemm = 2.0 * (dense_active - lm_head) / tp
    lm_head_flops = 2.0 * lm_head / tp
    expert_flops_per_row = 2.0 * expert_params / moe_group

    # ----- rates -----------------------------------------------------------------------------
    memory_bw = gpu.memory_bw_gbps * 1e9
    peak_experts = gpu.compute_tflops(precision) * 1e12
    peak16 = (gpu.bf16_dense_tflops or gpu.fp16_dense_tflops) * 1e12
    peak = peak16 if weights.dense == 2.0 else peak_experts
    if kv_bpe == 1.0 and gpu.fp8_dense_tflops:
        peak16 = gpu.fp8_dense_tflops * 1e12  # FP8 attention kernels with an FP8 KV cache
    link_class, link_bw = _gpu_link(gpu, instance)

    gpus_per_replica = tp * pp * dp
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
            "nodes", nodes, f"enough {per_node}-GPU nodes for TP x PP x DP = {gpus_per_replica}"
        )
    if moe_group > per_node:
        raise InvalidInputError(
            "data_parallel_size", dp, f"TP x DP within one {per_node}-GPU node (the MoE group)"
        )

    default_seqs, default_batched = engine_defaults(family, gpu, scenario.load)
    utilization = scenario.gpu_memory_utilization
    graphs: int | None = VLLM_CUDA_GRAPH_MAX_TOKENS if family == "vllm" else None
    new_token_ratio = 0.0
    if family == "sglang":
        sg = sglang_defaults(gpu, tp=tp * dp, pp=pp, dp=dp)
        default_seqs, default_batched = sg.max_running_requests, sg.chunked_prefill_size
        graphs = sg.cuda_graph_max_bs
        new_token_ratio = sg.new_token_ratio
        if "gpu_memory_utilization" not in scenario.model_fields_set:
            utilization = sg.mem_fraction_static
    max_num_seqs = scenario.max_num_seqs or default_seqs
    if family == "sglang" and scenario.max_num_seqs and dp > 1:
        max_num_seqs = max(1, scenario.max_num_seqs // dp)  # --max-running-requests is global
    max_batched = scenario.max_num_batched_tokens or default_batched
    if family == "sglang" and scenario.max_num_batched_tokens and dp > 1:
        max_batched = max(1, scenario.max_num_batched_tokens // dp)  # per DP rank
    if not scenario.enable_chunked_prefill:
        # without chunking a whole prompt must fit one step's budget
        max_batched = max(max_batched, _longest_prompt(scenario))
    block_size = ENGINE_DEFAULTS[family]["block_size"]
    plan = plan_capacity(
        card,
        gpu,
        tp=tp,
        pp=pp,
        precision=precision,
        kv_cache_dtype="fp8" if kv_bpe == 1.0 else "auto",
        gpu_memory_utilization=utilization,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_batched,
        enforce_eager=scenario.enforce_eager,
        max_model_len=scenario.max_model_len or _longest_request(scenario),
        block_size=block_size,
        trtllm=family == "trtllm",
        sglang=family == "sglang",
        moe_shards=moe_group,
    )
    if plan.problem is not None:
        notes.append(
            f"memory: {plan.problem}; predicted with room for one longest request "
            "(the engine may refuse this layout as configured)"
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
        replicas=scenario.replicas * dp,
        num_layers=arch.num_layers,
        hidden_size=arch.hidden_size,
        dense_weight_bytes=dense_weight_bytes,
        expert_bytes_per_expert_layer=expert_bytes,
        num_moe_layers=n_moe,
        num_experts=arch.num_experts,
        experts_per_token=arch.experts_per_token,
        data_parallel_size=dp,
        expert_parallel=expert_parallel,
        moe_group=moe_group,
        expert_flops_per_row=expert_flops_per_row,
        kv_bytes_per_token_full=kv_full,
        kv_bytes_per_token_window=kv_window,
        sliding_window=window,
        gemm_flops_per_token=gemm,
        lm_head_flops_per_seq=lm_head_flops,
        attn_flops_per_pair_full=attention.full_prefill,
        attn_flops_per_pair_window=attention.window_prefill,
        attn_flops_per_pair_full_decode=attention.full_decode,
        attn_flops_per_pair_window_decode=attention.window_decode,
        memory_bw=memory_bw,
        peak_flops=peak,
        peak_flops_experts=peak_experts,
        peak_flops_16bit=peak16,
        link_class=link_class if tp > 1 or (dp > 1 and n_moe) else "none",
        link_bw=link_bw,
        network_bw=network_gbps * 1e9 / 8,
        net_boundaries=net_boundaries,
        block_size=block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_batched,
        kv_capacity_tokens=plan.kv_capacity_tokens,
        weights_bytes_per_gpu=plan.weights_bytes,
        kv_dtype_bytes=kv_bpe,
        enforce_eager=scenario.enforce_eager,
        cuda_graph_max_tokens=graphs,
        new_token_ratio=new_token_ratio,
        notes=tuple(notes),
    )


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
