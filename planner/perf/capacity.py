"""KV-cache capacity of one replica, from the memory planner (:func:`planner.memory.plan_memory`).

vLLM sizes its KV pool as ``gpu_memory_utilization`` x the GPU minus weights, activations and
runtime; the TensorRT-LLM family takes ``free_gpu_memory_fraction`` of the memory left after
the weights (``kv_cache_free_gpu_memory_fraction``: the engine config's share when stated, else
:data:`planner.engine.TRTLLM_FREE_GPU_MEMORY_FRACTION`), translated here into the equivalent
``gpu_memory_utilization`` before the memory planner is asked. The engine config's
``max_model_len`` is what a deployment passes to ``--max-model-len``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.catalog import GPU, ModelCard
from planner.engine import TRTLLM_FREE_GPU_MEMORY_FRACTION, VLLM_SERVE_SMALL_GPU, EngineConfig
from planner.errors import InvalidInputError
from planner.memory import (
    ACTIVATION_BYTES_PER_HIDDEN,
    ACTIVATION_BYTES_PER_LOGIT,
    MemoryPlan,
    plan_memory,
    utilization_ceiling,
)

#: the largest mem_fraction_static (SGLang) or gpu_memory_utilization (vLLM) the planner raises
#: an engine's default to so that the server starts
MAX_RAISED_FRACTION = 0.97
#: What SGLang finds already taken when it measures the GPU before loading the weights (CUDA
#: context, NCCL and custom all-reduce buffers, the driver's own share), with TP > 1: its
#: ``mem_fraction_static`` is a share of that measured free memory, not of the GPU
#: (``ModelRunner.profile_max_num_token``: rest = free after loading - free before loading x
#: (1 - mem_fraction_static), python/sglang/srt/model_executor/model_runner.py, 0.5.x). From
#: sgl-project/sglang PR #9162 (2025-08-13): DeepSeek-R1-FP4 on 4 x B200 (183,359 MiB = 179.06
#: GiB) at TP 4 logged "Load weight begin. avail mem=175.34 GB" (GiB): 3.72 GiB. On one GPU
#: (no NCCL) vLLM's measured single-GPU overhead plus the driver's share stands in for it.
SGLANG_PRELOAD_TAKEN_BYTES = (0.61 * 2**30 + 480 * 2**20, (179.06 - 175.34) * 2**30)


@dataclass(frozen=True)
class CapacityPlan:
    kv_capacity_tokens: int
    weights_bytes: float  # per GPU, the stage whose KV pool binds
    #: why the engine might refuse this layout although the weights fit (then the capacity is
    #: that of one longest request: a measured run of it exists, or the user asked)
    problem: str | None = None
    #: SGLang's mem_fraction_static (:func:`sglang_fraction_that_starts`) or vLLM's
    #: gpu_memory_utilization (:func:`vllm_utilization_that_starts`) raised above its default so
    #: the server starts; None when the default (or the stated one) is kept
    raised_fraction: float | None = None
    #: the share of SGLang's fraction it keeps (:func:`planner.engine.sglang_memory_share`)
    sglang_share: float = 1.0


def sglang_preload_free_bytes(plan: MemoryPlan) -> float:
    """The free memory SGLang measures before loading the weights, which its
    ``mem_fraction_static`` is a share of (:data:`SGLANG_PRELOAD_TAKEN_BYTES`)."""
    return plan.total_bytes - SGLANG_PRELOAD_TAKEN_BYTES[plan.tp * plan.pp > 1]


def sglang_fraction_that_starts(
    plan: MemoryPlan, graph_batch: int, vocab: int, hidden: int
) -> float:
    """The ``--mem-fraction-static`` a deployment sets when SGLang's default leaves no KV pool.

    SGLang's default (python/sglang/srt/server_args.py, ``_handle_gpu_memory_settings``)
    reserves 512 MiB + 1.5 MiB per chunked-prefill token + 2 MiB per CUDA-graph batch size +
    TP x PP / 8 GiB outside the static pool: 26 GiB on a B200 at TP 4 (chunk 16,384), so
    mem_fraction_static is 0.855 and 0.855 x 179 GiB = 153 GiB is below DeepSeek-R1's FP8
    weights at TP 4 (157.5 GiB a GPU): its model runner finds a negative pool and refuses to
    start ("Not enough memory. Please try to increase --mem-fraction-static"). A deployment that
    serves raises the fraction until the server starts; this is the fraction of the free
    memory SGLang measures before loading (:func:`sglang_preload_free_bytes`) that leaves
    outside the pool what the memory planner accounts a GPU really uses there (vLLM-measured
    terms, :mod:`planner.memory`): the hidden states of one chunk (tokens x hidden x 2.56 B),
    the fp32 logits of a decode batch as large as the CUDA graphs (graph_batch x vocab x
    38.26 B), non-torch memory and CUDA graphs. Capped at :data:`MAX_RAISED_FRACTION`.
    """
    chunk = plan.max_num_batched_tokens
    activation = chunk * hidden * ACTIVATION_BYTES_PER_HIDDEN
    activation += min(graph_batch, plan.max_num_seqs) * vocab * ACTIVATION_BYTES_PER_LOGIT
    outside = activation + plan.non_torch_bytes + plan.cuda_graph_bytes
    free = sglang_preload_free_bytes(plan)
    fraction = (free - outside) / free
    return round(min(fraction, MAX_RAISED_FRACTION), 3)


def vllm_utilization_that_starts(plan: MemoryPlan) -> float:
    """The ``--gpu-memory-utilization`` a deployment sets when vLLM's default (0.9) leaves no
    KV cache beside the weights, or less than one ``max_model_len`` request: vLLM then refuses
    to start ("No available memory for the cache blocks" / "... larger than the available KV
    cache memory ... Try increasing `gpu_memory_utilization`", vllm/v1/worker/gpu_worker.py
    and vllm/v1/core/kv_cache_utils.py, 0.10-0.11). The largest share that still leaves
    outside the budget what vLLM keeps there (:mod:`planner.memory`: the CUDA graph pool, the
    CUDA context and communication buffers taken before its start-up snapshot), in hundredths,
    capped at :data:`MAX_RAISED_FRACTION`: 0.97 on a B200 (1.0 + 1.54 GiB of 178.6 leave
    0.985), 0.96 on an 80 GB H100."""
    ceiling = utilization_ceiling(
        plan.cuda_visible_bytes, plan.framework_overhead_bytes, plan.cuda_graph_bytes
    )
    return min(math.floor(ceiling * 100) / 100, MAX_RAISED_FRACTION)


def plan_capacity(
    card: ModelCard,
    gpu: GPU,
    *,
    tp: int,
    pp: int,
    precision: str,
    engine: EngineConfig,
    sglang_graph_batch: int | None = None,
    raise_vllm_default: bool = False,
    sglang_share: float = 1.0,
) -> CapacityPlan:
    """Replica KV capacity in tokens; a layout whose weights do not fit raises
    InvalidInputError.

    ``engine`` is resolved (every setting stated, ``max_model_len`` included). SGLang's
    ``mem_fraction_static`` (``gpu_memory_utilization`` of an SGLang config) is the share of the
    free memory SGLang measures before loading for the weights and the KV pool, activations
    and CUDA graphs being reserved outside it, so its pool is fraction x that memory - weights
    (:func:`sglang_preload_free_bytes`); with ``sglang_graph_batch`` (the default fraction)
    a fraction that leaves no room for one request is raised to what starts the server, and
    with ``raise_vllm_default`` so is vLLM's default gpu_memory_utilization
    (:func:`vllm_utilization_that_starts`). ``sglang_share``: what share of the fraction
    SGLang keeps (:func:`planner.engine.sglang_memory_share`, 0.85 on ROCm with long contexts);
    a raised fraction is the flag's value, the kept share of it what starts the server. A
    layout the engine's own start-up checks would
    refuse while its weights fit (one ``max_model_len`` request does not fit the pool, vLLM's
    free-memory check) gets room for one longest request and ``problem`` says why: a measured
    run of it exists, or the user asked for it.
    """
    trtllm = engine.family == "trtllm"
    sglang = engine.family == "sglang"
    assert engine.max_num_seqs and engine.max_num_batched_tokens and engine.block_size
    block_size = engine.block_size
    max_model_len = engine.max_model_len or 1
    # the sampler's profile run sizes vLLM's activation peak; TensorRT-LLM preallocates its
    # own (smaller) buffers, so it is planned at vLLM's default batch
    seqs = VLLM_SERVE_SMALL_GPU[0] if trtllm else engine.max_num_seqs
    seqs = min(seqs, engine.max_num_batched_tokens)

    def plan_at(utilization: float) -> MemoryPlan:
        config = engine.model_copy(
            update={"gpu_memory_utilization": utilization, "max_num_seqs": seqs}
        )
        return plan_memory(card, gpu, tp=tp, pp=pp, precision=precision, engine=config)

    plan = plan_at(engine.gpu_memory_utilization)
    capacity = plan.kv_capacity_tokens
    problem = plan.problems[0] if plan.problems else None
    raised: float | None = None
    if raise_vllm_default and not trtllm and not sglang and problem is not None:
        starts = vllm_utilization_that_starts(plan)
        candidate = plan_at(starts) if starts > engine.gpu_memory_utilization else None
        if candidate is not None and not candidate.problems:  # raised only when it starts
            plan, raised, problem = candidate, starts, None
            capacity = plan.kv_capacity_tokens
    if sglang:
        fraction = engine.gpu_memory_utilization

        free = sglang_preload_free_bytes(plan)

        def pool_at(fraction: float) -> int:
            pools = [
                int((fraction * sglang_share * free - stage.weights_bytes)
                    // (block_size * stage.kv_bytes_per_token)) * block_size
                for stage in plan.stages
                if stage.kv_bytes_per_token
            ]  # fmt: skip
            return max(min(pools), 0) if pools else 0

        capacity = pool_at(fraction)
        if sglang_graph_batch is not None and capacity < max_model_len:
            arch = card.architecture
            starts = sglang_fraction_that_starts(
                plan, sglang_graph_batch, arch.vocab_size, arch.hidden_size
            )
            # the flag that keeps ``starts`` after SGLang's share
            flag = round(min(starts / sglang_share, MAX_RAISED_FRACTION), 3)
            if flag > fraction:
                fraction, raised = flag, flag
                capacity = pool_at(fraction)
        kept = "" if sglang_share == 1.0 else f", {sglang_share:g} of it kept on ROCm"
        problem = None if capacity >= max_model_len else (
            f"SGLang's KV pool ({capacity:,} tokens at mem_fraction_static {fraction:.3f}"
            f"{kept}) is shorter than one {max_model_len:,}-token request"
        )  # fmt: skip
    if trtllm:
        visible = plan.cuda_visible_bytes
        fixed = plan.weights_bytes + plan.activation_bytes + plan.non_torch_bytes
        usable = visible - plan.framework_overhead_bytes
        # a TensorRT-LLM config's share is its kv_cache_free_gpu_memory_fraction
        fraction = (
            engine.gpu_memory_utilization
            if engine.memory_stated
            else TRTLLM_FREE_GPU_MEMORY_FRACTION
        )
        free = fraction * max(usable - fixed, 0.0)
        utilization = (fixed + free) / visible
        utilization = min(max(utilization, 0.05), usable / visible)
        plan = plan_at(utilization)
        capacity = plan.kv_capacity_tokens
        problem = plan.problems[0] if plan.problems else None
    # the checkpoint itself (copies the engine derives after loading only take KV room)
    replica_weights = tp * sum(s.weights_bytes - s.derived_weights_bytes for s in plan.stages)
    if replica_weights > tp * pp * plan.cuda_visible_bytes:
        raise InvalidInputError(
            "layout",
            f"TP{tp}xPP{pp} {precision} on {gpu.gpu_id}",
            f"a layout that fits: the weights alone ({replica_weights / 1e9:.1f} GB) exceed the "
            f"{tp * pp} GPUs' {tp * pp * plan.cuda_visible_bytes / 1e9:.1f} GB",
        )
    if capacity <= 0 or problem is not None:
        # the engine's own start-up checks may refuse it, but the weights fit: predict with
        # room for one longest request, and say so
        floor = -(-max_model_len // block_size) * block_size
        capacity = max(capacity, floor)
        problem = problem or "no memory left for the KV cache"
    return CapacityPlan(
        kv_capacity_tokens=int(capacity),
        weights_bytes=float(plan.weights_bytes),
        problem=problem,
        raised_fraction=raised,
        sglang_share=sglang_share if sglang else 1.0,
    )
