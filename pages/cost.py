"""Cost: $/M tokens against utilisation, a month of a demand curve, GPU-hours against tokens."""

from __future__ import annotations

import streamlit as st

from pages.charts.cost import demand_figure, gpu_hours_figure, utilisation_figure
from pages.common.export import ExportSection, export_menu
from pages.common.navigation import ensure_app_navigation
from pages.common.planning import recommendations
from pages.common.resources import get_catalog, get_store
from pages.common.scenario import current_scenario
from pages.common.tables import (
    demand_curve,
    deployment_label,
    gpu_hour_points,
    monthly_rows,
    utilisation_curves,
)
from pages.common.ui import planner_errors
from pages.common.url_params import bound

ensure_app_navigation()
scenario = current_scenario()
ref = get_catalog()

st.title("Cost")
st.caption(
    "What the Plan page's best deployments cost as the load moves: per token as they get "
    "busier, per month for a day's demand curve, and in GPU-hours as the demand grows. "
    "Capacities are predicted; prices are the catalog's."
)
export_slot = st.container()

result = None
with (
    planner_errors("No deployment to cost"),
    st.spinner("Predicting every layout that fits…", show_time=True),
):
    result = recommendations(ref, get_store(ref), scenario)
ranked = result.ranked if result else []
labels = {deployment_label(rec): rec for rec in ranked[:30]}
chosen = bound(
    st.multiselect,
    "Deployments",
    list(labels),
    default=list(labels)[:3],
    key="cost_deployments",
    help="The 30 cheapest of the Plan page's ranking.",
)
recs = [labels[label] for label in chosen]
output_len = result.request.output_len if result else 1
tokens_per_request = (result.request.input_len + result.request.output_len) if result else 1

curves, current = utilisation_curves(recs, output_len)
fig_utilisation = utilisation_figure(curves, current)
st.plotly_chart(fig_utilisation, key="chart_utilisation")

st.subheader("A month of demand")
if scenario.load_mode == "rate":
    default_avg, default_peak = scenario.load_avg, scenario.load_peak
elif ranked:
    # Requests/s at the peak concurrency: the best deployment's predicted rate without spares.
    top = ranked[0]
    default_peak = round(max(1, top.replicas - 1) * top.max_rps_per_replica, 2)
    default_avg = round(default_peak * scenario.load_avg / scenario.load_peak, 2)
else:
    default_avg, default_peak = 1.0, 2.0
left, middle, right, spare_col = st.columns(4)
shape = bound(
    left.selectbox,
    "Shape of a day",
    ["business", "evening", "flat"],
    help="business: a working day peaking at 14:00; evening: consumer traffic peaking at "
    "20:00; flat: the average all day.",
    key="cost_shape",
)
avg_rps = bound(
    middle.number_input,
    "Average (requests/s)",
    min_value=0.01,
    value=float(default_avg),
    key="cost_avg",
)
peak_rps = bound(
    right.number_input,
    "Peak (requests/s)",
    min_value=0.01,
    value=float(max(default_peak, default_avg)),
    key="cost_peak",
)
spares = bound(
    spare_col.number_input, "Spare replicas", min_value=0, max_value=16, value=1, key="cost_spares"
)
if scenario.load_mode == "concurrency":
    st.caption(
        "The scenario gives concurrency; these rates are what the best deployment is predicted "
        "to serve at the peak and average concurrency. Change them freely."
    )
if peak_rps < avg_rps:
    st.warning(f"Peak ({peak_rps:g}) is below the average ({avg_rps:g}): using the average.")
    peak_rps = avg_rps
demand = demand_curve(str(shape), float(avg_rps), float(peak_rps))
monthly = monthly_rows([], demand, int(spares))
points = gpu_hour_points([], demand, tokens_per_request, int(spares))
with planner_errors("The month could not be costed"):
    monthly = monthly_rows(recs, demand, int(spares))
    points = gpu_hour_points(recs, demand, tokens_per_request, int(spares))
fig_demand = demand_figure(demand, monthly, monthly)
st.plotly_chart(fig_demand, key="chart_demand")
fig_gpu_hours = gpu_hours_figure(points)
st.plotly_chart(fig_gpu_hours, key="chart_gpu_hours")
st.dataframe(
    monthly,
    hide_index=True,
    key="table_monthly",
    column_config={
        "usd_per_hour": st.column_config.NumberColumn("$/hour", format="$%.2f"),
        "usd_per_month": st.column_config.NumberColumn("$/month, always on", format="$%.0f"),
        "usd_per_month_autoscaled": st.column_config.NumberColumn(
            "$/month, ideal autoscaler", format="$%.0f"
        ),
        "avg_utilisation": st.column_config.NumberColumn("average utilisation", format="%.2f"),
        "usd_per_request": st.column_config.NumberColumn("$/request", format="$%.5f"),
    },
)

with export_slot:
    export_menu(
        "Cost",
        [
            ExportSection(
                "$/M tokens against utilisation", table=curves, figures=[fig_utilisation]
            ),
            ExportSection("A month of demand", table=monthly, figures=[fig_demand]),
            ExportSection("GPU-hours against tokens", table=points, figures=[fig_gpu_hours]),
        ],
        {"Monthly cost": monthly, "Utilisation curves": curves, "GPU-hours": points},
        subtitle=scenario.describe(),
    )
