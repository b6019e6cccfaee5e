"""Helpers the checks share: building a finding, the engine flags of a fix, percentiles."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from planner.diagnosis.evidence import TimeSeries
from planner.diagnosis.findings import (
    MISTAKES_BY_KEY,
    Chart,
    Evidence,
    Finding,
    Fix,
    FlagChange,
    Series,
    Severity,
    Status,
)
from planner.diagnosis.whatif import DiagnosisContext, saved_usd_per_hour


def finding(
    key: str,
    status: Status,
    headline: str,
    *,
    severity: Severity | None = None,
    evidence: Sequence[Evidence] = (),
    missing: Sequence[str] = (),
    chart: Chart | None = None,
    fix: Fix | None = None,
    alternatives: Sequence[Fix] = (),
    usd_per_hour_at_stake: float | None = None,
    notes: Sequence[str] = (),
) -> Finding:
    mistake = MISTAKES_BY_KEY[key]
    return Finding(
        key=key,
        title=mistake.title,
        number=mistake.number,
        branch=mistake.branch,
        status=status,
        severity=severity if status == "found" else None,
        headline=headline,
        evidence=list(evidence),
        missing=list(missing),
        chart=chart,
        fix=fix,
        alternatives=list(alternatives),
        usd_per_hour_at_stake=usd_per_hour_at_stake if status == "found" else None,
        notes=list(notes),
    )


def cannot_judge(key: str, headline: str, missing: Sequence[str], **kwargs: Any) -> Finding:
    return finding(key, "cannot_judge", headline, missing=missing, **kwargs)


def best_fix(ctx: DiagnosisContext, fixes: Sequence[Fix]) -> tuple[Fix | None, list[Fix]]:
    """The fix whose what-if frees the most money (then the lowest p99 TTFT); the rest after.
    Fixes without a what-if keep their order after those with one."""
    if not fixes:
        return None, []

    def key(f: Fix) -> tuple[int, float, float]:
        w = f.what_if
        if w is None:
            return 1, 0.0, 0.0
        per_gpu_after = w.after.output_tok_per_s / max(1, w.after.gpus)
        return 0, -per_gpu_after, w.after.ttft_ms_p99

    ranked = sorted(fixes, key=key)
    return ranked[0], ranked[1:]


def money(ctx: DiagnosisContext, fix: Fix | None) -> float | None:
    return saved_usd_per_hour(ctx, fix.what_if if fix is not None else None)


# ----- engine flags (vLLM `vllm serve`, SGLang `python -m sglang.launch_server`) ---------------
def flag_gpu_memory_utilization(before: float | None, after: float) -> FlagChange:
    return FlagChange(
        setting="gpu_memory_utilization",
        before=before,
        after=after,
        vllm=f"--gpu-memory-utilization {after:g}",
        sglang=f"--mem-fraction-static {after:g}",
    )


def flag_kv_cache_dtype(before: str | None, after: str) -> FlagChange:
    return FlagChange(
        setting="kv_cache_dtype",
        before=before,
        after=after,
        vllm=f"--kv-cache-dtype {after}",
        sglang="--kv-cache-dtype fp8_e5m2" if after.startswith("fp8") else None,
    )


def flag_max_num_seqs(before: int | None, after: int) -> FlagChange:
    return FlagChange(
        setting="max_num_seqs",
        before=before,
        after=after,
        vllm=f"--max-num-seqs {after}",
        sglang=f"--max-running-requests {after}",
    )


def flag_max_num_batched_tokens(before: int | None, after: int) -> FlagChange:
    return FlagChange(
        setting="max_num_batched_tokens",
        before=before,
        after=after,
        vllm=f"--max-num-batched-tokens {after}",
        sglang=f"--chunked-prefill-size {after}",
    )


def flag_chunked_prefill(before: bool | None, after: bool) -> FlagChange:
    return FlagChange(
        setting="enable_chunked_prefill",
        before=before,
        after=after,
        vllm="--enable-chunked-prefill" if after else "--no-enable-chunked-prefill",
        sglang=None if after else "--chunked-prefill-size -1",
    )


def flag_prefix_caching(before: bool | None, after: bool) -> FlagChange:
    return FlagChange(
        setting="enable_prefix_caching",
        before=before,
        after=after,
        vllm="--enable-prefix-caching" if after else "--no-enable-prefix-caching",
        sglang="(drop --disable-radix-cache)" if after else "--disable-radix-cache",
    )


def flag_enforce_eager(before: bool | None, after: bool) -> FlagChange:
    return FlagChange(
        setting="enforce_eager",
        before=before,
        after=after,
        vllm="--enforce-eager" if after else "(drop --enforce-eager)",
        sglang="--disable-cuda-graph" if after else "(drop --disable-cuda-graph)",
    )


def flag_layout(before: tuple[int, int], tp: int, pp: int) -> list[FlagChange]:
    changes = []
    if tp != before[0]:
        changes.append(
            FlagChange(
                setting="tp",
                before=before[0],
                after=tp,
                vllm=f"--tensor-parallel-size {tp}",
                sglang=f"--tp-size {tp}",
            )
        )
    if pp != before[1]:
        changes.append(
            FlagChange(
                setting="pp",
                before=before[1],
                after=pp,
                vllm=f"--pipeline-parallel-size {pp}",
                sglang=f"--pp-size {pp}",
            )
        )
    return changes


def flag_replicas(before: int, after: int) -> FlagChange:
    return FlagChange(
        setting="replicas",
        before=before,
        after=after,
        vllm=f"{after} replicas behind the load balancer (or --data-parallel-size {after})",
        sglang=f"--dp-size {after}",
    )


# ----- numbers ---------------------------------------------------------------------------------
def percentile(values: np.ndarray, q: float) -> float | None:
    v = values[np.isfinite(values)]
    return float(np.percentile(v, q)) if v.size else None


def series(name: str, s: TimeSeries | None, **kwargs: Any) -> Series | None:
    if s is None or len(s) == 0:
        return None
    return Series(name=name, x=_round(s.t_s), y=_round(s.value), **kwargs)


def _round(values: np.ndarray, digits: int = 4) -> list[float]:
    return [round(float(v), digits) for v in values]


def points(name: str, x: np.ndarray, y: np.ndarray, *, limit: int = 4000, **kwargs: Any) -> Series:
    """A series of at most ``limit`` points (evenly thinned, the largest ``y`` always kept)."""
    if x.size > limit:
        keep = np.unique(
            np.concatenate(
                [np.linspace(0, x.size - 1, limit // 2).astype(int), np.argsort(y)[-limit // 2 :]]
            )
        )
        x, y = x[keep], y[keep]
    return Series(name=name, x=_round(x), y=_round(y), **kwargs)


def chart(
    title: str,
    x_label: str,
    y_label: str,
    parts: Sequence[Series | None],
    *,
    y2_label: str | None = None,
    thresholds: Sequence[tuple[str, float]] = (),
) -> Chart | None:
    kept = [p for p in parts if p is not None]
    if not kept:
        return None
    return Chart(
        title=title,
        x_label=x_label,
        y_label=y_label,
        y2_label=y2_label,
        series=kept,
        thresholds=list(thresholds),
    )
