"""Feasible TP x PP x DP layouts of a model over the catalog's instances.

For every instance type and node count, every (TP, PP, DP) with TP x PP x DP = GPUs is a
candidate. A candidate is ruled out, with the reason in words, when:

- TP does not stay inside one instance (vLLM's tensor parallelism needs the fast intra-node link;
  PP may cross instances), or TP does not divide the attention heads (or divide/multiply the KV
  heads, which vLLM replicates when TP exceeds them);
- vLLM has no kernel for the precision on the GPU;
- attention data parallelism or expert parallelism on a dense model, an expert-parallel size
  (TP x DP-attention) that does not divide the experts, or a TP x DP-attention group that
  leaves one instance (its MoE layers run together);
- the weights, activations and runtime do not fit under gpu_memory_utilization, or the KV pool
  left cannot hold one max_model_len sequence (vLLM refuses to start in both cases).

Precision support (what vLLM 0.10/0.11 does; documented decision):

- fp8: W8A8 where the GPU has FP8 tensor cores (Ada, Hopper, Blackwell, MI300). On other NVIDIA
  GPUs (Ampere: A10G, A100) vLLM runs FP8 checkpoints weight-only through the Marlin kernel
  ("Your GPU does not have native support for FP8 computation ... Weight-only FP8 compression
  will be used leveraging the Marlin kernel", quantization/utils/marlin_utils_fp8.py): memory
  halves, matmuls stay 16-bit. Allowed, with a note. AMD GPUs without FP8: ruled out.
- fp4: native NVFP4/MXFP4 only with FP4 tensor cores (Blackwell: ``fp4_dense_tflops`` set). On
  other NVIDIA GPUs, weight-only via Marlin (marlin_utils_fp4.py): allowed, with a note. AMD
  GPUs without FP4 units: ruled out (vLLM's ROCm MXFP4 path needs MI350-class gfx950).
- int4 (AWQ/GPTQ): Marlin kernels on NVIDIA, Triton/ROCm kernels on AMD. int8: W8A8.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from planner.catalog.architecture import ModelArchitecture
from planner.catalog.loader import Catalog
from planner.catalog.schema import GPU, PRECISIONS, Instance, ModelCard
from planner.engine import EngineConfig, engine_family
from planner.errors import InvalidInputError
from planner.memory import MemoryPlan, check_parallelism, kv_bytes_per_element, plan_memory
from planner.perf.speculative import SEARCH_SPEC_TOKENS, searched_methods, unsupported_reason


class LayoutCandidate(BaseModel):
    """One way to lay a model out on ``nodes`` instances, feasible or not (then with a reason)."""

    model_config = ConfigDict(frozen=True)

    instance: str
    gpu_id: str
    nodes: int
    gpus: int = Field(description="GPUs of the deployment: nodes x GPUs per instance")
    tp: int
    pp: int
    dp: int
    precision: str
    engine: EngineConfig = Field(description="resolved for the GPU: what the layout is judged at")
    feasible: bool
    reason: str | None = None
    notes: list[str] = Field(default_factory=list)
    memory: MemoryPlan | None = None
    #: the engine's memory share (vLLM ``--gpu-memory-utilization``, SGLang
    #: ``--mem-fraction-static``) raised above its default because the layout does not start
    #: at the default (:mod:`planner.recommend.startup`; ``engine`` states it); None: the
    #: default, or the share the user stated, is kept
    raised_memory_fraction: float | None = None

    @property
    def replicas(self) -> int:
        return self.dp

    @property
    def kv_cache_dtype(self) -> str:
        return self.engine.kv_cache_dtype

    @property
    def attention_dp(self) -> int:
        """Attention data-parallel ranks inside one replica (1: none)."""
        return self.engine.data_parallel_size

    @property
    def expert_parallel(self) -> bool:
        return self.engine.enable_expert_parallel

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp * self.attention_dp

    @property
    def spec_method(self) -> str:
        """The speculative method the layout runs (``none`` without)."""
        return self.engine.spec_method

    @property
    def moe_label(self) -> str:
        """`` DP-attention 8 EP``, `` EP`` or empty: how the MoE layers are laid out."""
        label = f" DP-attention {self.attention_dp}" if self.attention_dp > 1 else ""
        return label + (" EP" if self.expert_parallel else "")


def precision_support(gpu: GPU, precision: str) -> tuple[bool, str | None]:
    """(vLLM can run ``precision`` on ``gpu``, a note on how) - see the module docstring."""
    if precision not in PRECISIONS:
        raise InvalidInputError("precision", precision, f"one of {', '.join(PRECISIONS)}")
    nvidia = gpu.vendor == "nvidia"
    if precision == "fp8":
        if gpu.fp8_dense_tflops is not None:
            return True, None
        if nvidia:
            return True, (
                f"{gpu.gpu_id} has no FP8 tensor cores: vLLM runs FP8 weight-only (Marlin), "
                "matmuls in 16-bit"
            )
        return False, f"vLLM has no FP8 kernels for {gpu.gpu_id} (no FP8 units)"
    if precision == "fp4":
        if gpu.fp4_dense_tflops is not None:
            return True, None
        if nvidia:
            return True, (
                f"{gpu.gpu_id} has no FP4 tensor cores: vLLM runs FP4 weight-only (Marlin), "
                "matmuls in 16-bit"
            )
        return False, (
            f"vLLM has no FP4 kernels for {gpu.gpu_id} (ROCm MXFP4 needs MI350-class GPUs)"
        )
    if precision == "int4":
        return True, "int4 weight-only (AWQ/GPTQ): matmuls in 16-bit"
    return True, None


def check_layout(
    model: ModelCard | ModelArchitecture,
    tp: int,
    pp: int = 1,
    *,
    gpus: int | None = None,
    gpus_per_instance: int | None = None,
) -> None:
    """Raise :class:`InvalidInputError` (naming field, value and what is allowed) when vLLM
    cannot run ``tp`` x ``pp`` (x DP) on ``gpus`` GPUs, ``gpus_per_instance`` an instance."""
    check_parallelism(model, tp, pp)
    if gpus_per_instance is not None and (tp > gpus_per_instance or gpus_per_instance % tp):
        raise InvalidInputError(
            "tp",
            tp,
            f"a divisor of the {gpus_per_instance} GPUs of one instance (TP stays inside it)",
        )
    if gpus is not None:
        if gpus < 1:
            raise InvalidInputError("gpus", gpus, "an integer >= 1")
        if gpus % (tp * pp):
            raise InvalidInputError(
                "tp x pp", tp * pp, f"a divisor of the {gpus} GPUs (TP x PP x DP = GPUs)"
            )


def evaluate_layout(
    model: ModelCard | ModelArchitecture,
    instance: Instance,
    gpu: GPU,
    *,
    nodes: int = 1,
    tp: int,
    pp: int = 1,
    precision: str = "bf16",
    engine: EngineConfig | None = None,
) -> LayoutCandidate:
    """One candidate, with every replica of DP = GPUs / (TP x PP); infeasible ones say why.

    ``engine`` (default: vLLM's own settings) is resolved for the GPU: what it leaves unset is
    what ``vllm serve`` picks there. ``engine.max_model_len`` None: the model's full context.
    """
    if nodes < 1:
        raise InvalidInputError("nodes", nodes, "an integer >= 1")
    if precision not in PRECISIONS:
        raise InvalidInputError("precision", precision, f"one of {', '.join(PRECISIONS)}")
    config = (engine or EngineConfig()).resolved(gpu)
    kv_cache_dtype = config.kv_cache_dtype
    gpus = nodes * instance.gpus
    common = {
        "instance": instance.instance,
        "gpu_id": gpu.gpu_id,
        "nodes": nodes,
        "gpus": gpus,
        "tp": tp,
        "pp": pp,
        "precision": precision,
        "engine": config,
    }
    attention_dp = config.data_parallel_size
    shape = tp * pp * attention_dp
    if tp < 1 or pp < 1:
        raise InvalidInputError("tp" if tp < 1 else "pp", tp if tp < 1 else pp, "an integer >= 1")
    name = f"TP={tp} x PP={pp}" + (f" x DP-attention={attention_dp}" if attention_dp > 1 else "")
    if shape > gpus or gpus % shape:
        where = f"{nodes} x {instance.instance}"
        reason = (
            f"{name} needs {shape} GPUs a replica; {where} has {gpus}"
            if shape > gpus
            else f"{name} = {shape} GPUs a replica does not divide the {gpus} GPUs of {where}"
        )
        return LayoutCandidate(**common, dp=max(gpus // shape, 1), feasible=False, reason=reason)
    dp = gpus // shape
    if engine_family(config.engine) == "trtllm" and gpu.vendor != "nvidia":
        # TensorRT-LLM builds CUDA kernels only (its support matrix lists NVIDIA GPUs alone,
        # docs/source/reference/support-matrix.md, 1.0): an AMD GPU is served by vLLM or
        # SGLang's ROCm builds.
        reason = (
            f"TensorRT-LLM runs on NVIDIA GPUs only; {gpu.gpu_id} is {gpu.vendor.upper()}: "
            "serve it with vLLM or SGLang"
        )
        return LayoutCandidate(**common, dp=dp, feasible=False, reason=reason)
    arch = model.architecture if isinstance(model, ModelCard) else model
    moe_reason = _moe_layout_problem(arch, tp, attention_dp, config.enable_expert_parallel)
    if moe_reason is None and attention_dp > 1 and tp * attention_dp > instance.gpus:
        moe_reason = (
            f"TP={tp} x DP-attention={attention_dp} = {tp * attention_dp} GPUs run each MoE "
            f"layer together and must stay inside one {instance.instance} "
            f"({instance.gpus} GPUs)"
        )
    if moe_reason is not None:
        return LayoutCandidate(**common, dp=dp, feasible=False, reason=moe_reason)
    if tp > instance.gpus or instance.gpus % tp:
        return LayoutCandidate(
            **common,
            dp=dp,
            feasible=False,
            reason=(
                f"TP={tp} must stay inside one instance; {instance.instance} has "
                f"{instance.gpus} GPU{'s' if instance.gpus > 1 else ''}"
            ),
        )
    if shape > instance.gpus and instance.network_gbps is None:
        # A replica spanning instances sends activations between pipeline stages over the
        # network; without its bandwidth no prediction for it can be trusted.
        return LayoutCandidate(
            **common,
            dp=dp,
            feasible=False,
            reason=(
                f"PP={pp} spans {-(-shape // instance.gpus)} x {instance.instance}, whose network "
                "bandwidth between instances is not in the catalog (add network_gbps to "
                "instances.csv)"
            ),
        )
    try:
        check_parallelism(model, tp, pp)
    except InvalidInputError as exc:
        return LayoutCandidate(**common, dp=dp, feasible=False, reason=str(exc))
    supported, note = precision_support(gpu, precision)
    if not supported:
        return LayoutCandidate(**common, dp=dp, feasible=False, reason=note)
    notes = [note] if note else []
    if kv_cache_dtype.startswith("fp8") and gpu.fp8_dense_tflops is None:
        notes.append("fp8 KV cache is stored as fp8 and dequantized for attention")
    plan = plan_memory(model, gpu, tp=tp, pp=pp, precision=precision, engine=config)
    return LayoutCandidate(
        **common,
        dp=dp,
        feasible=plan.fits,
        reason="; ".join(plan.problems) or None,
        notes=notes + plan.warnings,
        memory=plan,
    )


def _moe_layout_problem(
    arch: ModelArchitecture, tp: int, attention_dp: int, expert_parallel: bool
) -> str | None:
    """Why an expert-parallel or attention-data-parallel layout cannot run (None: it can).

    Attention DP ranks share the MoE layers, so a dense model has nothing to share (run
    replicas instead); expert parallelism puts whole experts on the TP x DP GPUs of a stage,
    so that count must divide the experts (vLLM: EP size = TP x DP; SGLang's --ep-size).
    """
    if (attention_dp > 1 or expert_parallel) and not arch.is_moe:
        what = "attention data parallelism" if attention_dp > 1 else "expert parallelism"
        return f"{what} needs an MoE model; this one is dense (run replicas instead)"
    group = tp * attention_dp
    if expert_parallel and arch.num_experts % group:
        return (
            f"expert parallelism over TP x DP = {group} GPUs does not divide the "
            f"{arch.num_experts} experts"
        )
    return None


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def moe_variants(
    arch: ModelArchitecture, base: EngineConfig, gpus_per_instance: int, tp: int
) -> list[EngineConfig]:
    """The MoE layouts tried for a TP size: experts sliced by TP (``base``), whole experts
    (expert parallelism), and attention data parallelism over the rest of the instance with
    expert parallelism (each rank its own requests and KV: the layout that wins for MLA
    models, whose latent TP would replicate). Dense models: ``base`` only."""
    if not arch.is_moe:
        return [base]
    out = [base, base.with_overrides(enable_expert_parallel=True)]
    ranks = gpus_per_instance // tp
    if ranks > 1 and gpus_per_instance % tp == 0:
        out.append(base.with_overrides(enable_expert_parallel=True, data_parallel_size=ranks))
    return out


def spec_variants(
    model: ModelCard | ModelArchitecture, config: EngineConfig, speculative: str, pp: int
) -> list[tuple[EngineConfig, str | None]]:
    """``config`` itself and, for each speculative method the search tries, ``config`` with the
    method and each draft length, or the reason the model, engine or layout cannot run it
    (:func:`planner.perf.speculative.unsupported_reason`; an architecture without a card runs
    n-gram only, having no published draft to name). ``auto`` adds n-gram for a model that
    runs neither MTP nor EAGLE-3 (:func:`planner.perf.speculative.auto_methods`)."""
    out: list[tuple[EngineConfig, str | None]] = [(config, None)]
    methods = searched_methods(speculative, model, config.family)
    if not methods or config.spec_method != "none":
        return out
    for method in methods:
        tokens = (config.num_spec_tokens,) if config.num_spec_tokens else SEARCH_SPEC_TOKENS[method]
        if isinstance(model, ModelCard):
            reason = unsupported_reason(model, config.family, method, pp, config.data_parallel_size)
        else:
            reason = None if method == "ngram" else "no model card to name its draft"
        if reason is not None:
            out.append((config.with_overrides(spec_method=method), reason))
            continue
        for k in tokens:
            out.append((config.with_overrides(spec_method=method, num_spec_tokens=k), None))
    return out


def _refused(
    instance: Instance,
    nodes: int,
    tp: int,
    pp: int,
    precision: str,
    engine: EngineConfig,
    reason: str,
) -> LayoutCandidate:
    """A layout listed with the reason it is not tried (nothing was evaluated for it)."""
    gpus = nodes * instance.gpus
    return LayoutCandidate(
        instance=instance.instance,
        gpu_id=instance.gpu_id,
        nodes=nodes,
        gpus=gpus,
        tp=tp,
        pp=pp,
        dp=max(1, gpus // (tp * pp * engine.data_parallel_size)),
        precision=precision,
        engine=engine,
        feasible=False,
        reason=reason,
    )


def enumerate_layouts(
    catalog: Catalog,
    model: ModelCard | ModelArchitecture,
    *,
    instances: list[str] | None = None,
    max_nodes: int = 4,
    precisions: Sequence[str] = ("bf16",),
    kv_cache_dtypes: Sequence[str] | None = None,
    engine: EngineConfig | None = None,
    nodes: Iterable[int] | None = None,
    moe_layouts: bool = True,
    speculative: str = "off",
) -> list[LayoutCandidate]:
    """Every (instance, nodes, TP, PP, DP, precision, KV dtype) with TP x PP x DP = GPUs, and
    for an MoE model (``moe_layouts``) the expert-parallel and attention-data-parallel variants
    of each TP size (:func:`moe_variants`).

    ``engine`` is the settings every candidate is judged at (its ``max_model_len`` above all);
    ``kv_cache_dtypes`` (default: the engine's) are tried in turn. ``nodes`` (default
    1..``max_nodes``) fixes the node counts tried. Infeasible candidates are kept with their
    reason; TP values that do not divide the GPU count cannot form a layout and are not listed
    (use :func:`evaluate_layout` for a specific shape).

    ``speculative`` (off, auto or a method, :func:`planner.perf.speculative.searched_methods`)
    adds each layout with each speculative method and draft length the model and engine run
    (``engine.num_spec_tokens`` when stated, else the method's :data:`SEARCH_SPEC_TOKENS`);
    where they cannot run, the layout is listed with the reason.
    """
    if max_nodes < 1:
        raise InvalidInputError("max_nodes", max_nodes, "an integer >= 1")
    names = list(instances) if instances is not None else sorted(catalog.instances)
    node_counts = sorted(set(nodes)) if nodes is not None else list(range(1, max_nodes + 1))
    for count in node_counts:
        if count < 1:
            raise InvalidInputError("nodes", count, "integers >= 1")
    base = engine or EngineConfig()
    for kv_dtype in kv_cache_dtypes or ():
        kv_bytes_per_element(kv_dtype)  # validates
    configs = [
        base.with_overrides(kv_cache_dtype=kv_dtype) for kv_dtype in kv_cache_dtypes or ()
    ] or [base]
    arch = model.architecture if isinstance(model, ModelCard) else model
    candidates: list[LayoutCandidate] = []
    for name in names:
        instance = catalog.instance(name)
        gpu = catalog.gpu(instance.gpu_id)
        for node_count in node_counts:
            gpus = node_count * instance.gpus
            for tp in _divisors(gpus):
                variants = [
                    variant
                    for config in configs
                    for variant in (
                        moe_variants(arch, config, instance.gpus, tp) if moe_layouts else [config]
                    )
                ]
                for pp in _divisors(gpus // tp):
                    for precision in precisions:
                        for config in variants:
                            if gpus % (tp * pp * config.data_parallel_size):
                                continue
                            for spec_config, reason in spec_variants(
                                model, config, speculative, pp
                            ):
                                if reason is not None:
                                    candidates.append(
                                        _refused(instance, node_count, tp, pp, precision,
                                                 spec_config, reason)
                                    )  # fmt: skip
                                    continue
                                candidates.append(
                                    evaluate_layout(
                                        model,
                                        instance,
                                        gpu,
                                        nodes=node_count,
                                        tp=tp,
                                        pp=pp,
                                        precision=precision,
                                        engine=spec_config,
                                    )
                                )
    return candidates


__all__ = [
    "LayoutCandidate",
    "check_layout",
    "enumerate_layouts",
    "evaluate_layout",
    "moe_variants",
    "precision_support",
    "spec_variants",
]
