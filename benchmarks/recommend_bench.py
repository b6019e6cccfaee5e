"""How long a recommendation search over the whole embedded catalog takes, and a re-rank.

    .venv/bin/python benchmarks/recommend_bench.py

Prints the time of: the performance-model fit (once per process), a cold search over every
instance of every provider for Llama-3.1-70B (2,048 in / 512 out, 2 req/s peak, p99 TTFT 5 s,
p99 TPOT 150 ms), a re-rank after the utilisation changes (no prediction at all), a re-rank
after the peak rate changes (only layouts that newly make the shortlist are searched), and a
sensitivity analysis (+-20% on five inputs).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog import load_catalog
from planner.perf.model import get_performance_model
from planner.recommend import (
    Demand,
    RecommendRequest,
    SearchSpace,
    Slo,
    perf_predictor,
    recommend,
    sensitivity,
)


def timed(label: str, fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = fn()
    print(f"{label:<58} {time.perf_counter() - start:7.2f} s", flush=True)
    return value


def main() -> None:
    catalog = load_catalog()
    perf = timed(
        "fit the performance model (526 measured rows)", lambda: get_performance_model(catalog)
    )
    request = RecommendRequest(
        model="meta-llama/Llama-3.1-70B-Instruct",
        input_len=2048,
        output_len=512,
        demand=Demand(avg_rate_rps=1.0, peak_rate_rps=2.0),
        slo=Slo(ttft_p99_ms=5000, tpot_p99_ms=150),
        search=SearchSpace(),
    )
    predictor = perf_predictor(catalog, request, perf)
    result = timed(
        f"cold search, all {len(catalog.instances)} instances, every provider",
        lambda: recommend(catalog, request, predictor),
    )
    print(
        f"  {len(result.ranked)} ranked, {len(result.rejected)} rejected, "
        f"{result.evaluations} rate searches; best: {result.best.label if result.best else None}"
    )
    busier = request.model_copy(
        update={"demand": request.demand.model_copy(update={"utilisation": 0.8})}
    )
    again = timed(
        "re-rank after a utilisation change", lambda: recommend(catalog, busier, predictor)
    )
    print(f"  {again.evaluations} new rate searches")
    peak = request.model_copy(
        update={"demand": request.demand.model_copy(update={"peak_rate_rps": 3.0})}
    )
    again = timed("re-rank after a peak-rate change", lambda: recommend(catalog, peak, predictor))
    print(f"  {again.evaluations} new rate searches")
    rows = timed(
        "sensitivity, +-20% on five inputs",
        lambda: sensitivity(catalog, request, predictor, change_pct=20, base=result),
    )
    for row in rows:
        delta = row.delta_pct or 0.0
        print(f"  {row.factor:<13} {row.change_pct:+5.0f}%  best {row.best}  {delta:+6.1f}%")


if __name__ == "__main__":
    main()
