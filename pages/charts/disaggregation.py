"""Plan: where disaggregated prefill/decode starts to pay, $/M output tokens against load."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from pages.charts.style import PREDICTED, empty_figure, finish
from planner.recommend import DisaggregationPoint

#: the two series' names (a test and a reader find them by these)
AGGREGATED = "best aggregated plan"
DISAGGREGATED = "best disaggregated plan"


def disaggregation_figure(points: Sequence[DisaggregationPoint]) -> go.Figure:
    """$ per million output tokens of the best aggregated and the best disaggregated plan at
    each peak rate (:func:`planner.recommend.disaggregation_curve`); a load where a kind has
    no plan inside the SLO leaves a gap in its line."""
    title = f"{PREDICTED.capitalize()} $ per million output tokens against load"
    if not points:
        return empty_figure(title, "No load to compare.")
    rates = [p.peak_rate_rps for p in points]
    fig = go.Figure()
    for name, values, labels, dash in (
        (
            AGGREGATED,
            [p.aggregated_usd_per_million_output_tokens for p in points],
            [p.aggregated_label or "none meets the SLO" for p in points],
            "solid",
        ),
        (
            DISAGGREGATED,
            [p.disaggregated_usd_per_million_output_tokens for p in points],
            [p.disaggregated_label or "none meets the SLO" for p in points],
            "dash",
        ),
    ):
        fig.add_trace(
            go.Scatter(
                x=rates,
                y=values,
                mode="lines+markers",
                name=name,
                line={"dash": dash},
                customdata=labels,
                hovertemplate="%{x:g} req/s at peak: $%{y:,.2f}/M output tokens<br>"
                "%{customdata}<extra>" + name + "</extra>",
            )
        )
    fig.update_xaxes(title_text="peak load (requests/s)", type="log")
    fig.update_yaxes(title_text="cost ($/M output tokens)", rangemode="tozero")
    return finish(fig, title, height=380)
