"""Cost: $/M tokens against utilisation, a month of a demand curve, GPU-hours against tokens."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pages.charts.cost import (
    break_even_figure,
    demand_figure,
    gpu_hours_figure,
    mix_figure,
    utilisation_figure,
)
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
from pages.common.ui import md_text, planner_errors
from pages.common.url_params import bound
from planner.input_checks import MAX_LOAD
from planner.owned import (
    break_even_options,
    break_even_sensitivity,
    cheapest_mix,
    hourly_cost_rows,
    mix_options,
    owned_assumptions,
    owned_server,
    owned_source,
)

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
    max_value=float(MAX_LOAD),
    value=float(default_avg),
    key="cost_avg",
)
peak_rps = bound(
    right.number_input,
    "Peak (requests/s)",
    min_value=0.01,
    max_value=float(MAX_LOAD),
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

st.subheader("Energy")
energy = pd.DataFrame(
    [
        {
            "deployment": deployment_label(rec),
            "kwh_per_million_output_tokens": rec.kwh_per_million_output_tokens,
            "joules_per_output_token": rec.joules_per_output_token,
            "basis": rec.energy_basis,
        }
        for rec in recs
    ],
    columns=["deployment", "kwh_per_million_output_tokens", "joules_per_output_token", "basis"],
)
st.dataframe(
    energy,
    hide_index=True,
    key="table_energy",
    column_config={
        "kwh_per_million_output_tokens": st.column_config.NumberColumn(
            "kWh / M output tokens", format="%.2f"
        ),
        "joules_per_output_token": st.column_config.NumberColumn("J / output token", format="%.2f"),
        "basis": st.column_config.TextColumn("power and PUE", width="large"),
    },
)

st.subheader("Own, commit or rent")
allow_spot = bound(
    st.toggle,
    "Rent the peak on spot too",
    key="cost_spot",
    help="Spot capacity can be taken back at any time; its interruptions are not priced.",
)
options = [o for o in mix_options(ref.catalog, ranked[:12]) if allow_spot or o.pricing != "spot"]
mix = None
mix_hours = pd.DataFrame(columns=["hour", "requests_per_s", "committed_rps", "rented_rps"])
if options:
    with planner_errors("No commitment mix"):
        mix = cheapest_mix(demand["requests_per_s"].tolist(), options, spare_replicas=int(spares))
if mix is not None:
    committed_name = mix.committed.name if mix.committed else "nothing"
    rented_name = mix.rented.name if mix.rented else "nothing"
    cols = st.columns(3)
    cols[0].metric("Cheapest mix, a month", f"${mix.usd_per_month:,.0f}")
    cols[1].metric("Committed / owned replicas", f"{mix.committed_replicas}", help=committed_name)
    cols[2].metric("Rented replica-hours a day", f"{mix.rented_replica_hours}", help=rented_name)
    mix_hours = pd.DataFrame(mix.hourly)
    st.caption(md_text(f"Committed: {committed_name}. Rented: {rented_name}."))
    with st.expander("What the mix assumes, hour by hour"):
        st.markdown("\n".join(f"- {md_text(a)}" for a in mix.assumptions))
        st.dataframe(mix_hours, hide_index=True, key="table_mix")
fig_mix = mix_figure(
    mix_hours,
    mix.committed.name if mix and mix.committed else "none",
    mix.rented.name if mix and mix.rented else "none",
)
st.plotly_chart(fig_mix, key="chart_mix")

owned_rec, break_even_rows = break_even_options(ref.catalog, ranked)
break_even = pd.DataFrame(break_even_rows)
grid = pd.DataFrame(columns=["utilisation", "usd_per_kwh", "break_even_months"])
if owned_rec is not None and break_even_rows:
    grid = pd.DataFrame(
        break_even_sensitivity(
            ref.catalog, owned_rec, float(break_even_rows[0]["rent_usd_per_month"])
        )
    )
server = owned_server(ref.catalog, owned_rec.instance) if owned_rec else None
fig_break_even = break_even_figure(
    break_even[["option", "break_even_months"]] if not break_even.empty else break_even,
    grid,
    deployment_label(owned_rec) if owned_rec else "no owned plan",
    owned_assumptions(server) if server else "",
)
st.plotly_chart(fig_break_even, key="chart_break_even")
if owned_rec is None:
    st.info("No owned server meets the SLOs here: add a server price on the Data page.")
st.dataframe(break_even, hide_index=True, key="table_break_even")
server_cost = pd.DataFrame(
    hourly_cost_rows(server) if server else [],
    columns=["part", "usd_per_hour", "usd_per_gpu_hour", "basis", "source", "as_of"],
)
if server is not None:
    st.markdown(f"**What one owned `{server.platform}` server costs an hour** (at full draw)")
    st.dataframe(
        server_cost,
        hide_index=True,
        key="table_owned_cost",
        column_config={
            "usd_per_hour": st.column_config.NumberColumn("$/hour", format="$%.2f"),
            "usd_per_gpu_hour": st.column_config.NumberColumn("$/GPU-hour", format="$%.2f"),
            "basis": st.column_config.TextColumn("from", width="large"),
            "source": st.column_config.TextColumn("sources", width="medium"),
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
            ExportSection("Energy", table=energy),
            ExportSection(
                "Own, commit or rent",
                text="; ".join(mix.assumptions) if mix else "",
                table=mix_hours,
                figures=[fig_mix],
            ),
            ExportSection(
                "Break-even",
                text=owned_assumptions(server).replace("\n", "; ") if server else "",
                table=break_even,
                figures=[fig_break_even],
            ),
            ExportSection(
                "What one owned server costs an hour",
                text=owned_source(server) if server else "",
                table=server_cost,
            ),
        ],
        {
            "Monthly cost": monthly,
            "Utilisation curves": curves,
            "GPU-hours": points,
            "Energy": energy,
            "Commitment mix": mix_hours,
            "Break-even": break_even,
            "Break-even sensitivity": grid,
            "Owned server cost": server_cost,
        },
        subtitle=scenario.describe(),
    )
