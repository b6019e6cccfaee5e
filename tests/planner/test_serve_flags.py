"""Serving command lines read into the planner's layout convention (planner.serve_flags)."""

from __future__ import annotations

import pytest

from planner.errors import InvalidInputError
from planner.serve_flags import parse_serve_command


def test_vllm_tensor_parallel_and_knobs() -> None:
    flags = parse_serve_command(
        "vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 -tp 4 --max-num-batched-tokens 16384 "
        "--max-model-len=32768 --gpu-memory-utilization 0.85 --async-scheduling"
    )
    assert flags.engine == "vllm" and flags.model == "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"
    layout = (flags.tp, flags.pp, flags.attention_dp, flags.ep_size, flags.replicas)
    assert layout == (4, 1, 1, 1, 1)
    assert flags.max_num_batched_tokens == 16384 and flags.max_model_len == 32768
    assert flags.gpu_memory_utilization == 0.85 and flags.async_scheduling is True


def test_vllm_async_scheduling_is_stated_either_way_or_left_to_the_release() -> None:
    off = parse_serve_command("vllm serve Qwen/Qwen3-8B --no-async-scheduling")
    assert off.async_scheduling is False and "--no-async-scheduling" not in off.ignored
    assert parse_serve_command("vllm serve Qwen/Qwen3-8B").async_scheduling is None


def test_vllm_expert_parallel_is_tp_times_dp() -> None:
    # vLLM docs (Expert Parallel Deployment): "The EP size is automatically calculated as TP x DP"
    flags = parse_serve_command(
        "vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 1 --data-parallel-size 8 "
        "--enable-expert-parallel"
    )
    assert (flags.tp, flags.attention_dp, flags.ep_size, flags.replicas) == (1, 8, 8, 1)
    assert flags.gpus == 8
    tp_only = parse_serve_command("vllm serve zai-org/GLM-4.6-FP8 -tp 8 --enable-expert-parallel")
    assert (tp_only.tp, tp_only.attention_dp, tp_only.ep_size) == (8, 1, 8)
    replicas = parse_serve_command("vllm serve meta-llama/Llama-3.1-8B-Instruct -dp 4")
    assert (replicas.tp, replicas.attention_dp, replicas.replicas) == (1, 1, 4)


def test_sglang_dp_attention_splits_the_tp_size() -> None:
    flags = parse_serve_command(
        "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --host 0.0.0.0 "
        "--port 8000 --tp-size 8 --dp-size 8 --enable-dp-attention --ep-size 8 "
        "--attention-backend nsa --context-length=32768"
    )
    assert flags.engine == "sglang" and flags.model == "deepseek-ai/DeepSeek-V3.2"
    assert (flags.tp, flags.attention_dp, flags.ep_size, flags.gpus) == (1, 8, 8, 8)
    assert flags.max_model_len == 32768
    assert "--attention-backend" in flags.ignored and "--host" in flags.ignored
    router_dp = parse_serve_command("python -m sglang.launch_server --model m --tp 2 --dp 2")
    assert (router_dp.tp, router_dp.attention_dp, router_dp.replicas, router_dp.gpus) == (
        2,
        1,
        2,
        4,
    )
    knobs = parse_serve_command(
        "python -m sglang.launch_server --model m --chunked-prefill-size 4096 "
        "--max-running-requests 64 --mem-fraction-static 0.8 --disable-radix-cache"
    )
    assert knobs.max_num_batched_tokens == 4096 and knobs.max_num_seqs == 64
    assert knobs.gpu_memory_utilization == 0.8 and knobs.enable_prefix_caching is False


def test_trtllm_serve_expert_parallel() -> None:
    flags = parse_serve_command(
        "trtllm-serve /workspace/DeepSeek-v3.2 --tp_size 8 --ep_size 8 --pp_size 1 "
        "--max_seq_len=40960"
    )
    assert flags.engine == "tensorrt-llm" and flags.model == "/workspace/DeepSeek-v3.2"
    assert (flags.tp, flags.pp, flags.ep_size, flags.max_model_len) == (8, 1, 8, 40960)


@pytest.mark.parametrize(
    ("command", "field"),
    [
        ("vllm serve m -tp four", "-tp"),
        ("python -m sglang.launch_server --model m --tp-size 8 --dp-size 3 "
         "--enable-dp-attention", "--dp-size"),
        ("vllm serve m --max-num-seqs 0", "max_num_seqs"),
        ("llama-server -m model.gguf", "command"),
        ("vllm serve m --max-model-len", "--max-model-len"),
    ],
)  # fmt: skip
def test_bad_commands_name_the_flag(command: str, field: str) -> None:
    with pytest.raises(InvalidInputError) as raised:
        parse_serve_command(command)
    assert raised.value.field == field
