"""Interval multipliers per engine family and architecture group (issue 26, item 2): applied
to every interval, calibrated on each family's held-out rows, shrunk toward the pooled
multiplier by the rows they rest on, and read from files written before they existed."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from planner.perf import uncertainty
from planner.perf.model import PerformanceModel
from planner.perf.scenario import Scenario
from planner.perf.uncertainty import (
    CALIBRATED_METRICS,
    INTERVAL_METRICS,
    MIN_MULTIPLIER,
    IntervalCalibration,
    arch_group,
    interval_calibration,
)
from planner.perf.validation import (
    HeldOut,
    calibrate_intervals,
    interval_coverage,
    shrunk_factor,
)

#: own factors (before widening) of every row below: -/+ log(1.25) in log space
OWN = (0.8, 1.25)
MLA = ("fine-grained MoE", "MLA")


def _held(
    need: float,
    family: str,
    classes: tuple[str, ...] = ("dense GQA",),
    reasons: int = 0,
    load: str | None = None,
    metrics: tuple[str, ...] = ("ttft", "output_tok_per_s"),
) -> HeldOut:
    """A row run under ``load`` whose measured ``metrics`` (TTFT and throughput) need ``need``
    own half-widths: measured 100 x 1.25^need against 100 predicted."""
    arch = SimpleNamespace(model_classes=classes, total_params=8e9, active_params=8e9, is_moe=False)
    dep = SimpleNamespace(
        card=SimpleNamespace(architecture=arch),
        tp=1,
        pp=1,
        data_parallel_size=1,
        expert_parallel=False,
    )
    sample = SimpleNamespace(
        key=SimpleNamespace(version=None),
        family=family,
        gpu="H100-SXM",
        dep=dep,
        result=SimpleNamespace(precision="bf16", load=load, engine_version=None),
    )
    measured = 100.0 * 1.25**need
    return HeldOut(
        sample=sample,
        fold="f",
        measured=dict.fromkeys(metrics, measured),
        predicted={"output_tok_per_s": 100.0, "ttft": 100.0, "tpot": 20.0},
        roofline={},
        low=80.0,
        high=125.0,
        far=False,
        reasons=("r",) * reasons,
        own_low=OWN[0],
        own_high=OWN[1],
        own=dict.fromkeys(INTERVAL_METRICS, OWN),
    )


def _pooled(multiplier: float = 1.5) -> IntervalCalibration:
    neutral = IntervalCalibration.neutral()
    return IntervalCalibration(
        dict.fromkeys(CALIBRATED_METRICS, (multiplier,) * 4), neutral.release_spread
    )


def test_a_familys_factor_widens_its_intervals_and_no_other() -> None:
    """Pooled multiplier 1.5, SGLang's TTFT factor 2: an SGLang row's TTFT interval is
    100 x 1.25^-3 to 100 x 1.25^3, a vLLM row with the same own factors keeps 1.25^-1.5 to
    1.25^1.5, and SGLang's throughput interval (no factor) is vLLM's."""
    base = _pooled()
    cal = IntervalCalibration(base.multipliers, base.release_spread, {"sglang": {"ttft": 2.0}})
    sglang, vllm = _held(2.5, "sglang"), _held(2.5, "vllm")
    assert sglang.interval("ttft", cal) == pytest.approx((100 / 1.25**3, 100 * 1.25**3))
    assert vllm.interval("ttft", cal) == pytest.approx((100 / 1.25**1.5, 100 * 1.25**1.5))
    assert sglang.covers("ttft", cal) and not vllm.covers("ttft", cal)
    assert sglang.interval("output_tok_per_s", cal) == vllm.interval("output_tok_per_s", cal)
    # the module-level names agree: a family the calibration never saw takes the pooled one
    assert cal.multiplier("ttft", 0, "sglang") == 3.0
    assert cal.multiplier("ttft", 0, "mlc") == cal.multiplier("ttft", 0) == 1.5
    # and no multiplier goes below the floor, however small the factor
    small = IntervalCalibration(base.multipliers, base.release_spread, {"vllm": {"ttft": 0.1}})
    assert small.multiplier("ttft", 0, "vllm") == MIN_MULTIPLIER


def test_an_architecture_groups_factor_stacks_on_its_familys() -> None:
    base = _pooled()
    cal = IntervalCalibration(
        base.multipliers,
        base.release_spread,
        {"trtllm": {"output_tok_per_s": 2.0}},
        {"trtllm/MLA": {"output_tok_per_s": 1.5}},
    )
    assert arch_group(MLA) == "MLA" and arch_group(("dense GQA",)) == "dense"
    assert arch_group(("coarse MoE", "sliding-window")) == "coarse MoE"
    assert cal.multiplier("output_tok_per_s", 1, "trtllm", MLA) == pytest.approx(4.5)
    assert cal.multiplier("output_tok_per_s", 1, "trtllm", ("dense GQA",)) == 3.0
    # the group belongs to its family: vLLM's MLA rows are not TensorRT-LLM's
    assert cal.multiplier("output_tok_per_s", 1, "vllm", MLA) == 1.5


def test_calibration_puts_80_percent_of_each_familys_rows_inside() -> None:
    """100 vLLM rows need 0.01 .. 1.0 own half-widths, 100 SGLang rows 0.03 .. 3.0. The pooled
    multiplier, the 80th percentile of all 200 needs (1.806), holds every vLLM row and 60% of
    SGLang's. SGLang's own 80th percentile is 2.406: unshrunk, its factor 2.406 / 1.806 holds
    80% of its rows; shrunk by 100 rows against 20, 1.332^(100/120) = 1.270 holds 76%. vLLM's
    own 80th percentile, 0.802, narrows its multiplier below 1 (above the floor of
    MIN_MULTIPLIER) and holds 80% of its rows, not all. (The family factors alone: every row
    here is in one architecture group.)"""
    vllm = [_held(i / 100, "vllm") for i in range(1, 101)]
    sglang = [_held(3 * i / 100, "sglang") for i in range(1, 101)]
    held = vllm + sglang
    pooled = calibrate_intervals(held, levels=())
    m = pooled.multipliers["ttft"][0]
    assert m == pytest.approx(1.806)
    assert interval_coverage(vllm, "ttft", pooled) == 1.0
    assert interval_coverage(sglang, "ttft", pooled) == pytest.approx(0.6)
    own = calibrate_intervals(held, prior_rows=0, levels=("family",))
    assert own.family_factors["sglang"]["ttft"] == pytest.approx(2.406 / m, abs=1e-3)
    assert interval_coverage(sglang, "ttft", own) == pytest.approx(0.8)
    assert own.multiplier("ttft", 0, "vllm") == pytest.approx(0.802, abs=1e-3)
    assert interval_coverage(vllm, "ttft", own) == pytest.approx(0.8)
    cal = calibrate_intervals(held, prior_rows=20, levels=("family",))
    assert cal.family_factors["sglang"]["ttft"] == pytest.approx(
        (2.406 / m) ** (100 / 120), abs=1e-3
    )
    assert interval_coverage(sglang, "ttft", cal) == pytest.approx(0.76)
    width = {
        name: math.log(rows[0].interval("ttft", cal)[1] / 100)
        for name, rows in (("vllm", vllm), ("sglang", sglang))
    }
    assert width["sglang"] == pytest.approx(math.log(1.25) * m * 1.270, rel=1e-3)
    assert width["sglang"] > 2 * width["vllm"]


def test_a_small_familys_factor_is_shrunk_toward_the_pooled_one() -> None:
    """exp(n / (n + k) x log(raw)): a family of k rows goes half way (in log space), one of no
    rows stays pooled, many rows approach their own factor."""
    assert shrunk_factor(4.0, 20, 20) == pytest.approx(2.0)
    assert shrunk_factor(0.25, 20, 20) == pytest.approx(0.5)
    assert shrunk_factor(4.0, 0, 20) == 1.0
    assert shrunk_factor(4.0, 2000, 20) == pytest.approx(4.0 ** (2000 / 2020))
    # on rows: 5 SGLang rows needing 3 own half-widths among 100 vLLM rows needing 1 get
    # 5 / 25 of their own log factor, not all of it
    held = [_held(1.0, "vllm") for _ in range(100)] + [_held(3.0, "sglang") for _ in range(5)]
    cal = calibrate_intervals(held, prior_rows=20)
    pooled = calibrate_intervals(held, levels=()).multipliers["ttft"][0]
    assert pooled == pytest.approx(1.0)
    assert cal.family_factors["sglang"]["ttft"] == pytest.approx(3.0 ** (5 / 25), abs=1e-3)
    assert cal.multiplier("ttft", 0, "trtllm") == pooled  # no rows: the pooled one


def test_a_file_without_family_factors_loads_as_the_pooled_calibration(tmp_path: Path) -> None:
    ones = {str(n): 1.0 for n in range(4)}
    payload: dict[str, Any] = {
        "multipliers": ones,
        "multipliers_by_metric": {m: {str(n): 1.2 for n in range(4)} for m in CALIBRATED_METRICS},
        "release_spread": dict.fromkeys(CALIBRATED_METRICS, 0.3),
    }
    old = IntervalCalibration.of_payload(payload)
    assert old.family_factors == {} and old.arch_factors == {}
    assert old.multiplier("ttft", 2, "sglang", MLA) == 1.2
    path = tmp_path / "interval_calibration.json"
    path.write_text(json.dumps(payload), encoding="utf-8")
    assert interval_calibration(path).multipliers["tpot"] == (1.2,) * 4
    payload["family_factors"] = {"sglang": {"ttft": 2.0, "unknown metric": 9.0}}
    payload["arch_factors"] = {"sglang/MLA": {"ttft": 1.5}}
    new = IntervalCalibration.of_payload(payload)
    assert new.multiplier("ttft", 2, "sglang", MLA) == pytest.approx(3.6)
    with pytest.raises(ValueError, match="finite and positive"):
        IntervalCalibration.of_payload({**payload, "family_factors": {"sglang": {"ttft": -1}}})


def test_the_shipped_calibration_has_a_factor_for_every_engine_family() -> None:
    cal = interval_calibration()
    for family in ("vllm", "sglang", "trtllm"):
        assert set(cal.family_factors[family]) == set(CALIBRATED_METRICS), family
    assert any(key.startswith("trtllm/") for key in cal.arch_factors)


def test_predictions_read_the_familys_factor(
    model: PerformanceModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same SGLang prediction with SGLang's TTFT factor at 1 and at 3: its TTFT and p99
    TTFT log half-widths triple (no release spread in the file), throughput's do not move."""
    scenario = Scenario(
        engine="sglang",
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpu="H100-SXM",
        tp=1,
        input_len=1000,
        output_len=200,
        concurrency=16,
        num_requests=64,
    )
    payload: dict[str, Any] = {
        "multipliers": {str(n): 1.0 for n in range(4)},
        "release_spread": dict.fromkeys(CALIBRATED_METRICS, 0.0),
    }

    def predict(factor: float) -> Any:
        payload["family_factors"] = {"sglang": {"ttft": factor, "ttft_p99": factor}}
        path = tmp_path / f"cal{factor}.json"
        path.write_text(json.dumps(payload), encoding="utf-8")
        monkeypatch.setattr(uncertainty, "CALIBRATION_FILE", path)
        uncertainty.reload_calibration()
        return model.predict(scenario), model.predict_steady(scenario)

    try:
        plain, tripled = predict(1.0), predict(3.0)
    finally:
        uncertainty.reload_calibration()
    for one, three in zip(plain, tripled, strict=True):
        for name in ("ttft_ms_mean", "ttft_ms_p99"):
            half = math.log(getattr(one, f"{name}_high") / getattr(one, name))
            assert half > 0, name
            assert math.log(getattr(three, f"{name}_high") / getattr(three, name)) == (
                pytest.approx(3 * half)
            ), name
        assert three.output_tok_per_s_high == pytest.approx(one.output_tok_per_s_high)
