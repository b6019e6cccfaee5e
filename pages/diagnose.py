"""Diagnose: a run or a live endpoint against the ten ways a cluster wastes money.

Pick a run (or watch an endpoint's /metrics), see the quick triage with each question lit or
not, the findings ranked by the money at stake, a chart of each, and the fix: its flags, the
performance model's what-if, and a button that verifies the fixed plan on the Verify page.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pandas as pd
import streamlit as st

from benchmarks_runner.diagnose import watch_endpoint
from benchmarks_runner.errors import BenchmarkError
from pages.charts.diagnosis import finding_figure, what_if_figure
from pages.common.diagnosis import diagnosis_of_run, hand_to_verify, run_choices
from pages.common.export import ExportSection, export_menu
from pages.common.navigation import ensure_app_navigation
from pages.common.planning import performance_model
from pages.common.resources import get_catalog, get_store
from pages.common.resources import settings as app_settings
from pages.common.scenario import current_scenario
from pages.common.ui import md_text, planner_errors
from pages.common.url_params import bound, url_field
from planner.credentials import parse_endpoint_url
from planner.diagnosis import Diagnosis, Finding, diagnose, evidence_from_scrape
from planner.diagnosis.report import evidence_rows, finding_rows, fixed_plan, what_if_text
from planner.errors import PlannerError
from planner.plan import flat_plan
from planner.verification import custom_plan

ensure_app_navigation()
scenario = current_scenario()
ref = get_catalog()
store = get_store(ref)
SEVERITY_ICON = {"high": ":red[●]", "medium": ":orange[●]", "low": ":blue[●]"}

st.title("Diagnose")
st.caption(
    "Read a run, or an endpoint serving its own traffic, against the ten ways a cluster wastes "
    "money: idle GPUs, preemptions, prefill stalls, queues, missed prefix reuse, host overhead, "
    "parallelism against the links, small batches, GPU-hour accounting. Each finding comes with "
    "its evidence, the fix in the engine's own flags and what the performance model predicts "
    "the fix does."
)
export_slot = st.container()

source = bound(
    st.segmented_control,
    "What to diagnose",
    ["Run", "Endpoint"],
    default="Run",
    required=True,
    key="dg_source",
    help="Run: a stored benchmark run or an imported vllm bench / GuideLLM / AIPerf result. "
    "Endpoint: watch a live server's /metrics while it serves its real traffic.",
)
model, model_key = None, "none"
with planner_errors("No performance model"), st.spinner("Fitting the performance model…"):
    model, model_key = performance_model(ref, store, scenario)

plan_override: dict[str, Any] | None = None
with st.expander("Deployment (when the run does not name its plan)"):
    st.caption(
        "The what-if of each fix predicts the deployment the run measured. Runs verified from "
        "this dashboard carry their plan; imported results do not: say which it was here."
    )
    give = bound(st.toggle, "Use this deployment", key="dg_give_plan")
    cols = list(st.columns(4))
    gpus = sorted(ref.catalog.gpus)
    default_gpu = gpus.index("H100-SXM") if "H100-SXM" in gpus else 0
    gpu = bound(cols[0].selectbox, "GPU", gpus, default_gpu, key="dg_gpu")
    tp = bound(cols[1].number_input, "TP", 1, 64, 1, key="dg_tp")
    pp = bound(cols[2].number_input, "PP", 1, 64, 1, key="dg_pp")
    instances = ["", *sorted(i for i, v in ref.catalog.instances.items() if v.gpu_id == gpu)]
    instance = bound(cols[3].selectbox, "Instance", instances, key="dg_instance")
    if give:
        plan = custom_plan(
            scenario.model_id,
            ref.catalog.gpu(str(gpu)),
            tp=int(tp),
            pp=int(pp),
            instance=instance or None,
        )
        plan_override = flat_plan(plan.model_dump(mode="json"))  # as the diagnosis reads plans

diagnosis: Diagnosis | None = None
if source == "Run":
    runs_dir = app_settings().runs_directory
    choices = run_choices(runs_dir)
    if not choices:
        st.info(
            f"No run in {md_text(runs_dir)} yet. Verify a plan, or run "
            "`python -m benchmarks_runner run` or `... import --format vllm|guidellm|aiperf "
            "FILE`: the runs land here."
        )
    else:
        picked = bound(
            st.selectbox, "Run", list(choices), format_func=choices.__getitem__, key="dg_run"
        )
        with planner_errors("This run cannot be diagnosed"), st.spinner("Diagnosing…"):
            diagnosis = diagnosis_of_run(runs_dir / picked, plan_override, model, model_key)
else:
    cols = list(st.columns([4, 1, 1]))
    typed = url_field(cols[0], "Base URL (no /v1)", placeholder="http://host:8000", key="dg_url")
    seconds = bound(cols[1].number_input, "Seconds", 5, 600, 60, key="dg_seconds")
    endpoint = None
    if typed.strip():
        try:  # user:password@ becomes the Authorization header, never part of what is shown
            endpoint = parse_endpoint_url(typed, "Base URL")
        except PlannerError as exc:
            st.warning(md_text(exc))  # it quotes what was typed
    url = endpoint.url if endpoint is not None else ""
    cols[2].markdown("&nbsp;")
    if cols[2].button("Watch", type="primary", disabled=endpoint is None, key="dg_watch"):
        assert endpoint is not None
        try:
            with st.spinner(f"Watching {url}/metrics for {seconds} s…", show_time=True):
                samples, watched = asyncio.run(
                    watch_endpoint(url, float(seconds), basic_auth=endpoint.basic_auth)
                )
            st.session_state["dg_live"] = (url, samples, watched)
        except BenchmarkError as exc:  # what was typed does not answer: a notice
            st.warning(f"Cannot watch {md_text(url)}: {md_text(exc)}")
    live = st.session_state.get("dg_live")
    if live is not None and live[0] == url:
        ev = evidence_from_scrape(live[1], duration_s=live[2], base_url=url, plan=plan_override)
        with planner_errors("The scrape cannot be diagnosed"):
            diagnosis = diagnose(ev, model=model)

if diagnosis is None:
    st.stop()

d = diagnosis
figures: dict[str, Any] = {}
st.header("Quick triage")
# what a run or an endpoint reports (its served model name among it) is shown as text
st.caption(md_text(
    f"{d.source}" + (f" {d.run_id}" if d.run_id else "") + (f": {d.deployment}" if d.deployment
    else "") + (f", ${d.usd_per_hour:,.2f}/h ({d.price_source})" if d.usd_per_hour else "")
))  # fmt: skip
titles = {f.key: f"{f.number}. {f.title}" for f in d.findings}
for branch in d.branches:
    lit = ":red[**●**]" if branch.lit else ":gray[○]"
    answers = []
    for mistake in branch.mistakes:
        verdict = d.finding(mistake).status
        mark = {"found": "**found**", "clear": "clear", "cannot_judge": "cannot judge"}[verdict]
        answers.append(f"{titles[mistake]} ({mark})")
    st.markdown(f"{lit} **{branch.question}** → " + "; ".join(answers), help=None)

summary = d.summary
HEADLINE = (
    ("Requests", "requests", ""),
    ("Output tok/s", "output_throughput", ""),
    ("TTFT p99", "ttft_ms_p99", " ms"),
    ("ITL p99", "itl_ms_p99", " ms"),
)
cols = list(st.columns(len(HEADLINE) + 1))
for col, (label, name, unit) in zip(cols, HEADLINE, strict=False):
    value = summary.get(name)
    col.metric(label, "n/a" if value is None else f"{value:,.0f}{unit}")
cols[-1].metric("Findings", len(d.found))

st.header("Findings, by the money they cost")
if not d.found:
    st.success("No finding: none of the ten mistakes shows in this run.")


def show_finding(rank: int, f: Finding) -> None:
    money = f" · ${f.usd_per_hour_at_stake:,.2f}/h at stake" if f.usd_per_hour_at_stake else ""
    label = f"{rank}. {f.title}: {f.severity}{money}"
    with st.expander(label, expanded=rank == 1, icon=":material/error:"):
        st.markdown(f"{SEVERITY_ICON.get(f.severity or '', '')} {md_text(f.headline)}")
        fig = finding_figure(f.chart, title=f.chart.title if f.chart else f.title)
        figures[f.key] = fig
        st.plotly_chart(fig, key=f"dg_chart_{f.key}")
        st.dataframe(pd.DataFrame(evidence_rows(f)), hide_index=True, key=f"dg_ev_{f.key}")
        for i, fix in enumerate([f.fix, *f.alternatives]):
            if fix is None:
                continue
            st.markdown(("**Fix:** " if i == 0 else "**Or:** ") + md_text(fix.summary))
            if fix.vllm_args:
                st.code(f"vllm serve ... {fix.vllm_args}", language="bash")
            if fix.sglang_args:
                st.code(f"python -m sglang.launch_server ... {fix.sglang_args}", language="bash")
            for action in fix.actions:
                st.markdown(f"- {md_text(action)}")
            if fix.what_if is not None:
                st.caption(
                    f"Predicted, same deployment and load: {md_text(what_if_text(fix.what_if))}"
                )
                if i == 0:  # the alternatives keep to one line each
                    st.plotly_chart(what_if_figure(fix.what_if), key=f"dg_whatif_{f.key}")
            new_plan = fixed_plan(d.plan, fix)
            if new_plan is not None and st.button(
                "Verify this fix", key=f"dg_verify_{f.key}_{i}", icon=":material/fact_check:"
            ):
                hand_to_verify(new_plan)
        for note in f.notes:
            st.caption(md_text(note))


for rank, f in enumerate(d.found, start=1):
    show_finding(rank, f)

unjudged = [f for f in d.findings if f.status == "cannot_judge"]
if unjudged:
    st.header("Cannot judge from this run")
    for f in unjudged:
        missing = md_text("; ".join(f.missing))
        st.markdown(f"**{f.title}**: {md_text(f.headline)} *Missing:* {missing}")
        if f.fix is not None and f.fix.what_if is not None:
            st.caption(md_text(f"Option: {f.fix.summary}: {what_if_text(f.fix.what_if)}"))
clear = [f.title for f in d.findings if f.status == "clear"]
if clear:
    st.caption("Clear: " + "; ".join(clear) + ".")

rows = pd.DataFrame(finding_rows(d))
triage = pd.DataFrame(
    [{"question": b.question, "lit": b.lit, "found": ", ".join(b.found)} for b in d.branches]
)
with export_slot:
    export_menu(
        "Diagnose",
        [
            ExportSection(
                "Run",
                text=f"{d.source} {d.run_id or ''} {d.deployment or ''}",
                table=pd.DataFrame([summary]),
            ),
            ExportSection("Quick triage", table=triage),
            ExportSection("Findings", table=rows),
            *(
                ExportSection(
                    f.title,
                    text=f.headline
                    + (f" Fix: {f.fix.summary} ({f.fix.vllm_args})" if f.fix else ""),
                    table=pd.DataFrame(evidence_rows(f)),
                    figures=[figures[f.key]] if f.key in figures else [],
                )
                for f in d.found
            ),
        ],
        {"Findings": rows},
        subtitle=json.dumps(d.plan) if d.plan else "",
    )
