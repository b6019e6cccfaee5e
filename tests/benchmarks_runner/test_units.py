"""Unit tests: workloads and traces, prompts and calibration, SSE parsing, metrics, files."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks_runner.config import make_run_config
from benchmarks_runner.errors import ConfigError, TraceFormatError
from benchmarks_runner.http_client import MalformedChunk, StreamResult, _SseParser
from benchmarks_runner.metrics import VLLM_RESULT_KEYS, build_vllm_result, compute_summary
from benchmarks_runner.prompts import Calibration, PromptBuilder, fit_calibration
from benchmarks_runner.server_metrics import ScrapeStats, parse_prometheus
from benchmarks_runner.workload import (
    RequestSpec,
    arrival_times,
    build_synthetic_specs,
    load_trace,
)
from planner.run_files import RequestRecord
from planner.workload import LengthDistribution, draw_lengths

from .conftest import FIXTURES, REAL

# ------------------------------------------------------------------------------ workloads


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["fixed", "uniform", "normal", "lognormal"]),
    mean=st.integers(1, 5000),
    spread=st.floats(0, 2000),
    seed=st.integers(0, 10_000),
)
def test_synthetic_lengths_are_the_planners_draw_and_seeded(
    kind: str, mean: int, spread: float, seed: int
) -> None:
    dist = LengthDistribution.from_mean_spread(kind, mean, spread)
    a = build_synthetic_specs(50, dist, dist, seed=seed)
    assert a == build_synthetic_specs(50, dist, dist, seed=seed)
    ins, outs = draw_lengths(dist, dist, 50, seed)
    assert [s.input_len for s in a] == ins.tolist() and [s.output_len for s in a] == outs.tolist()
    assert all(s.input_len >= 1 and s.output_len >= 1 for s in a)


def test_arrival_times_offer_exactly_the_rate() -> None:
    for burstiness in (1.0, 0.5, 4.0):
        t = arrival_times(200, 10.0, burstiness, seed=1)
        assert t == sorted(t) and t[-1] == pytest.approx(20.0)
    assert arrival_times(3, float("inf")) == [0.0, 0.0, 0.0]


def test_synthetic_prefix_share() -> None:
    specs = build_synthetic_specs(
        6,
        LengthDistribution.fixed(1000),
        LengthDistribution.fixed(10),
        prefix_share=0.5,
        num_prefix_groups=2,
    )
    assert [s.prefix_len for s in specs] == [500] * 6
    assert {s.prefix_group for s in specs} == {"shared-0-0", "shared-0-1"}
    with pytest.raises(ValueError, match="prefix_share"):
        build_synthetic_specs(
            1, LengthDistribution.fixed(10), LengthDistribution.fixed(10), prefix_share=1.0
        )


def test_mooncake_hash_ids_become_shared_prefixes() -> None:
    specs = load_trace(FIXTURES / "mooncake_trace.jsonl", "mooncake", time_scale=2.0)
    assert [s.arrival_s for s in specs][:3] == [0.0, 0.05, 0.125]
    by_index = {s.request_index: s for s in specs}
    # requests 0 and 7 share all three blocks; 1 shares [10, 11] with 0, 4, 7; 6 shares none
    assert by_index[0].prefix_group == "blocks:512:10,11,12" and by_index[0].prefix_len == 1099
    assert by_index[1].prefix_group == "blocks:512:10,11" and by_index[1].prefix_len == 1024
    assert by_index[2].prefix_group == "blocks:512:10" and by_index[2].prefix_len == 512
    assert by_index[6].prefix_group is None and by_index[6].prefix_len == 0


def test_csv_trace_formats() -> None:
    burst = load_trace(FIXTURES / "burstgpt.csv", "burstgpt")
    # the zero-token response row is dropped; timestamps shift to start at 0
    assert [(s.arrival_s, s.input_len, s.output_len) for s in burst] == [
        (0.0, 472, 18),
        (113.0, 417, 217),
        (126.0, 1360, 289),
    ]
    azure = load_trace(FIXTURES / "azure.csv", "azure", time_scale=2.0)
    assert [s.input_len for s in azure] == [374, 396, 879]
    assert azure[1].arrival_s == pytest.approx((50.995169 - 46.68059) / 2)
    plain = load_trace(FIXTURES / "plain.csv", "csv")
    assert [(s.arrival_s, s.input_len) for s in plain] == [(0.0, 200), (0.5, 100), (1.25, 50)]
    with pytest.raises(TraceFormatError, match="missing column"):
        load_trace(FIXTURES / "plain.csv", "burstgpt")


def test_request_spec_validates() -> None:
    with pytest.raises(ValueError, match="prefix_len"):
        RequestSpec(0, 10, 5, None, "g", 11)


def test_run_config_errors_name_field_value_and_range() -> None:
    with pytest.raises(ConfigError, match=r"concurrency=0: allowed >= 1 and <= 100000"):
        make_run_config(base_url="http://127.0.0.1:1", model="m", concurrency=0)
    with pytest.raises(ConfigError, match="base_url='ftp://x'"):
        make_run_config(base_url="ftp://x", model="m", concurrency=1)
    with pytest.raises(ConfigError, match="Authorization"):
        make_run_config(
            base_url="http://a", model="m", concurrency=1, headers={"Authorization": "Bearer x"}
        )


# ------------------------------------------------------------------------------ prompts


def test_calibration_fit_and_prompt_sizes() -> None:
    cal = fit_calibration([(16, 29), (256, 341)])  # 1.3 tokens/word + 8 overhead
    assert cal.tokens_per_word == pytest.approx(1.3) and cal.overhead_tokens == pytest.approx(8.2)
    assert cal.words_for(1308) == 1000
    single = fit_calibration([(100, 120)])
    assert single.tokens_per_word == pytest.approx(1.2)


def test_prefix_groups_share_bytes_exactly() -> None:
    b = PromptBuilder(Calibration(), seed=3)
    s1 = RequestSpec(0, 100, 4, None, "g", 60)
    s2 = RequestSpec(1, 120, 4, None, "g", 60)
    t1, t2 = b.text(s1), b.text(s2)
    assert t1.split()[:60] == t2.split()[:60] and t1.split()[60:70] != t2.split()[60:70]
    assert len(t1.split()) == 100 and len(t2.split()) == 120
    # block chains share exactly their common leading blocks
    c1 = b.text(RequestSpec(2, 1100, 4, None, "blocks:512:10,11,12", 1099))
    c2 = b.text(RequestSpec(3, 1100, 4, None, "blocks:512:10,11", 1024))
    c3 = b.text(RequestSpec(4, 600, 4, None, "blocks:512:10,20", 599))
    assert c1.split()[:1024] == c2.split()[:1024]
    assert c1.split()[:512] == c3.split()[:512] and c1.split()[512:520] != c3.split()[512:520]


# ------------------------------------------------------------------------------ SSE parsing


def _feed(events: list[bytes], chat: bool = False) -> StreamResult:
    res = StreamResult("r")
    p = _SseParser(res, chat)
    for i, ev in enumerate(events):
        p.event(ev, float(i))
    return res


def test_sse_usage_last_wins_and_per_chunk_deltas() -> None:
    def chunk(text: str, ct: int | None) -> bytes:
        obj: dict[str, Any] = {"choices": [{"text": text}]}
        if ct is not None:
            obj["usage"] = {"prompt_tokens": 7, "completion_tokens": ct}
        return b"data: " + json.dumps(obj).encode()

    res = _feed(
        [
            chunk("a b", 2),
            b": ping",
            chunk("c d e", 5),
            chunk("", 5),
            b'data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 5}}',
            b"data: [DONE]",
        ]
    )
    assert res.chunk_times == [0.0, 2.0, 3.0] and res.chunk_tokens == [2, 3, 0]
    assert res.output_tokens == 5 and res.prompt_tokens == 7 and res.per_chunk_usage
    res2 = _feed([chunk("a", None), chunk("b", None), chunk("", None)])
    assert res2.chunk_tokens == [1, 1, 0] and res2.output_tokens is None


def _chat_chunk(delta: dict[str, Any], usage: dict[str, int] | None = None) -> bytes:
    obj: dict[str, Any] = {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj).encode()


def test_chat_ttft_skips_the_opening_role_chunk_as_vllm_does() -> None:
    """vLLM 0.33 on a 10 ms/token chat server: the opening {"role": "assistant", "content": ""}
    chunk is no token (its TTFT 16.9 ms against 3.9 ms if it were, 127 gaps for 128 tokens:
    tests/benchmarks_runner/fixtures/real-tools/vllm-bench-0.33/vllm-mockchat-c16-r1.json)."""
    tokens = 128
    events = [_chat_chunk({"role": "assistant", "content": ""})]  # at t = 0
    events += [_chat_chunk({"content": " x"}) for _ in range(tokens)]  # t = 1 .. 128
    events += [_chat_chunk({"content": ""}), b"data: [DONE]"]  # finish chunk: no output
    res = _feed(events, chat=True)
    assert res.first_chunk == 1.0 and res.first_content == 1.0
    assert len(res.chunk_times) == tokens and res.chunk_times[-1] == 128.0
    vllm = json.loads((REAL / "vllm-bench-0.33" / "vllm-mockchat-c16-r1.json").read_text())
    assert {len(gaps) for gaps in vllm["itls"]} == {len(res.chunk_times) - 1} == {127}
    assert set(vllm["output_lens"]) == {tokens}


def test_chat_reasoning_is_output_and_content_is_timed_on_its_own() -> None:
    """``delta.reasoning`` (vLLM 0.33) and ``reasoning_content`` (older servers) are output: the
    first token is the first reasoning chunk; the first content chunk is TTFC."""
    for field in ("reasoning", "reasoning_content"):
        events = [_chat_chunk({"role": "assistant", "content": ""})]
        events += [_chat_chunk({field: " think"}) for _ in range(32)]
        events += [_chat_chunk({"content": " x"}) for _ in range(96)]
        res = _feed(events, chat=True)
        assert res.first_chunk == 1.0 and res.first_content == 33.0
        assert len(res.chunk_times) == 128 and res.chunk_tokens == [1] * 128
    calls = _feed([_chat_chunk({"role": "assistant", "content": ""}),
                   _chat_chunk({"tool_calls": [{"index": 0, "function": {"name": "f"}}]})],
                  chat=True)  # fmt: skip
    assert calls.first_chunk == 1.0 and calls.first_content is None


def test_per_chunk_usage_on_a_role_chunk_counts_no_token() -> None:
    usage = {"prompt_tokens": 7, "completion_tokens": 0}
    res = _feed(
        [
            _chat_chunk({"role": "assistant", "content": ""}, usage),
            _chat_chunk({"content": " a b"}, usage | {"completion_tokens": 2}),
            _chat_chunk({"content": " c"}, usage | {"completion_tokens": 3}),
        ],
        chat=True,
    )
    assert res.chunk_times == [1.0, 2.0] and res.chunk_tokens == [2, 1]
    assert res.output_tokens == 3 and res.prompt_tokens == 7


def test_sse_reasoning_then_content_and_errors() -> None:
    ev = [
        b'data: {"choices": [{"delta": {"role": "assistant", "reasoning_content": "hm"}}]}',
        b'event: message\ndata: {"choices": [{"delta": {"content": "hi"}}]}',
    ]
    res = _feed(ev, chat=True)
    assert res.first_chunk == 0.0 and res.first_content == 1.0 and res.chunk_tokens == [1, 1]
    with pytest.raises(MalformedChunk):
        _feed([b'data: {"choices": [{"text": "bro'])
    err = _feed([b'data: {"error": {"message": "KV cache full", "code": 500}}'])
    assert err.error is not None and "KV cache full" in err.error


# ------------------------------------------------------------------------------ metrics


def _row(
    i: int,
    start: float,
    chunks: list[float],
    out: int | None,
    ok: bool = True,
    warmup: bool = False,
    tokens: list[int] | None = None,
) -> RequestRecord:
    return RequestRecord(
        request_id=f"r{i}",
        request_index=i,
        warmup=warmup,
        scheduled_s=start,
        start_s=start,
        first_chunk_s=chunks[0] if chunks else None,
        first_content_s=chunks[0] if chunks else None,
        end_s=chunks[-1] if chunks else start + 0.1,
        chunk_times_s=chunks,
        chunk_tokens=tokens or [1] * len(chunks),
        prompt_tokens=100 if ok else None,
        output_tokens=out,
        input_len_target=100,
        output_len_target=4,
        status="ok" if ok else "error",
        http_status=200 if ok else 500,
        error=None if ok else "HTTP 500",
    )


def test_summary_matches_vllm_definitions_exactly() -> None:
    rows = [
        _row(0, 0.0, [0.1, 0.2, 0.3, 0.4], 4),  # ttft 100, itls 100x3, tpot 100
        _row(1, 0.5, [0.7, 1.1], 4, tokens=[1, 3]),  # multi-token chunk: tpot 0.4/3
        _row(2, 1.0, [], None, ok=False),
        _row(3, 0.0, [5.0], 1, warmup=True),  # warm-up: excluded
    ]
    s = compute_summary(rows, 2.0, percentiles=[50, 99], goodput_slos_ms={"ttft": 150})
    assert s["completed"] == 2 and s["failed"] == 1
    assert s["total_output_tokens"] == 8 and s["total_input_tokens"] == 200
    assert s["request_throughput"] == 1.0 and s["output_throughput"] == 4.0
    assert s["total_token_throughput"] == 104.0
    assert s["mean_ttft_ms"] == pytest.approx(150.0) and s["median_ttft_ms"] == pytest.approx(150)
    assert s["mean_tpot_ms"] == pytest.approx((100.0 + 400.0 / 3) / 2)
    itls = [100.0, 100.0, 100.0, 400.0]
    assert s["mean_itl_ms"] == pytest.approx(np.mean(itls))
    assert s["p99_itl_ms"] == pytest.approx(np.percentile(itls, 99))
    assert s["mean_e2el_ms"] == pytest.approx((400.0 + 600.0) / 2)
    assert s["request_goodput"] == 0.5  # only request 0 has TTFT <= 150 ms
    # vLLM's 1-second buckets: both requests touch second 0; they never overlap in time
    assert s["max_concurrent_requests"] == 2 and s["max_in_flight_requests"] == 1
    result = build_vllm_result(
        rows,
        s,
        date="20260101-000000",
        backend="openai",
        label=None,
        model_id="m",
        num_prompts=3,
        request_rate=None,
        burstiness=1.0,
        max_concurrency=None,
    )
    assert set(VLLM_RESULT_KEYS) <= set(result)
    assert result["output_lens"] == [4, 4, 0] and result["ttfts"][2] == 0.0
    assert result["errors"] == ["", "", "HTTP 500"] and result["request_rate"] == "inf"


def test_vllm_result_key_list_is_complete() -> None:
    """The keys vLLM 0.33's ``vllm bench serve --save-result --save-detailed`` wrote
    (fixtures/real-tools/vllm-bench-0.33, run with --metric-percentiles 50,99)."""
    written = json.loads((REAL / "vllm-bench-0.33" / "vllm-sim-c8-r1.json").read_text())
    assert set(VLLM_RESULT_KEYS) == {k for k in written if not k.startswith("p50_")}


# ------------------------------------------------------------------------------ server metrics


def test_prometheus_parsing() -> None:
    text = """# HELP vllm:num_requests_running x
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a",engine="0"} 3.0
vllm:num_requests_running{model_name="a",engine="1"} 2.0
vllm:kv_cache_usage_perc{model_name="a"} 0.5 1700000000
vllm:generation_tokens_total{model_name="a"} 1.5e3
garbage line
vllm:other 1
"""
    samples = parse_prometheus(
        text,
        {"vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:generation_tokens_total"},
    )
    assert len(samples) == 4 and samples[0].labels == {"model_name": "a", "engine": "0"}
    stats = ScrapeStats()
    stats.update(samples)
    stats.update([s for s in samples if s.name != "vllm:kv_cache_usage_perc"])
    assert stats.last["vllm:num_requests_running"] == 5.0
    assert stats.delta("vllm:generation_tokens_total") == 0.0 and stats.kv_usage() == 0.5
