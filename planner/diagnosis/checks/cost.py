"""Mistakes 7 and 10: a bigger model or precision than the task needs, and GPU-hour accounting.

**Accounting**. A GPU paid by the hour costs per token in inverse proportion to how busy it
is: at 20% load a token costs 5x. The idle share is the share of the run's window with no
request in flight (from the requests; from ``vllm:num_requests_running`` and
``..._waiting`` both 0 on a live scrape). Evidence: $/M output tokens at the observed
throughput (``planner.cost``: $/hour / (tokens/s x 3600) x 1e6), the same if the GPUs were
busy all the time, the hourly cost of the idle share, and the plan's cold start (weight bytes
/ :data:`NVME_GB_S` from local NVMe, / :data:`NETWORK_GB_S` over the network: our assumptions,
to be replaced by your own disk and network). Found when the idle share is at least
:data:`IDLE_SHARE` (high from 50%). Money at stake: $/hour x idle share.

**Model size and precision**. A run measures speed, not answer quality, so whether a smaller
model or FP8 weights would do cannot be judged from it. When the plan serves 16-bit weights
on a GPU with FP8 tensor cores the check shows the FP8 what-if (vLLM lists FP8 W8A8 on Ada,
Hopper and AMD GPUs, not A100), to try against your own eval set.
"""

from __future__ import annotations

import numpy as np

from planner.cost import cold_start_s, usd_per_million_tokens
from planner.diagnosis.checks.base import cannot_judge, chart, finding, series
from planner.diagnosis.evidence import RunEvidence, TimeSeries
from planner.diagnosis.findings import Evidence, Finding, Fix, FlagChange
from planner.diagnosis.whatif import DiagnosisContext, with_what_if

IDLE_SHARE = 0.25
NVME_GB_S = 2.0
NETWORK_GB_S = 1.25  # 10 Gbit/s


def _idle(ev: RunEvidence) -> tuple[float | None, TimeSeries | None]:
    req = ev.requests
    if req is not None and req.succeeded:
        lo, hi = req.window_s
        if hi > lo:
            times = np.linspace(lo, hi, 2000)
            inflight = req.in_flight(times).astype(float)
            return float((inflight == 0).mean()), TimeSeries(times, inflight)
    m = ev.metrics
    if m is not None:
        running = m.get("vllm:num_requests_running")
        waiting = m.get("vllm:num_requests_waiting")
        if running is not None and len(running):
            busy = running.value.copy()
            if waiting is not None and len(waiting) == len(running):
                busy = busy + waiting.value
            return float((busy == 0).mean()), running
    return None, None


def check_accounting(ev: RunEvidence, ctx: DiagnosisContext) -> Finding:
    key = "accounting"
    idle, inflight = _idle(ev)
    if idle is None:
        return cannot_judge(
            key,
            "The run shows neither requests in flight nor the server's running requests.",
            ["per-request times or vllm:num_requests_running"],
        )
    price = ctx.price.usd_per_hour if ctx.price is not None else None
    out = ev.summary.get("output_throughput")
    if out is None and ev.metrics is not None and ev.duration_s:
        generated = ev.metrics.delta("vllm:generation_tokens_total")
        out = generated / ev.duration_s if generated else None
    per_m = per_m_busy = None
    if price and out:
        per_m = usd_per_million_tokens(price, float(out))
        per_m_busy = per_m * max(1e-9, 1.0 - idle) if idle < 1 else None
    cold_nvme = cold_net = None
    if ctx.scenario is not None and ctx.model is not None:
        dep = ctx.model.deployment(ctx.scenario)
        weights = dep.weights_bytes_per_gpu * ctx.scenario.tp * ctx.scenario.pp
        cold_nvme = cold_start_s(weights, NVME_GB_S)
        cold_net = cold_start_s(weights, NETWORK_GB_S)
    evidence = [
        Evidence(name="idle share of the run", value=idle, limit=IDLE_SHARE),
        Evidence(name="deployment price", value=price, unit="$/h", note=_price_note(ctx)),
        Evidence(name="$/M output tokens at the observed load", value=per_m, unit="$"),
        Evidence(name="$/M output tokens if never idle", value=per_m_busy, unit="$"),
        Evidence(
            name="cost of the idle share",
            value=price * idle if price else None,
            unit="$/h",
        ),
        Evidence(
            name="cold start: weights from local NVMe",
            value=cold_nvme,
            unit="s",
            note=f"{NVME_GB_S:g} GB/s (assumed)",
        ),
        Evidence(
            name="cold start: weights over the network",
            value=cold_net,
            unit="s",
            note=f"{NETWORK_GB_S:g} GB/s (assumed)",
        ),
    ]
    plot = chart(
        "Requests in flight over the run (0 = paid for, idle)",
        "seconds into the run",
        "requests in flight",
        [series("requests in flight", inflight, kind="step")],
    )
    if idle < IDLE_SHARE:
        return finding(
            key,
            "clear",
            f"The deployment had work {1 - idle:.0%} of the time.",
            evidence=evidence,
            chart=plot,
        )
    fix = Fix(
        summary="Pay for tokens, not hours: scale replicas with the traffic and report $/M "
        "tokens at measured throughput",
        actions=[
            "report cost per million tokens and per successful request from measured "
            "throughput and the all-in $/GPU-hour",
            "autoscale replicas on queue depth; pool traffic onto fewer, busier replicas",
            "cache weights on local NVMe so scale-up is quick; keep a warm spare for a lost "
            "replica",
        ],
    )
    return finding(
        key,
        "found",
        f"The deployment sat idle {idle:.0%} of the run: every token costs "
        f"{1 / max(1e-9, 1 - idle):.1f}x what it would on a busy GPU.",
        severity="high" if idle >= 0.5 else "medium",
        evidence=evidence,
        chart=plot,
        fix=fix,
        usd_per_hour_at_stake=price * idle if price else None,
    )


def _price_note(ctx: DiagnosisContext) -> str:
    return ctx.price.source if ctx.price is not None else "no price: the plan names no GPU"


def check_model_size(ev: RunEvidence, ctx: DiagnosisContext) -> Finding:
    key = "model_size"
    missing = [
        "answer quality on your own eval set: a run measures speed, not whether a smaller "
        "model or lower precision is good enough"
    ]
    sc = ctx.scenario
    if sc is None or ctx.model is None or ctx.catalog is None:
        return cannot_judge(key, "Quality is not in a run.", missing)
    if sc.precision in ("fp8", "int8", "int4", "fp4"):
        return finding(key, "clear", f"The plan already serves {sc.precision} weights.")
    try:
        gpu = ctx.catalog.gpu(sc.gpu)
    except KeyError:
        return cannot_judge(key, "Quality is not in a run.", missing)
    if not gpu.fp8_dense_tflops:
        return cannot_judge(
            key,
            f"Quality is not in a run; {gpu.gpu_id} has no FP8 tensor cores.",
            missing,
        )
    fix = with_what_if(
        ctx,
        Fix(
            summary="FP8 weights (W8A8): half the bytes read each decode step",
            changes=[
                FlagChange(
                    setting="precision",
                    before=sc.precision,
                    after="fp8",
                    vllm="--quantization fp8",
                    sglang="--quantization fp8",
                )
            ],
            scenario_changes={"precision": "fp8"},
            actions=[
                "evaluate an FP8 checkpoint (or --quantization fp8) on your own test set",
                "route easy requests (classification, extraction) to a smaller model",
            ],
        ),
    )
    return cannot_judge(
        key,
        "Whether a smaller model or FP8 weights are good enough is a question of quality, "
        "which a run does not measure; the what-if shows what FP8 would buy.",
        missing,
        fix=fix,
    )
