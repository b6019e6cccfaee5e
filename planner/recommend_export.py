"""Export a recommendation: the ranking as CSV, and a self-contained HTML report with the
scenario, its assumptions, the charts, and the source and date of every price and measurement
it used."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

from planner.catalog import Catalog
from planner.csv_export import write_frame_csv
from planner.palette import gpu_color
from planner.perf.uncertainty import FAMILY_NAMES
from planner.recommend import (
    Recommendation,
    RecommendationResult,
    pareto_cost_vs_latency,
    ranking_rows,
    rejected_rows,
)
from planner.report import ReportSection, render_report

PLAN_ASSUMPTIONS = (
    "Throughput and latency are predictions of Servewise's performance model (a step-time "
    "model calibrated on measured serving results, driving a simulation of vLLM's continuous "
    "batching), with 80% intervals. 'confidence' says whether measured results exist near each "
    "configuration. Costs are instance list prices x instances bought for the peak load plus "
    "spare replicas; $/M tokens divide that by the tokens served at the observed average "
    "utilisation."
)


def best_configuration_text(best: Recommendation | None) -> str:
    """What an export says under "Best configuration": the plan's own launch command (its
    engine's: ``vllm serve``, ``python3 -m sglang.launch_server`` or ``trtllm-serve``) and, for
    an SGLang or TensorRT-LLM plan, the vLLM equivalent below it, labelled as not the plan
    (paragraphs apart: ``planner.report`` splits a section's text on blank lines)."""
    if best is None:
        return "No configuration meets the SLOs."
    family = best.plan.engine.family
    if family == "vllm" or best.disaggregated:
        return best.launch_command
    name = FAMILY_NAMES.get(family, family)
    return (
        f"{best.launch_command}\n\n"
        f"vLLM equivalent (not the plan: it was predicted on {name}; the same layout and "
        f"settings on vLLM, at vLLM's default memory share, not {name}'s):\n\n"
        f"{best.vllm_command}"
    )


def ranking_frame(result: RecommendationResult) -> pd.DataFrame:
    return pd.DataFrame(ranking_rows(result))


def write_csv(result: RecommendationResult, path: Path) -> Path:
    """The ranking as CSV, safe to open in a spreadsheet (``planner.csv_export``)."""
    return write_frame_csv(ranking_frame(result), path)


def cost_chart_spec(result: RecommendationResult, top: int = 15) -> dict[str, Any]:
    """$/M output tokens of the best configurations, one bar colour per GPU."""
    rows = result.ranked[:top]
    return {
        "data": [
            {
                "type": "bar",
                "orientation": "h",
                "y": [f"#{r.rank} {r.label} ({r.region})" for r in rows],
                "x": [r.usd_per_million_output_tokens for r in rows],
                "marker": {"color": [gpu_color(r.gpu) for r in rows]},
                "hovertemplate": "%{y}<br>$%{x:.2f} per M output tokens (predicted)<extra></extra>",
            }
        ],
        "layout": {
            "title": {"text": "Predicted cost per million output tokens at observed utilisation"},
            "xaxis": {"title": {"text": "USD per million output tokens (predicted)"}},
            "yaxis": {"autorange": "reversed", "automargin": True},
            "margin": {"l": 260},
        },
    }


def pareto_chart_spec(result: RecommendationResult) -> dict[str, Any]:
    """Cost against p99 TTFT for every ranked configuration; the frontier drawn as a line."""
    front = pareto_cost_vs_latency(result)
    by_gpu: dict[str, list[Any]] = {}
    for rec in result.ranked:
        by_gpu.setdefault(rec.gpu, []).append(rec)
    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "markers",
            "name": f"{gpu} (predicted)",
            "x": [r.pred_ttft_ms_p99 for r in recs],
            "y": [r.usd_per_million_output_tokens for r in recs],
            "text": [r.label for r in recs],
            "marker": {"color": gpu_color(gpu), "size": 9},
        }
        for gpu, recs in by_gpu.items()
    ]
    ordered = sorted(front, key=lambda r: r.pred_ttft_ms_p99)
    data.append(
        {
            "type": "scatter",
            "mode": "lines",
            "name": "Pareto frontier",
            "x": [r.pred_ttft_ms_p99 for r in ordered],
            "y": [r.usd_per_million_output_tokens for r in ordered],
            "line": {"color": "#57606a", "dash": "dot"},
        }
    )
    return {
        "data": data,
        "layout": {
            "title": {"text": "Cost against latency (predicted)"},
            "xaxis": {"title": {"text": "p99 time to first token, ms (predicted)"}},
            "yaxis": {"title": {"text": "USD per million output tokens (predicted)"}},
        },
    }


def sources_frame(result: RecommendationResult, catalog: Catalog) -> pd.DataFrame:
    """Every price the ranking used and every measured-result source behind the model fit."""
    rows = []
    seen = set()
    for rec in result.ranked:
        key = (rec.instance, rec.region, rec.pricing)
        if key in seen:
            continue
        seen.add(key)
        rows.append(
            {
                "kind": "price",
                "what": f"{rec.instance} {rec.region} {rec.pricing}",
                "value": f"${rec.usd_per_hour / max(rec.instances_total, 1):.4f}/h",
                "source": rec.price_source,
                "as_of": rec.price_as_of,
            }
        )
    counts = Counter((m.source, m.origin) for m in catalog.measured)
    for (source, origin), count in sorted(counts.items()):
        rows.append(
            {
                "kind": "measured results" + (" (yours)" if origin == "user" else ""),
                "what": f"{count} rows used to calibrate the performance model",
                "value": "",
                "source": source,
                "as_of": "see source reference (commit) in data/measured_results.csv",
            }
        )
    return pd.DataFrame(rows)


def write_html(result: RecommendationResult, catalog: Catalog, path: Path) -> Path:
    request = result.request
    demand = request.demand
    load = (
        f"{demand.avg_rate_rps:g} req/s average, {demand.peak:g} req/s peak"
        if demand.avg_rate_rps
        else f"{demand.concurrency} concurrent requests"
    )
    slo = request.slo
    scenario = (
        f"Model {request.model}; {request.input_len:,} input and {request.output_len:,} output "
        f"tokens a request; {load}; {demand.spare_replicas} spare replica(s); SLO p99 TTFT "
        f"{slo.ttft_p99_ms or '-'} ms, p99 TPOT {slo.tpot_p99_ms or '-'} ms; pricing "
        f"{request.search.pricing}."
    )
    sections = [
        ReportSection("Scenario", scenario + "\n\n" + PLAN_ASSUMPTIONS),
        ReportSection(
            "Ranking",
            "Cheapest per million output tokens first.",
            ranking_frame(result),
            [cost_chart_spec(result), pareto_chart_spec(result)],
        ),
        ReportSection(
            "Why the others were ruled out",
            table=pd.DataFrame(rejected_rows(result)),
        ),
        ReportSection("Sources and dates", table=sources_frame(result, catalog)),
    ]
    page = render_report(f"Servewise plan: {request.model}", sections)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path
