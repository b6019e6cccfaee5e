"""KV cache: per layout, where each GPU's memory goes, how many sequences fit, how full it runs."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pages.charts.kv import concurrency_vs_context_figure, memory_stack_figure, occupancy_figure
from pages.common.export import ExportSection, export_menu
from pages.common.navigation import ensure_app_navigation
from pages.common.planning import feasible_layouts, occupancy, sequences_by_context
from pages.common.resources import get_catalog
from pages.common.scenario import current_scenario
from pages.common.tables import default_layouts, layout_label, memory_frame
from pages.common.ui import md_text, planner_errors
from pages.common.url_params import bound
from planner.loads import DEFAULT_CONCURRENCY

ensure_app_navigation()
scenario = current_scenario()
ref = get_catalog()

st.title("KV cache")
st.caption(
    "What is left of each GPU after the weights, activations and runtime is the KV cache: it "
    "decides how many requests run at once. Above 100% occupancy requests wait in the queue or "
    "are preempted (recomputed), and latency jumps."
)
export_slot = st.container()

engine = scenario.engine  # the sidebar's: what every page judges layouts at
st.caption(
    f"gpu_memory_utilization {engine.gpu_memory_utilization:.2f}, KV cache dtype "
    f"{engine.kv_cache_dtype} (set in the sidebar, under Engine)."
)
left, right = st.columns(2)
default_concurrency = (
    int(scenario.load_peak) if scenario.load_mode == "concurrency" else DEFAULT_CONCURRENCY
)
concurrency = bound(
    right.number_input,
    "Requests in flight per replica",
    min_value=1,
    max_value=4096,
    value=max(1, default_concurrency),
    step=1,
    key="kv_concurrency",
)

workload = scenario.workload()
context_p99 = workload.context_quantile(0.99)
layouts = []
with planner_errors("The layouts could not be enumerated"):
    layouts = feasible_layouts(ref, scenario, engine.max_model_len or workload.max_context())
labels = {layout_label(layout): layout for layout in layouts}
if not labels:
    st.warning(
        f"{md_text(scenario.model_id)} fits no instance that passes the scenario's filters "
        "(providers, regions, pricing, precisions). The reasons are on the Plan page."
    )
chosen = bound(
    st.multiselect,
    "Layouts",
    list(labels),
    default=[layout_label(layout) for layout in default_layouts(layouts)],
    key="kv_layouts",
    help="Default: on each GPU type, the smallest deployment that holds the model.",
)
selected = [labels[label] for label in chosen]

memory = memory_frame(selected)
fig_memory = memory_stack_figure(memory)
st.plotly_chart(fig_memory, key="chart_memory")

card = scenario.model_card(ref.catalog)
curves = pd.DataFrame(
    [
        {"layout": layout_label(layout), "gpu": layout.gpu_id, **point}
        for layout in selected
        for point in sequences_by_context(layout, card)
    ],
    columns=["layout", "gpu", "context_tokens", "max_sequences"],
)
fig_context = concurrency_vs_context_figure(curves, context_p99)
st.plotly_chart(fig_context, key="chart_context")

at_load_rows, sweep_rows = [], []
for layout in selected:
    label = layout_label(layout)
    with planner_errors(f"Occupancy of {label}"):
        result = occupancy(layout, card, scenario, int(concurrency))
        at_load_rows.append(
            {
                "layout": label,
                "gpu": layout.gpu_id,
                "expected_pct": 100 * result.expected,
                "p99_pct": 100 * result.p99,
                "risk_pct": 100 * result.p_wait_or_preempt,
                "capacity_tokens": result.capacity_tokens,
                "p99_demand_tokens": result.p99_demand_tokens,
            }
        )
        for level in sorted({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, int(concurrency)}):
            if level > 2 * int(concurrency) and level > 8:
                continue
            point = occupancy(layout, card, scenario, level)
            sweep_rows.append(
                {
                    "layout": label,
                    "gpu": layout.gpu_id,
                    "concurrency": level,
                    "risk_pct": 100 * point.p_wait_or_preempt,
                    "p99_pct": 100 * point.p99,
                }
            )
at_load = pd.DataFrame(
    at_load_rows,
    columns=[
        "layout",
        "gpu",
        "expected_pct",
        "p99_pct",
        "risk_pct",
        "capacity_tokens",
        "p99_demand_tokens",
    ],
)
sweep = pd.DataFrame(sweep_rows, columns=["layout", "gpu", "concurrency", "risk_pct", "p99_pct"])
fig_occupancy = occupancy_figure(at_load, sweep, int(concurrency))
st.plotly_chart(fig_occupancy, key="chart_occupancy")

risky = at_load[at_load["risk_pct"] >= 1.0]
for row in risky.itertuples():
    st.warning(
        f"{row.layout}: at {int(concurrency)} requests in flight, {row.risk_pct:.0f}% of the time "
        f"the requests need more KV cache than the pool holds ({row.p99_demand_tokens:,.0f} "
        f"tokens at p99 against {row.capacity_tokens:,} tokens): expect queueing or preemption."
    )

table = memory.merge(at_load.drop(columns=["gpu"]), on="layout", how="left")
with st.expander("Table"):
    st.dataframe(table, hide_index=True, key="table_kv")

with export_slot:
    export_menu(
        "KV cache",
        [
            ExportSection("Memory per GPU", table=table, figures=[fig_memory]),
            ExportSection("Sequences against context length", table=curves, figures=[fig_context]),
            ExportSection("Occupancy and preemption risk", table=sweep, figures=[fig_occupancy]),
        ],
        {"Memory and occupancy": table, "Sequences by context": curves, "Risk by load": sweep},
        subtitle=f"{scenario.model_id}, {int(concurrency)} requests in flight per replica",
    )
