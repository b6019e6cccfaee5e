"""Mistakes 1, 2 and 4: the workload, the batch and prefix reuse (low tokens/s per GPU).

**Batch too small**. Decode reads every weight once a step whatever the batch, so a small
batch leaves the GPU's compute idle. The mean running batch comes from
``vllm:num_requests_running`` (scrapes with work), else from the client's requests in flight.
The performance model then predicts the same deployment with the run's request lengths at
twice, four times, ... that batch (up to ``max_num_seqs`` and what the KV cache holds) and
keeps the largest batch whose TPOT stays within :data:`TPOT_ALLOWANCE` of today's. Found when
that batch gives at least :data:`GAIN` times the tokens/s per GPU and the run's batch was under
half of ``max_num_seqs``. Evidence also gives the bandwidth ceiling at the run's batch: batch x
memory bandwidth / weight bytes per GPU (tokens/s if a step did nothing but read the weights).

**Prefix reuse**. The hit rate is ``delta vllm:prefix_cache_hits_total / delta
vllm:prefix_cache_queries_total``; what the workload could reuse is its shared-prefix share
(the run's ``prefix_share``) less the first request of each prefix group. Found when the share
is at least :data:`PREFIX_SHARE_MIN` and prefix caching is off (reported off, or no queries
counted while prompts were served) or hits fall below half of what could be reused. Severity
high from a 50% share.

**Workload realism**. Fixed prompt and answer lengths, one request at a time, fewer than
:data:`FEW_REQUESTS` requests, or mean lengths :data:`LENGTH_MISMATCH` away from the plan's
say little about production traffic. Found (low; medium for concurrency 1 or a mismatch with
the plan) for a benchmark run; live traffic is the real workload by definition.
"""

from __future__ import annotations

import math

import numpy as np

from planner.diagnosis.checks.base import (
    cannot_judge,
    chart,
    finding,
    flag_max_num_seqs,
    flag_prefix_caching,
    money,
    series,
)
from planner.diagnosis.evidence import PREFIX_HITS, PREFIX_QUERIES, RunEvidence, TimeSeries
from planner.diagnosis.findings import Evidence, Finding, Fix, Series, Severity
from planner.diagnosis.whatif import (
    DiagnosisContext,
    closed_loop_changes,
    shared_prefix_share,
    with_what_if,
    workload_setting,
)

GAIN = 1.8
TPOT_ALLOWANCE = 1.5
BATCH_STEPS = 6  # up to 2^6 = 64 x the run's batch
PREFIX_SHARE_MIN = 0.2
FEW_REQUESTS = 50
LENGTH_MISMATCH = 0.3
FIXED_CV = 0.02


# ----- batch -------------------------------------------------------------------------------
def mean_running_batch(ev: RunEvidence) -> tuple[float | None, TimeSeries | None, str]:
    """The mean batch while the server had work, the series behind it, and where it came from."""
    m = ev.metrics
    running = m.get("vllm:num_requests_running") if m is not None else None
    if running is not None and len(running) and (running.value > 0).any():
        busy = running.value[running.value > 0]
        return float(busy.mean()), running, "vllm:num_requests_running"
    req = ev.requests
    if req is not None and req.succeeded:
        lo, hi = req.window_s
        times = np.linspace(lo, hi, 400)
        inflight = req.in_flight(times).astype(float)
        if (inflight > 0).any():
            return (
                float(inflight[inflight > 0].mean()),
                TimeSeries(times, inflight),
                "requests in flight (client)",
            )
    return None, None, ""


def check_small_batch(ev: RunEvidence, ctx: DiagnosisContext) -> Finding:
    key = "small_batch"
    batch, running, where = mean_running_batch(ev)
    if batch is None:
        return cannot_judge(
            key, "The run shows no batch.", ["requests or vllm:num_requests_running"]
        )
    sc = ctx.scenario
    evidence = [Evidence(name=f"mean running batch ({where})", value=batch)]
    if sc is None or ctx.model is None:
        return cannot_judge(
            key,
            f"The batch averaged {batch:.1f}; what the GPU could take depends on the plan.",
            [ctx.scenario_problem or "a performance model"],
            evidence=evidence,
        )
    dep = ctx.model.deployment(sc)
    cap = int(dep.max_num_seqs)
    req = ev.requests
    context = None
    if req is not None and req.succeeded:
        context = float(np.nanmean(req.prompt_tokens[req.ok] + req.output_tokens[req.ok]))
    if context and context > 0:
        cap = min(cap, max(1, int(dep.kv_capacity_tokens // context)))
    per_gpu = _achieved_per_gpu(ev, sc.gpus)
    ceiling = batch * dep.memory_bw / max(dep.dense_weight_bytes, 1.0)
    evidence += [
        Evidence(name="max_num_seqs", value=float(dep.max_num_seqs)),
        Evidence(name="batch the KV cache holds at the run's mean context", value=float(cap)),
        Evidence(name="achieved output tokens/s per GPU", value=per_gpu, unit="tok/s"),
        Evidence(
            name="bandwidth ceiling at this batch (weights read once a step)",
            value=ceiling,
            unit="tok/s per GPU",
        ),
    ]
    base_c = max(1.0, round(batch))
    observed = closed_loop_changes(ev, base_c)
    base = with_what_if(ctx, Fix(summary="(the run's batch)"), observed=observed).what_if
    best: Fix | None = None
    best_b = None
    b = base_c
    for _ in range(BATCH_STEPS):
        b = min(float(cap), b * 2)
        if base is None or b <= base_c:
            break
        changes: dict[str, float | int] = {"concurrency": b, "num_requests": max(int(4 * b), 64)}
        if b > dep.max_num_seqs:
            break
        candidate = with_what_if(
            ctx,
            Fix(summary="", scenario_changes=changes),
            observed=observed,
        )
        w = candidate.what_if
        if w is None or w.after.tpot_ms_p50 > TPOT_ALLOWANCE * base.before.tpot_ms_p50:
            break
        best, best_b = candidate, b
        if b >= cap:
            break
    gain = None
    if best is not None and best.what_if is not None and base is not None:
        gain = best.what_if.after.output_tok_per_s / max(base.before.output_tok_per_s, 1e-9)
    evidence.append(
        Evidence(
            name="predicted tokens/s per GPU gain at the larger batch",
            value=gain,
            limit=GAIN,
            note=f"batch {best_b:.0f}, TPOT within {TPOT_ALLOWANCE:g}x" if best_b else "",
        )
    )
    parts: list[Series | None] = [series(f"running batch ({where})", running)]
    thresholds = [("max_num_seqs", float(dep.max_num_seqs))]
    if best_b:
        thresholds.append(("batch the GPU could take", float(best_b)))
    plot = chart(
        "Running batch over the run",
        "seconds into the run",
        "requests in the batch",
        parts,
        thresholds=thresholds,
    )
    if gain is None or gain < GAIN or batch >= 0.5 * dep.max_num_seqs or best is None:
        return finding(
            key,
            "clear",
            f"The batch averaged {batch:.1f}; a larger one would not pay for its latency.",
            evidence=evidence,
            chart=plot,
        )
    assert best_b is not None and best.what_if is not None
    fix = best.model_copy(
        update={
            "summary": f"Pool traffic so each replica runs ~{best_b:.0f} requests at once "
            f"(now {batch:.1f}): {gain:.1f}x the tokens per GPU-hour",
            "changes": [flag_max_num_seqs(dep.max_num_seqs, int(best_b))]
            if best_b > dep.max_num_seqs
            else [],
            "actions": [
                "pool traffic onto fewer, busier replicas",
                "send batch work to an offline path instead of interactive replicas",
            ],
        }
    )
    severity: Severity = "high" if gain >= 3 else "medium"
    return finding(
        key,
        "found",
        f"The batch averaged {batch:.1f}: at {best_b:.0f} the same GPU would give {gain:.1f}x "
        "the tokens/s with TPOT within 1.5x.",
        severity=severity,
        evidence=evidence,
        chart=plot,
        fix=fix,
        usd_per_hour_at_stake=money(ctx, fix),
    )


def _achieved_per_gpu(ev: RunEvidence, gpus: int) -> float | None:
    out = ev.summary.get("output_throughput")
    if out is None and ev.metrics is not None and ev.duration_s:
        generated = ev.metrics.delta("vllm:generation_tokens_total")
        out = generated / ev.duration_s if generated else None
    return None if out is None else float(out) / max(1, gpus)


# ----- prefix reuse ------------------------------------------------------------------------
def check_prefix_reuse(ev: RunEvidence, ctx: DiagnosisContext) -> Finding:
    key = "prefix_reuse"
    m = ev.metrics
    share = shared_prefix_share(ev)
    queries = m.delta(*PREFIX_QUERIES) if m is not None else None
    hits = m.delta(*PREFIX_HITS) if m is not None else None
    hit_rate = hits / queries if queries and hits is not None else None
    flag = ev.flag("enable_prefix_caching")
    plan_flag = (ev.plan or {}).get("enable_prefix_caching")
    enabled: bool | None = None
    if flag is not None:
        enabled = flag.strip().lower() in ("true", "1")
    elif isinstance(plan_flag, bool):
        enabled = plan_flag
    served = m.delta("vllm:prompt_tokens_total") if m is not None else None
    if enabled is None and queries == 0 and served:
        enabled = False  # vLLM counts no queries when prefix caching is off
    groups = int(workload_setting(ev, "prefix_groups") or 1)
    n = ev.requests.count if ev.requests is not None else 0
    reusable = share * max(0.0, 1.0 - groups / n) if share is not None and n else share
    evidence = [
        Evidence(name="shared-prefix share of the workload", value=share, limit=PREFIX_SHARE_MIN),
        Evidence(name="prefix-cache hit rate", value=hit_rate),
        Evidence(name="hit rate the workload allows", value=reusable),
        Evidence(
            name="prefix caching",
            value=None if enabled is None else float(enabled),
            note={None: "not reported", True: "on", False: "off"}[enabled],
        ),
    ]
    plot = chart(
        "Prefix-cache hit rate over the run",
        "seconds into the run",
        "hit rate (0-1)",
        [_hit_rate_series(ev)],
        thresholds=[("reusable share", reusable)] if reusable else [],
    )
    if share is None:
        return cannot_judge(
            key,
            "Whether prompts share prefixes is not in the run."
            + (" Prefix caching is off." if enabled is False else ""),
            ["the workload's shared-prefix share (a Servewise run's --prefix-share, or a trace)"],
            evidence=evidence,
            chart=plot,
        )
    if share < PREFIX_SHARE_MIN:
        return finding(
            key,
            "clear",
            f"Prompts share {share:.0%} of their tokens: little to reuse.",
            evidence=evidence,
            chart=plot,
        )
    if enabled is None and hit_rate is None:
        return cannot_judge(
            key,
            f"Prompts share {share:.0%} of their tokens; the server's prefix-cache counters "
            "are not in the run.",
            ["server metrics vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total"],
            evidence=evidence,
        )
    missed = enabled is False or (
        hit_rate is not None and reusable is not None and hit_rate < 0.5 * reusable
    )
    if not missed:
        return finding(
            key,
            "clear",
            f"The prefix cache hit {hit_rate or 0:.0%} of prompt tokens of a reusable "
            f"{reusable or 0:.0%}.",
            evidence=evidence,
            chart=plot,
        )
    fix = Fix(
        summary="Enable prefix caching, and keep the shared part of every prompt first and "
        "byte-for-byte identical",
        changes=[flag_prefix_caching(enabled, True)],
        scenario_changes={"enable_prefix_caching": True, "prefix_share": share},
        actions=[
            "put stable content (system prompt, tool schemas, documents) first and variable "
            "content last",
            "keep tool schemas byte-for-byte stable: one changed token ahead of the shared "
            "part invalidates the match",
        ],
    )
    fix = with_what_if(ctx, fix, observed={"enable_prefix_caching": False, "prefix_share": share})
    why = "prefix caching is off" if enabled is False else f"the cache hit {hit_rate or 0:.0%}"
    return finding(
        key,
        "found",
        f"Prompts share {share:.0%} of their tokens but {why}: every request pays the "
        "shared prefill again.",
        severity="high" if share >= 0.5 else "medium",
        evidence=evidence,
        chart=plot,
        fix=fix,
        usd_per_hour_at_stake=money(ctx, fix),
    )


def _hit_rate_series(ev: RunEvidence) -> Series | None:
    m = ev.metrics
    if m is None:
        return None
    q, h = m.get(*PREFIX_QUERIES), m.get(*PREFIX_HITS)
    if q is None or h is None or len(q) < 2 or len(h) != len(q):
        return None
    dq = np.diff(q.value)
    dh = np.diff(h.value)
    keep = dq > 0
    if not keep.any():
        return None
    t = ((q.t_s[1:] + q.t_s[:-1]) / 2)[keep]
    return Series(
        name="hit rate per scrape interval",
        x=[round(float(v), 4) for v in t],
        y=[round(float(v), 4) for v in (dh[keep] / dq[keep])],
    )


# ----- workload realism ---------------------------------------------------------------------------
def check_workload_realism(ev: RunEvidence, ctx: DiagnosisContext) -> Finding:
    key = "workload_realism"
    if ev.tool == "live":
        return finding(key, "clear", "Live traffic is the real workload.")
    req = ev.requests
    if req is None or not req.succeeded:
        return cannot_judge(
            key,
            "The run has no per-request lengths to compare.",
            ["per-request prompt and output lengths"],
        )
    ok = req.ok
    prompt, output = req.prompt_tokens[ok], req.output_tokens[ok]
    cv_in = _cv(prompt)
    cv_out = _cv(output)
    concurrency = ev.config.get("concurrency")
    load = ev.config.get("load") or ("concurrency" if concurrency else None)
    problems: list[str] = []
    medium = False
    if cv_in is not None and cv_out is not None and cv_in < FIXED_CV and cv_out < FIXED_CV:
        problems.append(
            f"every request has {prompt.mean():,.0f} prompt and {output.mean():,.0f} answer "
            "tokens: real traffic has a spread"
        )
    if load == "concurrency" and concurrency is not None and float(concurrency) <= 1:
        problems.append("one request at a time: no batching, no queue, no contention")
        medium = True
    if req.count < FEW_REQUESTS:
        problems.append(f"{req.count} requests: too few for a p99")
    plan = ev.plan or {}
    for name, values in (("input_len", prompt), ("output_len", output)):
        planned = plan.get(name)
        if planned:
            off = abs(float(values.mean()) - float(planned)) / float(planned)
            if off > LENGTH_MISMATCH:
                problems.append(
                    f"mean {name.replace('_len', '')} length {values.mean():,.0f} against the "
                    f"plan's {float(planned):,.0f}"
                )
                medium = True
    evidence = [
        Evidence(name="prompt length CV", value=cv_in, limit=FIXED_CV),
        Evidence(name="output length CV", value=cv_out, limit=FIXED_CV),
        Evidence(name="requests", value=float(req.count), limit=FEW_REQUESTS),
        Evidence(name="load", value=None, note=_load_text(ev)),
    ]
    plot = chart(
        "Prompt and answer lengths of the run",
        "tokens",
        "requests",
        [_histogram("prompt tokens", prompt), _histogram("answer tokens", output)],
    )
    if not problems:
        return finding(
            key,
            "clear",
            "The run's lengths and load have the spread of real traffic.",
            evidence=evidence,
            chart=plot,
        )
    fix = Fix(
        summary="Replay real request shapes: a captured trace, or the plan's length "
        "distributions with bursty arrivals",
        actions=[
            "python -m benchmarks_runner run --trace FILE --trace-format mooncake (or "
            "burstgpt, azure)",
            "python -m benchmarks_runner run --input-dist lognormal --input-spread 0.6 "
            "--output-dist lognormal --output-spread 0.6 --request-rate R --burstiness 0.5",
            "report TTFT and ITL at p50 and p99 and throughput at the stated concurrency",
        ],
    )
    return finding(
        key,
        "found",
        "The benchmark says little about production: " + "; ".join(problems) + ".",
        severity="medium" if medium else "low",
        evidence=evidence,
        chart=plot,
        fix=fix,
        usd_per_hour_at_stake=0.0,
    )


def _cv(values: np.ndarray) -> float | None:
    v = values[np.isfinite(values)]
    if v.size < 2 or v.mean() <= 0:
        return None
    return float(v.std() / v.mean())


def _load_text(ev: RunEvidence) -> str:
    c = ev.config
    if c.get("load") == "rate" or (c.get("request_rate") and not c.get("concurrency")):
        return f"Poisson/gamma rate {c.get('request_rate')} req/s, burstiness {c.get('burstiness')}"
    if c.get("load") == "trace":
        return "trace replay"
    if c.get("concurrency"):
        return f"closed loop, concurrency {c.get('concurrency')}"
    return "not recorded"


def _histogram(name: str, values: np.ndarray) -> Series | None:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return None
    bins = min(30, max(1, int(math.sqrt(v.size))))
    counts, edges = np.histogram(v, bins=bins)
    centres = (edges[:-1] + edges[1:]) / 2
    return Series(
        name=name,
        x=[round(float(c), 1) for c in centres],
        y=[float(c) for c in counts],
        kind="bar",
    )
