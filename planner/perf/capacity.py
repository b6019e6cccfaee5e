"""KV-cache capacity of one replica, from the memory planner (:func:`planner.memory.plan_memory`).

vLLM sizes its KV pool as ``gpu_memory_utilization`` x the GPU minus weights, activations and
runtime; the TensorRT-LLM family takes ``free_gpu_memory_fraction`` of the memory left after
the weights (:data:`planner.engine.TRTLLM_FREE_GPU_MEMORY_FRACTION`), translated here into the
equivalent ``gpu_memory_utilization`` before the memory planner is asked. The engine config's
``max_model_len`` is what a deployment passes to ``--max-model-len``.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.catalog import GPU, ModelCard
from planner.engine import TRTLLM_FREE_GPU_MEMORY_FRACTION, VLLM_SERVE_SMALL_GPU, EngineConfig
from planner.errors import InvalidInputError
from planner.memory import (
    ACTIVATION_BYTES_PER_HIDDEN,
    ACTIVATION_BYTES_PER_LOGIT,
    MemoryPlan,
    plan_memory,
)

#: the largest mem_fraction_static the planner raises SGLang's default to
SGLANG_MAX_RAISED_FRACTION = 0.97


@dataclass(frozen=True)
class CapacityPlan:
    kv_capacity_tokens: int
    weights_bytes: float  # per GPU, the stage whose KV pool binds
    #: why the engine might refuse this layout although the weights fit (then the capacity is
    #: that of one longest request: a measured run of it exists, or the user asked)
    problem: str | None = None
    #: SGLang's mem_fraction_static raised above its default so the server starts
    #: (:func:`sglang_fraction_that_starts`); None when the default (or the stated one) is kept
    raised_fraction: float | None = None


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
    serves raises the fraction until the server starts; this is the fraction that leaves
    outside the pool what the memory planner accounts a GPU really uses there (vLLM-measured
    terms, :mod:`planner.memory`): the hidden states of one chunk (tokens x hidden x 2.56 B),
    the fp32 logits of a decode batch as large as the CUDA graphs (graph_batch x vocab x
    38.26 B), non-torch memory, CUDA graphs, the framework and driver reserves. Capped at
    :data:`SGLANG_MAX_RAISED_FRACTION`.
    """
    chunk = plan.max_num_batched_tokens
    activation = chunk * hidden * ACTIVATION_BYTES_PER_HIDDEN
    activation += min(graph_batch, plan.max_num_seqs) * vocab * ACTIVATION_BYTES_PER_LOGIT
    outside = (
        activation
        + plan.non_torch_bytes
        + plan.cuda_graph_bytes
        + plan.framework_overhead_bytes
        + plan.driver_reserved_bytes
    )
    fraction = (plan.total_bytes - outside) / plan.total_bytes
    return round(min(fraction, SGLANG_MAX_RAISED_FRACTION), 3)


def plan_capacity(
    card: ModelCard,
    gpu: GPU,
    *,
    tp: int,
    pp: int,
    precision: str,
    engine: EngineConfig,
    sglang_graph_batch: int | None = None,
) -> CapacityPlan:
    """Replica KV capacity in tokens; a layout whose weights do not fit raises
    InvalidInputError.

    ``engine`` is resolved (every setting stated, ``max_model_len`` included). SGLang's
    ``mem_fraction_static`` (``gpu_memory_utilization`` of an SGLang config) is the share of the
    GPU for the weights and the KV pool, activations and CUDA graphs being reserved outside it,
    so its pool is fraction x memory - weights. A layout the engine's own start-up checks would
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
    if sglang:
        fraction = engine.gpu_memory_utilization

        def pool_at(fraction: float) -> int:
            pools = [
                int((fraction * plan.total_bytes - stage.weights_bytes)
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
            if starts > fraction:
                fraction, raised = starts, starts
                capacity = pool_at(fraction)
        problem = None if capacity >= max_model_len else (
            f"SGLang's KV pool ({capacity:,} tokens at mem_fraction_static {fraction:.3f}) is "
            f"shorter than one {max_model_len:,}-token request"
        )  # fmt: skip
    if trtllm:
        visible = plan.cuda_visible_bytes
        fixed = plan.weights_bytes + plan.activation_bytes + plan.non_torch_bytes
        usable = visible - plan.framework_overhead_bytes
        free = TRTLLM_FREE_GPU_MEMORY_FRACTION * max(usable - fixed, 0.0)
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
    )
