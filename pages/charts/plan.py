"""Plan: what each ranked configuration costs against how fast it answers."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pages.charts.style import PREDICTED, PREDICTED_PATTERN, empty_figure, finish
from planner.palette import gpu_color


def ranking_figure(ranked: pd.DataFrame, utilisation_note: str) -> go.Figure:
    """$ per million output tokens of the best configurations, cheapest at the top.

    ``ranked`` columns: rank, label, gpu, region, usd_per_million_output_tokens, usd_per_hour,
    replicas, instances_total, confidence.
    """
    title = f"{PREDICTED.capitalize()} $ per million output tokens, best {len(ranked)}"
    if ranked.empty:
        return empty_figure(title, "No configuration meets the SLOs.")
    labels = [f"#{r} {lbl}" for r, lbl in zip(ranked["rank"], ranked["label"], strict=True)]
    fig = go.Figure(
        go.Bar(
            y=labels,
            x=ranked["usd_per_million_output_tokens"],
            orientation="h",
            marker={
                "color": [gpu_color(g) for g in ranked["gpu"]],
                "pattern": {"shape": PREDICTED_PATTERN},
            },
            customdata=ranked[["region", "usd_per_hour", "instances_total", "confidence"]],
            text=[f"${v:,.2f}" for v in ranked["usd_per_million_output_tokens"]],
            textposition="outside",
            cliponaxis=False,
            name=f"{PREDICTED} throughput at the SLO x price",
            hovertemplate="%{y} (%{customdata[0]})<br>$%{x:.2f}/M output tokens<br>"
            "%{customdata[2]} instances, $%{customdata[1]:,.2f}/hour<br>"
            "confidence: %{customdata[3]}<extra></extra>",
        )
    )
    fig.update_yaxes(title_text="configuration", autorange="reversed")
    top = float(ranked["usd_per_million_output_tokens"].max())
    fig.update_xaxes(
        title_text=f"cost ($/M output tokens, {utilisation_note})", range=[0, top * 1.18]
    )
    return finish(fig, title, height=max(320, 26 * len(ranked) + 140), legend=False)


def latency_figure(
    top: pd.DataFrame, slo_ttft_ms: float | None, slo_tpot_ms: float | None
) -> go.Figure:
    """Predicted p99 TTFT and TPOT of the top configurations with their 80% intervals,
    against the SLOs.

    ``top`` columns: label, gpu, pred_ttft_ms_p99(_low/_high), pred_tpot_ms_p99(_low/_high).
    """
    title = f"{PREDICTED.capitalize()} p99 latency of the best configurations (80% interval)"
    if top.empty:
        return empty_figure(title, "No configuration meets the SLOs.")
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("Time to first token", "Time per output token"),
        horizontal_spacing=0.18,
    )
    colors = [gpu_color(g) for g in top["gpu"]]
    for col, (metric, slo) in enumerate((("ttft", slo_ttft_ms), ("tpot", slo_tpot_ms)), start=1):
        value = top[f"pred_{metric}_ms_p99"]
        fig.add_trace(
            go.Bar(
                y=top["label"],
                x=value,
                orientation="h",
                marker={"color": colors},
                showlegend=False,
                error_x={
                    "type": "data",
                    "symmetric": False,
                    "array": (top[f"pred_{metric}_ms_p99_high"] - value).fillna(0),
                    "arrayminus": (value - top[f"pred_{metric}_ms_p99_low"]).fillna(0),
                    "color": "#1b1f24",
                },
                hovertemplate="%{y}<br>" + PREDICTED + " p99 %{x:,.1f} ms<extra></extra>",
            ),
            row=1,
            col=col,
        )
        if slo:
            fig.add_vline(
                x=slo,
                line={"dash": "dash", "color": "#d1242f"},
                annotation_text=f"SLO {slo:,.0f} ms",
                row=1,
                col=col,
            )
        fig.update_xaxes(title_text=f"{PREDICTED} p99 {metric.upper()} (ms)", row=1, col=col)
        fig.update_yaxes(autorange="reversed", showticklabels=col == 1, row=1, col=col)
    fig.update_yaxes(title_text="configuration", row=1, col=1)
    return finish(fig, title, height=max(300, 30 * len(top) + 140), legend=False)
