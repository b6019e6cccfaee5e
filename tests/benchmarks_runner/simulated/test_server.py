"""The simulated server as vLLM 0.33 clients see it: the chat stream's opening chunk, reasoning
in ``delta.reasoning``, Prometheus histograms, a prefix cache that per-run prompts do not hit.

The exposition is read with ``prometheus_client.parser``, the parser AIPerf 0.13 scrapes
``/metrics`` with (``aiperf/server_metrics/data_collector.py``); AIPerf itself does not run in
the tests (it pulls transformers, datasets and a tokenizer)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks_runner import build_synthetic_specs, make_run_config, run_benchmark_sync
from planner.workload import LengthDistribution
from tests.run_view import read_run

from ..conftest import SimServer

MODEL = "sim-model"
HISTOGRAMS = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
)


def _chat_events(server: SimServer, max_tokens: int) -> list[dict[str, Any]]:
    body = json.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "why is the sky blue"}],
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    request = urllib.request.Request(f"{server.base_url}/v1/chat/completions", data=body)
    with urllib.request.urlopen(request, timeout=30) as resp:
        text = resp.read().decode()
    payloads = [ev[len("data: ") :] for ev in text.split("\n\n") if ev.startswith("data: ")]
    assert payloads[-1] == "[DONE]"
    return [json.loads(p) for p in payloads[:-1]]


def test_a_chat_stream_opens_with_the_role_and_reasons_in_delta_reasoning(
    sim_server: Any,
) -> None:
    server = sim_server("--ttft-ms", "5", "--token-delay-ms", "1", "--reasoning-tokens", "3")
    events = _chat_events(server, 6)
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}  # before any token, as vLLM
    assert [d.get("reasoning") for d in deltas[1:]] == [" think"] * 3 + [None] * 3
    assert [d.get("content") for d in deltas[1:]] == [None] * 3 + [" x"] * 3
    assert not any("reasoning_content" in d for d in deltas)
    assert events[-1]["usage"]["completion_tokens"] == 6


def test_the_runner_times_a_reasoning_chat_from_its_first_reasoning_token(
    sim_server: Any, tmp_path: Path
) -> None:
    """32 reasoning tokens before 96 of content (the fixture vllm-reason.json's shape): the
    first token is the first reasoning chunk, TTFC the first content chunk, one gap between
    every two of the 128 output chunks (the opening role chunk is no token)."""
    server = sim_server("--ttft-ms", "5", "--token-delay-ms", "1", "--reasoning-tokens", "32")
    config = make_run_config(
        base_url=server.base_url, model=MODEL, api="chat", concurrency=2, scrape_metrics=False
    )
    fixed = LengthDistribution.fixed
    result = run_benchmark_sync(config, build_synthetic_specs(4, fixed(32), fixed(128)), tmp_path)
    rows = read_run(result.run_dir)["requests"]
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)
    for r in rows:
        chunks = r["chunk_times_s"]
        assert len(chunks) == 128 and r["output_tokens"] == 128
        assert r["first_chunk_s"] == chunks[0] and r["first_content_s"] == chunks[32]
    summary = result.summary or {}
    assert summary["median_ttfc_ms"] > summary["median_ttft_ms"]


def _families(server: SimServer) -> dict[str, Any]:
    with urllib.request.urlopen(f"{server.base_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_latency_metrics_are_real_histograms(sim_server: Any, tmp_path: Path) -> None:
    server = sim_server("--ttft-ms", "5", "--token-delay-ms", "1")
    config = make_run_config(
        base_url=server.base_url, model=MODEL, concurrency=3, scrape_metrics=False
    )
    fixed = LengthDistribution.fixed
    run_benchmark_sync(config, build_synthetic_specs(6, fixed(16), fixed(8)), tmp_path)
    families = _families(server)
    for name in HISTOGRAMS:
        family = families[name]
        assert family.type == "histogram", name
        buckets = [s for s in family.samples if s.name == f"{name}_bucket"]
        bounds = [float(s.labels["le"]) for s in buckets]
        counts = [s.value for s in buckets]
        assert bounds == sorted(bounds) and bounds[-1] == float("inf")
        assert counts == sorted(counts)  # cumulative
        (count,) = [s.value for s in family.samples if s.name == f"{name}_count"]
        assert counts[-1] == count
    # the 6 requests of the run and the runner's probes (max_tokens=1: no inter-token gap)
    e2e = families["vllm:e2e_request_latency_seconds"]
    (finished,) = [s.value for s in e2e.samples if s.name.endswith("_count")]
    assert finished >= 6
    itl = families["vllm:inter_token_latency_seconds"]
    (gaps,) = [s.value for s in itl.samples if s.name.endswith("_count")]
    assert gaps == 6 * 7
    assert families["vllm:num_requests_running"].type == "gauge"
    assert families["vllm:prompt_tokens"].type == "counter"  # the parser drops _total


def _hit_rate(server: SimServer, tmp_path: Path, **config: Any) -> float:
    run_config = make_run_config(base_url=server.base_url, model=MODEL, concurrency=4, **config)
    specs = build_synthetic_specs(12, LengthDistribution.fixed(256), LengthDistribution.fixed(4))
    result = run_benchmark_sync(run_config, specs, tmp_path)
    return float((result.summary or {}).get("server_prefix_cache_hit_rate") or 0.0)


def test_runs_send_their_own_prompts_unless_a_prompt_seed_is_given(
    sim_server: Any, tmp_path: Path
) -> None:
    server = sim_server("--ttft-ms", "1", "--token-delay-ms", "1")
    assert _hit_rate(server, tmp_path) < 0.05
    assert _hit_rate(server, tmp_path) < 0.05  # a second run: fresh prompts, no hits
    assert _hit_rate(server, tmp_path, prompt_seed=7) < 0.05
    assert _hit_rate(server, tmp_path, prompt_seed=7) > 0.9  # the same prompts again


def test_a_shared_prefix_is_a_hit(sim_server: Any, tmp_path: Path) -> None:
    server = sim_server("--ttft-ms", "1", "--token-delay-ms", "1")
    config = make_run_config(base_url=server.base_url, model=MODEL, concurrency=1)
    specs = build_synthetic_specs(
        8, LengthDistribution.fixed(512), LengthDistribution.fixed(4), prefix_share=0.5
    )
    result = run_benchmark_sync(config, specs, tmp_path)
    # 7 of 8 prompts find their 256-token prefix (16 whole 16-word blocks) in the cache
    rate = (result.summary or {}).get("server_prefix_cache_hit_rate") or 0.0
    assert rate == pytest.approx(7 * 256 / (8 * 512))
