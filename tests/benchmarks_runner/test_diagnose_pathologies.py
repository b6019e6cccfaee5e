"""Each pathology on purpose, end to end: the simulated server serves the engine settings of the
pathology (``--scenario``: the performance model's engine in real time), the runner measures it
over HTTP on 127.0.0.1, the diagnosis finds exactly the expected mistake with the right fix;
then the server serves the plan with that fix and the run measures the direction the fix's
what-if predicted (one replica at its share of the load when the fix adds replicas). A healthy
run finds nothing.

Both sides use the spec-sheet prior coefficients (the server's ``--coefficients`` and an
unfitted model for the diagnosis), so no fit runs and the predictor and the server are the same
model. Timings are compared between two runs of one test, never with a wall-clock limit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from benchmarks_runner import (
    RequestSpec,
    build_synthetic_specs,
    make_run_config,
    run_benchmark_sync,
)
from benchmarks_runner.workload import arrival_times, with_arrivals, workload_record
from planner.catalog import Catalog
from planner.diagnosis import Diagnosis, diagnose, evidence_from_run
from planner.perf.model import PerformanceModel
from planner.perf.scenario import Scenario
from planner.run_files import read_run_dir
from planner.workload import LengthDistribution

from .conftest import start_sim_server

pytestmark = pytest.mark.timeout(300)
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
PLAN = {"engine": "vllm", "model": MODEL, "gpu": "H100-SXM", "tp": 1, "pp": 1, "precision": "bf16"}
ENGINE_KEYS = (
    "gpu_memory_utilization",
    "enforce_eager",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "max_num_seqs",
    "max_num_batched_tokens",
    "kv_cache_dtype",
)


@pytest.fixture(scope="module")
def prior(catalog: Catalog) -> PerformanceModel:
    return PerformanceModel(catalog)


def lognormal(n: int, inp: int, out: int, *, share: float = 0.0, groups: int = 1) -> list[Any]:
    return build_synthetic_specs(
        n,
        LengthDistribution.lognormal(inp, inp * 0.5),
        LengthDistribution.lognormal(out, out * 0.5),
        prefix_share=share,
        num_prefix_groups=groups,
    )


def prefixed(n: int, *, share: float, groups: int) -> list[Any]:
    """1,024-token prompts (a group's shared prefix is cut to its shortest prompt: equal
    prompts share the planned share exactly), lognormal answers."""
    return build_synthetic_specs(
        n,
        LengthDistribution.fixed(1024),
        LengthDistribution.lognormal(128, 64),
        prefix_share=share,
        num_prefix_groups=groups,
    )


def with_long_prompts(specs: list[RequestSpec]) -> list[RequestSpec]:
    """One request in 20 a 16,000-token prompt among short ones."""
    return [
        RequestSpec(s.request_index, 16000 if s.request_index % 20 == 5 else s.input_len,
                    s.output_len)
        for s in specs
    ]  # fmt: skip


@dataclass
class Case:
    """A pathology: the plan it runs, the load, the finding and what its fix should move."""

    name: str
    plan: dict[str, Any]
    specs: list[Any]
    load: dict[str, Any]
    server: dict[str, Any] = field(default_factory=dict)  # settings the plan does not state
    finding: str | None = None
    fix_flag: str = ""  # a vLLM flag the fix must name
    predicted: str = ""  # Outcome field of the what-if
    measured: str = ""  # run summary key (diagnosis summary), per GPU for throughput
    better: str = "down"
    workload: dict[str, Any] = field(default_factory=dict)


def cases() -> list[Case]:
    plain = {"prefix_share": 0.0}
    return [
        Case("healthy", PLAN, lognormal(96, 512, 96), {"concurrency": 32}, workload=plain),
        Case(
            "kv_pool_too_small",
            PLAN | {"gpu_memory_utilization": 0.3},
            lognormal(128, 1024, 128),
            {"concurrency": 64},
            finding="kv_sizing",
            fix_flag="--",
            predicted="ttft_ms_p99",
            measured="ttft_ms_p99",
            workload=plain,
        ),
        Case(
            "long_prompts_without_chunked_prefill",
            PLAN | {"enable_chunked_prefill": False},
            with_long_prompts(lognormal(100, 256, 96)),
            {"concurrency": 32},
            finding="prefill_stalls",
            fix_flag="--enable-chunked-prefill",
            predicted="itl_ms_max",
            measured="itl_ms_p99",
            workload=plain,
        ),
        Case(
            "overload",
            PLAN | {"max_num_seqs": 16},
            with_arrivals(lognormal(160, 512, 96), arrival_times(160, 40.0, 1.0, seed=1)),
            {"load": "rate", "request_rate": 40.0},
            finding="queueing",
            fix_flag="replicas",
            predicted="ttft_ms_p99",
            measured="ttft_ms_p99",
            workload=plain,
        ),
        Case(
            "eager_mode",
            PLAN,
            lognormal(64, 512, 96),
            {"concurrency": 16},
            server={"enforce_eager": True},
            finding="host_overhead",
            fix_flag="(drop --enforce-eager)",
            predicted="tpot_ms_p50",
            measured="tpot_ms_p50",
            workload=plain,
        ),
        Case(
            "tp_over_host_staged_pcie",
            PLAN | {"gpu": "L40S", "tp": 4, "instance": "g6e.12xlarge"},
            lognormal(64, 512, 64),
            {"concurrency": 32},
            finding="parallelism_links",
            fix_flag="--tensor-parallel-size",
            predicted="output_tok_per_s",
            measured="output_throughput",
            better="up",
            workload=plain,
        ),
        Case(
            "prefix_caching_off_on_shared_prefixes",
            PLAN | {"enable_prefix_caching": False},
            prefixed(96, share=0.8, groups=2),
            {"concurrency": 32},
            finding="prefix_reuse",
            fix_flag="--enable-prefix-caching",
            predicted="ttft_ms_p99",
            measured="ttft_ms_p50",
            workload={"prefix_share": 0.8, "prefix_groups": 2},
        ),
    ]


def serve_and_run(
    tmp: Path,
    served: dict[str, Any],
    case: Case,
    coefficients: Any,
    *,
    load: dict[str, Any] | None = None,
    specs: list[Any] | None = None,
) -> Path:
    """One run of the case's requests against the simulated server serving ``served`` (plan
    keys and engine settings); the run's plan is what the user thinks was deployed: ``served``
    without the settings the server hid (``case.server``)."""
    load = load or case.load
    specs = specs or case.specs
    scenario = Scenario(
        model=MODEL,
        gpu=served["gpu"],
        tp=served.get("tp", 1),
        instance=served.get("instance"),
        input_len=max(s.input_len for s in specs),
        output_len=max(s.output_len for s in specs),
        load="rate" if load.get("load") == "rate" else "concurrency",
        concurrency=load.get("concurrency") or 1,
        request_rate=load.get("request_rate"),
        **{k: served[k] for k in ENGINE_KEYS if k in served},
    )
    server = start_sim_server(
        "--model", MODEL, "--scenario", scenario.model_dump_json(exclude_none=True),
        "--coefficients", json.dumps([float(c) for c in coefficients]), timeout_s=90,
    )  # fmt: skip
    workload = workload_record(
        LengthDistribution.fixed(512), LengthDistribution.fixed(128), **case.workload
    )
    try:
        config = make_run_config(
            base_url=server.base_url, model=MODEL, metrics_interval_s=0.25, workload=workload,
            **load,
        )  # fmt: skip
        plan = {k: v for k, v in served.items() if k not in case.server}
        return run_benchmark_sync(config, specs, tmp, plan=plan).run_dir
    finally:
        server.kill()


def diagnosis_of(run_dir: Path, model: PerformanceModel) -> Diagnosis:
    return diagnose(evidence_from_run(read_run_dir(run_dir)), model=model)


def per_gpu(d: Diagnosis, key: str, gpus: int) -> float:
    value = d.summary[key]
    assert value is not None
    return value / gpus if key == "output_throughput" else value


@pytest.mark.parametrize("case", cases(), ids=lambda c: c.name)
def test_a_pathology_is_found_and_its_fix_measures_as_predicted(
    case: Case, prior: PerformanceModel, tmp_path: Path
) -> None:
    coefficients = prior.coefficients_for("vllm", case.plan["gpu"])
    sick = serve_and_run(tmp_path, case.plan | case.server, case, coefficients)
    d = diagnosis_of(sick, prior)
    found = [f.key for f in d.found]
    if case.finding is None:
        assert found == [], [(f.key, f.headline) for f in d.found]
        assert not any(b.lit for b in d.branches)
        return
    assert found == [case.finding], [(f.key, f.headline) for f in d.found]
    finding = d.finding(case.finding)
    assert finding.fix is not None and case.fix_flag in finding.fix.vllm_args
    w = finding.fix.what_if
    assert w is not None
    before, after = getattr(w.before, case.predicted), getattr(w.after, case.predicted)
    if case.predicted == "output_tok_per_s":
        before, after = before / w.before.gpus, after / w.after.gpus
    predicted_up = after > before
    assert predicted_up == (case.better == "up"), (case.predicted, before, after)
    # the plan with the fix, served and measured (one replica of a fix that adds replicas, at
    # its share of the load)
    changes = dict(finding.fix.scenario_changes)
    replicas = int(changes.pop("replicas", 1) or 1)
    fixed_plan = case.plan | case.server | {k: v for k, v in changes.items() if k != "prefix_share"}
    load, specs = dict(case.load), case.specs
    if replicas > 1 and "concurrency" in load:
        load["concurrency"] = max(1, load["concurrency"] // replicas)
    if replicas > 1 and "request_rate" in load:  # every replica-th arrival, as a balancer would
        load["request_rate"] = load["request_rate"] / replicas
        specs = specs[::replicas]
    healthy = serve_and_run(tmp_path, fixed_plan, case, coefficients, load=load, specs=specs)
    d_after = diagnosis_of(healthy, prior)
    gpus_before = case.plan.get("tp", 1)
    gpus_after = fixed_plan.get("tp", 1)
    measured_before = per_gpu(d, case.measured, gpus_before)
    measured_after = per_gpu(d_after, case.measured, gpus_after)
    assert (measured_after > measured_before) == (case.better == "up"), (
        case.measured,
        measured_before,
        measured_after,
    )
