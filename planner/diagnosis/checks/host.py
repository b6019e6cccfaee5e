"""Mistake 9: the host starving the GPU (gaps in the GPU timeline).

At small batch a decode step is a few milliseconds of GPU work and hundreds of kernel
launches; when the CPU issues them one by one (eager mode, no CUDA graphs) or is busy
elsewhere (a slow tokenizer or API layer, a power-saving governor, the wrong NUMA node) the
GPU waits between kernels. From a run this shows as a time per token above the GPU time the
performance model predicts for the same deployment and load: found when both the median time
per token between chunks (a stall raises a few gaps, a host cost every one) and the median
TPOT are at least :data:`HOST_RATIO` times their predictions with CUDA graphs on (one of the
two alone is a stall, or the timing model's own mix of prefill and decode steps). When the
model's eager-mode prediction (``enforce_eager``: a launch cost per layer and step) explains
both (within :data:`EAGER_MATCH`), the server runs eager: the fix is to drop
``--enforce-eager`` and the what-if predicts it. The runner's own self-check
``client_cpu_saturation`` (the benchmark client was the bottleneck, at
:data:`CLIENT_CPU_SATURATED` of a core) is reported here too: then the fix is more client
processes, and the run's latencies overstate the server's.

The gaps between chunks are the client's readings: when its event loop runs late (its
self-check reports the lag, p99) by more than the predicted time per token, it reads the
chunks that queued meanwhile in one burst, and their gaps shrink to nothing while the request's
TPOT (its first and last chunk) stays what the server did. Measured on two busy cores (the
eager-mode pathology, the client at nice 19): a loop lag p99 of 600 ms read a median gap of
7.83 ms against a TPOT of 11.86 ms (eager mode predicts 11.27 / 11.78 ms). Such a run is judged
on its TPOT alone, and the evidence says why.

Money at stake: the deployment's $/hour x (1 - predicted / measured TPOT), the share of
decode time the GPU spends waiting on the host. Severity high from 1.6x.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from planner.diagnosis.checks.base import (
    cannot_judge,
    chart,
    finding,
    flag_enforce_eager,
    percentile,
)
from planner.diagnosis.evidence import RunEvidence
from planner.diagnosis.findings import Evidence, Finding, Fix, Series, Severity
from planner.diagnosis.whatif import DiagnosisContext, apply_fix, with_what_if

KEY = "host_overhead"
HOST_RATIO = 1.2
EAGER_MATCH = 0.15
#: the runner's own threshold: a client process at 90% of a core is the bottleneck (a client
#: whose event loop ran late while it used little CPU was starved by other processes: that
#: is noted, not a finding about the deployment)
CLIENT_CPU_SATURATED = 0.90


def _client_lag_ms(check: dict[str, object]) -> float | None:
    """The client's event-loop lag p99 from its self-check ("event-loop lag p99 21.1 ms")."""
    found = re.search(r"event-loop lag p99 (\d+(?:\.\d+)?) ms", str(check.get("message") or ""))
    return float(found.group(1)) if found else None


def _client_cpu(check: dict[str, object]) -> float:
    """The client's CPU share from the runner's self-check message ("client CPU 97% ...")."""
    found = re.search(r"client CPU (\d+(?:\.\d+)?)%", str(check.get("message") or ""))
    return float(found.group(1)) / 100.0 if found else 0.0


@dataclass(frozen=True)
class _Measured:
    """The run's time per token two ways: the median gap between chunks (per token; a stall
    raises a few gaps, a host cost every one) and the median TPOT (per request)."""

    itl_ms: float | None
    tpot_ms: float | None


def _measured(ev: RunEvidence) -> _Measured:
    req = ev.requests
    itl = tpot = None
    if req is not None and ev.has_itl:
        itl = percentile(req.token_gap_s * 1e3, 50)
    if req is not None and req.succeeded:
        tpot = percentile(req.tpot_s * 1e3, 50)
    if itl is None and tpot is None and ev.metrics is not None:
        mean = ev.metrics.histogram_mean("vllm:inter_token_latency_seconds")
        itl = mean * 1e3 if mean is not None else None
    return _Measured(itl, tpot)


def _ratio(measured: float | None, predicted: float | None) -> float | None:
    if measured is None or not predicted or predicted <= 0:
        return None
    return measured / predicted


def check(ev: RunEvidence, ctx: DiagnosisContext) -> Finding:
    client = ev.self_check("client_cpu_saturation") or {}
    client_saturated = client.get("ok") is False and _client_cpu(client) >= CLIENT_CPU_SATURATED
    seen = _measured(ev)
    client_fix = Fix(
        summary="Drive the load from more client processes or machines",
        actions=[
            "the runner's own check says the client saturated: its latencies and throughput "
            "understate the server; split the load over several client processes"
        ],
    )
    sc = ctx.scenario
    if (seen.itl_ms is None and seen.tpot_ms is None) or sc is None or ctx.model is None:
        missing = []
        if seen.itl_ms is None and seen.tpot_ms is None:
            missing.append("per-request TPOT or the server's inter-token latency histogram")
        if sc is None or ctx.model is None:
            missing.append(ctx.scenario_problem or "a performance model")
        if client_saturated:
            return finding(
                KEY,
                "found",
                "The benchmark client saturated its CPU: the run measured the client.",
                severity="medium",
                evidence=[
                    Evidence(name="client self-check", value=None, note=str(client.get("message")))
                ],
                fix=client_fix,
                usd_per_hour_at_stake=0.0,
            )
        return cannot_judge(
            KEY,
            "TPOT cannot be set against the GPU time the plan predicts.",
            missing,
        )
    graphs = ctx.predict(apply_fix(sc, {"enforce_eager": False}))
    eager = ctx.predict(apply_fix(sc, {"enforce_eager": True}))
    if graphs is None:
        return cannot_judge(KEY, "The plan cannot be predicted.", ["a predictable plan"])
    lag_ms = _client_lag_ms(client)
    gaps_unread = (
        lag_ms is not None
        and seen.itl_ms is not None
        and seen.tpot_ms is not None
        and lag_ms > graphs.itl_ms_p50
    )
    if gaps_unread:  # the client read chunks in bursts: their gaps are its own (see above)
        seen = _Measured(None, seen.tpot_ms)
    ratios = [
        r
        for r in (
            _ratio(seen.itl_ms, graphs.itl_ms_p50),
            _ratio(seen.tpot_ms, graphs.tpot_ms_p50),
        )
        if r is not None
    ]
    # both readings must be slow: one alone is a stall or a timing-model difference
    ratio = min(ratios) if ratios else None
    measured = seen.itl_ms if seen.itl_ms is not None else seen.tpot_ms
    assert measured is not None
    predicted = graphs.itl_ms_p50 if seen.itl_ms is not None else graphs.tpot_ms_p50
    eager_ms = None
    explains = False
    if eager is not None:
        eager_ms = eager.itl_ms_p50 if seen.itl_ms is not None else eager.tpot_ms_p50
        explains = all(
            abs(m - e) <= EAGER_MATCH * e
            for m, e in ((seen.itl_ms, eager.itl_ms_p50), (seen.tpot_ms, eager.tpot_ms_p50))
            if m is not None
        )
    evidence = [
        Evidence(name="median time per token between chunks", value=seen.itl_ms, unit="ms"),
        Evidence(name="median TPOT", value=seen.tpot_ms, unit="ms"),
        Evidence(
            name="predicted, CUDA graphs (ITL p50 / TPOT p50)",
            value=graphs.itl_ms_p50,
            unit="ms",
            note=f"TPOT {graphs.tpot_ms_p50:,.2f} ms",
        ),
        Evidence(
            name="predicted, eager mode (ITL p50 / TPOT p50)",
            value=eager.itl_ms_p50 if eager else None,
            unit="ms",
            note=f"TPOT {eager.tpot_ms_p50:,.2f} ms" if eager else "",
        ),
        Evidence(
            name="measured / predicted (the smaller of the two)", value=ratio, limit=HOST_RATIO
        ),
    ]
    if gaps_unread:
        evidence.append(
            Evidence(
                name="chunk gaps left out",
                value=lag_ms,
                unit="ms",
                note="the client's event loop lagged (p99) more than a token's predicted time: "
                "it read chunks in bursts, so the run is judged on TPOT",
            )
        )
    if client:
        evidence.append(
            Evidence(name="client self-check", value=None, note=str(client.get("message")))
        )
    plot = chart(
        "Time per output token: measured against the GPU time predicted",
        "",
        "ms per output token",
        [
            Series(
                name="TPOT",
                x=["measured", "predicted, CUDA graphs", "predicted, eager"],
                y=[round(measured, 3), round(predicted, 3), round(eager_ms or 0.0, 3)],
                kind="bar",
            )
        ],
    )
    slow = ratio is not None and ratio >= HOST_RATIO
    if not slow and not client_saturated:
        return finding(
            KEY,
            "clear",
            f"Time per token {measured:,.2f} ms is within {HOST_RATIO:g}x of the GPU time the "
            f"plan predicts ({predicted:,.2f} ms).",
            evidence=evidence,
            chart=plot,
        )
    fixes: list[Fix] = []
    stated = (ev.plan or {}).get("enforce_eager")
    if slow and (stated is True or explains):
        fixes.append(
            with_what_if(
                ctx,
                Fix(
                    summary="Run with CUDA graphs: drop --enforce-eager",
                    changes=[flag_enforce_eager(True, False)],
                    scenario_changes={"enforce_eager": False},
                    actions=["check that CUDA graph capture covers the batch sizes served"],
                ),
                observed={"enforce_eager": True},
            )
        )
    elif slow:
        fixes.append(
            Fix(
                summary="Find what keeps the GPU waiting between kernels",
                actions=[
                    "profile with Nsight Systems and look for gaps between kernels",
                    "set the CPU governor to performance and pin the server to the CPUs of "
                    "its GPU's NUMA node",
                    "look for a slow tokenizer or API layer in front of the engine",
                ],
            )
        )
    if client_saturated:
        fixes.append(client_fix)
    price = ctx.price.usd_per_hour if ctx.price is not None else None
    at_stake = price * max(0.0, 1.0 - predicted / measured) if price and slow else None
    severity: Severity = "high" if ratio is not None and ratio >= 1.6 else "medium"
    if slow:
        mode = " (eager mode explains it)" if explains else ""
        headline = (
            f"Time per token {measured:,.2f} ms against {predicted:,.2f} ms of predicted GPU "
            f"time: {ratio:.2f}x{mode}; the GPU waits on the host."
        )
    else:
        headline = "The benchmark client saturated its CPU: the run measured the client."
    return finding(
        KEY,
        "found",
        headline,
        severity=severity,
        evidence=evidence,
        chart=plot,
        fix=fixes[0],
        alternatives=fixes[1:],
        usd_per_hour_at_stake=at_stake if at_stake is not None else 0.0,
    )
