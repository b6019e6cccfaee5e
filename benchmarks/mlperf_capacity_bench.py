"""Capacity at the SLO against MLPerf's Server results, held out by round (a benchmark to read).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/mlperf_capacity_bench.py [--in-sample]

An MLPerf Inference Server result is the question a capacity plan answers: the submitter raised
the Poisson query rate until the run's p99 TTFT or p99 TPOT reached the round's limit, so its
``target_qps`` is the measured capacity of that layout under that SLO. For every Server row of
``data/measured_mlperf.csv`` this fits the performance model on the embedded data without that
row's round (its source), searches the highest rate whose predicted p99s meet the same limits
(:func:`planner.recommend.max_rate_meeting_slo`: a bisection over simulated runs) and prints
it beside MLPerf's rate: predicted / measured capacity, what limits the prediction, the same
edge from the steady state (``steady``: how the recommender sizes a plan) and the predicted
p99s at MLPerf's own rate.

Latency at a fixed rate near capacity is ill-conditioned (a few percent of throughput moves the
queue, and the p99s, several-fold), so a latency error on these rows says little; the capacity
at the SLO is what a plan is sized by, and a ratio near 1 is what this bench looks for.
``--in-sample`` also prints the capacity of the fit on every row (its own round included).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog import load_catalog
from planner.catalog.schema import MeasuredResult
from planner.perf.calibration import scenario_from_measured
from planner.perf.model import PerformanceModel
from planner.perf.scenario import Scenario
from planner.perf.validation import source_key
from planner.plan import Slo
from planner.recommend import max_rate_meeting_slo

ROUNDS = (
    "mlcommons/inference_results_v4.0",
    "mlcommons/inference_results_v4.1",
    "ntuhpc/mlperf_inference_results_v5.0",
)
#: the round's limits as each row's notes state them
LIMITS = re.compile(r"p99 TTFT <= (\d+) ms, p99 TPOT <= (\d+) ms")
#: simulated requests a replica per search step: minutes of arrivals at these rates, so the queue
#: reaches its steady state (MLPerf runs 10-40 minutes; a few hundred requests end in the ramp)
REQUESTS_PER_REPLICA = 2500


def slo_of(row: MeasuredResult) -> Slo:
    found = LIMITS.search(row.notes or "")
    if found is None:
        raise SystemExit(f"no SLO in the notes of {row.source_ref}")
    ttft, tpot = (float(v) for v in found.groups())
    # MLPerf has no KV headroom rule: the pool may fill
    return Slo(ttft_p99_ms=ttft, tpot_p99_ms=tpot, kv_occupancy_max=None)


def label(row: MeasuredResult) -> str:
    rnd = row.source.split()[0].rsplit("_", 1)[-1]
    model = row.model.split("/")[-1].replace("-chat-hf", "").replace("-Instruct", "")
    layout = f"{row.num_gpus // (row.tp * row.pp)}x TP{row.tp}" + (
        f" PP{row.pp}" if row.pp > 1 else ""
    )
    tight = " interactive" if "interactive" in (row.notes or "") else ""
    return f"{rnd:5} {row.gpu:8} {model}{tight} {row.precision} {layout}"


def searched_capacity(
    model: PerformanceModel, scenario: Scenario, slo: Slo, requests: int
) -> tuple[float, str]:
    """(predicted max rate, what limits it): the bisection over simulated runs."""
    found = max_rate_meeting_slo(model, scenario, slo, num_requests=requests)
    return found.max_rate, found.limited_by


def steady_capacity(model: PerformanceModel, scenario: Scenario, slo: Slo) -> float:
    """The same edge as the recommender finds it: the steady state's highest rate inside the
    limits (:meth:`planner.perf.steady_state.SteadyStateModel.max_rate`), one scheduler's
    times the schedulers."""
    steady = model.steady_state(scenario)
    ttft, tpot = (None if v is None else v / 1e3 for v in (slo.ttft_p99_ms, slo.tpot_p99_ms))
    return steady.max_rate(ttft, tpot).max_load * steady.dep.replicas


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-sample", action="store_true", help="also the fit on every row")
    args = parser.parse_args()
    started = time.perf_counter()
    catalog = load_catalog(user_dir=Path(tempfile.mkdtemp()))
    measured = list(catalog.measured)
    servers = [m for m in measured if source_key(m) in ROUNDS and m.load == "rate"]
    if not servers:
        raise SystemExit("no MLPerf Server rows in data/measured_mlperf.csv")
    full = PerformanceModel(catalog).fit(measured) if args.in_sample else None
    print(
        "MLPerf Server rows: the highest Poisson rate whose predicted p99 TTFT and TPOT meet the "
        "round's limits, fitted without the row's round\n"
    )
    header = f"{'row':52} {'SLO ms':>10} {'MLPerf q/s':>10} {'predicted':>9} {'ratio':>6}  limit"
    header += "       steady"
    print(header + ("  in-sample" if full else "") + "   p99 TTFT / TPOT at MLPerf's rate")
    ratios: list[float] = []
    steady_ratios: list[float] = []
    in_sample: list[float] = []
    for rnd in ROUNDS:
        rows = [m for m in servers if source_key(m) == rnd]
        if not rows:
            continue
        model = PerformanceModel(catalog).fit([m for m in measured if source_key(m) != rnd])
        for row in rows:
            scenario, slo = scenario_from_measured(row), slo_of(row)
            requests = REQUESTS_PER_REPLICA * (row.num_gpus // (row.tp * row.pp))
            rate, limit = searched_capacity(model, scenario, slo, requests)
            # the p99s at MLPerf's own rate, as long a run as the search's steps
            at_mlperf = model.predict(scenario.model_copy(update={"num_requests": requests}))
            ttft, tpot = at_mlperf.ttft_ms_p99, at_mlperf.tpot_ms_p99
            measured_rate = float(row.request_rate or 0.0)
            ratio = rate / measured_rate
            ratios.append(ratio)
            steady = steady_capacity(model, scenario, slo) / measured_rate
            steady_ratios.append(steady)
            line = (
                f"{label(row):52} {slo.ttft_p99_ms:>5.0f}/{slo.tpot_p99_ms:<4.0f} "
                f"{measured_rate:>10.2f} {rate:>9.2f} {ratio:>6.2f}  {limit:<10} {steady:>6.2f}"
            )
            if full is not None:
                own = searched_capacity(full, scenario, slo, requests)[0] / measured_rate
                in_sample.append(own)
                line += f" {own:>6.2f}"
            line += (
                f"   {ttft:,.0f} / {tpot:,.0f} "
                f"(measured {row.ttft_p99_ms:,.0f} / {row.tpot_p99_ms:,.0f})"
            )
            print(line, flush=True)
    for name, found in (("simulated search", ratios), ("steady state", steady_ratios)):
        errors = [abs(r - 1.0) for r in found]
        print(
            f"\nheld out by round, {name}: {len(found)} rows, predicted / measured capacity "
            f"median {statistics.median(found):.2f} (range {min(found):.2f}-{max(found):.2f}), "
            f"median |error| {100 * statistics.median(errors):.1f}%",
            end="",
        )
    print()
    if in_sample:
        print(
            f"in sample: median {statistics.median(in_sample):.2f}, median |error| "
            f"{100 * statistics.median([abs(r - 1) for r in in_sample]):.1f}%"
        )
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
