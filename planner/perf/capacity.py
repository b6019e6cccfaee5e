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
) -> CapacityPlan:
    """Replica KV capacity in tokens; a layout that cannot start raises InvalidInputError."""
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
        )

    plan = plan_at(gpu_memory_utilization)
    if trtllm:
        visible = plan.cuda_visible_bytes
        fixed = plan.weights_bytes + plan.activation_bytes + plan.non_torch_bytes
        usable = visible - plan.framework_overhead_bytes
        utilization = (fixed + TRTLLM_FREE_FRACTION * max(usable - fixed, 0.0)) / visible
        utilization = min(max(utilization, 0.05), usable / visible)
        plan = plan_at(utilization)
    if plan.kv_capacity_tokens <= 0 or plan.problems:
        problem = plan.problems[0] if plan.problems else "no memory left for the KV cache"
        raise InvalidInputError(
            "layout", f"TP{tp}xPP{pp} {precision} on {gpu.gpu_id}", f"a layout that fits: {problem}"
        )
    return CapacityPlan(
        kv_capacity_tokens=int(plan.kv_capacity_tokens), weights_bytes=float(plan.weights_bytes)
    )
