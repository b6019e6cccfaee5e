"""Diagnose a run (or a live endpoint) against the ten ways a cluster wastes money.

    from planner.diagnosis import diagnose, evidence_from_run
    from planner.run_files import read_run_dir

    ev = evidence_from_run(read_run_dir(Path(run_dir)))
    d = diagnose(ev, model=get_performance_model(catalog))
    for f in d.found:                       # ranked by the money at stake
        print(f.title, f.headline, f.fix.vllm_args, f.what_if)

Pure (no network, no UI): :mod:`~planner.diagnosis.evidence` reads the run's requests and
server metrics, :mod:`~planner.diagnosis.checks` judges each mistake of the triage list,
:mod:`~planner.diagnosis.whatif` predicts the deployment with each fix,
:mod:`~planner.diagnosis.findings` holds the types and the triage tree,
:mod:`~planner.diagnosis.report` turns a diagnosis into text, table rows and the what-if plan.
A check that cannot judge from what the run has says what is missing (an imported
``vllm bench serve`` result has no server metrics, a GuideLLM one no per-chunk times, a live
scrape no requests of its own).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from planner.catalog import Catalog
from planner.diagnosis.checks import CHECKS
from planner.diagnosis.evidence import (
    RunEvidence,
    evidence_from_run,
    evidence_from_scrape,
    metric_table,
    request_table,
)
from planner.diagnosis.findings import (
    BRANCHES,
    MISTAKES,
    Diagnosis,
    Finding,
    Fix,
    WhatIf,
    branch_states,
    rank_key,
)
from planner.diagnosis.whatif import DiagnosisContext, build_context
from planner.errors import PlannerError
from planner.perf.model import PerformanceModel
from planner.plan import plan_label
from planner.run_files import RunFiles

log = logging.getLogger(__name__)


def diagnose(
    ev: RunEvidence,
    *,
    model: PerformanceModel | None = None,
    catalog: Catalog | None = None,
    region: str | None = None,
) -> Diagnosis:
    """Every check against ``ev``; findings ranked (found first, by money at stake)."""
    ctx = build_context(ev, model, catalog, region)
    findings = [_run_check(key, ev, ctx) for key in CHECKS]
    findings.sort(key=rank_key)
    missing: list[str] = []
    for f in findings:
        for item in f.missing:
            if item not in missing:
                missing.append(item)
    return Diagnosis(
        source=ev.source,
        run_id=ev.run_id,
        deployment=f"{ev.plan.get('model')} on {plan_label(ev.plan)}"
        if ev.plan and ev.plan.get("gpu")
        else None,
        duration_s=ev.duration_s,
        usd_per_hour=ctx.price.usd_per_hour if ctx.price else None,
        price_source=ctx.price.source if ctx.price else None,
        summary=run_summary(ev),
        findings=findings,
        branches=branch_states(findings),
        cannot_judge=missing,
        plan=ev.plan,
    )


def diagnose_run(run: RunFiles, **kwargs: Any) -> Diagnosis:
    """:func:`diagnose` of a run directory read with :func:`planner.run_files.read_run_dir`."""
    return diagnose(evidence_from_run(run), **kwargs)


def _run_check(key: str, ev: RunEvidence, ctx: DiagnosisContext) -> Finding:
    from planner.diagnosis.checks.base import cannot_judge

    try:
        return CHECKS[key](ev, ctx)
    except (PlannerError, ValueError, ArithmeticError) as exc:
        # one check tripping over an odd run must not cost the others their verdicts
        log.warning("diagnosis check %s failed on run %s: %s", key, ev.run_id, exc)
        return cannot_judge(key, "This check could not read the run.", [f"{exc}"])


def run_summary(ev: RunEvidence) -> dict[str, float | None]:
    """The run's headline figures (ms, tokens/s), as the report's first table shows them."""
    out: dict[str, float | None] = {"duration_s": ev.duration_s}
    req = ev.requests
    if req is not None and req.count:
        out["requests"] = float(req.count)
        out["failed"] = float(req.count - req.succeeded)
        if req.succeeded:
            out["ttft_ms_p50"] = float(np.percentile(req.ttft_s, 50) * 1e3)
            out["ttft_ms_p99"] = float(np.percentile(req.ttft_s, 99) * 1e3)
            tpot = req.tpot_s
            out["tpot_ms_p50"] = float(np.percentile(tpot, 50) * 1e3) if tpot.size else None
            if req.has_chunk_times:
                out["itl_ms_p50"] = float(np.percentile(req.itl_s, 50) * 1e3)
                out["itl_ms_p99"] = float(np.percentile(req.itl_s, 99) * 1e3)
    for key in ("output_throughput", "total_token_throughput", "request_throughput"):
        value = ev.summary.get(key)
        if value is not None:
            out[key] = float(value)
    m = ev.metrics
    if m is not None and ev.duration_s:
        generated = m.delta("vllm:generation_tokens_total")
        if "output_throughput" not in out and generated:
            out["output_throughput"] = generated / ev.duration_s
        served = m.delta("vllm:request_success_total")
        if "request_throughput" not in out and served:
            out["request_throughput"] = served / ev.duration_s
        for q, name in ((0.5, "ttft_ms_p50"), (0.99, "ttft_ms_p99")):
            if name not in out:
                value = m.histogram_quantile("vllm:time_to_first_token_seconds", q)
                if value is not None:
                    out[name] = value * 1e3
    return out


__all__ = [
    "BRANCHES",
    "MISTAKES",
    "Diagnosis",
    "Finding",
    "Fix",
    "RunEvidence",
    "WhatIf",
    "diagnose",
    "diagnose_run",
    "evidence_from_run",
    "evidence_from_scrape",
    "metric_table",
    "request_table",
]
