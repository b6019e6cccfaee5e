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
from planner.engine import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    FAMILIES,
    SGLANG_AITER_CONTEXT_LIMIT,
    TRTLLM_FREE_GPU_MEMORY_FRACTION,
    EngineConfig,
    SglangDefaults,
    fused_allreduce_tokens,
    qk_norm_allreduces,
    release_patch_number,
    sglang_defaults,
    sglang_memory_share,
    sglang_prefill_graph_tokens,
    sglang_request_pool,
    sglang_trtllm_moe,
    vllm_schedules_async,
)
from planner.errors import InvalidInputError
from planner.perf.capacity import CapacityPlan, plan_capacity
from planner.perf.scenario import Scenario
from planner.perf.speculative import (
    SGLANG_SPEC_MAX_RUNNING_REQUESTS,
    LearntAcceptance,
    SpeculativeStep,
    kv_capacity_with_draft,
    resolve_speculation,
)

#: per-direction PCIe x16 bandwidth by generation, bytes/s (PCI-SIG: 16/32/64/128 GT/s x16).
PCIE_BYTES_PER_S = {3: 15.75e9, 4: 31.5e9, 5: 63.0e9, 6: 121.0e9}
DEFAULT_FABRIC_GBPS = 400.0
ACTIVATION_BYTES = 2.0  # all-reduce and pipeline tensors travel in 16-bit
#: vLLM V1 captures CUDA graphs for steps of up to this many tokens (compilation config
#: max_capture_size); larger steps launch every kernel.
VLLM_CUDA_GRAPH_MAX_TOKENS = 512
#: how a deployment's note on its speculation begins (the recommendation reads the acceptance
#: source back from it: planner.recommend.costing)
SPECULATION_NOTE = "speculative decoding: "


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
    #: activation bytes one (token, routed expert) row moves through a GPU's fused-MoE kernels
    #: (:func:`expert_activation_bytes_per_row`)
    expert_activation_bytes_per_row: float
    #: the grouped GEMMs' time per routed FLOP over a long-K GEMM's (:func:`expert_tile_factor`)
    expert_tile_factor: float
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
    # engine: every setting resolved (planner.engine), max_model_len included
    engine: EngineConfig
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_capacity_tokens: int
    weights_bytes_per_gpu: float
    kv_dtype_bytes: float
    enforce_eager: bool
    #: steps of more tokens than this run without CUDA graphs (None: no such limit modelled)
    cuda_graph_max_tokens: int | None = None
    #: SGLang runs prefill steps of up to this many tokens under piecewise CUDA graphs
    #: (:func:`planner.engine.sglang_prefill_graph_tokens`; None: every prefill step eagerly)
    prefill_graph_tokens: int | None = None
    #: SGLang: share of a running request's remaining output its admission reserves
    new_token_ratio: float = 0.0
    notes: tuple[str, ...] = ()
    #: speculative decoding's draft and acceptance (None: none), :mod:`planner.perf.speculative`
    speculation: SpeculativeStep | None = None
    #: vLLM schedules step n + 1 while the GPU runs step n (:func:`planner.engine.
    #: vllm_schedules_async`): the per-step host terms run beside the GPU's
    async_scheduling: bool = False
    #: the engine fuses a step's tensor-parallel all-reduces with the RMSNorm after them up to
    #: this many tokens (:func:`planner.engine.fused_allreduce_tokens`; None: never)
    fused_allreduce_tokens: int | None = None
    #: all-reduces a step's query/key norms add over the layers (a norm across every head,
    #: MiniMax-M2's, split over TP ranks: :func:`planner.engine.qk_norm_allreduces`)
    qk_norm_allreduce_calls: int = 0

    @property
    def loaded_replicas(self) -> int:
        """The schedulers that get work: a closed loop of ``c`` requests keeps at most ``c`` of
        the ``replicas`` busy (one request in flight on an engine of 4 attention-DP ranks runs
        on one rank; the other three idle), so its throughput is that of ``min(replicas, c)``
        schedulers, not of all of them; rates, bursts and traces spread over every one."""
        sc = self.scenario
        if sc.load == "concurrency" and sc.concurrency:
            return max(1, min(self.replicas, math.floor(sc.concurrency)))
        return self.replicas

    @property
    def kv_capacity_blocks(self) -> int:
        return self.kv_capacity_tokens // self.block_size

    @property
    def kv_bytes_per_token(self) -> float:
        return self.kv_bytes_per_token_full + self.kv_bytes_per_token_window


def expert_activation_bytes_per_row(
    hidden: int, intermediate: int, moe_group: int, expert_parallel: bool
) -> float:
    """Activation bytes (16-bit) one (token, routed expert) row moves through a GPU's MoE kernels.

    The fused-MoE path of vLLM and SGLang (``fused_experts``: the up/gate GEMM gathers each
    row's hidden state through ``sorted_token_ids`` and writes ``intermediate_cache1`` of 2 x I,
    ``silu_and_mul`` reads it and writes I, the down GEMM reads I and writes
    ``intermediate_cache3`` of hidden, ``moe_sum`` reads that back to combine the top-k rows),
    and TensorRT-LLM's CUTLASS MoE (expand, grouped GEMMs, finalize) alike, move per row
    ``2 B x (3 x hidden + 6 x I)``. With the experts sliced over ``moe_group`` GPUs (tensor
    parallel MoE) every GPU moves every row's hidden-size parts and 1/moe_group of the
    intermediate ones; with expert parallelism a GPU moves whole rows, 1/moe_group of them on
    average. Unlike a dense layer's, these bytes do not shrink with TP: DeepSeek-V3 at TP 8
    does 2 x 3 x 7168 x 256 = 11 MFLOP a row against 46 KB, an arithmetic intensity (240
    FLOP/B) under H200's FP8 ridge (410), so its MoE layers are bound by activation traffic at
    prefill and at large decode batches.
    """
    if expert_parallel:
        return 2.0 * (3.0 * hidden + 6.0 * intermediate) / moe_group
    return 2.0 * (3.0 * hidden + 6.0 * intermediate / moe_group)


#: rate of block-scaled FP8 GEMMs (128 x 128 weight blocks, activations quantised per token
#: group of 128) over per-tensor / per-row scaled ones: the scales enter the main loop every
#: 128 of K and each GEMM first quantises its input. FBGEMM pull request #2546 (2024-04-29, H100
#: 500 W, quantisation included) measured 595 / 932, 762 / 1024 and 548 / 877 TFLOP/s (block /
#: row-wise) at 8192^3, 65536 x 8192 x 7168 and 65536 x 3584 x 8192: 0.64, 0.74, 0.62, geometric
#: mean 0.67 (block FP8 about 1.1x BF16 where per-row FP8 is 1.7x). The per-tensor FP8 rows the
#: model is fitted on (TensorRT-LLM's tables) set the rest of the FP8 efficiency. Hopper-class
#: tensor cores only (see :func:`hardware_block_scaling`): Blackwell applies the block scales in
#: the MMA instruction itself.
BLOCK_SCALED_FP8_RATE = 0.67
#: K-depth a grouped-GEMM tile's fixed work is worth (:func:`expert_tile_factor`)
TILE_OVERHEAD_K = 8192.0


def hardware_block_scaling(gpu: GPU) -> bool:
    """Whether the GPU's tensor cores apply per-block scale factors inside the MMA instruction.

    Blackwell's fifth-generation tensor cores take the A and B scale factors as operands of the
    block-scaled MMA (``tcgen05.mma.kind::mxf8f6f4.block_scale`` on SM100/SM103, ``mma.sync
    ... .block_scale`` on SM120: NVIDIA/cutlass ``media/docs/cpp/blackwell_functionality.md``,
    "Blackwell SM100 GEMMs", read 2026-12-02), so a block-scaled FP8 GEMM runs at the FP8 rate:
    DeepGEMM's SM100 kernels take the scales as packed UE8M0 operands where its SM90 kernels
    take FP32 scales and promote the accumulators with CUDA-core FMAs every 128 of K
    (deepseek-ai/DeepGEMM README @0274ad7b, "Notices": "SM90 requires scaling factors in FP32
    format. SM100 requires scaling factors in packed UE8M0 format"), the cost
    BLOCK_SCALED_FP8_RATE measures on H100. Hopper's WGMMA has no scale operand. Blackwell is
    the only NVIDIA generation with FP4 tensor cores (docs/domain.md), so an NVIDIA GPU with an
    FP4 rate is one. AMD's CDNA4 scaled MFMAs are not assumed here (no engine source read for
    the MI355X FP8 block path): it keeps the Hopper-class rate.
    """
    return gpu.vendor == "nvidia" and gpu.fp4_dense_tflops is not None


def expert_tile_factor(
    hidden: int, intermediate: int, moe_group: int, expert_parallel: bool
) -> float:
    """Time per routed-expert FLOP of the fused-MoE grouped GEMMs over a long-K GEMM's.

    A tile of a GEMM costs its K-loop plus fixed work (pipeline fill and drain, the epilogue
    that writes the tile, per-expert scales and the gathered-row addresses); over a GEMM of
    depth K the overhead is K0 / K. An expert's up/gate GEMM does 2/3 of its FLOPs at K =
    hidden, the down GEMM 1/3 at K = the GPU's share of the intermediate width, so the factor
    is ``1 + K0 x (2 / (3 hidden) + 1 / (3 I_gpu))``: narrow experts, and experts sliced by TP
    (DeepSeek-V3 at TP 8: I_gpu = 256), run far below the dense GEMM rate.

    K0 (TILE_OVERHEAD_K = 8192) and the ``expert_gemm`` prior (0.5) solve the two published
    measurements of the Triton fused-MoE kernel (the kernel vLLM and SGLang use) in
    ByteDance-Seed/VeOmni pull request #460 (2026-02-06, H100, BF16, 32,768 tokens, 128
    experts, top-8): 215 TFLOP/s (22% of the 989 TFLOP/s peak) at hidden 2048 / intermediate
    768 (Qwen3-30B-A3B's shape) and 283 TFLOP/s (29%) at 4096 / 1024, with efficiency =
    1 / (1 + c x factor) when compute-bound. Not fitted to the measured serving results; the
    coefficient itself is fitted per engine, GPU and release like every other.

    Where SGLang hands the experts to FlashInfer's TensorRT-LLM kernels instead (data-center
    Blackwell, by model and precision: :func:`planner.engine.sglang_trtllm_moe`) the deployment
    takes 1, no Triton tile overhead. Held out by source (session 66, 1,362 rows) the SGLang
    documentation's DeepSeek-R1 runs on 8 x B200 (0.5.6.post1, FP8) went TPOT 33.3 -> 26.7%,
    TTFT 18.9 -> 13.9%, output tok/s 23.4 -> 21.1% median; all rows output tok/s 19.3 -> 19.2%,
    TTFT 23.7 -> 24.1%, TPOT 20.1 -> 19.6% (the cookbook's SGLang rows' TTFT 21.6 -> 25.9%: their
    prefills share the family's terms, which the DeepSeek rows' cheaper expert GEMMs pushed up
    about 4%).
    """
    inter = intermediate if expert_parallel else intermediate / moe_group
    return 1.0 + TILE_OVERHEAD_K * (2.0 / (3.0 * hidden) + 1.0 / (3.0 * max(inter, 1.0)))


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
    """KV element size: fp8 when asked, or (TensorRT-LLM, KV dtype left ``auto``) when the
    weights are FP8/FP4; a stated bf16/fp16 cache is kept.

    TensorRT-LLM's ``auto`` follows the checkpoint's ``kv_cache_quant_algo``: NVIDIA's ModelOpt
    FP8/NVFP4 checkpoints state FP8, which its published tables ran. A model publisher's own
    block-scaled FP8 checkpoint (``arch.block_scaled_fp8``: deepseek-ai/DeepSeek-V3/R1,
    Qwen3-*-FP8) states none, so by the source its cache stays 16-bit
    (``ModelConfig.load_hf_quant_config``: FP8_BLOCK_SCALES and no KV algorithm,
    tensorrt_llm/_torch/model_config.py read at NVIDIA/TensorRT-LLM@008e0af, 2026, a later
    tree than 1.1.0). Planning those with a 16-bit cache made the leave-one-source-out TPOT
    worse (TensorRT-LLM median 16% -> 20%, GPUStack's trtllm-serve rows 35% -> 44%; session
    34), so FP8 is kept for them until an engine log settles it.
    """
    if engine.kv_cache_dtype in ("bf16", "fp16"):
        return 2.0
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


def _validate_context(scenario: Scenario, card: ModelCard) -> None:
    """A request longer than the model's context (``max_position_embeddings`` of its
    config.json) is one no engine serves: vLLM refuses a ``--max-model-len`` above it. Lengths
    given as distributions are checked at their means (their longest draw is what the engine
    is sized for)."""
    if scenario.trace:
        longest = max(r.input_len + r.output_len for r in scenario.trace)
    else:
        longest = round(scenario.mean_input_len + scenario.mean_output_len)
    field = "input_len" if scenario.input_len is not None else "scenario"
    context = card.architecture.max_position_embeddings
    if context and longest > context:
        raise InvalidInputError(
            field,
            scenario.input_len if field == "input_len" else longest,
            f"a prompt and answer of at most {context:,} tokens together, the context of "
            f"{card.hf_id} (this request is {longest:,})",
        )


def resolve_deployment(
    scenario: Scenario,
    catalog: Catalog,
    *,
    cross_node_moe: bool = False,
    learnt_acceptance: LearntAcceptance | None = None,
) -> Deployment:
    """Everything a step-time evaluation and the simulator need, or a typed error.

    ``cross_node_moe``: the MoE group (TP x attention-DP) may span nodes, as wide expert
    parallelism does; the caller prices the all-to-all on the network
    (:mod:`planner.perf.disaggregated`), the step time here only the NVLink terms.
    ``learnt_acceptance``: speculative decoding's acceptance measured for a model, method and
    engine (:func:`planner.perf.speculative.learn_acceptance`), used where the scenario
    states none."""
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
    _validate_context(scenario, card)
    arch = card.architecture
    tp, pp = scenario.tp, scenario.pp
    notes: list[str] = []

    # ----- layout of the MoE layers ----------------------------------------------------------
    dp = engine.data_parallel_size
    expert_parallel = engine.enable_expert_parallel and arch.is_moe
    if dp > 1 and not arch.is_moe:
        raise InvalidInputError(
            "data_parallel_size",
            dp,
            f"1 for the dense {card.hf_id} (attention data parallelism needs MoE layers to "
            "share; run replicas instead)",
        )
    moe_group = tp * dp  # GPUs of a stage the MoE layers are split over
    if expert_parallel and moe_group > arch.num_experts:
        raise InvalidInputError(
            "enable_expert_parallel",
            True,
            f"an expert-parallel size (TP x DP = {moe_group}) of at most the "
            f"{arch.num_experts} experts of {card.hf_id}",
        )
    if expert_parallel and arch.num_experts % moe_group:
        # an EP size that does not divide the experts runs with redundant expert replicas
        # filling every rank to ceil(E / R) slots (SGLang's --ep-num-redundant-experts 32 makes
        # 288 = 72 x 4 slots for DeepSeek's 256 experts on EP72: lmsys.org blog 2025-05-05
        # "Deploying DeepSeek with PD disaggregation and large-scale expert parallelism on 96
        # H100 GPUs"); the replicas' weights are not counted
        slots = -(-arch.num_experts // moe_group)
        notes.append(
            f"EP{moe_group} over {arch.num_experts} experts: {slots} expert slots a rank, "
            f"{slots * moe_group - arch.num_experts} of them redundant replicas (EPLB); their "
            "weights are not counted"
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
    expert_activation = (
        expert_activation_bytes_per_row(
            arch.hidden_size, arch.moe_intermediate_size, moe_group, expert_parallel
        )
        if arch.is_moe
        else 0.0
    )

    # ----- rates -----------------------------------------------------------------------------
    memory_bw = gpu.memory_bw_gbps * 1e9
    peak_experts = gpu.compute_tflops(precision) * 1e12
    peak16 = (gpu.bf16_dense_tflops or gpu.fp16_dense_tflops) * 1e12
    if (
        precision == "fp8"
        and arch.block_scaled_fp8
        and gpu.fp8_dense_tflops
        and not hardware_block_scaling(gpu)
    ):
        # native FP8 GEMMs with per-block scales promoted on CUDA cores (Hopper-class MMAs)
        peak_experts *= BLOCK_SCALED_FP8_RATE
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
    if moe_group > per_node and not cross_node_moe:
        raise InvalidInputError(
            "data_parallel_size", dp, f"TP x DP within one {per_node}-GPU node (the MoE group)"
        )

    assert engine.max_num_seqs and engine.max_num_batched_tokens and engine.block_size
    speculation = resolve_speculation(
        method=engine.spec_method,
        num_spec_tokens=engine.num_spec_tokens,
        accept_len=scenario.spec_accept_len,
        card=card,
        family=family,
        tp=tp,
        pp=pp,
        moe_group=moe_group,
        dense_bpp=weights.dense,
        expert_bpp=weights.experts,
        kv_bpe=kv_bpe,
        learnt=learnt_acceptance,
    )
    if speculation is not None:
        notes.append(
            f"{SPECULATION_NOTE}{speculation.label} (acceptance "
            f"{speculation.acceptance_rate:.2f} a position: {speculation.acceptance_source})"
        )
    graphs: int | None = VLLM_CUDA_GRAPH_MAX_TOKENS if family == "vllm" else None
    new_token_ratio = 0.0
    if family == "sglang":
        sg = engine_sglang_defaults(engine, gpu, arch, tp=tp, pp=pp)
        graphs, new_token_ratio = sg.cuda_graph_max_bs, sg.new_token_ratio
        updates: dict[str, object] = {}
        if scenario.gpu_memory_utilization is None:
            updates["gpu_memory_utilization"] = sg.mem_fraction_static
        if speculation is not None and not scenario.max_num_seqs:
            # SGLang caps a speculating server's running requests (server_args.py)
            updates["max_num_seqs"] = max(1, SGLANG_SPEC_MAX_RUNNING_REQUESTS // dp)
            notes.append(
                f"SGLang runs at most {SGLANG_SPEC_MAX_RUNNING_REQUESTS} requests when "
                "speculating unless --max-running-requests is given"
            )
        if dp > 1:  # --max-running-requests and --chunked-prefill-size are for all ranks
            if scenario.max_num_seqs:
                updates["max_num_seqs"] = max(1, scenario.max_num_seqs // dp)
            if scenario.max_num_batched_tokens:
                updates["max_num_batched_tokens"] = max(1, scenario.max_num_batched_tokens // dp)
        engine = engine.model_copy(update=updates) if updates else engine
    block_size, max_num_seqs = engine.block_size, engine.max_num_seqs
    max_batched = engine.max_num_batched_tokens
    assert block_size and max_num_seqs and max_batched
    default_fraction = scenario.gpu_memory_utilization is None
    plan = startup_capacity(
        card, gpu, tp=tp, pp=pp, precision=precision, engine=engine,
        raise_default=default_fraction, context_len=scenario.max_model_len,
    )  # fmt: skip
    if plan.sglang_share < 1.0:
        context = scenario.max_model_len or arch.max_position_embeddings
        served = f"{context:,}" if context else "the model's (unstated)"
        notes.append(
            f"memory: SGLang on ROCm (its aiter attention backend) keeps {plan.sglang_share:g} "
            f"of --mem-fraction-static for the weights and the KV cache when the context is "
            f"over {SGLANG_AITER_CONTEXT_LIMIT:,} tokens (here {served}; server_args.py)"
        )
    if plan.raised_fraction is not None:
        setting, flag = MEMORY_SETTINGS[family]
        notes.append(
            f"memory: {'SGLang' if family == 'sglang' else 'vLLM'}'s default {setting} "
            f"{engine.gpu_memory_utilization:.3f} leaves no KV cache for one request beside "
            f"these weights (the server refuses to start); predicted at {flag} "
            f"{plan.raised_fraction:.3f}, what it needs to start"
        )
        engine = engine.model_copy(update={"gpu_memory_utilization": plan.raised_fraction})
    if plan.problem is not None:
        notes.append(
            f"memory: {plan.problem}; predicted with room for one longest request "
            "(the engine may refuse this layout as configured)"
        )
    if family == "sglang" and speculation is None:
        pool = sglang_request_pool(
            plan.kv_capacity_tokens,
            scenario.max_model_len or arch.max_position_embeddings,
            stated=max_num_seqs if scenario.max_num_seqs else None,
            release=release_patch_number(engine.version),
        )
        if pool != max_num_seqs:
            max_num_seqs = pool
            engine = engine.model_copy(update={"max_num_seqs": pool})
    prefill_graphs = prefill_graph_tokens(engine, gpu, arch, pp=pp)
    if prefill_graphs is not None:
        notes.append(
            f"prefill: SGLang runs prefill steps of up to {prefill_graphs:,} tokens under "
            "piecewise CUDA graphs (by default from 0.5.10 on NVIDIA GPUs)"
        )
    fused_tokens = fused_allreduce_tokens(
        engine,
        gpu,
        tp=tp,
        pp=pp,
        dp=dp,
        hidden_size=arch.hidden_size,
        model_type=arch.model_type,
        single_node=nodes_per_replica == 1,
    )
    if fused_tokens is not None and link_class != "nvlink":
        fused_tokens = None  # FlashInfer's fused all-reduce needs NVLink peers
    if fused_tokens is not None:
        notes.append(
            f"all-reduce: {'vLLM' if family == 'vllm' else 'SGLang'} fuses each tensor-parallel "
            f"all-reduce with the RMSNorm after it (FlashInfer) in steps of up to "
            f"{fused_tokens:,} tokens, by default for this release, GPU and model"
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
        expert_activation_bytes_per_row=expert_activation,
        expert_tile_factor=(
            expert_tile_factor(
                arch.hidden_size, arch.moe_intermediate_size, moe_group, expert_parallel
            )
            if arch.is_moe
            and not sglang_trtllm_moe(engine, gpu, model_type=arch.model_type, precision=precision)
            else 1.0
        ),
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
        engine=engine,
        block_size=block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_batched,
        kv_capacity_tokens=kv_capacity_with_draft(
            plan.kv_capacity_tokens, kv_full + kv_window, speculation
        ),
        weights_bytes_per_gpu=plan.weights_bytes,
        kv_dtype_bytes=kv_bpe,
        enforce_eager=engine.enforce_eager,
        cuda_graph_max_tokens=graphs,
        prefill_graph_tokens=prefill_graphs,
        new_token_ratio=new_token_ratio,
        notes=tuple(notes),
        speculation=speculation,
        async_scheduling=vllm_schedules_async(engine, pp=pp),
        fused_allreduce_tokens=fused_tokens,
        qk_norm_allreduce_calls=(
            arch.num_layers * qk_norm_allreduces(engine, tp=tp) if arch.qk_norm_across_heads else 0
        ),
    )


#: each engine family's memory share: (its name in the engine, the launch flag that sets it)
MEMORY_SETTINGS: dict[str, tuple[str, str]] = {
    "vllm": ("gpu_memory_utilization", "--gpu-memory-utilization"),
    "sglang": ("mem_fraction_static", "--mem-fraction-static"),
    "trtllm": ("kv_cache_free_gpu_memory_fraction", "--kv_cache_free_gpu_memory_fraction"),
}


def engine_sglang_defaults(
    engine: EngineConfig, gpu: GPU, arch: ModelArchitecture, *, tp: int, pp: int
) -> SglangDefaults:
    """What an SGLang ``engine`` (its attention-DP ranks, speculation and release) picks at TP x
    PP on ``gpu`` for a model of architecture ``arch`` (:func:`planner.engine.sglang_defaults`,
    whose ``--tp-size`` is every GPU of a stage: TP x the attention-DP ranks; the piecewise
    CUDA graphs of its prefill steps, :func:`planner.engine.sglang_prefill_graph_tokens`, take
    memory from 0.5.10)."""
    dp = engine.data_parallel_size
    return sglang_defaults(
        gpu,
        dp,
        tp=tp * dp,
        pp=pp,
        spec_method=engine.spec_method,
        release=release_patch_number(engine.version),
        prefill_graph_tokens=prefill_graph_tokens(engine, gpu, arch, pp=pp),
        mla=arch.is_mla,
    )


def prefill_graph_tokens(
    engine: EngineConfig, gpu: GPU, arch: ModelArchitecture, *, pp: int
) -> int | None:
    """Up to how many tokens an SGLang ``engine`` (its attention-DP ranks and speculation)
    serving ``arch`` at ``pp`` stages runs a prefill step under piecewise CUDA graphs
    (:func:`planner.engine.sglang_prefill_graph_tokens`; None: every one eagerly): what the
    step model times and what SGLang's memory default reserves for."""
    return sglang_prefill_graph_tokens(
        engine,
        gpu,
        model_type=arch.model_type,
        mla=arch.is_mla,
        pp=pp,
        dp=engine.data_parallel_size,
        speculative=engine.spec_method != "none",
    )


def default_memory_fraction(
    engine: EngineConfig, gpu: GPU, arch: ModelArchitecture, *, tp: int, pp: int
) -> float:
    """The memory share ``engine`` starts with on ``gpu`` at TP x PP for a model of
    architecture ``arch`` when none is stated: vLLM's ``gpu_memory_utilization`` (0.9),
    SGLang's ``mem_fraction_static`` for the layout and model (:func:`engine_sglang_defaults`,
    its ``--tp-size`` every GPU of a stage) or TensorRT-LLM's ``free_gpu_memory_fraction``
    (0.9 of the memory left after the weights)."""
    if engine.family == "sglang":
        return engine_sglang_defaults(engine, gpu, arch, tp=tp, pp=pp).mem_fraction_static
    if engine.family == "trtllm":
        return TRTLLM_FREE_GPU_MEMORY_FRACTION
    return DEFAULT_GPU_MEMORY_UTILIZATION


def startup_capacity(
    card: ModelCard,
    gpu: GPU,
    *,
    tp: int,
    pp: int,
    precision: str,
    engine: EngineConfig,
    raise_default: bool,
    context_len: int | None = None,
) -> CapacityPlan:
    """The KV capacity one replica starts with (:func:`planner.perf.capacity.plan_capacity`),
    as a deployment asks it: the KV dtype the engine runs (:func:`kv_dtype_bytes`) and, with
    ``raise_default`` (no share stated), vLLM's or SGLang's default share raised to what starts
    the server where the default would not (``CapacityPlan.raised_fraction``). ``engine`` is
    resolved, with SGLang's share its default (:func:`default_memory_fraction`) when none is
    stated; ``context_len`` is the context the server is started with (SGLang's
    ``--context-length``, else the model's own; None: the model's), which decides the share of
    it SGLang keeps on ROCm (:func:`planner.engine.sglang_memory_share`). The recommendation's
    search judges a layout with the same call."""
    family = engine.family
    kv_bpe = kv_dtype_bytes(engine, precision)
    graphs = None
    if raise_default and family == "sglang":
        graphs = engine_sglang_defaults(
            engine, gpu, card.architecture, tp=tp, pp=pp
        ).cuda_graph_max_bs
    return plan_capacity(
        card,
        gpu,
        tp=tp,
        pp=pp,
        precision=precision,
        engine=engine.model_copy(update={"kv_cache_dtype": "fp8" if kv_bpe == 1.0 else "auto"}),
        sglang_graph_batch=graphs,
        raise_vllm_default=raise_default and family == "vllm",
        sglang_share=sglang_memory_share(
            engine, gpu, context_len or card.architecture.max_position_embeddings
        ),
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
