"""The vllm serve command uses only flags that the pinned vLLM version documents.

vLLM itself is an optional multi-GB extra, so its parser cannot run here; the flag list is
the documented one for vLLM 0.27.1 (Cloudera AI on premises 1.5.5 SP4 release notes,
"Supported vLLM command line arguments", which lists the arguments of vLLM 0.27.1), plus the
OpenAI server's --host/--port frontend options.
"""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

import pytest

from planner.engine import DEFAULT_GPU_MEMORY_UTILIZATION, EngineConfig
from planner.engine_command import launch_command
from planner.plan import Plan
from planner.serve_flags import parse_serve_command
from planner.vllm_command import VllmServeConfig, vllm_serve_args, vllm_serve_command

DOCUMENTED_FLAGS_0_27_1 = {
    "--block-size",
    "--calculate-kv-scales",
    "--cpu-offload-gb",
    "--disable-cascade-attn",
    "--disable-chunked-mm-input",
    "--disable-sliding-window",
    "--dtype",
    "--enable-auto-tool-choice",
    "--enable-chunked-prefill",
    "--enable-prefix-caching",
    "--enforce-eager",
    "--gpu-memory-utilization",
    "--kv-cache-dtype",
    "--load-format",
    "--logprobs-mode",
    "--long-prefill-token-threshold",
    "--max-logprobs",
    "--max-long-partial-prefills",
    "--max-model-len",
    "--max-num-batched-tokens",
    "--max-num-partial-prefills",
    "--max-num-seqs",
    "--max-seq-len-to-capture",
    "--multi-step-stream-outputs",
    "--no-enable-prefix-caching",
    "--num-lookahead-slots",
    "--num-scheduler-steps",
    "--pipeline-parallel-size",
    "--preemption-mode",
    "--prefix-caching-hash-algo",
    "--quantization",
    "--rope-scaling",
    "--rope-theta",
    "--scheduling-policy",
    "--seed",
    "--tensor-parallel-size",
    "--tool-call-parser",
    "--trust-remote-code",
}
FRONTEND_FLAGS = {"--host", "--port"}
KV_CACHE_DTYPES = {"auto", "fp8", "fp8_e4m3", "fp8_e5m2"}


def test_pinned_extra_is_the_documented_version() -> None:
    pyproject = tomllib.loads(Path("pyproject.toml").read_text())
    assert pyproject["project"]["optional-dependencies"]["vllm"] == ["vllm==0.27.1"]
    assert "vllm==0.27.1" in Path("requirements-vllm.txt").read_text().splitlines()
    requirements = Path("requirements.txt").read_text().splitlines()
    assert not [line for line in requirements if line.strip().lower().startswith("vllm")]


def test_every_flag_is_documented_for_the_pinned_version() -> None:
    config = VllmServeConfig(
        model="meta-llama/Llama-3.1-70B-Instruct",
        tensor_parallel_size=4,
        pipeline_parallel_size=2,
        precision="fp8",
        engine=EngineConfig(
            max_num_seqs=128,
            max_num_batched_tokens=4096,
            max_model_len=8192,
            gpu_memory_utilization=0.92,
            kv_cache_dtype="fp8",
            enable_prefix_caching=True,
            enable_chunked_prefill=True,
            enforce_eager=True,
        ),
        host="127.0.0.1",
        port=8000,
    )
    args = vllm_serve_args(config)
    flags = {a for a in args if a.startswith("--")}
    assert flags <= DOCUMENTED_FLAGS_0_27_1 | FRONTEND_FLAGS
    assert args[args.index("--kv-cache-dtype") + 1] in KV_CACHE_DTYPES


def test_command_line_round_trips_through_a_shell() -> None:
    config = VllmServeConfig(model="Qwen/Qwen3-32B", tensor_parallel_size=2)
    line = vllm_serve_command(config)
    assert line == (
        "vllm serve Qwen/Qwen3-32B --tensor-parallel-size 2 --dtype bfloat16 "
        "--gpu-memory-utilization 0.9 --no-enable-prefix-caching --enable-chunked-prefill"
    )
    assert shlex.split(line)[1:] == vllm_serve_args(config)


#: Flags the MoE layouts and a plan without chunked prefill add: vLLM's expert-parallel
#: deployment guide (docs.vllm.ai, v0.10.1.1, "Expert Parallel Deployment": EP with
#: --enable-expert-parallel, attention DP with --data-parallel-size) and the negated boolean
#: form every engine switch has (argparse.BooleanOptionalAction, as --no-enable-prefix-caching).
MOE_AND_NEGATED_FLAGS = {
    "--data-parallel-size",
    "--enable-expert-parallel",
    "--no-enable-chunked-prefill",
}


def test_every_engine_setting_reaches_the_command_line() -> None:
    engine = EngineConfig(
        max_num_seqs=64,
        max_num_batched_tokens=2048,
        max_model_len=2560,
        gpu_memory_utilization=0.85,
        kv_cache_dtype="fp8_e4m3",
        enable_chunked_prefill=False,
        enable_expert_parallel=True,
        data_parallel_size=2,
    )
    args = vllm_serve_args(VllmServeConfig(model="Qwen/Qwen3-30B-A3B", engine=engine))
    flags = {a for a in args if a.startswith("--")}
    assert flags <= DOCUMENTED_FLAGS_0_27_1 | MOE_AND_NEGATED_FLAGS
    for flag, value in (
        ("--max-num-seqs", "64"),
        ("--max-num-batched-tokens", "2048"),
        ("--max-model-len", "2560"),
        ("--gpu-memory-utilization", "0.85"),
        ("--kv-cache-dtype", "fp8_e4m3"),
        ("--data-parallel-size", "2"),
    ):
        assert args[args.index(flag) + 1] == value
    assert {"--no-enable-chunked-prefill", "--enable-expert-parallel"} <= flags


#: vLLM's async scheduling switch: --async-scheduling (pull request 19970, 2025-06) and the
#: --no-async-scheduling the v0.14.0 release notes (2026-01-20) name for turning the default off
ASYNC_FLAGS = {"--async-scheduling", "--no-async-scheduling"}


def test_a_stated_async_scheduling_reaches_the_command_and_reads_back() -> None:
    for stated, flag in ((True, "--async-scheduling"), (False, "--no-async-scheduling")):
        engine = EngineConfig(async_scheduling=stated)
        args = vllm_serve_args(VllmServeConfig(model="Qwen/Qwen3-8B", engine=engine))
        assert flag in args and (ASYNC_FLAGS - {flag}).isdisjoint(args)
        assert parse_serve_command(shlex.join(["vllm", *args])).async_scheduling is stated
    # left to the release (the pinned one schedules asynchronously): no flag either way
    default = vllm_serve_args(VllmServeConfig(model="Qwen/Qwen3-8B"))
    assert ASYNC_FLAGS.isdisjoint(default)


@pytest.mark.parametrize(
    ("engine", "own_flag"),
    [("sglang", "--mem-fraction-static"), ("trtllm", "--kv_cache_free_gpu_memory_fraction")],
)
def test_the_vllm_equivalent_of_another_engines_plan_leaves_the_memory_share_to_vllm(
    engine: str, own_flag: str
) -> None:
    """SGLang's mem_fraction_static (weights + KV over the memory free before loading) and
    TensorRT-LLM's kv_cache_free_gpu_memory_fraction (KV over the memory left after the
    weights) are not vLLM's share of the GPU: a plan's vLLM equivalent carries vLLM's default
    (no flag) and keeps the other settings; the plan's own command states its share."""
    plan = Plan(
        model="Qwen/Qwen3-32B",
        gpu="H100-SXM",
        tp=2,
        engine=EngineConfig(engine=engine, gpu_memory_utilization=0.5, max_num_seqs=64),
    )
    config = plan.vllm_config()
    assert config.engine.family == "vllm"
    assert config.engine.gpu_memory_utilization == DEFAULT_GPU_MEMORY_UTILIZATION
    args = vllm_serve_args(config)
    assert "--gpu-memory-utilization" not in args
    assert {a for a in args if a.startswith("--")} <= DOCUMENTED_FLAGS_0_27_1
    assert args[args.index("--max-num-seqs") + 1] == "64"
    assert args[args.index("--tensor-parallel-size") + 1] == "2"
    own = shlex.split(launch_command(plan))
    assert own[own.index(own_flag) + 1] == "0.5"
    # a vLLM plan's command states its share, stated or vLLM's default
    stated = plan.model_copy(update={"engine": EngineConfig(gpu_memory_utilization=0.5)})
    assert "--gpu-memory-utilization 0.5 " in vllm_serve_command(stated.vllm_config())
    default = plan.model_copy(update={"engine": EngineConfig()})
    assert "--gpu-memory-utilization 0.9 " in vllm_serve_command(default.vllm_config())
