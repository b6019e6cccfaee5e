"""Why the speculative speed-up of DeepSeek-V3 on MI300X is predicted low: its baseline.

    .venv/bin/python benchmarks/speculative_baseline_bench.py [--max-in-flight 16]

The speed-up over the same configuration without speculation is ``tau x (baseline step) /
(speculative step)``: a prediction whose baseline step is too short prices the draft and the
verification as a larger share of it, and predicts too little gain. This prints, for every
DeepSeek-V3/R1 row of the embedded data measured at a few requests in flight (a closed loop of
``--max-in-flight`` or fewer), the measured and predicted time per output token of one
sequence (the row's mean TPOT where it publishes one, else requests in flight / output tok/s,
which also carries the prefill) and the decode step's terms as the fitted model prices them
(ms, coefficient x term, at the row's batch and mid-answer context), grouped by engine release
and GPU, then the ratio measured / predicted by release at 1-4 and at 8-16 in flight.

The predictions are in-sample (the shipped fit, which saw these rows): where even they miss, no
coefficient of the one step model reproduces the row. What it showed on the shipped fit
before the layer floor (2026-12-02): the early DeepSeek-V3 implementations decode at a
near-constant time a token from 1 to 8 requests in flight (SGLang 0.4.10.post1 on MI300X, the
AMD team's runs: 33.9, 33.5, 35.0 and 38.9 ms at 1, 2, 4 and 8), where the model's step grew
with the batch from 13 ms, so measured / predicted was 1.98 at 1-4 in flight and 1.0 at 8-16;
the same shape, not the GPU, in dstack's early-2025 runs: SGLang 0.4.3.post2 on H200 2.39 at 4
(43.6 ms), TensorRT-LLM 0.17 on H200 3.57 (55.1 ms), vLLM 0.7.3 on MI300X 2.15 (46.2 ms),
SGLang 0.4.2 on MI300X 1.56. With the ``layer_floor`` term (max(0, layers x 150 us - roofline),
its deviation fitted per release and model kind: :mod:`planner.perf.step_time`), the same
medians at 1-4 in flight are 1.06, 1.43, 1.35, 1.68 and 1.02 (8-16 in flight: 0.90, 1.32,
1.44, 1.19, 0.94), and the current releases' hardly move (SGLang 0.5.6 on B200 1.16 -> 1.20,
vLLM 0.11 on H200 1.49 -> 1.38). Held out by source, the AMD post's baselines are predicted at
28.6, 30.3, 33.6, 39.5 and 49.5 ms a token at 1-16 in flight (measured 33.9, 33.5, 35.0, 38.9,
46.3), their MTP speed-ups at 1.80-1.28x (measured 2.11-1.53x; before, 1.26-1.04x).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog import MeasuredResult, load_catalog
from planner.errors import PlannerError
from planner.perf.calibration import scenario_from_measured
from planner.perf.model import get_performance_model
from planner.perf.step_time import FEATURES, StepBatch, step_features


def per_token_ms(r: MeasuredResult) -> tuple[float, str] | None:
    """Measured time per output token of one sequence and how it was read."""
    if r.itl_ms and r.itl_stat and "tpot" in r.itl_stat:
        return r.itl_ms, "TPOT"
    if r.output_tok_per_s and r.concurrency:
        return 1000.0 * r.concurrency / r.output_tok_per_s, "c/tok/s"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-in-flight", type=int, default=16)
    args = parser.parse_args()
    catalog = load_catalog()
    model = get_performance_model(catalog)
    rows = [
        r
        for r in catalog.measured
        if "deepseek-v3" in r.model.lower() or "deepseek-r1" in r.model.lower()
        if r.load == "concurrency" and r.concurrency and r.concurrency <= args.max_in_flight
        if r.spec_method in (None, "none")
    ]
    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r.gpu, r.engine, r.engine_version or "", r.concurrency)):
        measured = per_token_ms(r)
        if measured is None:
            continue
        scenario = scenario_from_measured(r)
        try:
            dep = model.deployment(scenario)
            c = model.coefficients_of(scenario, dep)
            pred = model.predict(scenario)
        except PlannerError as exc:
            print(f"skipped {r.source_ref[:60]}: {exc}")
            continue
        n = int(r.concurrency or 1)
        if measured[1] == "TPOT":
            predicted = pred.tpot_ms_mean
        else:
            predicted = 1000.0 * n / pred.output_tok_per_s
        context = r.input_len + r.output_len // 2
        x = step_features(StepBatch.of(decode_contexts=[context] * n), dep)
        terms = {f: float(x[i] * c[i] * 1e3) for i, f in enumerate(FEATURES) if x[i] * c[i] > 5e-5}
        release = f"{r.engine} {r.engine_version or '(unreleased)'}"[:48]
        key = f"{release} on {r.gpu}"
        band = "1-4" if n <= 4 else "5-16"
        groups[f"{key}|{band}"].append((measured[0], predicted))
        top = ", ".join(f"{k} {v:.2f}" for k, v in sorted(terms.items(), key=lambda kv: -kv[1])[:6])
        print(
            f"{key:<62} c={n:<3} {r.input_len}/{r.output_len:<5} measured {measured[0]:6.1f} ms "
            f"({measured[1]}), predicted {predicted:6.1f} ms, ratio {measured[0] / predicted:4.2f}"
            f"\n    decode step {sum(terms.values()):6.2f} ms: {top}"
        )
    print("\nmeasured / predicted time a token, median by release, GPU and requests in flight")
    for key in sorted(groups):
        release, band = key.split("|")
        ratios = [m / p for m, p in groups[key]]
        median = statistics.median(ratios)
        print(f"  {release:<62} {band:>5} in flight: {median:4.2f} (n {len(ratios)})")


if __name__ == "__main__":
    main()
