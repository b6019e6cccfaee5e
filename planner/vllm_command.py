"""Build the ``vllm serve`` command line for a planned deployment.

Flag names are those of vLLM 0.27.1, the version of the optional ``vllm`` extra (see
``tests/planner/test_vllm_command.py`` for the documented list they are checked against).
One replica is one ``vllm serve`` process spanning TP x PP GPUs; data-parallel replicas are
separate processes behind a load balancer, so the command has no data-parallel flag.
"""

from __future__ import annotations

import json
import shlex

from pydantic import BaseModel, ConfigDict, Field

from planner.engine import EngineConfig

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
    """Everything that decides a replica's ``vllm serve`` command: the model, its layout and
    precision, and the engine settings (:class:`planner.engine.EngineConfig`; a setting it
    leaves to the engine is not printed)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    tensor_parallel_size: int = Field(default=1, ge=1)
    pipeline_parallel_size: int = Field(default=1, ge=1)
    precision: str = "bf16"
    engine: EngineConfig = EngineConfig()
    host: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    #: print ``--gpu-memory-utilization``, vLLM's default 0.9 included (the share the plan was
    #: predicted at); False leaves the share to vLLM's default: the vLLM equivalent of an SGLang
    #: or TensorRT-LLM plan, whose own share means something else
    #: (:meth:`planner.plan.Plan.vllm_config`)
    state_memory_share: bool = True


def vllm_serve_args(config: VllmServeConfig) -> list[str]:
    """The argument vector after ``vllm``: ``["serve", MODEL, "--flag", value, ...]``."""
    engine = config.engine
    args = ["serve", config.model]
    args += ["--tensor-parallel-size", str(config.tensor_parallel_size)]
    if config.pipeline_parallel_size > 1:
        args += ["--pipeline-parallel-size", str(config.pipeline_parallel_size)]
    if engine.data_parallel_size > 1:
        args += ["--data-parallel-size", str(engine.data_parallel_size)]
    if engine.enable_expert_parallel:
        args.append("--enable-expert-parallel")
    args += _PRECISION_FLAGS.get(config.precision, [])
    if engine.max_num_seqs is not None:
        args += ["--max-num-seqs", str(engine.max_num_seqs)]
    if engine.max_num_batched_tokens is not None:
        args += ["--max-num-batched-tokens", str(engine.max_num_batched_tokens)]
    if engine.max_model_len is not None:
        args += ["--max-model-len", str(engine.max_model_len)]
    if config.state_memory_share:
        args += ["--gpu-memory-utilization", f"{engine.gpu_memory_utilization:g}"]
    if engine.kv_cache_dtype.startswith("fp8"):  # bf16/fp16 are the model's own: "auto"
        args += ["--kv-cache-dtype", engine.kv_cache_dtype]
    # vLLM V1 turns prefix caching on by default: say which way the plan was predicted
    args.append(
        "--enable-prefix-caching" if engine.enable_prefix_caching else "--no-enable-prefix-caching"
    )
    args.append(
        "--enable-chunked-prefill"
        if engine.enable_chunked_prefill
        else "--no-enable-chunked-prefill"
    )
    if engine.enforce_eager:
        args.append("--enforce-eager")
    if engine.async_scheduling is not None:  # None: the release's default (on from 0.14)
        args.append("--async-scheduling" if engine.async_scheduling else "--no-async-scheduling")
    if engine.spec_method != "none":
        from planner.perf.speculative import vllm_speculative_config

        spec = vllm_speculative_config(config.model, engine)
        args += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    if config.host:
        args += ["--host", config.host]
    if config.port:
        args += ["--port", str(config.port)]
    return args


def vllm_serve_command(config: VllmServeConfig) -> str:
    """The shell command line to paste: ``vllm serve MODEL --tensor-parallel-size 4 ...``."""
    return shlex.join(["vllm", *vllm_serve_args(config)])
