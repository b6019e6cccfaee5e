"""Metrics exactly as ``vllm bench serve`` (vLLM 0.33) defines them, from stored request records.

Per request (successful = HTTP 200 and at least one output chunk; records in
:class:`planner.run_files.RequestRecord`):

- TTFT = first chunk carrying output - start (start taken just before the POST). On chat, an
  opening chunk with only ``{"role": "assistant", "content": ""}`` is not output; content,
  reasoning (``delta.reasoning``, or the older ``reasoning_content``) and tool-call deltas are.
  On completions every ``choices`` chunk is output, as vLLM counts it.
- ITL = gaps between successive output chunks (chunk gaps, not token gaps), pooled over all
  requests for percentiles.
- E2E latency (``e2el``) = last output chunk - start.
- output tokens = ``usage.completion_tokens``; if the server sent no usage, the sum of the
  per-chunk token deltas (vLLM would re-tokenize the text; there is no tokenizer here).
- TPOT = (E2E - TTFT) / (output tokens - 1), for requests with more than one output token.
- TTFC (Servewise's) = first chunk with non-empty *content* - start: a reasoning model streams
  its reasoning first; TTFC is what a user waits for.

Aggregates over the run's measured duration: request, output and total token throughput;
goodput = requests meeting every SLO (ttft, tpot, e2el; ``value <= SLO``, a request with one
output token has TPOT 0) per second; mean, median, std and percentiles use numpy (linear
percentile method, as vLLM), in milliseconds; the peaks over 1-second buckets as vLLM counts
them (:func:`peaks`). Figures vLLM does not have carry Servewise names (``ttfc``,
``client_queue_time``, ``max_in_flight_requests``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from planner.run_files import RequestRecord

PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")

# Keys of `vllm bench serve --save-result --save-detailed` for a generative run with the
# default percentile metrics (ttft, tpot, itl; e2el always) and --metric-percentiles 99.
# Source: vllm-project/vllm vllm/benchmarks/serve.py (benchmark() `result` dict,
# process_one_metric(), main_async() `result_json` setup keys).
VLLM_RESULT_KEYS: tuple[str, ...] = (
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "queue_times",
    "generated_texts",
    "errors",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "rtfx",
    "mean_ttft_ms",
    "median_ttft_ms",
    "std_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "std_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "std_itl_ms",
    "p99_itl_ms",
    "mean_e2el_ms",
    "median_e2el_ms",
    "std_e2el_ms",
    "p99_e2el_ms",
)
DETAILED_KEYS = (
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "queue_times",
    "generated_texts",
    "errors",
)


@dataclass(frozen=True, slots=True)
class RequestTimes:
    """Derived per-request values of one successful record (seconds); ``itls`` is None when
    the tool that measured it kept no per-chunk times."""

    ttft: float
    ttfc: float | None
    e2el: float
    itls: list[float] | None
    output_tokens: int
    prompt_tokens: int
    tpot: float | None


def request_times(record: RequestRecord) -> RequestTimes | None:
    """Derived times of a stored record, or None if the request did not succeed."""
    if not record.ok or record.first_chunk_s is None:
        return None
    start = record.start_s
    first = record.first_chunk_s
    chunks = record.chunk_times_s
    end = record.end_s if record.end_s is not None else (chunks[-1] if chunks else first)
    itls = None if chunks is None else [b - a for a, b in pairwise(chunks)]
    out = record.output_tokens
    if not out:
        out = int(sum(record.chunk_tokens or [])) or 1
    prompt = record.prompt_tokens
    if prompt is None:
        prompt = record.input_len_target or 0
    ttft = first - start
    e2el = end - start
    tpot = (e2el - ttft) / (out - 1) if out > 1 else None
    fc = record.first_content_s
    return RequestTimes(ttft, None if fc is None else fc - start, e2el, itls, out, prompt, tpot)


def _p_word(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def distribution_ms(
    name: str, values_s: Sequence[float], percentiles: Sequence[float]
) -> dict[str, float]:
    """mean/median/std/pXX of ``values_s`` in ms, keyed as vLLM (``mean_ttft_ms``...)."""
    arr = np.asarray(values_s if len(values_s) else [0.0], dtype=float)
    out = {
        f"mean_{name}_ms": float(np.mean(arr) * 1000),
        f"median_{name}_ms": float(np.median(arr) * 1000),
        f"std_{name}_ms": float(np.std(arr) * 1000),
    }
    for p in percentiles:
        out[f"p{_p_word(p)}_{name}_ms"] = float(np.percentile(arr, p) * 1000)
    return out


@dataclass(frozen=True, slots=True)
class Peaks:
    """vLLM's peak figures and Servewise's exact peak of requests in flight."""

    max_output_tokens_per_s: float | None
    max_concurrent_requests: int
    max_in_flight_requests: int


def peaks(records: Sequence[RequestRecord], times: Sequence[RequestTimes]) -> Peaks:
    """Over 1-second buckets from the first start, as ``vllm bench serve`` counts them:

    - ``max_output_tokens_per_s``: the most output chunks in one bucket (vLLM counts one token
      a chunk: TTFT then the ITL gaps); None when no request has per-chunk times;
    - ``max_concurrent_requests``: the most requests active in one bucket, a request counting
      in every bucket from ``floor(start)`` to ``ceil(end)`` (exclusive): a closed loop of C
      shows up to 2C, since a bucket holds the requests that ended and those that replaced them;
    - ``max_in_flight_requests`` (Servewise's): the exact peak of overlapping requests
      (sweep line over ``[start, end)``, ends before starts at a tie).
    """
    if not records:
        return Peaks(None, 0, 0)
    starts = [r.start_s for r in records]
    t0 = min(starts)
    t_end = max(s + t.e2el for s, t in zip(starts, times, strict=True))
    n_buckets = math.ceil(t_end - t0) + 1
    tokens = np.zeros(n_buckets)
    active = np.zeros(n_buckets)
    any_chunks = False
    events: list[tuple[float, int]] = []
    for s, t in zip(starts, times, strict=True):
        if t.itls is not None:
            any_chunks = True
            chunk_times = s + t.ttft + np.concatenate(([0.0], np.cumsum(t.itls)))
            idx = np.floor(chunk_times - t0).astype(int)
            idx = idx[(idx >= 0) & (idx < n_buckets)]
            np.add.at(tokens, idx, 1)
        first = int(s - t0)
        last = min(n_buckets, math.ceil(s + t.e2el - t0))
        active[first:last] += 1
        events.append((s, 1))
        events.append((s + t.e2el, -1))
    events.sort()
    current = peak = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return Peaks(float(tokens.max()) if any_chunks else None, int(active.max()), peak)


def compute_summary(
    records: Sequence[RequestRecord],
    duration_s: float,
    *,
    percentiles: Sequence[float] = (99.0,),
    goodput_slos_ms: Mapping[str, float] | None = None,
    max_concurrency: int | None = None,
    request_rate: float | None = None,
) -> dict[str, Any]:
    """Aggregate metrics of the measured (non-warmup) records, keyed as ``vllm bench serve``.

    What the records cannot give is absent, not zero: ITL and the peak output rate when no
    record has per-chunk times.
    """
    measured = [r for r in records if not r.warmup]
    ok_records: list[RequestRecord] = []
    ok_times: list[RequestTimes] = []
    for r in measured:
        t = request_times(r)
        if t is not None:
            ok_records.append(r)
            ok_times.append(t)
    dur = duration_s if duration_s > 0 else float("nan")
    total_in = sum(t.prompt_tokens for t in ok_times)
    total_out = sum(t.output_tokens for t in ok_times)
    ttfts = [t.ttft for t in ok_times]
    tpots = [t.tpot for t in ok_times if t.tpot is not None]
    with_chunks = [t.itls for t in ok_times if t.itls is not None]
    itls = [g for gaps in with_chunks for g in gaps]
    e2els = [t.e2el for t in ok_times]
    ttfcs = [t.ttfc for t in ok_times if t.ttfc is not None]
    good = None
    if goodput_slos_ms:
        n_good = 0
        for t in ok_times:
            vals = {"ttft": t.ttft, "tpot": t.tpot or 0.0, "e2el": t.e2el}
            if all(vals[k] <= v / 1000.0 for k, v in goodput_slos_ms.items() if k in vals):
                n_good += 1
        good = n_good / dur
    peak = peaks(ok_records, ok_times)
    summary: dict[str, Any] = {
        "duration": duration_s,
        "completed": len(ok_times),
        "failed": len(measured) - len(ok_times),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok_times) / dur,
        "request_goodput": good,
        "output_throughput": total_out / dur,
        "total_token_throughput": (total_in + total_out) / dur,
        "max_concurrent_requests": peak.max_concurrent_requests,
        "rtfx": 0.0,
    }
    if peak.max_output_tokens_per_s is not None:
        summary["max_output_tokens_per_s"] = peak.max_output_tokens_per_s
    pct = list(percentiles)
    summary |= distribution_ms("ttft", ttfts, pct)
    summary |= distribution_ms("tpot", tpots, pct)
    if with_chunks:
        summary |= distribution_ms("itl", itls, pct)
    summary |= distribution_ms("e2el", e2els, pct)
    if max_concurrency is not None:
        queue = [_queue_time(r) for r in ok_records]
        summary |= distribution_ms("client_queue_time", queue, pct)
        if request_rate is not None and not math.isinf(request_rate):
            incl = [q + t.e2el for q, t in zip(queue, ok_times, strict=True)]
            summary |= distribution_ms("e2el_including_client_queue", incl, pct)
    # Servewise's own, beyond vLLM: time to first content token (reasoning models think
    # first), the exact peak of requests in flight, the SLOs used.
    summary |= distribution_ms("ttfc", ttfcs, pct)
    summary["max_in_flight_requests"] = peak.max_in_flight_requests
    summary["goodput_slos_ms"] = dict(goodput_slos_ms) if goodput_slos_ms else None
    summary["num_measured_requests"] = len(measured)
    summary["output_tokens_from_usage"] = sum(1 for r in ok_records if r.output_tokens)
    return summary


def _queue_time(record: RequestRecord) -> float:
    sched = record.scheduled_s
    return max(0.0, record.start_s - sched) if sched is not None else 0.0


def build_vllm_result(
    records: Sequence[RequestRecord],
    summary: Mapping[str, Any],
    *,
    date: str,
    backend: str,
    label: str | None,
    model_id: str,
    num_prompts: int,
    request_rate: float | None,
    burstiness: float,
    max_concurrency: int | None,
) -> dict[str, Any]:
    """The ``vllm bench serve --save-result --save-detailed`` JSON of a run (``itls`` only when
    the records have per-chunk times)."""
    measured = [r for r in records if not r.warmup]
    input_lens: list[int] = []
    output_lens: list[int] = []
    ttfts: list[float] = []
    itls: list[list[float]] = []
    latencies: list[float] = []
    errors: list[str] = []
    for r in measured:
        t = request_times(r)
        prompt = r.prompt_tokens
        input_lens.append(int(prompt if prompt is not None else r.input_len_target or 0))
        if t is None:
            output_lens.append(0)
            ttfts.append(0.0)
            itls.append([])
            latencies.append(0.0)
            errors.append(str(r.error or "failed"))
        else:
            output_lens.append(t.output_tokens)
            ttfts.append(t.ttft)
            itls.append(t.itls or [])
            latencies.append(t.e2el)
            errors.append("")
    chunked = any(r.chunk_times_s is not None for r in measured)
    result: dict[str, Any] = {
        "date": date,
        "endpoint_type": backend,
        "backend": backend,
        "label": label,
        "model_id": model_id,
        "tokenizer_id": None,
        "num_prompts": num_prompts,
        "request_rate": request_rate if request_rate is not None else "inf",
        "burstiness": burstiness,
        "max_concurrency": max_concurrency,
        "input_lens": input_lens,
        "output_lens": output_lens,
        "ttfts": ttfts,
        "itls": itls,
        "latencies": latencies,
        "start_times": [r.start_s for r in measured],
        "queue_times": [_queue_time(r) for r in measured],
        "generated_texts": ["" for _ in measured],
        "errors": errors,
    }
    if not chunked:
        del result["itls"]
    for k, v in summary.items():
        result.setdefault(k, v)
    return result
