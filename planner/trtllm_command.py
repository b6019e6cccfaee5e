"""Build the ``trtllm-serve`` command line (and its extra options file) for a planned deployment.

The same shape as :mod:`planner.vllm_command`. Flag names are those of the ``trtllm-serve``
reference (nvidia.github.io/TensorRT-LLM, ``commands/trtllm-serve``: ``--tp_size``,
``--pp_size``, ``--ep_size``, ``--max_batch_size``, ``--max_num_tokens``, ``--max_seq_len``,
``--kv_cache_free_gpu_memory_fraction``, ``--extra_llm_api_options``, ``--host``, ``--port``).
Attention data parallelism has no flag: it is the LLM API option ``enable_attention_dp`` in the
YAML file that ``--extra_llm_api_options`` names (the 1.0 "Run benchmarking with
trtllm-serve" guide), and it spans every GPU of the TP group, which is what TensorRT-LLM's
tables call "DEPn" with expert parallelism: ``--tp_size n --ep_size n`` and
``enable_attention_dp: true``. A planner layout of attention TP t > 1 with DP ranks has no
TensorRT-LLM spelling and is refused.
"""

from __future__ import annotations

import shlex

from pydantic import BaseModel, ConfigDict, Field

from planner.engine import EngineConfig
from planner.errors import InvalidInputError

#: where the command expects its LLM API options (written next to the command)
EXTRA_OPTIONS_FILE = "extra-llm-api-config.yml"


class TrtllmServeConfig(BaseModel):
    """Everything that decides a replica's ``trtllm-serve`` command."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    tensor_parallel_size: int = Field(default=1, ge=1)
    pipeline_parallel_size: int = Field(default=1, ge=1)
    precision: str = "bf16"
    engine: EngineConfig = EngineConfig(engine="tensorrt-llm")
    host: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)


def _group(config: TrtllmServeConfig) -> int:
    dp = config.engine.data_parallel_size
    if dp > 1 and config.tensor_parallel_size > 1:
        raise InvalidInputError(
            "tensor_parallel_size",
            config.tensor_parallel_size,
            "1 with attention data parallelism on TensorRT-LLM (enable_attention_dp spans the "
            "whole TP group)",
        )
    return config.tensor_parallel_size * dp


def trtllm_extra_options(config: TrtllmServeConfig) -> dict[str, object]:
    """The LLM API options the command's ``--extra_llm_api_options`` file holds (empty: none)."""
    options: dict[str, object] = {}
    if config.engine.data_parallel_size > 1:
        options["enable_attention_dp"] = True
    if config.engine.enable_prefix_caching:
        options["kv_cache_config"] = {"enable_block_reuse": True}
    if config.engine.enable_chunked_prefill and "enable_chunked_prefill" in (
        config.engine.model_fields_set
    ):
        options["enable_chunked_prefill"] = True  # off unless asked (llm_args.py)
    if config.engine.spec_method != "none":
        from planner.perf.speculative import trtllm_speculative_config

        options["speculative_config"] = trtllm_speculative_config(config.model, config.engine)
    return options


def trtllm_extra_options_yaml(config: TrtllmServeConfig) -> str:
    """:func:`trtllm_extra_options` as the YAML text of the file (two levels at most)."""
    lines = []
    for key, value in trtllm_extra_options(config).items():
        if isinstance(value, dict):
            lines.append(f"{key}:")
            lines += [f"  {k}: {_yaml_scalar(v)}" for k, v in value.items()]
        else:
            lines.append(f"{key}: {_yaml_scalar(value)}")
    return "\n".join(lines) + ("\n" if lines else "")


def _yaml_scalar(value: object) -> str:
    """A YAML scalar: booleans as ``true``/``false``, names and numbers as written."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def trtllm_serve_args(config: TrtllmServeConfig) -> list[str]:
    """The argument vector after ``trtllm-serve``: ``[MODEL, "--tp_size", "8", ...]``."""
    engine = config.engine
    group = _group(config)
    args = [config.model, "--tp_size", str(group)]
    if config.pipeline_parallel_size > 1:
        args += ["--pp_size", str(config.pipeline_parallel_size)]
    if engine.enable_expert_parallel:
        args += ["--ep_size", str(group)]
    if engine.max_num_seqs is not None:
        args += ["--max_batch_size", str(engine.max_num_seqs)]  # per rank
    if engine.max_num_batched_tokens is not None:
        args += ["--max_num_tokens", str(engine.max_num_batched_tokens)]
    if engine.max_model_len is not None:
        args += ["--max_seq_len", str(engine.max_model_len)]
    if engine.memory_stated:
        args += ["--kv_cache_free_gpu_memory_fraction", f"{engine.gpu_memory_utilization:g}"]
    if trtllm_extra_options(config):
        args += ["--extra_llm_api_options", EXTRA_OPTIONS_FILE]
    if config.host:
        args += ["--host", config.host]
    if config.port:
        args += ["--port", str(config.port)]
    return args


def trtllm_serve_command(config: TrtllmServeConfig) -> str:
    """The shell command line to paste: ``trtllm-serve MODEL --tp_size 8 ...``."""
    return shlex.join(["trtllm-serve", *trtllm_serve_args(config)])


__all__ = [
    "EXTRA_OPTIONS_FILE",
    "TrtllmServeConfig",
    "trtllm_extra_options",
    "trtllm_extra_options_yaml",
    "trtllm_serve_args",
    "trtllm_serve_command",
]
