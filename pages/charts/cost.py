"""Cost: $/token against utilisation, a month of a demand curve, GPU-hours against tokens."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pages.charts.style import PREDICTED, empty_figure, finish
from planner.palette import gpu_color

DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def utilisation_figure(curves: pd.DataFrame, current: pd.DataFrame) -> go.Figure:
    """$/M output tokens against utilisation, one line a deployment; the marker is where the
    scenario puts it.

    ``curves`` columns: deployment, gpu, utilisation_pct, usd_per_m_output.
    ``current`` columns: deployment, gpu, utilisation_pct, usd_per_m_output.
    """
    title = f"$ per million output tokens against utilisation ({PREDICTED} capacity x price)"
    if curves.empty:
        return empty_figure(title, "Choose deployments above.")
    fig = go.Figure()
    for i, (deployment, rows) in enumerate(curves.groupby("deployment", sort=False)):
        color = gpu_color(str(rows["gpu"].iloc[0]))
        fig.add_trace(
            go.Scatter(
                x=rows["utilisation_pct"],
                y=rows["usd_per_m_output"],
                mode="lines",
                name=str(deployment),
                line={"color": color, "dash": DASHES[i % len(DASHES)], "width": 2},
                hovertemplate=str(deployment)
                + "<br>%{x:.0f}% busy: $%{y:.2f}/M output tokens<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=current["utilisation_pct"],
            y=current["usd_per_m_output"],
            mode="markers",
            name="this scenario",
            marker={
                "color": [gpu_color(g) for g in current["gpu"]],
                "size": 12,
                "symbol": "diamond-open",
                "line": {"width": 3},
            },
            hovertemplate="%{x:.0f}% busy: $%{y:.2f}/M output tokens<extra></extra>",
        )
    )
    fig.update_xaxes(title_text="utilisation (% of the capacity bought)", range=[0, 102])
    fig.update_yaxes(title_text="cost ($/M output tokens, log scale)", type="log")
    return finish(fig, title, height=440, legend_below=True)


def demand_figure(demand: pd.DataFrame, capacity: pd.DataFrame, monthly: pd.DataFrame) -> go.Figure:
    """Left: the demand curve over a day against each deployment's capacity.
    Right: a month of it, always on for the peak against an ideal autoscaler.

    ``demand`` columns: hour, requests_per_s. ``capacity`` columns: deployment, gpu,
    capacity_rps. ``monthly`` columns: deployment, gpu, usd_per_month,
    usd_per_month_autoscaled.
    """
    title = "A month of the demand curve"
    if demand.empty:
        return empty_figure(title, "Enter a demand curve.")
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.55, 0.45],
        horizontal_spacing=0.14,
        subplot_titles=("Demand over a day against capacity", "Cost of a month"),
    )
    fig.add_trace(
        go.Scatter(
            x=demand["hour"],
            y=demand["requests_per_s"],
            mode="lines+markers",
            name="demand",
            line={"color": "#1b1f24", "shape": "hv", "width": 3},
            hovertemplate="%{x}:00 %{y:.2f} requests/s<extra></extra>",
        ),
        row=1,
        col=1,
    )
    for i, row in enumerate(capacity.itertuples()):
        fig.add_trace(
            go.Scatter(
                x=[0, 23],
                y=[row.capacity_rps, row.capacity_rps],
                mode="lines",
                name=f"{row.deployment} ({PREDICTED} capacity)",
                line={"color": gpu_color(str(row.gpu)), "dash": DASHES[i % len(DASHES)]},
                hovertemplate=f"{row.deployment}: %{{y:.2f}} requests/s<extra></extra>",
            ),
            row=1,
            col=1,
        )
    colors = [gpu_color(g) for g in monthly["gpu"]]
    fig.add_trace(
        go.Bar(
            x=monthly["deployment"],
            y=monthly["usd_per_month"],
            name="always on for the peak",
            marker={"color": colors},
            hovertemplate="%{x}<br>always on: $%{y:,.0f}/month<extra></extra>",
        ),
        row=1,
        col=2,
    )
    fig.add_trace(
        go.Bar(
            x=monthly["deployment"],
            y=monthly["usd_per_month_autoscaled"],
            name="ideal autoscaler",
            marker={"color": colors, "pattern": {"shape": "/"}, "opacity": 0.6},
            hovertemplate="%{x}<br>ideal autoscaler: $%{y:,.0f}/month<extra></extra>",
        ),
        row=1,
        col=2,
    )
    fig.update_xaxes(title_text="hour of the day (h)", range=[0, 23], row=1, col=1)
    fig.update_yaxes(title_text="demand (requests/s)", rangemode="tozero", row=1, col=1)
    fig.update_xaxes(title_text="deployment", showticklabels=False, row=1, col=2)
    fig.update_yaxes(title_text="cost ($/month)", row=1, col=2)
    fig.update_layout(barmode="group")
    return finish(fig, title, height=460, legend_below=True)


def gpu_hours_figure(points: pd.DataFrame) -> go.Figure:
    """GPU-hours a month against tokens a month as the demand grows, one step line a
    deployment (replicas come in whole units).

    ``points`` columns: deployment, gpu, tokens_per_month_b, gpu_hours_per_month.
    """
    title = "GPU-hours against tokens served (a month, demand scaled from 1/4 to 4x)"
    if points.empty:
        return empty_figure(title, "Choose deployments above.")
    fig = go.Figure()
    for i, (deployment, rows) in enumerate(points.groupby("deployment", sort=False)):
        fig.add_trace(
            go.Scatter(
                x=rows["tokens_per_month_b"],
                y=rows["gpu_hours_per_month"],
                mode="lines",
                name=str(deployment),
                line={
                    "color": gpu_color(str(rows["gpu"].iloc[0])),
                    "shape": "hv",
                    "dash": DASHES[i % len(DASHES)],
                },
                hovertemplate=str(deployment)
                + "<br>%{x:,.1f} B tokens: %{y:,.0f} GPU-hours<extra></extra>",
            )
        )
    fig.update_xaxes(title_text="tokens served a month (billions, input + output)")
    fig.update_yaxes(title_text="GPU-hours a month (h)", rangemode="tozero")
    return finish(fig, title, height=420, legend_below=True)


def mix_figure(hourly: pd.DataFrame, committed: str, rented: str) -> go.Figure:
    """A day's demand split into the committed base and the rented peak of the cheapest mix.

    ``hourly`` columns: hour, requests_per_s, committed_rps, rented_rps.
    """
    title = "The cheapest mix for a day: commit or own the base, rent the peak"
    if hourly.empty:
        return empty_figure(title, "No plan to mix.")
    fig = go.Figure()
    for column, name, color in (
        ("committed_rps", f"committed / owned: {committed}", "#2b6cb0"),
        ("rented_rps", f"rented by the hour: {rented}", "#dd6b20"),
    ):
        fig.add_trace(
            go.Bar(
                x=hourly["hour"],
                y=hourly[column],
                name=name,
                marker={"color": color},
                hovertemplate="%{x:.0f}:00 %{y:.2f} requests/s<extra>" + name + "</extra>",
            )
        )
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="hour of the day (h)", dtick=2)
    fig.update_yaxes(title_text="demand served (requests/s)", rangemode="tozero")
    return finish(fig, title, height=400, legend_below=True)


def break_even_figure(
    options: pd.DataFrame, grid: pd.DataFrame, owned: str, assumptions: str = ""
) -> go.Figure:
    """Left: months until owning ``owned`` is cheaper than each rented option (a bar a
    option; "never" where renting stays cheaper). Right: how the break-even against the
    cheapest option moves with utilisation, one line a price of electricity. ``assumptions``
    (the owned-cost inputs and where they come from, a line each) is printed under the title.

    ``options`` columns: option, break_even_months (None: never).
    ``grid`` columns: utilisation, usd_per_kwh, break_even_months.
    """
    title = f"When owning pays back: {owned}"
    if options.empty:
        return empty_figure(title, "No owned and rented plan to compare.")
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.5, 0.5],
        horizontal_spacing=0.16,
        subplot_titles=(
            "Months until owning is cheaper, per rented option",
            "Against the cheapest option, as load and power price move",
        ),
    )
    months = options["break_even_months"].astype(float)
    never = months.isna()
    ceiling = float(months.max()) * 1.15 if not months.isna().all() else 60.0
    fig.add_trace(
        go.Bar(
            y=options["option"],
            x=months.fillna(ceiling),
            orientation="h",
            name="break-even (months)",
            marker={"color": ["#cbd5e0" if n else "#2f855a" for n in never]},
            text=["never" if n else f"{m:.1f} mo" for n, m in zip(never, months, strict=True)],
            textposition="auto",
            hovertemplate="%{y}: %{text}<extra></extra>",
            showlegend=False,
        ),
        row=1,
        col=1,
    )
    for i, (price, rows) in enumerate(grid.groupby("usd_per_kwh", sort=True)):
        fig.add_trace(
            go.Scatter(
                x=rows["utilisation"] * 100,
                y=rows["break_even_months"].astype(float),
                mode="lines+markers",
                name=f"${price:.3f}/kWh",
                line={"dash": DASHES[i % len(DASHES)], "width": 2},
                hovertemplate=f"${price:.3f}/kWh"
                + "<br>%{x:.0f}% busy: %{y:.1f} months<extra></extra>",
            ),
            row=1,
            col=2,
        )
    fig.update_xaxes(title_text="months", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(automargin=True, row=1, col=1)
    fig.update_xaxes(
        title_text="utilisation of the owned servers (%)", range=[0, 102], row=1, col=2
    )
    # beyond ten years owning has not paid back within any server's life: the axis stops there
    fig.update_yaxes(title_text="break-even (months)", range=[0, 120], row=1, col=2)
    if not assumptions:
        return finish(fig, title, height=440, legend_below=True)
    lines = "".join(f"<br><sup>{line}</sup>" for line in assumptions.splitlines())
    finish(fig, f"{title}{lines}", height=500, legend_below=True)
    fig.update_layout(margin={"t": 135})  # the title's lines above the panels' own titles
    return fig
