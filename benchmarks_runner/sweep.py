"""Sweeps over concurrency or request rate, and a search for the highest rate meeting SLOs.

Each point is an ordinary run (its own run directory). The SLO search treats a rate as
feasible when at least ``attainment`` of the measured requests met every SLO (goodput /
request throughput) and none failed beyond ``max_failed_fraction``; it doubles the rate
until a point fails, then bisects between the last feasible and the first infeasible rate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks_runner.config import RunConfig
from benchmarks_runner.runner import ProgressSnapshot, RunResult, run_benchmark
from benchmarks_runner.workload import RequestSpec

SpecFactory = Callable[[RunConfig], list[RequestSpec]]


async def run_sweep(
    base: RunConfig,
    kind: str,
    values: Sequence[float],
    make_specs: SpecFactory,
    runs_dir: Path,
    *,
    plan: dict[str, Any] | None = None,
    progress: Callable[[ProgressSnapshot], None] | None = None,
) -> list[RunResult]:
    """One run per value of ``concurrency`` (closed loop) or ``rate`` (open loop)."""
    if kind not in ("concurrency", "rate"):
        raise ValueError(f"kind={kind!r}: allowed 'concurrency' or 'rate'")
    results = []
    for v in values:
        if kind == "concurrency":
            cfg = base.model_copy(update={"load": "concurrency", "concurrency": int(v)})
        else:
            cfg = base.model_copy(update={"load": "rate", "request_rate": float(v)})
        cfg = cfg.model_copy(update={"workload": base.workload | {"sweep": {kind: v}}})
        results.append(
            await run_benchmark(cfg, make_specs(cfg), runs_dir, plan=plan, progress=progress)
        )
    return results


def slo_attainment(result: RunResult) -> float:
    """Fraction of measured requests that met every SLO (0 if none succeeded)."""
    s = result.summary or {}
    thr = s.get("request_throughput") or 0.0
    good = s.get("request_goodput") or 0.0
    completed = s.get("completed") or 0
    measured = s.get("num_measured_requests") or completed
    if not thr or not measured:
        return 0.0
    return (good / thr) * (completed / measured)


@dataclass
class SearchResult:
    best_rate: float | None
    points: list[tuple[float, float, str]] = field(default_factory=list)  # rate, att., run_id

    def as_dict(self) -> dict[str, Any]:
        return {
            "best_rate": self.best_rate,
            "points": [
                {"request_rate": r, "slo_attainment": a, "run_id": i} for r, a, i in self.points
            ],
        }


async def search_max_rate(
    base: RunConfig,
    make_specs: SpecFactory,
    runs_dir: Path,
    *,
    slos_ms: dict[str, float],
    attainment: float = 0.9,
    start_rate: float = 1.0,
    max_rate: float = 1e4,
    max_runs: int = 8,
    rel_tolerance: float = 0.1,
    plan: dict[str, Any] | None = None,
) -> SearchResult:
    """Highest request rate whose SLO attainment is at least ``attainment``."""
    if not slos_ms:
        raise ValueError("slos_ms is empty: give at least one of ttft, tpot, e2el (ms)")
    if not 0 < attainment <= 1:
        raise ValueError(f"attainment={attainment}: allowed range (0, 1]")
    out = SearchResult(None)
    lo: float | None = None
    hi: float | None = None
    rate = start_rate
    for _ in range(max_runs):
        cfg = base.model_copy(
            update={
                "load": "rate",
                "request_rate": rate,
                "goodput_slos_ms": dict(slos_ms),
                "workload": base.workload | {"slo_search": {"request_rate": rate}},
            }
        )
        res = await run_benchmark(cfg, make_specs(cfg), runs_dir, plan=plan)
        att = slo_attainment(res)
        out.points.append((rate, att, res.run_id))
        if att >= attainment:
            lo = rate
            out.best_rate = rate
        else:
            hi = rate
        if hi is None:
            if rate >= max_rate:
                break
            rate = min(rate * 2, max_rate)
        elif lo is None:
            rate = rate / 2
            if rate < start_rate / 64:
                break
        else:
            if (hi - lo) / hi <= rel_tolerance:
                break
            rate = (lo + hi) / 2
    return out
