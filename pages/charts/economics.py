"""GPU economics: the brief's Figure 1 and what actually decides the bill, $/M tokens."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pages.charts.style import (
    MEASURED,
    MEASURED_SYMBOL,
    PREDICTED,
    PREDICTED_PATTERN,
    empty_figure,
    finish,
)
from planner.palette import gpu_color

#: Precisions drawn in the TFLOPS panel, with the bar pattern that tells them apart.
TFLOPS_PRECISIONS = (("bf16", ""), ("fp8", "/"), ("fp4", "x"))

#: Spec-sheet metrics a $/token can be compared against: (column, axis title).
SPEC_METRICS: dict[str, tuple[str, str]] = {
    "TFLOPS": ("usd_per_tflop_hour_bf16", "dense BF16 TFLOP-hour"),
    "memory": ("usd_per_gb_hour", "GB of memory per hour"),
    "bandwidth": ("usd_per_gbps_hour", "GB/s of bandwidth per hour"),
}


def spec_economics_figure(spec: pd.DataFrame) -> go.Figure:
    """Figure 1: per GPU, the spec (top) and what one unit of it costs an hour (bottom).

    ``spec`` columns: gpu, instance, tflops_bf16, tflops_fp8, tflops_fp4, memory_gb,
    bandwidth_gbps, usd_per_tflop_hour_bf16, usd_per_tflop_hour_fp8, usd_per_gb_hour,
    usd_per_gbps_hour. The cheapest GPU of each bottom panel is labelled: three contests,
    three winners.
    """
    title = "Spec sheets and what a unit of each costs (per GPU, from the cheapest instance)"
    if spec.empty:
        return empty_figure(title, "No GPU has a price in this region and pricing mode.")
    spec = spec.sort_values("usd_per_gpu_hour")
    gpus = spec["gpu"].tolist()
    colors = [gpu_color(g) for g in gpus]
    fig = make_subplots(
        rows=2,
        cols=3,
        shared_xaxes=True,
        vertical_spacing=0.08,
        horizontal_spacing=0.07,
        subplot_titles=(
            "Dense TFLOPS by precision",
            "Memory",
            "Memory bandwidth",
            "$ per dense TFLOP-hour",
            "$ per GB-hour",
            "$ per (GB/s)-hour",
        ),
    )
    for precision, pattern in TFLOPS_PRECISIONS:
        column = f"tflops_{precision}"
        if column not in spec or spec[column].isna().all():
            continue
        fig.add_trace(
            go.Bar(
                x=gpus,
                y=spec[column],
                name=f"{precision} TFLOPS",
                marker={"color": colors, "pattern": {"shape": pattern}},
                hovertemplate="%{x}: %{y:,.0f} " + precision + " TFLOPS<extra></extra>",
                legendgroup="precision",
            ),
            row=1,
            col=1,
        )
    fig.add_trace(
        go.Bar(
            x=gpus,
            y=spec["memory_gb"],
            marker_color=colors,
            showlegend=False,
            hovertemplate="%{x}: %{y:,.0f} GB<extra></extra>",
        ),
        row=1,
        col=2,
    )
    fig.add_trace(
        go.Bar(
            x=gpus,
            y=spec["bandwidth_gbps"],
            marker_color=colors,
            showlegend=False,
            hovertemplate="%{x}: %{y:,.0f} GB/s<extra></extra>",
        ),
        row=1,
        col=3,
    )
    bottom = (
        ("usd_per_tflop_hour_bf16", 1, "$%{y:.4f} per BF16 TFLOP-hour"),
        ("usd_per_gb_hour", 2, "$%{y:.4f} per GB-hour"),
        ("usd_per_gbps_hour", 3, "$%{y:.5f} per (GB/s)-hour"),
    )
    for column, col, hover in bottom:
        values = spec[column]
        best = int(np.nanargmin(values.to_numpy(dtype=float)))  # the cheapest, NaN skipped
        fig.add_trace(
            go.Bar(
                x=gpus,
                y=values,
                marker_color=colors,
                showlegend=False,
                customdata=spec["instance"],
                hovertemplate="%{x} (%{customdata}): " + hover + "<extra></extra>",
            ),
            row=2,
            col=col,
        )
        fig.add_annotation(
            x=spec["gpu"].iloc[best],
            y=values.iloc[best],
            text="cheapest",
            showarrow=True,
            arrowhead=2,
            ay=-30,
            row=2,
            col=col,
        )
    if "usd_per_tflop_hour_fp8" in spec and spec["usd_per_tflop_hour_fp8"].notna().any():
        fig.add_trace(
            go.Scatter(
                x=gpus,
                y=spec["usd_per_tflop_hour_fp8"],
                mode="markers",
                name="$ per FP8 TFLOP-hour",
                marker={
                    "color": colors,
                    "symbol": "line-ew-open",
                    "size": 18,
                    "line": {"width": 3},
                },
                hovertemplate="%{x}: $%{y:.4f} per FP8 TFLOP-hour<extra></extra>",
            ),
            row=2,
            col=1,
        )
    for col, unit in enumerate(("peak (TFLOPS)", "memory (GB)", "bandwidth (GB/s)"), start=1):
        fig.update_yaxes(title_text=unit, row=1, col=col)
    for col, unit in enumerate(
        ("price ($/TFLOP-hour)", "price ($/GB-hour)", "price ($/(GB/s)-hour)"), start=1
    ):
        fig.update_yaxes(title_text=unit, row=2, col=col)
        fig.update_xaxes(title_text="GPU", row=2, col=col)
    fig.update_layout(barmode="group")
    return finish(fig, title, height=600, legend_below=True)


def token_cost_figure(costs: pd.DataFrame, *, utilisation: float) -> go.Figure:
    """$/M output tokens of the chosen model and workload on each GPU/instance.

    ``costs`` columns: gpu, label, kind ("predicted" or "measured"), usd_per_m_output,
    usd_low, usd_high (interval of predicted rows; may be NaN), detail (hover text).
    """
    title = f"$ per million output tokens at {utilisation:.0%} utilisation: predicted and measured"
    if costs.empty:
        return empty_figure(title, "Nothing to compare: no feasible GPU and no measurement.")
    order = (
        costs.groupby("label")["usd_per_m_output"].min().sort_values(ascending=False).index.tolist()
    )
    fig = go.Figure()
    for kind in (PREDICTED, MEASURED):
        rows = costs[costs["kind"] == kind]
        if rows.empty:
            continue
        colors = [gpu_color(g) for g in rows["gpu"]]
        if kind == PREDICTED:
            error = {
                "type": "data",
                "symmetric": False,
                "array": (rows["usd_high"] - rows["usd_per_m_output"]).fillna(0),
                "arrayminus": (rows["usd_per_m_output"] - rows["usd_low"]).fillna(0),
                "color": "#57606a",
            }
            fig.add_trace(
                go.Bar(
                    y=rows["label"],
                    x=rows["usd_per_m_output"],
                    orientation="h",
                    name=f"{PREDICTED} (at the SLO)",
                    marker={"color": colors, "pattern": {"shape": PREDICTED_PATTERN}},
                    error_x=error,
                    customdata=rows["detail"],
                    hovertemplate="%{y}<br>predicted $%{x:.3f}/M output tokens<br>"
                    "%{customdata}<extra></extra>",
                )
            )
        else:
            fig.add_trace(
                go.Scatter(
                    y=rows["label"],
                    x=rows["usd_per_m_output"],
                    mode="markers",
                    name=MEASURED,
                    marker={
                        "color": colors,
                        "symbol": MEASURED_SYMBOL,
                        "size": 12,
                        "line": {"color": "#1b1f24", "width": 1},
                    },
                    customdata=rows["detail"],
                    hovertemplate="%{y}<br>measured $%{x:.3f}/M output tokens<br>"
                    "%{customdata}<extra></extra>",
                )
            )
    fig.update_yaxes(
        title_text="GPU / instance and layout", categoryorder="array", categoryarray=order
    )
    fig.update_xaxes(title_text="cost ($/M output tokens, log scale)", type="log")
    return finish(fig, title, height=max(360, 24 * len(order) + 200), legend_below=True)


def spec_vs_token_cost_figure(points: pd.DataFrame, metric: str) -> go.Figure:
    """Each GPU's spec-sheet $/unit (x) against its best $/M output tokens (y).

    ``points`` columns: gpu, kind, usd_per_m_output, plus the spec columns of ``SPEC_METRICS``.
    If spec ratios predicted the bill the points would rise left to right; they do not.
    """
    column, unit = SPEC_METRICS[metric]
    title = f"Does a cheaper {unit} mean a cheaper token?"
    points = points.dropna(subset=[column, "usd_per_m_output"])
    if points.empty:
        return empty_figure(title, "No GPU has both a price and a $/token for this scenario.")
    fig = go.Figure()
    for kind, symbol in ((PREDICTED, "circle-open"), (MEASURED, MEASURED_SYMBOL)):
        rows = points[points["kind"] == kind]
        if rows.empty:
            continue
        fig.add_trace(
            go.Scatter(
                x=rows[column],
                y=rows["usd_per_m_output"],
                mode="markers+text",
                text=rows["gpu"],
                textposition="top center",
                name=f"{kind} (cheapest layout of each GPU)",
                marker={
                    "color": [gpu_color(g) for g in rows["gpu"]],
                    "symbol": symbol,
                    "size": 14,
                    "line": {"width": 2, "color": [gpu_color(g) for g in rows["gpu"]]},
                },
                hovertemplate="%{text}: %{x:.4f} (spec), $%{y:.3f}/M output tokens"
                f" ({kind})<extra></extra>",
            )
        )
    fig.update_xaxes(title_text=f"spec-sheet price ($ per {unit}, log scale)", type="log")
    fig.update_yaxes(title_text="cost ($/M output tokens, log scale)", type="log")
    return finish(fig, title, height=440, legend_below=True)


def owned_vs_rented_figure(rows: pd.DataFrame) -> go.Figure:
    """Per GPU with an owned server, owned against rented: $ per dense BF16 TFLOP-hour (left)
    and the cheapest $ per million output tokens of the scenario's ranking (right).

    ``rows`` columns: gpu, owned_usd_per_bf16_tflop_hour, rented_usd_per_bf16_tflop_hour,
    owned_usd_per_m_output, rented_usd_per_m_output.
    """
    title = "Owned against rented: $/TFLOP-hour from the spec sheet, $/token from the plans"
    if rows.empty:
        return empty_figure(title, "No priced owned server.")
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.14,
        subplot_titles=("$ per dense BF16 TFLOP-hour", f"$ per M output tokens ({PREDICTED})"),
    )
    for col, metric in ((1, "usd_per_bf16_tflop_hour"), (2, "usd_per_m_output")):
        for kind, pattern in (("owned", ""), ("rented", PREDICTED_PATTERN)):
            fig.add_trace(
                go.Bar(
                    x=rows["gpu"],
                    y=rows[f"{kind}_{metric}"].astype(float),
                    name=kind,
                    legendgroup=kind,
                    showlegend=col == 1,
                    marker={
                        "color": [gpu_color(str(g)) for g in rows["gpu"]],
                        "pattern": {"shape": pattern},
                        "opacity": 1.0 if kind == "owned" else 0.55,
                    },
                    hovertemplate=f"%{{x}} {kind}: $%{{y:,.4f}}<extra></extra>",
                ),
                row=1,
                col=col,
            )
    fig.update_yaxes(title_text="$ per TFLOP-hour", row=1, col=1)
    fig.update_yaxes(title_text="$ per M output tokens", row=1, col=2)
    fig.update_layout(barmode="group")
    return finish(fig, title, height=400, legend_below=True)
