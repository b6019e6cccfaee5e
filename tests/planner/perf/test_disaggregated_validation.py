"""The disaggregated slice: the pools' step scale fitted on data/measured_disaggregated.csv, its
shipped copy (data/disaggregated_fit.json) and the hold-out by source that ``planner validate``
prints."""

from __future__ import annotations

import math

import pytest

from planner.perf.disaggregated import fitted_scales
from planner.perf.disaggregated_validation import (
    DisaggregatedRow,
    DisaggregatedSlice,
    PoolFigures,
    disaggregated_slice,
    fit_scales,
    format_slice,
    measured_rows,
)
from planner.perf.model import PerformanceModel


@pytest.fixture(scope="module")
def slice_(model: PerformanceModel) -> DisaggregatedSlice:
    return disaggregated_slice(model)


def _row(source: str, phase: str, measured: float, predicted: float) -> DisaggregatedRow:
    return DisaggregatedRow(
        line=2,
        label=f"{source} {phase}",
        source=source,
        phase=phase,
        measured=measured,
        measured_tpot_ms=None,
        raw=PoolFigures(predicted, None),
    )


def test_fit_scales_is_the_median_log_ratio_for_both_pools() -> None:
    rows = [
        _row("a", "decode", 100, 50),
        _row("b", "prefill", 100, 100),
        _row("c", "decode", 100, 200),
    ]
    fit = fit_scales(rows)
    assert fit.decode == fit.prefill == pytest.approx(1.0)  # median of ln 0.5, ln 1, ln 2
    two = fit_scales([_row("a", "decode", 100, 50), _row("b", "decode", 100, 80)])
    assert two.decode == pytest.approx(math.sqrt(0.5 * 0.8))  # the median of two logs
    assert fit_scales([]).decode == 1.0


def test_every_source_is_predicted_with_the_scale_of_the_others(
    slice_: DisaggregatedSlice,
) -> None:
    rows = slice_.rows
    assert len(rows) >= 15 and len({r.source for r in rows}) >= 3
    for source, scales in slice_.fold_scales.items():
        others = [r for r in rows if r.source != source]
        assert scales.decode == pytest.approx(fit_scales(others).decode, rel=1e-12)
    # holding a source out moves the scale (it is fitted, not fixed)
    assert {round(s.decode, 6) for s in slice_.fold_scales.values()} != {
        round(slice_.fit.decode, 6)
    }
    # a held-out prediction is the scaled pool's: faster pools (scale < 1), more tokens a GPU
    for r in rows:
        assert r.held is not None
        scale = slice_.fold_scales[r.source].decode
        if scale < 1:
            assert r.held.tok_per_s_per_gpu > r.raw.tok_per_s_per_gpu
    # four rows state their batch, so their TPOT is measured and predicted
    assert slice_.count("tpot") >= 4
    text = format_slice(slice_)
    assert "held out by source" in text and "TPOT" in text
    summary = slice_.summary()
    assert summary["tpot"]["n"] == slice_.count("tpot")
    assert summary["output_tok_per_s_per_gpu"]["median_ape_held_out"] is not None


def test_the_shipped_scale_is_the_fit_on_the_shipped_rows(model: PerformanceModel) -> None:
    # rerun `python -m planner validate --write-disaggregated-fit` when this fails: the rows,
    # the step-time model or the pools' pricing moved
    refit = fit_scales(measured_rows(model))
    shipped = fitted_scales()
    assert shipped.rows == refit.rows
    assert shipped.decode == pytest.approx(refit.decode, abs=2e-4)
    assert shipped.prefill == pytest.approx(refit.prefill, abs=2e-4)
