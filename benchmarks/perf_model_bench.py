"""Speed of the performance model (a benchmark to read, not a timed test).

    .venv/bin/python benchmarks/perf_model_bench.py

Prints simulated requests per second of wall time for 1,000-request closed-loop runs (fixed
lengths, drawn lengths, the TensorRT-LLM scheduler), the time of one rate evaluation and of a
max-rate-under-SLO search, the time to fit on every stored measured row and the time to predict
every one of them.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog import load_catalog
from planner.perf.calibration import scenario_from_measured
from planner.perf.model import PerformanceModel
from planner.perf.scenario import Scenario
from planner.recommend import Slo, max_rate_meeting_slo
from planner.workload import LengthDistribution

T = TypeVar("T")


def timed(fn: Callable[[], T], repeat: int = 5) -> tuple[float, T]:
    """Median wall seconds of ``repeat`` calls, and the last result."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    catalog = load_catalog()
    start = time.perf_counter()
    model = PerformanceModel(catalog).fit(catalog.measured)
    fit_s = time.perf_counter() - start
    print(
        f"fit on {len(catalog.measured)} stored measured rows (cold, simulating each): "
        f"{fit_s:.1f} s"
    )

    closed = {
        "vLLM, 1,000 requests, concurrency 64, 1024/256 (fixed lengths)": Scenario(
            model="meta-llama/Llama-3.1-8B-Instruct",
            gpu="L40S",
            input_len=1024,
            output_len=256,
            concurrency=64,
            num_requests=1000,
        ),
        "vLLM, 1,000 requests, concurrency 64, lognormal lengths (mean 1024/256)": Scenario(
            model="meta-llama/Llama-3.1-8B-Instruct",
            gpu="L40S",
            input_dist=LengthDistribution.lognormal(1024, 600, max_tokens=8192),
            output_dist=LengthDistribution.lognormal(256, 150, max_tokens=2048),
            concurrency=64,
            num_requests=1000,
        ),
        "vLLM 70B TP4 on g6e.12xlarge, 1,000 requests, concurrency 32, 2048/512": Scenario(
            model="meta-llama/Llama-3.1-70B-Instruct",
            gpu="L40S",
            tp=4,
            instance="g6e.12xlarge",
            input_len=2048,
            output_len=512,
            concurrency=32,
            num_requests=1000,
        ),
        "TensorRT-LLM in-flight, 1,000 requests, concurrency 256, 1000/1000": Scenario(
            engine="tensorrt-llm",
            model="meta-llama/Llama-3.1-70B-Instruct",
            precision="fp8",
            gpu="H100-SXM",
            tp=4,
            input_len=1000,
            output_len=1000,
            concurrency=256,
            num_requests=1000,
        ),
    }
    print("\nclosed-loop discrete-event simulation (prediction included):")
    for label, scenario in closed.items():
        model.predict(scenario)  # resolve the deployment once
        seconds, _ = timed(partial(model.predict, scenario))
        print(f"  {label}: {seconds * 1e3:7.1f} ms -> {1000 / seconds:9,.0f} requests/s")

    rate = Scenario(
        model="meta-llama/Llama-3.1-70B-Instruct",
        gpu="L40S",
        tp=4,
        instance="g6e.12xlarge",
        input_len=1024,
        output_len=256,
        load="rate",
        request_rate=0.5,
        num_requests=300,
    )
    model.predict(rate)
    seconds, _ = timed(lambda: model.predict(rate))
    print(f"\none rate evaluation (300 Poisson requests, 70B TP4): {seconds * 1e3:.1f} ms")
    slo = Slo(ttft_p99_ms=3000, tpot_p99_ms=150)
    search_s, result = timed(lambda: max_rate_meeting_slo(model, rate, slo), repeat=3)
    print(
        f"max rate meeting p99 TTFT 3 s / TPOT 150 ms: {search_s * 1e3:.0f} ms "
        f"({result.evaluations} evaluations, {result.max_rate:.3f} req/s, "
        f"bound by {result.limited_by})"
    )

    scenarios = [scenario_from_measured(r) for r in catalog.measured]
    start = time.perf_counter()
    predictions = model.predict_many(scenarios)
    predict_s = time.perf_counter() - start
    failed = sum(1 for p in predictions if isinstance(p, Exception))
    print(
        f"\npredict every stored measured row ({len(scenarios)}, {failed} errors): "
        f"{predict_s:.1f} s; with the cold fit: {fit_s + predict_s:.1f} s"
    )


if __name__ == "__main__":
    main()
