"""The load shape's interval factor (issue 26, item 2): a closed loop or a rate is predicted
closer than a max-throughput burst, so its intervals get a factor of their own, read from
``data/interval_calibration.json``, calibrated on the held-out rows of each load shape before the
family and architecture factors, shrunk toward 1 by its rows, and applied to every prediction by
the load it is for."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from planner.perf import uncertainty
from planner.perf.model import PerformanceModel
from planner.perf.scenario import Scenario
from planner.perf.uncertainty import (
    CALIBRATED_METRICS,
    LOAD_GROUPS,
    MIN_MULTIPLIER,
    IntervalCalibration,
    interval_calibration,
    load_group,
)
from planner.perf.validation import (
    HeldOut,
    calibrate_group_factors,
    calibrate_intervals,
    interval_coverage,
    shrunk_factor,
)
from tests.planner.perf.test_interval_families import _held as held_row
from tests.planner.perf.test_interval_families import _pooled as pooled

CLOSED, BURST = LOAD_GROUPS
#: own factors (before widening) of every row below: -/+ log(1.25) in log space
OWN = (0.8, 1.25)


def _held(need: float, load: str, family: str = "vllm") -> HeldOut:
    """A row whose measured TTFT needs ``need`` own half-widths (measured 100 x 1.25^need
    against 100 predicted), run under ``load``."""
    return held_row(need, family, load=load, metrics=("ttft",))


def _pooled(multiplier: float = 2.0) -> IntervalCalibration:
    return pooled(multiplier)


def test_every_load_kind_has_its_group() -> None:
    assert load_group("concurrency") == load_group("rate") == load_group("trace") == CLOSED
    assert load_group("max_throughput") == load_group("offline_batch") == BURST
    assert load_group(None) is None and load_group("") is None


def test_the_load_factor_is_read_from_the_file_and_applied_by_load(tmp_path: Path) -> None:
    """Pooled TTFT multiplier 2, the closed loop's factor 0.5, the burst's 1.5 and SGLang's 2:
    a closed loop's multiplier is 1, a burst's 3, an SGLang closed loop's 2; a prediction whose
    load is not known keeps the pooled 2; the floor holds below."""
    payload: dict[str, Any] = {
        "multipliers": {str(n): 2.0 for n in range(4)},
        "release_spread": dict.fromkeys(CALIBRATED_METRICS, 0.0),
        "load_factors": {CLOSED: {"ttft": 0.5}, BURST: {"ttft": 1.5}},
        "family_factors": {"sglang": {"ttft": 2.0}},
    }
    path = tmp_path / "interval_calibration.json"
    path.write_text(json.dumps(payload), encoding="utf-8")
    cal = interval_calibration(path)
    assert cal.load_factors == {CLOSED: {"ttft": 0.5}, BURST: {"ttft": 1.5}}
    assert cal.multiplier("ttft", 0, "vllm", (), "concurrency") == pytest.approx(1.0)
    assert cal.multiplier("ttft", 0, "vllm", (), "rate") == pytest.approx(1.0)
    assert cal.multiplier("ttft", 0, "vllm", (), "max_throughput") == pytest.approx(3.0)
    assert cal.multiplier("ttft", 0, "sglang", (), "concurrency") == pytest.approx(2.0)
    assert cal.multiplier("ttft", 0, "vllm") == pytest.approx(2.0)
    assert cal.multiplier("tpot", 0, "vllm", (), "concurrency") == pytest.approx(2.0)
    low, high = cal.widen(OWN, 0, "ttft", load="concurrency")
    assert math.log(high) == pytest.approx(-math.log(low)) == pytest.approx(math.log(1.25))
    assert math.log(cal.widen(OWN, 0, "ttft", load="max_throughput")[1]) == pytest.approx(
        3 * math.log(1.25)
    )
    tiny = IntervalCalibration.of_payload({**payload, "load_factors": {CLOSED: {"ttft": 0.01}}})
    assert tiny.multiplier("ttft", 0, "vllm", (), "concurrency") == MIN_MULTIPLIER
    with pytest.raises(ValueError, match="finite and positive"):
        IntervalCalibration.of_payload({**payload, "load_factors": {CLOSED: {"ttft": 0.0}}})


def test_a_file_without_load_factors_keeps_every_load_alike() -> None:
    payload: dict[str, Any] = {
        "multipliers": {str(n): 1.5 for n in range(4)},
        "release_spread": dict.fromkeys(CALIBRATED_METRICS, 0.0),
    }
    cal = IntervalCalibration.of_payload(payload)
    assert cal.load_factors == {}
    assert cal.multiplier("ttft", 1, "vllm", (), "concurrency") == cal.multiplier(
        "ttft", 1, "vllm", (), "max_throughput"
    )


def test_calibration_sizes_each_load_shape_on_its_own_rows() -> None:
    """100 closed-loop rows need 0.01 .. 1.0 own half-widths, 100 burst rows 0.03 .. 3.0. The
    pooled multiplier (80th percentile of all 200 needs, 1.806) holds every closed-loop row and
    60% of the bursts. Each group's own 80th percentile (0.802 and 2.406) over it, shrunk by
    100 rows against 20, narrows the closed loop's and widens the burst's: 91% and 76% of their
    rows inside, not 100% and 60%."""
    closed = [_held(i / 100, "concurrency") for i in range(1, 101)]
    burst = [_held(3 * i / 100, "max_throughput") for i in range(1, 101)]
    held = closed + burst
    pooled = calibrate_intervals(held, levels=())
    m = pooled.multipliers["ttft"][0]
    assert m == pytest.approx(1.806)
    assert interval_coverage(closed, "ttft", pooled) == 1.0
    assert interval_coverage(burst, "ttft", pooled) == pytest.approx(0.6)
    cal = calibrate_intervals(held, levels=("load",))
    closed_f = cal.load_factors[CLOSED]["ttft"]
    burst_f = cal.load_factors[BURST]["ttft"]
    assert closed_f == pytest.approx((0.802 / m) ** (100 / 120), abs=1e-3)
    assert burst_f == pytest.approx((2.406 / m) ** (100 / 120), abs=1e-3)
    assert closed_f < 1 < burst_f
    assert interval_coverage(closed, "ttft", cal) == pytest.approx(0.91)
    assert interval_coverage(burst, "ttft", cal) == pytest.approx(0.76)
    # unshrunk, each group is held at 80% exactly
    own = calibrate_intervals(held, levels=("load",), prior_rows=0)
    assert interval_coverage(closed, "ttft", own) == pytest.approx(0.8)
    assert interval_coverage(burst, "ttft", own) == pytest.approx(0.8)
    # the rows each factor rests on are kept for the file
    found = calibrate_group_factors(held, pooled)
    assert found.rows[CLOSED]["ttft"] == found.rows[BURST]["ttft"] == 100
    assert found.factors["load"][CLOSED]["ttft"] == pytest.approx(closed_f)


def test_a_load_shape_with_few_rows_is_shrunk_and_the_family_stacks_on_it() -> None:
    """5 burst rows needing 3 own half-widths among 100 closed-loop rows needing 1: the burst's
    factor is 5 / 25 of its own log factor; the closed loop's rows are held at the pooled
    multiplier already. The family (every row vLLM), calibrated after the load shape, has each
    row's load factor in its base, so it does not count the bursts' widening twice."""
    held = [_held(1.0, "concurrency") for _ in range(100)]
    held += [_held(3.0, "max_throughput") for _ in range(5)]
    cal = calibrate_intervals(held)
    pooled = calibrate_intervals(held, levels=()).multipliers["ttft"][0]
    assert pooled == pytest.approx(1.0)
    assert cal.load_factors[BURST]["ttft"] == pytest.approx(3.0 ** (5 / 25), abs=1e-3)
    assert shrunk_factor(3.0, 5) == pytest.approx(3.0 ** (5 / 25))
    assert cal.load_factors[CLOSED]["ttft"] == pytest.approx(1.0)
    assert cal.family_factors["vllm"]["ttft"] == pytest.approx(1.0, abs=0.02)


def test_predictions_read_the_load_shapes_factor(
    model: PerformanceModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same closed-loop prediction with the closed loop's TTFT and p99 TTFT factor at 1
    and at 3: both TTFT log half-widths triple (no release spread in the file), throughput's do
    not move; a max-throughput prediction of the same deployment does not move at all."""
    closed = Scenario(
        engine="vllm",
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpu="H100-SXM",
        tp=1,
        input_len=1000,
        output_len=200,
        concurrency=16,
        num_requests=64,
    )
    burst = closed.model_copy(update={"load": "max_throughput", "concurrency": None})
    payload: dict[str, Any] = {
        "multipliers": {str(n): 1.0 for n in range(4)},
        "release_spread": dict.fromkeys(CALIBRATED_METRICS, 0.0),
    }

    def predict(factor: float) -> Any:
        payload["load_factors"] = {CLOSED: {"ttft": factor, "ttft_p99": factor}}
        path = tmp_path / f"cal{factor}.json"
        path.write_text(json.dumps(payload), encoding="utf-8")
        monkeypatch.setattr(uncertainty, "CALIBRATION_FILE", path)
        uncertainty.reload_calibration()
        return model.predict(closed), model.predict_steady(closed), model.predict(burst)

    try:
        plain, tripled = predict(1.0), predict(3.0)
    finally:
        uncertainty.reload_calibration()
    for one, three in zip(plain[:2], tripled[:2], strict=True):
        for name in ("ttft_ms_mean", "ttft_ms_p99"):
            half = math.log(getattr(one, f"{name}_high") / getattr(one, name))
            assert half > 0, name
            assert math.log(getattr(three, f"{name}_high") / getattr(three, name)) == (
                pytest.approx(3 * half)
            ), name
        assert three.output_tok_per_s_high == pytest.approx(one.output_tok_per_s_high)
    assert tripled[2].ttft_ms_mean_high == pytest.approx(plain[2].ttft_ms_mean_high)


def test_the_shipped_calibration_has_both_load_shapes() -> None:
    cal = interval_calibration()
    for group in LOAD_GROUPS:
        assert set(cal.load_factors[group]) == set(CALIBRATED_METRICS), group


def test_only_the_closed_loop_narrows() -> None:
    """Bursts that the model predicts closer than its closed loops (100 of each, the bursts
    needing a third of the closed loops' half-widths) keep the pooled multiplier: the
    max-throughput / offline group's factor is never below 1, the closed loop's may be."""
    closed = [_held(3 * i / 100, "rate") for i in range(1, 101)]
    burst = [_held(i / 100, "offline_batch") for i in range(1, 101)]
    cal = calibrate_intervals(closed + burst, levels=("load",))
    assert cal.load_factors[BURST]["ttft"] == 1.0
    assert cal.load_factors[CLOSED]["ttft"] > 1.0
    easy = calibrate_intervals(burst + [_held(i / 100, "concurrency") for i in range(1, 101)])
    assert easy.load_factors[CLOSED]["ttft"] < 1.0 == easy.load_factors[BURST]["ttft"]
