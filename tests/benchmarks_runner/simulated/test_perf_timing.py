"""The simulated server timed by the performance model's engine: streaming, cancelling, the
plan's limits, the command line."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from benchmarks_runner.endpoints import SimulatedEndpoint
from benchmarks_runner.errors import EndpointStartError
from benchmarks_runner.simulated.perf_timing import (
    EngineTiming,
    engine_timing,
    parse_coefficients,
    timing_scenario,
)
from planner.catalog import Catalog
from planner.engine import EngineConfig
from planner.errors import PlannerError
from planner.perf.model import PerformanceModel
from planner.perf.step_time import FEATURES
from planner.plan import Plan

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SPEC = Plan(model=MODEL, gpu="H100-SXM", tp=1)


@pytest.fixture(scope="module")
def prior(catalog: Catalog) -> list[float]:
    """The spec-sheet prior coefficients (an unfitted model): no 10 s fit in these tests."""
    return [float(c) for c in PerformanceModel(catalog).coefficients_for("vllm", "H100-SXM")]


def timing(catalog: Catalog, prior: list[float], **kwargs: Any) -> EngineTiming:
    return engine_timing(SPEC, catalog=catalog, coefficients=prior, **kwargs)


async def _stream(t: EngineTiming, prompt: int, output: int, cached: int = 0) -> list[int]:
    return [n async for n in t.tokens(prompt, output, cached)]


def test_the_engine_streams_every_token_once_in_order(catalog: Catalog, prior: list[float]) -> None:
    """Four requests at once through the performance model's engine (100 x faster than the
    model, so the test is quick): each sees 1, 2, ..., its length; the engine ends empty."""
    t = timing(catalog, prior, slowdown=0.01)

    async def main() -> list[list[int]]:
        return await asyncio.gather(*(_stream(t, 256, n) for n in (1, 5, 16, 40)))

    seen = asyncio.run(main())
    assert [s[-1] for s in seen] == [1, 5, 16, 40]
    assert all(s == sorted(set(s)) for s in seen)  # strictly increasing, nothing twice
    assert t.engine.idle and t.running == 0 and t.kv_usage == 0.0 and t.steps >= 40


def test_a_client_that_goes_away_frees_its_request(catalog: Catalog, prior: list[float]) -> None:
    t = timing(catalog, prior, slowdown=0.01)

    async def main() -> None:
        tokens = t.tokens(512, 1000)
        async with contextlib.aclosing(tokens):
            async for n in tokens:
                if n == 3:
                    assert t.running == 1 and t.kv_usage > 0
                    break

    asyncio.run(main())
    assert t.running == 0 and t.engine.idle and t.kv_usage == 0.0


def test_slowdown_is_validated(catalog: Catalog, prior: list[float]) -> None:
    with pytest.raises(ValueError, match="slowdown"):
        timing(catalog, prior, slowdown=0.0)


def test_the_plan_sets_queueing_and_kv_capacity(catalog: Catalog, prior: list[float]) -> None:
    t = timing(catalog, prior)
    assert t.max_num_seqs == 1024  # vllm serve's default on a >= 70 GiB GPU
    assert t.kv_capacity_tokens > 100_000
    small = engine_timing(
        Plan(model=MODEL, gpu="H100-SXM", engine=EngineConfig(max_num_seqs=64)),
        catalog=catalog,
        coefficients=prior,
    )
    assert small.max_num_seqs == 64


def test_a_plan_that_does_not_resolve_names_the_field(catalog: Catalog, prior: list[float]) -> None:
    with pytest.raises(PlannerError, match="tp"):
        engine_timing(Plan(model=MODEL, gpu="H100-SXM", tp=3), catalog=catalog, coefficients=prior)


def test_every_engine_setting_of_the_plan_times_the_server(
    catalog: Catalog, prior: list[float]
) -> None:
    engine = EngineConfig(
        max_num_seqs=96, max_num_batched_tokens=4096, kv_cache_dtype="fp8",
        gpu_memory_utilization=0.8, enable_prefix_caching=True, max_model_len=8192,
    )  # fmt: skip
    plan = Plan(model=MODEL, gpu="L40S", instance="g6e.12xlarge", tp=2, engine=engine)
    scenario = timing_scenario(plan)
    assert (scenario.kv_cache_dtype, scenario.gpu_memory_utilization) == ("fp8", 0.8)
    assert (scenario.enable_prefix_caching, scenario.max_model_len) == (True, 8192)
    timed = engine_timing(plan, catalog=catalog, coefficients=prior)
    assert timed.max_num_seqs == 96
    roomier = engine.model_copy(update={"gpu_memory_utilization": 0.9})
    more = engine_timing(
        plan.model_copy(update={"engine": roomier}), catalog=catalog, coefficients=prior
    )
    # more of the GPU for vLLM's budget: more KV cache for the server's admission
    assert more.kv_capacity_tokens > timed.kv_capacity_tokens


def test_the_endpoint_of_a_plan_serves_its_engine_settings(
    catalog: Catalog, prior: list[float]
) -> None:
    plan = Plan(model=MODEL, gpu="H100-SXM", engine=EngineConfig(gpu_memory_utilization=0.5))
    endpoint = SimulatedEndpoint.for_plan(plan, coefficients=prior)
    base = endpoint.start(threading.Event())
    try:
        metrics = _get(f"{base}/metrics")
    finally:
        endpoint.stop()
    expected = engine_timing(plan, catalog=catalog, coefficients=prior)
    assert f'kv_capacity_tokens="{expected.kv_capacity_tokens}"' in metrics


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
    base = endpoint.start(threading.Event())  # given coefficients: no fit before it listens
    try:
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


# ----- start-up with a cached, a shipped and no fit -----------------------------------------
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
    # an empty cache (a fresh install): the fit shipped in data/ serves, nothing is fitted
    monkeypatch.setenv("SERVEWISE_CACHE_DIR", str(tmp_path / "empty-cache"))
    fresh_log = tmp_path / "fresh.log"
    endpoint = SimulatedEndpoint(flags, log_path=fresh_log)
    assert endpoint.start(threading.Event()).startswith("http://127.0.0.1:")
    endpoint.stop()
    assert "fitting the performance model" not in fresh_log.read_text()
    assert not (tmp_path / "empty-cache").exists()
    # with no fit at hand (the cache off) it says so before it fits (and before it listens)
    monkeypatch.setenv("SERVEWISE_FIT_CACHE", "0")
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks_runner.simulated", "--port", "0", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        said = proc.stderr.readline()
        assert "fitting the performance model before listening: the fit cache is off" in said
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_a_request_the_kv_cache_can_never_hold_is_refused_on_arrival(prior: list[float]) -> None:
    """The engine would never schedule it (vLLM refuses such a request with a 400)."""
    endpoint = SimulatedEndpoint(
        ["--model", MODEL, "--gpu", "L4", "--coefficients", json.dumps(prior)]
    )
    base = endpoint.start(threading.Event())
    try:
        body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 10_000_000}).encode()
        request = urllib.request.Request(f"{base}/v1/completions", data=body)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 400
        assert "more than the KV cache" in refused.value.read().decode()
    finally:
        endpoint.stop()


def test_a_served_requests_tokens_stream_the_request_path_after_their_step(
    catalog: Catalog, prior: list[float]
) -> None:
    """The performance model times a served request's first token the fitted request path
    (step_time ``request_path``) after the step that made it; the simulated server streams
    every step's tokens that long after the step, so a 300 ms path (30 x 10 ms) is never beaten
    and the tokens still come once each, in order. Only a lower bound and the order are checked:
    how late a loaded machine delivers them is not."""
    coefficients = list(prior)
    coefficients[FEATURES.index("request_path")] = 30.0
    t = timing(catalog, coefficients)
    assert t.engine.request_path_s == pytest.approx(0.3)

    async def main() -> tuple[float, float, list[int]]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        seen: list[int] = []
        first = 0.0
        async for n in t.tokens(64, 4):
            if not seen:
                first = loop.time() - start
            seen.append(n)
        return first, loop.time() - start, seen

    first, end, seen = asyncio.run(main())
    assert seen == sorted(set(seen)) and seen[-1] == 4
    assert first >= 0.3 and end >= 0.3
