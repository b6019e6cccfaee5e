"""Engine settings of one replica: one typed object, and the only place their defaults live.

:class:`EngineConfig` is what a plan, a layout, the memory planner, the performance model's
scenario, the ``vllm serve`` command and the simulated server all take. A field left ``None``
(``max_num_seqs``, ``max_num_batched_tokens``, ``block_size``) means "what the engine picks on
the GPU"; :func:`engine_defaults` and :meth:`EngineConfig.resolved` fill them in, so a resolved
config says exactly what the engine runs with.

Defaults and where they come from:

- vLLM ``vllm serve`` (vllm/engine/arg_utils.py, V1, OpenAI API server usage context): GPUs
  with >= 70 GiB that are not A100s get max_num_seqs 1024 and max_num_batched_tokens 8192, the
  others 256 / 2048. vLLM's offline ``LLM`` class (``vllm bench throughput``) keeps the seqs and
  takes 16384 batched tokens on the large GPUs, 8192 on the others
  (:func:`vllm_offline_defaults`: what a measured offline-batch row ran with).
  gpu_memory_utilization 0.9, KV block 16 tokens, chunked prefill on (V1), prefix caching off
  unless asked, CUDA graphs on (enforce_eager off).
- TensorRT-LLM (LLM API / trtllm-bench): max_batch_size 2048, max_num_tokens 8192,
  tokens_per_block 32, and the KV pool is ``free_gpu_memory_fraction`` 0.9 of the memory left
  after the weights (``KvCacheConfig``). A server (``trtllm-serve``, the LLM API) runs without
  chunked prefill (``enable_chunked_prefill`` False in tensorrt_llm/llmapi/llm_args.py,
  ``BaseLlmArgs``, 1.x): a prompt is scheduled whole, after the running generations' tokens,
  when it fits what they leave of max_num_tokens; ``trtllm-bench throughput`` (entrypoint
  ``offline``) chunks (``--enable_chunked_context``, default on, tensorrt_llm/bench/benchmark/
  throughput.py).
- SGLang 0.5.x (python/sglang/srt/server_args.py, ``_handle_gpu_memory_settings`` and
  ``_handle_data_parallelism``; :func:`sglang_defaults`): chunked prefill 2048 tokens on GPUs
  under 35 GiB, 4096 under 60 GiB, 8192 under 160 GiB (A100 80 GB, H100, H200), 16384 above
  (B200, MI300X), divided by the DP size with DP attention; max_running_requests from its
  request pool, at least 2048; radix (prefix) cache on; ``mem_fraction_static`` and the CUDA
  graph batch limit depend on the layout (:func:`sglang_runtime`).
- vLLM's async scheduling (``--async-scheduling``; ``--no-async-scheduling`` turns it off):
  the engine core schedules step n + 1 while the GPU runs step n, so the scheduler's and the
  input preparation's CPU time no longer sits between two steps. On by default from vLLM 0.14
  (release notes of v0.14.0, 2026-01-20, "Async scheduling is now enabled by default", pull
  request 27614), except with pipeline parallelism and with speculation other than EAGLE/MTP;
  opt-in since 0.10 (pull request 19970, 2025-06). :func:`vllm_schedules_async`.

Expert and attention data parallelism (MoE models): ``enable_expert_parallel`` shards whole
experts over the ranks instead of slicing each one by TP (vLLM ``--enable-expert-parallel``,
SGLang ``--ep-size``); ``data_parallel_size`` > 1 runs attention data-parallel inside one engine
(vLLM ``--data-parallel-size``, SGLang ``--enable-dp-attention``), each rank holding only its own
requests' KV. Replicas behind a load balancer are not counted here (a layout's DP is).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from planner.catalog.schema import GPU, KV_CACHE_DTYPES, KvCacheDtype
from planner.errors import InvalidInputError
from planner.memo import memoised

GIB = 2**30
_RELEASE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?")


def release_number(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of a release as an engine or a row states it (``0.19.0`` -> (0, 19),
    ``v0.5.6.post1`` -> (0, 5)); None when it names no number (``NIM``, a placeholder)."""
    match = _RELEASE.match(version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def release_patch_number(version: str | None) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a release (``0.5.6.post1`` -> (0, 5, 6), ``0.19`` -> (0, 19,
    0)); None when it names no number, as :func:`release_number`."""
    match = _RELEASE.match(version or "")
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def release_reaches(engine: EngineConfig, first: tuple[int, int, int]) -> bool:
    """Whether ``engine`` runs ``first`` or a later release: the pinned release (no version)
    does, as the newest rules say; a release without a number (a packaged variant) does not."""
    release = release_patch_number(engine.version)
    if release is None:
        return engine.version is None
    return release >= first


#: speculative decoding methods (planner.perf.speculative holds their arithmetic)
SpecMethod = Literal["none", "mtp", "eagle3", "ngram"]
SPEC_LABELS: dict[str, str] = {"none": "", "mtp": "MTP", "eagle3": "EAGLE-3", "ngram": "n-gram"}
#: what a recommendation searches: off, one method, or auto (planner.perf.speculative)
SpeculativeChoice = Literal["off", "auto", "mtp", "eagle3", "ngram"]
SPECULATIVE_CHOICES: tuple[str, ...] = ("off", "auto", "mtp", "eagle3", "ngram")
#: How the engine is started: its own server (``vllm serve``, ``sglang.launch_server``,
#: ``trtllm-serve``), vLLM's offline ``LLM`` class (``vllm bench throughput``), which picks
#: larger batch budgets, or (TensorRT-LLM only) Triton Inference Server's C++ front end with the
#: TensorRT-LLM backend, whose requests skip the Python server's fixed path
#: (:func:`planner.perf.scenario.has_request_path`).
Entrypoint = Literal["serve", "offline", "triton"]

#: engine name (the planner's, :data:`ENGINE_SPELLINGS`) -> family whose scheduler, defaults
#: and coefficients it uses.
ENGINE_FAMILIES: dict[str, str] = {
    "vllm": "vllm",
    "tensorrt-llm": "trtllm",
    "nim-tensorrt-llm": "trtllm",
    "sglang": "sglang",
}
FAMILIES: tuple[str, ...] = ("vllm", "trtllm", "sglang")

#: vLLM's gpu_memory_utilization default (the share of the GPU its budget may use).
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
#: TensorRT-LLM ``KvCacheConfig.free_gpu_memory_fraction``: share of the memory left after the
#: weights that becomes the KV pool.
TRTLLM_FREE_GPU_MEMORY_FRACTION = 0.9
#: KV block (page) size in tokens of each family (vLLM 16; TensorRT-LLM tokens_per_block 32).
BLOCK_SIZES: dict[str, int] = {"vllm": 16, "trtllm": 32, "sglang": 16}
#: (max_num_seqs, max_num_batched_tokens) of ``vllm serve`` on small GPUs (and A100s).
VLLM_SERVE_SMALL_GPU = (256, 2048)
#: ... on GPUs with >= 70 GiB that are not A100s.
VLLM_SERVE_LARGE_GPU = (1024, 8192)
#: TensorRT-LLM LLM API / trtllm-bench: max_batch_size, max_num_tokens.
TRTLLM_LIMITS = (2048, 8192)


#: other spellings of an engine's name -> the name the planner uses for it (a spelling left
#: out would count as a packaged variant with releases of its own:
#: :func:`planner.perf.calibration.version_key`)
ENGINE_SPELLINGS: dict[str, str] = {
    "trtllm": "tensorrt-llm",
    "tensorrt_llm": "tensorrt-llm",
    "trt-llm": "tensorrt-llm",
    "trt": "tensorrt-llm",
    "nim": "nim-tensorrt-llm",
}


def canonical_engine(engine: str) -> str:
    """The planner's name for an engine name (``TRT-LLM`` -> ``tensorrt-llm``)."""
    name = engine.strip().lower()
    return ENGINE_SPELLINGS.get(name, name)


def engine_family(engine: str) -> str:
    """The family an engine name belongs to (``nim-tensorrt-llm`` -> ``trtllm``)."""
    name = canonical_engine(engine)
    return ENGINE_FAMILIES.get(name, name)


def check_engine(engine: str) -> str:
    """The engine's family, or InvalidInputError naming the engines that are known."""
    family = engine_family(engine)
    if family not in FAMILIES:
        known = ", ".join(sorted(set(ENGINE_FAMILIES) | set(ENGINE_SPELLINGS)))
        raise InvalidInputError("engine", engine, f"one of {known}")
    return family


class EngineConfig(BaseModel):
    """Everything an engine is started with that moves memory, throughput or latency.

    ``max_model_len`` None: the longest request of the workload (a scenario) or the model's
    ``max_position_embeddings`` (the memory planner with no workload). ``entrypoint``: a server
    or vLLM's offline class; it only changes the defaults of the batch budget.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: str = "vllm"
    version: str | None = None
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    gpu_memory_utilization: float = Field(default=DEFAULT_GPU_MEMORY_UTILIZATION, gt=0, le=1)
    max_model_len: int | None = Field(default=None, ge=1)
    kv_cache_dtype: KvCacheDtype = "auto"
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    enforce_eager: bool = False
    block_size: int | None = Field(default=None, ge=1)
    enable_expert_parallel: bool = False
    data_parallel_size: int = Field(default=1, ge=1)
    entrypoint: Entrypoint = "serve"
    #: speculative decoding (planner.perf.speculative): the draft method and its draft tokens
    #: a step (None: the engine's default for the method)
    spec_method: SpecMethod = "none"
    num_spec_tokens: int | None = Field(default=None, ge=1)
    #: vLLM's ``--async-scheduling`` (True) or ``--no-async-scheduling`` (False); None: what
    #: the release does by default (:func:`vllm_schedules_async`)
    async_scheduling: bool | None = None

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, engine: str) -> str:
        try:
            check_engine(engine)
        except InvalidInputError as exc:
            raise ValueError(exc.allowed) from None  # pydantic names the field and the value
        return engine

    @field_validator("entrypoint")
    @classmethod
    def _triton_serves_tensorrt_llm(cls, entrypoint: str, info: ValidationInfo) -> str:
        engine = info.data.get("engine")
        if entrypoint == "triton" and engine is not None and engine_family(engine) != "trtllm":
            raise ValueError(f"triton is Triton's TensorRT-LLM backend, not a {engine} server")
        return entrypoint

    @classmethod
    def of(cls, **values: object) -> EngineConfig:
        """Validated from loose values (a form, a file); a bad one raises InvalidInputError
        naming the field, the value and what is allowed."""
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "engine settings"
            message = _ALLOWED.get(field) or str(first["msg"]).removeprefix("Value error, ")
            raise InvalidInputError(field, values.get(field), message) from None

    @property
    def family(self) -> str:
        return engine_family(self.engine)

    @property
    def memory_stated(self) -> bool:
        """Whether the config states its memory share (``gpu_memory_utilization``, which an
        SGLang plan launches as ``--mem-fraction-static`` and a TensorRT-LLM one as
        ``--kv_cache_free_gpu_memory_fraction``) rather than leaving it to the engine."""
        return "gpu_memory_utilization" in self.model_fields_set

    @property
    def release_number(self) -> tuple[int, int] | None:
        """(major, minor) of ``version`` (:func:`release_number`)."""
        return release_number(self.version)

    @property
    def is_resolved(self) -> bool:
        return None not in (self.max_num_seqs, self.max_num_batched_tokens, self.block_size)

    @property
    def kv_bytes_per_element(self) -> float:
        """``auto`` keeps the model's 16-bit dtype; fp8 halves it."""
        return 1.0 if self.kv_cache_dtype.startswith("fp8") else 2.0

    def resolved(self, gpu: GPU) -> EngineConfig:
        """This config with what it leaves to the engine filled in for ``gpu``."""
        if self.is_resolved:
            return self
        defaults = engine_defaults(
            self.engine,
            gpu,
            entrypoint=self.entrypoint,
            data_parallel_size=self.data_parallel_size,
            version=self.version,
        )
        updates: dict[str, object] = {
            "max_num_seqs": self.max_num_seqs or defaults.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens
            or defaults.max_num_batched_tokens,
            "block_size": self.block_size or defaults.block_size,
        }
        if "enable_prefix_caching" not in self.model_fields_set:
            updates["enable_prefix_caching"] = defaults.enable_prefix_caching
        if "enable_chunked_prefill" not in self.model_fields_set:
            updates["enable_chunked_prefill"] = defaults.enable_chunked_prefill
        return self.model_copy(update=updates)

    def with_overrides(self, **values: object) -> EngineConfig:
        """A copy with ``values`` set, validated as :meth:`of` validates."""
        return type(self).of(**{**self.model_dump(), **values})

    @property
    def label(self) -> str:
        """``seqs 256, batch 8192 tok`` and what differs from the engine's usual switches."""
        parts = [f"seqs {self.max_num_seqs or 'default'}"]
        parts.append(f"batch {self.max_num_batched_tokens or 'default'} tok")
        if not self.enable_chunked_prefill:
            parts.append("no chunked prefill")
        if self.enable_prefix_caching:
            parts.append("prefix caching")
        if self.enforce_eager:
            parts.append("eager")
        if self.enable_expert_parallel:
            parts.append("expert parallel")
        if self.data_parallel_size > 1:
            parts.append(f"attention DP {self.data_parallel_size}")
        if self.spec_method != "none":
            k = f" k={self.num_spec_tokens}" if self.num_spec_tokens else ""
            parts.append(f"{SPEC_LABELS[self.spec_method]}{k}")
        if self.async_scheduling is not None:  # stated against the release's default
            parts.append("async scheduling" if self.async_scheduling else "no async scheduling")
        return ", ".join(parts)


_WHOLE = "an integer >= 1"
#: What each setting allows, in the words an error shows.
_ALLOWED: dict[str, str] = {
    "max_num_seqs": _WHOLE,
    "max_num_batched_tokens": _WHOLE,
    "max_model_len": "a token count >= 1",
    "block_size": _WHOLE,
    "data_parallel_size": _WHOLE,
    "gpu_memory_utilization": "a fraction in (0, 1]",
    "kv_cache_dtype": f"one of {', '.join(KV_CACHE_DTYPES)}",
    "entrypoint": "serve, offline or triton (Triton's TensorRT-LLM backend: tensorrt-llm only)",
    "spec_method": "one of none, mtp, eagle3, ngram",
    "num_spec_tokens": "an integer >= 1 (draft tokens a step)",
    "async_scheduling": "true or false (vLLM's --async-scheduling; blank: the release's default)",
}


#: the first vLLM release that schedules asynchronously unless told not to (module docstring)
VLLM_ASYNC_DEFAULT_RELEASE = (0, 14)
#: speculation methods vLLM 0.14+ keeps async scheduling on with (the others turn it off)
VLLM_ASYNC_SPEC_METHODS = frozenset({"none", "mtp", "eagle3"})


def vllm_schedules_async(engine: EngineConfig, *, pp: int = 1) -> bool:
    """Whether a vLLM engine overlaps its scheduling with the GPU's step (module docstring):
    the stated ``async_scheduling``, else the release's default, on from 0.14 (``version``
    None is the pinned release, :mod:`planner.deploy.engines`, which does). Off with pipeline
    parallelism and with n-gram speculation, stated or not, as vLLM switches it off there; a
    release before 0.14, or one whose number cannot be read, is off unless stated.
    Other engines: False. SGLang's overlap scheduler is on unless it speculates, and its
    family's fitted per-step terms hold it; TensorRT-LLM's (its PyTorch backend's, the default
    from 1.0) is left to its family's terms too: as this term, held out by source, it moved
    throughput 24.7 -> 24.1% but every other fold a point the other way (README)."""
    if engine.family != "vllm" or pp > 1 or engine.spec_method not in VLLM_ASYNC_SPEC_METHODS:
        return False
    if engine.async_scheduling is not None:
        return engine.async_scheduling
    if engine.version is None:
        return True
    release = engine.release_number
    return release is not None and release >= VLLM_ASYNC_DEFAULT_RELEASE


#: vLLM: the largest all-reduced tensor (MiB) its fused kernel takes, by TP size, on Hopper
#: (sm90), B200/GB200 (sm100) and B300/GB300 (sm103): ``FI_ALLREDUCE_FUSION_MAX_SIZE_MB`` in
#: vllm/compilation/passes/fusion/allreduce_rms_fusion.py, the same in the 0.17.0 to 0.22.0
#: wheels but for sm103's row, which came with 0.19.0 (:func:`fused_allreduce_tokens`)
VLLM_AR_FUSION_MAX_MIB: dict[str, dict[int, float]] = {
    "sm90": {2: 64, 4: 2, 8: 0.5},
    "sm100": {2: 64, 4: 32, 8: 1},
    "sm103": {2: 64, 4: 64, 8: 2},
}
#: SGLang fuses a call of up to this many tokens (``FUSE_ALLREDUCE_MAX_BATCH_SIZE``,
#: python/sglang/srt/layers/communicator.py, 0.5.4 to 0.5.13)
SGLANG_AR_FUSION_MAX_TOKENS = 2048
#: SGLang: from which release each model type's checkpoint architecture is on the list that
#: turns the fusion on (``_handle_model_specific_adjustments`` in
#: python/sglang/srt/server_args.py, read in each release's wheel): GptOssForCausalLM from
#: 0.5.1, DeepseekV3ForCausalLM (DeepSeek-V3/R1, Kimi-K2) from 0.5.4, Glm4MoeForCausalLM and
#: Qwen3MoeForCausalLM from 0.5.7, KimiK25ForConditionalGeneration from 0.5.9,
#: Qwen3_5MoeForConditionalGeneration from 0.5.10, Qwen3NextForCausalLM, GlmMoeDsaForCausalLM
#: and DeepseekV32ForCausalLM (DeepSeek-V3.2; the list read again in the 0.5.10.post1, 0.5.11,
#: 0.5.12 and 0.5.13 wheels, 2026-12-07) from 0.5.11
SGLANG_AR_FUSION_MODEL_TYPES: dict[str, tuple[int, int, int]] = {
    "gpt_oss": (0, 5, 1),
    "deepseek_v3": (0, 5, 4),
    "kimi_k2": (0, 5, 4),
    "glm4_moe": (0, 5, 7),
    "qwen3_moe": (0, 5, 7),
    "kimi_k25": (0, 5, 9),
    "qwen3_5_moe": (0, 5, 10),
    "qwen3_next": (0, 5, 11),
    "glm_moe_dsa": (0, 5, 11),
    "deepseek_v32": (0, 5, 11),
}
#: the first SGLang release that fuses on Hopper too (before it: data-center Blackwell only)
SGLANG_AR_FUSION_HOPPER_RELEASE = (0, 5, 7)


#: SGLang's MoE runner on data-center Blackwell (``moe_runner_backend`` auto, set per model
#: architecture and checkpoint quantisation in python/sglang/srt/server_args.py; read in the
#: 0.5.0rc2-0.5.9 wheels from PyPI, 2026-12-06): the model types whose routed experts it hands
#: to FlashInfer's TensorRT-LLM kernels (``flashinfer_trtllm``; gpt-oss's MXFP4 experts to
#: ``flashinfer_mxfp4``), by precision, from the first release that does. DeepSeek-V3-style models
#: (Kimi-K2 shares the architecture) NVFP4 from 0.5.4 and FP8 from 0.5.5, Kimi-K2.5 and GLM-5
#: (their architectures joined that branch in 0.5.9) FP8 and NVFP4 from 0.5.9, Qwen3 MoE and
#: Qwen3-Next FP8 and NVFP4 from 0.5.6 and unquantised (BF16) from 0.5.8, Qwen3.5 MoE (its
#: architecture joined their branch in 0.5.9) FP8, NVFP4 and BF16 from 0.5.9, GLM-4 MoE NVFP4
#: from 0.5.8, gpt-oss MXFP4 from 0.5.0 (the Qwen branches read again in the 0.5.6 to 0.5.13
#: wheels, 2026-12-07: 0.5.8 added ``or self.quantization is None``), and Kimi-K2 and
#: Kimi-K2.5's own INT4 checkpoints (compressed-tensors, 4-bit integer weights in groups of 32:
#: ``is_kimi_k2_k25_thinking_int4``) from 0.5.10rc0 (read in the 0.5.9, 0.5.10rc0 and 0.5.10
#: wheels, 2026-12-07).
#: Every other model, and every model on Hopper, runs SGLang's Triton fused MoE. Llama 4 (FP8
#: from 0.5.5 when its checkpoint loads as ``fp8``/``modelopt_fp8``) is left out: Meta's FP8
#: checkpoints name another quantisation method, which the rule does not take.
SGLANG_TRTLLM_MOE: dict[str, dict[str, tuple[int, int, int]]] = {
    "deepseek_v3": {"fp4": (0, 5, 4), "fp8": (0, 5, 5)},
    "kimi_k2": {"fp4": (0, 5, 4), "fp8": (0, 5, 5), "int4": (0, 5, 10)},
    "kimi_k25": {"fp4": (0, 5, 9), "fp8": (0, 5, 9), "int4": (0, 5, 10)},
    "glm_moe_dsa": {"fp4": (0, 5, 9), "fp8": (0, 5, 9)},
    "qwen3_moe": {"fp8": (0, 5, 6), "fp4": (0, 5, 6), "bf16": (0, 5, 8), "fp16": (0, 5, 8)},
    "qwen3_next": {"fp8": (0, 5, 6), "fp4": (0, 5, 6), "bf16": (0, 5, 8), "fp16": (0, 5, 8)},
    "qwen3_5_moe": {"fp8": (0, 5, 9), "fp4": (0, 5, 9), "bf16": (0, 5, 9), "fp16": (0, 5, 9)},
    "glm4_moe": {"fp4": (0, 5, 8)},
    "gpt_oss": {"fp4": (0, 5, 0)},
}


def sglang_trtllm_moe(engine: EngineConfig, gpu: GPU, *, model_type: str, precision: str) -> bool:
    """Whether SGLang runs the model's routed experts in FlashInfer's TensorRT-LLM kernels
    rather than its Triton fused MoE (:data:`SGLANG_TRTLLM_MOE`; ``is_sm100_supported``: B200,
    B300 and the GB parts). ``version`` None is the pinned release, which does as the newest
    rules say; an unnumbered release does not."""
    if engine.family != "sglang" or nvidia_compute_capability(gpu) not in ("sm100", "sm103"):
        return False
    first = SGLANG_TRTLLM_MOE.get(model_type, {}).get(precision)
    return first is not None and release_reaches(engine, first)


#: the first SGLang release that runs prefill (extend) steps under piecewise CUDA graphs by
#: default: 0.5.10rc0 (PyPI, 2026-03-27) turned ``--enable-piecewise-cuda-graph`` (off through
#: 0.5.9) into ``--disable-piecewise-cuda-graph`` (``ServerArgs._handle_piecewise_cuda_graph``,
#: python/sglang/srt/server_args.py, read in the 0.5.9, 0.5.10rc0 and 0.5.10.post1 wheels,
#: 2026-12-07)
SGLANG_PIECEWISE_GRAPH_RELEASE = (0, 5, 10)
#: model types whose architecture keeps SGLang 0.5.10's prefill steps eager: the ones it lists
#: (``piecewise_cuda_graph_disabled_model_archs`` in python/sglang/srt/configs/model_config.py:
#: DeepseekV32, Qwen3Next, GlmMoeDsa) and the multimodal classes among the catalog's
#: (Llama4ForConditionalGeneration, KimiK25ForConditionalGeneration,
#: Qwen3_5MoeForConditionalGeneration: ``multimodal_model_archs``, same file)
SGLANG_EAGER_PREFILL_MODEL_TYPES = frozenset(
    {"deepseek_v32", "qwen3_next", "glm_moe_dsa", "llama4", "kimi_k25", "qwen3_5_moe"}
)
#: an MLA model's piecewise graphs stop at 2,048 tokens (the kernels they would dispatch past it
#: differ from the eager path's; ``piecewise_cuda_graph_max_tokens``, server_args.py)
SGLANG_MLA_PIECEWISE_MAX_TOKENS = 2048


def sglang_prefill_graph_tokens(
    engine: EngineConfig,
    gpu: GPU,
    *,
    model_type: str,
    mla: bool,
    pp: int,
    dp: int,
    speculative: bool,
) -> int | None:
    """Up to how many tokens SGLang runs a prefill step under piecewise CUDA graphs (the
    kernels between attention calls replayed from captured graphs, not launched one by one from
    Python); None: every prefill step runs eagerly, as SGLang's did before 0.5.10.

    From 0.5.10 (:data:`SGLANG_PIECEWISE_GRAPH_RELEASE`) by default on CUDA GPUs unless the
    server speculates, runs attention data parallelism (``dp`` > 1) or pipeline parallelism, or
    the model's architecture is one SGLang keeps eager
    (:data:`SGLANG_EAGER_PREFILL_MODEL_TYPES`). A deployment run without CUDA graphs
    (``enforce_eager``) gets none either: the rule does not follow how SGLang's own
    ``--disable-cuda-graph`` treats these graphs. The limit is the chunked-prefill size
    (``max_num_batched_tokens``), 2,048 for MLA models (``piecewise_cuda_graph_max_tokens``);
    a step of more tokens runs eagerly (``PiecewiseCudaGraphRunner.can_run``). ``version``
    None is the pinned release, which does as the newest rules say."""
    if engine.family != "sglang" or gpu.vendor != "nvidia" or engine.enforce_eager:
        return None
    if pp > 1 or dp > 1 or speculative or model_type in SGLANG_EAGER_PREFILL_MODEL_TYPES:
        return None
    if not release_reaches(engine, SGLANG_PIECEWISE_GRAPH_RELEASE):
        return None
    chunk = engine.max_num_batched_tokens
    if mla:
        return min(chunk or SGLANG_MLA_PIECEWISE_MAX_TOKENS, SGLANG_MLA_PIECEWISE_MAX_TOKENS)
    return chunk


#: the first SGLang release that all-reduces MiniMax-M2's query and key sums of squares in one
#: call (``MiniMaxM2RMSNormTP.forward_qk``, python/sglang/srt/models/minimax_m2.py, in the 0.5.8
#: wheel); 0.5.7's ``q_norm`` and ``k_norm`` each all-reduced their own (read 2026-12-07)
SGLANG_QK_NORM_ONE_CALL_RELEASE = (0, 5, 8)


def qk_norm_allreduces(engine: EngineConfig, *, tp: int) -> int:
    """All-reduces a layer's query/key norm adds when the norm spans every head (MiniMax-M2's
    ``qk_norm_type`` ``per_layer``) and the heads are split over ``tp`` > 1 ranks: each rank
    holds a slice of the normalised width, so its sums of squares are reduced across the
    ranks before the norm applies, a call of a few bytes a token, bound by the call's latency.
    One: vLLM's ``MiniMaxText01RMSNormTP.forward_qk``
    (vllm/model_executor/layers/mamba/linear_attn.py, read 2026-12-07) reduces both variances
    stacked, as SGLang's ``forward_qk`` does from 0.5.8
    (:data:`SGLANG_QK_NORM_ONE_CALL_RELEASE`; an engine whose code was not read is given the one
    the norm needs). Two on SGLang before 0.5.8."""
    if tp < 2:
        return 0
    if engine.family == "sglang":
        release = release_patch_number(engine.version)
        if release is not None and release < SGLANG_QK_NORM_ONE_CALL_RELEASE:
            return 2
    return 1


def nvidia_compute_capability(gpu: GPU) -> str | None:
    """``sm90`` (Hopper), ``sm100`` (B200, GB200), ``sm103`` (B300, GB300), None otherwise
    (other vendors, Ampere, Ada, workstation Blackwell): from the catalog's fields, FP8 tensor
    cores and HBM for Hopper and up, FP4 ones for Blackwell."""
    if gpu.vendor != "nvidia" or gpu.fp8_dense_tflops is None:
        return None
    if not (gpu.memory_type or "").upper().startswith("HBM"):
        return None
    if gpu.fp4_dense_tflops is None:
        return "sm90"
    return "sm103" if gpu.gpu_id.upper() in ("B300", "GB300") else "sm100"


def fused_allreduce_tokens(
    engine: EngineConfig,
    gpu: GPU,
    *,
    tp: int,
    pp: int,
    dp: int,
    hidden_size: int,
    model_type: str,
    single_node: bool = True,
) -> int | None:
    """Up to how many tokens a step's tensor-parallel all-reduces run fused with the residual
    add and RMSNorm after them (one FlashInfer kernel a call in place of the all-reduce's and
    the norm's); None: never. Both engines fuse only over NVLink (the deployment checks the
    link) and, here, only by default; read in each release's wheel from PyPI (2026-12-06).

    vLLM (``enable_allreduce_rms_fusion`` in vllm/config/vllm.py, on at its default -O2; off
    in every level of 0.16.0): from 0.17.0 with TP > 1 on sm90 or sm100 and neither data nor
    pipeline parallelism; from 0.19.0 on sm103 too; from 0.21.0 with data and pipeline
    parallelism too. A tensor larger than the kernel's limit (:data:`VLLM_AR_FUSION_MAX_MIB`:
    0.5 MiB at TP 8 on Hopper, 32 tokens of an 8,192-wide hidden state) takes the plain
    all-reduce: prefill steps do. ``enforce_eager`` turns torch.compile off, and the fusion
    with it ("Enforce eager set, disabling torch.compile and CUDAGraphs").

    SGLang sets ``enable_flashinfer_allreduce_fusion`` for the architectures of
    :data:`SGLANG_AR_FUSION_MODEL_TYPES` from the release each joined the list, with TP > 1
    and without DP attention, on data-center Blackwell and from 0.5.7 on Hopper too, on one
    node from 0.5.6; a call of up to 2,048 tokens fuses.

    ``version`` None is the engine's pinned release, which fuses as the newest rules say; an
    unnumbered release does not. TensorRT-LLM: None (its fusions are its family's terms)."""
    if tp < 2:
        return None
    sm = nvidia_compute_capability(gpu)
    if sm is None:
        return None
    release = release_patch_number(engine.version)
    if engine.version is not None and release is None:
        return None
    if engine.family == "vllm":
        if engine.enforce_eager or tp not in (2, 4, 8):
            return None
        if release is not None:
            if release[:2] < (0, 17) or (sm == "sm103" and release[:2] < (0, 19)):
                return None
            if (dp > 1 or pp > 1) and release[:2] < (0, 21):
                return None
        return int(VLLM_AR_FUSION_MAX_MIB[sm][tp] * 1024 * 1024 // (2 * hidden_size))
    if engine.family == "sglang":
        first = SGLANG_AR_FUSION_MODEL_TYPES.get(model_type)
        if first is None or dp > 1:
            return None
        if release is not None:
            if release < first or (release >= (0, 5, 6) and not single_node):
                return None
            if sm == "sm90" and release < SGLANG_AR_FUSION_HOPPER_RELEASE:
                return None
        elif not single_node:
            return None
        return SGLANG_AR_FUSION_MAX_TOKENS
    return None


def vllm_serve_defaults(gpu: GPU) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) ``vllm serve`` picks for this GPU."""
    large = gpu.memory_bytes >= 70 * GIB and "a100" not in gpu.gpu_id.lower()
    return VLLM_SERVE_LARGE_GPU if large else VLLM_SERVE_SMALL_GPU


def vllm_offline_defaults(gpu: GPU) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) of vLLM's offline ``LLM`` class on this GPU."""
    seqs, batched = vllm_serve_defaults(gpu)
    return seqs, 16384 if batched >= 8192 else 8192


def engine_defaults(
    engine: str,
    gpu: GPU,
    *,
    entrypoint: Entrypoint = "serve",
    data_parallel_size: int = 1,
    version: str | None = None,
) -> EngineConfig:
    """The resolved config ``engine`` starts with on ``gpu`` when nothing is set; ``version``
    is the release (None: the pinned one), which decides SGLang's chunked prefill before 0.5.3
    (:func:`sglang_defaults`)."""
    release = release_patch_number(version) if check_engine(engine) == "sglang" else None
    # asked for every candidate of a search: kept with the (frozen) GPU
    return memoised(
        gpu,
        ("engine defaults", engine, entrypoint, data_parallel_size, release),
        lambda: _engine_defaults(engine, gpu, entrypoint, data_parallel_size, release),
    )


def _engine_defaults(
    engine: str,
    gpu: GPU,
    entrypoint: Entrypoint,
    data_parallel_size: int,
    release: tuple[int, int, int] | None,
) -> EngineConfig:
    family = check_engine(engine)
    prefix_caching = False
    if family == "trtllm":
        seqs, batched = TRTLLM_LIMITS
    elif family == "sglang":
        sg = sglang_defaults(gpu, data_parallel_size, release=release)
        seqs, batched, prefix_caching = sg.max_running_requests, sg.chunked_prefill_size, True
    elif entrypoint == "offline":
        seqs, batched = vllm_offline_defaults(gpu)
    else:
        seqs, batched = vllm_serve_defaults(gpu)
    return EngineConfig(
        engine=engine,
        entrypoint=entrypoint,
        max_num_seqs=seqs,
        max_num_batched_tokens=batched,
        block_size=BLOCK_SIZES[family],
        enable_prefix_caching=prefix_caching,
        # TensorRT-LLM's server (LLM API) leaves context chunking off, trtllm-bench turns it on
        enable_chunked_prefill=family != "trtllm" or entrypoint == "offline",
        data_parallel_size=data_parallel_size,
    )


#: SGLang's max_running_requests when not set, before the KV pool is known: the lower bound of
#: its request pool (:func:`sglang_request_pool`)
SGLANG_MAX_RUNNING_REQUESTS = 2048
#: the upper bound of that pool
SGLANG_MAX_REQUEST_POOL = 4096
#: the first release that also caps an unset pool at half the KV tokens and a stated
#: ``--max-running-requests`` (per DP rank) at the pool
SGLANG_REQUEST_POOL_CAP_RELEASE = (0, 5, 10)
#: SGLang's initial new-token ratio (SGLANG_INIT_NEW_TOKEN_RATIO) x schedule_conservativeness
SGLANG_NEW_TOKEN_RATIO = 0.7
#: SGLang's ``--max-prefill-tokens`` default (python/sglang/srt/server_args.py, ``ServerArgs``,
#: 0.4-0.5): the new prompt tokens one prefill batch takes (``PrefillAdder.rem_input_tokens``,
#: python/sglang/srt/managers/schedule_policy.py); not divided by the DP size
SGLANG_MAX_PREFILL_TOKENS = 16384
MIB = 2**20


class SglangDefaults(BaseModel):
    """What ``python -m sglang.launch_server`` picks for a GPU and layout (0.5.x)."""

    model_config = ConfigDict(frozen=True)

    chunked_prefill_size: int  # per attention-DP rank
    cuda_graph_max_bs: int
    mem_fraction_static: float
    max_running_requests: int
    #: share of a running request's remaining output its admission reserves at first
    new_token_ratio: float


def sglang_request_pool(
    kv_tokens: int,
    context_len: int | None,
    *,
    stated: int | None,
    release: tuple[int, int, int] | None,
) -> int:
    """The requests one SGLang rank runs at once: its request pool, int(KV tokens / context
    length x 512) held between 2,048 and 4,096, when ``--max-running-requests`` is not
    ``stated`` (per DP rank); from 0.5.10 also at most half the KV tokens, and a stated value
    at most that pool (``ModelRunner.init_memory_pool``, 0.5.9, and ``_resolve_max_num_reqs``,
    0.5.10.post1: python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py, read
    2026-12-07). The context length is the server's (``--context-length``, else the model's;
    None: unknown, the pool's lower bound). ``release`` None is the pinned release, which does
    as the newest rules say. A server with a large KV cache for its context runs up to 4,096
    requests: MiniMax-M2.7 on 8 x MI300X with an FP8 cache, about 7.4 million tokens for a
    196,608-token context."""
    estimated = SGLANG_MAX_RUNNING_REQUESTS
    if context_len:
        estimated = int(kv_tokens / context_len * 512)
        estimated = min(max(estimated, SGLANG_MAX_RUNNING_REQUESTS), SGLANG_MAX_REQUEST_POOL)
    capped = release is None or release >= SGLANG_REQUEST_POOL_CAP_RELEASE
    if stated is not None:
        return min(stated, estimated) if capped else stated
    return max(1, min(estimated, kv_tokens // 2)) if capped else estimated


def _sglang_tier(gpu: GPU, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) by GPU memory and TP."""
    mem_mib = gpu.memory_bytes / MIB
    big = tp >= 4
    if mem_mib < 35 * 1024:
        return 2048, (80 if big else 24)
    if mem_mib < 60 * 1024:
        return 4096, (160 if big else 32)
    if mem_mib < 160 * 1024:
        return 8192, (512 if big else 256)
    return 16384, 512


#: SGLang reserves this much more memory (MiB) when it speculates with a draft head (EAGLE,
#: EAGLE-3, MTP/NEXTN; not n-gram), for the draft model and its graphs: 2 GiB through 0.5.9,
#: 4 GiB from 0.5.10rc0 (``_handle_gpu_memory_settings``, server_args.py, read in the 0.5.9,
#: 0.5.10rc0 and 0.5.10.post1 wheels from PyPI, 2026-12-07)
SGLANG_SPEC_RESERVE_MIB = 2 * 1024
SGLANG_SPEC_RESERVE_MIB_0_5_10 = 4 * 1024
#: what SGLang reserves from 0.5.10rc0 for the piecewise CUDA graphs its prefill steps run
#: under (:func:`sglang_prefill_graph_tokens`): 1.5 GiB for an MLA model ("the memory overhead
#: is much higher than expected"), else 8 MiB per captured size (same function and wheels)
SGLANG_PIECEWISE_RESERVE_MLA_MIB = 1.5 * 1024
SGLANG_PIECEWISE_RESERVE_PER_SIZE_MIB = 8


def sglang_piecewise_capture_sizes(max_tokens: int) -> list[int]:
    """The token counts SGLang captures a piecewise CUDA graph for, up to ``max_tokens``
    (``ServerArgs._generate_piecewise_cuda_graph_tokens``, 0.5.10.post1): every 4 to 32, 16 to
    256, 32 to 512, 64 to 1,024, 256 to 4,096, then every 512."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_tokens + 1, 512),
    ]
    return [s for s in sizes if s <= max_tokens]


#: the speculation methods that run a draft head (n-gram drafts from the context instead)
DRAFT_HEAD_METHODS = frozenset({"mtp", "eagle3"})
#: with DP attention, a CUDA-graph batch over this adds 1.5 MiB per graph sequence and rank
SGLANG_DP_LARGE_GRAPHS = 300


def sglang_defaults(
    gpu: GPU,
    data_parallel_size: int = 1,
    *,
    tp: int = 1,
    pp: int = 1,
    spec_method: str = "none",
    release: tuple[int, int, int] | None = None,
    prefill_graph_tokens: int | None = None,
    mla: bool = False,
) -> SglangDefaults:
    """SGLang server defaults of ``release`` (:func:`release_patch_number`; None: the pinned
    release, which uses the formula below; python/sglang/srt/server_args.py,
    ``_handle_gpu_memory_settings`` and ``_handle_data_parallelism``). Releases before 0.5.3
    had others (:func:`_sglang_defaults_before_0_5_3`).

    By GPU memory: < 35 GiB chunked prefill 2048 (CUDA graphs up to 24 sequences below TP 4,
    80 from TP 4); < 60 GiB 4096 (32 / 160); < 160 GiB 8192 (256 / 512: A100 80 GB, H100,
    H200); larger 16384 (512: B200, MI300X). ``mem_fraction_static`` (weights + KV pool over
    the GPU) = (memory - reserved) / memory, reserved MiB = 512 + 1.5 x max(chunked prefill,
    2048) + 2 x cuda_graph_max_bs + TP x PP / 8 x 1024 (+ 3 x cuda_graph_max_bs x DP with DP
    attention, and 1.5 x cuda_graph_max_bs x DP more when that batch is over 300), at least
    10 GiB on GPUs above 60 GiB, then 2 GiB more when ``spec_method`` runs a draft head (EAGLE,
    MTP; not n-gram); ``tp`` here is ``--tp-size``, every GPU of a stage. With DP attention
    the chunked prefill size is divided by the DP size and the schedule conservativeness (the
    new-token ratio) multiplied by 0.3. This is the formula of 0.5.3 to 0.5.9, read in their
    wheels (2026-12-06).

    From 0.5.10 (:data:`SGLANG_PIECEWISE_GRAPH_RELEASE`, and the pinned release) a draft head
    reserves 4 GiB, and a server that runs its prefill steps under piecewise CUDA graphs
    (``prefill_graph_tokens``, :func:`sglang_prefill_graph_tokens`; None: it does not) reserves
    1.5 GiB for an ``mla`` model, else 8 MiB per captured size
    (:func:`sglang_piecewise_capture_sizes`), before the 10 GiB floor. DeepSeek-R1 on 8 x B200:
    27,136 MiB reserved on 0.5.9, 28,672 MiB on 0.5.10 (mem_fraction_static 0.852 -> 0.844).
    """
    if release is not None and release < SGLANG_RESERVE_FORMULA_RELEASE:
        return _sglang_defaults_before_0_5_3(
            gpu, data_parallel_size, tp=tp, pp=pp, spec_method=spec_method, release=release
        )
    chunk, graphs = _sglang_tier(gpu, tp)
    mem_mib = gpu.memory_bytes / MIB
    dp = data_parallel_size
    reserved = 512 + 1.5 * max(chunk, 2048) + 2 * graphs + tp * pp / 8 * 1024
    if dp > 1:
        reserved += 3 * graphs * dp
        if graphs > SGLANG_DP_LARGE_GRAPHS:
            reserved += 1.5 * graphs * dp
    newer = release is None or release >= SGLANG_PIECEWISE_GRAPH_RELEASE
    if newer and prefill_graph_tokens is not None:
        sizes = len(sglang_piecewise_capture_sizes(prefill_graph_tokens))
        reserved += (
            SGLANG_PIECEWISE_RESERVE_MLA_MIB
            if mla
            else SGLANG_PIECEWISE_RESERVE_PER_SIZE_MIB * sizes
        )
    if mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if spec_method in DRAFT_HEAD_METHODS:
        reserved += SGLANG_SPEC_RESERVE_MIB_0_5_10 if newer else SGLANG_SPEC_RESERVE_MIB
    return SglangDefaults(
        chunked_prefill_size=chunk // dp if dp > 1 else chunk,
        cuda_graph_max_bs=graphs,
        mem_fraction_static=round((mem_mib - reserved) / mem_mib, 3),
        max_running_requests=SGLANG_MAX_RUNNING_REQUESTS,
        new_token_ratio=SGLANG_NEW_TOKEN_RATIO * (0.3 if dp > 1 else 1.0),
    )


#: the first SGLang release whose memory default is :func:`sglang_defaults`' formula
SGLANG_RESERVE_FORMULA_RELEASE = (0, 5, 3)
#: the first release that reserved a fixed amount by memory tier (0.4.8 to 0.5.2)
SGLANG_TIERED_RESERVE_RELEASE = (0, 4, 8)
#: ``mem_fraction_static`` by ``--tp-size`` (at least 16, 8, 4, 2, else) before 0.4.8
SGLANG_TP_FRACTIONS = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))


def _sglang_tp_fraction(parallel: int) -> float:
    return next(share for size, share in SGLANG_TP_FRACTIONS if parallel >= size)


def _sglang_defaults_before_0_5_3(
    gpu: GPU,
    data_parallel_size: int,
    *,
    tp: int,
    pp: int,
    spec_method: str,
    release: tuple[int, int, int],
) -> SglangDefaults:
    """What SGLang releases before 0.5.3 picked, read in their wheels (``ServerArgs.
    __post_init__`` and ``cuda_graph_runner.get_batch_sizes_to_capture`` of 0.4.0,
    0.4.0.post1, 0.4.1, 0.4.2.post4, 0.4.3.post2, 0.4.4.post1, 0.4.5, 0.4.6, 0.4.7, 0.4.8,
    0.4.9, 0.4.10.post1 and 0.5.2, from PyPI, 2026-12-06). Memory in MiB as CUDA reports it
    (``gpus.csv`` ``memory_reported_mib``).

    - 0.4.8 to 0.5.2: a fixed reserve by memory tier, (2.8 + TP x PP / 10) GiB under 35 GiB,
      (9.5 + TP x PP / 2) GiB under 90 GiB, (12 + TP x PP / 2) GiB under 160 GiB, else 32 GiB
      (B200, MI300X), 2 GiB more when speculating and 4 GiB more with DP attention; chunked
      prefill 2,048 / 8,192 / 16,384 (under 35 GiB, under 160 GiB, larger); decode graphs up
      to 160 sequences, 256 over 90 GiB, 512 over 160,000 MiB (8 or, from TP 4, 80 under 35
      GiB).
    - 0.4.7: the ``--tp-size`` x PP table (0.79 at 16 GPUs and more, 0.81 at 8, 0.85 at 4,
      0.87 at 2, else 0.88) up to 80 GiB, 0.88 above; then 0.79 over 180,000 MiB on CUDA,
      else over 96 GiB min(share + 48 GiB x (1 - share) / memory, (memory - 18 GiB) /
      memory) (20 GiB when speculating), else x 0.95 when speculating; chunked prefill 16,384
      over 180,000 MiB, 2,048 under 25,000 MiB, else 8,192; graphs up to 160, 256 over 96
      GiB, 512 over 180,000 MiB.
    - 0.4.6: the ``--tp-size`` table up to 80 GiB, else (memory - 13 GiB) / memory; chunked
      prefill 2,048 under 25,000 MiB, else 8,192; graphs up to 160, 256 over 80 GiB without
      DP attention.
    - 0.4.5 and earlier (back to 0.4.0, the earliest read; a release before it is taken as
      0.4.0): the ``--tp-size`` table on every GPU; chunked prefill as 0.4.6; graphs up to 160
      (8 / 80 under 25,000 MiB).

    Not followed, with DP attention: 0.4.0 to 0.4.3 halved the chunk instead of dividing it by
    the DP size (the 0.5 rule is applied), and 0.4.0 and 0.4.0.post1 capped the graphs at 96."""
    mem = gpu.memory_bytes / MIB
    dp = data_parallel_size
    speculating = spec_method != "none"
    small = mem < 35 * 1024 if release >= SGLANG_TIERED_RESERVE_RELEASE else mem < 25_000
    if release >= SGLANG_TIERED_RESERVE_RELEASE:
        parallel = tp * pp
        if mem < 35 * 1024:
            reserved = (2.8 + parallel / 10) * 1024
        elif mem < 90 * 1024:
            reserved = (9.5 + parallel / 2) * 1024
        elif mem < 160 * 1024:
            reserved = (12 + parallel / 2) * 1024
        else:
            reserved = 32 * 1024
        reserved += (2 * 1024 if speculating else 0) + (4 * 1024 if dp > 1 else 0)
        fraction = (mem - reserved) / mem
        chunk = 2048 if small else 8192 if mem < 160 * 1024 else 16384
        graphs = 512 if mem > 160_000 else 256 if mem > 90 * 1024 else 160
    elif release >= (0, 4, 7):
        fraction = _sglang_tp_fraction(tp * pp) if mem <= 80 * 1024 else 0.88
        if mem > 180_000 and gpu.vendor == "nvidia":
            fraction = 0.79
        elif mem > 96 * 1024:
            keep = (20 if speculating else 18) * 1024
            fraction = min(fraction + 48 * 1024 * (1 - fraction) / mem, (mem - keep) / mem)
        elif speculating:
            fraction *= 0.95
        chunk = 16384 if mem > 180_000 else 2048 if small else 8192
        graphs = 512 if mem > 180_000 else 256 if mem > 96 * 1024 else 160
    else:
        if release >= (0, 4, 6) and mem > 80 * 1024:
            fraction = (mem - 13 * 1024) / mem
        else:
            fraction = _sglang_tp_fraction(tp)
        chunk = 2048 if small else 8192
        graphs = 256 if release >= (0, 4, 6) and mem > 80 * 1024 and dp == 1 else 160
    if small:
        graphs = 80 if tp >= 4 else 8
    return SglangDefaults(
        chunked_prefill_size=chunk // dp if dp > 1 else chunk,
        cuda_graph_max_bs=graphs,
        mem_fraction_static=round(fraction, 3),
        max_running_requests=SGLANG_MAX_RUNNING_REQUESTS,
        new_token_ratio=SGLANG_NEW_TOKEN_RATIO * (0.3 if dp > 1 else 1.0),
    )


#: SGLang on ROCm keeps this share of ``mem_fraction_static`` for the weights and the KV pool
#: when its attention backend is ``aiter`` and the served context exceeds
#: :data:`SGLANG_AITER_CONTEXT_LIMIT` tokens (:func:`sglang_memory_share`)
SGLANG_AITER_MEMORY_SHARE = 0.85
SGLANG_AITER_CONTEXT_LIMIT = 8192
#: the first SGLang series this is applied to (its source was read for 0.5.x)
SGLANG_AITER_FIRST_RELEASE = (0, 5)


def sglang_memory_share(engine: EngineConfig, gpu: GPU, context_len: int | None) -> float:
    """The share of ``mem_fraction_static`` (stated or default) an SGLang server really gives
    the weights and the KV pool: 0.85 on an AMD GPU when the served context is over 8,192
    tokens, 1 otherwise.

    SGLang picks the ``aiter`` attention backend on ROCm when none is given (every HIP device
    for MHA models; MLA models with 16 or 128 KV heads a GPU, DeepSeek-V3/R1 at TP 8 among
    them: ``_handle_attention_backend_compatibility`` in python/sglang/srt/server_args.py,
    pull request 11161 of 2025-10-02), and with it multiplies ``mem_fraction_static`` by 0.85
    when ``context_len`` exceeds 8,192 ("AMD platforms backends" in the same function; earlier
    in ``model_runner.py``); pull request 25199 (2026-05-13) proposed removing it and was
    closed. ``context_len`` is ``--context-length``, else the model's own
    (``max_position_embeddings``); None counts as over the limit. A logged start agrees:
    Qwen3-30B-A3B (5 layers) on one MI355X, rocm/sgl-dev v0.5.7 image (issue 18262,
    2026-02-04), 287.20 GB free before loading, 12.79 GB of weights, a KV pool of 209.66 GB
    = 0.911 (the default) x 0.85 x 287.20 - 12.79; without the factor the pool would be 249 GB.
    Applied from SGLang 0.5 on, and to a release without a number (the newest); the 0.4 series'
    ROCm backend choice was not read. A stated ``--attention-backend`` other than aiter is not
    an EngineConfig field, so it is not followed."""
    if engine.family != "sglang" or gpu.vendor != "amd":
        return 1.0
    if context_len is not None and context_len <= SGLANG_AITER_CONTEXT_LIMIT:
        return 1.0
    if engine.version is not None:
        release = engine.release_number
        if release is None or release < SGLANG_AITER_FIRST_RELEASE:
            return 1.0
    return SGLANG_AITER_MEMORY_SHARE


__all__ = [
    "BLOCK_SIZES",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "ENGINE_FAMILIES",
    "ENGINE_SPELLINGS",
    "FAMILIES",
    "KV_CACHE_DTYPES",
    "SGLANG_MAX_PREFILL_TOKENS",
    "TRTLLM_FREE_GPU_MEMORY_FRACTION",
    "EngineConfig",
    "Entrypoint",
    "KvCacheDtype",
    "check_engine",
    "engine_defaults",
    "engine_family",
    "sglang_defaults",
    "sglang_memory_share",
    "sglang_request_pool",
    "vllm_offline_defaults",
    "vllm_serve_defaults",
]
