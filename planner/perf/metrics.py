"""Benchmark metrics of a simulated run, with vLLM ``bench serve`` definitions (domain.md).

Per request: TTFT = first token - start; E2E = last token - start; TPOT = (E2E - TTFT) /
(output tokens - 1). ITL percentiles are pooled over all token gaps (one token a chunk).
Throughputs are over the run's duration (first request's start to the last one's end) and for
the whole deployment (replicas x one replica's). Percentiles use numpy's linear method.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.perf.simulator import SimTrace


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """numpy's linear-method percentile of ``values`` repeated ``weights`` times."""
    if values.size == 0:
        return float("nan")
    counts = np.maximum(np.rint(weights), 0).astype(np.int64)
    if counts.sum() == 0:
        return float("nan")
    order = np.argsort(values, kind="stable")
    v = values[order]
    cum = np.cumsum(counts[order])
    total = int(cum[-1])
    pos = q / 100.0 * (total - 1)
    lo = int(np.floor(pos))
    hi = min(lo + 1, total - 1)
    v_lo = v[np.searchsorted(cum, lo + 1)]
    v_hi = v[np.searchsorted(cum, hi + 1)]
    return float(v_lo + (v_hi - v_lo) * (pos - lo))


def weighted_percentile_index(values: np.ndarray, weights: np.ndarray, q: float) -> int:
    """Index of the value at the ``q`` percentile (lower neighbour): for derivatives."""
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(np.maximum(np.rint(weights[order]), 0))
    pos = q / 100.0 * (cum[-1] - 1)
    return int(order[np.searchsorted(cum, np.floor(pos) + 1)])


@dataclass(frozen=True)
class RunMetrics:
    duration_s: float
    output_tok_per_s: float
    total_tok_per_s: float
    request_per_s: float
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    weights: np.ndarray
    tpot_weights: np.ndarray
    itl_s: np.ndarray
    itl_weights: np.ndarray
    mean_running_batch: float
    kv_occupancy_mean: float
    kv_occupancy_max: float
    preemptions: int

    def ttft_ms(self, stat: str) -> float:
        return _stat(self.ttft_s, self.weights, stat) * 1e3

    def tpot_ms(self, stat: str) -> float:
        return _stat(self.tpot_s, self.tpot_weights, stat) * 1e3

    def e2e_ms(self, stat: str) -> float:
        return _stat(self.e2e_s, self.weights, stat) * 1e3

    def itl_ms(self, stat: str) -> float:
        if stat == "mean":
            # pooled mean of gaps = total decode time / total gaps
            gaps = self.tpot_weights * 1.0
            if gaps.sum() <= 0:
                return float("nan")
            return float((self.tpot_s * gaps).sum() / gaps.sum() * 1e3)
        return _stat(self.itl_s, self.itl_weights, stat) * 1e3


def _stat(values: np.ndarray, weights: np.ndarray, stat: str) -> float:
    if values.size == 0 or weights.sum() <= 0:
        return float("nan")
    if stat == "mean":
        return float((values * weights).sum() / weights.sum())
    return weighted_percentile(values, weights, float(stat.removeprefix("p")))


@dataclass(frozen=True)
class Timeline:
    """KV occupancy (0-1), running and waiting requests over the run (``time_s`` from start),
    sampled after every step or run of decode steps (2,000 to 4,000 points, evenly thinned)."""

    time_s: np.ndarray
    kv_occupancy: np.ndarray
    running: np.ndarray
    waiting: np.ndarray


def timeline(trace: SimTrace, c: np.ndarray) -> Timeline:
    return Timeline(
        time_s=trace.timeline_terms @ c - trace.start_time,
        kv_occupancy=trace.timeline_kv,
        running=trace.timeline_running,
        waiting=trace.timeline_waiting,
    )


def run_metrics(trace: SimTrace, c: np.ndarray, replicas: int) -> RunMetrics:
    """Evaluate a simulated run's metrics for full coefficient vector ``c``."""
    duration = max(float(trace.end @ c) - trace.start_time, 1e-9)
    ttft = trace.first @ c - trace.arrival @ c - trace.arrival_time
    e2e = trace.finish @ c - trace.arrival @ c - trace.arrival_time
    decode_tokens = np.maximum(trace.output_len - 1, 0)
    tpot = np.where(decode_tokens > 0, (e2e - ttft) / np.maximum(decode_tokens, 1), 0.0)
    tpot_weights = trace.count * (decode_tokens > 0)
    itl = trace.gap_terms @ c if trace.gap_terms.size else np.zeros(0)
    requests = trace.requests * replicas
    return RunMetrics(
        duration_s=duration,
        output_tok_per_s=trace.output_tokens * replicas / duration,
        total_tok_per_s=(trace.output_tokens + trace.input_tokens) * replicas / duration,
        request_per_s=requests / duration,
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=e2e,
        weights=trace.count,
        tpot_weights=tpot_weights * 1.0,
        itl_s=itl,
        itl_weights=trace.gap_weight,
        mean_running_batch=float(trace.running_integral @ c) / duration,
        kv_occupancy_mean=float(trace.kv_integral @ c) / duration,
        kv_occupancy_max=trace.kv_max,
        preemptions=trace.preemptions * replicas,
    )
