"""Read a serving command line (``vllm serve``, ``python -m sglang.launch_server``,
``trtllm-serve``) into the layout and engine knobs it sets.

Used to turn published results whose configuration is only given as the command that started
the server into measured rows, and to check that the commands the planner writes
(:mod:`planner.vllm_command`, :mod:`planner.sglang_command`, :mod:`planner.trtllm_command`)
mean the layout they were built for.

Layout convention of the planner (the same for every engine):

- ``tp``: tensor-parallel size of the *attention* of one rank;
- ``attention_dp``: attention data-parallel ranks inside one replica; each holds its own
  requests and KV cache, and they run the MoE layers together (so TP x PP x attention_dp GPUs
  make one replica of an MoE model);
- ``ep_size``: the MoE layers' expert-parallel size (1: every expert sliced over the
  ``tp x attention_dp`` GPUs of a stage);
- ``replicas``: independent copies behind a load balancer.

Engine spellings: vLLM ``-tp N -dp M --enable-expert-parallel`` is tp=N, and for an MoE model
attention_dp=M with EP = N x M (vLLM docs, "Expert Parallel Deployment": "The EP size is
automatically calculated as TP x DP"); for a dense model the M DP ranks are replicas. SGLang
``--tp-size N --dp-size M --enable-dp-attention`` is attention TP = N / M with M attention-DP
ranks over N GPUs (docs.sglang.io, "DP, DPA and sgl-router"); without
``--enable-dp-attention`` the M DP copies are replicas; ``--ep-size`` is the EP size.
TensorRT-LLM ``trtllm-serve --tp_size N --ep_size E``: tp=N, EP=E.
"""

from __future__ import annotations

import shlex
from typing import Literal

from pydantic import BaseModel, ConfigDict

from planner.errors import InvalidInputError

EngineName = Literal["vllm", "sglang", "tensorrt-llm"]


class ServeFlags(BaseModel):
    """What a serving command sets, in the planner's layout convention (module docstring)."""

    model_config = ConfigDict(frozen=True)

    engine: EngineName
    model: str | None = None
    tp: int = 1
    pp: int = 1
    attention_dp: int = 1
    replicas: int = 1
    ep_size: int = 1
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str | None = None
    enable_prefix_caching: bool | None = None
    #: --async-scheduling (True), --no-async-scheduling (False); None: the release's default
    async_scheduling: bool | None = None
    quantization: str | None = None
    ignored: tuple[str, ...] = ()

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.attention_dp * self.replicas


_INT_FLAGS: dict[EngineName, dict[str, str]] = {
    "vllm": {
        "-tp": "tp",
        "--tensor-parallel-size": "tp",
        "-pp": "pp",
        "--pipeline-parallel-size": "pp",
        "-dp": "dp",
        "--data-parallel-size": "dp",
        "--max-num-seqs": "max_num_seqs",
        "--max-num-batched-tokens": "max_num_batched_tokens",
        "--max-model-len": "max_model_len",
    },
    "sglang": {
        "--tp": "tp",
        "--tp-size": "tp",
        "--tensor-parallel-size": "tp",
        "--pp": "pp",
        "--pp-size": "pp",
        "--dp": "dp",
        "--dp-size": "dp",
        "--data-parallel-size": "dp",
        "--ep": "ep",
        "--ep-size": "ep",
        "--expert-parallel-size": "ep",
        "--max-running-requests": "max_num_seqs",
        "--chunked-prefill-size": "max_num_batched_tokens",
        "--context-length": "max_model_len",
    },
    "tensorrt-llm": {
        "--tp_size": "tp",
        "--pp_size": "pp",
        "--ep_size": "ep",
        "--max_batch_size": "max_num_seqs",
        "--max_num_tokens": "max_num_batched_tokens",
        "--max_seq_len": "max_model_len",
    },
}
_FLOAT_FLAGS = {
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--mem-fraction-static": "gpu_memory_utilization",
    "--kv_cache_free_gpu_memory_fraction": "gpu_memory_utilization",
}
_MODEL_FLAGS = {"--model", "--model-path"}


def _engine_of(argv: list[str]) -> tuple[EngineName, list[str]]:
    """The engine and the arguments after the program name."""
    for i, word in enumerate(argv):
        base = word.rsplit("/", 1)[-1]
        if base == "vllm" and i + 1 < len(argv) and argv[i + 1] == "serve":
            return "vllm", argv[i + 2 :]
        if word == "-m" and i + 1 < len(argv) and argv[i + 1].startswith("sglang.launch_server"):
            return "sglang", argv[i + 2 :]
        if base in ("trtllm-serve",):
            rest = argv[i + 1 :]
            return "tensorrt-llm", rest[1:] if rest and rest[0] == "serve" else rest
        if base == "sglang" and i + 1 < len(argv) and argv[i + 1] == "serve":
            return "sglang", argv[i + 2 :]
    raise InvalidInputError(
        "command",
        " ".join(argv)[:80],
        "a 'vllm serve', 'python -m sglang.launch_server' or 'trtllm-serve' command line",
    )


def _split_option(word: str) -> tuple[str, str | None]:
    if word.startswith("-") and "=" in word:
        flag, value = word.split("=", 1)
        return flag, value
    return word, None


def parse_serve_command(command: str) -> ServeFlags:
    """Parse one serving command line; flags that do not change the layout or the scheduler
    are listed in ``ignored``. Bad numbers raise :class:`InvalidInputError` naming the flag."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise InvalidInputError("command", command[:80], f"a shell command line ({exc})") from None
    engine, args = _engine_of(argv)
    ints: dict[str, int] = {}
    values: dict[str, object] = {}
    ignored: list[str] = []
    positional: list[str] = []
    flags_int = _INT_FLAGS[engine]
    i = 0
    while i < len(args):
        flag, inline = _split_option(args[i])
        takes_value = flag in flags_int or flag in _FLOAT_FLAGS or flag in _MODEL_FLAGS
        takes_value = takes_value or flag in ("--kv-cache-dtype", "--quantization", "-q")
        if takes_value:
            if inline is None:
                if i + 1 >= len(args):
                    raise InvalidInputError(flag, None, "a value after the flag")
                inline = args[i + 1]
                i += 1
            if flag in flags_int:
                try:
                    ints[flags_int[flag]] = int(inline)
                except ValueError:
                    raise InvalidInputError(flag, inline, "a whole number") from None
            elif flag in _FLOAT_FLAGS:
                try:
                    values[_FLOAT_FLAGS[flag]] = float(inline)
                except ValueError:
                    raise InvalidInputError(flag, inline, "a number") from None
            elif flag in _MODEL_FLAGS:
                values["model"] = inline
            elif flag == "--kv-cache-dtype":
                values["kv_cache_dtype"] = inline
            else:
                values["quantization"] = inline
        elif flag == "--enable-expert-parallel":
            values["expert_parallel"] = True
        elif flag == "--enable-dp-attention":
            values["dp_attention"] = True
        elif flag == "--enable-prefix-caching":
            values["enable_prefix_caching"] = True
        elif flag in ("--no-enable-prefix-caching", "--disable-radix-cache"):
            values["enable_prefix_caching"] = False
        elif flag == "--async-scheduling":
            values["async_scheduling"] = True
        elif flag == "--no-async-scheduling":
            values["async_scheduling"] = False
        elif flag.startswith("-"):
            ignored.append(flag)
            # a following word that is not a flag is this flag's value
            if inline is None and i + 1 < len(args) and not args[i + 1].startswith("-"):
                i += 1
        else:
            positional.append(flag)
        i += 1
    if "model" not in values and positional:
        values["model"] = positional[0]
    for name, value in ints.items():
        if value < 1:
            raise InvalidInputError(name, value, "an integer >= 1")
    tp, pp, dp = ints.get("tp", 1), ints.get("pp", 1), ints.get("dp", 1)
    ep = ints.get("ep", 1)
    attention_dp, replicas = 1, dp
    if engine == "vllm":
        if values.get("expert_parallel"):
            attention_dp, replicas, ep = dp, 1, tp * dp
    elif engine == "sglang" and values.get("dp_attention"):
        if tp % dp:
            raise InvalidInputError(
                "--dp-size", dp, f"a divisor of --tp-size {tp} with --enable-dp-attention"
            )
        attention_dp, replicas, tp = dp, 1, tp // dp
    return ServeFlags(
        engine=engine,
        model=values.get("model"),
        tp=tp,
        pp=pp,
        attention_dp=attention_dp,
        replicas=replicas,
        ep_size=ep,
        max_num_seqs=ints.get("max_num_seqs"),
        max_num_batched_tokens=ints.get("max_num_batched_tokens"),
        max_model_len=ints.get("max_model_len"),
        gpu_memory_utilization=values.get("gpu_memory_utilization"),
        kv_cache_dtype=values.get("kv_cache_dtype"),
        enable_prefix_caching=values.get("enable_prefix_caching"),
        async_scheduling=values.get("async_scheduling"),
        quantization=values.get("quantization"),
        ignored=tuple(ignored),
    )


__all__ = ["ServeFlags", "parse_serve_command"]
