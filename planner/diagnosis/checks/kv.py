"""Mistake 3: a KV cache sized for the weights, not for the traffic.

Read from the server's metrics (vLLM's optimisation guide names the signs): preemptions
(``vllm:num_preemptions_total`` increase over the run > 0), KV usage at its peak
(``vllm:kv_cache_usage_perc`` >= :data:`KV_FULL`), and requests waiting while the cache is
full (mean ``vllm:num_requests_waiting`` over the scrapes where usage >= :data:`KV_BUSY`).

Found when the run preempted, or when the cache was full with requests waiting. Severity high
when preemptions reach :data:`MANY_PREEMPTIONS_SHARE` of the requests (at least 5).

Fixes, each predicted by the performance model on the same deployment and load: raise
``gpu_memory_utilization`` (to 0.9, or 0.95 from 0.9), an FP8 KV cache (half the bytes a token;
check quality), ``max_num_seqs`` down to what the cache holds at the run's mean context, twice
the tensor parallelism (each GPU holds half the weights). The one that frees the most money is
the fix; the others are alternatives. Money at stake: :func:`~planner.diagnosis.whatif.
saved_usd_per_hour` of the fix.
"""

from __future__ import annotations

import math

import numpy as np

from planner.diagnosis.checks.base import (
    best_fix,
    cannot_judge,
    chart,
    finding,
    flag_gpu_memory_utilization,
    flag_kv_cache_dtype,
    flag_layout,
    flag_max_num_seqs,
    money,
    series,
)
from planner.diagnosis.evidence import KV_USAGE, RunEvidence, TimeSeries
from planner.diagnosis.findings import Evidence, Finding, Fix, Severity
from planner.diagnosis.whatif import DiagnosisContext, with_what_if

KEY = "kv_sizing"
KV_FULL = 0.95
KV_BUSY = 0.90
MANY_PREEMPTIONS_SHARE = 0.02


def reported_capacity_tokens(ev: RunEvidence) -> int | None:
    """KV pool size the server reported (``num_gpu_blocks x block_size``), if it did."""
    direct = ev.flag("kv_cache_size_tokens", "kv_capacity_tokens")
    if direct and direct.replace(".", "", 1).isdigit():
        return int(float(direct))
    blocks, block = ev.flag("num_gpu_blocks"), ev.flag("block_size")
    if blocks and block and blocks.isdigit() and block.isdigit():
        return int(blocks) * int(block)
    return None


def check(ev: RunEvidence, ctx: DiagnosisContext) -> Finding:
    m = ev.metrics
    if m is None or not (m.has("vllm:num_preemptions_total") or m.has(*KV_USAGE)):
        return cannot_judge(
            KEY,
            "No server metrics: preemptions and KV usage are only visible on the server.",
            [
                "server metrics over the run (vllm:num_preemptions_total, "
                "vllm:kv_cache_usage_perc, vllm:num_requests_waiting)"
                + (f"; a {ev.source} has none" if ev.tool in ("vllm", "guidellm") else "")
            ],
        )
    preemptions = m.delta("vllm:num_preemptions_total")
    kv = m.get(*KV_USAGE)
    kv_peak = m.maximum(*KV_USAGE)
    waiting = m.get("vllm:num_requests_waiting")
    waiting_while_full = None
    full_share = None
    if kv is not None and len(kv):
        full_share = float((kv.value >= KV_FULL).mean())
        if waiting is not None and len(waiting):
            w_at = np.interp(kv.t_s, waiting.t_s, waiting.value)
            busy = kv.value >= KV_BUSY
            waiting_while_full = float(w_at[busy].mean()) if busy.any() else 0.0
    requests = ev.requests.count if ev.requests is not None else None
    capacity = reported_capacity_tokens(ev)
    evidence = [
        Evidence(name="preemptions during the run", value=preemptions, limit=0),
        Evidence(name="KV cache usage at peak", value=kv_peak, limit=KV_FULL),
        Evidence(name="share of scrapes with the KV cache full", value=full_share),
        Evidence(
            name="requests waiting while the KV cache was full (mean)",
            value=waiting_while_full,
        ),
        Evidence(name="KV cache size the server reported", value=capacity, unit="tokens"),
    ]
    plot = chart(
        "KV cache usage, waiting requests and preemptions over the run",
        "seconds into the run",
        "KV cache usage (0-1)",
        [
            series("KV cache usage", kv),
            series("requests waiting", waiting, axis="y2"),
            series(
                "preemptions (cumulative)",
                _cumulative(m.get("vllm:num_preemptions_total")),
                axis="y2",
                kind="step",
            ),
        ],
        y2_label="requests / preemptions",
        thresholds=[("full", KV_FULL)],
    )
    preempted = bool(preemptions and preemptions > 0)
    full_and_waiting = bool(
        kv_peak is not None and kv_peak >= KV_FULL and (waiting_while_full or 0) > 0.5
    )
    if not preempted and not full_and_waiting:
        peak = "n/a" if kv_peak is None else f"{kv_peak:.2f}"
        return finding(
            KEY,
            "clear",
            f"No preemptions; the KV cache peaked at {peak} of its size.",
            evidence=evidence,
            chart=plot,
        )
    many = max(5.0, MANY_PREEMPTIONS_SHARE * (requests or 0))
    severity: Severity = "high" if (preemptions or 0) >= many else "medium"
    fixes = [with_what_if(ctx, f) for f in _fixes(ev, ctx, capacity)]
    fix, alternatives = best_fix(ctx, fixes)
    notes = []
    predicted = ctx.predict(ctx.scenario) if ctx.scenario is not None else None
    if capacity and predicted and abs(predicted.kv_capacity_tokens - capacity) > 0.2 * capacity:
        notes.append(
            f"the server reported {capacity:,} KV tokens where the plan gives "
            f"{predicted.kv_capacity_tokens:,}: the what-ifs use the plan's memory arithmetic"
        )
    if predicted and not predicted.preemptions and predicted.kv_occupancy_max < KV_FULL:
        notes.append(
            "the performance model sees no KV pressure at this load with the plan's memory "
            f"settings (peak {predicted.kv_occupancy_max:.2f}): the server had less KV cache "
            "than the plan gives; check its gpu_memory_utilization, max_model_len and what "
            "else shares the GPU, and read the what-ifs with that in mind"
        )
    what = f"{preemptions:.0f} preemptions" if preempted else "no preemptions"
    return finding(
        KEY,
        "found",
        f"{what}; the KV cache peaked at {kv_peak or 0:.2f} with requests waiting: the cache "
        "is too small for this traffic.",
        severity=severity,
        evidence=evidence,
        chart=plot,
        fix=fix,
        alternatives=alternatives,
        usd_per_hour_at_stake=money(ctx, fix),
        notes=notes,
    )


def _cumulative(s: TimeSeries | None) -> TimeSeries | None:
    if s is None or len(s) == 0:
        return None
    return TimeSeries(s.t_s, s.value - s.value[0])


def _fixes(ev: RunEvidence, ctx: DiagnosisContext, capacity: int | None) -> list[Fix]:
    sc = ctx.scenario
    engine = sc.engine_config() if sc is not None else None
    gmu = (
        engine.gpu_memory_utilization
        if engine is not None
        else _float(ev.flag("gpu_memory_utilization"))
    )
    fixes = []
    target = 0.9 if gmu is None or gmu < 0.9 else 0.95
    if gmu is None or gmu < 0.95:
        fixes.append(
            Fix(
                summary=f"Raise gpu_memory_utilization to {target:g}: more of each GPU for KV",
                changes=[flag_gpu_memory_utilization(gmu, target)],
                scenario_changes={"gpu_memory_utilization": target},
            )
        )
    dtype = engine.kv_cache_dtype if engine is not None else (ev.flag("cache_dtype") or "auto")
    if not str(dtype).startswith("fp8"):
        fixes.append(
            Fix(
                summary="FP8 KV cache: half the bytes per token, about twice the tokens",
                changes=[flag_kv_cache_dtype(str(dtype), "fp8")],
                scenario_changes={"kv_cache_dtype": "fp8"},
                actions=["check answer quality with an FP8 KV cache on your own eval set"],
            )
        )
    seqs = _fitting_seqs(ev, ctx, capacity)
    if seqs is not None:
        current = (
            ctx.model.deployment(sc).max_num_seqs
            if sc is not None and ctx.model is not None
            else None
        )
        fixes.append(
            Fix(
                summary=f"Lower max_num_seqs to {seqs}: no more requests than the cache holds",
                changes=[flag_max_num_seqs(current, seqs)],
                scenario_changes={"max_num_seqs": seqs},
            )
        )
    if sc is not None:
        fixes.append(
            Fix(
                summary=f"Tensor parallelism {sc.tp} -> {sc.tp * 2}: half the weights per GPU, "
                "the rest for KV",
                changes=flag_layout((sc.tp, sc.pp), sc.tp * 2, sc.pp),
                scenario_changes={"tp": sc.tp * 2},
            )
        )
    return fixes


def _fitting_seqs(ev: RunEvidence, ctx: DiagnosisContext, capacity: int | None) -> int | None:
    """Requests the cache holds at the run's mean context (prompt + output), rounded down."""
    req = ev.requests
    if req is None or not req.succeeded:
        return None
    context = float(np.nanmean(req.prompt_tokens[req.ok] + req.output_tokens[req.ok]))
    if capacity is None and ctx.scenario is not None:
        predicted = ctx.predict(ctx.scenario)
        capacity = predicted.kv_capacity_tokens if predicted else None
    if not capacity or not math.isfinite(context) or context <= 0:
        return None
    fits = int(capacity // context)
    return max(1, fits - fits % 8 if fits >= 16 else fits)


def _float(text: str | None) -> float | None:
    try:
        return None if text is None else float(text)
    except ValueError:
        return None
