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
        fig.add_trace(
            go.Histogram(
                x=values,
                histnorm="percent",
                nbinsx=40,
                marker_color=color,
                name=name,
                hovertemplate="%{x} tokens: %{y:.1f}% of requests<extra></extra>",
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
