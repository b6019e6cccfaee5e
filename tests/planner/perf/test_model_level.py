"""The model level of the fit (planner.perf.calibration, MODEL_TERMS): an MoE model's expert
kernels on a GPU generation (and the roofline its expert bytes dominate), learnt from the
shipped rows and lent to every engine on every GPU of that generation."""

from __future__ import annotations

import numpy as np
import pytest

from planner.perf.calibration import (
    FITTED,
    MODEL_TERMS,
    WIDE_PRIOR_SD,
    _taught_spread,
    coefficient_key,
    level_fits,
    level_keys,
)
from planner.perf.model import PerformanceModel
from planner.perf.scenario import Scenario
from planner.perf.step_time import IDX

QWEN = "Qwen/Qwen3-235B-A22B-Instruct-2507"


def _tp8(
    model: str, engine: str = "sglang", precision: str = "bf16", gpu: str = "B200"
) -> Scenario:
    return Scenario(
        model=model,
        gpu=gpu,
        tp=8,
        precision=precision,
        engine=engine,
        engine_version="0.5.6" if engine == "sglang" else None,
        input_len=1000,
        output_len=1000,
        concurrency=16,
    )


def test_the_level_fits_the_routed_expert_terms_and_the_roofline() -> None:
    fits = level_fits("model")
    assert {t for t, f in zip(FITTED, fits, strict=True) if f} == set(MODEL_TERMS)
    assert set(MODEL_TERMS) == {"expert_gemm", "expert_read", "expert_activation", "roofline"}


def test_two_moe_models_under_one_release_on_one_gpu_have_layer_floors_of_their_own(
    model: PerformanceModel,
) -> None:
    """At one in flight on 8 x B200 under SGLang 0.5.6, gpt-oss-120b decodes in 64 us a layer and
    DeepSeek-R1-0528 in 150 (the SGLang documentation's rows): the same release's floor, each
    model's own on the vendor's platform (the model_vendor level, which fits the floor only)
    about that far apart; so the lighter layers' step at one in flight is predicted under
    DeepSeek's by more than their layer counts (36 against 61) say."""
    fitted = model.fitted
    assert fitted is not None
    assert {t for t, f in zip(FITTED, level_fits("model_vendor"), strict=True) if f} == {
        "layer_floor"
    }
    oss = _tp8("openai/gpt-oss-120b", precision="fp4").model_copy(update={"concurrency": 1})
    deepseek = _tp8("deepseek-ai/DeepSeek-R1-0528", precision="fp8").model_copy(
        update={"concurrency": 1}
    )
    keys = [coefficient_key(s, model.deployment(s)) for s in (oss, deepseek)]
    assert keys[0].version == keys[1].version  # one release x kind floor for both
    names = [level_keys(k)["model_vendor"] for k in keys]
    assert names[0] == f"{keys[0].model.partition(':')[0]}@nvidia"  # in any format
    assert all(fitted.known("model_vendor", name) for name in names)
    floor = IDX["layer_floor"]
    ratio = model.coefficients_of(deepseek)[floor] / model.coefficients_of(oss)[floor]
    assert 1.5 < ratio < 3.0
    per_layer = [
        model.predict(s).tpot_ms_mean / layers for s, layers in ((oss, 36), (deepseek, 61))
    ]
    assert per_layer[0] < 0.75 * per_layer[1]


def test_an_moe_model_is_keyed_by_its_weights_their_format_and_generation_a_dense_one_not_at_all(
    model: PerformanceModel,
) -> None:
    moe = _tp8(QWEN)
    dep = model.deployment(moe)
    key = coefficient_key(moe, dep)
    arch = dep.card.architecture
    assert key.model == f"{arch.total_params}/{arch.active_params}:bf16"
    assert level_keys(key)["model"] == f"{key.model}@nvidia:fp4:hbm"
    dense = _tp8("meta-llama/Llama-3.3-70B-Instruct")
    assert level_keys(coefficient_key(dense, model.deployment(dense)))["model"] is None


def test_two_moe_models_on_one_gpu_differ_in_their_expert_kernels_and_roofline_only(
    model: PerformanceModel,
) -> None:
    """DeepSeek and Qwen3-235B-A22B, both measured on 8 x H200, get expert terms and a roofline
    of their own (and a layer floor, the model_vendor level's); every other coefficient is the
    engine's and GPU's."""
    fitted = model.fitted
    assert fitted is not None
    deepseek = _tp8("deepseek-ai/DeepSeek-R1-0528", precision="fp8", gpu="H200")
    qwen = _tp8(QWEN, precision="fp8", gpu="H200")
    for s in (deepseek, qwen):
        assert fitted.known("model", level_keys(coefficient_key(s, model.deployment(s)))["model"])
    cd = model.coefficients_of(deepseek)
    cq = model.coefficients_of(qwen)
    expert = [IDX[t] for t in (*MODEL_TERMS, "layer_floor")]
    others = [i for i in range(len(cd)) if i not in expert]
    np.testing.assert_array_equal(cd[others], cq[others])
    assert abs(np.log(cd[IDX["expert_gemm"]] / cq[IDX["expert_gemm"]])) > 0.1
    # the roofline is the model's too (1.7% apart in the shipped fit of 2026-12-04: the two
    # reach their roofline alike on these GPUs)
    assert cd[IDX["roofline"]] != cq[IDX["roofline"]]


def test_the_models_expert_kernels_are_lent_to_every_engine_on_the_gpu(
    model: PerformanceModel,
) -> None:
    """Qwen3-235B-A22B on B200 is measured under SGLang only; its deviation reaches vLLM's
    prediction there too (the Triton fused-MoE configurations both engines read): against the
    same key without a model, its expert GEMM coefficient moves by the same factor under both."""
    fitted = model.fitted
    assert fitted is not None
    ratios = []
    for engine in ("sglang", "vllm"):
        qwen = _tp8(QWEN, engine)
        key = coefficient_key(qwen, model.deployment(qwen))
        bare = fitted.full_for(key._replace(model=None))
        ratios.append(model.coefficients_of(qwen)[IDX["expert_gemm"]] / bare[IDX["expert_gemm"]])
    assert abs(np.log(ratios[0])) > 0.05
    assert ratios[0] == pytest.approx(ratios[1], rel=1e-9)


def test_one_model_in_two_weight_formats_on_one_gpu_has_two_sets_of_expert_kernels(
    model: PerformanceModel,
) -> None:
    """DeepSeek-R1 on 8 x B200 is measured in FP8 (the SGLang documentation) and in NVFP4 (the
    TensorRT-LLM tables): each format is a key of its own that the fit has seen, and the two
    differ in the model terms and their layer floor only (the format picks the MoE kernels)."""
    fitted = model.fitted
    assert fitted is not None
    fp8 = _tp8("deepseek-ai/DeepSeek-R1-0528", engine="trtllm", precision="fp8")
    fp4 = _tp8("deepseek-ai/DeepSeek-R1-0528", engine="trtllm", precision="fp4")
    names = [level_keys(coefficient_key(s, model.deployment(s)))["model"] for s in (fp8, fp4)]
    assert names[0] != names[1]
    assert all(fitted.known("model", name) for name in names)
    c8, c4 = model.coefficients_of(fp8), model.coefficients_of(fp4)
    terms = [IDX[t] for t in (*MODEL_TERMS, "layer_floor")]
    others = [i for i in range(len(c8)) if i not in terms]
    np.testing.assert_array_equal(c8[others], c4[others])
    # the data set them apart (a format's own deviation, not the prior's zero): by 5% or more
    # in one of them (the roofline's and the expert GEMMs' move with what is fitted)
    assert max(abs(np.log(c8[i] / c4[i])) for i in terms) > 0.05


def test_an_unmeasured_gpu_takes_its_measured_siblings_deviation(
    model: PerformanceModel,
) -> None:
    """DeepSeek is measured on the MI300X (dstack, the SGLang cookbook), never on the MI325X,
    the same CDNA 3 die with more memory bandwidth: the MI325X's prediction takes the MI300X's
    model deviation, so its decode step at 64 in flight is the MI300X's less what the 13% more
    bandwidth saves, not the generic MoE step (keyed by the GPU, a fit on the same rows gave the
    MI325X 41 ms a token where it gave the MI300X 72)."""
    fitted = model.fitted
    assert fitted is not None
    steps = {}
    for gpu in ("MI300X", "MI325X"):
        scenario = _tp8("deepseek-ai/DeepSeek-V3.1", precision="fp8", gpu=gpu).model_copy(
            update={"engine_version": "0.5.7", "concurrency": 64, "output_len": 4000}
        )
        key = coefficient_key(scenario, model.deployment(scenario))
        name = level_keys(key)["model"]
        assert name == f"{key.model}@amd:fp8:hbm" and fitted.known("model", name)
        steps[gpu] = model.predict(scenario).tpot_ms_mean
    assert 0.75 * steps["MI300X"] < steps["MI325X"] < steps["MI300X"]


def test_a_floor_the_rows_barely_reach_is_as_uncertain_as_the_measured_floors_are_spread(
    model: PerformanceModel,
) -> None:
    """Llama-4-Maverick FP8's rows on NVIDIA GPUs hardly reach the layer floor, so its floor at
    the model_vendor level keeps about the 2.0 prior's variance; in the covariance the level's
    prior is the spread of the well-measured floors instead (WIDE_PRIOR_SD, empirical Bayes).
    Its TPOT interval at one in flight on 8 x B200 (SGLang 0.5.6) spans under 2.5x (7.4x with
    the prior's variance: 2.4-17.7 ms around 6.5; 4.7-9.6 now); DeepSeek-R1-0528's, whose floor
    its rows measure, stays under 2.5x as well (1.9x, as before)."""
    fitted = model.fitted
    assert fitted is not None
    maverick = _tp8("meta-llama/Llama-4-Maverick-17B-128E-Instruct", precision="fp8")
    deepseek = _tp8("deepseek-ai/DeepSeek-R1-0528", precision="fp8")
    spans = []
    for scenario in (maverick, deepseek):
        one = scenario.model_copy(update={"concurrency": 1})
        key = coefficient_key(one, model.deployment(one))
        assert fitted.known("model_vendor", level_keys(key)["model_vendor"])
        p = model.predict(one)
        spans.append(p.tpot_ms_mean_high / p.tpot_ms_mean_low)
    assert spans[0] < 2.5
    assert spans[1] < 2.5


def test_the_wide_priors_spread_is_the_taught_keys_root_mean_square() -> None:
    """:func:`_taught_spread`: of a wide-prior term's keys, those whose posterior sd is under half
    the prior's set its spread (root mean square of their deviations); with fewer than three, or
    a spread as wide as the prior, the prior stays."""
    names = {f"model_vendor:k{i}": np.array([-1, i]) for i in range(5)}
    prior = np.full(5, WIDE_PRIOR_SD)
    x = np.array([0.3, -0.4, 0.5, 2.5, -3.0])
    cov = np.diag([0.1, 0.2, 0.3, 3.5, 3.9])  # the last two barely taught
    [(cols, tau)] = _taught_spread(names, x, cov, prior)
    assert sorted(cols) == [0, 1, 2, 3, 4]
    assert tau == pytest.approx(np.sqrt((0.09 + 0.16 + 0.25) / 3))
    assert _taught_spread(names, x, np.diag([0.1, 0.2, 3.0, 3.5, 3.9]), prior) == []
    assert _taught_spread(names, x * 10, cov, prior) == []
