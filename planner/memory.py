"""GPU memory of a serving layout, accounted the way vLLM (V1 engine, 0.10/0.11) accounts it.

vLLM's budget (``vllm/v1/worker/gpu_worker.py``, ``Worker.init_device`` and
``determine_available_memory``; ``memory_profiling`` in ``vllm/utils``, mem_utils.py in recent
releases)::

    requested      = cuda_total x gpu_memory_utilization
    non_kv_cache   = weights + peak_activation + non_torch_increase
    available_kv   = requested - non_kv_cache
    num_blocks     = available_kv // page_size // num_layers      (v1/core/kv_cache_utils.py)
    replica blocks = min over workers (every PP stage and TP rank)

``cuda_total`` is what ``cudaMemGetInfo`` reports: the driver keeps ~480 MiB of what nvidia-smi
lists (H100 80GB HBM3: 81,559 MiB listed, "total capacity of 79.18 GiB" in PyTorch; 48-GB Ada/
Ampere cards: 46,068 MiB listed, 44.52 GiB seen by CUDA, so 0.9 requests 40.07 GiB). The KV pool
is only what is left of ``requested``; CUDA graphs are captured *after* the KV cache is allocated
and, like the CUDA context taken before vLLM's baseline snapshot, live in the headroom
``cuda_total - requested`` ("memory_profiling does not consider CUDAGraph memory size",
gpu_worker.compile_or_warm_up_model). vLLM refuses to start when the memory free at start-up is
below ``requested``.

Defaults, from vLLM 0.11.0 DEBUG logs on H100 (llm-d/llm-d-benchmark,
config_explorer/empirical-vllm-memory-results.md: Llama-3.1-8B, Llama-3.3-70B-FP8 TP=2,
Qwen3-0.6B, Qwen3-32B, gpt-oss-20b at max_num_seqs 1024, max_num_batched_tokens 8192):

- peak activation (``profile_run``: a dummy forward at max_num_batched_tokens then a dummy
  sampler run over min(max_num_seqs, max_num_batched_tokens) requests with full-vocabulary fp32
  logits, on every TP rank of the last PP stage) =
  requests x vocab x 38.26 B + max_num_batched_tokens x hidden x 2.56 B. Least squares over the
  five logs; each is reproduced within 0.3 %. Stages without the sampler hold the forward pass:
  tokens x 2 B x (2 x hidden + 3 x FFN width per rank).
- non-torch memory inside the budget (NCCL and custom all-reduce buffers, attention workspaces):
  0.13 GiB on one GPU, 0.55 GiB with TP or PP > 1.
- framework overhead outside the budget (CUDA context, cuBLAS/NCCL state before the baseline
  snapshot): 0.61 GiB on one GPU, 1.54 GiB with TP or PP > 1 (79.18 GiB total, 78.57 and
  77.64 GiB free at start-up).
- CUDA graphs, outside the budget: measured -0.88 to +1.03 GiB; we reserve 1.0 GiB
  (0 with ``enforce_eager``).

Weights follow vLLM's sharding: column/row-parallel linears split over TP (KV heads replicated
when TP exceeds them); MLA's low-rank ``q_a``/``kv_a`` projections are replicated; vocab-parallel
embedding and lm_head padded to a multiple of 64 and split over TP; the embedding on the first PP
stage, lm_head and final norm on the last (a tied lm_head is a second copy there when PP > 1);
MoE experts all resident, split over TP; layers split over PP as ``get_pp_indices``
(vllm/distributed/utils.py) splits them. Quantized precisions apply to linear layers only:
embeddings, lm_head, norms and routers stay 16-bit, as vLLM's quantized checkpoints keep them.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from planner.catalog.architecture import ModelArchitecture
from planner.catalog.schema import BYTES_PER_PARAM, GPU, PRECISIONS, ModelCard
from planner.engine import BLOCK_SIZES, KV_CACHE_DTYPES, EngineConfig
from planner.errors import InvalidInputError
from planner.memo import memoised
from planner.workload import LengthDistribution, Workload

GIB = 2**30
MIB = 2**20

#: vLLM's default KV block (page) size in tokens.
BLOCK_SIZE = BLOCK_SIZES["vllm"]
#: vLLM pads vocab-parallel embeddings to a multiple of this (DEFAULT_VOCAB_PADDING_SIZE).
VOCAB_PADDING = 64
#: nvidia-smi total minus what cudaMemGetInfo reports (H100 SXM and 48-GB Ada: ~479 MiB).
DRIVER_RESERVED_BYTES = 480 * MIB
#: Peak activation of vLLM's profile run, bytes per (request x vocab entry) of the sampler.
ACTIVATION_BYTES_PER_LOGIT = 38.26
#: ... plus bytes per (batched token x hidden unit) of the hidden states kept alive.
ACTIVATION_BYTES_PER_HIDDEN = 2.56
#: Non-torch memory counted inside vLLM's budget: (one GPU, TP or PP > 1).
NON_TORCH_BYTES = (0.13 * GIB, 0.55 * GIB)
#: Memory in use before vLLM's baseline snapshot, outside the budget: (one GPU, TP or PP > 1).
FRAMEWORK_OVERHEAD_BYTES = (0.61 * GIB, 1.54 * GIB)
#: CUDA graph pool, captured after the KV cache, outside the budget.
CUDA_GRAPH_BYTES = 1.0 * GIB
#: Scale/zero-point bytes per weight: AWQ/GPTQ int4 with group 128 (fp16 scale + 4-bit zero),
#: NVFP4 (one fp8 scale per 16 weights). fp8 and int8 per-channel scales are negligible.
QUANT_SCALE_BYTES_PER_PARAM = {"int4": 2.5 / 128, "fp4": 1.0 / 16}
#: A 4-bit zero point packed per group (AWQ ``qzeros``, GPTQ's asymmetric groups); a checkpoint
#: stating its group size (:attr:`ModelArchitecture.quant_group_size`) pays 2 B of scale plus
#: this per group: AWQ g128 2.5 / 128 as above; Kimi-K2.5's symmetric groups of 32 (compressed-
#: tensors ``pack-quantized``, bf16 ``weight_scale``) 2 / 32 = 0.0625 B a weight, which vLLM
#: 0.18 logged as 72.02 GiB a GPU on 8 x H200 (RedHatAI dashboard, ashishkamra/vllm-memory-
#: estimator test_data/validation_db.json @8b0e21d).
INT4_ZERO_POINT_BYTES = 0.5
#: MXFP4 (OCP microscaling, gpt-oss's checkpoint format): one e8m0 scale per 32 weights.
MXFP4_SCALE_BYTES_PER_PARAM = 1.0 / 32
#: Block-scaled FP8 (``quantization_config.weight_block_size`` [128, 128]: DeepSeek-V3/R1,
#: Qwen3-*-FP8, GLM-4.x-FP8): one float32 ``weight_scale_inv`` per 128 x 128 block of every
#: quantised linear, kept as a float32 tensor of ceil(out / 128) x ceil(in / 128) by vLLM's
#: Fp8LinearMethod / Fp8MoEMethod (vllm/model_executor/layers/quantization/fp8.py, 0.10) and
#: SGLang's (python/sglang/srt/layers/quantization/fp8.py, 0.5): 4 B / 16,384 weights
#: (DeepSeek-R1 on TP 4: 39 MiB a GPU beside 157.5 GiB of weights).
FP8_BLOCK_SCALE_BYTES_PER_PARAM = 4.0 / (128 * 128)
#: Bytes of the non-quantized parts of a model (embeddings, norms, routers, biases).
HALF_BYTES = 2.0
#: DeepSeek Sparse Attention's indexer key cache (DeepSeek-V3.2): every layer caches one
#: index_head_dim key per token in fp8 plus one float32 scale per 128 values, whatever the
#: main cache's dtype: ``DeepseekV32IndexerCache(head_dim=d + d // 128 * 4, dtype=uint8)`` in
#: vllm/model_executor/models/deepseek_v2.py (0.11-0.19), SGLang's NSATokenToKVPool
#: (sgl-project/sglang PR #11309, 2025-10-07). d = 128: 132 B a token a layer; vLLM 0.18 on
#: 8 x H200 logged 41.76 GiB for 572,480 tokens = 78,325 B a token = 61 x (576 x 2 + 132).
INDEXER_SCALE_BLOCK = 128
INDEXER_SCALE_BYTES = 4.0
#: Fallback max_model_len when a config does not state max_position_embeddings.
DEFAULT_MAX_MODEL_LEN = 8192


def kv_bytes_per_element(kv_cache_dtype: str) -> float:
    """Bytes of one cached K/V element: ``auto`` keeps the model's 16-bit dtype, fp8 halves it."""
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise InvalidInputError("kv_cache_dtype", kv_cache_dtype, f"one of {KV_CACHE_DTYPES}")
    return 1.0 if kv_cache_dtype.startswith("fp8") else 2.0


def pp_layer_split(num_layers: int, pp: int) -> list[tuple[int, int]]:
    """(start, end) layers of each PP stage, as vLLM's ``get_pp_indices`` splits them.

    Even split; the remainder goes one layer each to the stages before the last, starting from
    the second-to-last (vllm/distributed/utils.py). 61 layers over 4: [15, 15, 16, 15].
    """
    if pp < 1 or pp > num_layers:
        raise InvalidInputError("pp", pp, f"an integer from 1 to {num_layers} (the layers)")
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    bounds, start = [], 0
    for size in sizes:
        bounds.append((start, start + size))
        start += size
    return bounds


def _arch(model: ModelCard | ModelArchitecture) -> ModelArchitecture:
    if type(model) is ModelArchitecture:  # the common case, without pydantic's isinstance hook
        return model
    return model.architecture if isinstance(model, ModelCard) else model


def check_parallelism(model: ModelCard | ModelArchitecture, tp: int, pp: int = 1) -> None:
    """Raise :class:`InvalidInputError` if vLLM cannot shard the model ``tp`` x ``pp`` ways."""
    arch = _arch(model)

    def problem() -> InvalidInputError | None:
        try:
            _check_parallelism(arch, tp, pp)
        except InvalidInputError as exc:
            return exc
        return None

    # asked for every candidate of a search
    found = memoised(arch, ("parallelism", tp, pp), problem)
    if found is not None:
        raise InvalidInputError(found.field, found.value, found.allowed)


def _check_parallelism(arch: ModelArchitecture, tp: int, pp: int) -> None:
    if not isinstance(tp, int) or tp < 1:
        raise InvalidInputError("tp", tp, "an integer >= 1")
    if not isinstance(pp, int) or pp < 1:
        raise InvalidInputError("pp", pp, "an integer >= 1")
    heads = arch.num_attention_heads
    if heads % tp:
        divisors = [d for d in range(1, heads + 1) if heads % d == 0]
        raise InvalidInputError(
            "tp", tp, f"a divisor of the {heads} attention heads: {', '.join(map(str, divisors))}"
        )
    kv = arch.num_kv_heads
    if not arch.is_mla and kv % tp and tp % kv:
        raise InvalidInputError(
            "tp", tp, f"a divisor or a multiple of the {kv} KV heads (vLLM replicates KV heads)"
        )
    for name, count in (
        ("linear-attention key heads", arch.linear_num_key_heads),
        ("linear-attention value heads", arch.linear_num_value_heads),
    ):
        if arch.num_linear_layers and count % tp:
            raise InvalidInputError("tp", tp, f"a divisor of the {count} {name}")
    if pp > arch.num_layers:
        raise InvalidInputError("pp", pp, f"at most the {arch.num_layers} layers")


def _check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise InvalidInputError("precision", precision, f"one of {', '.join(PRECISIONS)}")


# ----- weights ---------------------------------------------------------------------------------


def _linear_bytes(precision: str, arch: ModelArchitecture | None = None) -> float:
    if precision == "int4" and arch is not None and arch.quant_group_size:
        # one 16-bit scale (and a 4-bit zero point unless symmetric) per group
        zero = INT4_ZERO_POINT_BYTES if arch.quant_zero_point else 0.0
        return BYTES_PER_PARAM[precision] + (HALF_BYTES + zero) / arch.quant_group_size
    if precision == "fp4" and arch is not None and arch.quant_method == "mxfp4":
        return BYTES_PER_PARAM[precision] + MXFP4_SCALE_BYTES_PER_PARAM
    if precision == "fp8" and arch is not None and arch.block_scaled_fp8:
        return BYTES_PER_PARAM[precision] + FP8_BLOCK_SCALE_BYTES_PER_PARAM
    return BYTES_PER_PARAM[precision] + QUANT_SCALE_BYTES_PER_PARAM.get(precision, 0.0)


def _kv_heads_per_rank(arch: ModelArchitecture, tp: int) -> int:
    return max(1, arch.num_kv_heads // tp)


def _mixer_params_per_rank(arch: ModelArchitecture, layer: int, tp: int) -> tuple[float, float]:
    """(linear params, 16-bit params) of one layer's attention or linear-attention block."""
    h = arch.hidden_size
    if arch.layer_kinds[layer] == "linear":
        key_dim = arch.linear_num_key_heads * arch.linear_key_head_dim
        value_dim = arch.linear_num_value_heads * arch.linear_value_head_dim
        nv = arch.linear_num_value_heads
        linear = (h * (2 * key_dim + 2 * value_dim) + h * 2 * nv + value_dim * h) / tp
        conv = (2 * key_dim + value_dim) * arch.linear_conv_kernel_dim / tp
        return linear, conv + 2 * nv / tp + arch.linear_value_head_dim
    if arch.is_mla:
        assert arch.kv_lora_rank is not None
        rope = arch.qk_rope_head_dim or 0
        nope = arch.qk_nope_head_dim or 0
        v = arch.v_head_dim or arch.head_dim
        heads = arch.num_attention_heads / tp
        linear = h * (arch.kv_lora_rank + rope)  # kv_a_proj_with_mqa: replicated
        half = float(arch.kv_lora_rank)  # kv_a_layernorm
        if arch.q_lora_rank:
            linear += h * arch.q_lora_rank + arch.q_lora_rank * heads * (nope + rope)
            half += arch.q_lora_rank
        else:
            linear += h * heads * (nope + rope)
        linear += arch.kv_lora_rank * heads * (nope + v) + heads * v * h
        half += _mla_absorbed_params(arch, tp)
        if arch.index_n_heads:
            # DSA's lightning indexer (V3.2), replicated on every rank: wq_b and wk quantised
            # like the checkpoint, weights_proj unquantised, k_norm a LayerNorm (weight and
            # bias); vllm/model_executor/models/deepseek_v2.py, Indexer, 0.11-0.19
            index_dim = arch.index_n_heads * arch.index_head_dim
            linear += (arch.q_lora_rank or h) * index_dim + h * arch.index_head_dim
            half += h * arch.index_n_heads + 2 * arch.index_head_dim
        return linear, half
    hd = arch.head_dim
    q_out = arch.num_attention_heads // tp * hd
    kv_out = _kv_heads_per_rank(arch, tp) * hd
    linear = h * (q_out * (2 if arch.attention_output_gate else 1) + 2 * kv_out) + q_out * h
    half = 0.0
    if arch.attention_bias:
        half += q_out + 2 * kv_out + h
    # counted whole on every rank (MiniMax-M2's per-layer norm is TP-sharded: < 1 MB over)
    half += arch.qk_norm_params
    if arch.model_type == "gpt_oss":
        half += arch.num_attention_heads / tp
    return linear, half


def _mla_absorbed_params(arch: ModelArchitecture, tp: int) -> float:
    """16-bit weights one MLA layer adds on one rank after loading, for absorbed decode:
    copies of kv_b_proj's two halves (W_UK_T, W_UV) beside kv_b_proj itself, which prefill
    still uses ("we just store fp16/bf16 copies", MLACommonImpl.process_weights_after_loading,
    vllm/v1/attention/backends/mla/common.py, 0.8-0.19): kv_lora_rank x heads / TP x
    (qk_nope + v): 512 x 16 x 256 x 2 B x 61 layers = 0.24 GiB a GPU at TP 8."""
    if not arch.is_mla:
        return 0.0
    assert arch.kv_lora_rank is not None
    nope, v = arch.qk_nope_head_dim or 0, arch.v_head_dim or arch.head_dim
    return arch.kv_lora_rank * arch.num_attention_heads / tp * (nope + v)


def _mlp_params_per_rank(
    arch: ModelArchitecture,
    layer: int,
    tp: int,
    moe_shards: int | None = None,
    experts_only: bool = False,
) -> tuple[float, float]:
    """(linear params, 16-bit params) of one layer's MLP on one GPU; the routed experts are
    split over ``moe_shards`` GPUs (TP x attention-DP ranks; default TP), sliced or whole.
    ``experts_only``: a checkpoint that quantises only the routed experts keeps the dense
    MLPs and shared experts 16-bit (Kimi-K2.5's compressed-tensors ``ignore`` list names
    ``shared_experts`` and the dense ``mlp.*_proj``)."""
    h = arch.hidden_size
    if layer not in arch.moe_layers:
        dense = 3 * h * arch.intermediate_size / tp
        return (0.0, dense) if experts_only else (dense, 0.0)
    experts = arch.num_experts * 3 * h * arch.moe_intermediate_size / (moe_shards or tp)
    half = float(h * arch.num_experts)  # router: replicated
    if arch.expert_bias:
        half += arch.num_experts * (2 * arch.moe_intermediate_size / tp + h) + arch.num_experts
    shared = 3 * h * arch.shared_expert_intermediate_size / tp
    if arch.shared_expert_gate:
        half += h
    if experts_only:
        return experts, half + shared
    return experts + shared, half


def _padded_vocab(arch: ModelArchitecture) -> int:
    return math.ceil(arch.vocab_size / VOCAB_PADDING) * VOCAB_PADDING


def _rotary_cache_bytes(arch: ModelArchitecture) -> float:
    """vLLM's cos/sin cache: max_position x rotary_dim 16-bit values, one per rank."""
    rotary = (arch.qk_rope_head_dim or arch.head_dim) if arch.is_mla else arch.head_dim
    return float(arch.max_position_embeddings or DEFAULT_MAX_MODEL_LEN) * rotary * HALF_BYTES


@lru_cache(maxsize=4096)
def _stage_layer_params(
    arch: ModelArchitecture,
    tp: int,
    start: int,
    end: int,
    moe_shards: int | None,
    experts_only: bool,
) -> tuple[float, float]:
    """(linear params, 16-bit params) one GPU holds of layers ``start..end-1``: a loop over
    the layers that a search repeats for every layout, memoised by the (frozen, hashable)
    architecture's value."""
    linear = half = 0.0
    for layer in range(start, end):
        mixer_linear, mixer_half = _mixer_params_per_rank(arch, layer, tp)
        mlp_linear, mlp_half = _mlp_params_per_rank(arch, layer, tp, moe_shards, experts_only)
        if experts_only:
            half += mixer_linear
        else:
            linear += mixer_linear
        linear += mlp_linear
        half += mixer_half + mlp_half + 2 * arch.hidden_size  # two RMSNorms
    return linear, half


def stage_weight_bytes(
    model: ModelCard | ModelArchitecture,
    *,
    tp: int,
    pp: int = 1,
    stage: int = 0,
    precision: str = "bf16",
    moe_shards: int | None = None,
) -> float:
    """Weight bytes one GPU of PP stage ``stage`` holds (see the module docstring).

    ``moe_shards``: GPUs the routed experts are split over (TP x attention-DP ranks with
    attention data parallelism; default TP). A checkpoint that quantises only its experts
    (gpt-oss's MXFP4) keeps its attention in 16-bit.
    """
    arch = _arch(model)
    # the same for every context a search asks this layout at
    return memoised(
        arch,
        ("weights", tp, pp, stage, precision, moe_shards),
        lambda: _stage_weight_bytes(arch, tp, pp, stage, precision, moe_shards),
    )


def _stage_weight_bytes(
    arch: ModelArchitecture, tp: int, pp: int, stage: int, precision: str, moe_shards: int | None
) -> float:
    _check_precision(precision)
    check_parallelism(arch, tp, pp)
    start, end = pp_layer_split(arch.num_layers, pp)[stage]
    experts_only = arch.experts_only_quantized and BYTES_PER_PARAM[precision] < HALF_BYTES
    linear, half = _stage_layer_params(arch, tp, start, end, moe_shards, experts_only)
    vocab_shard = _padded_vocab(arch) / tp * arch.hidden_size
    first, last = stage == 0, stage == pp - 1
    if first:
        half += vocab_shard  # embed_tokens
    if last:
        half += arch.hidden_size  # final norm
        if not arch.tie_word_embeddings or not first:
            half += vocab_shard  # lm_head (a tied one is a second copy when PP > 1)
    return linear * _linear_bytes(precision, arch) + half * HALF_BYTES + _rotary_cache_bytes(arch)


def weight_bytes(model: ModelCard | ModelArchitecture, precision: str = "bf16") -> float:
    """Bytes of the whole model's weights in ``precision`` on one GPU (TP = PP = 1)."""
    return stage_weight_bytes(model, tp=1, pp=1, precision=precision)


# ----- KV cache --------------------------------------------------------------------------------


def kv_bytes_per_token_per_layer_per_gpu(
    model: ModelCard | ModelArchitecture, tp: int, kv_cache_dtype: str = "auto"
) -> float:
    """One token's K and V in one attention layer on one TP rank.

    GQA: 2 x max(1, kv_heads / tp) x head_dim x bytes (heads replicated when TP exceeds them).
    MLA: (kv_lora_rank + qk_rope_head_dim) x bytes on every rank: the latent is not sharded;
    with DeepSeek Sparse Attention plus the indexer's fp8 key and its scales
    (:func:`indexer_cache_bytes_per_token_per_layer`).
    """
    arch = _arch(model)
    per_element = kv_bytes_per_element(kv_cache_dtype)
    if arch.is_mla:
        latent = arch.kv_elements_per_token_per_layer() * per_element
        if arch.index_n_heads and per_element == 1.0:
            # DSA's FP8 latent (vLLM ``fp8_ds_mla``, SGLang's NSA pool): the 512 values in
            # fp8 with a float32 scale per 128, the RoPE part kept 16-bit: 512 + 16 + 128 =
            # 656 B (vllm/v1/attention/backends/mla/flashmla_sparse.py, 0.11; SGLang PR
            # #11309's 8 x B200 log: 43.67 GiB for 975,424 tokens = 61 x (656 + 132) B)
            assert arch.kv_lora_rank is not None
            rank, rope = arch.kv_lora_rank, arch.qk_rope_head_dim or 0
            latent = rank + rank // INDEXER_SCALE_BLOCK * INDEXER_SCALE_BYTES + rope * HALF_BYTES
        return latent + indexer_cache_bytes_per_token_per_layer(arch)
    return 2 * _kv_heads_per_rank(arch, tp) * arch.head_dim * per_element


def indexer_cache_bytes_per_token_per_layer(model: ModelCard | ModelArchitecture) -> float:
    """DeepSeek Sparse Attention's indexer key cache, one token, one layer, every rank:
    index_head_dim fp8 bytes + 4 B of scale per 128 (0 without an indexer); see
    :data:`INDEXER_SCALE_BYTES`."""
    arch = _arch(model)
    if not arch.index_n_heads:
        return 0.0
    d = arch.index_head_dim
    return d + d // INDEXER_SCALE_BLOCK * INDEXER_SCALE_BYTES


# ----- the plan ---------------------------------------------------------------------------------


class StageMemory(BaseModel):
    """One GPU of one PP stage (every TP rank of a stage holds the same)."""

    model_config = ConfigDict(frozen=True)

    stage: int
    first_layer: int
    end_layer: int
    full_layers: int
    sliding_layers: int
    linear_layers: int
    weights_bytes: float
    activation_bytes: float
    kv_bytes: float
    kv_bytes_per_token: float = Field(description="one token, all attention layers of the stage")
    linear_state_bytes_per_sequence: float
    kv_blocks: int
    #: the part of ``weights_bytes`` the engine derives after loading the checkpoint (MLA's
    #: 16-bit absorbed copies): it takes KV room but is not the checkpoint's own size
    derived_weights_bytes: float = 0.0


class MemoryPlan(BaseModel):
    """Memory of one GPU of a layout (the PP stage whose KV pool binds) and its replica's KV.

    Inside vLLM's budget: weights, activation, non-torch, KV. Outside it: CUDA graphs, the
    framework overhead and what the driver reserves. ``free_bytes`` is what is left of the
    GPU after all of them (negative: the headroom is too small for CUDA graphs).
    """

    model_config = ConfigDict(frozen=True)

    gpu_id: str
    tp: int
    pp: int
    precision: str
    kv_cache_dtype: str
    gpu_memory_utilization: float
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    block_size: int = BLOCK_SIZE
    sliding_window: int | None = None
    # per GPU
    total_bytes: float
    cuda_visible_bytes: float
    budget_bytes: float
    weights_bytes: float
    activation_bytes: float
    non_torch_bytes: float
    cuda_graph_bytes: float
    framework_overhead_bytes: float
    driver_reserved_bytes: float
    kv_bytes: float
    free_bytes: float
    kv_bytes_per_token_per_gpu: float
    # replica
    kv_bytes_per_token: float = Field(description="whole model, all layers, one copy")
    kv_capacity_tokens: int
    kv_capacity_blocks: int
    linear_state_bytes: float = Field(description="fixed state of one sequence, whole model")
    max_model_len_blocks_needed: int
    binding_stage: int
    stages: list[StageMemory]
    problems: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    @property
    def fits(self) -> bool:
        return not self.problems

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


def _gb(value: float) -> str:
    return f"{value / 1e9:.1f} GB"


def _seq_bytes_on_stage(
    stage: StageMemory, tokens: np.ndarray | int, sliding_window: int | None, block_size: int
) -> np.ndarray:
    """KV bytes a sequence of ``tokens`` holds on one GPU of ``stage`` (whole blocks)."""
    layers = stage.full_layers + stage.sliding_layers
    per_layer_block = 0.0 if not layers else stage.kv_bytes_per_token / layers * block_size
    blocks = np.ceil(np.asarray(tokens, dtype=float) / block_size)
    sliding_blocks = blocks
    if sliding_window:
        # A sliding layer keeps the window plus the partly expired block.
        sliding_blocks = np.minimum(blocks, math.ceil(sliding_window / block_size) + 1)
    return (
        per_layer_block * (stage.full_layers * blocks + stage.sliding_layers * sliding_blocks)
        + stage.linear_state_bytes_per_sequence
    )


def _vllm_max_len_bytes(
    stage: StageMemory, arch: ModelArchitecture, max_model_len: int, mnbt: int, block: int
) -> float:
    """KV one max_model_len request needs on the stage, as vLLM's start-up check computes it
    (kv_cache_interface.py: full layers cdiv(len, block); sliding layers
    cdiv(min(window - 1 + max_num_batched_tokens, len), block) + 1)."""
    layers = stage.full_layers + stage.sliding_layers
    if not layers:
        return stage.linear_state_bytes_per_sequence
    page = stage.kv_bytes_per_token / layers * block
    full = math.ceil(max_model_len / block)
    sliding = full
    if arch.sliding_window:
        sliding = math.ceil(min(arch.sliding_window - 1 + mnbt, max_model_len) / block) + 1
    return page * (stage.full_layers * full + stage.sliding_layers * sliding) + (
        stage.linear_state_bytes_per_sequence
    )


def plan_memory(
    model: ModelCard | ModelArchitecture,
    gpu: GPU,
    *,
    tp: int,
    pp: int = 1,
    precision: str = "bf16",
    engine: EngineConfig | None = None,
) -> MemoryPlan:
    """Per-GPU memory and replica KV capacity of ``model`` on ``tp`` x ``pp`` ``gpu``s under
    ``engine`` (default: vLLM's own settings on the GPU, :func:`planner.engine.engine_defaults`;
    ``max_model_len`` None: the model's ``max_position_embeddings``). With attention data
    parallelism (``engine.data_parallel_size``) each GPU holds its rank's attention and KV and
    1/(TP x DP) of the routed experts.

    kv_bytes (one GPU) = total_cuda x utilisation - weights - activation - non_torch;
    blocks (stage) = kv_bytes // (block_size x KV bytes per token of the stage's layers);
    replica capacity = min over stages x block_size tokens. ``problems`` lists why vLLM would
    refuse to start (no KV memory, one max_model_len sequence does not fit, start-up free memory
    below the request); ``warnings`` what may still go wrong (CUDA graphs beyond the headroom).
    """
    arch = _arch(model)
    check_parallelism(arch, tp, pp)
    _check_precision(precision)
    config = (engine or EngineConfig()).resolved(gpu)
    assert config.max_num_seqs and config.max_num_batched_tokens and config.block_size
    kv_cache_dtype = config.kv_cache_dtype
    gpu_memory_utilization = config.gpu_memory_utilization
    max_num_seqs, max_num_batched_tokens = config.max_num_seqs, config.max_num_batched_tokens
    block_size, enforce_eager = config.block_size, config.enforce_eager
    model_len = config.max_model_len or arch.max_position_embeddings or DEFAULT_MAX_MODEL_LEN
    # with attention data parallelism the routed experts are split over TP x DP GPUs
    moe_shards = tp * config.data_parallel_size if arch.is_moe else tp

    total = gpu.memory_bytes
    reserved = DRIVER_RESERVED_BYTES if gpu.memory_reported_mib is not None else 0.0
    cuda_total = total - reserved
    budget = cuda_total * gpu_memory_utilization
    multi = tp * pp > 1
    non_torch = NON_TORCH_BYTES[multi]
    framework = FRAMEWORK_OVERHEAD_BYTES[multi]
    cuda_graph = 0.0 if enforce_eager else CUDA_GRAPH_BYTES
    # the stages do not depend on max_model_len: a search asks them again for every context
    stages = memoised(
        arch,
        ("stages", gpu.gpu_id, total, reserved, tp, pp, precision, kv_cache_dtype,
         gpu_memory_utilization, max_num_seqs, max_num_batched_tokens, block_size, moe_shards),
        lambda: _plan_stages(
            arch, tp, pp, precision, kv_cache_dtype, max_num_seqs, max_num_batched_tokens,
            block_size, budget, non_torch, moe_shards,
        ),
    )  # fmt: skip

    # The stage that runs out first binds the replica (vLLM takes the min of num_blocks).
    def _headroom(s: StageMemory) -> float:
        need = _vllm_max_len_bytes(s, arch, model_len, max_num_batched_tokens, block_size)
        return s.kv_bytes / need if need else math.inf

    has_kv = any(s.kv_bytes_per_token for s in stages)
    binding = min(stages, key=lambda s: s.kv_blocks if has_kv else _headroom(s))
    capacity_blocks = min(s.kv_blocks for s in stages) if has_kv else 0
    needed_blocks = math.ceil(model_len / block_size)

    problems: list[str] = []
    warnings: list[str] = []
    replica_weights = tp * sum(s.weights_bytes for s in stages)
    if replica_weights > tp * pp * budget:
        problems.append(
            f"weights {_gb(replica_weights)} > {tp * pp} x {_gb(cuda_total)} x "
            f"{gpu_memory_utilization:.2f} usable"
        )
    for s in stages:
        used = s.weights_bytes + s.activation_bytes + non_torch
        if used >= budget and not problems:
            where = f" (PP stage {s.stage})" if pp > 1 else ""
            problems.append(
                f"weights {_gb(s.weights_bytes)} + activations {_gb(s.activation_bytes)} + "
                f"runtime {_gb(non_torch)} per GPU{where} > {_gb(budget)} usable "
                f"({_gb(cuda_total)} x {gpu_memory_utilization:.2f}); no memory left for the "
                "KV cache"
            )
            break
    if not problems:
        for s in stages:
            need = _vllm_max_len_bytes(s, arch, model_len, max_num_batched_tokens, block_size)
            if need > s.kv_bytes:
                fit_len = _max_fitting_len(s, arch, max_num_batched_tokens, block_size)
                problems.append(
                    f"one {model_len:,}-token sequence needs {_gb(need)} of KV per GPU but "
                    f"{_gb(s.kv_bytes)} is left; max_model_len <= {fit_len:,} fits"
                )
                break
    if problems and replica_weights <= tp * pp * budget:  # the weights fit, the KV does not
        problems[-1] += _utilization_hint(
            binding, arch, model_len, max_num_batched_tokens, block_size, non_torch,
            cuda_total, framework, cuda_graph, gpu_memory_utilization, kv_cache_dtype,
        )  # fmt: skip
    startup_free = cuda_total - framework
    if startup_free < budget:
        problems.append(
            f"gpu_memory_utilization {gpu_memory_utilization:.2f} requests {_gb(budget)} but only "
            f"{_gb(startup_free)} is free at start-up (CUDA context and communication buffers "
            f"take {_gb(framework)}); vLLM refuses to start"
        )
    headroom = cuda_total - budget - framework
    if cuda_graph > headroom:
        warnings.append(
            f"CUDA graphs (~{_gb(cuda_graph)}) may not fit the {_gb(max(headroom, 0))} left "
            f"outside gpu_memory_utilization; lower it or use enforce_eager"
        )

    kv_used = binding.kv_bytes
    free = (
        total
        - reserved
        - framework
        - cuda_graph
        - (binding.weights_bytes + binding.activation_bytes + non_torch + kv_used)
    )
    return MemoryPlan(
        gpu_id=gpu.gpu_id,
        tp=tp,
        pp=pp,
        precision=precision,
        kv_cache_dtype=kv_cache_dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=model_len,
        block_size=block_size,
        sliding_window=arch.sliding_window,
        total_bytes=total,
        cuda_visible_bytes=cuda_total,
        budget_bytes=budget,
        weights_bytes=binding.weights_bytes,
        activation_bytes=binding.activation_bytes,
        non_torch_bytes=non_torch,
        cuda_graph_bytes=cuda_graph,
        framework_overhead_bytes=framework,
        driver_reserved_bytes=reserved,
        kv_bytes=kv_used,
        free_bytes=free,
        kv_bytes_per_token_per_gpu=binding.kv_bytes_per_token,
        kv_bytes_per_token=arch.num_attention_layers
        * kv_bytes_per_token_per_layer_per_gpu(arch, 1, kv_cache_dtype),
        kv_capacity_tokens=capacity_blocks * block_size,
        kv_capacity_blocks=capacity_blocks,
        linear_state_bytes=arch.linear_state_bytes_per_sequence(),
        max_model_len_blocks_needed=needed_blocks,
        binding_stage=binding.stage,
        stages=list(stages),
        problems=problems,
        warnings=warnings,
    )


def utilization_ceiling(cuda_total: float, framework: float, cuda_graph: float) -> float:
    """The largest gpu_memory_utilization that still leaves outside vLLM's budget what vLLM
    keeps there: the CUDA graph pool and the CUDA context and communication buffers taken
    before its start-up snapshot (``framework``), as a share of the memory CUDA reports."""
    return (cuda_total - framework - cuda_graph) / cuda_total


def _utilization_hint(
    stage: StageMemory,
    arch: ModelArchitecture,
    model_len: int,
    mnbt: int,
    block: int,
    non_torch: float,
    cuda_total: float,
    framework: float,
    cuda_graph: float,
    utilization: float,
    kv_cache_dtype: str,
) -> str:
    """What a user changes when the weights fit but the KV cache does not: the
    gpu_memory_utilization that holds one ``model_len`` request while leaving the CUDA graphs
    and the start-up buffers outside the budget, and the FP8 KV cache ("" when neither helps).
    """
    need = _vllm_max_len_bytes(stage, arch, model_len, mnbt, block)
    fixed = stage.weights_bytes + stage.activation_bytes + non_torch
    needed = math.ceil((fixed + need) / cuda_total * 100) / 100
    ceiling = utilization_ceiling(cuda_total, framework, cuda_graph)
    fixes = []
    if utilization < needed <= ceiling:
        fixes.append(f"--gpu-memory-utilization {needed:.2f} starts it")
    if not kv_cache_dtype.startswith("fp8") and stage.kv_bytes_per_token:
        fixes.append("an FP8 KV cache (--kv-cache-dtype fp8) halves a token's KV")
    return f" (fix: {'; '.join(fixes)})" if fixes else ""


def _plan_stages(
    arch: ModelArchitecture,
    tp: int,
    pp: int,
    precision: str,
    kv_cache_dtype: str,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    block_size: int,
    budget: float,
    non_torch: float,
    moe_shards: int,
) -> tuple[StageMemory, ...]:
    """Weights, activations and KV blocks of one GPU of each PP stage under ``budget``
    (gpu_memory_utilization x the GPU), ``non_torch`` of it the runtime's."""
    per_layer_kv = kv_bytes_per_token_per_layer_per_gpu(arch, tp, kv_cache_dtype)
    state_per_rank = arch.linear_state_bytes_per_sequence() / tp
    sampler_requests = min(max_num_seqs, max_num_batched_tokens)
    hidden_term = max_num_batched_tokens * arch.hidden_size * ACTIVATION_BYTES_PER_HIDDEN
    ffn_width = arch.intermediate_size
    if arch.is_moe:
        ffn_width = max(
            ffn_width,
            arch.experts_per_token * arch.moe_intermediate_size
            + arch.shared_expert_intermediate_size,
        )
    forward_term = max_num_batched_tokens * HALF_BYTES * (2 * arch.hidden_size + 3 * ffn_width / tp)

    stages: list[StageMemory] = []
    for stage, (start, end) in enumerate(pp_layer_split(arch.num_layers, pp)):
        kinds = arch.layer_kinds[start:end]
        full, sliding, linear = (kinds.count("full"), kinds.count("sliding"), kinds.count("linear"))
        weights = stage_weight_bytes(
            arch, tp=tp, pp=pp, stage=stage, precision=precision, moe_shards=moe_shards
        )
        activation = hidden_term + forward_term
        if stage == pp - 1:
            sampler = sampler_requests * arch.vocab_size * ACTIVATION_BYTES_PER_LOGIT
            activation = hidden_term + max(sampler, forward_term)
        kv = max(budget - weights - activation - non_torch, 0.0)
        per_token = (full + sliding) * per_layer_kv
        blocks = int(kv // (block_size * per_token)) if per_token else 0
        stages.append(
            StageMemory(
                stage=stage,
                first_layer=start,
                end_layer=end,
                full_layers=full,
                sliding_layers=sliding,
                linear_layers=linear,
                weights_bytes=weights,
                activation_bytes=activation,
                kv_bytes=kv,
                kv_bytes_per_token=per_token,
                linear_state_bytes_per_sequence=linear
                * state_per_rank
                / max(arch.num_linear_layers, 1),
                kv_blocks=blocks,
                derived_weights_bytes=(end - start - linear)
                * _mla_absorbed_params(arch, tp)
                * HALF_BYTES,
            )
        )
    return tuple(stages)


def _max_fitting_len(stage: StageMemory, arch: ModelArchitecture, mnbt: int, block: int) -> int:
    low, high = 0, 1 << 24
    while low < high:
        mid = (low + high + 1) // 2
        if _vllm_max_len_bytes(stage, arch, mid, mnbt, block) <= stage.kv_bytes:
            low = mid
        else:
            high = mid - 1
    return low


# ----- concurrency and occupancy -----------------------------------------------------------------


def _context_tokens(
    workload_or_context: Workload | LengthDistribution | int, quantile: float
) -> int:
    if isinstance(workload_or_context, Workload):
        return workload_or_context.context_quantile(quantile)
    if isinstance(workload_or_context, LengthDistribution):
        return workload_or_context.quantile(quantile)
    if isinstance(workload_or_context, bool) or not isinstance(workload_or_context, int):
        raise InvalidInputError(
            "context", workload_or_context, "a Workload, a LengthDistribution or a token count"
        )
    if workload_or_context < 1:
        raise InvalidInputError("context", workload_or_context, "a token count >= 1")
    return workload_or_context


def max_concurrent_sequences(
    plan: MemoryPlan,
    workload_or_context_distribution: Workload | LengthDistribution | int,
    quantile: float = 0.99,
    *,
    model: ModelCard | ModelArchitecture | None = None,
    cap_at_max_num_seqs: bool = True,
) -> int:
    """Sequences of the ``quantile`` context (input + output) the replica's KV pool holds.

    For a Workload the context is input + output of one request; a LengthDistribution or an int
    is the context itself. Per stage: floor(kv_bytes / bytes of one sequence in whole blocks,
    sliding layers capped at their window, plus any linear-attention state), min over stages,
    and (by default) at most ``max_num_seqs``, the scheduler's own cap. ``model`` overrides the
    sliding window the plan recorded.
    """
    if not 0 < quantile <= 1:
        raise InvalidInputError("quantile", quantile, "a probability in (0, 1]")
    tokens = _context_tokens(workload_or_context_distribution, quantile)
    window = _arch(model).sliding_window if model is not None else plan.sliding_window
    counts = []
    for stage in plan.stages:
        per_seq = float(_seq_bytes_on_stage(stage, tokens, window, plan.block_size))
        counts.append(int(stage.kv_bytes // per_seq) if per_seq > 0 else plan.max_num_seqs)
    count = min(counts)
    return min(count, plan.max_num_seqs) if cap_at_max_num_seqs else count


class GpuBreakdown(BaseModel):
    """Where one GPU's memory goes at a given load (bytes)."""

    model_config = ConfigDict(frozen=True)

    total_bytes: float
    weights_bytes: float
    kv_used_bytes: float
    kv_used_p99_bytes: float
    kv_idle_bytes: float
    activation_bytes: float
    overhead_bytes: float = Field(description="non-torch + CUDA graphs + framework + driver")
    free_bytes: float


class KvOccupancy(BaseModel):
    """KV cache occupancy of a replica with ``concurrency`` requests in flight.

    ``expected``/``p99`` are fractions of the KV pool (capped at 1); the ``*_demand_tokens`` are
    what the requests would hold (above the capacity means queueing or preemption).
    """

    model_config = ConfigDict(frozen=True)

    concurrency: int
    capacity_tokens: int
    expected: float
    p99: float
    expected_demand_tokens: float
    p99_demand_tokens: float
    p_wait_or_preempt: float
    p_scheduler_wait: float = Field(description="1 when concurrency exceeds max_num_seqs")
    prefix_caching: bool
    per_gpu_breakdown: GpuBreakdown


def kv_occupancy(
    plan: MemoryPlan,
    workload: Workload,
    concurrency: int,
    *,
    model: ModelCard | ModelArchitecture | None = None,
    prefix_caching: bool = True,
    scenarios: int = 2000,
    seed: int = 0,
) -> KvOccupancy:
    """Expected and p99 KV occupancy, and the chance a request waits or is preempted.

    Closed-loop steady state (Monte Carlo, ``scenarios`` draws): each of the ``concurrency``
    slots holds a request picked with probability proportional to its output length (long
    answers occupy a slot longer: length-biased sampling) at a uniform point of its decode, so it
    holds input + u x output tokens in whole blocks. With prefix caching (vLLM V1's default)
    the full blocks of a shared prefix are held once per prefix group among the slots.
    p_wait_or_preempt = P(the slots need more blocks than the pool has) (1 when concurrency
    exceeds max_num_seqs: the scheduler queues the excess).
    """
    if concurrency < 1:
        raise InvalidInputError("concurrency", concurrency, "an integer >= 1")
    window = _arch(model).sliding_window if model is not None else plan.sliding_window
    block = plan.block_size
    pool = 4000
    requests = workload.sample_requests(pool, seed=seed)
    inputs = np.array([r.input_len for r in requests], dtype=float)
    outputs = np.array([r.output_len for r in requests], dtype=float)
    groups = np.array([-1 if r.prefix_group is None else r.prefix_group for r in requests])
    prefix_blocks = np.array(
        [r.prefix_len // block if prefix_caching else 0 for r in requests], dtype=float
    )
    draws = max(200, min(scenarios, 4_000_000 // concurrency))
    rng = np.random.default_rng(seed + 1)
    weights = outputs / outputs.sum()
    picks = rng.choice(pool, size=(draws, concurrency), p=weights)
    progress = rng.random(size=(draws, concurrency))
    tokens = inputs[picks] + np.floor(progress * outputs[picks]) + 1

    pick_groups = groups[picks]
    order = np.argsort(pick_groups, axis=1, kind="stable")
    sorted_groups = np.take_along_axis(pick_groups, order, axis=1)
    first_of_group = np.ones_like(sorted_groups, dtype=bool)
    first_of_group[:, 1:] = sorted_groups[:, 1:] != sorted_groups[:, :-1]
    first_of_group &= sorted_groups >= 0
    fraction = np.zeros(draws)
    binding_tokens = np.zeros(draws)
    for stage in plan.stages:
        seq_bytes = _seq_bytes_on_stage(stage, tokens, window, block)
        layers = stage.full_layers + stage.sliding_layers
        per_layer_block = stage.kv_bytes_per_token / layers * block if layers else 0.0
        # Full blocks of a shared prefix in full-attention layers are held once per group.
        shared = prefix_blocks[picks] * per_layer_block * stage.full_layers
        shared_once = (np.take_along_axis(shared, order, axis=1) * first_of_group).sum(axis=1)
        stage_bytes = seq_bytes.sum(axis=1) - shared.sum(axis=1) + shared_once
        fraction = np.maximum(fraction, stage_bytes / max(stage.kv_bytes, 1.0))
        if stage.stage == plan.binding_stage and stage.kv_bytes_per_token:
            binding_tokens = stage_bytes / stage.kv_bytes_per_token
    over = float(np.mean(fraction > 1.0 + 1e-12))
    scheduler_wait = 1.0 if concurrency > plan.max_num_seqs else 0.0
    expected = float(fraction.mean())
    p99 = float(np.quantile(fraction, 0.99))
    binding = plan.stages[plan.binding_stage]
    kv_used = min(expected, 1.0) * binding.kv_bytes
    kv_used_p99 = min(p99, 1.0) * binding.kv_bytes
    overhead = (
        plan.non_torch_bytes
        + plan.cuda_graph_bytes
        + plan.framework_overhead_bytes
        + plan.driver_reserved_bytes
    )
    return KvOccupancy(
        concurrency=concurrency,
        capacity_tokens=plan.kv_capacity_tokens,
        expected=min(expected, 1.0),
        p99=min(p99, 1.0),
        expected_demand_tokens=float(binding_tokens.mean()),
        p99_demand_tokens=float(np.quantile(binding_tokens, 0.99)),
        p_wait_or_preempt=max(over, scheduler_wait),
        p_scheduler_wait=scheduler_wait,
        prefix_caching=prefix_caching,
        per_gpu_breakdown=GpuBreakdown(
            total_bytes=plan.total_bytes,
            weights_bytes=plan.weights_bytes,
            kv_used_bytes=kv_used,
            kv_used_p99_bytes=kv_used_p99,
            kv_idle_bytes=plan.kv_bytes - kv_used,
            activation_bytes=plan.activation_bytes,
            overhead_bytes=overhead,
            free_bytes=plan.free_bytes,
        ),
    )


__all__ = [
    "BLOCK_SIZE",
    "GpuBreakdown",
    "KvOccupancy",
    "MemoryPlan",
    "StageMemory",
    "check_parallelism",
    "indexer_cache_bytes_per_token_per_layer",
    "kv_bytes_per_element",
    "kv_bytes_per_token_per_layer_per_gpu",
    "kv_occupancy",
    "max_concurrent_sequences",
    "plan_memory",
    "pp_layer_split",
    "stage_weight_bytes",
    "utilization_ceiling",
    "weight_bytes",
]
