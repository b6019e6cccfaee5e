"""Plan: what each ranked configuration costs against how fast it answers."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from pages.charts.style import PREDICTED, PREDICTED_PATTERN, empty_figure, finish
from planner.palette import gpu_color
from planner.recommend import (
    Recommendation,
    RecommendationResult,
    SensitivityRow,
    pareto_throughput_vs_interactivity,
)


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
    # two panels side by side, laid out directly: plotly's make_subplots and add_vline were
    # most of the time this figure took (it is redrawn for every new search)
    gap = 0.18
    width = (1.0 - gap) / 2
    layout: dict[str, Any] = {"shapes": [], "annotations": []}
    colors = [gpu_color(g) for g in top["gpu"]]
    panels = (
        ("ttft", slo_ttft_ms, "Time to first token"),
        ("tpot", slo_tpot_ms, "Time per output token"),
    )
    traces = []
    for col, (metric, slo, heading) in enumerate(panels, start=1):
        suffix = "" if col == 1 else str(col)
        x_name, y_name = f"x{suffix}", f"y{suffix}"
        left = 0.0 if col == 1 else width + gap
        value = top[f"pred_{metric}_ms_p99"]
        traces.append(
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
                xaxis=x_name,
                yaxis=y_name,
            )
        )
        layout[f"xaxis{suffix}"] = {
            "anchor": y_name,
            "domain": [left, left + width],
            "title": {"text": f"{PREDICTED} p99 {metric.upper()} (ms)"},
        }
        layout[f"yaxis{suffix}"] = {
            "anchor": x_name,
            "domain": [0.0, 1.0],
            "autorange": "reversed",
            "showticklabels": col == 1,
            **({"title": {"text": "configuration"}} if col == 1 else {}),
        }
        layout["annotations"].append(
            {
                "text": heading,
                "font": {"size": 16},
                "showarrow": False,
                "x": left + width / 2,
                "xref": "paper",
                "xanchor": "center",
                "y": 1.0,
                "yref": "paper",
                "yanchor": "bottom",
            }
        )
        if slo:
            domain = f"{y_name} domain"
            layout["shapes"].append(
                {
                    "type": "line",
                    "x0": slo,
                    "x1": slo,
                    "xref": x_name,
                    "y0": 0,
                    "y1": 1,
                    "yref": domain,
                    "line": {"dash": "dash", "color": "#d1242f"},
                }
            )
            layout["annotations"].append(
                {
                    "text": f"SLO {slo:,.0f} ms",
                    "showarrow": False,
                    "x": slo,
                    "xref": x_name,
                    "xanchor": "left",
                    "y": 1,
                    "yref": domain,
                    "yanchor": "top",
                }
            )
    fig = go.Figure(data=traces, layout=layout)
    return finish(fig, title, height=max(300, 30 * len(top) + 140), legend=False)


def pareto_figure(result: RecommendationResult) -> go.Figure:
    """Output tokens/s per GPU against tokens/s each user sees (1000 / p99 TPOT), one point
    per ranked configuration, the Pareto frontier drawn through the undominated ones."""
    title = f"Throughput per GPU against speed per user ({PREDICTED})"
    if not result.ranked:
        return empty_figure(title, "No configuration meets the SLOs.")
    fig = go.Figure()
    by_gpu: dict[str, list[Recommendation]] = {}
    for rec in result.ranked:
        by_gpu.setdefault(rec.gpu, []).append(rec)
    for gpu, recs in by_gpu.items():
        fig.add_trace(
            go.Scatter(
                x=[1000 / r.pred_tpot_ms_p99 for r in recs],
                y=[r.pred_output_tok_per_s_per_replica / (r.tp * r.pp) for r in recs],
                mode="markers",
                marker={"color": gpu_color(gpu), "size": 10},
                name=f"{gpu} ({PREDICTED})",
                text=[f"#{r.rank} {r.label}" for r in recs],
                hovertemplate="%{text}<br>%{x:.1f} tok/s per user<br>"
                "%{y:,.0f} output tok/s per GPU<extra></extra>",
            )
        )
    front = sorted(
        pareto_throughput_vs_interactivity(result), key=lambda r: 1000 / r.pred_tpot_ms_p99
    )
    fig.add_trace(
        go.Scatter(
            x=[1000 / r.pred_tpot_ms_p99 for r in front],
            y=[r.pred_output_tok_per_s_per_replica / (r.tp * r.pp) for r in front],
            mode="lines",
            line={"color": "#57606a", "dash": "dot"},
            name="Pareto frontier",
        )
    )
    fig.update_xaxes(title_text=f"tokens/s per user, 1000 / p99 TPOT ({PREDICTED})")
    fig.update_yaxes(title_text=f"output tokens/s per GPU ({PREDICTED})")
    return finish(fig, title)


def tornado_figure(rows: list[SensitivityRow], change_pct: float) -> go.Figure:
    """How the best $/M output tokens moves when one input moves by +-change_pct."""
    title = f"Sensitivity of the best $ per M output tokens to +-{change_pct:g}% ({PREDICTED})"
    usable = [r for r in rows if r.delta_pct is not None]
    if not usable:
        return empty_figure(title, "No configuration meets the SLOs.")
    factors = list(dict.fromkeys(r.factor for r in usable))
    spans = {f: max(abs(r.delta_pct or 0) for r in usable if r.factor == f) for f in factors}
    factors.sort(key=lambda f: spans[f])
    fig = go.Figure()
    for sign, colour in ((-1.0, "#1f6feb"), (1.0, "#d62728")):
        picked = {r.factor: r for r in usable if (r.change_pct > 0) == (sign > 0)}
        fig.add_trace(
            go.Bar(
                y=factors,
                x=[picked[f].delta_pct if f in picked else 0 for f in factors],
                orientation="h",
                marker={"color": colour},
                name=f"input {'+' if sign > 0 else '-'}{change_pct:g}%",
                text=[
                    ("new best: " + (picked[f].best or "none"))
                    if f in picked and picked[f].best_changed
                    else ""
                    for f in factors
                ],
                hovertemplate="%{y}: %{x:+.1f}% $/M output<br>%{text}<extra></extra>",
            )
        )
    fig.update_layout(barmode="overlay")
    fig.update_xaxes(title_text="change of the best $ per M output tokens (%)")
    fig.update_yaxes(title_text="input changed")
    return finish(fig, title, height=320)
