"""Why a prediction is uncertain, the folds that measure it, and intervals widened for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.catalog import Catalog, MeasuredResult
from planner.perf.calibration import CoefficientKey, fit_coefficients
from planner.perf.model import PerformanceModel
from planner.perf.scenario import Scenario
from planner.perf.uncertainty import (
    CALIBRATION_FILE,
    SeenData,
    calibration_multipliers,
    novelty,
    widen,
)
from planner.perf.validation import (
    calibrate_interval_multipliers,
    folds,
    predict_held_out,
    source_key,
)


def _row(**kw: object) -> MeasuredResult:
    base: dict[str, object] = {
        "source": "gpustack/gpustack docs/performance-lab/x.md",
        "engine": "vllm",
        "model": "m",
        "precision": "bf16",
        "gpu": "H100-SXM",
        "num_gpus": 1,
        "tp": 1,
        "pp": 1,
        "input_len": 1,
        "output_len": 1,
        "load": "concurrency",
        "concurrency": 1,
    }
    base.update(kw)
    return MeasuredResult.model_validate(base)


def test_sources_are_publishers() -> None:
    assert source_key(_row()) == "gpustack/gpustack"
    nvidia = "NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md"
    assert source_key(_row(source=nvidia)) == "NVIDIA/TensorRT-LLM"
    nim = "https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance.md"
    assert source_key(_row(source=nim)) == "docs.nvidia.com/nim"
    assert source_key(_row(origin="user", source="run abc")) == "user"


def test_reasons_name_what_the_data_do_not_cover() -> None:
    seen = SeenData(
        gpus=frozenset({"h100-sxm", "h200"}),
        family_gpu=frozenset({("vllm", "h200"), ("sglang", "h100-sxm")}),
        family_kind_gpu=frozenset({("vllm", "moe", "h200"), ("sglang", "dense", "h100-sxm")}),
        family_kind=frozenset({("vllm", "moe"), ("sglang", "dense")}),
        family_entrypoint=frozenset({("vllm", "serve"), ("sglang", "serve")}),
        versions=frozenset({"sglang:0.5", "vllm:0.11"}),
        family_class=frozenset({("vllm", "fine-grained MoE"), ("vllm", "MLA")}),
        family_layout=frozenset({("vllm", "expert-parallel")}),
    )
    key = CoefficientKey("sglang", "H200", "sglang:0.5", "serve", "moe")
    reasons = novelty(key, ("fine-grained MoE", "MLA"), ("attention-data-parallel",), seen)
    assert reasons == [
        "no measured SGLang result on H200",
        "no measured MoE model on SGLang",
        "no fine-grained MoE model measured on SGLang",
        "no MLA model measured on SGLang",
        "no attention-data-parallel layout measured on SGLang",
    ]
    moe_on_h100 = novelty(
        CoefficientKey("sglang", "H100-SXM", "sglang:0.5", "serve", "moe"), (), (), seen
    )
    assert moe_on_h100[0] == "no measured MoE result on SGLang with H100-SXM"
    old = novelty(CoefficientKey("vllm", "H200", "vllm:0.7", "serve", "moe"), (), (), seen)
    assert old == ["no measurement of vLLM 0.7 (the release can move 2x)"]
    assert novelty(CoefficientKey("vllm", "H200", "vllm:0.11", "serve", "moe"), (), (), seen) == []


def test_more_reasons_never_narrow_the_interval() -> None:
    multipliers = calibration_multipliers()
    assert len(multipliers) == 4 and multipliers == tuple(sorted(multipliers))
    payload = json.loads(Path(CALIBRATION_FILE).read_text(encoding="utf-8"))
    assert payload["source"] and payload["as_of"]
    low, high = widen((0.8, 1.25), 3)
    assert low <= 0.8 and high >= 1.25


def test_multipliers_cover_80_percent_of_each_group() -> None:
    class Fake:
        def __init__(self, ratio: float, reasons: int) -> None:
            self.measured = {"output_tok_per_s": 100.0 * ratio}
            self.predicted = {"output_tok_per_s": 100.0}
            self.reasons = ("r",) * reasons
            self.own_low, self.own_high = 0.5, 2.0

    import math

    rows = [Fake(2.0 ** (2 * i / 10), 0) for i in range(10)]  # needs 0.0 .. 1.8 of the half-width
    rows += [Fake(2.0 ** (3 * i / 10), 2) for i in range(10)]  # 0.0 .. 2.7
    out = calibrate_interval_multipliers(rows)  # type: ignore[arg-type]
    assert out[0] == pytest.approx(1.44, abs=1e-9)
    assert out[1] == out[0]  # no rows with one reason: the previous count's
    # two reasons need 2.16 over their 10 rows; a pool counts as much as the one before it
    # at 20 rows, so 10 move a third of the way in log: 1.44 x (2.16 / 1.44) ** (10 / 30)
    assert out[2] == pytest.approx(1.44 * 1.5 ** (1 / 3), abs=1e-9) and out[3] == out[2]
    assert all(math.isfinite(m) for m in out)
    # rows that need less than their own half-width never narrow it
    narrow = [Fake(2.0 ** (i / 10), 0) for i in range(10)]  # 0.0 .. 0.9: 0.72 at the 80th
    assert calibrate_interval_multipliers(narrow) == [1.0] * 4  # type: ignore[arg-type]


def test_a_prediction_says_why_it_is_uncertain(model: PerformanceModel) -> None:
    covered = model.predict(
        Scenario(
            engine="vllm",
            engine_version="0.11.0",
            model="zai-org/GLM-4.6",
            gpu="H200",
            tp=8,
            input_len=1000,
            output_len=200,
            concurrency=16,
        )
    )
    far = model.predict(
        Scenario(
            engine="sglang",
            model="zai-org/GLM-4.6",
            gpu="L40S",
            tp=8,
            precision="fp8",
            input_len=1000,
            output_len=200,
            concurrency=16,
        )
    )
    assert "no measured SGLang result on L40S" in far.uncertain_because
    assert far.confidence == "extrapolated"
    width = lambda p: p.output_tok_per_s_high / p.output_tok_per_s_low  # noqa: E731
    assert len(covered.uncertain_because) < len(far.uncertain_because)
    assert width(far) > width(covered)


def test_class_folds_hold_out_every_model_of_a_class(
    model: PerformanceModel, catalog: Catalog
) -> None:
    plan = dict(folds(model.samples, "class"))
    assert {"dense GQA", "coarse MoE", "fine-grained MoE", "MLA", "sliding-window"} <= set(plan)
    for cls, test in plan.items():
        held = {model.samples[i].result.model for i in test}
        train = {s.result.model for i, s in enumerate(model.samples) if i not in set(test)}
        assert not any(cls in catalog.model(m).architecture.model_classes for m in train)
        assert all(cls in catalog.model(m).architecture.model_classes for m in held)
    # DeepSeek is held out with the MLA models and again with the fine-grained MoE ones
    deepseek = [i for i, s in enumerate(model.samples) if "DeepSeek-R1-0528" in s.result.model]
    assert set(deepseek) <= set(plan["MLA"]) and set(deepseek) <= set(plan["fine-grained MoE"])
    sources = dict(folds(model.samples, "source"))
    assert {"gpustack/gpustack", "NVIDIA/TensorRT-LLM", "sgl-project/sglang"} <= set(sources)


def test_held_out_rows_carry_their_reasons(
    model: PerformanceModel, roofline: list[dict[str, float]]
) -> None:
    # the GPUStack fold of leave-one-source-out alone (one fit, not the scheme's twenty)
    fold = "gpustack/gpustack"
    test = dict(folds(model.samples, "source"))[fold]
    train = [s for i, s in enumerate(model.samples) if i not in set(test)]
    fitted, seen = fit_coefficients(train), SeenData.of(train)
    gpustack = [predict_held_out(model.samples[i], fitted, fold, roofline[i], seen) for i in test]
    # with GPUStack held out, no SGLang result on A100 remains (DataCrunch's and dstack's SGLang
    # rows are on H200, the cookbook's on B200, H100 and MI300X)
    sglang = [
        h
        for h in gpustack
        if h.sample.family == "sglang" and h.sample.result.gpu == "A100-80GB-SXM"
    ]
    assert sglang and all(h.reasons for h in sglang)
    assert all(h.low <= h.predicted["output_tok_per_s"] <= h.high for h in gpustack)
