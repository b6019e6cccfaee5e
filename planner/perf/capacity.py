"""KV-cache capacity of one replica, from the memory planner (:func:`planner.memory.plan_memory`).

vLLM sizes its KV pool as ``gpu_memory_utilization`` x the GPU minus weights, activations and
runtime; the TensorRT-LLM family takes 0.9 of the memory left after the weights
(``KvCacheConfig.free_gpu_memory_fraction``), translated here into the equivalent
``gpu_memory_utilization`` before the memory planner is asked. ``max_model_len`` is the longest
request of the scenario, what a deployment would pass to ``--max-model-len``.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.catalog import GPU, ModelCard
from planner.errors import InvalidInputError
from planner.memory import MemoryPlan, plan_memory

TRTLLM_FREE_FRACTION = 0.9


@dataclass(frozen=True)
class CapacityPlan:
    kv_capacity_tokens: int
    weights_bytes: float  # per GPU, the stage whose KV pool binds
    #: why the engine might refuse this layout although the weights fit (then the capacity is
    #: that of one longest request: a measured run of it exists, or the user asked)
    problem: str | None = None


def plan_capacity(
    card: ModelCard,
    gpu: GPU,
    *,
    tp: int,
    pp: int,
    precision: str,
    kv_cache_dtype: str,
    gpu_memory_utilization: float,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    enforce_eager: bool,
    max_model_len: int,
    block_size: int,
    trtllm: bool = False,
    sglang: bool = False,
    moe_shards: int | None = None,
) -> CapacityPlan:
    """Replica KV capacity in tokens; a layout that cannot start raises InvalidInputError.

    SGLang's ``mem_fraction_static`` (``gpu_memory_utilization`` here) is the share of the GPU
    for weights and the KV pool, activations and CUDA graphs being reserved outside it, so the
    pool is fraction x memory - weights.
    """
    # the sampler's profile run sizes vLLM's activation peak; TensorRT-LLM preallocates its
    # own (smaller) buffers, so it is planned at vLLM's default batch
    seqs = min(256 if trtllm else max_num_seqs, max_num_batched_tokens)

    def plan_at(utilization: float) -> MemoryPlan:
        return plan_memory(
            card,
            gpu,
            tp=tp,
            pp=pp,
            precision=precision,
            kv_cache_dtype=kv_cache_dtype,
            gpu_memory_utilization=utilization,
            max_num_seqs=seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            enforce_eager=enforce_eager,
            max_model_len=max_model_len,
            block_size=block_size,
            moe_shards=moe_shards,
        )

    plan = plan_at(gpu_memory_utilization)
    capacity = plan.kv_capacity_tokens
    problem = plan.problems[0] if plan.problems else None
    if sglang:
        pools = [
            int((gpu_memory_utilization * plan.total_bytes - stage.weights_bytes)
                // (block_size * stage.kv_bytes_per_token)) * block_size
            for stage in plan.stages
            if stage.kv_bytes_per_token
        ]  # fmt: skip
        capacity = max(min(pools), 0) if pools else 0
        problem = None if capacity >= max_model_len else (
            f"SGLang's KV pool ({capacity:,} tokens at mem_fraction_static "
            f"{gpu_memory_utilization:.3f}) is shorter than one {max_model_len:,}-token request"
        )  # fmt: skip
    if trtllm:
        visible = plan.cuda_visible_bytes
        fixed = plan.weights_bytes + plan.activation_bytes + plan.non_torch_bytes
        usable = visible - plan.framework_overhead_bytes
        utilization = (fixed + TRTLLM_FREE_FRACTION * max(usable - fixed, 0.0)) / visible
        utilization = min(max(utilization, 0.05), usable / visible)
        plan = plan_at(utilization)
        capacity = plan.kv_capacity_tokens
        problem = plan.problems[0] if plan.problems else None
    replica_weights = tp * sum(stage.weights_bytes for stage in plan.stages)
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
    )
