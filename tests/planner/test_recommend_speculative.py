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
from planner.recommend.request import RecommendationResult

R1 = "deepseek-ai/DeepSeek-R1-0528"
LLAMA_31 = "meta-llama/Llama-3.1-70B-Instruct"
EIGHT_H200 = ("p5en.48xlarge", "8x_H200-SXM_SECURE")


@pytest.fixture(scope="module")
def perf(catalog: Catalog) -> PerformanceModel:
    return get_performance_model(catalog)


def _search(
    catalog: Catalog, perf: PerformanceModel, model: str, tpot_ms: float, **search: object
) -> RecommendationResult:
    request = RecommendRequest(
        model=model,
        input_len=2048,
        output_len=512,
        demand=Demand(avg_rate_rps=1.0, peak_rate_rps=2.0, spare_replicas=1),
        slo=Slo(tpot_p99_ms=tpot_ms),
        search=SearchSpace(**search),  # type: ignore[arg-type]
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
    # Llama-3.1-70B has neither MTP layers nor a published EAGLE-3 draft: said, not guessed
    assert all(r.spec_method == "none" for r in auto.ranked)
    reasons = {r.reason for r in auto.rejected}
    assert f"no published EAGLE-3 draft for {LLAMA_31}" in reasons
    assert any("has no MTP layers" in reason for reason in reasons)
    ngram = _search(catalog, perf, LLAMA_31, 30, speculative="ngram", **space)
    speculative = [r for r in ngram.ranked if r.spec_method == "ngram"]
    assert speculative and speculative[0].pred_tpot_ms_p99 <= 30
    for rec in speculative:
        assert '--speculative-config \'{"method":"ngram","num_speculative_tokens":3}\'' in (
            rec.vllm_command
        )


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
