"""Mistake 9: the host starving the GPU (gaps in the GPU timeline).

At small batch a decode step is a few milliseconds of GPU work and hundreds of kernel
launches; when the CPU issues them one by one (eager mode, no CUDA graphs) or is busy
elsewhere (a slow tokenizer or API layer, a power-saving governor, the wrong NUMA node) the
GPU waits between kernels. From a run this shows as a TPOT above the GPU time the performance
model predicts for the same batch: found when the measured median TPOT is at least
:data:`HOST_RATIO` times the prediction (CUDA graphs on). When the model's eager-mode
prediction (``enforce_eager``: a launch cost per layer and step) explains the measurement
(within :data:`EAGER_MATCH`), the server runs eager: the fix is to drop ``--enforce-eager``
and the what-if predicts it. The runner's own self-check ``client_cpu_saturation`` (the
benchmark client was the bottleneck) is reported here too: then the fix is more client
processes, and the run's latencies overstate the server's.

Money at stake: the deployment's $/hour x (1 - predicted / measured TPOT), the share of
decode time the GPU spends waiting on the host. Severity high from 1.6x.
"""

from __future__ import annotations

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
HOST_RATIO = 1.25
EAGER_MATCH = 0.15


def _measured_tpot_ms(ev: RunEvidence) -> tuple[float | None, str]:
    """The median time per token between chunks: a host cost raises every gap, while a stall
    (a long prefill, a preemption) raises a few and leaves the median alone."""
    req = ev.requests
    if req is not None and ev.has_itl:
        value = percentile(req.token_gap_s * 1e3, 50)
        if value is not None:
            return value, "median time per token between chunks"
    if req is not None and req.succeeded:
        value = percentile(req.tpot_s * 1e3, 50)
        if value is not None:
            return value, "median TPOT of the requests"
    if ev.metrics is not None:
        mean = ev.metrics.histogram_mean("vllm:inter_token_latency_seconds")
        if mean is not None:
            return mean * 1e3, "mean inter-token latency (vllm:inter_token_latency_seconds)"
    return None, ""


def check(ev: RunEvidence, ctx: DiagnosisContext) -> Finding:
    client = ev.self_check("client_cpu_saturation") or {}
    client_saturated = client.get("ok") is False
    measured, where = _measured_tpot_ms(ev)
    client_fix = Fix(
        summary="Drive the load from more client processes or machines",
        actions=[
            "the runner's own check says the client saturated: its latencies and throughput "
            "understate the server; split the load over several client processes"
        ],
    )
    sc = ctx.scenario
    if measured is None or sc is None or ctx.model is None:
        missing = []
        if measured is None:
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
    predicted = graphs.itl_ms_p50
    ratio = measured / predicted if predicted > 0 else None
    eager_ms = eager.itl_ms_p50 if eager is not None else None
    evidence = [
        Evidence(name=where, value=measured, unit="ms"),
        Evidence(name="predicted per-token time, CUDA graphs", value=predicted, unit="ms"),
        Evidence(name="predicted per-token time, eager mode", value=eager_ms, unit="ms"),
        Evidence(name="measured / predicted", value=ratio, limit=HOST_RATIO),
    ]
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
            f"TPOT {measured:,.2f} ms is the GPU time the plan predicts ({predicted:,.2f} ms).",
            evidence=evidence,
            chart=plot,
        )
    fixes: list[Fix] = []
    stated = (ev.plan or {}).get("enforce_eager")
    explains = eager_ms is not None and abs(measured - eager_ms) <= EAGER_MATCH * eager_ms
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
            f"TPOT {measured:,.2f} ms against {predicted:,.2f} ms of predicted GPU time: "
            f"{ratio:.2f}x{mode}; the GPU waits on the host."
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
