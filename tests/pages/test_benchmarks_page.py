"""Benchmarks page: measured results with filters, runs side by side."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from streamlit.testing.v1 import AppTest

from planner.perf.validation import validation_summary
from tests.pages.conftest import frame_with, no_exception

PAGE = "pages/benchmarks.py"


def test_default_lists_public_and_user_results(app: Callable[..., AppTest]) -> None:
    at = app(PAGE)
    results = frame_with(at, "model", "gpu", "output_tok_per_s", "source")
    assert len(results) >= 743
    assert {"public"} <= set(results["origin"])
    # held-out TTFT and TPOT beside throughput, per fold, from data/validation_summary.json
    latency = frame_with(at, "fold", "latency", "median", "mean", "p90", "80% interval coverage")
    source = latency[latency["fold"] == "leave-one-source-out"].set_index("latency")
    # and the p99s where sources publish them (the figures the SLO gate reads)
    assert set(source.index) == {"TTFT", "TPOT", "TTFT p99", "TPOT p99"}
    assert (source["rows"] > 300).all() and (source["mean"] > 0).all()
    assert {"1-4 in flight", ">64 in flight", "vLLM"} <= set(latency.columns)
    # the slices shaped like the independent checks, from the same file
    slices = frame_with(at, "metric", "slice", "rows", "median", "80% interval coverage")
    ttft = slices[slices["metric"] == "TTFT"].set_index("slice")
    assert {"all", "closed loop or rate", "ditto, release 2025-07+"} <= set(ttft.index)
    assert ttft.loc["closed loop or rate", "rows"] < ttft.loc["all", "rows"]


def test_a_filter_narrows_the_results(app: Callable[..., AppTest]) -> None:
    at = app(PAGE)
    at.multiselect(key="bm_gpu").set_value(["L40S"]).run()
    no_exception(at)
    results = frame_with(at, "model", "gpu", "output_tok_per_s", "source")
    assert set(results["gpu"]) == {"L40S"}
    assert any("of" in c.value and "measured results" in c.value for c in at.caption)


def test_two_runs_side_by_side(app: Callable[..., AppTest]) -> None:
    at = app(PAGE)
    runs = at.multiselect(key="bm_runs")
    assert len(runs.value) == 2
    side = frame_with(at, "20261129T100000Z-aaaaaa", "20261129T110000Z-bbbbbb")
    ttft = side.loc["median TTFT (ms)"]
    assert float(ttft["20261129T100000Z-aaaaaa"]) < float(ttft["20261129T110000Z-bbbbbb"])
    at.multiselect(key="bm_runs").set_value(["20261129T110000Z-bbbbbb"]).run()
    side = frame_with(at, "20261129T110000Z-bbbbbb")
    assert list(side.columns) == ["20261129T110000Z-bbbbbb"]


def test_the_predictions_of_every_result_are_made_only_once_asked(
    app: Callable[..., AppTest],
) -> None:
    """Predicting all ~1,100 results was the page's first run's longest step: closed, its
    section computes and draws nothing; opened (a rerun), it draws the chart."""
    at = app(PAGE, bm_gpu=["L40S"])
    no_exception(at)
    assert at.session_state["open_predicted"] is False
    assert not [c for c in at.get("plotly_chart") if "chart_predicted" in c.proto.id]
    at.session_state["open_predicted"] = True
    at.run()
    no_exception(at)
    (chart,) = [c for c in at.get("plotly_chart") if "chart_predicted" in c.proto.id]
    assert "L40S" in chart.proto.spec


def test_the_results_held_out_by_source_row_by_row(app: Callable[..., AppTest]) -> None:
    """Each public result as a fit that never saw its publisher predicted it: the figures of the
    stored leave-one-source-out rows, narrowed by the page's filters, with no fit at all."""
    at = app(PAGE)
    summary = frame_with(at, "metric", "rows", "median error", "80% interval coverage")
    figures = summary.set_index("metric")
    assert list(figures.index) == ["output tok/s", "TTFT", "TPOT", "TTFT p99", "TPOT p99"]
    stored = validation_summary()
    assert stored is not None
    source = stored["schemes"]["source"]
    assert figures.loc["output tok/s", "median error"] == pytest.approx(
        source["median_ape_output_tok_per_s"], abs=5e-4
    )
    assert figures.loc["output tok/s", "80% interval coverage"] == pytest.approx(
        source["interval_coverage_80"], abs=5e-4
    )
    (chart,) = [c for c in at.get("plotly_chart") if "chart_held_out" in c.proto.id]
    assert "held out by source" in chart.proto.spec
    # narrowed by the filters: L40S only, fewer rows, the same figures the file has for them
    at.multiselect(key="bm_gpu").set_value(["L40S"]).run()
    no_exception(at)
    rows = frame_with(at, "fold", "model", "gpu", "output_tok_per_s_measured")
    assert set(rows["gpu"]) == {"L40S"}
    l40s = frame_with(at, "metric", "rows", "median error").set_index("metric")
    assert 0 < l40s.loc["output tok/s", "rows"] < figures.loc["output tok/s", "rows"]
    assert l40s.loc["output tok/s", "rows"] == rows["output_tok_per_s_measured"].notna().sum()
    (chart,) = [c for c in at.get("plotly_chart") if "chart_held_out" in c.proto.id]
    assert "L40S" in chart.proto.spec and "H100-SXM" not in chart.proto.spec
    # the user's own runs are never held-out rows
    at.multiselect(key="bm_gpu").set_value([]).run()
    at.multiselect(key="bm_origin").set_value(["user"]).run()
    no_exception(at)
    assert any(c.value.startswith("0 of the ") for c in at.caption)
