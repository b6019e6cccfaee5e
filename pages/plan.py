"""Plan: the cheapest configurations that meet the SLOs, why the others lose, how to launch."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from pages.common.deploy import deploy_section
from pages.common.export import ExportSection, export_menu
from pages.common.navigation import ensure_app_navigation
from pages.common.planning import (
    disaggregation_points,
    filters_conflict,
    latest_run_moves,
    plan_sensitivity,
    recommendations,
    scenario_instances,
)
from pages.common.ranking import ranking_table
from pages.common.resources import get_catalog, get_store
from pages.common.runs_folder import ingestion_notice, refit_notice
from pages.common.scenario import current_scenario
from pages.common.tables import why_not
from pages.common.ui import md_text, planner_errors
from pages.common.url_params import bound
from planner.recommend import ranking_rows, rejected_rows, unmet_slos
from planner.recommend.analysis import speculation_comparison
from planner.recommend_export import PLAN_ASSUMPTIONS, best_configuration_text, sources_frame
from planner.workload import Workload

#: the headline's first row, drawn pending on a session's first page (below)
HEADLINE_LABELS = (
    "$ per M output tokens",
    "$ per M tokens (in + out)",
    "$ per hour",
    "$ per month",
    "Utilisation",
)
HEADLINE_SHOWN_KEY = "plan_headline_shown"

ensure_app_navigation()
scenario = current_scenario()
ref = get_catalog()

st.title("Plan")
st.caption(scenario.describe())
export_slot = st.container()

# Where the top recommendation goes. A session's first page draws it at once with its figures
# pending: the browser fetches and compiles what draws metrics and the launch command while
# the plan is searched, instead of after (a fresh server's first page: the headline drawn
# 3.67 s vs 3.79 s after spawning, the run over 4.00 vs 4.47 s, means of 4 runs each). Later
# runs have it all loaded and keep the last headline until the new one replaces it.
top_slot = st.empty()
if not st.session_state.get(HEADLINE_SHOWN_KEY):
    with top_slot.container(border=True, key="top_recommendation_pending"):
        pending = st.columns(5)
        for column, label in zip(pending, HEADLINE_LABELS, strict=True):
            column.metric(label, "…")
        st.code("# launch command …", language="bash")

result = None
with (
    planner_errors("No plan for this scenario"),
    st.spinner(
        "Predicting every layout that fits (the first time for a workload takes a while; "
        "price, region and utilisation changes are instant)…",
        show_time=True,
    ),
):
    result = recommendations(ref, get_store(ref), scenario)
ingestion_notice(get_store(ref))
refit_notice(ref, get_store(ref))

ranked = pd.DataFrame(ranking_rows(result)) if result else pd.DataFrame()
rejected = pd.DataFrame(rejected_rows(result)) if result else pd.DataFrame()
if not ranked.empty:
    ranked.insert(1, "label", [r.label for r in result.ranked] if result else [])

best = result.best if result else None
no_instance = filters_conflict(ref, scenario) if result and best is None else None
with top_slot.container(border=True, key="top_recommendation"):
    if no_instance is not None:  # the same sentence as `python -m planner recommend`
        st.error(f"No plan: {md_text(no_instance)}. Widen one of them in the sidebar.")
    elif best is None:
        unmet = unmet_slos(result) if result else []
        st.error(
            "No configuration meets the SLOs with the chosen filters. "
            + (
                " ".join(md_text(f"{line[0].upper()}{line[1:]}.") for line in unmet)
                if unmet
                else "Relax the SLOs, add providers or regions, or see below why each "
                "candidate was rejected."
            )
        )
    elif best.disaggregated:
        st.subheader(
            md_text(
                f"{best.instances_total} × {best.instance} ({best.provider}, {best.region}, "
                f"{best.pricing.replace('_', ' ')}), disaggregated: {best.pools}, {best.precision}"
            )
        )
    else:
        st.subheader(
            md_text(
                f"{best.instances_total} × {best.instance} ({best.provider}, {best.region}, "
                f"{best.pricing.replace('_', ' ')}): {best.gpu} TP{best.tp} × PP{best.pp}, "
                f"{best.replicas} replica{'s' if best.replicas > 1 else ''}, {best.precision}"
            )
        )
        cols = st.columns(5)
        cols[0].metric(
            HEADLINE_LABELS[0],
            f"${best.usd_per_million_output_tokens:,.2f}",
            help=f"At {best.utilisation:.0%} utilisation of the capacity bought.",
        )
        cols[1].metric(HEADLINE_LABELS[1], f"${best.usd_per_million_total_tokens:,.3f}")
        cols[2].metric(HEADLINE_LABELS[2], f"${best.usd_per_hour:,.2f}")
        cols[3].metric(HEADLINE_LABELS[3], f"${best.monthly_usd:,.0f}")
        cols[4].metric(HEADLINE_LABELS[4], f"{best.utilisation:.0%}")
        cols = st.columns(5)
        cols[0].metric(
            "p99 TTFT (predicted)",
            f"{best.pred_ttft_ms_p99:,.0f} ms",
            help=f"80% interval {best.pred_ttft_ms_p99_low or 0:,.0f} to "
            f"{best.pred_ttft_ms_p99_high or 0:,.0f} ms",
        )
        cols[1].metric(
            "p99 TPOT (predicted)",
            f"{best.pred_tpot_ms_p99:,.1f} ms",
            help=f"80% interval {best.pred_tpot_ms_p99_low or 0:,.1f} to "
            f"{best.pred_tpot_ms_p99_high or 0:,.1f} ms",
        )
        cols[2].metric("Requests/s a replica (predicted)", f"{best.max_rps_per_replica:,.2f}")
        cols[3].metric(
            "Output tokens/s a replica (predicted)",
            f"{best.pred_output_tok_per_s_per_replica:,.0f}",
        )
        cols[4].metric("Instances", f"{best.instances_total}")
        st.caption(
            f"Confidence of the prediction: **{best.confidence}**. Engine: "
            f"{best.plan.engine.engine} ({md_text(best.engine_settings.label)}). Price: "
            f"{md_text(best.price_source)} (as of {best.price_as_of})."
            + (f" Engine release: {md_text(best.release_note)}." if best.release_note else "")
            + (
                f" Energy: {best.kwh_per_million_output_tokens:,.2f} kWh per million output "
                f"tokens ({best.joules_per_output_token:,.1f} J a token; {best.energy_basis})."
                if best.kwh_per_million_output_tokens and best.joules_per_output_token
                else ""
            )
            + f" 80% intervals: p99 TTFT {best.pred_ttft_ms_p99_low or 0:,.0f} to "
            f"{best.pred_ttft_ms_p99_high or 0:,.0f} ms, p99 TPOT "
            f"{best.pred_tpot_ms_p99_low or 0:,.1f} to {best.pred_tpot_ms_p99_high or 0:,.1f} ms."
        )
        if best.far_from_data or best.uncertain_because:
            why = "; ".join(best.uncertain_because) or "other GPU, model size or lengths"
            st.warning(
                f"This prediction is uncertain ({md_text(why)}): its interval is widened for "
                "it; treat it as an estimate and verify it with a benchmark run."
            )
        if best.slo_straddles:
            st.warning(
                f"SLO at risk: {'; '.join(best.slo_straddles)}. Plans are ranked by the "
                "predicted p99; verify this one with a benchmark run before relying on the SLO."
            )
        if best.memory_raised:
            st.warning(f"Memory: this plan {md_text(best.memory_note)}.")
        st.code(best.launch_command, language="bash", wrap_lines=True)
    speculation = speculation_comparison(result) if result else None
    if speculation:
        st.info(speculation, icon=":material/fast_forward:")
st.session_state[HEADLINE_SHOWN_KEY] = True

if best is not None:
    with st.container(border=True, key="deploy"):
        deploy_section(best.plan, ref.catalog)

# The charts' modules load plotly's white template (~0.15 s, once a process): imported here,
# once the headline above is on the screen, a fresh server's first page shows it that much
# sooner.
import plotly.graph_objects as go  # noqa: E402

from pages.charts.plan import (  # noqa: E402
    latency_figure,
    pareto_figure,
    ranking_figure,
    tornado_figure,
)
from pages.charts.workload import length_histogram  # noqa: E402

utilisation_note = (
    f"at {scenario.utilisation:.0%} utilisation"
    if scenario.utilisation
    else "at each one's utilisation"
)
#: what the latency chart shows of each of the best configurations
LATENCY_COLUMNS = [
    "label",
    "gpu",
    *(f"pred_{m}_ms_p99{end}" for m in ("ttft", "tpot") for end in ("", "_low", "_high")),
]


@st.cache_resource(show_spinner=False, max_entries=32)
def latency_chart(
    rows: tuple[tuple[object, ...], ...], slo_ttft_ms: float | None, slo_tpot_ms: float | None
) -> go.Figure:
    """The latency chart of the best configurations, drawn again only when what it shows
    changes (a utilisation, price or region change that keeps the best ones keeps it; drawing
    it is ~20-60 ms a run), shared as is (``st.plotly_chart`` copies a figure)."""
    return latency_figure(
        pd.DataFrame(list(rows), columns=LATENCY_COLUMNS), slo_ttft_ms, slo_tpot_ms
    )


# No ranked plan (filters that hold nothing together, SLOs nothing meets): the headline says
# why, and no empty chart or table is drawn under it.
ranking_figures: list[go.Figure] = []
if not ranked.empty:
    fig_cost = ranking_figure(ranked.head(15), utilisation_note)
    fig_latency = latency_chart(
        tuple(ranked.head(8)[LATENCY_COLUMNS].itertuples(index=False, name=None)),
        scenario.slo_ttft_ms,
        scenario.slo_tpot_ms,
    )
    ranking_figures = [fig_cost, fig_latency]
    left, right = st.columns(2)
    left.plotly_chart(fig_cost, key="chart_ranking")
    right.plotly_chart(fig_latency, key="chart_latency")
    st.subheader("Ranking")
    ranking_table(ranked)

st.subheader("Why not…?")
instances = sorted(ref.catalog.instances)
asked = bound(
    st.selectbox,
    "Why not this instance?",
    instances,
    index=None,
    placeholder="Pick an instance",
    key="why",
)
if asked:
    for line in why_not(
        asked,
        ranked,
        rejected,
        ref.catalog,
        scenario_instances(ref.catalog, scenario),
        scenario.providers,
        scenario.regions,
        scenario.pricing,
    ):
        st.markdown(f"- {md_text(line)}")


def trade_offs_section() -> None:
    """The Pareto chart and, when asked, the sensitivity of the best choice."""
    fig_pareto = pareto_figure(result) if result else None
    if fig_pareto is not None:
        st.plotly_chart(fig_pareto, key="chart_pareto")
    change = st.select_slider(
        "Move each input by (%)", options=[10, 20, 30, 50], value=20, key="plan_sens_pct"
    )
    if result is not None and st.toggle(
        "Show the sensitivity of the best choice",
        key="plan_show_sensitivity",
        help="Re-searches the leading instance types with each input moved (a few seconds).",
    ):
        with planner_errors("Could not compute the sensitivity"), st.spinner("Re-searching…"):
            rows = plan_sensitivity(ref, get_store(ref), scenario, result, float(change))
            st.plotly_chart(tornado_figure(rows, float(change)), key="chart_tornado")


# Closed sections are drawn only when opened (opening reruns the page): the rejected
# candidates alone are 1,000-2,000 rows, 0.2-0.3 MB for the browser on every change.
if not rejected.empty:
    rejected_section = st.expander(
        f"Every rejected candidate ({len(rejected)})", key="open_rejected", on_change="rerun"
    )
    if rejected_section.open:
        with rejected_section:
            st.dataframe(rejected, hide_index=True, key="table_rejected")

if best is not None:  # its chart and sensitivity are of the ranked plans
    trade_offs = st.expander(
        "Trade-offs: throughput against speed per user, and what moves the bill",
        key="open_trade_offs",
        on_change="rerun",
    )
    if trade_offs.open:
        with trade_offs:
            trade_offs_section()

disaggregation_section = st.expander(
    "Where disaggregated prefill/decode starts to pay",
    key="open_disaggregation",
    on_change="rerun",
)
if disaggregation_section.open:  # five searches: only when asked
    with disaggregation_section:
        if scenario.load_mode != "rate":
            st.info("Set the load as requests/s: the pools split a request rate.")
        else:
            from pages.charts.disaggregation import disaggregation_figure

            with (
                planner_errors("Could not compare the two kinds"),
                st.spinner("Searching five loads…"),
            ):
                points = disaggregation_points(ref, get_store(ref), scenario)
                st.plotly_chart(disaggregation_figure(points), key="chart_disaggregation")

with st.expander("What your latest verification run changed"):
    if result is not None and st.toggle(
        "Compare these predictions before and after the model refitted on it",
        key="plan_show_moves",
        help="Refits the model without the latest run once (a few seconds), then compares.",
    ):
        with planner_errors("Could not compare the predictions"), st.spinner("Refitting…"):
            run_id, moves = latest_run_moves(ref, get_store(ref), scenario, result)
            if run_id is None:
                st.info("No verification run yet: run one on the Verify page.")
            elif moves.empty:
                st.write(f"Run {md_text(run_id)} moved none of these predictions by 0.5% or more.")
            else:
                st.caption(f"Run {md_text(run_id)}: predicted before → after the refit.")
                st.dataframe(moves, hide_index=True, key="table_moves")


@st.cache_resource(show_spinner=False, max_entries=16)
def lengths_figure(workload_key: tuple[object, ...], _workload: Workload) -> go.Figure:
    """The workload's length histograms: drawn once per workload (a price, SLO or load change
    keeps it), shared as is (``st.plotly_chart`` copies a figure, never changes it)."""
    rng = np.random.default_rng(0)
    return length_histogram(
        _workload.input_len.sample(5000, rng),
        _workload.output_len.sample(5000, rng),
        _workload.source or "the distributions in the sidebar",
    )


workload = scenario.workload()
shaped = workload.input_len.kind != "fixed" or workload.output_len.kind != "fixed"
lengths_section = st.expander(
    "Workload: request lengths",
    expanded=shaped,
    # open at first for shaped lengths (a trace, a distribution), closed for fixed ones: a
    # state of its own for each, so uploading a trace opens it
    key=f"open_lengths_{'shaped' if shaped else 'fixed'}",
    on_change="rerun",
)
if lengths_section.open:
    with lengths_section:
        st.plotly_chart(lengths_figure(scenario.workload_key(), workload), key="chart_lengths")

sources = sources_frame(result, ref.catalog) if result else pd.DataFrame()
with export_slot:
    export_menu(
        "Plan",
        [
            ExportSection("Best configuration", text=best_configuration_text(best)),
            ExportSection("Ranking", table=ranked, figures=ranking_figures),
            ExportSection("Rejected candidates", table=rejected),
            ExportSection("Assumptions", text=PLAN_ASSUMPTIONS),
            ExportSection("Sources and dates", table=sources),
        ],
        {"Ranking": ranked, "Rejected": rejected, "Sources": sources},
        subtitle=scenario.describe(),
    )
