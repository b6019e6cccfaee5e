"""Mistakes 5 and 6: long prefills stalling every stream, and a queue hidden behind averages.

**Prefill stalls** (needs per-chunk times). A prompt is *long* when it has at least
:data:`LONG_PROMPT_MIN_TOKENS` tokens and :data:`LONG_PROMPT_FACTOR` times the median prompt.
While a long prompt is being prefilled (its request's start to its first token) every other
stream's next token may wait for it. The check pools the inter-token gaps of all requests that
overlap those windows and compares their p99 with the run's median gap: found when it is at
least :data:`STALL_FACTOR` times the median and :data:`STALL_MIN_MS` above it (with chunked
prefill already on at a budget of at most 2048 tokens, :data:`RESIDUAL_STALL_FACTOR` times: its
own short steps are what is left). When a single
gap carries most of a long prompt's prefill time (median over long prompts >=
:data:`UNCHUNKED_SHARE`), the prompt was prefilled in one step: chunked prefill is off.
Fix: chunked prefill with ``max_num_batched_tokens`` 2048 (vLLM's guide: smaller budgets favour
inter-token latency). Severity high when the stalls reach 10x the median gap or 500 ms.

**Queueing**. The server's queue: ``vllm:num_requests_waiting`` over time,
``vllm:request_queue_time_seconds`` (its mean, and p99 when buckets were scraped), and the
share of TTFT spent in it; the client's side: TTFT p99 against p50, offered against achieved
request rate. Found when requests waited (mean waiting >= 1 with queue time >= 30% of the mean
TTFT, or TTFT p99 >= 3x p50 without a queue-time histogram, or the waiting alone when neither is
known), or the queue grew through the run
(the last third's mean waiting >= 2 and twice the first third's), or a rate run achieved less
than 90% of its offered rate with requests waiting (or, without server metrics, TTFT p99 >= 3x
p50): arrivals outran completions. A queue that forms
while the KV cache is full belongs to mistake 3 and is left to it. Fixes: more replicas (as
many as offered / achieved rate, or in-flight / running requests), or a larger
``max_num_seqs`` when the KV cache has room. Money at stake: the share of requests whose TTFT
missed the budget (the plan's TTFT SLO, else :data:`DEFAULT_TTFT_BUDGET_MS`, our assumption)
x the deployment's $/hour.
"""

from __future__ import annotations

import math

import numpy as np

from planner.diagnosis.checks.base import (
    cannot_judge,
    chart,
    finding,
    flag_chunked_prefill,
    flag_max_num_batched_tokens,
    flag_max_num_seqs,
    flag_replicas,
    percentile,
    points,
    series,
)
from planner.diagnosis.evidence import KV_USAGE, RunEvidence
from planner.diagnosis.findings import Evidence, Finding, Fix, Severity
from planner.diagnosis.whatif import DiagnosisContext, with_what_if

LONG_PROMPT_MIN_TOKENS = 2048
LONG_PROMPT_FACTOR = 4.0
STALL_FACTOR = 4.0
RESIDUAL_STALL_FACTOR = 10.0
STALL_MIN_MS = 20.0
UNCHUNKED_SHARE = 0.5
SMALL_BUDGET = 2048

QUEUE_SHARE = 0.3
TAIL_FACTOR = 3.0
RATE_SHORTFALL = 0.9
DEFAULT_TTFT_BUDGET_MS = 2000.0
KV_BOUND_SHARE = 0.5


# ----- prefill stalls ----------------------------------------------------------------------------
def check_prefill_stalls(ev: RunEvidence, ctx: DiagnosisContext) -> Finding:
    key = "prefill_stalls"
    req = ev.requests
    if req is None or not ev.has_itl:
        why = {
            "guidellm": "GuideLLM keeps no per-chunk times (its ITL is a per-request mean)",
            "live": "/metrics has latency histograms, not which prompt arrived when",
        }.get(ev.tool, "the run kept no per-chunk times")
        return cannot_judge(
            key,
            "Inter-token gaps cannot be tied to long prompts arriving.",
            [f"per-request chunk times and prompt lengths: {why}"],
        )
    itl_ms = req.itl_s * 1e3
    p50 = percentile(itl_ms, 50) or 0.0
    p99 = percentile(itl_ms, 99) or 0.0
    ok = req.ok
    prompts = req.prompt_tokens
    median_prompt = float(np.median(prompts[ok])) if ok.any() else 0.0
    threshold = max(LONG_PROMPT_MIN_TOKENS, LONG_PROMPT_FACTOR * median_prompt)
    long = ok & (prompts >= threshold)
    evidence = [
        Evidence(name="ITL p50 (whole run)", value=p50, unit="ms"),
        Evidence(name="ITL p99 (whole run)", value=p99, unit="ms"),
        Evidence(name="median prompt", value=median_prompt, unit="tokens"),
        Evidence(name="long prompts", value=float(long.sum()), note=f">= {threshold:,.0f} tokens"),
    ]
    if not long.any():
        return finding(
            key,
            "clear",
            f"No long prompts (>= {threshold:,.0f} tokens) in the run: nothing to stall on.",
            evidence=evidence,
        )
    w_start, w_end = req.start_s[long], req.first_s[long]
    during = _overlapping(req.gap_start, req.gap_end, w_start, w_end)
    during_ms = itl_ms[during]
    p99_during = percentile(during_ms, 99) if during_ms.size else None
    unchunked = _unchunked_share(req.gap_start, req.gap_end, w_start, w_end)
    evidence += [
        Evidence(
            name="ITL p99 while long prompts prefill",
            value=p99_during,
            unit="ms",
            limit=max(STALL_FACTOR * p50, p50 + STALL_MIN_MS),
            note=f"{during_ms.size:,} gaps",
        ),
        Evidence(
            name="share of a long prompt's prefill carried by one gap (median)",
            value=unchunked,
            limit=UNCHUNKED_SHARE,
        ),
    ]
    plot = chart(
        "Inter-token gaps and long prompts arriving",
        "seconds into the run",
        "gap between tokens (ms)",
        [
            points("inter-token gaps", req.gap_start, itl_ms, kind="markers"),
            points(
                "long prompt arrives (tokens)",
                w_start,
                prompts[long],
                kind="bar",
                axis="y2",
            ),
        ],
        y2_label="prompt tokens",
        thresholds=[("ITL p50", p50)],
    )
    sc = ctx.scenario
    plan_chunked = sc.engine_config().enable_chunked_prefill if sc is not None else None
    stated = (ev.plan or {}).get("enable_chunked_prefill")
    inferred_off = unchunked is not None and unchunked >= UNCHUNKED_SHARE
    chunked_off = (stated is False) or (stated is None and inferred_off)
    observed = {"enable_chunked_prefill": False} if chunked_off and plan_chunked else {}
    budget = (
        ctx.model.deployment(sc).max_num_batched_tokens
        if sc is not None and ctx.model is not None
        else (ev.plan or {}).get("max_num_batched_tokens")
    )
    # chunked prefill at a small budget already leaves only its own short steps: what is left
    # is a finding only when it is still severe
    factor = (
        RESIDUAL_STALL_FACTOR
        if not chunked_off and budget is not None and budget <= SMALL_BUDGET
        else STALL_FACTOR
    )
    stalled = (
        p99_during is not None
        and during_ms.size >= 5
        and p99_during >= factor * p50
        and p99_during - p50 >= STALL_MIN_MS
    )
    if not stalled:
        return finding(
            key,
            "clear",
            "Long prompts were prefilled without stalling the other streams.",
            evidence=evidence,
            chart=plot,
        )
    assert p99_during is not None
    changes = []
    if chunked_off:
        changes.append(flag_chunked_prefill(False, True))
    if budget is None or budget > SMALL_BUDGET or chunked_off:
        changes.append(flag_max_num_batched_tokens(budget, SMALL_BUDGET))
    fix = Fix(
        summary=(
            "Chunked prefill with a 2048-token step budget: long prompts share steps with "
            "the decodes instead of stopping them"
            if chunked_off
            else "A 2048-token step budget (max_num_batched_tokens): shorter prefill chunks "
            "next to the decodes"
        ),
        changes=changes,
        scenario_changes={"enable_chunked_prefill": True, "max_num_batched_tokens": SMALL_BUDGET},
        actions=["route very long prompts to replicas of their own if they still stall others"],
    )
    fix = with_what_if(ctx, fix, observed=observed)
    severity: Severity = "high" if p99_during >= 10 * p50 or p99_during >= 500 else "medium"
    state = "chunked prefill looks off; " if chunked_off else ""
    return finding(
        key,
        "found",
        f"While {int(long.sum())} long prompts prefilled, the other streams' ITL p99 was "
        f"{p99_during:,.0f} ms against a {p50:,.1f} ms median: {state}every long prompt "
        "stalls the decodes.",
        severity=severity,
        evidence=evidence,
        chart=plot,
        fix=fix,
        usd_per_hour_at_stake=_late_money(ev, ctx, itl_ms_limit=max(4 * p50, p50 + 20)),
    )


def _overlapping(g0: np.ndarray, g1: np.ndarray, w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """Mask of gaps (g0, g1) that overlap any window (w0, w1)."""
    if g0.size == 0 or w0.size == 0:
        return np.zeros(g0.size, dtype=bool)
    order = np.argsort(w0)
    starts, ends = w0[order], w1[order]
    # merge the windows into disjoint intervals
    merged_s, merged_e = [starts[0]], [ends[0]]
    for s, e in zip(starts[1:], ends[1:], strict=True):
        if s <= merged_e[-1]:
            merged_e[-1] = max(merged_e[-1], e)
        else:
            merged_s.append(s)
            merged_e.append(e)
    ms, me = np.asarray(merged_s), np.asarray(merged_e)
    # the last merged interval starting before the gap ends must end after the gap starts
    i = np.searchsorted(ms, g1, side="left") - 1
    hit = i >= 0
    out = np.zeros(g0.size, dtype=bool)
    out[hit] = me[i[hit]] > g0[hit]
    return out


def _unchunked_share(
    g0: np.ndarray, g1: np.ndarray, w0: np.ndarray, w1: np.ndarray
) -> float | None:
    """Median over long prompts of (longest gap inside its prefill window / window length)."""
    shares = []
    for s, e in zip(w0, w1, strict=True):
        length = e - s
        if not length > 0:
            continue
        inside = (g1 > s) & (g0 < e)
        if not inside.any():
            continue
        overlap = np.minimum(g1[inside], e) - np.maximum(g0[inside], s)
        shares.append(float(overlap.max()) / length)
    return float(np.median(shares)) if shares else None


# ----- queueing ----------------------------------------------------------------------------------
def check_queueing(ev: RunEvidence, ctx: DiagnosisContext) -> Finding:
    key = "queueing"
    req = ev.requests
    m = ev.metrics
    ttft_ms = req.ttft_s * 1e3 if req is not None else np.zeros(0)
    p50 = percentile(ttft_ms, 50)
    p99 = percentile(ttft_ms, 99)
    if p50 is None and ev.summary.get("median_ttft_ms") is not None:
        p50, p99 = ev.summary.get("median_ttft_ms"), ev.summary.get("p99_ttft_ms")
    if p50 is None and m is not None:
        p50 = _ms(m.histogram_quantile("vllm:time_to_first_token_seconds", 0.5))
        p99 = _ms(m.histogram_quantile("vllm:time_to_first_token_seconds", 0.99))
    waiting = m.get("vllm:num_requests_waiting") if m is not None else None
    queue_mean = _ms(m.histogram_mean("vllm:request_queue_time_seconds")) if m else None
    queue_p99 = _ms(m.histogram_quantile("vllm:request_queue_time_seconds", 0.99)) if m else None
    ttft_mean = float(np.mean(ttft_ms)) if ttft_ms.size else None
    if ttft_mean is None and m is not None:
        ttft_mean = _ms(m.histogram_mean("vllm:time_to_first_token_seconds"))
    offered, achieved = _rates(ev)
    if p50 is None and waiting is None:
        return cannot_judge(
            key,
            "Neither per-request TTFT nor the server's queue is in the run.",
            ["per-request times or server metrics (vllm:num_requests_waiting)"],
        )
    w_mean = float(waiting.value.mean()) if waiting is not None and len(waiting) else None
    growth = _growth(waiting.value) if waiting is not None and len(waiting) >= 6 else None
    ratio = p99 / p50 if p99 is not None and p50 else None
    share = queue_mean / ttft_mean if queue_mean is not None and ttft_mean else None
    evidence = [
        Evidence(name="TTFT p50", value=p50, unit="ms"),
        Evidence(name="TTFT p99", value=p99, unit="ms"),
        Evidence(name="TTFT p99 / p50", value=ratio, limit=TAIL_FACTOR),
        Evidence(name="requests waiting (mean)", value=w_mean),
        Evidence(
            name="requests waiting (max)",
            value=float(waiting.value.max()) if waiting is not None and len(waiting) else None,
        ),
        Evidence(name="queue time (mean)", value=queue_mean, unit="ms"),
        Evidence(name="queue time p99", value=queue_p99, unit="ms"),
        Evidence(name="share of TTFT spent queueing", value=share, limit=QUEUE_SHARE),
        Evidence(name="offered rate", value=offered, unit="req/s"),
        Evidence(name="achieved rate", value=achieved, unit="req/s"),
    ]
    parts = [series("requests waiting", waiting)]
    if m is not None:
        parts.append(series("requests running", m.get("vllm:num_requests_running")))
    if req is not None and req.succeeded:
        parts.append(
            points(
                "TTFT of a request (ms)", req.start_s[req.ok], ttft_ms, kind="markers", axis="y2"
            )
        )
    plot = chart(
        "Queue depth and time to first token over the run",
        "seconds into the run",
        "requests",
        parts,
        y2_label="TTFT (ms)",
    )
    if share is not None:
        tail_from_queue = share >= QUEUE_SHARE
    elif ratio is not None:
        tail_from_queue = ratio >= TAIL_FACTOR
    else:  # a live scrape without latency histograms: the queue itself is the evidence
        tail_from_queue = True
    waited = w_mean is not None and w_mean >= 1.0 and tail_from_queue
    grew = growth is not None and growth[1] >= 2.0 and growth[1] >= 2.0 * growth[0]
    # arrivals outran completions: an overload, whatever the queue-time histogram says
    short = (
        offered is not None
        and achieved is not None
        and achieved < RATE_SHORTFALL * offered
        and ((w_mean is not None and w_mean >= 1.0) or (ratio is not None and ratio >= TAIL_FACTOR))
    )
    if not (waited or grew or short):
        return finding(
            key,
            "clear",
            "No queue: requests were scheduled as they arrived.",
            evidence=evidence,
            chart=plot,
        )
    if _kv_bound(ev):
        return finding(
            key,
            "clear",
            "Requests queued, but while the KV cache was full: the queue is the KV cache's "
            "(mistake 3), not a shortage of replicas.",
            evidence=evidence,
            chart=plot,
        )
    fixes = [with_what_if(ctx, f) for f in _queue_fixes(ev, ctx, offered, achieved)]
    # a queue is fixed by what empties it: the shortest predicted TTFT tail first
    fixes.sort(key=lambda f: f.what_if.after.ttft_ms_p99 if f.what_if else math.inf)
    fix, alternatives = (fixes[0], fixes[1:]) if fixes else (None, [])
    severity: Severity = "high" if grew or (ratio is not None and ratio >= 10) else "medium"
    where = f"{w_mean:.1f} requests waited on average" if w_mean is not None else "requests waited"
    return finding(
        key,
        "found",
        f"{where}; TTFT p99 {p99 or 0:,.0f} ms against p50 {p50 or 0:,.0f} ms"
        + (": the queue grew through the run." if grew else "")
        + (
            f"; {offered:g} req/s offered, {achieved:.3g} served: arrivals outran completions."
            if short and offered is not None and achieved is not None
            else "."
        ),
        severity=severity,
        evidence=evidence,
        chart=plot,
        fix=fix,
        alternatives=alternatives,
        usd_per_hour_at_stake=_late_money(ev, ctx),
    )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _rates(ev: RunEvidence) -> tuple[float | None, float | None]:
    offered = None
    if ev.config.get("load") == "rate" or (
        ev.config.get("request_rate") and not ev.config.get("concurrency")
    ):
        try:
            value = float(ev.config.get("request_rate") or 0)
            offered = value if math.isfinite(value) and value > 0 else None
        except (TypeError, ValueError):
            offered = None
    achieved = ev.summary.get("request_throughput")
    if achieved is None and ev.requests is not None and ev.duration_s:
        achieved = ev.requests.succeeded / ev.duration_s
    if achieved is None and ev.metrics is not None and ev.duration_s:
        served = ev.metrics.delta("vllm:request_success_total")
        achieved = served / ev.duration_s if served else None
    return offered, (float(achieved) if achieved is not None else None)


def _growth(values: np.ndarray) -> tuple[float, float]:
    third = max(1, values.size // 3)
    return float(values[:third].mean()), float(values[-third:].mean())


def _kv_bound(ev: RunEvidence) -> bool:
    m = ev.metrics
    if m is None:
        return False
    kv, waiting = m.get(*KV_USAGE), m.get("vllm:num_requests_waiting")
    if kv is None or waiting is None or not len(kv) or not len(waiting):
        return False
    w_at = np.interp(kv.t_s, waiting.t_s, waiting.value)
    queued = w_at >= 1
    if not queued.any():
        return False
    return float((kv.value[queued] >= 0.9).mean()) >= KV_BOUND_SHARE


def _queue_fixes(
    ev: RunEvidence, ctx: DiagnosisContext, offered: float | None, achieved: float | None
) -> list[Fix]:
    actions = [
        "autoscale on queue depth (vllm:num_requests_waiting) or KV usage, not GPU utilisation",
        "shed or reroute load before the queue passes the TTFT budget",
        "set SLOs on p99 TTFT and on queue time, not on averages",
    ]
    m = ev.metrics
    running = m.get("vllm:num_requests_running") if m is not None else None
    waiting = m.get("vllm:num_requests_waiting") if m is not None else None
    if offered and achieved:
        replicas = math.ceil(offered / achieved * 1.1)
    elif running is not None and waiting is not None and len(running) and len(waiting):
        busy = max(1.0, float(running.value.mean()))
        replicas = math.ceil((busy + float(waiting.value.mean())) / busy)
    else:
        replicas = 2
    replicas = max(2, replicas)
    fixes = [
        Fix(
            summary=f"{replicas} replicas of this deployment behind the load balancer",
            changes=[flag_replicas(1, replicas)],
            scenario_changes={"replicas": replicas},
            actions=actions,
        )
    ]
    sc = ctx.scenario
    kv_peak = m.maximum(*KV_USAGE) if m is not None else None
    peak_running = float(running.value.max()) if running is not None and len(running) else None
    if sc is not None and peak_running and kv_peak is not None and kv_peak < 0.7:
        predicted = ctx.predict(sc)
        seqs = predicted and ctx.model and ctx.model.deployment(sc).max_num_seqs
        if seqs and peak_running >= 0.9 * seqs:
            more = int(seqs * min(4.0, 0.85 / max(kv_peak, 0.05)))
            if more > seqs:
                fixes.append(
                    Fix(
                        summary=f"max_num_seqs {seqs} -> {more}: the KV cache has room "
                        f"(peak usage {kv_peak:.2f}) for more requests at once",
                        changes=[flag_max_num_seqs(int(seqs), more)],
                        scenario_changes={"max_num_seqs": more},
                        actions=actions,
                    )
                )
    return fixes


def _late_money(
    ev: RunEvidence, ctx: DiagnosisContext, itl_ms_limit: float | None = None
) -> float | None:
    """$/hour x the share of requests over the TTFT budget (or, for stalls, with a gap over
    ``itl_ms_limit``): the work done for users who were kept waiting."""
    price = ctx.price.usd_per_hour if ctx.price is not None else None
    req = ev.requests
    if price is None or req is None or not req.succeeded:
        return None
    if itl_ms_limit is not None and req.gap_owner.size:
        slow = np.zeros(req.count, dtype=bool)
        slow[req.gap_owner[req.itl_s * 1e3 > itl_ms_limit]] = True
        return price * float(slow[req.ok].mean())
    budget = _ttft_budget_ms(ev)
    return price * float((req.ttft_s * 1e3 > budget).mean())


def _ttft_budget_ms(ev: RunEvidence) -> float:
    plan = ev.plan or {}
    for value in (
        plan.get("slo_ttft_p99_ms"),
        (plan.get("slo") or {}).get("ttft_p99_ms") if isinstance(plan.get("slo"), dict) else None,
        (ev.config.get("goodput") or {}).get("ttft")
        if isinstance(ev.config.get("goodput"), dict)
        else None,
    ):
        try:
            if value is not None and float(value) > 0:
                return float(value)
        except (TypeError, ValueError):
            continue
    return DEFAULT_TTFT_BUDGET_MS
