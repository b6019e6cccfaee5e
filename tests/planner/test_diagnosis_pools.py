"""Diagnose's P:D pools check on evidence built by hand: what it reads when the KV link is the
bottleneck, an aggregated plan, and a run without the pools' metrics. (The prefill- and
decode-bound findings are found on real two-pool runs:
tests/benchmarks_runner/simulated/test_disaggregated_endpoint.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from planner.catalog import Catalog
from planner.diagnosis import diagnose
from planner.diagnosis.evidence import RunEvidence, metric_table, request_table
from planner.perf.model import PerformanceModel
from planner.plan import Load, Plan, PlanPool, PlanWorkload, flat_plan
from planner.run_files import MetricSample, RequestRecord

MODEL = "meta-llama/Llama-3.1-70B-Instruct"
POOL = PlanPool(replicas=1, tp=4, gpu="H100-SXM")
PLAN = Plan(
    model=MODEL,
    gpu="H100-SXM",
    tp=4,
    prefill=POOL,
    decode=POOL,
    kv_link="efa",
    workload=PlanWorkload.of(2048, 16),
    load=Load.rate(4.0),
)


@pytest.fixture(scope="module")
def prior(catalog: Catalog) -> PerformanceModel:
    return PerformanceModel(catalog)


def _evidence(
    plan: Plan, *, transfer_s: float, ttft_s: float, pools: bool = True, requests: int = 20
) -> RunEvidence:
    """``requests`` requests at 4 req/s, each ``ttft_s`` to its first token, the router's KV
    transfer counters at ``transfer_s`` a request, quiet pools scraped every second."""
    rows = [
        RequestRecord(
            request_id=f"r{i}",
            request_index=i,
            scheduled_s=i * 0.25,
            start_s=i * 0.25,
            first_chunk_s=i * 0.25 + ttft_s,
            end_s=i * 0.25 + ttft_s + 0.3,
            prompt_tokens=2048,
            output_tokens=16,
            status="ok",
        )
        for i in range(requests)
    ]
    samples = []
    for t in range(8):
        done = min(requests, 4 * t)
        samples += [
            MetricSample(t_s=t, name="servewise:kv_transfers_total", value=done),
            MetricSample(
                t_s=t, name="servewise:kv_transfer_seconds_total", value=done * transfer_s
            ),
        ]
        if pools:
            for pool, running in (("prefill", 0.0), ("decode", 1.0)):
                labels = {"pool": pool, "engine": "0"}
                samples += [
                    MetricSample(t_s=t, name="vllm:num_requests_waiting", labels=labels, value=0),
                    MetricSample(
                        t_s=t, name="vllm:num_requests_running", labels=labels, value=running
                    ),
                    MetricSample(
                        t_s=t, name="vllm:request_success_total", labels=labels, value=done
                    ),
                ]
    stored: dict[str, Any] = plan.model_dump(mode="json")
    return RunEvidence(
        tool="servewise",
        run_id="hand-made",
        duration_s=requests * 0.25,
        requests=request_table(rows),
        metrics=metric_table(samples),
        plan=flat_plan(stored),
        config={"load": "rate", "request_rate": 4.0},
        stored_plan=stored,
    )


def test_a_kv_transfer_that_takes_most_of_the_ttft_is_transfer_bound(
    prior: PerformanceModel,
) -> None:
    """4 ms of transfer in a 5 ms TTFT: the finding names the link and moves the KV cache to
    the fastest other one the deployment allows (8 GPUs: one NVLink domain), with the what-if."""
    ev = _evidence(PLAN, transfer_s=0.004, ttft_s=0.005)
    found = diagnose(ev, model=prior).finding("pool_balance")
    assert found.status == "found", found.headline
    assert found.headline.startswith("transfer-bound TTFT"), found.headline
    assert found.fix is not None and found.fix.scenario_changes == {"kv_link": "nvlink"}
    assert "efa -> nvlink" in found.fix.summary
    w = found.fix.what_if
    assert w is not None and w.after.ttft_ms_p99 < w.before.ttft_ms_p99
    assert w.before.gpus == w.after.gpus == 8


def test_a_transfer_well_inside_the_ttft_is_clear(prior: PerformanceModel) -> None:
    ev = _evidence(PLAN, transfer_s=0.004, ttft_s=0.2)
    found = diagnose(ev, model=prior).finding("pool_balance")
    assert found.status == "clear", found.headline
    assert "1P:1D" in found.headline


def test_without_the_pools_metrics_it_cannot_judge_and_an_aggregated_plan_is_clear(
    prior: PerformanceModel,
) -> None:
    ev = _evidence(PLAN, transfer_s=0.004, ttft_s=0.005, pools=False)
    found = diagnose(ev, model=prior).finding("pool_balance")
    assert found.status == "cannot_judge"
    assert "pool=prefill|decode" in found.missing[0]
    aggregated = Plan(model=MODEL, gpu="H100-SXM", tp=4)
    ev = _evidence(aggregated, transfer_s=0.0, ttft_s=0.2, pools=False)
    assert diagnose(ev, model=prior).finding("pool_balance").status == "clear"
