"""Verify: a run's measurement against the prediction, one row a metric."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from pages.charts.style import (
    MEASURED,
    MEASURED_SYMBOL,
    PREDICTED,
    PREDICTED_SYMBOL,
    empty_figure,
    finish,
)
from planner.verification import MetricComparison, PredictionMove

MEASURED_COLOR = "#1f77b4"
PREDICTED_COLOR = "#57606a"
MOVED_COLOR = "#2ca02c"


def measured_vs_predicted_figure(comparisons: Sequence[MetricComparison]) -> go.Figure:
    """Each metric as measured / predicted (log axis): 1 is an exact prediction; the bar is
    the prediction's 80% interval on the same scale, the diamond the measurement."""
    title = f"{MEASURED.capitalize()} ÷ {PREDICTED}: 1 is exact, the bar the 80% interval"
    rows = [c for c in comparisons if c.measured and c.predicted]
    if not rows:
        return empty_figure(title, "No metric has both a measurement and a prediction.")
    labels = [f"{c.label} ({c.unit})" for c in rows][::-1]
    rows = rows[::-1]
    ratio = np.array([c.measured / c.predicted for c in rows])  # type: ignore[operator]
    fig = go.Figure()
    low = [c.predicted_low / c.predicted if c.predicted_low else 1.0 for c in rows]  # type: ignore[operator]
    high = [c.predicted_high / c.predicted if c.predicted_high else 1.0 for c in rows]  # type: ignore[operator]
    fig.add_trace(
        go.Scatter(
            x=[1.0] * len(rows),
            y=labels,
            mode="markers",
            marker={"symbol": PREDICTED_SYMBOL, "size": 12, "color": PREDICTED_COLOR},
            error_x={
                "type": "data",
                "symmetric": False,
                "array": [h - 1.0 for h in high],
                "arrayminus": [1.0 - lo for lo in low],
                "thickness": 6,
                "width": 0,
                "color": "rgba(87,96,106,0.35)",
            },
            name=f"{PREDICTED} (80% interval)",
            customdata=[[c.predicted, c.predicted_low, c.predicted_high] for c in rows],
            hovertemplate="%{y}<br>predicted %{customdata[0]:,.2f}"
            "<br>interval %{customdata[1]:,.2f} to %{customdata[2]:,.2f}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=ratio,
            y=labels,
            mode="markers",
            marker={"symbol": MEASURED_SYMBOL, "size": 13, "color": MEASURED_COLOR},
            name=MEASURED,
            customdata=[[c.measured, c.error_pct or 0.0] for c in rows],
            hovertemplate="%{y}<br>measured %{customdata[0]:,.2f} (%{x:.2f}x predicted)"
            "<br>prediction error %{customdata[1]:+.0f}%<extra></extra>",
        )
    )
    span = max(2.0, float(np.max(np.maximum(ratio, 1 / ratio))) * 1.3, *high)
    fig.add_vline(x=1.0, line={"color": PREDICTED_COLOR, "dash": "dot", "width": 1})
    fig.update_xaxes(
        type="log", range=[-np.log10(span), np.log10(span)], title_text="measured ÷ predicted"
    )
    fig.update_yaxes(title_text="metric")
    return finish(fig, title, height=max(320, 60 + 38 * len(rows)))


def moves_figure(moves: Sequence[PredictionMove]) -> go.Figure:
    """Each moved prediction: before (open), after (filled), measured (diamond), per metric
    as a percentage of the old prediction."""
    title = "What the refit moved: before → after, as % of the old prediction"
    if not moves:
        return empty_figure(title, "The refit moved no prediction.")
    labels = [f"{m.label} ({m.unit})" for m in moves][::-1]
    moves = list(moves)[::-1]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[100.0] * len(moves),
            y=labels,
            mode="markers",
            marker={"symbol": PREDICTED_SYMBOL, "size": 12, "color": PREDICTED_COLOR},
            name=f"{PREDICTED} before",
            customdata=[[m.before] for m in moves],
            hovertemplate="%{y}<br>before %{customdata[0]:,.2f}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[100.0 + m.change_pct for m in moves],
            y=labels,
            mode="markers",
            marker={"symbol": "circle", "size": 12, "color": MOVED_COLOR},
            name=f"{PREDICTED} after the refit",
            customdata=[[m.after, m.change_pct] for m in moves],
            hovertemplate="%{y}<br>after %{customdata[0]:,.2f} (%{customdata[1]:+.1f}%)"
            "<extra></extra>",
        )
    )
    known = [(m, label) for m, label in zip(moves, labels, strict=True) if m.measured]
    if known:
        fig.add_trace(
            go.Scatter(
                x=[100.0 * m.measured / m.before for m, _ in known],  # type: ignore[operator]
                y=[label for _, label in known],
                mode="markers",
                marker={"symbol": MEASURED_SYMBOL, "size": 13, "color": MEASURED_COLOR},
                name=MEASURED,
                customdata=[[m.measured] for m, _ in known],
                hovertemplate="%{y}<br>measured %{customdata[0]:,.2f}<extra></extra>",
            )
        )
    fig.update_xaxes(title_text="% of the prediction before the refit", ticksuffix="%")
    fig.update_yaxes(title_text="metric")
    return finish(fig, title, height=max(300, 60 + 40 * len(moves)))
