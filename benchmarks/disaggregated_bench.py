"""Disaggregated prefill/decode next to aggregated replicas, and wide EP, from the fitted model.

    .venv/bin/python benchmarks/disaggregated_bench.py

Prints, from :mod:`planner.perf.disaggregated` with the model fitted on the public results:

1. Llama-3.1-70B BF16 on H100 (4,000 in / 300 out, 2 req/s): 2 prefill + 1 decode TP4
   replicas over EFA against 3 aggregated TP4 replicas (the same 12 GPUs, steady state):
   TTFT and TPOT (mean, p99), each pool's utilisation, the KV transfer and the P:D ratio that
   balances the pools;
2. DeepSeek-R1 FP8 on H200 with vLLM (2,000 in / 500 out, 4 req/s): a DEP8 prefill pool and
   decode pools of DEP8, 16 and 32 (the last two across nodes over InfiniBand): TPOT, the
   all-to-all a decode step pays, output tokens/s per GPU and the balancing ratio;
3. the time one disaggregated prediction takes (both pools resolved, median of 5).

Not a check against measured disaggregated results: none is in the fit yet (issue 25,
item 6); the figures are the model's.
"""

from __future__ import annotations

import statistics
import time

from planner.catalog import load_catalog
from planner.perf.disaggregated import DisaggregatedLayout, PoolLayout, predict_disaggregated
from planner.perf.model import get_performance_model
from planner.perf.scenario import Scenario


def main() -> None:
    model = get_performance_model(load_catalog())
    llama = Scenario(
        engine="vllm",
        model="meta-llama/Llama-3.1-70B-Instruct",
        precision="bf16",
        gpu="H100-SXM",
        tp=4,
        input_len=4000,
        output_len=300,
        load="rate",
        request_rate=2.0,
    )
    layout = DisaggregatedLayout(
        prefill=PoolLayout(replicas=2, tp=4), decode=PoolLayout(replicas=1, tp=4), kv_link="efa"
    )
    d = predict_disaggregated(model, llama, layout)
    a = model.predict_steady(llama.model_copy(update={"num_gpus": 12}))
    p = d.prediction
    print("1. Llama-3.1-70B BF16, H100, 4000/300 tokens, 2 req/s, 12 GPUs")
    print(
        f"   disaggregated 2P+1D TP4 over EFA: TTFT {p.ttft_ms_mean:.0f} ms (p99 "
        f"{p.ttft_ms_p99:.0f}), TPOT {p.tpot_ms_mean:.1f} ms (p99 {p.tpot_ms_p99:.1f}), "
        f"prefill {d.prefill_utilization:.0%} / decode {d.decode_utilization:.0%} busy, KV "
        f"{d.kv_transfer_bytes / 1e9:.2f} GB in {d.kv_transfer_ms:.2f} ms, balanced P:D "
        f"{d.balanced_prefill_per_decode:.2f}"
    )
    print(
        f"   aggregated 3 x TP4:              TTFT {a.ttft_ms_mean:.0f} ms (p99 "
        f"{a.ttft_ms_p99:.0f}), TPOT {a.tpot_ms_mean:.1f} ms (p99 {a.tpot_ms_p99:.1f})"
    )
    r1 = Scenario(
        engine="vllm",
        model="deepseek-ai/DeepSeek-R1-0528",
        precision="fp8",
        gpu="H200",
        input_len=2000,
        output_len=500,
        load="rate",
        request_rate=4.0,
    )
    print("2. DeepSeek-R1 FP8, H200, vLLM, 2000/500 tokens, 4 req/s, prefill DEP8")
    prefill = PoolLayout(replicas=1, tp=1, ep=8, attention_dp=8)
    for size in (8, 16, 32):
        decode = PoolLayout(replicas=1, tp=1, ep=size, attention_dp=size)
        w = predict_disaggregated(
            model, r1, DisaggregatedLayout(prefill=prefill, decode=decode, kv_link="infiniband")
        )
        q = w.prediction
        print(
            f"   decode DEP{size:<2}: TPOT {q.tpot_ms_mean:5.1f} ms (p99 {q.tpot_ms_p99:5.1f}), "
            f"all-to-all {w.decode_all_to_all_ms:.2f} ms a step, {w.output_tok_per_s_per_gpu:.0f} "
            f"output tok/s a GPU, KV {w.kv_transfer_ms:.2f} ms, balanced P:D "
            f"{w.balanced_prefill_per_decode:.2f}"
        )
    times = []
    for _ in range(5):
        start = time.perf_counter()
        predict_disaggregated(model, llama, layout)
        times.append(time.perf_counter() - start)
    print(f"3. one disaggregated prediction: {statistics.median(times) * 1e3:.0f} ms (median of 5)")


if __name__ == "__main__":
    main()
