"""A diagnosis as text (the command line), table rows (the page, CSV), JSON, and the what-if plan.

:func:`fixed_plan` is the plan a fix leads to: the run's plan with the fix's engine settings
and layout changed, ready for the Verify page (one replica; a fix that adds replicas keeps the
replica as it is and says how many).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from planner.diagnosis.findings import Diagnosis, Finding, Fix, WhatIf
from planner.plan import plan_label

#: scenario fields a fix may change that a plan carries under the same name
PLAN_SETTINGS = (
    "gpu_memory_utilization",
    "kv_cache_dtype",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "enforce_eager",
    "precision",
)


def fixed_plan(plan: Mapping[str, Any] | None, fix: Fix | None) -> dict[str, Any] | None:
    """The run's plan with ``fix`` applied (None without a plan, or a fix that changes no
    setting of the deployment, such as routing or prompt advice)."""
    if not plan or fix is None or not fix.scenario_changes:
        return None
    changes = dict(fix.scenario_changes)
    out = dict(plan)
    touched = False
    for key in PLAN_SETTINGS:
        if key in changes:
            out[key] = changes[key]
            touched = True
    if "tp" in changes or "pp" in changes:
        out["tp"] = int(changes.get("tp", out.get("tp") or 1))
        out["pp"] = int(changes.get("pp", out.get("pp") or 1))
        out["num_gpus"] = out["tp"] * out["pp"]
        out["nodes"] = None
        touched = True
    for role in ("prefill", "decode"):  # a disaggregated plan's P:D ratio
        pool = out.get(role)
        wanted = changes.get(f"{role}_replicas")
        if isinstance(pool, Mapping) and wanted is not None:
            out[role] = {**pool, "replicas": int(wanted), "utilisation": None}
            touched = True
    if changes.get("kv_link") is not None and out.get("kv_link") is not None:
        out["kv_link"] = changes["kv_link"]
        touched = True
    if isinstance(out.get("decode"), Mapping) and touched:
        out["replicas"] = int(out["decode"]["replicas"])
    replicas = int(changes.get("replicas") or 1)
    if replicas > 1:
        out["replicas"] = replicas
        touched = True
    if not touched:
        return None
    out.pop("usd_per_hour", None)  # the price of the old deployment no longer applies
    out["label"] = plan_label(out) + (f" x {replicas} replicas" if replicas > 1 else "")
    out["derived_from"] = {"diagnosis_fix": fix.summary, "plan": plan.get("label")}
    return out


def _money(value: float | None) -> str:
    return "" if value is None else f"${value:,.2f}/h"


def what_if_text(w: WhatIf) -> str:
    def pair(label: str, before: float | None, after: float | None, unit: str = "") -> str:
        if before is None or after is None:
            return ""
        if not math.isfinite(before) or not math.isfinite(after):  # a queue without bound
            shown = [
                f"{v:,.1f}{unit}" if math.isfinite(v) else "unbounded" for v in (before, after)
            ]
            return f"{label} {shown[0]} -> {shown[1]}"
        change = f" ({(after - before) / before * 100:+.0f}%)" if before else ""
        return f"{label} {before:,.1f} -> {after:,.1f}{unit}{change}"

    parts = [
        pair("output tok/s", w.before.output_tok_per_s, w.after.output_tok_per_s),
        pair("p99 TTFT", w.before.ttft_ms_p99, w.after.ttft_ms_p99, " ms"),
        pair("p99 ITL", w.before.itl_ms_p99, w.after.itl_ms_p99, " ms"),
        pair("longest ITL", w.before.itl_ms_max, w.after.itl_ms_max, " ms"),
    ]
    b, a = w.before.usd_per_million_output_tokens, w.after.usd_per_million_output_tokens
    if b is not None and a is not None:
        parts.append(f"$/M output {b:,.3f} -> {a:,.3f}")
    if w.after.gpus != w.before.gpus:
        parts.append(f"GPUs {w.before.gpus} -> {w.after.gpus}")
    return "; ".join(p for p in parts if p)


def finding_rows(d: Diagnosis) -> list[dict[str, Any]]:
    """One row a finding, ranked: what the page's table and the CSV export show."""
    rows = []
    for rank, f in enumerate(d.findings, start=1):
        w = f.what_if
        rows.append(
            {
                "rank": rank,
                "mistake": f.number,
                "title": f.title,
                "status": f.status,
                "severity": f.severity,
                "usd_per_hour_at_stake": f.usd_per_hour_at_stake,
                "what was seen": f.headline,
                "fix": f.fix.summary if f.fix else None,
                "vllm serve flags": f.fix.vllm_args if f.fix else None,
                "sglang flags": f.fix.sglang_args if f.fix else None,
                "output tok/s before": w.before.output_tok_per_s if w else None,
                "output tok/s after": w.after.output_tok_per_s if w else None,
                "p99 TTFT ms before": w.before.ttft_ms_p99 if w else None,
                "p99 TTFT ms after": w.after.ttft_ms_p99 if w else None,
                "p99 ITL ms before": w.before.itl_ms_p99 if w else None,
                "p99 ITL ms after": w.after.itl_ms_p99 if w else None,
                "$/M output before": w.before.usd_per_million_output_tokens if w else None,
                "$/M output after": w.after.usd_per_million_output_tokens if w else None,
                "missing": "; ".join(f.missing) or None,
            }
        )
    return rows


def evidence_rows(f: Finding) -> list[dict[str, Any]]:
    return [
        {"evidence": e.name, "value": e.value, "unit": e.unit, "limit": e.limit, "note": e.note}
        for e in f.evidence
    ]


def to_json(d: Diagnosis) -> dict[str, Any]:
    """The diagnosis as JSON, with each fix's flag lines and the what-if plan spelled out."""
    out = d.model_dump(mode="json")
    for raw, f in zip(out["findings"], d.findings, strict=True):
        for key, fix in (("fix", f.fix), *((f"alt{i}", a) for i, a in enumerate(f.alternatives))):
            if fix is None:
                continue
            target = raw["fix"] if key == "fix" else raw["alternatives"][int(key[3:])]
            target["vllm_args"] = fix.vllm_args
            target["sglang_args"] = fix.sglang_args
            target["plan"] = fixed_plan(d.plan, fix)
    return out


def text_report(d: Diagnosis) -> str:
    """The diagnosis for a terminal: the run, the triage tree, ranked findings, what is missing."""
    lines = []
    what = d.source + (f" {d.run_id}" if d.run_id else "")
    lines.append(f"Diagnosis of {what}")
    if d.deployment:
        price = f" at ${d.usd_per_hour:,.2f}/h ({d.price_source})" if d.usd_per_hour else ""
        lines.append(f"  deployment: {d.deployment}{price}")
    s = d.summary
    figures = [
        f"{s['requests']:.0f} requests" if s.get("requests") else "",
        f"{s['duration_s']:.1f} s" if s.get("duration_s") else "",
        f"{s['output_throughput']:,.0f} output tok/s" if s.get("output_throughput") else "",
        f"TTFT p50/p99 {s['ttft_ms_p50']:,.0f}/{s['ttft_ms_p99']:,.0f} ms"
        if s.get("ttft_ms_p50") is not None and s.get("ttft_ms_p99") is not None
        else "",
        f"ITL p50/p99 {s['itl_ms_p50']:,.1f}/{s['itl_ms_p99']:,.1f} ms"
        if s.get("itl_ms_p50") is not None and s.get("itl_ms_p99") is not None
        else "",
    ]
    lines.append("  " + ", ".join(f for f in figures if f))
    lines.append("")
    lines.append("Triage")
    titles = {f.key: f.title for f in d.findings}
    for b in d.branches:
        mark = "[x]" if b.lit else "[ ]"
        tail = f"  -> {', '.join(titles[k] for k in b.found)}" if b.found else ""
        lines.append(f"  {mark} {b.question}{tail}")
    found = d.found
    lines.append("")
    lines.append(f"Findings ({len(found)}, ranked by money at stake)" if found else "No findings")
    for i, f in enumerate(found, start=1):
        money = _money(f.usd_per_hour_at_stake)
        lines.append(f"{i}. [{f.severity}] {f.title} (mistake {f.number})  {money}".rstrip())
        lines.append(f"   {f.headline}")
        for e in f.evidence:
            if e.value is not None or e.note:
                lines.append(f"   - {e.text()}")
        for label, fix in (("fix", f.fix), *(("also", a) for a in f.alternatives)):
            if fix is None:
                continue
            lines.append(f"   {label}: {fix.summary}")
            if fix.vllm_args:
                lines.append(f"     vllm serve ... {fix.vllm_args}")
            if fix.sglang_args:
                lines.append(f"     sglang:        {fix.sglang_args}")
            for action in fix.actions:
                lines.append(f"     * {action}")
            if fix.what_if is not None:
                lines.append(f"     predicted: {what_if_text(fix.what_if)}")
                for note in fix.what_if.notes:
                    lines.append(f"     ({note})")
        for note in f.notes:
            lines.append(f"   note: {note}")
    unjudged = [f for f in d.findings if f.status == "cannot_judge"]
    if unjudged:
        lines.append("")
        lines.append("Cannot judge from this run")
        for f in unjudged:
            lines.append(f"  - {f.title}: {f.headline}")
            for item in f.missing:
                lines.append(f"      missing: {item}")
            if f.fix is not None and f.fix.what_if is not None:
                lines.append(f"      option: {f.fix.summary}: {what_if_text(f.fix.what_if)}")
    clear = [f.title for f in d.findings if f.status == "clear"]
    if clear:
        lines.append("")
        lines.append("Clear: " + "; ".join(clear))
    return "\n".join(lines) + "\n"
