"""Chart builders are pure: every axis titled (with units where numeric), one colour per GPU,
predicted and measured named in the legend; exports are self-contained."""

from __future__ import annotations

import re

import pandas as pd
import plotly.graph_objects as go
import pytest

from pages.charts.benchmarks import predicted_vs_measured_figure, runs_figure
from pages.charts.economics import (
    spec_economics_figure,
    spec_vs_token_cost_figure,
    token_cost_figure,
)
from pages.charts.kv import concurrency_vs_context_figure, memory_stack_figure, occupancy_figure
from pages.common.export import ExportSection, report_html
from planner.catalog import Catalog
from planner.palette import GPU_COLORS, gpu_color

UNIT = re.compile(r"\(.+\)")  # numeric axes end with their unit in parentheses


def axis_titles(fig: go.Figure) -> dict[str, str]:
    layout = fig.to_plotly_json()["layout"]
    titles = {}
    for name, axis in layout.items():
        if not re.fullmatch(r"[xy]axis\d*", name):
            continue
        if axis.get("visible", True) and axis.get("showticklabels", True):
            titles[name] = (axis.get("title") or {}).get("text") or ""
    return titles


def assert_axes_titled(fig: go.Figure, categorical: tuple[str, ...] = ()) -> None:
    titles = axis_titles(fig)
    assert titles, "no axes"
    for name, title in titles.items():
        assert title, f"{name} has no title"
        if title not in categorical:
            assert UNIT.search(title), f"{name} title {title!r} has no unit"


def trace_colors(fig: go.Figure) -> set[str]:
    colors: set[str] = set()
    for trace in fig.data:
        marker = getattr(trace, "marker", None)
        color = getattr(marker, "color", None) if marker is not None else None
        if isinstance(color, str):
            colors.add(color)
        elif color is not None:
            colors.update(c for c in color if isinstance(c, str))
    return colors


def test_every_known_gpu_has_its_own_fixed_colour() -> None:
    assert len(set(GPU_COLORS.values())) == len(GPU_COLORS)
    assert gpu_color("l40s") == GPU_COLORS["L40S"]
    assert gpu_color("My-Custom-GPU") == gpu_color("My-Custom-GPU")
    assert gpu_color("My-Custom-GPU") not in GPU_COLORS.values()


SPEC = pd.DataFrame(
    {
        "gpu": ["L4", "L40S", "A10G"],
        "instance": ["g6.2xlarge", "g6e.2xlarge", "g5.2xlarge"],
        "usd_per_gpu_hour": [0.9776, 2.24208, 1.212],
        "tflops_bf16": [121.0, 362.05, 70.0],
        "tflops_fp8": [242.0, 733.0, None],
        "tflops_fp4": [None, None, None],
        "memory_gb": [24.0, 48.0, 24.0],
        "bandwidth_gbps": [300.0, 864.0, 600.0],
        "usd_per_tflop_hour_bf16": [0.9776 / 121, 2.24208 / 362.05, 1.212 / 70],
        "usd_per_tflop_hour_fp8": [0.9776 / 242, 2.24208 / 733, None],
        "usd_per_gb_hour": [0.9776 / 24, 2.24208 / 48, 1.212 / 24],
        "usd_per_gbps_hour": [0.9776 / 300, 2.24208 / 864, 1.212 / 600],
    }
)
COSTS = pd.DataFrame(
    {
        "gpu": ["L40S", "L40S", "L4"],
        "label": ["g6e.12xlarge TP4", "g6e.12xlarge TP4", "g6.12xlarge TP4"],
        "kind": ["predicted", "measured", "predicted"],
        "usd_per_m_output": [25.0, 27.5, 40.0],
        "usd_low": [20.0, None, 30.0],
        "usd_high": [31.0, None, 55.0],
        "detail": ["a", "b", "c"],
    }
)


def test_figure_one_marks_a_different_winner_in_each_contest() -> None:
    fig = spec_economics_figure(SPEC)
    assert_axes_titled(fig, categorical=("GPU",))
    assert {GPU_COLORS[g] for g in SPEC["gpu"]} <= trace_colors(fig)
    winners = [a.x for a in fig.layout.annotations if a.text == "cheapest"]
    assert winners == ["L40S", "L4", "A10G"]


def test_token_cost_chart_names_predicted_and_measured() -> None:
    fig = token_cost_figure(COSTS, utilisation=0.5)
    assert_axes_titled(fig, categorical=("GPU / instance and layout",))
    names = " ".join(t.name for t in fig.data)
    assert "predicted" in names and "measured" in names
    assert "50%" in fig.layout.title.text
    scatter = spec_vs_token_cost_figure(COSTS.merge(SPEC, on="gpu"), "memory")
    assert_axes_titled(scatter)
    assert {t.name.split()[0] for t in scatter.data} == {"predicted", "measured"}


def test_kv_charts_use_gpu_colours_and_units() -> None:
    memory = pd.DataFrame(
        {
            "layout": ["g6e.12xlarge TP4 PP1 bf16", "p5.48xlarge TP8 PP1 bf16"],
            "gpu": ["L40S", "H100-SXM"],
            "weights_gib": [33.0, 17.0],
            "kv_gib": [6.0, 55.0],
            "activation_gib": [1.0, 2.0],
            "overhead_gib": [2.0, 3.0],
            "free_gib": [2.9, 2.2],
        }
    )
    fig = memory_stack_figure(memory)
    assert_axes_titled(fig, categorical=("layout",))
    assert {GPU_COLORS["L40S"], GPU_COLORS["H100-SXM"]} <= trace_colors(fig)
    assert [t.name for t in fig.data] == [
        "weights",
        "KV cache",
        "activations",
        "runtime overhead",
        "free",
    ]
    curves = pd.DataFrame(
        {
            "layout": ["a", "a", "b", "b"],
            "gpu": ["L40S", "L40S", "L4", "L4"],
            "context_tokens": [1024, 2048, 1024, 2048],
            "max_sequences": [40, 20, 10, 5],
        }
    )
    assert_axes_titled(concurrency_vs_context_figure(curves, 2560))
    at_load = pd.DataFrame(
        {
            "layout": ["a"],
            "gpu": ["L40S"],
            "expected_pct": [40.0],
            "p99_pct": [60.0],
            "risk_pct": [0.0],
        }
    )
    sweep = pd.DataFrame(
        {"layout": ["a"], "gpu": ["L40S"], "concurrency": [8], "risk_pct": [0.0], "p99_pct": [60.0]}
    )
    fig = occupancy_figure(at_load, sweep, 8)
    assert_axes_titled(fig, categorical=("layout",))
    assert "predicted" in fig.layout.title.text


def test_benchmark_charts_label_predicted_and_measured() -> None:
    points = pd.DataFrame(
        {
            "metric": ["output_tok_per_s", "ttft_ms"],
            "gpu": ["L40S", "L40S"],
            "label": ["x", "x"],
            "measured": [106.0, 900.0],
            "predicted": [120.0, 800.0],
            "low": [90.0, 600.0],
            "high": [150.0, 1100.0],
        }
    )
    fig = predicted_vs_measured_figure(points)
    assert_axes_titled(fig)
    titles = " ".join(axis_titles(fig).values())
    assert "predicted" in titles and "measured" in titles
    # a row that publishes its p99 TTFT gets a panel of its own
    p99 = pd.concat([points, points.iloc[[1]].assign(metric="ttft_p99_ms", measured=2500.0)])
    panels = [a.text for a in predicted_vs_measured_figure(p99).layout.annotations]
    assert panels[:2] == ["output throughput (tokens/s)", "TTFT (ms)"] and "p99 TTFT (ms)" in panels
    assert len(panels) == 3  # no panel for a metric no row measures
    requests = pd.DataFrame(
        {
            "run": ["r1", "r2"],
            "gpu": ["L4", ""],
            "ttft_ms": [80, 300],
            "tpot_ms": [10, 40],
            "e2e_ms": [110, 420],
        }
    )
    fig = runs_figure(requests)
    assert_axes_titled(fig, categorical=("run",))
    assert "measured" in fig.layout.title.text


@pytest.mark.parametrize("empty", [True, False])
def test_html_export_is_self_contained(empty: bool) -> None:
    figures = [] if empty else [token_cost_figure(COSTS, utilisation=1.0)]
    html = report_html(
        "Servewise: test", [ExportSection("Costs", "Cheapest first.", COSTS, figures)]
    )
    assert "Cheapest first." in html and "g6e.12xlarge TP4" in html
    assert not re.search(r"<script[^>]+src=", html)
    assert ("Plotly.newPlot" in html) is not empty
    assert len(html) > 1_000_000  # plotly.js itself is inlined


def test_plan_and_cost_charts_have_units_and_gpu_colours() -> None:
    import numpy as np

    from pages.charts.cost import demand_figure, gpu_hours_figure, utilisation_figure
    from pages.charts.plan import latency_figure, ranking_figure
    from pages.charts.workload import length_histogram

    ranked = pd.DataFrame(
        {
            "rank": [1, 2],
            "label": ["g6e.12xlarge TP4 PP1 bf16", "p5.48xlarge TP8 PP1 fp8"],
            "gpu": ["L40S", "H100-SXM"],
            "region": ["us-east-1", "us-east-1"],
            "usd_per_million_output_tokens": [5.0, 6.0],
            "usd_per_hour": [10.5, 55.0],
            "instances_total": [2, 1],
            "confidence": ["measured nearby", "extrapolated"],
            "pred_ttft_ms_p99": [900.0, 300.0],
            "pred_ttft_ms_p99_low": [700.0, 200.0],
            "pred_ttft_ms_p99_high": [1400.0, 500.0],
            "pred_tpot_ms_p99": [90.0, 20.0],
            "pred_tpot_ms_p99_low": [70.0, 15.0],
            "pred_tpot_ms_p99_high": [120.0, 30.0],
        }
    )
    fig = ranking_figure(ranked, "at 50% utilisation")
    assert_axes_titled(fig, categorical=("configuration",))
    assert "Predicted" in fig.layout.title.text
    assert {GPU_COLORS["L40S"], GPU_COLORS["H100-SXM"]} <= trace_colors(fig)
    fig = latency_figure(ranked, 3000, 100)
    assert_axes_titled(fig, categorical=("configuration",))
    assert all("predicted" in t for t in axis_titles(fig).values() if "ms" in t)

    curves = pd.DataFrame(
        {
            "deployment": ["a", "a"],
            "gpu": ["L40S", "L40S"],
            "utilisation_pct": [20, 100],
            "usd_per_m_output": [25.0, 5.0],
        }
    )
    assert_axes_titled(utilisation_figure(curves, curves.tail(1)))
    demand = pd.DataFrame({"hour": range(24), "requests_per_s": [1.0] * 24})
    monthly = pd.DataFrame(
        {
            "deployment": ["a"],
            "gpu": ["L40S"],
            "capacity_rps": [2.0],
            "usd_per_month": [1000.0],
            "usd_per_month_autoscaled": [600.0],
        }
    )
    assert_axes_titled(demand_figure(demand, monthly, monthly), categorical=("deployment",))
    points = pd.DataFrame(
        {
            "deployment": ["a"],
            "gpu": ["L40S"],
            "tokens_per_month_b": [1.0],
            "gpu_hours_per_month": [730.0],
        }
    )
    assert_axes_titled(gpu_hours_figure(points))
    rng = np.random.default_rng(0)
    assert_axes_titled(length_histogram(rng.integers(1, 100, 50), rng.integers(1, 50, 50), "x"))


def test_the_break_even_chart_and_its_export_name_the_owned_inputs_and_sources(
    catalog: Catalog,
) -> None:
    from pages.charts.cost import break_even_figure
    from planner.owned import hourly_cost_rows, owned_assumptions

    server = catalog.owned["hgx-h100-8"]
    options = pd.DataFrame({"option": ["p5.48xlarge (aws)"], "break_even_months": [11.5]})
    grid = pd.DataFrame({"utilisation": [0.5, 1.0], "usd_per_kwh": [0.1, 0.1]})
    grid["break_even_months"] = [20.0, 11.5]
    title = break_even_figure(options, grid, "owned", owned_assumptions(server)).layout.title.text
    # the inputs under the title, each default visible, and where they come from
    assert "When owning pays back" in title and "USD 317,000 + 20% network/storage" in title
    assert "5 years, 10% residual, 10% cost of capital" in title
    assert "embedded owned_costs.csv row 'hgx-h100-8'" in title
    assert "<sup>" not in break_even_figure(options, grid, "owned").layout.title.text
    table = pd.DataFrame(hourly_cost_rows(server))
    html = report_html("Servewise: Cost", [ExportSection("Owned", table=table)])
    for source in ("Thinkmate", "CoreWeave", "Bernstein", "Amazon Q4 2024", "CBRE", "EIA"):
        assert source in html, source
