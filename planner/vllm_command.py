"""Build the ``vllm serve`` command line for a planned deployment.

Flag names are those of vLLM 0.27.1, the version of the optional ``vllm`` extra (see
``tests/planner/test_vllm_command.py`` for the documented list they are checked against).
One replica is one ``vllm serve`` process spanning TP x PP GPUs; data-parallel replicas are
separate processes behind a load balancer, so the command has no data-parallel flag.
"""

from __future__ import annotations

import shlex

from pydantic import BaseModel, ConfigDict, Field

#: Weight precision -> vLLM ``--quantization`` / ``--dtype`` flags. bf16/fp16 checkpoints need
#: none; fp8 quantises a 16-bit checkpoint on the fly ("fp8"); int4 and fp4 need a
#: checkpoint already quantised (AWQ/GPTQ, NVFP4/MXFP4), which vLLM detects from its config.
_PRECISION_FLAGS: dict[str, list[str]] = {
    "bf16": ["--dtype", "bfloat16"],
    "fp16": ["--dtype", "float16"],
    "fp8": ["--quantization", "fp8"],
    "int8": [],
    "int4": [],
    "fp4": [],
}


class VllmServeConfig(BaseModel):
    """Everything that decides a replica's ``vllm serve`` command."""

    model_config = ConfigDict(frozen=True)

    model: str
    tensor_parallel_size: int = Field(default=1, ge=1)
    pipeline_parallel_size: int = Field(default=1, ge=1)
    precision: str = "bf16"
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    max_model_len: int | None = Field(default=None, ge=1)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    kv_cache_dtype: str = "auto"
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    enforce_eager: bool = False
    host: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)


def vllm_serve_args(config: VllmServeConfig) -> list[str]:
    """The argument vector after ``vllm``: ``["serve", MODEL, "--flag", value, ...]``."""
    args = ["serve", config.model]
    args += ["--tensor-parallel-size", str(config.tensor_parallel_size)]
    if config.pipeline_parallel_size > 1:
        args += ["--pipeline-parallel-size", str(config.pipeline_parallel_size)]
    args += _PRECISION_FLAGS.get(config.precision, [])
    if config.max_num_seqs is not None:
        args += ["--max-num-seqs", str(config.max_num_seqs)]
    if config.max_num_batched_tokens is not None:
        args += ["--max-num-batched-tokens", str(config.max_num_batched_tokens)]
    if config.max_model_len is not None:
        args += ["--max-model-len", str(config.max_model_len)]
    args += ["--gpu-memory-utilization", f"{config.gpu_memory_utilization:g}"]
    if config.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", config.kv_cache_dtype]
    if config.enable_prefix_caching is True:
        args.append("--enable-prefix-caching")
    elif config.enable_prefix_caching is False:
        args.append("--no-enable-prefix-caching")
    if config.enable_chunked_prefill is True:
        args.append("--enable-chunked-prefill")
    if config.enforce_eager:
        args.append("--enforce-eager")
    if config.host:
        args += ["--host", config.host]
    if config.port:
        args += ["--port", str(config.port)]
    return args


def vllm_serve_command(config: VllmServeConfig) -> str:
    """The shell command line to paste: ``vllm serve MODEL --tensor-parallel-size 4 ...``."""
    return shlex.join(["vllm", *vllm_serve_args(config)])
