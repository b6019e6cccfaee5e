"""Rows whose own figures contradict each other are left out of the fit with the reason
(``planner.perf.calibration.measurement_problem``): here the closed-loop bound, C requests in
flight produce at most C x output / (TTFT + (output - 1) x TPOT) tokens a second; and rows that
state a server setting the planner does not model (``unmodelled_setting``)."""

from __future__ import annotations

from pathlib import Path

from planner.catalog import Catalog
from planner.catalog.schema import MeasuredResult
from planner.perf.calibration import closed_loop_excess, measurement_problem
from planner.perf.model import PerformanceModel
from planner.store import Store


def _kimi_mi300x_at_one(catalog: Catalog) -> MeasuredResult:
    return next(
        m
        for m in catalog.measured
        if m.gpu == "MI300X" and m.model == "moonshotai/Kimi-K2-Instruct" and m.concurrency == 1
    )


def test_only_the_shipped_closed_loop_that_outruns_its_slots_is_flagged(catalog: Catalog) -> None:
    flagged = [m for m in catalog.measured if closed_loop_excess(m) is not None]
    assert flagged == [_kimi_mi300x_at_one(catalog)]
    reason = measurement_problem(flagged[0])
    # 1 x 422 / (0.15967 + 421 x 0.04041) s = 24.6 tok/s against the 42.51 it states
    assert reason is not None and "42.51 tok/s exceeds the 24.6 tok/s" in reason
    assert "a closed loop of 1 allows" in reason and "mean_tpot 40.41 ms" in reason


def test_the_bound_leaves_consistent_rows_and_other_statistics_alone(catalog: Catalog) -> None:
    row = _kimi_mi300x_at_one(catalog)
    # at the throughput its latencies allow, and at 1.3x it, the row is kept
    assert closed_loop_excess(row.model_copy(update={"output_tok_per_s": 24.0})) is None
    assert closed_loop_excess(row.model_copy(update={"output_tok_per_s": 31.5})) is None
    assert closed_loop_excess(row.model_copy(update={"output_tok_per_s": 33.0})) is not None
    # two requests in flight would allow the stated throughput
    assert closed_loop_excess(row.model_copy(update={"concurrency": 2.0})) is None
    # a median TTFT or a histogram TPOT does not add up to a request's latency: not judged
    assert closed_loop_excess(row.model_copy(update={"ttft_stat": "median"})) is None
    assert closed_loop_excess(row.model_copy(update={"itl_stat": "p50_itl_vllm_histogram"})) is None
    # nor is a rate or a burst, whose slots are not fixed
    assert closed_loop_excess(row.model_copy(update={"load": "rate", "request_rate": 1.0})) is None


def test_the_flagged_row_is_excluded_from_the_fit_with_its_reason(
    catalog: Catalog, model: PerformanceModel
) -> None:
    row = _kimi_mi300x_at_one(catalog)
    excluded = [e for e in model.excluded if e.result == row]
    assert len(excluded) == 1 and "exceeds the 24.6 tok/s" in excluded[0].reason
    assert all(s.result != row for s in model.samples)


def test_only_sglangs_modelopt_runs_state_a_setting_the_planner_does_not_model(
    catalog: Catalog,
) -> None:
    """CloudRift's SGLang 0.5.9 Kimi-K2.5 runs pass --quantization modelopt (their notes quote
    the server command): every one of them says so, and no other shipped row states a
    setting."""
    stated = [m for m in catalog.measured if m.unmodelled_setting]
    modelopt = [
        m
        for m in catalog.measured
        if m.engine == "sglang" and "--quantization modelopt " in (m.notes or "")
    ]
    assert len(stated) == 10 and stated == modelopt
    assert all(m.model == "moonshotai/Kimi-K2.5" and m.gpu == "B200" for m in stated)
    reason = measurement_problem(stated[0])
    assert reason is not None and "--quantization modelopt" in reason
    assert "a setting the planner does not model" in reason
    # the same row without the column is a row like any other
    assert measurement_problem(stated[0].model_copy(update={"unmodelled_setting": None})) is None


def test_a_row_of_an_unmodelled_setting_is_scored_but_never_fitted(
    catalog: Catalog, model: PerformanceModel
) -> None:
    stated = [m for m in catalog.measured if m.unmodelled_setting]
    excluded = {e.result: e for e in model.excluded if e.result in stated}
    assert set(excluded) == set(stated)
    # excluded with its simulated sample: validation predicts it as a held-out row
    assert all(e.sample is not None and "modelopt" in e.reason for e in excluded.values())
    assert not {s.result for s in model.samples} & set(stated)


def test_the_store_keeps_the_setting_of_a_row(catalog: Catalog, tmp_path: Path) -> None:
    row = next(m for m in catalog.measured if m.unmodelled_setting)
    store = Store(tmp_path / "s.duckdb")
    try:
        store.add_measured_results([row])
        back = [m for m in store.measured_results() if m.source == row.source]
    finally:
        store.close()
    assert back == [row]
