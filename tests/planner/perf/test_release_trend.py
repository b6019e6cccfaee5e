"""The release-age trend of the MoE kernels' coefficients and of a dense model's step
overheads (planner.perf.calibration, "Release age"): a release the data never saw is predicted
at its date's level, a release without a date gets no trend, and a fit recovers a trend put
into its data."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import date

import numpy as np
import pytest

from planner.perf.calibration import (
    DENSE_TREND_TERMS,
    TREND_LEVEL,
    TREND_REFERENCE,
    CoefficientKey,
    FitSample,
    _fit_coefficients,
    coefficient_key,
    fit_coefficients,
    level_keys,
    release_age,
    rising_slopes,
)
from planner.perf.model import PerformanceModel
from planner.perf.scenario import Scenario
from planner.perf.step_time import FITTED, IDX

EXPERT_GEMM = FITTED.index("expert_gemm")


def _deepseek_on_h200(version: str | None) -> Scenario:
    return Scenario(
        model="deepseek-ai/DeepSeek-R1-0528",
        gpu="H200",
        tp=8,
        precision="fp8",
        engine="vllm",
        engine_version=version,
        input_len=1000,
        output_len=1000,
        concurrency=32,
    )


def _key(model: PerformanceModel, version: str | None) -> CoefficientKey:
    scenario = _deepseek_on_h200(version)
    return coefficient_key(scenario, model.deployment(scenario))


def test_the_age_is_the_releases_date_and_none_without_one() -> None:
    assert release_age(CoefficientKey("vllm", "H200", "vllm:0.14")) == pytest.approx(
        (date(2026, 1, 20) - TREND_REFERENCE).days / 365.25
    )
    # a patch-level date wins over the series' (SGLang 0.4 ran eight months)
    patch = CoefficientKey("sglang", "H200", "sglang:0.4", released=date(2025, 7, 31))
    assert release_age(patch) == pytest.approx((date(2025, 7, 31) - TREND_REFERENCE).days / 365.25)
    for version in (None, "vllm:0.5", "trtllm:nim-tensorrt-llm"):  # 0.5: before the tables
        assert release_age(CoefficientKey("vllm", "H200", version)) == 0.0
    # a release after the tables is taken for at least as new as their newest (vLLM 0.34)
    assert release_age(CoefficientKey("vllm", "H200", "vllm:0.99")) == pytest.approx(
        (date(2026, 11, 16) - TREND_REFERENCE).days / 365.25
    )


def test_scenarios_carry_their_releases_date(model: PerformanceModel) -> None:
    assert _key(model, "0.11.0").released == date(2025, 10, 4)
    sglang = _deepseek_on_h200("0.4.10.post1").model_copy(update={"engine": "sglang"})
    assert coefficient_key(sglang, model.deployment(sglang)).released == date(2025, 7, 31)
    # Tandemn's unversioned "vllm", a series without its minor, a release before the tables
    for version in ("vllm", "1.x", "0.5.4", None):
        assert _key(model, version).released is None
    assert _key(model, "0.99.1").released == date(2026, 11, 16)  # after them: their newest


def test_an_unseen_newer_release_moves_the_moe_expert_gemm_the_fitted_way(
    model: PerformanceModel,
) -> None:
    """vLLM 0.12 (2025-12-03) is in no measured row: its routed-expert GEMM coefficient is the
    family's times exp(slope x age), below it since the shipped fit's MoE slope is negative;
    a dense model's GEMM does not move with the date (its slope is on the step's overheads:
    the test below)."""
    fitted = model.fitted
    assert fitted is not None
    slope = fitted.levels[TREND_LEVEL]["moe"]
    assert slope[EXPERT_GEMM] < -0.2  # newer releases' MoE GEMMs run faster
    unseen, undated = _key(model, "0.12.0"), _key(model, "0.5.4")
    assert not fitted.known("version", unseen.version)
    age = release_age(unseen)
    assert age > 0.5
    c_unseen, c_undated = fitted.full_for(unseen), fitted.full_for(undated)
    ratio = c_unseen[IDX["expert_gemm"]] / c_undated[IDX["expert_gemm"]]
    assert ratio == pytest.approx(math.exp(slope[EXPERT_GEMM] * age), rel=1e-9)
    assert ratio < 0.9
    # the terms the trend leaves alone are the family's either way
    assert c_unseen[IDX["gemm"]] == pytest.approx(c_undated[IDX["gemm"]], rel=1e-12)
    dense_new = unseen._replace(kind="dense")
    dense_undated = undated._replace(kind="dense")
    dense_slope = fitted.levels[TREND_LEVEL].get("dense", np.zeros(len(FITTED)))
    assert dense_slope[EXPERT_GEMM] == 0.0
    assert fitted.full_for(dense_new)[IDX["gemm"]] == pytest.approx(
        fitted.full_for(dense_undated)[IDX["gemm"]], rel=1e-12
    )


def test_a_release_without_a_date_gets_no_trend(model: PerformanceModel) -> None:
    """Unversioned releases and those before the tables are predicted with the family/kind
    level as it is (age 0): exactly the coefficients of a key without a version, and the same
    variance form's trend part (none)."""
    fitted = model.fitted
    assert fitted is not None
    for version in ("vllm", "0.5.4"):
        key = _key(model, version)
        no_version = key._replace(version=None, released=None)
        np.testing.assert_array_equal(fitted.theta_for(key), fitted.theta_for(no_version))


def test_the_prediction_variance_counts_the_slopes_spread(model: PerformanceModel) -> None:
    """The slope is uncertain: a release far from the reference date gets a wider spread on
    the expert GEMM than the same unseen release at age 0."""
    fitted = model.fitted
    assert fitted is not None
    shares = np.zeros(len(FITTED))
    shares[EXPERT_GEMM] = 1.0
    far = _key(model, "0.5.4")._replace(released=date(2027, 6, 1))
    undated = _key(model, "0.5.4")
    assert fitted.log_variance(far, shares) > fitted.log_variance(undated, shares)


def test_a_fit_recovers_a_trend_put_into_its_data(model: PerformanceModel) -> None:
    """Synthetic data from the fitted coefficients with every MoE release's expert GEMM made
    exp(-0.6 x age) faster again: the refit's MoE slope moves the same way, by a good part of
    -0.6 (about half: the measured releases' own levels, prior sd 0.5 each at the release and
    the release x kind level, take the rest, as partial pooling does)."""
    fitted = model.fitted
    assert fitted is not None
    base_slope = float(fitted.levels[TREND_LEVEL]["moe"][EXPERT_GEMM])
    extra = -0.6
    chosen = _dated_moe_samples_with_trend(model, extra)
    assert len({s.key.version for s in chosen}) >= 6
    refit = fit_coefficients(chosen, initial=fitted)
    slope = float(refit.levels[TREND_LEVEL]["moe"][EXPERT_GEMM])
    assert 1.3 * extra < slope - base_slope < 0.3 * extra


def test_a_rising_slope_is_dropped(model: PerformanceModel) -> None:
    """Data whose later releases' expert GEMMs run slower (+2 a year on top of the fitted
    trend): unconstrained, the refit's slope comes out positive, which would predict an early
    release faster than its family (dstack's held-out DeepSeek rows, +0.32 a year without
    them); the fit drops it and refits, so no slope is positive and the expert GEMM gets none."""
    fitted = model.fitted
    assert fitted is not None
    chosen = _dated_moe_samples_with_trend(model, 2.0)
    free = _fit_coefficients(chosen, fitted, 100, frozenset())
    assert free.levels[TREND_LEVEL]["moe"][EXPERT_GEMM] > 0.1
    assert ("moe", "expert_gemm") in rising_slopes(free)
    refit = fit_coefficients(chosen, initial=fitted)
    assert refit.levels[TREND_LEVEL]["moe"][EXPERT_GEMM] == 0.0
    assert not rising_slopes(refit)
    assert np.all(refit.levels[TREND_LEVEL]["moe"] <= 0.0)
    # an early release (vLLM 0.7, age -0.34) is predicted at its level, without a trend
    old = next(s.key for s in chosen if s.key.version == "vllm:0.7")
    no_trend = refit.theta0 + sum(
        (refit.levels[level][name] for level, name in level_keys(old).items()
         if name is not None and name in refit.levels.get(level, {})),
        np.zeros(len(FITTED)),
    )  # fmt: skip
    assert refit.theta_for(old)[EXPERT_GEMM] == pytest.approx(no_trend[EXPERT_GEMM], abs=1e-12)


def _dated_moe_samples_with_trend(model: PerformanceModel, extra: float) -> list[FitSample]:
    """The shipped fit's dated MoE samples, their mean targets replaced by the fitted
    coefficients' predictions with the expert GEMM times exp(extra x release age)."""
    fitted = model.fitted
    assert fitted is not None
    chosen: list[FitSample] = []
    for s in model.samples:
        if s.key.kind != "moe" or release_age(s.key) == 0.0:
            continue
        c = np.array(fitted.full_for(s.key))
        c[IDX["expert_gemm"]] *= math.exp(extra * release_age(s.key))
        targets = [
            replace(t, log_measured=math.log(float(t.V[0] @ c - t.offset[0])))
            for t in s.targets
            if t.stat == "mean" and float(t.V[0] @ c - t.offset[0]) > 0
        ]
        if targets:
            chosen.append(FitSample(s.result, s.scenario, s.dep, s.trace, targets))
    return chosen


def test_an_unseen_newer_release_shaves_a_dense_models_step_overheads(
    model: PerformanceModel,
) -> None:
    """A dense model's slope spans the step's overhead terms only (DENSE_TREND_TERMS) and is
    negative on some of them: vLLM 0.12, in no measured row, launches its collectives and
    forward passes faster than the family's undated level, and an earlier unseen release (0.8)
    slower; its GEMM and roofline stay the family's."""
    fitted = model.fitted
    assert fitted is not None
    slope = fitted.levels[TREND_LEVEL]["dense"]
    spans = {FITTED[i] for i in np.flatnonzero(slope)}
    assert spans and spans <= set(DENSE_TREND_TERMS)
    assert min(slope) < -0.05
    unseen = _key(model, "0.12.0")._replace(kind="dense")
    undated = _key(model, "0.5.4")._replace(kind="dense")
    earlier = _key(model, "0.8.0")._replace(kind="dense")
    assert not fitted.known("version", unseen.version)
    assert not fitted.known("version", earlier.version)
    assert release_age(earlier) < 0.0 < release_age(unseen)
    c_unseen, c_undated = fitted.full_for(unseen), fitted.full_for(undated)
    calls = IDX["ar_calls_nvlink"]
    assert c_unseen[calls] < c_undated[calls] < fitted.full_for(earlier)[calls]
    for term in ("gemm", "roofline"):
        assert c_unseen[IDX[term]] == pytest.approx(c_undated[IDX[term]], rel=1e-12)
