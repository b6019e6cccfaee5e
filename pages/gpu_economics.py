"""GPU economics: spec-sheet $/unit (the brief's Figure 1) beside $/M tokens, which decides."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pages.charts.economics import (
    SPEC_METRICS,
    owned_vs_rented_figure,
    spec_economics_figure,
    spec_vs_token_cost_figure,
    token_cost_figure,
)
from pages.common.export import ExportSection, export_menu
from pages.common.navigation import ensure_app_navigation
from pages.common.planning import recommendations
from pages.common.resources import get_catalog, get_store, measured_results, settings
from pages.common.scenario import current_scenario
from pages.common.tables import (
    measured_cost_rows,
    measured_for_scenario,
    predicted_cost_rows,
    spec_frame,
)
from pages.common.ui import planner_errors
from pages.common.url_params import bound
from planner.cost import FIGURE_1_INSTANCES, gpu_economics
from planner.owned import OWNED_PRICING, OWNED_REGION, owned_vs_rented

ensure_app_navigation()
scenario = current_scenario()
ref = get_catalog()
catalog = ref.catalog

st.title("GPU economics")
st.caption(
    "First what the spec sheets sell (per GPU, at the price of its cheapest instance), then "
    "what the bill depends on: $ per million output tokens for this scenario's model and "
    "workload. The spec contests have different winners, and none of them predicts the "
    "cheapest token."
)
export_slot = st.container()

regions = sorted({p.region for p in catalog.prices if p.pricing == scenario.pricing})
left, middle, right = st.columns([1, 1, 2])
default_region = settings().default_region
region = bound(
    left.selectbox,
    "Region of the prices",
    regions or [default_region],
    index=regions.index(default_region) if default_region in regions else 0,
    key="econ_region",
)
figure_one = bound(
    middle.toggle,
    "Figure 1 instances (2xlarge)",
    key="econ_fig1",
    help="Price L40S, A10G and L4 at g6e/g5/g6.2xlarge, as the brief's Figure 1 does, "
    "instead of each GPU's cheapest instance.",
)
utilisation = scenario.utilisation or 1.0
right.caption(
    f"Pricing: {scenario.pricing.replace('_', ' ')}. $/token at {utilisation:.0%} utilisation "
    + ("(the scenario's)." if scenario.utilisation else "(fully busy; set it in the sidebar).")
)

economics = []
with planner_errors("GPU economics could not be computed"):
    economics = gpu_economics(
        catalog,
        region,
        scenario.pricing,
        instances=FIGURE_1_INSTANCES if figure_one else None,
    )
spec = spec_frame(economics, catalog)

workload = scenario.workload()
mean_in, mean_out = workload.input_len.mean(), workload.output_len.mean()
store = get_store(ref)
measured = measured_for_scenario(measured_results(ref, store), scenario.model_id, mean_in, mean_out)
cost_rows = measured_cost_rows(
    measured, catalog, economics, pricing=scenario.pricing, utilisation=utilisation
)
result = None
with (
    planner_errors("No predicted $/token"),
    st.spinner("Predicting every layout that fits…", show_time=True),
):
    result = recommendations(ref, store, scenario)
    cost_rows += predicted_cost_rows(result.ranked, result.request.output_len, utilisation)
costs = pd.DataFrame(
    cost_rows,
    columns=["gpu", "label", "kind", "usd_per_m_output", "usd_low", "usd_high", "detail"],
)

fig_spec = spec_economics_figure(spec)
st.plotly_chart(fig_spec, key="chart_spec")

st.subheader("What decides the bill: $ per million tokens")
st.caption(
    "Predicted: the cheapest configuration of each instance on the Plan page, at the highest "
    "load that meets the scenario's SLOs. Measured: the stored results of this model at the "
    "closest lengths, at the load they were run with. Both at the same utilisation."
)
left, right = st.columns(2)
fig_tokens = token_cost_figure(costs, utilisation=utilisation)
left.plotly_chart(fig_tokens, key="chart_tokens")
metric = bound(
    right.segmented_control,
    "Compare $/token against",
    list(SPEC_METRICS),
    default="TFLOPS",
    required=True,
    key="econ_metric",
    help="TFLOPS: $ per dense BF16 TFLOP-hour; memory: $ per GB-hour; bandwidth: $ per "
    "(GB/s)-hour.",
)
best = (
    costs.sort_values("usd_per_m_output").groupby(["gpu", "kind"], as_index=False).first()
    if not costs.empty
    else costs
)
points = best.merge(spec, on="gpu", how="inner") if not best.empty else best
fig_scatter = spec_vs_token_cost_figure(points, str(metric))
right.plotly_chart(fig_scatter, key="chart_scatter")

st.subheader("Owned against rented")
st.caption(
    "A server a team buys, at its hourly cost (capital, energy at full draw, colocation, "
    "operations: the Data page's owned-server inputs), against the GPU's cheapest rented "
    "instance at the prices above; and the cheapest plan of each on the Plan page's ranking."
)
owned_rows = pd.DataFrame()
with planner_errors("No owned view"):
    rented_econ = economics
    if scenario.pricing == OWNED_PRICING:  # the rented side at on-demand prices
        rented_econ = gpu_economics(catalog, settings().default_region, "on_demand")
    owned_rows = pd.DataFrame(
        owned_vs_rented(
            rented_econ,
            gpu_economics(catalog, OWNED_REGION, OWNED_PRICING),
            result.ranked if result else [],
            catalog=catalog,
        )
    )
fig_owned = owned_vs_rented_figure(owned_rows)
st.plotly_chart(fig_owned, key="chart_owned")

with st.expander("Tables"):
    st.dataframe(owned_rows, hide_index=True, key="table_owned")
    st.dataframe(spec, hide_index=True, key="table_spec")
    st.dataframe(costs, hide_index=True, key="table_costs")

with export_slot:
    export_menu(
        "GPU economics",
        [
            ExportSection("Spec sheets and $/unit-hour", table=spec, figures=[fig_spec]),
            ExportSection(
                "$ per million output tokens", table=costs, figures=[fig_tokens, fig_scatter]
            ),
            ExportSection("Owned against rented", table=owned_rows, figures=[fig_owned]),
        ],
        {"GPU spec economics": spec, "$ per M tokens": costs, "Owned against rented": owned_rows},
        subtitle=f"{scenario.model_id}, {mean_in:,.0f} in / {mean_out:,.0f} out tokens, {region}",
    )
