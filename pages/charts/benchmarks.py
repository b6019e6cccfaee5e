"""Benchmarks: predicted against measured, and benchmark runs side by side."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pages.charts.style import MEASURED, PREDICTED, empty_figure, finish
from planner.palette import gpu_color

#: Metrics compared in the predicted-vs-measured chart: (column prefix, axis title).
COMPARED_METRICS = (
    ("output_tok_per_s", "output throughput (tokens/s)"),
    ("ttft_ms", "TTFT (ms)"),
    ("itl_ms", "ITL or TPOT (ms)"),
    ("ttft_p99_ms", "p99 TTFT (ms)"),  # rows that publish their p99s
    ("tpot_p99_ms", "p99 TPOT (ms)"),
)


def predicted_vs_measured_figure(
    points: pd.DataFrame, *, band: float = 0.25, held_out: bool = False
) -> go.Figure:
    """Each measured result against its prediction, one panel a metric (log-log).

    ``points`` columns: metric (a ``COMPARED_METRICS`` prefix), gpu, label, measured,
    predicted, low, high (the prediction's 80% interval). The diagonal is a perfect
    prediction; the shaded band is +-``band``. ``held_out``: each prediction comes from a fit
    that never saw the result's publisher (the title says so).
    """
    how = "held out by source" if held_out else "the fitted model"
    title = (
        f"{PREDICTED.capitalize()} ({how}) against {MEASURED}: on the diagonal is exact, "
        f"the band is ±{band:.0%}, whiskers are the 80% prediction interval"
    )
    points = points.dropna(subset=["measured", "predicted"])
    points = points[(points["measured"] > 0) & (points["predicted"] > 0)]
    if points.empty:
        return empty_figure(title, "No measured result with a prediction matches the filters.")
    metrics = [(m, t) for m, t in COMPARED_METRICS if (points["metric"] == m).any()]
    fig = make_subplots(
        rows=1, cols=len(metrics), subplot_titles=[t for _, t in metrics], horizontal_spacing=0.08
    )
    shown: set[str] = set()
    for col, (metric, axis_title) in enumerate(metrics, start=1):
        rows = points[points["metric"] == metric]
        low = float(min(rows["measured"].min(), rows["predicted"].min())) / 1.5
        high = float(max(rows["measured"].max(), rows["predicted"].max())) * 1.5
        grid = np.geomspace(low, high, 50)
        fig.add_trace(
            go.Scatter(
                x=np.concatenate([grid, grid[::-1]]),
                y=np.concatenate([grid * (1 + band), (grid * (1 - band))[::-1]]),
                fill="toself",
                fillcolor="rgba(87,96,106,0.12)",
                line={"width": 0},
                hoverinfo="skip",
                name=f"±{band:.0%} of {MEASURED}",
                showlegend=col == 1,
            ),
            row=1,
            col=col,
        )
        fig.add_trace(
            go.Scatter(
                x=grid,
                y=grid,
                mode="lines",
                line={"color": "#57606a", "dash": "dash", "width": 1},
                hoverinfo="skip",
                name=f"{PREDICTED} = {MEASURED}",
                showlegend=col == 1,
            ),
            row=1,
            col=col,
        )
        for gpu, group in rows.groupby("gpu", sort=True):
            fig.add_trace(
                go.Scatter(
                    x=group["measured"],
                    y=group["predicted"],
                    mode="markers",
                    name=str(gpu),
                    legendgroup=str(gpu),
                    showlegend=gpu not in shown,
                    marker={"color": gpu_color(str(gpu)), "size": 8, "opacity": 0.85},
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": (group["high"] - group["predicted"]).clip(lower=0).fillna(0),
                        "arrayminus": (group["predicted"] - group["low"]).clip(lower=0).fillna(0),
                        "thickness": 1,
                        "width": 0,
                    },
                    customdata=group["label"],
                    hovertemplate="%{customdata}<br>"
                    + MEASURED
                    + " %{x:,.1f}<br>"
                    + PREDICTED
                    + " %{y:,.1f}<extra></extra>",
                ),
                row=1,
                col=col,
            )
            shown.add(str(gpu))
        fig.update_xaxes(title_text=f"{MEASURED} {axis_title}", type="log", row=1, col=col)
        fig.update_yaxes(title_text=f"{PREDICTED} {axis_title}", type="log", row=1, col=col)
    return finish(fig, title, height=460, legend_below=True)


def runs_figure(requests: pd.DataFrame) -> go.Figure:
    """Per-request latencies of the chosen runs side by side (box per run, GPU colours).

    ``requests`` columns: run, gpu (may be empty), ttft_ms, tpot_ms, e2e_ms.
    """
    title = f"Runs side by side: per-request latencies ({MEASURED})"
    if requests.empty:
        return empty_figure(title, "Pick runs that have finished requests.")
    panels = (
        ("ttft_ms", "TTFT (ms)"),
        ("tpot_ms", "TPOT (ms)"),
        ("e2e_ms", "end-to-end latency (ms)"),
    )
    fig = make_subplots(rows=1, cols=3, subplot_titles=[t for _, t in panels])
    for col, (column, axis_title) in enumerate(panels, start=1):
        for run, group in requests.groupby("run", sort=False):
            gpu = str(group["gpu"].iloc[0] or "")
            fig.add_trace(
                go.Box(
                    y=group[column],
                    name=str(run),
                    marker_color=gpu_color(gpu) if gpu else "#57606a",
                    boxpoints="outliers",
                    showlegend=False,
                    hovertemplate=str(run) + ": %{y:,.1f} ms<extra></extra>",
                ),
                row=1,
                col=col,
            )
        fig.update_yaxes(title_text=axis_title, row=1, col=col, rangemode="tozero")
        fig.update_xaxes(title_text="run", row=1, col=col)
    return finish(fig, title, height=420, legend=False)
