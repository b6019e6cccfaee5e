"""KV cache: where a GPU's memory goes, how many sequences fit, how full the cache runs."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pages.charts.style import MEMORY_COMPONENTS, PREDICTED, empty_figure, finish
from planner.palette import gpu_color


def memory_stack_figure(memory: pd.DataFrame) -> go.Figure:
    """One stacked bar per layout: one GPU's weights / KV / activations / overhead / free (GiB).

    ``memory`` is ``pages.common.tables.memory_frame``. The bar has its GPU's colour; the
    components differ in shade and hatching.
    """
    title = "Memory of one GPU per layout (the pipeline stage whose KV pool binds)"
    if memory.empty:
        return empty_figure(title, "No layout selected.")
    colors = [gpu_color(g) for g in memory["gpu"]]
    fig = go.Figure()
    for column, name, opacity, pattern in MEMORY_COMPONENTS:
        fig.add_trace(
            go.Bar(
                y=memory["layout"],
                x=memory[column],
                orientation="h",
                name=name,
                marker={
                    "color": colors,
                    "opacity": opacity,
                    "pattern": {"shape": pattern, "fgcolor": "#1b1f24", "fgopacity": 0.35},
                    "line": {"color": colors, "width": 1},
                },
                hovertemplate="%{y}<br>" + name + ": %{x:.1f} GiB<extra></extra>",
            )
        )
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="memory of one GPU (GiB)")
    fig.update_yaxes(title_text="layout", autorange="reversed")
    return finish(fig, title, height=max(300, 34 * len(memory) + 150))


def concurrency_vs_context_figure(curves: pd.DataFrame, marker_context: int | None) -> go.Figure:
    """Maximum sequences the KV pool holds against their context length (input + output).

    ``curves`` columns: layout, gpu, context_tokens, max_sequences. ``marker_context`` draws
    the workload's p99 context as a vertical line.
    """
    title = "How many sequences fit: KV capacity against context length"
    if curves.empty:
        return empty_figure(title, "No layout selected.")
    fig = go.Figure()
    for layout, rows in curves.groupby("layout", sort=False):
        gpu = rows["gpu"].iloc[0]
        fig.add_trace(
            go.Scatter(
                x=rows["context_tokens"],
                y=rows["max_sequences"],
                mode="lines",
                name=str(layout),
                line={"color": gpu_color(gpu), "width": 2, "shape": "hv"},
                hovertemplate=str(layout)
                + "<br>%{x:,} tokens a sequence: %{y:,} sequences<extra></extra>",
            )
        )
    if marker_context:
        fig.add_vline(
            x=marker_context,
            line={"dash": "dash", "color": "#57606a"},
            annotation_text=f"workload p99: {marker_context:,} tokens",
            annotation_position="top right",
        )
    fig.update_xaxes(title_text="context of a sequence (tokens, log scale)", type="log")
    fig.update_yaxes(title_text="concurrent sequences (max, log scale)", type="log")
    return finish(fig, title, height=460, legend_below=True)


def occupancy_figure(at_load: pd.DataFrame, sweep: pd.DataFrame, concurrency: int) -> go.Figure:
    """Left: predicted KV occupancy at ``concurrency`` (expected, whisker to p99) per layout.
    Right: predicted chance a request waits or is preempted against concurrency.

    ``at_load`` columns: layout, gpu, expected_pct, p99_pct, risk_pct.
    ``sweep`` columns: layout, gpu, concurrency, risk_pct, p99_pct.
    """
    title = f"KV cache occupancy at {concurrency} requests in flight per replica ({PREDICTED})"
    if at_load.empty:
        return empty_figure(title, "No layout selected.")
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.45, 0.55],
        horizontal_spacing=0.12,
        subplot_titles=(
            "Occupancy of the KV pool",
            "Chance a request waits or is preempted",
        ),
    )
    colors = [gpu_color(g) for g in at_load["gpu"]]
    fig.add_trace(
        go.Bar(
            y=at_load["layout"],
            x=at_load["expected_pct"],
            orientation="h",
            name=f"{PREDICTED} occupancy (bar: expected, whisker: p99)",
            marker={"color": colors},
            error_x={
                "type": "data",
                "symmetric": False,
                "array": at_load["p99_pct"] - at_load["expected_pct"],
                "arrayminus": [0] * len(at_load),
                "color": "#1b1f24",
            },
            customdata=at_load[["p99_pct", "risk_pct"]],
            hovertemplate="%{y}<br>expected %{x:.0f}%, p99 %{customdata[0]:.0f}%"
            "<br>waits or preempted: %{customdata[1]:.1f}%<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.add_vline(x=100, line={"dash": "dot", "color": "#d1242f"}, row=1, col=1)
    for layout, rows in sweep.groupby("layout", sort=False):
        fig.add_trace(
            go.Scatter(
                x=rows["concurrency"],
                y=rows["risk_pct"],
                mode="lines+markers",
                name=str(layout),
                showlegend=False,
                line={"color": gpu_color(rows["gpu"].iloc[0])},
                hovertemplate=str(layout)
                + "<br>%{x} in flight: %{y:.1f}% wait or are preempted<extra></extra>",
            ),
            row=1,
            col=2,
        )
    fig.add_vline(x=concurrency, line={"dash": "dash", "color": "#57606a"}, row=1, col=2)
    fig.update_xaxes(title_text="occupancy (% of the KV pool)", range=[0, 110], row=1, col=1)
    fig.update_yaxes(title_text="layout", autorange="reversed", row=1, col=1)
    fig.update_xaxes(title_text="load (requests in flight per replica)", row=1, col=2)
    fig.update_yaxes(
        title_text="requests that wait or are preempted (%)", rangemode="tozero", row=1, col=2
    )
    return finish(fig, title, height=max(360, 34 * len(at_load) + 180), legend_below=True)
