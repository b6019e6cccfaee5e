"""Verify: run a plan against an endpoint, watch it, see measured against predicted, refit.

Runs live in a process-wide :class:`benchmarks_runner.run_manager.RunManager`, not in the
session: they go on while the user is on other pages, and a reload finds them again (active
ones from the manager, finished ones from the manager and the store's benchmark runs).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from benchmarks_runner.errors import ConfigError, EndpointError
from benchmarks_runner.run_manager import Faults, ManagedRun, RunManager, VerificationRequest
from benchmarks_runner.simulated.disaggregated import pool_coefficients
from benchmarks_runner.simulated.perf_timing import coefficients_for_plan
from benchmarks_runner.vllm_launcher import launch_readiness
from pages.charts.verify import measured_vs_predicted_figure, moves_figure
from pages.common.diagnosis import HANDED_PLAN
from pages.common.navigation import ensure_app_navigation
from pages.common.planning import (
    FIT_SIMULATED,
    fit_results,
    fit_simulated,
    performance_model,
    recommendations,
)
from pages.common.resources import get_catalog, get_store, measured_results, runs_generation
from pages.common.resources import settings as app_settings
from pages.common.scenario import current_scenario
from pages.common.ui import md_text, planner_errors
from pages.common.url_params import bound, url_field
from planner.catalog import PRECISIONS
from planner.credentials import parse_endpoint_url
from planner.deploy.disaggregated import pd_launch_scripts
from planner.engine_command import launch_command
from planner.errors import PlannerError, RunFilesError
from planner.loads import PLAN_LOAD_KINDS
from planner.perf.calibration import measurement_problem
from planner.perf.model import get_performance_model
from planner.perf.uncertainty import FAMILY_NAMES
from planner.plan import Plan, PlanWorkload
from planner.run_files import read_run_dir, run_signature
from planner.runs import calibration_problem, run_to_measured_result
from planner.verification import (
    compare,
    comparison_rows,
    custom_plan,
    default_load,
    default_num_requests,
    diagnosis_plan,
    failure_counts,
    move_rows,
    moves_for_result,
    predict_plan,
    prediction_of_run,
    scenario_of_run,
    without_run,
)
from planner.vllm_command import vllm_serve_command

ensure_app_navigation()
scenario = current_scenario()
ref = get_catalog()
store = get_store(ref)
runs_dir = app_settings().runs_directory
NUMBER = st.column_config.NumberColumn(format="%.2f")
PERCENT = st.column_config.NumberColumn(format="%+.1f%%")


@st.cache_resource(show_spinner=False)
def run_manager(directory: str) -> RunManager:
    """One manager a runs directory for the whole server process: runs outlive pages."""
    return RunManager(Path(directory))


@st.cache_data(show_spinner=False, max_entries=32)
def run_files(run_dir: str, signature: str | None) -> dict[str, Any] | None:
    del signature  # the cache key: changes whenever the run's files do
    try:
        run = read_run_dir(Path(run_dir))
    except RunFilesError:
        return None
    return {
        "meta": run.meta,
        "requests": run.requests,
        "measured": run_to_measured_result(run),
        "problem": calibration_problem(run),
    }


manager = run_manager(str(runs_dir))
st.title("Verify")
st.caption(
    "Pick a plan, run it against an endpoint (a real one, vLLM launched here, or the simulated "
    "endpoint timed by the performance model), and compare what was measured with what was "
    "predicted. Each finished run becomes a measured result, and the model refits on it."
)
st.session_state[FIT_SIMULATED] = bool(
    bound(
        st.toggle,
        "Simulated runs refit the model",
        value=fit_simulated(),
        key="vf_fit_simulated",
        help="Off (the default): a run against the simulated endpoint, timed by the model "
        "itself, is kept and compared but is not a calibration point (the model would learn "
        "its own predictions). SERVEWISE_FIT_SIMULATED_RUNS=1 turns it on for every session.",
    )
)

# ----- the plan ----------------------------------------------------------------------------------
st.subheader("Plan")
handed = st.session_state.get(HANDED_PLAN)  # a fix's plan from the Diagnose page
source = bound(
    st.segmented_control,
    "Plan to verify",
    ["Recommended", "Custom", *(["Diagnosis"] if handed else [])],
    default="Recommended",
    required=True,
    key="vf_source",
    help="Recommended: one of the Plan page's ranked plans for the scenario. Custom: any GPU "
    "and layout for the scenario's model. Diagnosis: the plan a fix on the Diagnose page leads "
    "to.",
)
plan: Plan | None = None
max_rps = None
if source == "Recommended":
    result = None
    with planner_errors("No recommendation for this scenario"), st.spinner("Ranking plans…"):
        result = recommendations(ref, store, scenario)
    ranked = result.ranked[:10] if result else []
    if not ranked:
        st.warning("No plan meets the SLOs for this scenario: choose a custom plan.")
    else:
        pick = st.selectbox(
            "Recommended plan",
            range(len(ranked)),
            format_func=lambda i: (
                f"#{i + 1} {ranked[i].label} "
                f"(${ranked[i].usd_per_million_output_tokens:,.2f}/M output)"
            ),
            key="vf_rank",
        )
        rec = ranked[int(pick or 0)]
        plan, max_rps = rec.plan, rec.max_rps_per_replica
elif source == "Diagnosis" and handed:
    with planner_errors("The diagnosis's plan cannot be read"):
        plan = diagnosis_plan(dict(handed), ref.catalog)
    fix = handed.get("derived_from", {}).get("diagnosis_fix", "")
    st.caption(f"From the diagnosis: {md_text(fix)}")
else:
    gpus = sorted(ref.catalog.gpus)
    cols = list(st.columns(4))
    default_gpu = gpus.index("H100-SXM") if "H100-SXM" in gpus else 0
    gpu = bound(cols[0].selectbox, "GPU", gpus, default_gpu, key="vf_gpu")
    tp = bound(cols[1].number_input, "TP", 1, 64, 1, key="vf_tp")
    pp = bound(cols[2].number_input, "PP", 1, 64, 1, key="vf_pp")
    precision = bound(cols[3].selectbox, "Precision", PRECISIONS, key="vf_precision")
    plan = custom_plan(
        scenario.model_id, ref.catalog.gpu(str(gpu)), tp=int(tp), pp=int(pp), precision=precision
    )
if plan is not None:
    what = (
        "both pools are verified, behind one router"
        if plan.disaggregated
        else ("one replica is verified")
    )
    st.caption(f"{md_text(scenario.model_id)} on {md_text(plan.label)}: {what}.")

# ----- the load ----------------------------------------------------------------------------------
st.subheader("Load")
cols = list(st.columns(5))
mode = bound(
    cols[0].selectbox,
    "Load",
    PLAN_LOAD_KINDS,
    index=0 if scenario.load_mode == "concurrency" else 1,
    key="vf_load",
    help="concurrency: a closed loop of that many requests in flight; rate: Poisson arrivals.",
)
peak = default_load(plan, mode, scenario.load_peak) if plan is not None else 1.0
if mode == "concurrency":
    load = float(bound(cols[1].number_input, "Concurrency", 1, 10_000, int(peak), key="vf_c"))
else:
    rate = peak if plan is not None and plan.disaggregated else min(peak, max_rps or peak)
    load = float(bound(cols[1].number_input, "Requests/s", 0.01, 10_000.0, rate, key="vf_rate"))
input_len = int(
    bound(cols[2].number_input, "Input tokens", 1, 1_000_000, scenario.input_len.mean, key="vf_in")
)
output_len = int(
    bound(cols[3].number_input, "Output tokens", 1, 10**5, scenario.output_len.mean, key="vf_out")
)
num_requests = int(
    bound(cols[4].number_input, "Requests", 1, 10**5, default_num_requests(mode, load), key="vf_n")
)
# The sidebar's length shapes and spreads around these means: the run sends the very requests
# the prediction below simulates.
input_dist = replace(scenario.input_len, mean=input_len).distribution()
output_dist = replace(scenario.output_len, mean=output_len).distribution()
if plan is not None:
    # vLLM must admit the longest request the run sends
    longest = PlanWorkload(input_len=input_dist, output_len=output_dist).longest_request
    if (plan.engine.max_model_len or 0) < longest:
        engine = plan.engine.model_copy(update={"max_model_len": longest})
        plan = plan.model_copy(update={"engine": engine})
if input_dist.kind != "fixed" or output_dist.kind != "fixed":
    st.caption(
        f"Lengths as the sidebar draws them: input {scenario.input_len.shape}, output "
        f"{scenario.output_len.shape} (spread {scenario.input_len.spread:,} and "
        f"{scenario.output_len.spread:,} tokens)."
    )

# ----- the endpoint ------------------------------------------------------------------------------
st.subheader("Endpoint")
kind = bound(
    st.segmented_control,
    "Endpoint",
    ["Simulated", "URL", "vLLM"],
    default="Simulated",
    required=True,
    key="vf_endpoint",
    help="Simulated: a local server timed by the performance model. URL: a running "
    "OpenAI-compatible server. vLLM: start `vllm serve` for the plan here (needs a GPU).",
)
blocker: str | None = None if plan is not None else "Choose a plan first."
options: dict[str, Any] = {"endpoint": {"Simulated": "simulated", "URL": "url"}.get(kind, "vllm")}
if kind == "Simulated":
    st.caption(
        "A local server that streams like vLLM, timed by the performance model for this plan "
        "(continuous batching: latency grows with load). Its results are labelled simulated."
    )
    options["slowdown"] = bound(
        st.number_input, "Slowdown (x the model)", 0.1, 20.0, 1.0, key="vf_slow"
    )
    with st.expander("Fault injection"):
        rates = [
            bound(col.number_input, label, 0.0, 1.0, key=key)
            for col, label, key in zip(
                st.columns(4),
                ("HTTP 500 rate", "Dropped mid-stream", "Malformed chunk", "Stalls (1 s)"),
                ("vf_err", "vf_drop", "vf_bad", "vf_stall"),
                strict=True,
            )
        ]
        options["faults"] = Faults(*rates)
elif kind == "URL":
    cols = list(st.columns([3, 2, 2, 1]))
    url = url_field(cols[0], "Base URL (no /v1)", placeholder="http://host:8000", key="vf_url")
    options["base_url"] = url.strip()
    options["api_key"] = cols[1].text_input("API key", type="password", key="vf_key") or None
    served = cols[2].text_input("Served model name", plan.model if plan else "", key="vf_served")
    options["served_model"] = served.strip() or None
    options["api"] = bound(cols[3].selectbox, "API", ["completions", "chat"], key="vf_api")
    if not options["base_url"]:
        blocker = "Enter the endpoint's base URL."
    else:
        try:
            parse_endpoint_url(options["base_url"], "Base URL")
        except PlannerError as exc:
            blocker = md_text(exc)  # it quotes what was typed: shown as text
            st.warning(blocker)
elif plan is not None:
    readiness = launch_readiness()
    blocker = None if readiness.ok else readiness.message
    st.info(
        readiness.message
        if not readiness.ok
        else f"{readiness.message} vLLM starts for the run and stops after it (minutes)."
    )
if plan is not None:
    options["vllm_config"] = plan.vllm_config()
    if plan.disaggregated:
        with (
            st.expander("Launch commands for this plan's router and pools", expanded=False),
            planner_errors("No launch commands for these pools"),
        ):
            st.caption(
                "The router, then each prefill and decode server with the pools' PD flags "
                "(the Plan page's Deploy section writes the same scripts)."
            )
            for name, script in pd_launch_scripts(plan).items():
                st.markdown(f"`{name}`")
                st.code(script, language="bash")
    elif plan.engine.family == "vllm":
        with st.expander("vllm serve command for this plan", expanded=kind == "vLLM"):
            st.code(vllm_serve_command(options["vllm_config"]), language="bash")
    else:  # the plan's own engine's command; vLLM's, what the vLLM endpoint starts, labelled
        name = FAMILY_NAMES.get(plan.engine.family, plan.engine.family)
        with (
            st.expander(f"{name} launch command for this plan", expanded=kind != "vLLM"),
            planner_errors(f"No {name} command for this layout"),
        ):
            st.code(launch_command(plan), language="bash")
        with st.expander(
            f"vLLM equivalent (what the vLLM endpoint starts; not the plan: vLLM's default "
            f"memory share, not {name}'s)",
            expanded=kind == "vLLM",
        ):
            st.code(vllm_serve_command(options["vllm_config"]), language="bash")

# ----- predicted, before the run -----------------------------------------------------------------
perf = None
request: VerificationRequest | None = None
if plan is not None:
    request = VerificationRequest(
        plan=plan,
        input_len=input_dist,
        output_len=output_dist,
        num_requests=num_requests,
        concurrency=int(load) if mode == "concurrency" else None,
        request_rate=load if mode == "rate" else None,
        log_dir=runs_dir / "vllm-logs",
        **options,
    )
    with planner_errors("No prediction for this plan"), st.spinner("Fitting the model…"):
        perf, _ = performance_model(ref, store, scenario)
        before = predict_plan(perf, request.scenario(), plan)
        cols = list(st.columns(4))
        cols[0].metric("Output tokens/s (predicted)", f"{before.output_tok_per_s:,.0f}")
        cols[1].metric("Median TTFT (predicted)", f"{before.ttft_ms_p50:,.0f} ms")
        cols[2].metric("p99 TTFT (predicted)", f"{before.ttft_ms_p99:,.0f} ms")
        cols[3].metric("Median TPOT (predicted)", f"{before.tpot_ms_p50:,.1f} ms")
        st.caption(
            f"Confidence: {before.confidence} "
            f"(nearest measurement: {md_text(before.nearest_measured)}). "
            f"80% interval of output tokens/s: {before.output_tok_per_s_low:,.0f} to "
            f"{before.output_tok_per_s_high:,.0f}."
        )

# ----- run ---------------------------------------------------------------------------------------
if st.button("Run", type="primary", key="vf_run", disabled=blocker is not None or perf is None):
    assert plan is not None and perf is not None and request is not None
    if kind == "Simulated":
        coefficients: Any = (
            pool_coefficients(perf, plan, request.scenario())
            if plan.disaggregated
            else coefficients_for_plan(perf, request.scenario())
        )
        request = replace(request, coefficients=coefficients)
    try:
        started = manager.start_verification(request)
        st.toast(f"Started: {md_text(started.label)}")
    except ConfigError as exc:  # what was entered: a notice, not an error
        st.warning(f"The run cannot start: {md_text(exc)}")
    except EndpointError as exc:
        st.error(f"The run cannot start: {md_text(exc)}")
if blocker:
    st.caption(blocker)


# ----- live progress -----------------------------------------------------------------------------
def _progress(run: ManagedRun) -> None:
    with st.container(border=True, key=f"vf_live_{run.id}"):
        snap = run.progress
        head, button = st.columns([5, 1])
        head.markdown(
            f"**{md_text(run.label)}** · {md_text(run.endpoint)} · {md_text(run.message)}"
        )
        if button.button("Cancel", key=f"vf_cancel_{run.id}", disabled=run.cancel_requested):
            manager.cancel(run.id)
        total, done = (snap.requests_total, snap.requests_done) if snap else (0, 0)
        text = f"{done} of {total or '?'} requests"
        if snap is not None and snap.phase == "warmup":
            text = "warming the server up: one wave of requests, not measured"
        st.progress(done / total if total else 0.0, text=text)
        cols = list(st.columns(5))
        cols[0].metric("Failed", snap.requests_failed if snap else 0)
        cols[1].metric("Output tokens/s", f"{snap.output_tok_per_s:,.0f}" if snap else "–")
        for col, name, value in (
            (cols[2], "p50 TTFT", snap.ttft_ms_p50 if snap else None),
            (cols[3], "p99 TTFT", snap.ttft_ms_p99 if snap else None),
        ):
            col.metric(name, "–" if value is None else f"{value:,.0f} ms")
        kv = snap.kv_cache_usage if snap else None
        cols[4].metric("Server KV usage", "–" if kv is None else f"{kv:.1%}")


def _live() -> None:
    active = manager.active()
    ended = st.session_state.get("vf_seen", set()) - {r.id for r in active}
    st.session_state["vf_seen"] = {r.id for r in active}
    if ended:  # a run ended: redraw the whole page with its results
        st.rerun(scope="app")
    for run in active:
        _progress(run)


if manager.active():
    st.subheader("Runs in progress")
    st.fragment(_live, run_every=1.0)()

# ----- results -----------------------------------------------------------------------------------
st.subheader("Measured against predicted")
runs_generation(store)  # ingests new run directories (at most every few seconds)
choices: dict[str, str] = {}
for done_run in manager.finished():
    if done_run.run_dir is not None:
        choices[str(done_run.run_dir)] = f"{done_run.run_id}: {done_run.label} ({done_run.state})"
    elif done_run.finished_at and time.time() - done_run.finished_at < 600:
        st.warning(
            md_text(
                f"{done_run.label} ended before it started ({done_run.state}): {done_run.message}"
            )
        )
for row in store.runs().itertuples(index=False):
    if row.plan not in (None, "null") and row.status != "running":
        choices.setdefault(str(row.run_dir), f"{row.run_id}: {row.model} ({row.status})")
if not choices:
    st.info("No verification run yet: press Run above.")
    st.stop()
keys = list(choices)
known = st.session_state.get("vf_known")
fresh = [k for k in keys if known is not None and k not in known]  # finished since last look
st.session_state["vf_known"] = set(keys)
if fresh or st.session_state.get("vf_result") not in choices:
    st.session_state["vf_result"] = fresh[0] if fresh else keys[0]  # newest first
shown = st.selectbox("Run", keys, format_func=choices.__getitem__, key="vf_result")
files = run_files(str(shown), run_signature(Path(str(shown))))
if files is None:
    st.error(f"The run files in {md_text(shown)} cannot be read.")
    st.stop()
meta, summary = files["meta"], files["meta"].get("summary") or {}
run_id = str(meta.get("run_id"))
if meta.get("simulated"):
    st.warning("Simulated endpoint: these numbers test the loop, not real hardware.", icon="🧪")
ok, failed = int(summary.get("completed") or 0), int(summary.get("failed") or 0)
stopped = f" Stopped: {md_text(meta['error'])}" if meta.get("error") else ""
shown_id = run_id.replace("`", "'")  # in a code span every other character shows as it is
st.markdown(  # what run.json says (an endpoint's error text among it) is shown as text
    f"Run `{shown_id}` against "
    f"{md_text((meta.get('endpoint') or {}).get('base_url'))}: "
    f"**{md_text(meta.get('status'))}**, {ok} requests succeeded, {failed} failed.{stopped}"
)
if failed:
    st.warning(
        f"{failed} of {ok + failed} requests failed; the measurement below uses the {ok} that "
        "succeeded (vLLM bench serve definitions)."
    )
    failures = pd.DataFrame(failure_counts(files["requests"]), columns=["error", "requests"])
    st.dataframe(failures, hide_index=True, key="table_failures")
user = [r for r in measured_results(ref, store) if r.origin == "user"]
fitted_on = fit_results(ref, store)  # what the model refits on (simulated runs when asked)
run_scenario = scenario_of_run(meta)
old_model = None
with planner_errors("No prediction for this run"):
    if run_scenario is not None:
        old_model = get_performance_model(ref.catalog, without_run(fitted_on, run_id))
        comparisons = compare(prediction_of_run(old_model, meta), summary)
        st.dataframe(
            pd.DataFrame(comparison_rows(comparisons)),
            hide_index=True,
            key="table_verify",
            column_config={"predicted": NUMBER, "measured": NUMBER, "error %": PERCENT},
        )
        st.plotly_chart(measured_vs_predicted_figure(comparisons), key="chart_verify")
st.page_link("pages/benchmarks.py", label="The run is listed on the Benchmarks page", icon="📋")


# ----- recalibration -----------------------------------------------------------------------------
def _recalibration() -> None:
    assert files is not None
    measured = files["measured"]
    if measured is None:
        st.info(
            "This run is kept and listed, but the model does not refit on it: "
            f"{md_text(files['problem'])}."
        )
        return
    if run_id not in {r.run_id for r in measured_results(ref, store) if r.origin == "user"}:
        st.caption("Adding the run to the store…")
        return
    contradiction = measurement_problem(measured)
    if contradiction is not None:  # the fit leaves such a row out (PerformanceModel.excluded)
        st.info(
            "This run is kept and listed, but the model does not refit on it: its figures "
            f"contradict each other ({md_text(contradiction)})."
        )
        return
    if measured.simulated and not fit_simulated():
        st.info(
            "This run is kept and listed, but the model does not refit on it: it ran against "
            "the simulated endpoint, timed by the performance model itself. Switch on "
            "'Simulated runs refit the model' above to let it."
        )
        return
    with st.spinner("Refitting the performance model with this run…"):
        new_model, _ = performance_model(ref, store, scenario)
        moves = moves_for_result(old_model or new_model, new_model, measured)
    st.dataframe(
        pd.DataFrame(move_rows(moves)),
        hide_index=True,
        key="table_moves",
        column_config={
            "before": NUMBER,
            "after": NUMBER,
            "measured": NUMBER,
            "change %": PERCENT,
            "error before %": PERCENT,
            "error after %": PERCENT,
        },
    )
    st.plotly_chart(moves_figure(moves), key="chart_moves")
    st.caption("The Plan page ranks with the refitted model from now on.")
    if st.session_state.pop("vf_waiting", None) == run_id:
        st.rerun(scope="app")  # stop polling


st.subheader("Recalibration")
ingested = files["measured"] is None or run_id in {r.run_id for r in user}
if not ingested:
    st.session_state["vf_waiting"] = run_id
st.fragment(_recalibration, run_every=None if ingested else 1.0)()
