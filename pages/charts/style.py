"""Shared look of the charts: fonts, margins, how predicted and measured values are marked."""

from __future__ import annotations

import plotly.graph_objects as go
import plotly.io as pio

# Every chart is on the white template. Set once as the default, a new figure takes it at no
# cost; ``update_layout(template="plotly_white")`` validates the whole template again for
# each figure (~14 ms each, five figures a Plan page run). The figure's JSON is the same.
pio.templates.default = "plotly_white"

#: Predicted values are open markers / hatched bars, measured ones filled diamonds.
PREDICTED = "predicted"
MEASURED = "measured"
PREDICTED_SYMBOL = "circle-open"
MEASURED_SYMBOL = "diamond"
PREDICTED_PATTERN = "/"

#: Memory components of a GPU, bottom to top, with the opacity of the GPU's colour they get.
MEMORY_COMPONENTS: tuple[tuple[str, str, float, str], ...] = (
    ("weights_gib", "weights", 1.0, ""),
    ("kv_gib", "KV cache", 0.6, "/"),
    ("activation_gib", "activations", 0.4, "."),
    ("overhead_gib", "runtime overhead", 0.25, "x"),
    ("free_gib", "free", 0.08, ""),
)


def finish(
    fig: go.Figure,
    title: str,
    *,
    height: int = 420,
    legend: bool = True,
    legend_below: bool = False,
) -> go.Figure:
    """Title, size, white template, a horizontal legend above the plot (or below it, for
    subplots whose panel titles sit where the legend would)."""
    place = (
        {"yref": "container", "yanchor": "bottom", "y": 0.0, "x": 0, "xanchor": "left"}
        if legend_below
        else {"yanchor": "bottom", "y": 1.02, "x": 1, "xanchor": "right"}
    )
    fig.update_layout(
        title={"text": title, "x": 0, "xanchor": "left", "font": {"size": 16}},
        height=height,
        margin={
            "l": 60,
            "r": 20,
            "t": 80 if legend and not legend_below else 60,
            "b": 130 if legend and legend_below else 60,
        },
        showlegend=legend,
        legend={"orientation": "h", **place},
        hoverlabel={"namelength": -1},
    )
    return fig


def empty_figure(title: str, message: str) -> go.Figure:
    """A figure that says why there is nothing to draw (axes titled all the same)."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_xaxes(visible=False, title_text="(none)")
    fig.update_yaxes(visible=False, title_text="(none)")
    return finish(fig, title, height=240, legend=False)
