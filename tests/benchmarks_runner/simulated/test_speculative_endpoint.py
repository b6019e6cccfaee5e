"""The simulated endpoint speculates with a stated acceptance and exposes vLLM's counters; a
run against it over loopback reports that acceptance beside TPOT."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks_runner.server_metrics import ScrapeStats, parse_prometheus
from benchmarks_runner.simulated.perf_timing import timing_scenario
from planner.catalog import Catalog
from planner.engine import EngineConfig
from planner.perf.model import PerformanceModel
from planner.plan import Plan, PlanWorkload
from tests.benchmarks_runner.conftest import ROOT, env_with_root, start_sim_server

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def prior(catalog: Catalog) -> list[float]:
    """The spec-sheet prior coefficients (no fit in these tests)."""
    return [float(c) for c in PerformanceModel(catalog).coefficients_for("vllm", "H100-SXM")]


def test_a_speculative_plan_times_the_server_with_its_acceptance() -> None:
    plan = Plan(
        model=MODEL,
        gpu="H100-SXM",
        tp=1,
        engine=EngineConfig(spec_method="eagle3", num_spec_tokens=4),
        workload=PlanWorkload.of(512, 128, spec_accept_len=2.5),
    )
    scenario = timing_scenario(plan)
    assert (scenario.spec_method, scenario.num_spec_tokens) == ("eagle3", 4)
    assert scenario.spec_accept_len == 2.5


def test_sglangs_accept_length_gauge_is_read_too() -> None:
    stats = ScrapeStats()
    for value in (2.0, 3.0):
        stats.update(parse_prometheus(f'sglang:spec_accept_length{{tp_rank="0"}} {value}\n'))
    assert stats.spec_accept_len() == pytest.approx(2.5)
    assert ScrapeStats().spec_accept_len() is None  # a server that does not speculate


def test_a_run_reports_the_acceptance_the_endpoint_was_configured_with(
    tmp_path: Path, prior: list[float]
) -> None:
    scenario = {
        "model": MODEL, "gpu": "H100-SXM", "tp": 1, "input_len": 64, "output_len": 64,
        "concurrency": 4, "spec_method": "eagle3", "num_spec_tokens": 4, "spec_accept_len": 2.5,
    }  # fmt: skip
    server = start_sim_server(
        "--model", MODEL, "--scenario", json.dumps(scenario), "--coefficients", json.dumps(prior)
    )
    try:
        out = tmp_path / "result.json"
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks_runner", "run", "--base-url", server.base_url,
             "--model", MODEL, "--input-len", "64", "--output-len", "64", "--concurrency", "4",
             "--num-requests", "24", "--warmup", "0", "--result-json", str(out),
             "--runs-dir", str(tmp_path / "runs")],
            cwd=ROOT, env=env_with_root(), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        server.kill()
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["server_spec_accept_len"] == pytest.approx(2.5, rel=0.05)
    assert "Mean accepted tokens/step (server):" in proc.stdout
    metrics = result["server_metrics"]["deltas"]
    # k = 4 draft tokens a step, 1.5 of them accepted on average
    drafts = metrics["vllm:spec_decode_num_drafts_total"]
    assert metrics["vllm:spec_decode_num_draft_tokens_total"] == pytest.approx(4 * drafts)
    assert metrics["vllm:spec_decode_num_accepted_tokens_total"] == pytest.approx(1.5 * drafts)
