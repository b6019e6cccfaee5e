"""The memory share each layout of the search starts with: the engine's default, or raised.

A layout whose weights fit but whose KV cache cannot hold one ``max_model_len`` request at the
engine's default share does not start (vLLM: "No available memory for the cache blocks" /
"... Try increasing `gpu_memory_utilization`"; SGLang: "Not enough memory. Please try to
increase --mem-fraction-static"). Raised up to :data:`planner.perf.capacity.
MAX_RAISED_FRACTION` it may: DeepSeek-R1 FP8 on 4 x B200 at TP 4 (158 GiB of weights a GPU)
starts at neither vLLM's 0.9 nor SGLang's 0.855 and does at 0.97. Such a layout is a candidate
of the one search, judged, predicted and launched at the raised share
(``LayoutCandidate.raised_memory_fraction``; its ``engine`` states it, so the launch command
carries the flag), with a note on what the raise costs (:func:`memory_note`); a plan at the
default ranks first at an equal cost (:func:`planner.recommend.search._rank_key`).

Each engine is judged by its own accounting, the one its prediction uses
(:func:`planner.perf.deployment.startup_capacity`): vLLM's budget of the GPU, SGLang's share
of the memory it finds free before loading, TensorRT-LLM's share of what the weights leave
(its default always leaves a pool beside weights that fit, so it is never raised here). A
share the user states (``gpu_memory_utilization`` set on the request's engine) is kept as
stated and judged as :mod:`planner.layouts` judges it.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.catalog import Catalog, ModelCard
from planner.engine import EngineConfig
from planner.errors import InvalidInputError
from planner.layouts import LayoutCandidate
from planner.memory import plan_memory
from planner.perf.deployment import MEMORY_SETTINGS, default_memory_fraction, startup_capacity
from planner.perf.uncertainty import FAMILY_NAMES

#: what each engine's documentation says the share is and costs (read 2026-12-02): vLLM's
#: "Engine Arguments" page (docs.vllm.ai, ``--gpu-memory-utilization``: the fraction of GPU
#: memory the model executor may use, default 0.9); SGLang's "Server Arguments" and
#: troubleshooting pages (docs.sglang.ai: ``--mem-fraction-static`` is the share for the
#: weights and the KV pool; lower it when the server runs out of memory)
ENGINE_DOCS = {
    "vllm": "vLLM Engine Arguments, --gpu-memory-utilization (docs.vllm.ai, read 2026-12-02)",
    "sglang": (
        "SGLang Server Arguments and troubleshooting, --mem-fraction-static (docs.sglang.ai, "
        "read 2026-12-02)"
    ),
}


def memory_note(family: str, fraction: float, default: float) -> str:
    """The note of a plan that starts only at a raised share, in words."""
    setting, flag = MEMORY_SETTINGS[family]
    return (
        f"starts only with {flag} {fraction:g}, raised from {FAMILY_NAMES[family]}'s default "
        f"{setting} {default:g}: at the default its KV cache cannot hold one longest request "
        "beside the weights, so the server refuses to start. Less memory is left outside the "
        "engine's pool for activation spikes, CUDA graphs and communication buffers: an "
        "out-of-memory error under load (a long prompt, a large batch) is likelier than at the "
        f"default; verify it with a run ({ENGINE_DOCS[family]})"
    )


def at_startup_memory(
    catalog: Catalog,
    card: ModelCard,
    layouts: Sequence[LayoutCandidate],
    engine: EngineConfig,
) -> list[LayoutCandidate]:
    """``layouts`` judged at the memory share each engine starts with (module docstring):
    kept as they are when ``engine`` states a share; otherwise a layout that starts only at a
    raised share becomes feasible at it, and an SGLang or TensorRT-LLM layout is feasible
    exactly when its engine's own accounting starts it."""
    if engine.memory_stated:
        return list(layouts)
    return [_at_startup(catalog, card, layout) for layout in layouts]


def _at_startup(catalog: Catalog, card: ModelCard, layout: LayoutCandidate) -> LayoutCandidate:
    if layout.memory is None or layout.raised_memory_fraction is not None:
        return layout  # refused before its memory was planned, or judged already
    engine = layout.engine
    family = engine.family
    if family == "vllm" and layout.feasible:
        return layout  # planner.layouts judges vLLM at its default share
    gpu = catalog.gpu(layout.gpu_id)
    default = default_memory_fraction(engine, gpu, card.architecture, tp=layout.tp, pp=layout.pp)
    at_default = engine.model_copy(update={"gpu_memory_utilization": default})
    try:
        start = startup_capacity(
            card, gpu, tp=layout.tp, pp=layout.pp, precision=layout.precision,
            engine=at_default, raise_default=True, context_len=engine.max_model_len,
        )  # fmt: skip
    except InvalidInputError:
        return layout  # the weights alone exceed the GPUs: planner.layouts says so
    if start.problem is not None:
        if family == "vllm":
            return layout  # planner.layouts' reason names the fix
        reason = f"{FAMILY_NAMES[family]} does not start: {start.problem}"
        return layout.model_copy(update={"feasible": False, "reason": reason})
    if start.raised_fraction is None:  # starts at the default
        if layout.feasible:
            return layout
        return layout.model_copy(update={"feasible": True, "reason": None})
    raised = start.raised_fraction
    engine = engine.model_copy(update={"gpu_memory_utilization": raised})
    memory = layout.memory
    if family == "vllm":
        memory = plan_memory(
            card, gpu, tp=layout.tp, pp=layout.pp, precision=layout.precision, engine=engine
        )
    return layout.model_copy(
        update={
            "feasible": True,
            "reason": None,
            "engine": engine,
            "memory": memory,
            "raised_memory_fraction": raised,
        }
    )


__all__ = [
    "ENGINE_DOCS",
    "at_startup_memory",
    "memory_note",
]
