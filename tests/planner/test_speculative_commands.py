"""Speculative decoding on each engine's command line: only the flags and options each engine
documents for the pinned release, parsed back as its own parser would.

No engine is installed here (vLLM is an optional multi-GB extra, SGLang and TensorRT-LLM run on
CUDA only), so each command is checked against the engine's own definitions, transcribed with
their source:

- vLLM 0.27.1: ``--speculative-config`` takes the JSON of ``SpeculativeConfig``
  (vllm/engine/arg_utils.py; vllm/config/speculative.py: ``method`` among its
  ``SpeculativeMethod`` values, ``model``, ``num_speculative_tokens`` > 0, ``prompt_lookup_max``
  and ``prompt_lookup_min`` for n-gram);
- SGLang 0.5.x server arguments (python/sglang/srt/server_args.py): ``--speculative-algorithm``
  (EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM), ``--speculative-draft-model-path``,
  ``--speculative-num-steps``, ``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``;
  with top-k 1 SGLang resets the draft tokens to steps + 1 unless they already are;
- TensorRT-LLM 1.0 LLM API (tensorrt_llm/llmapi/llm_args.py): ``speculative_config`` with
  ``decoding_type`` MTP (``num_nextn_predict_layers``), Eagle (``max_draft_len``,
  ``speculative_model_dir``, ``eagle3_one_model``) or NGram (``max_draft_len``,
  ``max_matching_ngram_size``).
"""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from planner.engine import EngineConfig
from planner.errors import InvalidInputError
from planner.sglang_command import SglangServeConfig, sglang_launch_args
from planner.trtllm_command import TrtllmServeConfig, trtllm_extra_options_yaml, trtllm_serve_args
from planner.vllm_command import VllmServeConfig, vllm_serve_args, vllm_serve_command
from tests.planner.test_sglang_command import SGLANG_DOCUMENTED_FLAGS, TRTLLM_DOCUMENTED_FLAGS
from tests.planner.test_vllm_command import DOCUMENTED_FLAGS_0_27_1

VLLM_SPEC_METHODS = {"ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "eagle",
                     "eagle3", "mtp", "ngram_gpu"}  # fmt: skip
VLLM_SPEC_KEYS = {"method", "model", "num_speculative_tokens", "prompt_lookup_max",
                  "prompt_lookup_min", "draft_tensor_parallel_size"}  # fmt: skip
SGLANG_SPEC_FLAGS = {
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
}
SGLANG_ALGORITHMS = {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"}
TRTLLM_SPEC_FIELDS = {
    "MTP": {"decoding_type", "num_nextn_predict_layers"},
    "Eagle": {"decoding_type", "max_draft_len", "speculative_model_dir", "eagle3_one_model"},
    "NGram": {"decoding_type", "max_draft_len", "max_matching_ngram_size"},
}
LLAMA = "meta-llama/Llama-3.3-70B-Instruct"
R1 = "deepseek-ai/DeepSeek-R1-0528"


def _value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


@pytest.mark.parametrize(
    ("model", "method", "k"),
    [(LLAMA, "eagle3", 3), (R1, "mtp", 1), (R1, "mtp", 3), (LLAMA, "ngram", 4)],
)
def test_vllm_speculative_config_is_a_documented_json(model: str, method: str, k: int) -> None:
    engine = EngineConfig(spec_method=method, num_spec_tokens=k)  # type: ignore[arg-type]
    config = VllmServeConfig(model=model, tensor_parallel_size=8, engine=engine)
    args = vllm_serve_args(config)
    assert {a for a in args if a.startswith("--")} <= DOCUMENTED_FLAGS_0_27_1 | {
        "--speculative-config"
    }
    spec = json.loads(_value(args, "--speculative-config"))
    assert set(spec) <= VLLM_SPEC_KEYS and spec["method"] in VLLM_SPEC_METHODS
    assert (spec["method"], spec["num_speculative_tokens"]) == (method, k)
    if method == "eagle3":
        assert spec["model"] == "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"
    else:
        assert "model" not in spec  # MTP: the model's own layers; n-gram: none
    # the JSON survives the shell as one argument
    assert shlex.split(vllm_serve_command(config))[1:] == args


@pytest.mark.parametrize(("model", "method"), [(LLAMA, "eagle3"), (R1, "mtp"), (LLAMA, "ngram")])
def test_sglang_speculative_flags_are_documented(model: str, method: str) -> None:
    engine = EngineConfig(engine="sglang", spec_method=method)  # type: ignore[arg-type]
    args = sglang_launch_args(SglangServeConfig(model=model, tensor_parallel_size=8, engine=engine))
    flags = {a for a in args if a.startswith("--")}
    assert flags <= SGLANG_DOCUMENTED_FLAGS | SGLANG_SPEC_FLAGS
    algorithm = _value(args, "--speculative-algorithm")
    assert algorithm in SGLANG_ALGORITHMS
    draft_tokens = int(_value(args, "--speculative-num-draft-tokens"))
    if method == "ngram":
        assert algorithm == "NGRAM" and draft_tokens == 6  # SGLang's 5 steps when none given
        return
    steps = int(_value(args, "--speculative-num-steps"))
    # chain drafting: what SGLang itself would set at top-k 1
    assert _value(args, "--speculative-eagle-topk") == "1" and draft_tokens == steps + 1
    if method == "mtp":
        assert (algorithm, steps) == ("NEXTN", 3)  # SGLang's auto choice for DeepSeek-V3
        assert "--speculative-draft-model-path" not in flags  # the model's own MTP layers
    else:
        assert algorithm == "EAGLE3"
        assert _value(args, "--speculative-draft-model-path") == (
            "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"
        )


@pytest.mark.parametrize(("model", "method"), [(LLAMA, "eagle3"), (R1, "mtp"), (LLAMA, "ngram")])
def test_trtllm_speculative_config_is_an_llm_api_option(model: str, method: str) -> None:
    engine = EngineConfig(engine="tensorrt-llm", spec_method=method, num_spec_tokens=2)  # type: ignore[arg-type]
    config = TrtllmServeConfig(model=model, tensor_parallel_size=8, engine=engine)
    args = trtllm_serve_args(config)
    assert {a for a in args if a.startswith("--")} <= TRTLLM_DOCUMENTED_FLAGS
    assert "--extra_llm_api_options" in args
    options = yaml.safe_load(trtllm_extra_options_yaml(config))
    spec = options["speculative_config"]
    assert set(spec) == TRTLLM_SPEC_FIELDS[spec["decoding_type"]]
    if method == "mtp":
        assert spec == {"decoding_type": "MTP", "num_nextn_predict_layers": 2}
    elif method == "eagle3":
        assert spec["eagle3_one_model"] is True and spec["max_draft_len"] == 2
        assert spec["speculative_model_dir"] == "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"
    else:
        assert spec["max_draft_len"] == 2 and spec["max_matching_ngram_size"] == 2


def test_no_speculation_adds_nothing_and_a_missing_draft_is_one_line() -> None:
    plain = vllm_serve_args(VllmServeConfig(model=LLAMA))
    assert "--speculative-config" not in plain
    assert not SGLANG_SPEC_FLAGS & set(
        sglang_launch_args(SglangServeConfig(model=LLAMA, engine=EngineConfig(engine="sglang")))
    )
    engine = EngineConfig(spec_method="eagle3")
    with pytest.raises(InvalidInputError, match="published draft"):
        vllm_serve_args(VllmServeConfig(model="acme/NoDraft", engine=engine))
