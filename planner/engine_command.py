"""The command that starts one replica of a plan on its engine: the one builder every consumer
uses (the recommendation's ``launch_command``, the deployment files of :mod:`planner.deploy`).

``vllm serve`` (:mod:`planner.vllm_command`), ``python3 -m sglang.launch_server``
(:mod:`planner.sglang_command`) or ``trtllm-serve`` (:mod:`planner.trtllm_command`), from the
plan's model, TP x PP, precision and :class:`~planner.engine.EngineConfig` (its attention data
parallelism and expert parallelism included); a TensorRT-LLM plan whose settings need the LLM
API options file also has that file (:func:`engine_config_files`), which the command names.
"""

from __future__ import annotations

import shlex
from typing import Any

from planner.plan import Plan
from planner.sglang_command import SglangServeConfig, sglang_launch_args
from planner.trtllm_command import (
    EXTRA_OPTIONS_FILE,
    TrtllmServeConfig,
    trtllm_extra_options,
    trtllm_extra_options_yaml,
    trtllm_serve_args,
)
from planner.vllm_command import vllm_serve_args


def _fields(plan: Plan, host: str | None, port: int | None) -> dict[str, Any]:
    """What every engine's command config takes from the plan."""
    return {
        "model": plan.model,
        "tensor_parallel_size": plan.tp,
        "pipeline_parallel_size": plan.pp,
        "precision": plan.precision,
        "engine": plan.engine,
        "host": host,
        "port": port,
    }


def engine_argv(plan: Plan, *, host: str | None = None, port: int | None = None) -> list[str]:
    """The argument vector, program first, that starts one replica of ``plan`` (listening on
    ``host:port`` when given). A layout the engine cannot spell raises InvalidInputError."""
    family = plan.engine.family
    if family == "sglang":
        return ["python3", *sglang_launch_args(SglangServeConfig(**_fields(plan, host, port)))]
    if family == "trtllm":
        return ["trtllm-serve", *trtllm_serve_args(TrtllmServeConfig(**_fields(plan, host, port)))]
    return ["vllm", *vllm_serve_args(plan.vllm_config(host=host, port=port))]


def launch_command(plan: Plan, *, host: str | None = None, port: int | None = None) -> str:
    """:func:`engine_argv` as the shell line to paste."""
    return shlex.join(engine_argv(plan, host=host, port=port))


def engine_config_files(plan: Plan) -> dict[str, str]:
    """``{file name: text}`` the command reads (beside it, in its working directory): the
    TensorRT-LLM LLM API options when the plan sets any; none for the other engines."""
    if plan.engine.family != "trtllm":
        return {}
    config = TrtllmServeConfig(**_fields(plan, None, None))
    if not trtllm_extra_options(config):
        return {}
    return {EXTRA_OPTIONS_FILE: trtllm_extra_options_yaml(config)}


__all__ = ["engine_argv", "engine_config_files", "launch_command"]
