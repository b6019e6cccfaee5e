"""Performance-model timing of the simulated server: step prices, load, bursts, slowdown, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from benchmarks_runner.endpoints import SimulatedEndpoint
from benchmarks_runner.errors import EndpointStartError
from benchmarks_runner.simulated.perf_timing import (
    PerfTiming,
    PlanSpec,
    parse_coefficients,
    perf_timing_for_plan,
)
from planner.catalog import Catalog
from planner.errors import PlannerError
from planner.perf.model import PerformanceModel
from planner.perf.step_time import FEATURES, StepBatch, step_time_s
from planner.workload import LengthDistribution

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SPEC = PlanSpec(model=MODEL, gpu="H100-SXM", tp=1)


@pytest.fixture(scope="module")
def prior(catalog: Catalog) -> list[float]:
    """The spec-sheet prior coefficients (an unfitted model): no 10 s fit in these tests."""
    return [float(c) for c in PerformanceModel(catalog).coefficients_for("vllm", "H100-SXM")]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def timing(
    catalog: Catalog,
    prior: list[float],
    *,
    slowdown: float = 1.0,
    clock: Clock | None = None,
) -> PerfTiming:
    dep = perf_timing_for_plan(SPEC, catalog=catalog, coefficients=prior).deployment
    return PerfTiming(dep, prior, slowdown=slowdown, clock=clock or time.monotonic)


def test_token_delay_is_the_step_time_of_the_steady_batch(
    catalog: Catalog, prior: list[float]
) -> None:
    t = timing(catalog, prior)
    dep = t.deployment
    # 1024 in / 256 out at batch 8: 8/256 of the batch prefilling, decodes attending 1152 tokens
    batch = StepBatch()
    batch.add_decode(8 - 8 / 256, 1024 + 128, dep.sliding_window)
    batch.add_prefill(8 / 256, 1024, 0.0, dep.sliding_window)
    expected = step_time_s(batch, dep, np.asarray(prior))
    assert t.live_token_delay_s(8, 1024, 256) == pytest.approx(expected, rel=1e-12)
    assert t.timing(8, 1024, 256).token_delay_s == pytest.approx(expected, rel=1e-12)


def test_latency_grows_with_load_and_prompt(catalog: Catalog, prior: list[float]) -> None:
    t = timing(catalog, prior)
    delays = [t.live_token_delay_s(b, 512, 128) for b in (1, 8, 64, 256)]
    assert delays == sorted(delays) and delays[-1] > 1.5 * delays[0]
    short = timing(catalog, prior).timing(1, 128, 64).ttft_s
    long = timing(catalog, prior).timing(1, 8192, 64).ttft_s
    assert long > 3 * short


def test_a_burst_queues_its_prefills_until_their_first_tokens(
    catalog: Catalog, prior: list[float]
) -> None:
    clock = Clock()
    t = timing(catalog, prior, clock=clock)
    ttfts = [t.timing(k + 1, 4096, 64).ttft_s for k in range(8)]  # 8 arrive at once
    assert ttfts == sorted(ttfts) and ttfts[-1] > 3 * ttfts[0]
    clock.now += 60.0  # every one of them has its first token by now
    assert t.timing(1, 4096, 64).ttft_s == pytest.approx(ttfts[0], rel=1e-9)


def test_slowdown_multiplies_every_delay(catalog: Catalog, prior: list[float]) -> None:
    base = timing(catalog, prior, clock=Clock()).timing(4, 1000, 100)
    slow = timing(catalog, prior, clock=Clock(), slowdown=2.0).timing(4, 1000, 100)
    assert slow.ttft_s == pytest.approx(2 * base.ttft_s)
    assert slow.token_delay_s == pytest.approx(2 * base.token_delay_s)
    with pytest.raises(ValueError, match="slowdown"):
        timing(catalog, prior, slowdown=0.0)


def test_the_plan_sets_queueing_and_kv_capacity(catalog: Catalog, prior: list[float]) -> None:
    t = timing(catalog, prior)
    assert t.max_num_seqs == 1024  # vllm serve's default on a >= 70 GiB GPU
    assert t.kv_capacity_tokens > 100_000
    small = perf_timing_for_plan(
        PlanSpec(model=MODEL, gpu="H100-SXM", max_num_seqs=64), catalog=catalog, coefficients=prior
    )
    assert small.max_num_seqs == 64


def test_a_plan_that_does_not_resolve_names_the_field(catalog: Catalog, prior: list[float]) -> None:
    with pytest.raises(PlannerError, match="tp"):
        perf_timing_for_plan(
            PlanSpec(model=MODEL, gpu="H100-SXM", tp=3), catalog=catalog, coefficients=prior
        )


def test_plan_spec_from_a_run_plan() -> None:
    spec = PlanSpec.from_plan(
        {"model": MODEL, "gpu": "L40S", "tp": 2, "pp": 1, "instance": "g6e.12xlarge",
         "max_num_seqs": 256, "kv_cache_dtype": "fp8", "precision": "fp8"}
    )  # fmt: skip
    assert (spec.gpu, spec.tp, spec.instance, spec.max_num_seqs) == ("L40S", 2, "g6e.12xlarge", 256)
    assert spec.scenario().kv_cache_dtype == "fp8"


def test_parse_coefficients(tmp_path: Path, prior: list[float]) -> None:
    assert parse_coefficients(json.dumps(prior)) == prior
    by_name = parse_coefficients(json.dumps({"roofline": 2.0}))
    assert by_name[FEATURES.index("roofline")] == 2.0 and sum(by_name) == 2.0
    path = tmp_path / "c.json"
    path.write_text(json.dumps(prior))
    assert parse_coefficients(str(path)) == prior
    with pytest.raises(ValueError, match="expected a list of"):
        parse_coefficients("[1, 2]")
    with pytest.raises(ValueError, match="unknown terms"):
        parse_coefficients('{"warp_drive": 1}')
    with pytest.raises(ValueError, match=">= 0"):
        parse_coefficients(json.dumps([-1.0] * len(FEATURES)))
    with pytest.raises(ValueError, match="not JSON and not a readable file"):
        parse_coefficients(str(tmp_path / "missing.json"))


# ----- the server's command line ------------------------------------------------------------------
def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def test_cli_serves_a_plan_with_perf_timing(prior: list[float]) -> None:
    endpoint = SimulatedEndpoint(
        ["--model", MODEL, "--gpu", "H100-SXM", "--tp", "1", "--coefficients", json.dumps(prior)]
    )
    started = time.monotonic()
    base = endpoint.start(threading.Event())
    try:
        assert time.monotonic() - started < 15
        metrics = _get(f"{base}/metrics")
        assert 'max_concurrency="1024"' in metrics
        assert "vllm:kv_cache_usage_perc" in metrics and 'kv_capacity_tokens="None"' not in metrics
        models = json.loads(_get(f"{base}/v1/models"))
        assert models["data"][0]["id"] == MODEL
        assert models["data"][0]["owned_by"] == "servewise-simulated"
    finally:
        endpoint.stop()
    assert endpoint.process is not None and endpoint.process.poll() is not None


def test_cli_rejects_a_bad_plan_in_one_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks_runner.simulated", "--model", MODEL,
         "--gpu", "H100-SXM", "--tp", "3", "--coefficients", json.dumps([1.0] * len(FEATURES))],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode != 0
    assert "cannot time the plan" in out.stderr and "tp" in out.stderr
    assert "Traceback" not in out.stderr


def test_endpoint_start_failure_says_why(prior: list[float]) -> None:
    endpoint = SimulatedEndpoint(["--model", MODEL, "--gpu", "NO-SUCH-GPU"])
    with pytest.raises(EndpointStartError, match="exited with code"):
        endpoint.start(threading.Event())


def test_the_server_paces_tokens_at_the_batch_running_now(
    prior: list[float], tmp_path: Path
) -> None:
    """Closed loop of 32: every request, also the first one admitted alone, decodes at the
    pace of the full batch; one request alone decodes faster (latency grows with load)."""
    from benchmarks_runner import build_synthetic_specs, make_run_config
    from benchmarks_runner.run_manager import RunManager
    from tests.run_view import read_run

    manager = RunManager(tmp_path)  # runs in its own thread: no event loop of the test's

    endpoint = SimulatedEndpoint(
        ["--model", MODEL, "--gpu", "H100-SXM", "--coefficients", json.dumps(prior)]
    )
    base = endpoint.start(threading.Event())
    try:
        tpots = {}
        for concurrency in (1, 32):
            config = make_run_config(base_url=base, model=MODEL, concurrency=concurrency)
            specs = build_synthetic_specs(
                concurrency, LengthDistribution.fixed(512), LengthDistribution.fixed(24)
            )
            run = manager.start(config, specs)
            assert run.wait(60) and run.run_dir is not None, run.error
            rows = [r for r in read_run(run.run_dir)["requests"] if r["status"] == "ok"]
            tpots[concurrency] = sorted(
                (r["end_s"] - r["first_chunk_s"]) / (r["output_tokens"] - 1) for r in rows
            )
    finally:
        endpoint.stop()
    alone, batch = tpots[1][0], tpots[32]
    # paced at admission only, the first of the 32 (admitted alone) would decode at `alone`
    assert batch[0] > 1.5 * alone
    assert float(np.median(batch)) > 2 * alone


# ----- start-up with and without a cached fit -------------------------------------------------
def test_a_start_with_a_cached_fit_listens_without_fitting(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from planner.perf.model import fit_is_cached, get_performance_model

    get_performance_model(catalog)  # the session's cached fit (fitted here if no test did yet)
    assert fit_is_cached(catalog)
    flags = ["--model", MODEL, "--gpu", "L4", "--tp", "1"]
    log = tmp_path / "server.log"
    endpoint = SimulatedEndpoint(flags, log_path=log)
    assert endpoint.start(threading.Event()).startswith("http://127.0.0.1:")
    endpoint.stop()
    assert "fitting the performance model" not in log.read_text()
    # with an empty cache it says so before it fits (and before it listens)
    monkeypatch.setenv("SERVEWISE_CACHE_DIR", str(tmp_path / "empty-cache"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks_runner.simulated", "--port", "0", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        said = proc.stderr.readline()
        assert "fitting the performance model before listening: no cached fit yet" in said
    finally:
        proc.kill()
        proc.wait(timeout=30)
