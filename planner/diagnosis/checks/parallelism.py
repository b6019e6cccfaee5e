"""Mistake 8: parallelism that fights the interconnect (multi-GPU scaling poor).

Tensor parallelism all-reduces twice a layer; over PCIe without peer-to-peer every all-reduce
is staged through host memory. The check prices one steady engine step of the run (its mean
running batch at its mean context, a share ``1 / output length`` of it prefilling) with the
performance model's step terms and reads the share of the step spent in all-reduce (bytes and
calls on the plan's link class) and in pipeline hops. Found when collectives take at least
:data:`COMM_SHARE` of the step (high from :data:`COMM_SHARE_HIGH`).

The fix is the best other layout of the same GPUs (every TP x PP x replicas that multiplies to
today's GPUs), predicted at the run's load: TP kept inside the fast link, PP across what is
slow, replicas for throughput (vLLM's parallelism guide: TP to the GPUs per node, PP to the
nodes). It must beat today's tokens/s per GPU by :data:`MIN_GAIN`; otherwise the finding says
only that the instance's link is the limit. Money at stake:
:func:`~planner.diagnosis.whatif.saved_usd_per_hour` of the fix.
"""

from __future__ import annotations

import numpy as np

from planner.diagnosis.checks.base import (
    best_fix,
    cannot_judge,
    chart,
    finding,
    flag_layout,
    flag_replicas,
    money,
)
from planner.diagnosis.checks.throughput import mean_running_batch
from planner.diagnosis.evidence import RunEvidence
from planner.diagnosis.findings import Chart, Evidence, Finding, Fix, Series
from planner.diagnosis.whatif import DiagnosisContext, with_what_if
from planner.perf.scenario import Scenario
from planner.perf.step_time import FEATURES, StepBatch, step_features

KEY = "parallelism_links"
COMM_SHARE = 0.25
COMM_SHARE_HIGH = 0.40
MIN_GAIN = 1.10

#: step terms by what they are, for the breakdown: every step term is in one group (the
#: request path is paid once a request, not a step; idle time is no step's work)
GROUPS: dict[str, tuple[str, ...]] = {
    "GPU work (weights, KV, FLOPs)": (
        "roofline",
        "weight_read",
        "expert_read",
        "expert_activation",
        "kv_read",
        "kv_read_fp8",
        "gemm",
        "expert_gemm",
        "attention",
    ),
    "all-reduce": tuple(f for f in FEATURES if f.startswith(("allreduce_", "ar_calls_"))),
    "pipeline hops": ("pp_hops", "net_hops", "net_transfer"),
    "launches and scheduling": (
        "layers",
        "moe_layers",
        "layer_floor",
        "forward_passes",
        "draft_passes",
        "sequences",
        "host_overlapped",
        "eager_layers",
        "eager_floor",
    ),
}
LINK_NAMES = {
    "nvlink": "NVLink",
    "pcie_p2p": "PCIe with peer-to-peer",
    "pcie_host": "PCIe staged through host memory (no P2P)",
}


def step_breakdown(
    ctx: DiagnosisContext, scenario: Scenario, batch: float, input_len: float, output_len: float
) -> dict[str, float]:
    """Seconds of one steady step of ``scenario`` by :data:`GROUPS`."""
    assert ctx.model is not None
    dep = ctx.model.deployment(scenario)
    c = ctx.model.coefficients_of(scenario, dep)
    step = StepBatch()
    b = max(1.0, batch)
    prefilling = b / max(1.0, output_len)
    step.add_decode(b - prefilling, input_len + output_len / 2, dep.sliding_window)
    step.add_prefill(prefilling, input_len, 0.0, dep.sliding_window)
    parts = np.asarray(c) * step_features(step, dep)
    index = {name: i for i, name in enumerate(FEATURES)}
    return {group: float(sum(parts[index[n]] for n in names)) for group, names in GROUPS.items()}


def check(ev: RunEvidence, ctx: DiagnosisContext) -> Finding:
    sc = ctx.scenario
    if sc is None or ctx.model is None:
        return cannot_judge(
            KEY,
            "The layout and its links are not in the run.",
            [ctx.scenario_problem or "a performance model"],
        )
    if sc.tp == 1 and sc.pp == 1:
        return finding(KEY, "clear", "One GPU a replica: no collectives to wait for.")
    batch, _, _ = mean_running_batch(ev)
    dep = ctx.model.deployment(sc)
    parts = step_breakdown(
        ctx, sc, batch or float(sc.concurrency or 1), sc.mean_input_len, sc.mean_output_len
    )
    total = sum(parts.values()) or 1.0
    comm = (parts["all-reduce"] + parts["pipeline hops"]) / total
    evidence = [
        Evidence(name="layout", value=None, note=f"TP{sc.tp} x PP{sc.pp} on {sc.gpu}"),
        Evidence(
            name="link between the TP group's GPUs",
            value=dep.link_bw * 2 / 1e9,
            unit="GB/s",
            note=LINK_NAMES.get(dep.link_class, dep.link_class),
        ),
        Evidence(name="share of a step in all-reduce", value=parts["all-reduce"] / total),
        Evidence(name="share of a step in pipeline hops", value=parts["pipeline hops"] / total),
        Evidence(name="share in collectives", value=comm, limit=COMM_SHARE),
    ]
    if comm < COMM_SHARE:
        return finding(
            KEY,
            "clear",
            f"Collectives take {comm:.0%} of a step on {LINK_NAMES.get(dep.link_class)}.",
            evidence=evidence,
            chart=_breakdown_chart({f"TP{sc.tp} x PP{sc.pp} (now)": parts}),
        )
    fixes = []
    gpus = sc.tp * sc.pp
    for tp in _divisors(gpus):
        for pp in _divisors(gpus // tp):
            replicas = gpus // (tp * pp)
            if (tp, pp, replicas) == (sc.tp, sc.pp, 1):
                continue
            changes = flag_layout((sc.tp, sc.pp), tp, pp)
            if replicas > 1:
                changes.append(flag_replicas(1, replicas))
            fixes.append(
                with_what_if(
                    ctx,
                    Fix(
                        summary=f"TP{tp} x PP{pp}"
                        + (f" x {replicas} replicas" if replicas > 1 else "")
                        + f" on the same {gpus} GPUs",
                        changes=changes,
                        scenario_changes={"tp": tp, "pp": pp, "replicas": replicas},
                        actions=[
                            "keep tensor parallelism inside one NVLink domain; pipeline "
                            "parallelism across slow links; data-parallel replicas for "
                            "throughput",
                        ],
                    ),
                )
            )
    fixes = [f for f in fixes if f.what_if is not None]
    fix, alternatives = best_fix(ctx, fixes)
    now_per_gpu = None
    if fix is not None and fix.what_if is not None:
        w = fix.what_if
        now_per_gpu = w.before.output_tok_per_s / max(1, w.before.gpus)
        if w.after.output_tok_per_s / max(1, w.after.gpus) < MIN_GAIN * now_per_gpu:
            alternatives = [fix, *alternatives]
            fix = None
    link_fix = Fix(
        summary="An instance whose GPUs talk over NVLink (or PCIe peer-to-peer)",
        actions=[
            "measure the group's bus bandwidth with nccl-tests at your TP size",
            "compare instances on the Plan page with the same GPU count",
        ],
    )
    if fix is None:
        fix, alternatives = link_fix, alternatives
    else:
        alternatives = [*alternatives, link_fix]
    bars = {f"TP{sc.tp} x PP{sc.pp} (now)": parts}
    if fix.scenario_changes:
        tp, pp = int(fix.scenario_changes["tp"]), int(fix.scenario_changes["pp"])
        per_replica = max(1.0, (batch or 1.0) / int(fix.scenario_changes.get("replicas") or 1))
        bars[fix.summary.split(" on ")[0]] = step_breakdown(
            ctx,
            sc.model_copy(update={"tp": tp, "pp": pp, "num_gpus": tp * pp, "nodes": None}),
            per_replica,
            sc.mean_input_len,
            sc.mean_output_len,
        )
    return finding(
        KEY,
        "found",
        f"TP{sc.tp} spends {comm:.0%} of every step in collectives over "
        f"{LINK_NAMES.get(dep.link_class, dep.link_class)}.",
        severity="high" if comm >= COMM_SHARE_HIGH else "medium",
        evidence=evidence,
        chart=_breakdown_chart(bars),
        fix=fix,
        alternatives=alternatives,
        usd_per_hour_at_stake=money(ctx, fix),
    )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _breakdown_chart(layouts: dict[str, dict[str, float]]) -> Chart | None:
    names = list(layouts)
    series = [
        Series(
            name=group,
            x=names,
            y=[round(layouts[n][group] * 1e3, 4) for n in names],
            kind="bar",
        )
        for group in GROUPS
    ]
    return chart(
        "Where a step's time goes (predicted, per GPU)",
        "layout",
        "ms per step",
        series,
    )
