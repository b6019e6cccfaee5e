"""Metrics exactly as ``vllm bench serve`` defines them, computed from stored request rows.

Per request (successful = HTTP 200 and at least one ``choices`` chunk):

- TTFT = first ``choices`` chunk - start (start taken just before the POST).
- ITL = gaps between successive ``choices`` chunks (chunk gaps, not token gaps), pooled over
  all requests for percentiles.
- E2E latency (``e2el``) = last ``choices`` chunk - start.
- output tokens = ``usage.completion_tokens``; if the server sent no usage, the sum of the
  per-chunk token deltas (vLLM would re-tokenize the text; there is no tokenizer here).
- TPOT = (E2E - TTFT) / (output tokens - 1), for requests with more than one output token.
- TTFC (ours) = first chunk with non-empty *content* - start: for reasoning models the first
  token is often ``reasoning_content``; TTFC is what a user waits for.

Aggregates over the run's measured duration: request, output and total token throughput;
goodput = requests meeting every SLO (ttft, tpot, e2el; ``value <= SLO``, a request with one
output token has TPOT 0) per second; mean, median, std and percentiles use numpy (linear
percentile method, as vLLM), in milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

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
    """Derived per-request values of one successful row (seconds)."""

    ttft: float
    ttfc: float | None
    e2el: float
    itls: list[float]
    output_tokens: int
    prompt_tokens: int
    tpot: float | None


def request_times(row: Mapping[str, Any]) -> RequestTimes | None:
    """Derived times of a stored row, or None if the request did not succeed."""
    if row.get("status") != "ok" or row.get("first_chunk_s") is None:
        return None
    start = float(row["start_s"])
    chunks = [float(t) for t in row.get("chunk_times_s") or []]
    first = float(row["first_chunk_s"])
    end = float(row["end_s"]) if row.get("end_s") is not None else (chunks[-1] if chunks else first)
    itls = [b - a for a, b in pairwise(chunks)]
    out = row.get("output_tokens")
    if not out:
        out = int(sum(row.get("chunk_tokens") or [])) or 1
    prompt = row.get("prompt_tokens")
    if prompt is None:
        prompt = row.get("input_len_target") or 0
    ttft = first - start
    e2el = end - start
    tpot = (e2el - ttft) / (out - 1) if out > 1 else None
    fc = row.get("first_content_s")
    return RequestTimes(
        ttft, None if fc is None else float(fc) - start, e2el, itls, int(out), int(prompt), tpot
    )


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


def _peak_output_rate(
    rows: Sequence[Mapping[str, Any]], times: Sequence[RequestTimes]
) -> tuple[float, int]:
    """vLLM's ``max_output_tokens_per_s`` (1 token per chunk, 1 s buckets from the first start)
    and ``max_concurrent_requests`` (sweep line over successful requests)."""
    if not rows:
        return 0.0, 0
    starts = [float(r["start_s"]) for r in rows]
    t0 = min(starts)
    t_end = max(s + t.e2el for s, t in zip(starts, times, strict=True))
    n_buckets = math.ceil(t_end - t0) + 1
    buckets = np.zeros(n_buckets)
    events: list[tuple[float, int]] = []
    for s, t in zip(starts, times, strict=True):
        tok = s + t.ttft
        chunk_times = [tok]
        for gap in t.itls:
            tok += gap
            chunk_times.append(tok)
        idx = np.floor(np.asarray(chunk_times) - t0).astype(int)
        idx = idx[(idx >= 0) & (idx < n_buckets)]
        np.add.at(buckets, idx, 1)
        events.append((s, 1))
        events.append((s + t.e2el, -1))
    events.sort()
    cur = peak = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return float(buckets.max()), peak


def compute_summary(
    rows: Sequence[Mapping[str, Any]],
    duration_s: float,
    *,
    percentiles: Sequence[float] = (99.0,),
    goodput_slos_ms: Mapping[str, float] | None = None,
    max_concurrency: int | None = None,
    request_rate: float | None = None,
) -> dict[str, Any]:
    """Aggregate metrics of the measured (non-warmup) rows, keyed as ``vllm bench serve``."""
    measured = [r for r in rows if not r.get("warmup")]
    ok_rows: list[Mapping[str, Any]] = []
    ok_times: list[RequestTimes] = []
    for r in measured:
        t = request_times(r)
        if t is not None:
            ok_rows.append(r)
            ok_times.append(t)
    dur = duration_s if duration_s > 0 else float("nan")
    total_in = sum(t.prompt_tokens for t in ok_times)
    total_out = sum(t.output_tokens for t in ok_times)
    ttfts = [t.ttft for t in ok_times]
    tpots = [t.tpot for t in ok_times if t.tpot is not None]
    itls = [g for t in ok_times for g in t.itls]
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
    peak_tok, peak_conc = _peak_output_rate(ok_rows, ok_times)
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
        "max_output_tokens_per_s": peak_tok,
        "max_concurrent_requests": peak_conc,
        "rtfx": 0.0,
    }
    pct = list(percentiles)
    summary |= distribution_ms("ttft", ttfts, pct)
    summary |= distribution_ms("tpot", tpots, pct)
    summary |= distribution_ms("itl", itls, pct)
    summary |= distribution_ms("e2el", e2els, pct)
    if max_concurrency is not None:
        queue = [_queue_time(r) for r in ok_rows]
        summary |= distribution_ms("client_queue_time", queue, pct)
        if request_rate is not None and not math.isinf(request_rate):
            incl = [q + t.e2el for q, t in zip(queue, ok_times, strict=True)]
            summary |= distribution_ms("e2el_including_client_queue", incl, pct)
    # Ours, beyond vLLM: time to first content token (reasoning models) and the SLOs used.
    summary |= distribution_ms("ttfc", ttfcs, pct)
    summary["goodput_slos_ms"] = dict(goodput_slos_ms) if goodput_slos_ms else None
    summary["num_measured_requests"] = len(measured)
    summary["output_tokens_from_usage"] = sum(1 for r in ok_rows if r.get("output_tokens"))
    return summary


def _queue_time(row: Mapping[str, Any]) -> float:
    sched = row.get("scheduled_s")
    return max(0.0, float(row["start_s"]) - float(sched)) if sched is not None else 0.0


def build_vllm_result(
    rows: Sequence[Mapping[str, Any]],
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
    """The ``vllm bench serve --save-result --save-detailed`` JSON of a run."""
    measured = [r for r in rows if not r.get("warmup")]
    input_lens: list[int] = []
    output_lens: list[int] = []
    ttfts: list[float] = []
    itls: list[list[float]] = []
    latencies: list[float] = []
    errors: list[str] = []
    for r in measured:
        t = request_times(r)
        prompt = r.get("prompt_tokens")
        input_lens.append(int(prompt if prompt is not None else r.get("input_len_target") or 0))
        if t is None:
            output_lens.append(0)
            ttfts.append(0.0)
            itls.append([])
            latencies.append(0.0)
            errors.append(str(r.get("error") or "failed"))
        else:
            output_lens.append(t.output_tokens)
            ttfts.append(t.ttft)
            itls.append(t.itls)
            latencies.append(t.e2el)
            errors.append("")
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
        "start_times": [float(r["start_s"]) for r in measured],
        "queue_times": [_queue_time(r) for r in measured],
        "generated_texts": ["" for _ in measured],
        "errors": errors,
    }
    for k, v in summary.items():
        result.setdefault(k, v)
    return result
