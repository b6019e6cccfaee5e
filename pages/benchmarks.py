"""Benchmarks: measured results with filters, predicted against measured, runs side by side."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pages.charts.benchmarks import predicted_vs_measured_figure, runs_figure
from pages.common.export import ExportSection, export_menu
from pages.common.held_out import (
    filter_held_out,
    held_out_frame,
    held_out_points,
    held_out_summary,
    held_out_table,
)
from pages.common.navigation import ensure_app_navigation
from pages.common.planning import predicted_vs_measured
from pages.common.resources import get_catalog, get_store, measured_results
from pages.common.runs import run_labels, run_request_latencies, runs_side_by_side
from pages.common.runs_folder import ingestion_notice, quarantine_section
from pages.common.scenario import current_scenario
from pages.common.ui import planner_errors, show_fractions
from pages.common.url_params import bound
from planner.perf.validation import (
    latency_summary_rows,
    slice_summary_rows,
    summary_rows,
    validation_summary,
)
from planner.store import MEASURED_COLUMNS

ensure_app_navigation()
scenario = current_scenario()
ref = get_catalog()
store = get_store(ref)

st.title("Benchmarks")
st.caption(
    "Every measured serving result the planner learns from: the public tables that ship with "
    "it and your own benchmark runs (dashboard or `python -m benchmarks_runner`). Throughputs "
    "are for the whole deployment; latency statistics are as each source reports them."
)
export_slot = st.container()

results = measured_results(ref, store)
ingestion_notice(store)
frame = pd.DataFrame([r.model_dump() for r in results], columns=MEASURED_COLUMNS)
FIRST = ["model", "gpu", "num_gpus", "tp", "pp", "precision", "engine", "engine_version",
         "input_len", "output_len", "load", "concurrency", "request_rate", "output_tok_per_s",
         "total_tok_per_s", "ttft_ms", "ttft_stat", "itl_ms", "itl_stat"]  # fmt: skip
frame = frame[FIRST + [c for c in frame.columns if c not in FIRST]]

FILTERS = (
    ("origin", "Origin"),
    ("engine", "Engine"),
    ("model", "Model"),
    ("gpu", "GPU"),
    ("precision", "Precision"),
)
columns = st.columns(len(FILTERS))
filtered = frame
chosen_filters: dict[str, list[str]] = {}
for column, (field, label) in zip(columns, FILTERS, strict=True):
    options = sorted(frame[field].dropna().unique().tolist(), key=str.lower)
    chosen = bound(column.multiselect, label, options, key=f"bm_{field}", placeholder="All")
    chosen_filters[field] = chosen
    if chosen:
        filtered = filtered[filtered[field].isin(chosen)]

st.caption(f"{len(filtered):,} of {len(frame):,} measured results.")
st.dataframe(
    filtered,
    hide_index=True,
    key="table_measured",
    column_config={
        "output_tok_per_s": st.column_config.NumberColumn("output tok/s", format="%.1f"),
        "total_tok_per_s": st.column_config.NumberColumn("total tok/s", format="%.1f"),
        "source": st.column_config.TextColumn("source", width="medium"),
    },
)

st.header("Held-out accuracy")
summary = validation_summary()
if summary is None:
    st.info("No held-out figures stored yet: run `python -m planner validate --write-summary`.")
else:
    st.caption(
        "Median and p90 absolute error of predicted output tokens/s on rows the fit never saw, "
        "and the share of them inside the predicted 80% interval. Leave-one-source-out holds "
        "out each publisher (what a result nobody fed the model looks like); "
        "leave-one-model-class-out each architecture class (dense GQA, coarse and fine-grained "
        "MoE, MLA, sliding-window); the newest releases fold the last half-year of engine "
        "releases, predicted by a fit on the older ones (a release newer than the data). "
        f"{summary['predicted_rows']} of {summary['stored_rows']} "
        f"stored rows can be predicted. From `{summary['command']}`, {summary['as_of']}."
    )
    show_fractions(pd.DataFrame(summary_rows(summary)), "table_accuracy", ("fold",))
    latency = pd.DataFrame(latency_summary_rows(summary))
    if not latency.empty:
        st.caption(
            "TTFT and TPOT on the same held-out rows (those whose source reports them, with the "
            "statistic it reports: mean or median): median, mean and p90 absolute error, the "
            "share inside the predicted 80% interval, and the median error per engine and per "
            "number of requests in flight."
        )
        show_fractions(latency, "table_latency_accuracy", ("fold", "latency", "rows"))
    slices = pd.DataFrame(slice_summary_rows(summary))
    if not slices.empty:
        st.caption(
            "Held out by source, by slice: every row; rows of an engine release the fold never "
            "saw; closed-loop concurrency and Poisson-rate runs (requests one by one, as in a "
            "concurrency sweep, not a max-throughput burst whose TTFT is its drain time); and "
            "of those, the runs of engine releases from July 2025 on."
        )
        show_fractions(slices, "table_slice_accuracy", ("metric", "slice", "rows"))

st.subheader("Held out by source, row by row")
stored_held_out = held_out_frame()
held_out = filter_held_out(stored_held_out, chosen_filters)
held_out_rows = held_out_table(held_out)
figures_held_out = []
if stored_held_out.empty:
    st.info(
        "No held-out rows stored yet: run "
        "`python -m planner validate --scheme source --calibrate-intervals`."
    )
else:
    st.caption(
        f"{len(held_out):,} of the {len(stored_held_out):,} public results held out by source "
        "match the filters above. Each was predicted by a fit that never saw its publisher, as in "
        "the tables above: how far off the model would be on results like these, and how often "
        "their 80% interval held."
    )
    held_summary = held_out_summary(held_out)
    if not held_summary.empty:
        percent = st.column_config.NumberColumn(format="percent")
        st.dataframe(
            held_summary,
            hide_index=True,
            key="table_held_out_summary",
            column_config={
                "median error": percent,
                "p90 error": percent,
                "80% interval coverage": percent,
                "median predicted / measured": st.column_config.NumberColumn(format="%.2f"),
            },
        )
    figures_held_out = [predicted_vs_measured_figure(held_out_points(held_out), held_out=True)]
    st.plotly_chart(figures_held_out[0], key="chart_held_out")
    with st.expander("The held-out rows", key="open_held_out_rows"):
        st.dataframe(held_out_rows, hide_index=True, key="table_held_out")

# Predicting every measured result is the page's one long step (1,130 rows: 56.8 s at load
# average 9 on two cores), so it runs only once the section is opened (opening reruns the page)
# and the rest of the page does not wait for it.
predicted_section = st.expander(
    "Predicted against measured: each result next to the model's prediction",
    key="open_predicted",
    on_change="rerun",
)
points = pd.DataFrame()
figures_predicted = []
if predicted_section.open:
    with predicted_section:
        st.caption(
            "Each measured result of the filter above next to the performance model's "
            "prediction of the same scenario. The model was fitted on these results "
            "(in-sample); `python -m planner validate` reports held-out errors."
        )
        with (
            planner_errors("No predictions"),
            st.spinner("Predicting every measured result…", show_time=True),
        ):
            points = predicted_vs_measured(ref, store, scenario, results)
        shown = points[points["row"].isin(filtered.index)] if not points.empty else points
        figures_predicted = [predicted_vs_measured_figure(shown)]
        st.plotly_chart(figures_predicted[0], key="chart_predicted")
        points = shown

st.header("Runs side by side")
runs = store.runs()  # what is ingested so far (measured_results above started the ingestion)
labels = run_labels(runs)
if not labels:
    st.info(
        "No benchmark run is stored yet. Runs written by `python -m benchmarks_runner run` "
        "(or the dashboard) into the runs directory appear here."
    )
chosen_runs = bound(
    st.multiselect,
    "Runs",
    list(labels),
    default=list(labels)[:2],
    key="bm_runs",
    max_selections=6,
)
side_by_side = runs_side_by_side(runs, chosen_runs)
if not side_by_side.empty:
    st.dataframe(side_by_side, key="table_runs", height=35 * (len(side_by_side) + 1) + 3)
latencies = run_request_latencies(store, runs, chosen_runs)
fig_runs = runs_figure(latencies)
st.plotly_chart(fig_runs, key="chart_runs")
quarantine = quarantine_section(store)

with export_slot:
    export_menu(
        "Benchmarks",
        [
            ExportSection("Measured results", table=filtered),
            ExportSection(
                "Held out by source, row by row", table=held_out_rows, figures=figures_held_out
            ),
            ExportSection("Predicted against measured", table=points, figures=figures_predicted),
            ExportSection(
                "Runs side by side", table=side_by_side.reset_index(), figures=[fig_runs]
            ),
            ExportSection("Quarantined run files", table=quarantine),
        ],
        {
            "Measured results": filtered,
            "Held out by source": held_out_rows,
            "Predicted against measured": points,
            "Runs": side_by_side.reset_index(),
            "Quarantined run files": quarantine,
        },
    )
