"""The SGLang and TensorRT-LLM launch commands use documented flags and mean their layout.

SGLang is not installed here (a CUDA-only server); its flags are checked against the documented
server arguments (docs.sglang.io, "Server Arguments", and the cookbook's parallelism reference:
``--tp-size``, ``--dp-size``, ``--ep-size``, ``--enable-dp-attention``). TensorRT-LLM's are
those of the ``trtllm-serve`` reference (nvidia.github.io/TensorRT-LLM, commands/trtllm-serve,
0.18.2 and 1.0.0rc6 pages). Each command is parsed back with :mod:`planner.serve_flags`, the
parser that reads published results, and must give the layout it was built for.
"""

from __future__ import annotations

import shlex

import pytest

from planner.engine import EngineConfig
from planner.errors import InvalidInputError
from planner.serve_flags import parse_serve_command
from planner.sglang_command import SglangServeConfig, sglang_launch_args, sglang_launch_command
from planner.trtllm_command import (
    EXTRA_OPTIONS_FILE,
    TrtllmServeConfig,
    trtllm_extra_options_yaml,
    trtllm_serve_args,
    trtllm_serve_command,
)
from planner.vllm_command import VllmServeConfig, vllm_serve_command

SGLANG_DOCUMENTED_FLAGS = {
    "--model-path",
    "--tp-size",
    "--dp-size",
    "--pp-size",
    "--ep-size",
    "--enable-dp-attention",
    "--dtype",
    "--quantization",
    "--max-running-requests",
    "--chunked-prefill-size",
    "--context-length",
    "--mem-fraction-static",
    "--kv-cache-dtype",
    "--disable-radix-cache",
    "--disable-cuda-graph",
    "--host",
    "--port",
}
SGLANG_KV_CACHE_DTYPES = {"auto", "fp8_e4m3", "fp8_e5m2", "bfloat16"}
TRTLLM_DOCUMENTED_FLAGS = {
    "--tp_size",
    "--pp_size",
    "--ep_size",
    "--max_batch_size",
    "--max_num_tokens",
    "--max_seq_len",
    "--kv_cache_free_gpu_memory_fraction",
    "--extra_llm_api_options",
    "--host",
    "--port",
}


def _flags(args: list[str]) -> set[str]:
    return {a for a in args if a.startswith("--")}


def test_sglang_dp_attention_with_expert_parallelism() -> None:
    config = SglangServeConfig(
        model="deepseek-ai/DeepSeek-V3.2",
        tensor_parallel_size=1,
        precision="fp8",
        engine=EngineConfig(
            engine="sglang",
            data_parallel_size=8,
            enable_expert_parallel=True,
            max_num_seqs=64,
            max_num_batched_tokens=1024,
            max_model_len=32768,
            gpu_memory_utilization=0.8,
            kv_cache_dtype="fp8",
            enable_prefix_caching=False,
            enforce_eager=True,
        ),
        host="0.0.0.0",
        port=30000,
    )
    args = sglang_launch_args(config)
    assert args[:4] == ["-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3.2"]
    assert _flags(args) <= SGLANG_DOCUMENTED_FLAGS
    value = {flag: args[i + 1] for i, flag in enumerate(args[:-1]) if flag.startswith("--")}
    # SGLang counts all 8 GPUs in --tp-size and divides the budgets by --dp-size
    assert (value["--tp-size"], value["--dp-size"], value["--ep-size"]) == ("8", "8", "8")
    assert value["--chunked-prefill-size"] == "8192" and value["--max-running-requests"] == "512"
    assert value["--kv-cache-dtype"] in SGLANG_KV_CACHE_DTYPES
    assert {"--enable-dp-attention", "--disable-radix-cache", "--disable-cuda-graph"} <= set(args)
    parsed = parse_serve_command(sglang_launch_command(config))
    assert (parsed.tp, parsed.attention_dp, parsed.ep_size, parsed.gpus) == (1, 8, 8, 8)
    assert parsed.max_num_batched_tokens == 8192 and parsed.max_model_len == 32768


def test_sglang_plain_tensor_parallel_states_only_what_it_sets() -> None:
    line = sglang_launch_command(
        SglangServeConfig(model="Qwen/Qwen3-32B", engine=EngineConfig(engine="sglang"))
    )
    assert line == (
        "python3 -m sglang.launch_server --model-path Qwen/Qwen3-32B --tp-size 1 --dtype bfloat16"
    )
    assert shlex.split(line)[0] == "python3"


@pytest.mark.parametrize(("tp", "dp", "ep"), [(8, 1, False), (4, 1, True), (2, 4, True)])
def test_vllm_and_sglang_commands_round_trip_to_the_same_layout(tp: int, dp: int, ep: bool) -> None:
    engine = {"data_parallel_size": dp, "enable_expert_parallel": ep}
    vllm = parse_serve_command(
        vllm_serve_command(
            VllmServeConfig(
                model="zai-org/GLM-4.6", tensor_parallel_size=tp, engine=EngineConfig(**engine)
            )
        )
    )
    sglang = parse_serve_command(
        sglang_launch_command(
            SglangServeConfig(
                model="zai-org/GLM-4.6",
                tensor_parallel_size=tp,
                engine=EngineConfig(engine="sglang", **engine),
            )
        )
    )
    for flags in (vllm, sglang):
        assert (flags.tp, flags.attention_dp, flags.gpus) == (tp, dp, tp * dp)
        assert flags.ep_size == (tp * dp if ep else 1)


def test_trtllm_dep8_uses_the_documented_flags_and_an_options_file() -> None:
    config = TrtllmServeConfig(
        model="deepseek-ai/DeepSeek-R1-0528",
        tensor_parallel_size=1,
        precision="fp8",
        engine=EngineConfig(
            engine="tensorrt-llm",
            data_parallel_size=8,
            enable_expert_parallel=True,
            max_num_seqs=256,
            max_num_batched_tokens=8192,
            max_model_len=16384,
            gpu_memory_utilization=0.85,
        ),
        port=8000,
    )
    args = trtllm_serve_args(config)
    assert args[0] == "deepseek-ai/DeepSeek-R1-0528"
    assert _flags(args) <= TRTLLM_DOCUMENTED_FLAGS
    value = {flag: args[i + 1] for i, flag in enumerate(args[:-1]) if flag.startswith("--")}
    assert (value["--tp_size"], value["--ep_size"]) == ("8", "8")
    assert value["--extra_llm_api_options"] == EXTRA_OPTIONS_FILE
    assert trtllm_extra_options_yaml(config) == "enable_attention_dp: true\n"
    parsed = parse_serve_command(trtllm_serve_command(config))
    assert (parsed.engine, parsed.tp, parsed.ep_size, parsed.max_model_len) == (
        "tensorrt-llm",
        8,
        8,
        16384,
    )
    plain = TrtllmServeConfig(model="m", tensor_parallel_size=4)
    assert trtllm_serve_command(plain) == "trtllm-serve m --tp_size 4"
    assert trtllm_extra_options_yaml(plain) == ""


def test_trtllm_refuses_attention_dp_with_attention_tp() -> None:
    config = TrtllmServeConfig(
        model="m",
        tensor_parallel_size=2,
        engine=EngineConfig(engine="tensorrt-llm", data_parallel_size=4),
    )
    with pytest.raises(InvalidInputError) as raised:
        trtllm_serve_args(config)
    assert raised.value.field == "tensor_parallel_size"
