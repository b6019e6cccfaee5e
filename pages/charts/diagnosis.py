"""Diagnose: a finding's chart (the planner hands it over as data) and the what-if bars."""

from __future__ import annotations

import plotly.graph_objects as go

from pages.charts.style import empty_figure, finish
from planner.diagnosis.findings import Chart, WhatIf

#: colours by series position: the finding's own series first, reference lines grey
COLORS = ("#1f77b4", "#d62728", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b")
THRESHOLD_COLOR = "#57606a"
AFTER_COLOR = "#2ca02c"  # the fix makes this figure better
WORSE_COLOR = "#d62728"  # ... or worse (a larger batch trades ITL for throughput)


def finding_figure(spec: Chart | None, *, title: str = "") -> go.Figure:
    """Lines, markers, steps and bars of ``spec`` on one or two y axes, with its thresholds."""
    if spec is None or not spec.series:
        return empty_figure(title or "No chart", "The run holds no series for this finding.")
    fig = go.Figure()
    for index, s in enumerate(spec.series):
        color = COLORS[index % len(COLORS)]
        axis = {"yaxis": "y2"} if s.axis == "y2" and spec.y2_label else {}
        if s.kind == "bar":
            fig.add_trace(go.Bar(x=s.x, y=s.y, name=s.name, marker_color=color, **axis))
            continue
        mode = "markers" if s.kind == "markers" else "lines"
        line = {"color": color, "shape": "hv" if s.kind == "step" else "linear"}
        marker = {"color": color, "size": 4, "opacity": 0.6}
        fig.add_trace(
            go.Scatter(x=s.x, y=s.y, name=s.name, mode=mode, line=line, marker=marker, **axis)
        )
    for label, value in spec.thresholds:
        fig.add_hline(
            y=value,
            line={"dash": "dash", "color": THRESHOLD_COLOR, "width": 1},
            annotation_text=label,
            annotation_position="top left",
        )
    fig.update_xaxes(title_text=spec.x_label or None)
    fig.update_yaxes(title_text=spec.y_label)
    if spec.y2_label and any(s.axis == "y2" for s in spec.series):
        fig.update_layout(
            yaxis2={"title": {"text": spec.y2_label}, "overlaying": "y", "side": "right"}
        )
    if any(s.kind == "bar" for s in spec.series) and all(s.axis == "y" for s in spec.series):
        fig.update_layout(barmode="group")
    return finish(fig, title or spec.title, height=360)


#: (Outcome field, label, higher is better)
WHAT_IF_METRICS: tuple[tuple[str, str, bool], ...] = (
    ("output_tok_per_s", "output tok/s", True),
    ("ttft_ms_p99", "p99 TTFT (ms)", False),
    ("itl_ms_p99", "p99 ITL (ms)", False),
    ("usd_per_million_output_tokens", "$/M output tokens", False),
)


def what_if_figure(
    w: WhatIf | None, *, title: str = "Predicted: the same deployment with the fix"
) -> go.Figure:
    """Each metric after the fix as a share of before (1 = unchanged), from the model."""
    if w is None:
        return empty_figure(title, "No what-if: the run names no plan to predict.")
    labels, ratios, texts, colors = [], [], [], []
    for name, label, higher_better in WHAT_IF_METRICS:
        before, after = getattr(w.before, name), getattr(w.after, name)
        if before is None or after is None or before == 0:
            continue
        labels.append(label)
        ratios.append(after / before)
        texts.append(f"{before:,.3g} → {after:,.3g}")
        better = after >= before if higher_better else after <= before
        colors.append(AFTER_COLOR if better else WORSE_COLOR)
    if not labels:
        return empty_figure(title, "The what-if has no comparable figures.")
    fig = go.Figure(
        go.Bar(
            x=ratios,
            y=labels,
            orientation="h",
            text=texts,
            textposition="auto",
            marker_color=colors,
            name="after ÷ before",
            hovertemplate="%{y}: %{text} (%{x:.2f}x)<extra></extra>",
        )
    )
    fig.add_vline(x=1.0, line={"dash": "dash", "color": THRESHOLD_COLOR})
    fig.update_xaxes(title_text="after the fix ÷ before (1 = unchanged)", type="log")
    fig.update_yaxes(title_text="")
    return finish(fig, title, height=260, legend=False)
