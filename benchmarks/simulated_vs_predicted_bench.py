"""The simulated endpoint against the predictor it is timed by: same plan, same load.

    .venv/bin/python benchmarks/simulated_vs_predicted_bench.py [--quick]

For each case a verification run (the Verify page's path: ``VerificationRequest`` through the
``RunManager``, the runner against ``python -m benchmarks_runner.simulated`` serving the run's
scenario) is measured with ``vllm bench serve`` definitions and printed next to the prediction
of the same scenario: median TTFT, median TPOT and output throughput, and the error of each.
The first case is the Verify page's default plan (Llama-3.1-70B FP8 on 2 x H100 TP2, 2,048 in
/ 512 out, 8 at once); then Llama-3.1-8B closed loop and Poisson. ``--quick`` skips the 70B.

``--disaggregated``: a disaggregated plan instead (Llama-3.1-70B, one prefill and one decode
engine of 4 x H100 over InfiniBand, 2,048 in / 32 out, Poisson at half the smaller pool's
capacity) on the two-pool simulated endpoint, against the prediction of both pools
(:func:`planner.verification.predict_plan`): mean TTFT and TPOT of 40 requests under four
arrival seeds, then 240 requests (``--requests`` sets the long run's count).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks_runner.run_manager import RunManager, VerificationRequest
from benchmarks_runner.simulated.disaggregated import pool_coefficients
from benchmarks_runner.simulated.perf_timing import coefficients_for_plan
from planner.catalog import load_catalog
from planner.perf.disaggregated import disaggregated_model
from planner.perf.model import PerformanceModel, get_performance_model
from planner.plan import Load, Plan, PlanPool, PlanWorkload
from planner.verification import custom_plan, predict_plan
from planner.workload import LengthDistribution

CASES = (
    # model, gpu, tp, precision, input, output, concurrency or None, rate or None, requests
    ("meta-llama/Llama-3.1-70B-Instruct", "H100-SXM", 2, "fp8", 2048, 512, 8, None, 32),
    ("meta-llama/Llama-3.1-8B-Instruct", "H100-SXM", 1, "bf16", 512, 128, 16, None, 64),
    ("meta-llama/Llama-3.1-8B-Instruct", "H100-SXM", 1, "bf16", 512, 128, None, 8.0, 96),
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="only the 8B case")
    parser.add_argument(
        "--disaggregated", action="store_true", help="a prefill and a decode pool (see above)"
    )
    parser.add_argument("--requests", type=int, default=240, help="--disaggregated: long run")
    args = parser.parse_args()
    catalog = load_catalog()
    model = get_performance_model(catalog)
    if args.disaggregated:
        disaggregated(model, args.requests)
        return
    cases = CASES[1:] if args.quick else CASES
    print(f"{'case':<44} {'metric':<20} {'predicted':>10} {'measured':>10} {'error':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        manager = RunManager(Path(tmp) / "runs")
        for name, gpu, tp, precision, isl, osl, conc, rate, n in cases:
            plan = custom_plan(name, catalog.gpu(gpu), tp=tp, precision=precision)
            request = VerificationRequest(
                plan=plan,
                input_len=LengthDistribution.fixed(isl),
                output_len=LengthDistribution.fixed(osl),
                num_requests=n,
                concurrency=conc,
                request_rate=rate,
            )
            predicted = model.predict(request.scenario())
            coefficients = coefficients_for_plan(model, request.scenario())
            started = time.perf_counter()
            run = manager.start_verification(
                VerificationRequest(**{**request.__dict__, "coefficients": coefficients})
            )
            run.wait(1800)
            summary = (run.result.summary if run.result else None) or {}
            load = f"c={conc}" if conc else f"{rate:g} req/s"
            label = f"{name.split('/')[-1]} {tp}x{gpu} {precision} {isl}/{osl} {load}"
            if run.state != "completed" or not summary:
                print(f"{label:<44} run {run.state}: {run.error}")
                continue
            for metric, pred, meas in (
                ("median TTFT (ms)", predicted.ttft_ms_p50, summary["median_ttft_ms"]),
                ("median TPOT (ms)", predicted.tpot_ms_p50, summary["median_tpot_ms"]),
                ("output tok/s", predicted.output_tok_per_s, summary["output_throughput"]),
            ):
                error = (meas - pred) / pred * 100
                print(f"{label:<44} {metric:<20} {pred:>10.1f} {meas:>10.1f} {error:>+7.1f}%")
            print(f"{'':<44} ({n} requests, {time.perf_counter() - started:.0f} s wall)")
        manager.shutdown()


def disaggregated(model: PerformanceModel, long_requests: int) -> None:
    name = "meta-llama/Llama-3.1-70B-Instruct"
    pool = PlanPool(replicas=1, tp=4, gpu="H100-SXM")
    plan = Plan(
        model=name,
        gpu="H100-SXM",
        tp=4,
        prefill=pool,
        decode=pool,
        kv_link="infiniband",
        workload=PlanWorkload.of(2048, 32),
        load=Load.rate(4.0),
    )
    # the load the plan is sized for: half the smaller pool's capacity
    base = plan.scenario(load=Load.rate(1.0))
    layout = plan.disaggregated_layout()
    assert layout is not None
    capacity = min(disaggregated_model(model, base, layout).capacity_rps())
    rate = round(capacity / 2, 2)
    plan = plan.model_copy(update={"load": Load.rate(rate)})
    print(f"{plan.label}, 2048/32, Poisson {rate:g} req/s (half the smaller pool's capacity)")
    head = f"{'requests':>8} {'seed':>4} {'metric':<16}"
    print(f"{head} {'predicted':>10} {'measured':>10} {'error':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        manager = RunManager(Path(tmp) / "runs")
        for n, seed in ((40, 0), (40, 1), (40, 2), (40, 3), (long_requests, 5)):
            request = VerificationRequest(
                plan=plan,
                input_len=LengthDistribution.fixed(2048),
                output_len=LengthDistribution.fixed(32),
                num_requests=n,
                request_rate=rate,
                seed=seed,
            )
            predicted = predict_plan(model, request.scenario(), plan)
            coefficients = pool_coefficients(model, plan, request.scenario())
            run = manager.start_verification(
                VerificationRequest(**{**request.__dict__, "coefficients": coefficients})
            )
            run.wait(1800)
            summary = (run.result.summary if run.result else None) or {}
            if run.state != "completed" or not summary:
                print(f"{n:>8} {seed:>4} run {run.state}: {run.error}")
                continue
            for metric, pred, meas in (
                ("mean TTFT (ms)", predicted.ttft_ms_mean, summary["mean_ttft_ms"]),
                ("mean TPOT (ms)", predicted.tpot_ms_mean, summary["mean_tpot_ms"]),
            ):
                error = (meas - pred) / pred * 100
                print(f"{n:>8} {seed:>4} {metric:<16} {pred:>10.1f} {meas:>10.1f} {error:>+7.1f}%")
        manager.shutdown()


if __name__ == "__main__":
    main()
