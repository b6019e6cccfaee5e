"""A disaggregated deployment whose prefill pool, decode pool or KV link is the bottleneck.

Reads each pool's own ``/metrics`` (samples labelled ``pool="prefill"|"decode"``, as the
simulated two-pool endpoint's router serves them; :attr:`MetricTable.pools`) and the router's
KV-transfer counters, and names the pool that limits the run:

- **prefill-bound TTFT**: the prefill pool's queue grows while requests arrive: the trend of
  its waiting requests a rank rises by :data:`QUEUE_PER_RANK` or more over the arrival window
  and it prefilled fewer than :data:`SERVED_SHARE` of the requests that arrived meanwhile
  (requests arrive faster than the pool prefills them: TTFT grows with the run), and the
  model, at the rate that arrived, has the pool at least :data:`UTILISATION_OK` busy (a short
  Poisson run's burst that a pool absorbs looks like a growing queue on a few scrapes);
- **decode-bound TPOT**: the decode pool's batch at its cap, ``mean running / ranks >=``
  :data:`BATCH_AT_CAP` x ``max_num_seqs`` while requests arrive, with requests waiting for a
  seat;
- **transfer-bound TTFT**: the mean KV transfer (``delta servewise:kv_transfer_seconds_total /
  delta servewise:kv_transfers_total``) at least :data:`TRANSFER_SHARE` of the mean TTFT.

The fix of a pool bottleneck is the P:D ratio: replicas moved from the other pool, the same
GPUs in all (``4P:7D -> 5P:6D``), or, when no such ratio carries the load, replicas added to
the limiting pool; the first ratio whose prediction
(:func:`planner.perf.disaggregated.predict_disaggregated` at the run's request rate and
lengths) is stable with both pools under :data:`UTILISATION_OK` busy and meets the plan's
p99 SLOs is the fix, with its what-if. A transfer bottleneck's fix is the fastest other link
(:data:`planner.perf.disaggregated.KV_LINKS`) the deployment allows. Money at stake: the GPUs
the fix adds, negative savings reported as 0 (a fix that moves GPUs between pools costs
nothing).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from planner.diagnosis.checks.base import cannot_judge, finding
from planner.diagnosis.evidence import MetricTable, RunEvidence
from planner.diagnosis.findings import Evidence, Finding, Fix, FlagChange, Outcome, WhatIf
from planner.diagnosis.whatif import DiagnosisContext
from planner.errors import InvalidInputError, PlannerError
from planner.perf.disaggregated import (
    KV_LINKS,
    DisaggregatedLayout,
    DisaggregatedPrediction,
    predict_disaggregated,
)
from planner.perf.scenario import Scenario
from planner.plan import Load, Plan, PlanWorkload, read_plan

KEY = "pool_balance"
#: requests waiting a prefill rank at the queue's peak that make a growing queue a finding
QUEUE_PER_RANK = 2.0
#: share of max_num_seqs a decode rank's mean batch holds at its cap
BATCH_AT_CAP = 0.9
#: share of the mean TTFT the mean KV transfer takes when the link is the bottleneck
TRANSFER_SHARE = 0.5
#: a pool at most this busy (its predicted utilisation) carries the run's load
UTILISATION_OK = 0.9
#: replicas a ratio change adds to the limiting pool, at most
MAX_SHIFT = 8
#: a prefill pool that keeps up finishes at least this share of the requests arriving meanwhile
SERVED_SHARE = 0.9
WAITING = "vllm:num_requests_waiting"
SUCCESS = "vllm:request_success_total"
RUNNING = "vllm:num_requests_running"


def check(ev: RunEvidence, ctx: DiagnosisContext) -> Finding:
    plan = _plan(ev)
    if plan is None or not plan.disaggregated:
        return finding(
            KEY, "clear", "An aggregated deployment: there are no prefill and decode pools."
        )
    layout = plan.disaggregated_layout()
    assert layout is not None
    m = ev.metrics
    if m is None or not {"prefill", "decode"} <= set(m.pools):
        return cannot_judge(
            KEY,
            "The pools' own metrics are needed to find the bottleneck pool.",
            [
                "each pool's /metrics labelled pool=prefill|decode (a run against the "
                "disaggregated endpoint's router records them)"
            ],
        )
    pre, dec = m.pools["prefill"], m.pools["decode"]
    ranks_p = layout.prefill.replicas * layout.prefill.attention_dp
    ranks_d = layout.decode.replicas * layout.decode.attention_dp
    seats = _max_num_seqs(plan, dec, ctx)
    evidence: list[Evidence] = []
    growing, rise, served = _queue_grows(ev, pre, ranks_p)
    evidence.append(
        Evidence(
            name="prefill pool: rise of the waiting requests a rank while requests arrive",
            value=rise,
            limit=QUEUE_PER_RANK,
            note="the queue grows" if growing else "the queue does not grow",
        )
    )
    if served is not None:
        evidence.append(
            Evidence(
                name="prefill pool: share of the arriving requests it prefilled meanwhile",
                value=served,
                limit=SERVED_SHARE,
            )
        )
    full, batch = _batch_full(dec, ranks_d, seats)
    dec_waiting = (dec.maximum(WAITING) or 0.0) / ranks_d
    at_cap = full >= 2
    evidence.append(
        Evidence(
            name="decode pool: largest batch a rank",
            value=batch,
            limit=BATCH_AT_CAP * seats if seats else None,
            note=f"max_num_seqs {seats}; full with requests waiting for a seat on {full} "
            f"scrapes (up to {dec_waiting:,.0f} waiting a rank)"
            if seats
            else "max_num_seqs unknown",
        )
    )
    transfer_ms, ttft_ms = _transfer_ms(m), _ttft_ms(ev)
    transfer_bound = (
        transfer_ms is not None and ttft_ms is not None and transfer_ms >= TRANSFER_SHARE * ttft_ms
    )
    evidence.append(
        Evidence(
            name="mean KV transfer",
            value=transfer_ms,
            unit="ms",
            note=f"of a {ttft_ms:,.0f} ms mean TTFT" if ttft_ms else "mean TTFT unknown",
        )
    )
    scenario, problem = _scenario(ev, plan)
    before = _predict(ctx, scenario, layout)
    if before is not None:
        evidence.append(
            Evidence(
                name="predicted busy share, prefill / decode pool",
                value=before.prefill_utilization,
                note=f"decode {before.decode_utilization:.0%} at the run's "
                f"{scenario.request_rate if scenario else 0:,.2f} req/s",
            )
        )
    ratio = _ratio(layout)
    if growing and before is not None and before.prefill_utilization < UTILISATION_OK:
        # a burst of Poisson arrivals the pool absorbs: the model has it well inside capacity
        growing = False
        evidence[0] = evidence[0].model_copy(
            update={"note": "a burst the pool absorbs: the model puts it well inside capacity"}
        )
    if at_cap and before is not None and before.decode_utilization < UTILISATION_OK:
        at_cap = False  # a burst the pool absorbs
    if growing:
        kind, what = "prefill", "prefill-bound TTFT: the prefill pool's queue grows"
    elif at_cap:
        kind, what = "decode", "decode-bound TPOT: the decode pool's batch is at its cap"
    elif transfer_bound:
        kind, what = "transfer", "transfer-bound TTFT: the KV transfer takes most of the TTFT"
    else:
        return finding(
            KEY,
            "clear",
            f"The pools keep up with each other at {ratio}: no growing prefill queue, a decode "
            "batch below its cap, a KV transfer well inside the TTFT.",
            evidence=evidence,
        )
    fix = None
    if scenario is not None and before is not None:
        fix = (
            _link_fix(ctx, plan, scenario, layout, before)
            if kind == "transfer"
            else _ratio_fix(ctx, plan, scenario, layout, before, kind)
        )
    notes = [problem] if problem else []
    if fix is None and not notes:
        notes.append("no ratio or link the model predicts to carry this load was found")
    added = (
        fix.what_if.after.usd_per_hour - fix.what_if.before.usd_per_hour
        if fix is not None
        and fix.what_if is not None
        and fix.what_if.after.usd_per_hour is not None
        and fix.what_if.before.usd_per_hour is not None
        else None
    )
    headline = f"{what} ({ratio})"
    if fix is not None:
        headline += f"; {fix.summary}"
    return finding(
        KEY,
        "found",
        headline + ".",
        severity="high",
        evidence=evidence,
        fix=fix,
        usd_per_hour_at_stake=max(0.0, -added) if added is not None else None,
        notes=notes,
    )


# ----- what the run says -------------------------------------------------------------------------
def _plan(ev: RunEvidence) -> Plan | None:
    try:
        stored = ev.stored_plan or ev.plan
        return read_plan(stored) if stored else None
    except InvalidInputError:
        return None


def _max_num_seqs(plan: Plan, decode: MetricTable, ctx: DiagnosisContext) -> int | None:
    """The decode engines' batch cap: as the pool reported it, the plan's, or the engine's
    default on that GPU."""
    label = decode.info.get("max_concurrency")
    if label and label.isdigit():
        return int(label)
    pool = plan.decode
    assert pool is not None
    if pool.engine.max_num_seqs is None and ctx.catalog is not None:
        try:
            return pool.engine.resolved(ctx.catalog.gpu(pool.gpu)).max_num_seqs
        except PlannerError:
            return None
    return pool.engine.max_num_seqs


def _queue_grows(
    ev: RunEvidence, prefill: MetricTable, ranks: int
) -> tuple[bool, float | None, float | None]:
    """(whether the prefill queue grows, the rise of its trend a rank, the share of the
    requests that arrived the pool prefilled meanwhile) over the run's arrival window.

    It grows when both say so: the least-squares trend of the waiting requests a rank rises
    by at least :data:`QUEUE_PER_RANK` over the window, and the pool finished fewer than
    :data:`SERVED_SHARE` of the requests that arrived in it (a pool that keeps up finishes
    all but the last step's)."""
    waiting = prefill.get(WAITING)
    req = ev.requests
    if waiting is None or len(waiting) < 3 or req is None or not req.count:
        return False, None, None
    arrivals = np.where(np.isfinite(req.scheduled_s), req.scheduled_s, req.start_s)
    t0, t1 = float(np.nanmin(arrivals)), float(np.nanmax(arrivals))
    inside = (waiting.t_s >= t0) & (waiting.t_s <= t1)
    t, values = waiting.t_s[inside], waiting.value[inside] / max(1, ranks)
    if t.size < 2 or t1 <= t0:
        return False, None, None
    rise = float(np.polyfit(t, values, 1)[0]) * (t1 - t0)
    served_share = None
    done = prefill.get(SUCCESS)
    if done is not None and len(done) >= 2:
        # between two scrapes: the last one before the first arrival, the last one before the
        # last arrival
        a = int(np.searchsorted(done.t_s, t0, side="right")) - 1
        b = int(np.searchsorted(done.t_s, t1, side="right")) - 1
        if 0 <= a < b:
            ta, tb = float(done.t_s[a]), float(done.t_s[b])
            arrived = int(np.sum((arrivals > ta) & (arrivals <= tb)))
            served = float(done.value[b] - done.value[a])
            served_share = served / arrived if arrived else None
    behind = served_share is None or served_share < SERVED_SHARE
    return rise >= QUEUE_PER_RANK and behind, rise, served_share


def _batch_full(decode: MetricTable, ranks: int, seats: int | None) -> tuple[int, float | None]:
    """(scrapes at which the decode ranks were full, at least :data:`BATCH_AT_CAP` of
    ``max_num_seqs`` running a rank, with a request waiting a rank for a seat; the largest
    batch a rank)."""
    running, waiting = decode.get(RUNNING), decode.get(WAITING)
    if running is None or not len(running):
        return 0, None
    batch = running.value / max(1, ranks)
    if seats is None or waiting is None or not np.array_equal(running.t_s, waiting.t_s):
        return 0, float(batch.max())
    full = (batch >= BATCH_AT_CAP * seats) & (waiting.value / max(1, ranks) >= 1)
    return int(full.sum()), float(batch.max())


def _transfer_ms(m: MetricTable) -> float | None:
    seconds = m.delta("servewise:kv_transfer_seconds_total")
    count = m.delta("servewise:kv_transfers_total")
    if seconds is None or not count:
        return None
    return seconds / count * 1e3


def _ttft_ms(ev: RunEvidence) -> float | None:
    req = ev.requests
    if req is not None and req.succeeded:
        ttft = req.ttft_s[np.isfinite(req.ttft_s)]
        if ttft.size:
            return float(ttft.mean() * 1e3)
    mean = ev.summary.get("mean_ttft_ms")
    return float(mean) if mean else None


def _scenario(ev: RunEvidence, plan: Plan) -> tuple[Scenario | None, str | None]:
    """The whole deployment under the run's lengths (their means) and request rate."""
    req = ev.requests
    if req is None or not req.succeeded:
        return None, "the run's requests (lengths and rate) are needed for the what-if"
    ok = req.ok
    prompt = req.prompt_tokens[ok]
    output = req.output_tokens[ok]
    # the rate that arrived (a short Poisson run's differs from the one asked for)
    arrivals = np.sort(np.where(np.isfinite(req.scheduled_s), req.scheduled_s, req.start_s))
    span = float(arrivals[-1] - arrivals[0]) if arrivals.size >= 2 else 0.0
    rate = (arrivals.size - 1) / span if span > 0 else _float(ev.config.get("request_rate"))
    if rate is None or not prompt.size:
        return None, "the run's request rate is unknown"
    workload = PlanWorkload.of(
        max(1, round(float(np.nanmean(prompt)))), max(1, round(float(np.nanmean(output))))
    )
    try:
        return plan.scenario(workload=workload, load=Load.rate(rate, req.count)), None
    except PlannerError as exc:
        return None, f"the plan does not make a scenario: {exc}"


def _float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number > 0 else None


# ----- the fix -----------------------------------------------------------------------------------
def _ratio(layout: DisaggregatedLayout) -> str:
    return f"{layout.prefill.replicas}P:{layout.decode.replicas}D"


def _predict(
    ctx: DiagnosisContext, scenario: Scenario | None, layout: DisaggregatedLayout
) -> DisaggregatedPrediction | None:
    if ctx.model is None or scenario is None:
        return None
    try:
        return predict_disaggregated(ctx.model, scenario, layout)
    except (PlannerError, ValueError):
        return None


def _carries(plan: Plan, p: DisaggregatedPrediction) -> bool:
    pred = p.prediction
    if not p.stable or max(p.prefill_utilization, p.decode_utilization) > UTILISATION_OK:
        return False
    ttft_slo, tpot_slo = plan.slo.ttft_p99_ms, plan.slo.tpot_p99_ms
    if ttft_slo is not None and pred.ttft_ms_p99 > ttft_slo:
        return False
    return tpot_slo is None or pred.tpot_ms_p99 <= tpot_slo


def _ratios(layout: DisaggregatedLayout, grow: str) -> list[tuple[int, int]]:
    """(P, D) to try: first the same GPUs with replicas moved to the ``grow`` pool, then
    replicas added to it."""
    p, d = layout.prefill.replicas, layout.decode.replicas
    gp, gd = layout.prefill.gpus_per_replica, layout.decode.gpus_per_replica
    total = layout.gpus
    moved, added = [], []
    for k in range(1, MAX_SHIFT + 1):
        if grow == "prefill":
            shrink = math.ceil(max(0, (p + k) * gp + d * gd - total) / gd)
            if d - shrink >= 1:
                moved.append((p + k, d - shrink))
            added.append((p + k, d))
        else:
            shrink = math.ceil(max(0, p * gp + (d + k) * gd - total) / gp)
            if p - shrink >= 1:
                moved.append((p - shrink, d + k))
            added.append((p, d + k))
    return moved + added


def _ratio_fix(
    ctx: DiagnosisContext,
    plan: Plan,
    scenario: Scenario,
    layout: DisaggregatedLayout,
    before: DisaggregatedPrediction,
    grow: str,
) -> Fix | None:
    for p, d in _ratios(layout, grow):
        after_layout = layout.model_copy(
            update={
                "prefill": layout.prefill.model_copy(update={"replicas": p}),
                "decode": layout.decode.model_copy(update={"replicas": d}),
            }
        )
        after = _predict(ctx, scenario, after_layout)
        if after is None or not _carries(plan, after):
            continue
        change = f"{_ratio(layout)} -> {_ratio(after_layout)}"
        changes = [
            FlagChange(
                setting=f"{role}_replicas",
                before=old.replicas,
                after=new.replicas,
                vllm=f"{new.replicas} {role} engines (the {role} pool's replicas: Dynamo's "
                f"{role} workers, llm-d's {role} replicas)",
                sglang=f"{new.replicas} --disaggregation-mode {role} servers behind the router",
            )
            for role, old, new in (
                ("prefill", layout.prefill, after_layout.prefill),
                ("decode", layout.decode, after_layout.decode),
            )
            if old.replicas != new.replicas
        ]
        same = after_layout.gpus <= layout.gpus
        return Fix(
            scenario_changes={"prefill_replicas": p, "decode_replicas": d},
            summary=f"change the ratio {change}"
            + (" (the same GPUs)" if same else f" ({after_layout.gpus - layout.gpus} more GPUs)"),
            changes=changes,
            what_if=_what_if(ctx, plan, before, after, f"pools {change}", layout, after_layout),
        )
    return None


def _link_fix(
    ctx: DiagnosisContext,
    plan: Plan,
    scenario: Scenario,
    layout: DisaggregatedLayout,
    before: DisaggregatedPrediction,
) -> Fix | None:
    options = []
    for name in KV_LINKS:
        if name == layout.kv_link:
            continue
        after = _predict(ctx, scenario, layout.model_copy(update={"kv_link": name}))
        if after is not None and after.kv_transfer_ms < before.kv_transfer_ms:
            options.append((after.kv_transfer_ms, name, after))
    if not options:
        return None
    _, name, after = min(options)
    change = f"{layout.kv_link} -> {name}"
    return Fix(
        scenario_changes={"kv_link": name},
        summary=f"move the KV cache over {name} ({change}: "
        f"{before.kv_transfer_ms:,.2f} -> {after.kv_transfer_ms:,.2f} ms a request)",
        changes=[
            FlagChange(
                setting="kv_link",
                before=layout.kv_link,
                after=name,
                vllm=f"a {name} path between the pools (the KV connector's transport)",
                sglang=f"--disaggregation-transfer-backend over {name}",
            )
        ],
        what_if=_what_if(ctx, plan, before, after, f"KV link {change}", layout, layout),
    )


def _usd_per_gpu_hour(ctx: DiagnosisContext, plan: Plan) -> float | None:
    layout = plan.disaggregated_layout()
    if plan.cost is not None and layout is not None:
        return plan.cost.usd_per_hour / layout.gpus
    if ctx.price is not None:
        return ctx.price.usd_per_hour / max(1, plan.tp * plan.pp)
    return None


def _outcome(p: DisaggregatedPrediction, usd_per_gpu_hour: float | None) -> Outcome:
    pred = p.prediction
    usd = usd_per_gpu_hour * p.gpus if usd_per_gpu_hour is not None else None
    cost = None
    if usd is not None and pred.output_tok_per_s > 0:
        cost = usd / (pred.output_tok_per_s * 3600) * 1e6
    return Outcome(
        output_tok_per_s=pred.output_tok_per_s,
        total_tok_per_s=pred.total_tok_per_s,
        ttft_ms_p99=pred.ttft_ms_p99,
        itl_ms_p99=pred.itl_ms_p99,
        itl_ms_max=pred.tpot_ms_p99,
        tpot_ms_p50=pred.tpot_ms_p50,
        usd_per_hour=usd,
        usd_per_million_output_tokens=cost,
        gpus=p.gpus,
    )


def _what_if(
    ctx: DiagnosisContext,
    plan: Plan,
    before: DisaggregatedPrediction,
    after: DisaggregatedPrediction,
    description: str,
    layout: DisaggregatedLayout,
    after_layout: DisaggregatedLayout,
) -> WhatIf:
    per_gpu = _usd_per_gpu_hour(ctx, plan)
    notes = [
        f"before: prefill {before.prefill_utilization:.0%} / decode "
        f"{before.decode_utilization:.0%} busy"
        + ("" if before.stable else " (a queue that grows without bound: TTFT has no mean)"),
        f"after: prefill {after.prefill_utilization:.0%} / decode "
        f"{after.decode_utilization:.0%} busy; {after_layout.gpus} GPUs "
        f"(before {layout.gpus})",
        "disaggregated predictions are extrapolated (no measured disaggregated result in the fit)",
    ]
    return WhatIf(
        description=description,
        before=_outcome(before, per_gpu),
        after=_outcome(after, per_gpu),
        notes=notes,
    )
