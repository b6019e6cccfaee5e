"""DataFrames the pages show and chart, built from planner records (no streamlit here).

Only reshaping and joining: every number comes from a planner function or a catalog record.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from planner.catalog import Catalog, MeasuredResult
from planner.cost import HOURS_PER_MONTH, GpuEconomics, monthly_cost, usd_per_million_tokens
from planner.errors import PlannerError
from planner.layouts import LayoutCandidate
from planner.recommend import Recommendation

GIB = 2**30


def spec_frame(economics: Sequence[GpuEconomics], catalog: Catalog) -> pd.DataFrame:
    """One row a GPU: its spec sheet next to ``planner.cost.gpu_economics``'s $/unit-hours."""
    rows = []
    for econ in economics:
        gpu = catalog.gpu(econ.gpu_id)
        rows.append(
            {
                "gpu": econ.gpu_id,
                "instance": econ.instance,
                "region": econ.region,
                "pricing": econ.pricing,
                "usd_per_gpu_hour": econ.usd_per_gpu_hour,
                "tflops_bf16": gpu.dense_tflops("bf16"),
                "tflops_fp8": gpu.dense_tflops("fp8"),
                "tflops_fp4": gpu.dense_tflops("fp4"),
                "memory_gb": gpu.memory_gb,
                "bandwidth_gbps": gpu.memory_bw_gbps,
                "usd_per_tflop_hour_bf16": econ.usd_per_dense_tflop_hour.get("bf16"),
                "usd_per_tflop_hour_fp8": econ.usd_per_dense_tflop_hour.get("fp8"),
                "usd_per_gb_hour": econ.usd_per_gb_hour,
                "usd_per_gbps_hour": econ.usd_per_gbps_hour,
                "flops_per_byte_bf16": econ.flops_per_byte_bf16,
                "gpu_source": gpu.source,
                "gpu_as_of": gpu.as_of.isoformat(),
            }
        )
    return pd.DataFrame(rows)


def _length_distance(result: MeasuredResult, input_len: float, output_len: float) -> float:
    return abs(math.log(result.input_len / input_len)) + abs(
        math.log(result.output_len / output_len)
    )


def measured_for_scenario(
    results: Iterable[MeasuredResult],
    model_id: str,
    input_len: float,
    output_len: float,
    *,
    max_length_ratio: float = 2.0,
) -> list[MeasuredResult]:
    """Measured results of ``model_id`` whose lengths are within ``max_length_ratio`` of the
    scenario's mean lengths: for each deployment (GPU, instance, layout, precision, engine)
    the nearest one in log length."""
    limit = 2 * math.log(max_length_ratio)
    best: dict[tuple[object, ...], MeasuredResult] = {}
    for result in results:
        if result.model.lower() != model_id.lower() or result.output_tok_per_s is None:
            continue
        distance = _length_distance(result, input_len, output_len)
        if distance > limit:
            continue
        key = (
            result.gpu,
            result.instance,
            result.tp,
            result.pp,
            result.num_gpus,
            result.precision,
            result.engine,
        )
        held = best.get(key)
        if held is None or distance < _length_distance(held, input_len, output_len):
            best[key] = result
    return list(best.values())


def measured_usd_per_hour(
    result: MeasuredResult, catalog: Catalog, economics: Sequence[GpuEconomics], pricing: str
) -> tuple[float, str] | None:
    """What the measured deployment costs an hour, and from which price.

    The run's own instance when it names one (x nodes), else the GPU's price per GPU-hour from
    ``gpu_economics`` x the GPUs it used.
    """
    if result.instance and result.instance in catalog.instances:
        try:
            price = catalog.price(result.instance, pricing=pricing)
        except PlannerError:
            price = None
        if price is not None:
            nodes = result.nodes or 1
            return price.usd_per_hour * nodes, f"{nodes} x {result.instance} ({price.region})"
    per_gpu = next((e for e in economics if e.gpu_id.lower() == result.gpu.lower()), None)
    if per_gpu is None:
        return None
    return (
        per_gpu.usd_per_gpu_hour * result.num_gpus,
        f"{result.num_gpus} x {result.gpu} at the {per_gpu.instance} price per GPU",
    )


def measured_cost_rows(
    results: Iterable[MeasuredResult],
    catalog: Catalog,
    economics: Sequence[GpuEconomics],
    *,
    pricing: str,
    utilisation: float,
) -> list[dict[str, object]]:
    """$/M output tokens of measured results, at their measured throughput and ``utilisation``."""
    rows = []
    for result in results:
        priced = measured_usd_per_hour(result, catalog, economics, pricing)
        if priced is None or not result.output_tok_per_s:
            continue
        usd_per_hour, price_note = priced
        rows.append(
            {
                "gpu": result.gpu,
                "label": f"{result.instance or result.gpu} TP{result.tp} PP{result.pp}"
                + (f" DP{result.dp}" if result.dp > 1 else "")
                + f" {result.precision} ({result.engine})",
                "kind": "measured",
                "usd_per_m_output": usd_per_million_tokens(
                    usd_per_hour, result.output_tok_per_s, utilisation
                ),
                "usd_low": float("nan"),
                "usd_high": float("nan"),
                "usd_per_hour": usd_per_hour,
                "output_tok_per_s": result.output_tok_per_s,
                "detail": (
                    f"{result.engine} {result.engine_version or ''}, {result.input_len} in / "
                    f"{result.output_len} out, {result.load}"
                    + (f" {result.concurrency:g}" if result.concurrency else "")
                    + f"; {result.output_tok_per_s:,.0f} output tok/s; {price_note}; "
                    f"source: {result.source}"
                ),
            }
        )
    return rows


MEMORY_COLUMNS = [
    "layout",
    "gpu",
    "instance",
    "nodes",
    "tp",
    "pp",
    "dp",
    "precision",
    "kv_cache_dtype",
    "total_gib",
    "weights_gib",
    "kv_gib",
    "activation_gib",
    "overhead_gib",
    "free_gib",
    "kv_capacity_tokens",
    "max_model_len",
    "feasible",
    "reason",
]


def memory_frame(layouts: Sequence[LayoutCandidate]) -> pd.DataFrame:
    """Per layout, one GPU's memory (the binding PP stage): weights, KV, activations, overhead,
    free, in GiB, from the layout's ``planner.memory`` plan."""
    rows = []
    for layout in layouts:
        plan = layout.memory
        if plan is None:
            continue
        overhead = (
            plan.non_torch_bytes
            + plan.cuda_graph_bytes
            + plan.framework_overhead_bytes
            + plan.driver_reserved_bytes
        )
        rows.append(
            {
                "layout": layout_label(layout),
                "gpu": layout.gpu_id,
                "instance": layout.instance,
                "nodes": layout.nodes,
                "tp": layout.tp,
                "pp": layout.pp,
                "dp": layout.dp,
                "precision": layout.precision,
                "kv_cache_dtype": layout.kv_cache_dtype,
                "total_gib": plan.total_bytes / GIB,
                "weights_gib": plan.weights_bytes / GIB,
                "kv_gib": plan.kv_bytes / GIB,
                "activation_gib": plan.activation_bytes / GIB,
                "overhead_gib": overhead / GIB,
                "free_gib": max(plan.free_bytes, 0.0) / GIB,
                "kv_capacity_tokens": plan.kv_capacity_tokens,
                "max_model_len": plan.max_model_len,
                "feasible": layout.feasible,
                "reason": layout.reason or "",
            }
        )
    return pd.DataFrame(rows, columns=MEMORY_COLUMNS)


def layout_label(layout: LayoutCandidate) -> str:
    """``[N x ]instance TPt PPp precision`` (the KV cache dtype is a page-wide choice)."""
    nodes = f"{layout.nodes} x " if layout.nodes > 1 else ""
    return f"{nodes}{layout.instance} TP{layout.tp} PP{layout.pp} {layout.precision}"


def default_layouts(layouts: Sequence[LayoutCandidate], limit: int = 6) -> list[LayoutCandidate]:
    """On each GPU type, the smallest feasible deployment holding one replica (fewest GPUs,
    then fewest pipeline stages, then the most KV capacity), cheapest GPU types first."""
    best: dict[str, LayoutCandidate] = {}

    def rank(layout: LayoutCandidate) -> tuple[int, int, int, float]:
        capacity = layout.memory.kv_capacity_tokens if layout.memory else 0
        return (layout.tp * layout.pp, layout.dp, layout.pp, -capacity)

    for layout in layouts:
        if not layout.feasible or layout.dp != 1:
            continue
        held = best.get(layout.gpu_id)
        if held is None or rank(layout) < rank(held):
            best[layout.gpu_id] = layout
    chosen = sorted(best.values(), key=lambda layout: (layout.tp * layout.pp, layout.gpu_id))
    return chosen[:limit]


def why_not(
    instance: str,
    ranked: pd.DataFrame,
    rejected: pd.DataFrame,
    catalog: Catalog,
    searched: Sequence[str],
    providers: Sequence[str],
    regions: Sequence[str],
    pricing: str,
) -> list[str]:
    """Sentences saying where ``instance`` stands in the recommendation and why."""
    inst = catalog.instance(instance)
    if instance not in searched:
        reasons = []
        if providers and inst.provider not in providers:
            reasons.append(f"its provider, {inst.provider}, is not among the chosen providers")
        priced = catalog.prices_for(instance, pricing=pricing)
        if not priced:
            listed = sorted({p.pricing.replace("_", " ") for p in catalog.prices_for(instance)})
            reasons.append(
                f"the catalog has no {pricing.replace('_', ' ')} price for it "
                f"(it lists: {', '.join(listed) or 'none'})"
            )
        elif regions and not any(p.region in regions for p in priced):
            reasons.append(
                f"it is not priced in the chosen regions (it is in "
                f"{', '.join(sorted({p.region for p in priced}))})"
            )
        return [f"{instance} was not searched: " + "; ".join(reasons or ["it was filtered out"])]
    lines = []
    if not ranked.empty:
        mine = ranked[ranked["instance"] == instance].sort_values("rank")
        for row in mine.head(3).itertuples():
            lines.append(
                f"Ranked #{row.rank}: {row.label} in {row.region} at "
                f"${row.usd_per_million_output_tokens:,.2f} per M output tokens"
                + (" (the recommendation)" if row.rank == 1 else "")
            )
    if not rejected.empty:
        mine = rejected[rejected["instance"] == instance]
        seen: set[str] = set()
        for row in mine.itertuples():
            if row.reason in seen:
                continue
            seen.add(str(row.reason))
            count = int(float(str(row.nodes)))
            nodes = f"{count} x " if count > 1 else ""
            lines.append(f"Rejected {nodes}TP{row.tp} x PP{row.pp} {row.precision}: {row.reason}")
            if len(seen) >= 8:
                break
    return lines or [f"No layout of the model was evaluated on {instance}."]


# ----- cost of ranked deployments ---------------------------------------------------------------
DEMAND_SHAPES = {"business": 14, "evening": 20, "flat": None}  # hour of the peak


def demand_curve(shape: str, avg_rps: float, peak_rps: float) -> pd.DataFrame:
    """Requests/s in each hour of a day: a cosine around ``avg_rps`` peaking at ``peak_rps``
    at the shape's peak hour (never below 5% of the peak), or flat at the average."""
    hours = np.arange(24)
    peak_hour = DEMAND_SHAPES[shape]
    if peak_hour is None or peak_rps <= avg_rps:
        rps = np.full(24, avg_rps)
    else:
        rps = avg_rps + (peak_rps - avg_rps) * np.cos(2 * np.pi * (hours - peak_hour) / 24)
        rps = np.maximum(rps, 0.05 * peak_rps)
    return pd.DataFrame({"hour": hours, "requests_per_s": rps})


def usd_per_replica_hour(rec: Recommendation) -> float:
    """One replica's share of the bill: instance price x instances a group / replicas a group."""
    return rec.usd_per_hour / rec.instances_total * rec.nodes / max(rec.dp, 1)


def deployment_label(rec: Recommendation) -> str:
    return f"#{rec.rank} {rec.label} ({rec.region})"


def utilisation_curves(
    recs: Sequence[Recommendation], output_len: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """$/M output tokens of each deployment from 5% to 100% busy, and where it is now:
    ``planner.cost.usd_per_million_tokens`` over the capacity the deployment buys."""
    rows, now = [], []
    for rec in recs:
        capacity_tps = rec.replicas * rec.max_rps_per_replica * output_len
        for pct in range(5, 101, 5):
            rows.append(
                {
                    "deployment": deployment_label(rec),
                    "gpu": rec.gpu,
                    "utilisation_pct": pct,
                    "usd_per_m_output": usd_per_million_tokens(
                        rec.usd_per_hour, capacity_tps, pct / 100
                    ),
                }
            )
        now.append(
            {
                "deployment": deployment_label(rec),
                "gpu": rec.gpu,
                "utilisation_pct": 100 * rec.utilisation,
                "usd_per_m_output": rec.usd_per_million_output_tokens,
            }
        )
    columns = ["deployment", "gpu", "utilisation_pct", "usd_per_m_output"]
    return pd.DataFrame(rows, columns=columns), pd.DataFrame(now, columns=columns)


def monthly_rows(
    recs: Sequence[Recommendation], demand: pd.DataFrame, spare_replicas: int
) -> pd.DataFrame:
    """``planner.cost.monthly_cost`` of each deployment for the demand curve's average and
    peak."""
    avg, peak = float(demand["requests_per_s"].mean()), float(demand["requests_per_s"].max())
    rows = []
    for rec in recs:
        month = monthly_cost(
            usd_per_replica_hour(rec),
            avg_requests_per_s=avg,
            peak_requests_per_s=peak,
            replica_requests_per_s=rec.max_rps_per_replica,
            spare_replicas=spare_replicas,
        )
        rows.append(
            {
                "deployment": deployment_label(rec),
                "gpu": rec.gpu,
                "replicas": month.replicas,
                "capacity_rps": month.replicas_for_peak * rec.max_rps_per_replica,
                "usd_per_hour": month.usd_per_hour,
                "usd_per_month": month.usd_per_month,
                "usd_per_month_autoscaled": month.usd_per_month_autoscaled,
                "avg_utilisation": month.avg_utilisation,
                "usd_per_request": month.usd_per_request,
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "deployment",
            "gpu",
            "replicas",
            "capacity_rps",
            "usd_per_hour",
            "usd_per_month",
            "usd_per_month_autoscaled",
            "avg_utilisation",
            "usd_per_request",
        ],
    )


def gpu_hour_points(
    recs: Sequence[Recommendation],
    demand: pd.DataFrame,
    tokens_per_request: float,
    spare_replicas: int,
) -> pd.DataFrame:
    """GPU-hours a month against tokens a month as the demand curve scales from 1/4 to 4x."""
    avg, peak = float(demand["requests_per_s"].mean()), float(demand["requests_per_s"].max())
    rows = []
    for rec in recs:
        for scale in np.geomspace(0.25, 4.0, 33):
            month = monthly_cost(
                usd_per_replica_hour(rec),
                avg_requests_per_s=avg * scale,
                peak_requests_per_s=peak * scale,
                replica_requests_per_s=rec.max_rps_per_replica,
                spare_replicas=spare_replicas,
            )
            rows.append(
                {
                    "deployment": deployment_label(rec),
                    "gpu": rec.gpu,
                    "tokens_per_month_b": avg
                    * scale
                    * tokens_per_request
                    * 3600
                    * HOURS_PER_MONTH
                    / 1e9,
                    "gpu_hours_per_month": month.replicas * rec.tp * rec.pp * HOURS_PER_MONTH,
                }
            )
    return pd.DataFrame(
        rows, columns=["deployment", "gpu", "tokens_per_month_b", "gpu_hours_per_month"]
    )


def predicted_cost_rows(
    recs: Sequence[Recommendation], output_len: int, utilisation: float, limit: int = 15
) -> list[dict[str, object]]:
    """$/M output tokens of the cheapest ranked configuration of each instance, at
    ``utilisation`` of the capacity it buys (its predicted rate at the SLO)."""
    rows: list[dict[str, object]] = []
    seen: set[str] = set()
    for rec in recs:
        if rec.instance in seen:
            continue
        seen.add(rec.instance)
        capacity_tps = rec.replicas * rec.max_rps_per_replica * output_len
        rows.append(
            {
                "gpu": rec.gpu,
                "label": f"{rec.instance} TP{rec.tp} PP{rec.pp} {rec.precision} (vllm)",
                "kind": "predicted",
                "usd_per_m_output": usd_per_million_tokens(
                    rec.usd_per_hour, capacity_tps, utilisation
                ),
                "usd_low": float("nan"),
                "usd_high": float("nan"),
                "usd_per_hour": rec.usd_per_hour,
                "output_tok_per_s": capacity_tps,
                "detail": (
                    f"rank #{rec.rank} on the Plan page; {rec.replicas} replicas x "
                    f"{rec.max_rps_per_replica:,.2f} req/s at the SLO; {rec.confidence}; "
                    f"{rec.region}, {rec.price_source}"
                ),
            }
        )
        if len(rows) >= limit:
            break
    return rows
