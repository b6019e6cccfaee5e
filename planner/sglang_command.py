"""Build the ``python3 -m sglang.launch_server`` command line for a planned deployment.

The same shape as :mod:`planner.vllm_command`: a config (:class:`SglangServeConfig`: the model,
the layout, the precision and the engine settings of :class:`planner.engine.EngineConfig`) and
the argument vector or the shell line it gives. Flag names are SGLang's documented server
arguments (docs.sglang.io, "Server Arguments"; ``tests/planner/test_sglang_command.py`` checks
them against that list).

Layout, in the planner's convention (:mod:`planner.serve_flags`): ``tensor_parallel_size`` is
the attention TP of one rank and ``engine.data_parallel_size`` the attention data-parallel
ranks. SGLang counts every GPU of a stage in ``--tp-size``, so attention DP over d ranks of TP t
is ``--tp-size t*d --dp-size d --enable-dp-attention``; expert parallelism over the stage is
``--ep-size t*d``. With DP attention SGLang divides ``--chunked-prefill-size`` (and the request
limit) by the DP size, so the command states them for all ranks (per rank x d).
"""

from __future__ import annotations

import shlex

from pydantic import BaseModel, ConfigDict, Field

from planner.engine import EngineConfig

#: Weight precision -> SGLang ``--quantization`` / ``--dtype``. bf16/fp16 checkpoints need
#: none but the dtype; fp8 quantises a 16-bit checkpoint on the fly; int4 (AWQ/GPTQ) and fp4
#: (MXFP4/NVFP4) checkpoints carry their quantization config, which SGLang reads.
_PRECISION_FLAGS: dict[str, list[str]] = {
    "bf16": ["--dtype", "bfloat16"],
    "fp16": ["--dtype", "float16"],
    "fp8": ["--quantization", "fp8"],
    "int8": [],
    "int4": [],
    "fp4": [],
}


class SglangServeConfig(BaseModel):
    """Everything that decides a replica's ``sglang.launch_server`` command."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    tensor_parallel_size: int = Field(default=1, ge=1)
    pipeline_parallel_size: int = Field(default=1, ge=1)
    precision: str = "bf16"
    engine: EngineConfig = EngineConfig(engine="sglang")
    host: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)


def sglang_launch_args(config: SglangServeConfig) -> list[str]:
    """The argument vector after ``python``: ``["-m", "sglang.launch_server", ...]``."""
    engine = config.engine
    dp = engine.data_parallel_size
    stage = config.tensor_parallel_size * dp
    args = ["-m", "sglang.launch_server", "--model-path", config.model]
    args += ["--tp-size", str(stage)]
    if dp > 1:
        args += ["--dp-size", str(dp), "--enable-dp-attention"]
    if config.pipeline_parallel_size > 1:
        args += ["--pp-size", str(config.pipeline_parallel_size)]
    if engine.enable_expert_parallel:
        args += ["--ep-size", str(stage)]
    args += _PRECISION_FLAGS.get(config.precision, [])
    if engine.max_num_seqs is not None:
        args += ["--max-running-requests", str(engine.max_num_seqs * dp)]
    if engine.max_num_batched_tokens is not None:
        args += ["--chunked-prefill-size", str(engine.max_num_batched_tokens * dp)]
    if engine.max_model_len is not None:
        args += ["--context-length", str(engine.max_model_len)]
    if engine.memory_stated:
        args += ["--mem-fraction-static", f"{engine.gpu_memory_utilization:g}"]
    if engine.kv_cache_dtype.startswith("fp8"):
        dtype = "fp8_e4m3" if engine.kv_cache_dtype == "fp8" else engine.kv_cache_dtype
        args += ["--kv-cache-dtype", dtype]
    if "enable_prefix_caching" in engine.model_fields_set and not engine.enable_prefix_caching:
        args.append("--disable-radix-cache")  # SGLang's radix cache is on by default
    if engine.enforce_eager:
        args.append("--disable-cuda-graph")
    if engine.spec_method != "none":
        from planner.perf.speculative import sglang_speculative_args

        args += sglang_speculative_args(config.model, engine)
    if config.host:
        args += ["--host", config.host]
    if config.port:
        args += ["--port", str(config.port)]
    return args


def sglang_launch_command(config: SglangServeConfig) -> str:
    """The shell command line to paste: ``python3 -m sglang.launch_server --model-path ...``
    (``python3``: SGLang's images have no ``python``)."""
    return shlex.join(["python3", *sglang_launch_args(config)])


__all__ = ["SglangServeConfig", "sglang_launch_args", "sglang_launch_command"]
