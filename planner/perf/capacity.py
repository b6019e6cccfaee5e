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
from planner.memory import MemoryPlan, plan_memory


@dataclass(frozen=True)
class CapacityPlan:
    kv_capacity_tokens: int
    weights_bytes: float  # per GPU, the stage whose KV pool binds


def plan_capacity(
    card: ModelCard, gpu: GPU, *, tp: int, pp: int, precision: str, engine: EngineConfig
) -> CapacityPlan:
    """Replica KV capacity in tokens; a layout that cannot start raises InvalidInputError.

    ``engine`` is resolved (every setting stated, ``max_model_len`` included).
    """
    trtllm = engine.family == "trtllm"
    assert engine.max_num_seqs and engine.max_num_batched_tokens
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
    if trtllm:
        visible = plan.cuda_visible_bytes
        fixed = plan.weights_bytes + plan.activation_bytes + plan.non_torch_bytes
        usable = visible - plan.framework_overhead_bytes
        free = TRTLLM_FREE_GPU_MEMORY_FRACTION * max(usable - fixed, 0.0)
        utilization = (fixed + free) / visible
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
