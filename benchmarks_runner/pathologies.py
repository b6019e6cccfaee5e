"""The ways a cluster wastes money, reproduced on purpose on the simulated endpoint.

Each :class:`Pathology` is a plan the user believes they deployed, the engine settings the
server really runs (``hidden``: what the plan does not say, such as eager mode), a workload and
a load that bring the mistake out, and what a diagnosis should answer: the finding, a flag of
its fix, the what-if figure the fix should move and the run figure that shows it.
:func:`run_pathology` serves the settings with the simulated server (the performance model's
engine in real time, ``--scenario``), runs the workload against it over HTTP and returns the
run directory; :func:`fixed_deployment` is the same with a fix applied, one replica's share of
the load when the fix adds replicas.

Used by the end-to-end tests (tests/benchmarks_runner/test_diagnose_pathologies.py) and by
``benchmarks/diagnose_bench.py``, which prints the whole matrix.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks_runner.config import make_run_config
from benchmarks_runner.endpoints import SimulatedEndpoint
from benchmarks_runner.runner import run_benchmark_sync
from benchmarks_runner.workload import (
    RequestSpec,
    arrival_times,
    build_synthetic_specs,
    with_arrivals,
    workload_record,
)
from planner.perf.scenario import Scenario
from planner.plan import read_plan
from planner.workload import LengthDistribution

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
H100 = {"engine": "vllm", "model": MODEL, "gpu": "H100-SXM", "tp": 1, "pp": 1, "precision": "bf16"}
#: plan keys that are engine settings of the served scenario
ENGINE_KEYS = (
    "gpu_memory_utilization",
    "enforce_eager",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "max_num_seqs",
    "max_num_batched_tokens",
    "kv_cache_dtype",
)


def lognormal_requests(n: int, inp: int, out: int) -> list[RequestSpec]:
    return build_synthetic_specs(
        n,
        LengthDistribution.lognormal(inp, inp * 0.5),
        LengthDistribution.lognormal(out, out * 0.5),
    )


def shared_prefix_requests(n: int, share: float, groups: int) -> list[RequestSpec]:
    """4,096-token prompts sharing ``share`` of their tokens within ``groups`` groups (equal
    prompts: the runner cuts a group's prefix to its shortest prompt), lognormal answers. Long
    enough that the prefill caching skips is most of a request's TTFT: with 1,024 tokens it was
    a few ms of ~60, less than a loaded host adds to a real-time server's timings."""
    return build_synthetic_specs(
        n,
        LengthDistribution.fixed(4096),
        LengthDistribution.lognormal(128, 64),
        prefix_share=share,
        num_prefix_groups=groups,
    )


def long_prompts_among_short(n: int) -> list[RequestSpec]:
    """Short lognormal prompts, one request in 20 a 16,000-token prompt."""
    return [
        RequestSpec(s.request_index, 16000 if s.request_index % 20 == 5 else s.input_len,
                    s.output_len)
        for s in lognormal_requests(n, 256, 96)
    ]  # fmt: skip


def poisson_requests(n: int, rate: float) -> list[RequestSpec]:
    return with_arrivals(lognormal_requests(n, 512, 96), arrival_times(n, rate, 1.0, seed=1))


@dataclass(frozen=True)
class Pathology:
    name: str
    description: str
    plan: dict[str, Any]
    requests: Callable[[], list[RequestSpec]]
    load: dict[str, Any]
    hidden: dict[str, Any] = field(default_factory=dict)  # served but not in the plan
    finding: str | None = None  # the mistake a diagnosis must find (None: a healthy run)
    fix_flag: str = ""  # a vLLM flag (or words) the fix must name
    predicted: str = ""  # the what-if's Outcome field the fix moves
    measured: str = ""  # the diagnosis summary's key that shows it in a run
    better: str = "down"
    workload: dict[str, Any] = field(default_factory=dict)


PATHOLOGIES: tuple[Pathology, ...] = (
    Pathology(
        "healthy",
        "8B on an H100, lognormal lengths, 32 in flight",
        H100,
        lambda: lognormal_requests(96, 512, 96),
        {"concurrency": 32},
    ),
    Pathology(
        "kv_pool_too_small",
        "gpu_memory_utilization 0.3: a KV pool for ~30 of 64 requests in flight",
        H100 | {"gpu_memory_utilization": 0.3},
        lambda: lognormal_requests(128, 1024, 128),
        {"concurrency": 64},
        finding="kv_sizing",
        fix_flag="--",
        predicted="ttft_ms_p99",
        measured="ttft_ms_p99",
    ),
    Pathology(
        "long_prompts_without_chunked_prefill",
        "16,000-token prompts among 256-token ones, chunked prefill off",
        H100 | {"enable_chunked_prefill": False},
        lambda: long_prompts_among_short(100),
        {"concurrency": 32},
        finding="prefill_stalls",
        fix_flag="--enable-chunked-prefill",
        predicted="itl_ms_max",
        measured="itl_ms_p99",
    ),
    Pathology(
        "overload",
        "40 req/s offered to a replica that serves ~13 (max_num_seqs 16)",
        H100 | {"max_num_seqs": 16},
        lambda: poisson_requests(160, 40.0),
        {"load": "rate", "request_rate": 40.0},
        finding="queueing",
        fix_flag="replicas",
        predicted="ttft_ms_p99",
        measured="ttft_ms_p99",
    ),
    Pathology(
        "eager_mode",
        "the server runs --enforce-eager, which the plan does not say",
        H100,
        lambda: lognormal_requests(64, 512, 96),
        {"concurrency": 16},
        hidden={"enforce_eager": True},
        finding="host_overhead",
        fix_flag="(drop --enforce-eager)",
        predicted="tpot_ms_p50",
        measured="tpot_ms_p50",
    ),
    Pathology(
        "tp_over_host_staged_pcie",
        "8B at TP4 on g6e.12xlarge (4 x L40S, PCIe without peer-to-peer)",
        H100 | {"gpu": "L40S", "tp": 4, "instance": "g6e.12xlarge"},
        lambda: lognormal_requests(64, 512, 64),
        {"concurrency": 32},
        finding="parallelism_links",
        fix_flag="--tensor-parallel-size",
        predicted="output_tok_per_s",
        measured="output_throughput",
        better="up",
    ),
    Pathology(
        "prefix_caching_off_on_shared_prefixes",
        "prompts sharing 90% of their tokens in two groups, prefix caching off",
        H100 | {"enable_prefix_caching": False},
        lambda: shared_prefix_requests(96, 0.9, 2),
        {"concurrency": 32},
        finding="prefix_reuse",
        fix_flag="--enable-prefix-caching",
        predicted="ttft_ms_p99",
        measured="ttft_ms_p50",
        workload={"prefix_share": 0.9, "prefix_groups": 2},
    ),
)
BY_NAME = {p.name: p for p in PATHOLOGIES}


def served_scenario(
    served: dict[str, Any], requests: Sequence[RequestSpec], load: dict[str, Any]
) -> Scenario:
    """The Scenario the simulated server serves one replica of (``--scenario``)."""
    return Scenario(
        model=str(served["model"]),
        gpu=str(served["gpu"]),
        tp=int(served.get("tp") or 1),
        pp=int(served.get("pp") or 1),
        instance=served.get("instance"),
        input_len=max(s.input_len for s in requests),
        output_len=max(s.output_len for s in requests),
        load="rate" if load.get("load") == "rate" else "concurrency",
        concurrency=load.get("concurrency") or 1,
        request_rate=load.get("request_rate"),
        **{k: served[k] for k in ENGINE_KEYS if k in served},
    )


def run_pathology(
    p: Pathology,
    runs_dir: Path,
    coefficients: Sequence[float],
    *,
    served: dict[str, Any] | None = None,
    load: dict[str, Any] | None = None,
    requests: list[RequestSpec] | None = None,
) -> Path:
    """Serve ``served`` (default: the pathology's plan and hidden settings), run its requests
    under ``load`` against it, return the run directory. The run's plan is ``served`` less the
    hidden settings: what the user believes they deployed."""
    served = served or (p.plan | p.hidden)
    load = load or p.load
    requests = requests or p.requests()
    believed = read_plan({k: v for k, v in served.items() if k not in p.hidden})
    assert believed is not None
    endpoint = SimulatedEndpoint.for_plan(
        believed, scenario=served_scenario(served, requests, load), coefficients=coefficients
    )
    base_url = endpoint.start(threading.Event())
    workload = workload_record(
        LengthDistribution.fixed(512), LengthDistribution.fixed(128),
        **({"prefix_share": 0.0} | p.workload),
    )  # fmt: skip
    try:
        config = make_run_config(
            base_url=base_url, model=MODEL, metrics_interval_s=0.25, workload=workload, **load
        )
        plan = believed.model_dump(mode="json")
        return run_benchmark_sync(config, requests, runs_dir, plan=plan).run_dir
    finally:
        endpoint.stop()


def fixed_deployment(
    p: Pathology, scenario_changes: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], list[RequestSpec]]:
    """(served settings, load, requests) of the pathology with a fix's scenario changes: one
    replica at its share of the load (every n-th arrival, or 1/n of the concurrency) when the
    fix adds n replicas."""
    changes = dict(scenario_changes)
    replicas = int(changes.pop("replicas", 1) or 1)
    changes.pop("prefix_share", None)  # a property of the workload, not of the deployment
    served = p.plan | p.hidden | changes
    load, requests = dict(p.load), p.requests()
    if replicas > 1 and "concurrency" in load:
        load["concurrency"] = max(1, int(load["concurrency"]) // replicas)
    if replicas > 1 and "request_rate" in load:
        load["request_rate"] = float(load["request_rate"]) / replicas
        requests = requests[::replicas]
    return served, load, requests
