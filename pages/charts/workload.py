"""The workload: histograms of prompt and answer lengths."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pages.charts.style import finish

INPUT_COLOR = "#57606a"
OUTPUT_COLOR = "#8250df"


def length_histogram(
    input_lengths: np.ndarray, output_lengths: np.ndarray, source: str
) -> go.Figure:
    """Share of requests by prompt length (left) and answer length (right)."""
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("Input (prompt) length", "Output (answer) length"),
        horizontal_spacing=0.1,
    )
    for col, (values, color, name) in enumerate(
        ((input_lengths, INPUT_COLOR, "input"), (output_lengths, OUTPUT_COLOR, "output")), start=1
    ):
        mean = float(np.mean(values)) if len(values) else 0.0
        lows, highs, shares = _bins(np.asarray(values))
        # binned here: 40 bars travel to the browser, not the thousands of lengths drawn
        fig.add_trace(
            go.Bar(
                x=(lows + highs) / 2,
                y=shares,
                width=np.maximum(highs - lows, 1.0) * 0.95,
                customdata=np.stack([lows, highs], axis=1),
                marker_color=color,
                name=name,
                hovertemplate="%{customdata[0]:,.0f}-%{customdata[1]:,.0f} tokens: "
                "%{y:.1f}% of requests<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.add_vline(
            x=mean,
            line={"dash": "dash", "color": "#1b1f24"},
            annotation_text=f"mean {mean:,.0f}",
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text=f"{name} length (tokens)", row=1, col=col)
        fig.update_yaxes(title_text="requests (%)", row=1, col=col)
    return finish(fig, f"Request lengths ({source})", height=300, legend=False)


def _bins(values: np.ndarray, bins: int = 40) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(low, high, % of requests) of ``bins`` equal-width bins over the lengths (one bin for
    one length)."""
    if values.size == 0:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    low, high = float(values.min()), float(values.max())
    if high <= low:
        return np.array([low - 0.5]), np.array([low + 0.5]), np.array([100.0])
    counts, edges = np.histogram(values, bins=bins, range=(low, high))
    return edges[:-1], edges[1:], counts * (100.0 / values.size)
