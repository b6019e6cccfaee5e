"""Speculative decoding where it loses, or missing where it would meet the TPOT SLO.

A speculating run (the plan's ``spec_method``) is predicted twice at its own load and its own
measured acceptance (the runner's ``server_spec_accept_len``: vLLM's ``1 + accepted / drafts``
from ``/metrics``, or the plan's stated figure): as it ran and without speculation. When the
prediction without it is faster per token by :data:`LOSS_MARGIN` or more (the batch makes the
k + 1 verified tokens compute-bound, or the acceptance is too low to pay for the draft), the
finding says so and the fix is to drop the speculative flags, with the what-if.

A run without speculation whose p99 TPOT broke its SLO (the plan's ``slo_tpot_p99_ms``, or
the run's ``--goodput tpot:MS``) is predicted with each method the model and engine run
(:func:`planner.perf.speculative.unsupported_reason`) at the method's published acceptance;
the first that meets the SLO is the fix (the engine's flag and the what-if). Severity: high
when the loss or the SLO miss is over 20%.
"""

from __future__ import annotations

import json
from typing import Any

from planner.diagnosis.checks.base import cannot_judge, finding, percentile
from planner.diagnosis.evidence import RunEvidence
from planner.diagnosis.findings import Evidence, Finding, Fix, FlagChange
from planner.diagnosis.whatif import DiagnosisContext, apply_fix, saved_usd_per_hour, with_what_if
from planner.perf.speculative import METHOD_LABELS, auto_methods, unsupported_reason

KEY = "speculation"
#: a speculative run loses when its prediction without speculation is this much faster a token
LOSS_MARGIN = 0.03
HIGH = 0.2
_OFF = {"spec_method": "none", "num_spec_tokens": None, "spec_accept_len": None}


def _flag(method: str, k: int | None, before: str) -> FlagChange:
    if method == "none":
        return FlagChange(
            setting="spec_method",
            before=before,
            after="none",
            vllm="(drop --speculative-config)",
            sglang="(drop --speculative-algorithm and the --speculative-* flags)",
        )
    config: dict[str, Any] = {"method": method, "num_speculative_tokens": k or 3}
    algorithm = {"mtp": "NEXTN", "eagle3": "EAGLE3", "ngram": "NGRAM"}[method]
    return FlagChange(
        setting="spec_method",
        before=before,
        after=method,
        vllm=f"--speculative-config '{json.dumps(config, separators=(',', ':'))}'",
        sglang=f"--speculative-algorithm {algorithm}",
    )


def _tpot_slo_ms(ev: RunEvidence) -> float | None:
    plan_slo = (ev.plan or {}).get("slo_tpot_p99_ms")
    goodput = (ev.config.get("goodput_slos_ms") or {}).get("tpot")
    for value in (plan_slo, goodput):
        try:
            if value is not None and float(value) > 0:
                return float(value)
        except (TypeError, ValueError):
            continue
    return None


def check(ev: RunEvidence, ctx: DiagnosisContext) -> Finding:
    sc = ctx.scenario
    if sc is None or ctx.model is None or ctx.catalog is None:
        return cannot_judge(
            KEY,
            "Speculation cannot be weighed without the run's plan.",
            [ctx.scenario_problem or "a performance model"],
        )
    method = sc.spec_method or "none"
    if method != "none":
        return _speculating(ev, ctx, method)
    return _not_speculating(ev, ctx)


def _speculating(ev: RunEvidence, ctx: DiagnosisContext, method: str) -> Finding:
    sc = ctx.scenario
    assert sc is not None
    with_spec = ctx.predict(sc)
    without = ctx.predict(apply_fix(sc, _OFF))
    if with_spec is None or without is None:
        return cannot_judge(KEY, "The run's plan cannot be predicted.", ["a predictable plan"])
    accepted = with_spec.spec_accept_len or 1.0
    measured = ev.summary.get("server_spec_accept_len")
    evidence = [
        Evidence(
            name="mean accepted tokens a step",
            value=accepted,
            note="measured by the server" if measured else "the plan's (not measured)",
        ),
        Evidence(name="predicted p50 TPOT as run", value=with_spec.tpot_ms_p50, unit="ms"),
        Evidence(
            name="predicted p50 TPOT without speculation", value=without.tpot_ms_p50, unit="ms"
        ),
    ]
    label = f"{METHOD_LABELS[method]} k={sc.num_spec_tokens or 'default'}"
    loss = with_spec.tpot_ms_p50 / without.tpot_ms_p50 - 1.0
    if loss < LOSS_MARGIN:
        return finding(
            KEY,
            "clear",
            f"{label} pays at this load: {accepted:.2f} tokens accepted a step, p50 TPOT "
            f"{with_spec.tpot_ms_p50:,.2f} ms against {without.tpot_ms_p50:,.2f} ms without.",
            evidence=evidence,
        )
    fix = with_what_if(
        ctx,
        Fix(
            summary=f"Turn {label} off: at this batch and acceptance it costs time",
            changes=[_flag("none", None, method)],
            scenario_changes=_OFF,
            actions=[
                "or keep it only for low-concurrency traffic (a separate interactive pool)",
            ],
        ),
    )
    return finding(
        KEY,
        "found",
        f"{label} loses here: {accepted:.2f} tokens accepted a step do not pay for verifying "
        f"k + 1 tokens at this batch (p50 TPOT {with_spec.tpot_ms_p50:,.2f} ms, "
        f"{without.tpot_ms_p50:,.2f} ms without: {loss:.0%} slower).",
        severity="high" if loss > HIGH else "medium",
        evidence=evidence,
        fix=fix,
        usd_per_hour_at_stake=saved_usd_per_hour(ctx, fix.what_if),
    )


def _not_speculating(ev: RunEvidence, ctx: DiagnosisContext) -> Finding:
    sc = ctx.scenario
    assert sc is not None and ctx.catalog is not None
    slo = _tpot_slo_ms(ev)
    req = ev.requests
    measured = percentile(req.tpot_s * 1e3, 99) if req is not None and req.succeeded else None
    if slo is None or measured is None:
        missing = ["a TPOT SLO (the plan's, or --goodput tpot:MS)"] if slo is None else []
        if measured is None:
            missing.append("per-request TPOT")
        return cannot_judge(KEY, "No TPOT SLO to weigh speculation against.", missing)
    evidence = [
        Evidence(name="measured p99 TPOT", value=measured, unit="ms", limit=slo),
    ]
    if measured <= slo:
        return finding(
            KEY,
            "clear",
            f"p99 TPOT {measured:,.1f} ms meets its {slo:,.0f} ms SLO without speculation.",
            evidence=evidence,
        )
    card = ctx.catalog.model(sc.model)
    tried: list[str] = []
    # what the search's auto tries: MTP, EAGLE-3, and n-gram for a model with neither
    for method in auto_methods(card, sc.engine_family):
        reason = unsupported_reason(
            card, sc.engine_family, method, sc.pp, sc.data_parallel_size or 1
        )
        if reason is not None:
            tried.append(reason)
            continue
        candidate = ctx.predict(apply_fix(sc, {"spec_method": method}))
        if candidate is None:
            continue
        evidence.append(
            Evidence(
                name=f"predicted p99 TPOT with {METHOD_LABELS[method]}",
                value=candidate.tpot_ms_p99,
                unit="ms",
                limit=slo,
                note=f"{candidate.spec_accept_len or 1:.2f} tokens accepted a step (published)",
            )
        )
        if candidate.tpot_ms_p99 <= slo:
            fix = with_what_if(
                ctx,
                Fix(
                    summary=f"Turn on {METHOD_LABELS[method]} speculative decoding",
                    changes=[_flag(method, None, "none")],
                    scenario_changes={"spec_method": method},
                    actions=[
                        "measure the acceptance on your own traffic: the prediction uses the "
                        "published figure, and the runner reports the server's"
                    ],
                ),
            )
            miss = measured / slo - 1.0
            return finding(
                KEY,
                "found",
                f"p99 TPOT {measured:,.1f} ms misses its {slo:,.0f} ms SLO; "
                f"{METHOD_LABELS[method]} is predicted to meet it "
                f"({candidate.tpot_ms_p99:,.1f} ms).",
                severity="high" if miss > HIGH else "medium",
                evidence=evidence,
                fix=fix,
                usd_per_hour_at_stake=0.0,
            )
    return finding(
        KEY,
        "clear",
        f"p99 TPOT {measured:,.1f} ms misses its {slo:,.0f} ms SLO, and no speculative method "
        "this model and engine run is predicted to meet it"
        + (f" ({'; '.join(tried)})." if tried else "."),
        evidence=evidence,
    )
