"""What a source's latency figure is, and the model's prediction turned into the same statistic.

A measured row states the statistic of its TTFT in ``ttft_stat`` and of its time per output
token in ``itl_stat``; its ``ttft_p99_ms`` / ``tpot_p99_ms`` are the 99th percentile taken the
same way as that statistic (over the requests, or over a server histogram). Fit
(:func:`planner.perf.calibration.targets_for`) and validation
(:func:`planner.perf.validation.predicted_metrics`) evaluate the simulated run with the row's own
statistic, so a figure is never scored against another quantity. Which source reports what, and
where that was read, is in data/README.md ("What each source's latency figure is").

TTFT (``ttft_stat``):

- ``mean``: mean over the requests (``vllm bench serve`` "Mean TTFT", SGLang ``bench_serving``
  ``mean_ttft_ms``, GPUStack, dstack);
- ``p50`` (``median``): the median over the requests, numpy's linear method;
- ``p50_vllm_histogram``: Prometheus ``histogram_quantile(0.5, ...)`` over vLLM's
  ``vllm:time_to_first_token_seconds`` histogram (:data:`VLLM_TTFT_BUCKETS_S`): the requests are
  counted into buckets and the quantile interpolated linearly inside the bucket it falls in
  (:func:`histogram_quantile`), not the requests' median. With every TTFT of a run between
  2.5 and 5 s it reads 3.75 s whatever they are.

Time per output token (``itl_stat``):

- ``mean_itl``: the pooled mean over every token gap (total decode time / gaps);
- ``mean_tpot``: the mean over requests of (E2E - TTFT) / (output tokens - 1);
- ``p50_tpot`` (``median_tpot``): the median over requests of that;
- ``p50_itl_vllm_histogram``: ``histogram_quantile(0.5, ...)`` over vLLM's
  ``vllm:time_per_output_token_seconds`` (:data:`VLLM_ITL_BUCKETS_S`). vLLM V1 observes it once
  for every decode output of every request, the time since that request's previous token
  (``IterationStats.update_from_output``, vllm/v1/metrics/stats.py), so it is the pooled
  inter-token gap, not a per-request TPOT: its p99 holds the gaps a decode waited behind a
  prefill, which no request's average shows.

The model's side: per-request TTFT and TPOT and the pooled decode gaps of the simulated run
(:class:`planner.perf.metrics.RunMetrics`), weighted as the measured run's requests.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np

from planner.catalog.schema import HISTOGRAM_ITL, HISTOGRAM_TTFT, ITL_STATS, TTFT_STATS
from planner.perf.metrics import RunMetrics

__all__ = ["HISTOGRAM_ITL", "HISTOGRAM_TTFT", "ITL_STATS", "TTFT_STATS"]

#: vLLM's ``vllm:time_to_first_token_seconds`` bucket upper bounds (s) in the V1 engine,
#: ``PrometheusStatLogger.__init__`` in vllm/v1/metrics/loggers.py (vllm-project/vllm
#: @005a810bc40faa25b8870fbc8559c3462581eee3, the 0.10 series; read 2026-12-02). Tandemn ran
#: vLLM 0.10.0 (``uv pip install "vllm==0.10.0"`` in roofline/vllm/automatic_launch_1.py).
VLLM_TTFT_BUCKETS_S: Final[tuple[float, ...]] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
#: vLLM's ``vllm:time_per_output_token_seconds`` bucket upper bounds (s), same file and commit
VLLM_ITL_BUCKETS_S: Final[tuple[float, ...]] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip


def histogram_quantile(
    values: np.ndarray, weights: np.ndarray, bounds: tuple[float, ...], q: float
) -> float:
    """Prometheus ``histogram_quantile(q, ...)`` of ``values`` (weighted) counted into buckets
    with upper bounds ``bounds`` (a value equal to a bound is in that bucket, ``le``).

    With cumulative counts F(b) and N = all of them, the rank r = q N falls in the first bucket
    (lo, hi] with F(hi) >= r; the estimate is lo + (r - F(lo)) / (F(hi) - F(lo)) x (hi - lo),
    lo = 0 for the first bucket; a rank in the +Inf bucket gives the largest finite bound
    (Prometheus' promql/quantile.go bucketQuantile; Tandemn's
    roofline/vllm/prometheus_parser.py histogram_quantile does the same). NaN without values."""
    w = np.asarray(weights, dtype=float)
    v = np.asarray(values, dtype=float)
    keep = w > 0
    v, w = v[keep], w[keep]
    total = float(w.sum())
    if v.size == 0 or total <= 0:
        return math.nan
    edges = np.asarray(bounds, dtype=float)
    # cumulative count at each bound: values <= bound
    order = np.argsort(v, kind="stable")
    cum_w = np.concatenate([[0.0], np.cumsum(w[order])])
    cumulative = cum_w[np.searchsorted(v[order], edges, side="right")]
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in zip(edges, cumulative, strict=True):
        if count >= rank:
            in_bucket = count - prev_count
            if in_bucket <= 0:
                return float(bound)
            return float(prev_bound + (rank - prev_count) / in_bucket * (bound - prev_bound))
        prev_bound, prev_count = float(bound), float(count)
    return float(edges[-1])


def ttft_ms(m: RunMetrics, stat: str | None) -> float:
    """The simulated run's TTFT (ms) as ``stat`` (:data:`TTFT_STATS`; blank: mean)."""
    stat = stat or "mean"
    if stat == HISTOGRAM_TTFT:
        return histogram_quantile(m.ttft_s, m.weights, VLLM_TTFT_BUCKETS_S, 0.5) * 1e3
    return m.ttft_ms("p50" if stat in ("p50", "median") else "mean")


def ttft_p99_ms(m: RunMetrics, stat: str | None) -> float:
    """The 99th percentile of TTFT (ms) taken as the row's ``ttft_stat`` takes its figure."""
    if stat == HISTOGRAM_TTFT:
        return histogram_quantile(m.ttft_s, m.weights, VLLM_TTFT_BUCKETS_S, 0.99) * 1e3
    return m.ttft_ms("p99")


def tpot_ms(m: RunMetrics, stat: str | None) -> float:
    """The simulated run's time per output token (ms) as ``stat`` (:data:`ITL_STATS`; blank:
    mean_itl)."""
    stat = stat or "mean_itl"
    if stat == HISTOGRAM_ITL:
        return histogram_quantile(m.itl_s, m.itl_weights, VLLM_ITL_BUCKETS_S, 0.5) * 1e3
    if stat in ("p50_tpot", "median_tpot"):
        return m.tpot_ms("p50")
    if stat == "mean_tpot":
        return m.tpot_ms("mean")
    return m.itl_ms("mean")


def tpot_p99_ms(m: RunMetrics, stat: str | None) -> float:
    """The 99th percentile of the time per output token (ms) as the row's ``itl_stat`` takes
    it: the pooled gaps' histogram p99 for vLLM's histogram, else the requests' TPOT p99."""
    if stat == HISTOGRAM_ITL:
        return histogram_quantile(m.itl_s, m.itl_weights, VLLM_ITL_BUCKETS_S, 0.99) * 1e3
    return m.tpot_ms("p99")


def is_median(stat: str | None) -> bool:
    """Whether a TTFT or TPOT statistic is a median (exact or from a histogram)."""
    return stat is not None and stat.startswith(("p50", "median"))
