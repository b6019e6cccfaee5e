"""The disaggregated steady state against the same load replayed through both pools' engines.

    .venv/bin/python benchmarks/disaggregated_replay_bench.py [--requests N]

Llama-3.1-70B, one H100 TP4 engine a pool over InfiniBand, 2,048 in / 32 out, timed by the
unfitted (prior) coefficients. For each Poisson rate: the steady state's mean TTFT and TPOT
(:meth:`planner.perf.disaggregated.DisaggregatedModel.at_rate`), the same without the decode
pool's entry (the rest of its step in progress and its own request path: what it predicted
before), and ``N`` seeded requests replayed through the pools' engines on a virtual clock
(:func:`planner.perf.disaggregated.replay_pools`, what the simulated two-pool endpoint serves).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog import load_catalog
from planner.perf.disaggregated import (
    DisaggregatedLayout,
    PoolLayout,
    disaggregated_model,
    predict_disaggregated,
)
from planner.perf.model import PerformanceModel
from planner.perf.scenario import Scenario


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    model = PerformanceModel(load_catalog())
    pool = PoolLayout(replicas=1, tp=4)
    layout = DisaggregatedLayout(prefill=pool, decode=pool, kv_link="infiniband")
    head = f"{'req/s':>6} {'metric':<10} {'steady':>8} {'before':>8} {'replay':>8}"
    print(f"{head} {'err':>7} {'before':>7}")
    for rate in (1.0, 2.0, 4.0, 6.0):
        scenario = Scenario(
            engine="vllm",
            model="meta-llama/Llama-3.1-70B-Instruct",
            precision="bf16",
            gpu="H100-SXM",
            tp=4,
            input_len=2048,
            output_len=32,
            load="rate",
            request_rate=rate,
        )
        dm = disaggregated_model(model, scenario, layout)
        steady = dm.at_rate(rate).prediction
        dec = dm.decode_pool.at_rate(rate)
        entry_ms = (dm.decode_first_token_s(dec, dec.step_s) - dec.step_s) * 1e3
        replay = predict_disaggregated(
            model, scenario.model_copy(update={"num_requests": args.requests}), layout
        ).prediction
        for metric, s, before, r in (
            ("TTFT ms", steady.ttft_ms_mean, steady.ttft_ms_mean - entry_ms, replay.ttft_ms_mean),
            ("TPOT ms", steady.tpot_ms_mean, steady.tpot_ms_mean, replay.tpot_ms_mean),
        ):
            print(
                f"{rate:>6g} {metric:<10} {s:>8.1f} {before:>8.1f} {r:>8.1f} "
                f"{(s - r) / r * 100:>+6.1f}% {(before - r) / r * 100:>+6.1f}%"
            )


if __name__ == "__main__":
    main()
