"""Speculative decoding as a dimension of the one search, over the real catalog and the real
fitted model: the brief's scenarios rank speculative plans with commands that enable it."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from planner.catalog import Catalog
from planner.deploy import TARGETS
from planner.deploy.bundle import render
from planner.deploy.spec import spec_from_plan
from planner.engine import EngineConfig
from planner.perf.model import PerformanceModel, get_performance_model
from planner.recommend import (
    CapacityCache,
    Demand,
    RecommendRequest,
    SearchSpace,
    Slo,
    perf_predictor,
    ranking_rows,
    recommend,
)
from planner.recommend.analysis import speculation_comparison
from planner.recommend.request import RecommendationResult
from tests.planner.test_sglang_command import SGLANG_DOCUMENTED_FLAGS
from tests.planner.test_speculative_commands import (
    SGLANG_SPEC_FLAGS,
    VLLM_SPEC_KEYS,
    VLLM_SPEC_METHODS,
)
from tests.planner.test_vllm_command import DOCUMENTED_FLAGS_0_27_1

R1 = "deepseek-ai/DeepSeek-R1-0528"
LLAMA_31 = "meta-llama/Llama-3.1-70B-Instruct"
EIGHT_H200 = ("p5en.48xlarge", "8x_H200-SXM_SECURE")


@pytest.fixture(scope="module")
def perf(catalog: Catalog) -> PerformanceModel:
    return get_performance_model(catalog)


def _search(
    catalog: Catalog,
    perf: PerformanceModel,
    model: str,
    tpot_ms: float,
    engine: EngineConfig | None = None,
    **search: object,
) -> RecommendationResult:
    request = RecommendRequest(
        model=model,
        input_len=2048,
        output_len=512,
        demand=Demand(avg_rate_rps=1.0, peak_rate_rps=2.0, spare_replicas=1),
        slo=Slo(tpot_p99_ms=tpot_ms),
        search=SearchSpace(**search),  # type: ignore[arg-type]
        engine=engine or EngineConfig(),
    )
    return recommend(
        catalog, request, perf_predictor(catalog, request, perf), cache=CapacityCache()
    )


def test_deepseek_r1_on_8_h200_at_20_ms_ranks_mtp_plans_first(
    catalog: Catalog, perf: PerformanceModel
) -> None:
    space = {"instances": EIGHT_H200, "precisions": ("fp8",), "max_nodes": 1}
    plain = _search(catalog, perf, R1, 20, **space)
    spec = _search(catalog, perf, R1, 20, speculative="auto", **space)
    assert plain.ranked and all(r.spec_method == "none" for r in plain.ranked)
    best = spec.ranked[0]
    assert best.spec_method == "mtp" and best.pred_spec_accept_len is not None
    assert best.pred_tpot_ms_p99 <= 20
    # the best plan with and without speculation are both ranked; MTP is the cheaper
    without = next(r for r in spec.ranked if r.spec_method == "none")
    assert best.usd_per_million_output_tokens < without.usd_per_million_output_tokens
    config = json.loads(best.vllm_command.split("--speculative-config ")[1].strip("'"))
    assert config == {"method": "mtp", "num_speculative_tokens": best.num_spec_tokens}
    assert best.plan is not None and best.plan.engine.spec_method == "mtp"
    row = ranking_rows(spec)[0]
    assert (row["spec_method"], row["num_spec_tokens"]) == ("mtp", best.num_spec_tokens)
    # what R1 cannot run, and why
    reasons = {r.reason for r in spec.rejected}
    assert f"no published EAGLE-3 draft for {R1}" in reasons
    # every deployment file starts the engine with the same speculative config, which
    # survives its YAML or its shell as the JSON the engine parses
    deployed = spec_from_plan(best.plan, catalog)
    for target in TARGETS:
        found = [json.loads(text) for text in _spec_configs(render(deployed, target))]
        assert found and all(f == config for f in found), target


def _spec_configs(files: dict[str, str]) -> list[str]:
    """The speculative configs of the files, as their YAML loader and the shell read them."""
    words: list[str] = []
    for name, text in files.items():
        if name.endswith((".yaml", ".yml")):
            for doc in yaml.safe_load_all(text):
                words += _strings(doc)
        else:
            words += [w for line in text.splitlines() if "--speculative" in line
                      for w in shlex.split(line)]  # fmt: skip
    configs = []
    for word in words:  # an argument, or a script the container runs
        for line in word.splitlines():
            for part in shlex.split(line) if " " in line else [line]:
                if part.startswith('{"method"'):
                    configs.append(part)
    return configs


def _strings(node: object) -> list[str]:
    if isinstance(node, dict):
        return [s for value in node.values() for s in _strings(value)]
    if isinstance(node, list):
        return [s for value in node for s in _strings(value)]
    return [node] if isinstance(node, str) else []


def test_the_briefs_70b_at_30_ms_ranks_speculative_plans_with_their_commands(
    catalog: Catalog, perf: PerformanceModel
) -> None:
    space = {"providers": ("aws",), "regions": ("us-east-1",)}
    auto = _search(catalog, perf, LLAMA_31, 30, speculative="auto", **space)
    # Llama-3.1-70B has neither MTP layers nor a published EAGLE-3 draft: said, not guessed,
    # and auto falls back to n-gram (prompt lookup), ranked beside the best plan without it
    reasons = {r.reason for r in auto.rejected}
    assert f"no published EAGLE-3 draft for {LLAMA_31}" in reasons
    assert any("has no MTP layers" in reason for reason in reasons)
    assert {r.spec_method for r in auto.ranked} == {"none", "ngram"}
    speculative = [r for r in auto.ranked if r.spec_method == "ngram"]
    assert speculative[0].pred_tpot_ms_p99 <= 30
    for rec in speculative:
        # the reason is stated: why n-gram, and that its acceptance is the workload's
        assert f"auto's method for {LLAMA_31}" in rec.spec_reason
        assert "workload's own" in rec.spec_reason and "Verify run" in rec.spec_reason
        assert "InstructCoder" in rec.spec_reason  # the published run it assumes
        assert rec.pred_spec_accept_len == pytest.approx(1.86, abs=0.01)  # 0.495 at k=3
        config = _vllm_spec_config(rec.vllm_command)
        assert config == {"method": "ngram", "num_speculative_tokens": rec.num_spec_tokens}
    assert all(not r.spec_reason for r in auto.ranked if r.spec_method == "none")
    rows = ranking_rows(auto)
    assert any(row["spec_reason"] == speculative[0].spec_reason for row in rows)
    assert "Why: n-gram (prompt lookup" in (speculation_comparison(auto) or "")


def test_the_briefs_70b_n_gram_plans_on_sglang_launch_with_its_flags(
    catalog: Catalog, perf: PerformanceModel
) -> None:
    sglang = _search(
        catalog, perf, LLAMA_31, 30, speculative="auto",
        instances=("g6e.12xlarge", "p5.48xlarge", "p5en.48xlarge"), max_nodes=1,
        engine=EngineConfig(engine="sglang"),
    )  # fmt: skip
    speculative = [r for r in sglang.ranked if r.spec_method == "ngram"]
    assert speculative and speculative[0].pred_tpot_ms_p99 <= 30
    for rec in speculative:
        words = shlex.split(rec.launch_command)
        assert words[:3] == ["python3", "-m", "sglang.launch_server"]
        flags = {w for w in words if w.startswith("--")}
        assert flags <= SGLANG_DOCUMENTED_FLAGS | SGLANG_SPEC_FLAGS, flags - SGLANG_DOCUMENTED_FLAGS
        assert _after(words, "--speculative-algorithm") == "NGRAM"
        assert _after(words, "--speculative-num-draft-tokens") == str(rec.num_spec_tokens + 1)
        assert rec.plan is not None and rec.plan.engine.spec_method == "ngram"


def test_a_search_where_speculation_loses_ranks_the_plan_without_it_first(
    catalog: Catalog, perf: PerformanceModel
) -> None:
    """A workload whose prompts n-gram hardly matches (1.2 tokens a step): every step still
    verifies k + 1 tokens, so speculation saves nothing; the search keeps both and ranks the
    plan without it first."""
    request = RecommendRequest(
        model=LLAMA_31,
        input_len=2048,
        output_len=512,
        spec_accept_len=1.2,
        demand=Demand(avg_rate_rps=20.0, peak_rate_rps=40.0, spare_replicas=1),
        slo=Slo(tpot_p99_ms=30),
        search=SearchSpace(providers=("aws",), regions=("us-east-1",), speculative="auto"),
    )
    result = recommend(
        catalog, request, perf_predictor(catalog, request, perf), cache=CapacityCache()
    )
    assert result.ranked[0].spec_method == "none"
    ngram = [r for r in result.ranked if r.spec_method == "ngram"]
    assert ngram and all(r.pred_spec_accept_len == pytest.approx(1.2) for r in ngram)
    cheapest = result.ranked[0].usd_per_million_output_tokens
    # whole replicas price a plan, so the cheapest n-gram plan can tie the cheapest plan ($12.36
    # both with session 38's fit: the same replicas meet the demand); the tie ranks it second
    assert min(r.usd_per_million_output_tokens for r in ngram) >= cheapest
    assert "stated: 1.2 tokens a step" in ngram[0].spec_reason
    comparison = speculation_comparison(result) or ""
    assert "more per output token" in comparison or "the same cost per output token" in comparison


def _vllm_spec_config(command: str) -> dict[str, object]:
    """The command's ``--speculative-config``, parsed as the shell and vLLM would, after
    checking every flag is one vLLM 0.27.1 documents and every key one SpeculativeConfig has."""
    words = shlex.split(command)
    assert words[:2] == ["vllm", "serve"]
    flags = {w for w in words if w.startswith("--")}
    assert flags <= DOCUMENTED_FLAGS_0_27_1 | {"--speculative-config"}, flags
    config: dict[str, object] = json.loads(_after(words, "--speculative-config"))
    assert set(config) <= VLLM_SPEC_KEYS and config["method"] in VLLM_SPEC_METHODS
    return config


def _after(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


LLAMA_33 = "meta-llama/Llama-3.3-70B-Instruct"


def _recommend_by_default(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    """`planner recommend ... --json` without --speculative: its default is auto."""
    from planner.cli import main

    main(["recommend", "--input-len", "2048", "--output-len", "512", "--rate", "1",
          "--peak-rate", "2", "--json", *args])  # fmt: skip
    payload: dict[str, object] = json.loads(capsys.readouterr().out)
    return payload


def test_recommend_ranks_deepseek_r1_mtp_plans_with_their_commands_by_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    payload = _recommend_by_default(
        capsys, "--model", R1, "--slo-tpot-p99-ms", "20", "--instance", "p5en.48xlarge",
        "--precision", "fp8", "--max-nodes", "1",
    )  # fmt: skip
    ranked = payload["ranked"]
    assert isinstance(ranked, list) and ranked
    best = ranked[0]
    assert best["spec_method"] == "mtp" and best["pred_tpot_ms_p99"] <= 20
    config = json.loads(best["vllm_command"].split("--speculative-config ")[1].strip("'"))
    assert config == {"method": "mtp", "num_speculative_tokens": best["num_spec_tokens"]}
    assert any(r["spec_method"] == "none" for r in ranked)  # the best plan without it, too


def test_recommend_ranks_the_70b_eagle3_plans_at_30_ms_with_their_commands_by_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    payload = _recommend_by_default(
        capsys, "--model", LLAMA_33, "--slo-tpot-p99-ms", "30", "--provider", "aws",
        "--region", "us-east-1",
    )  # fmt: skip
    ranked = payload["ranked"]
    assert isinstance(ranked, list)
    eagle = [r for r in ranked if r["spec_method"] == "eagle3"]
    assert eagle and eagle[0]["pred_tpot_ms_p99"] <= 30
    for row in eagle:
        config = json.loads(row["vllm_command"].split("--speculative-config ")[1].strip("'"))
        assert config["method"] == "eagle3"
        assert config["model"] == "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"
