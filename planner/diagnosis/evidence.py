"""What a diagnosis reads: a run's requests and the server's metrics over time.

:class:`RunEvidence` is built from a run directory (:func:`evidence_from_run`: a Servewise run,
or an imported ``vllm bench serve`` / GuideLLM / AIPerf result, which the importers write as run
files) or from a live scrape of an endpoint's ``/metrics`` (:func:`evidence_from_scrape`: server
metrics only, no requests of ours).

Per-request times follow ``vllm bench serve`` (docs/domain.md): TTFT = first ``choices`` chunk -
start, ITL = gaps between successive chunks, TPOT = (E2E - TTFT) / (output tokens - 1). Server
metrics are vLLM's Prometheus names; a metric with several label sets (engines, models) is
summed per scrape. A histogram's quantile over the run is read off the difference of its
``_bucket`` counters between the first and the last scrape (linear inside a bucket, as
Prometheus' ``histogram_quantile``); its mean is ``delta _sum / delta _count``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.plan import flat_plan
from planner.run_files import POOL_COUNTED, MetricSample, RequestRecord, RunFiles

KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PREFIX_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
PREFIX_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
INFO_METRIC = "vllm:cache_config_info"

#: tool (``config.imported_from.tool``) -> how the source is named in a report
SOURCES: dict[str, str] = {
    "servewise": "Servewise run",
    "vllm": "vllm bench serve result",
    "guidellm": "GuideLLM result",
    "aiperf": "AIPerf result",
    "live": "live endpoint",
}


def _num(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class RequestTable:
    """The measured (non-warm-up) requests of a run as arrays (seconds on the run's clock).

    ``first_s``/``end_s`` are NaN for failed requests. ``gap_start``/``gap_end`` are every
    inter-chunk gap of every successful request, pooled; ``gap_owner`` the request each belongs
    to. ``has_chunk_times`` is False when the source kept no per-chunk times (GuideLLM: its chunk
    times are interpolated, so ITL is not measured).
    """

    start_s: np.ndarray
    first_s: np.ndarray
    end_s: np.ndarray
    scheduled_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    ok: np.ndarray
    gap_start: np.ndarray
    gap_end: np.ndarray
    gap_owner: np.ndarray
    gap_tokens: np.ndarray  # tokens the chunk that ends the gap carried (1 when unknown)
    has_chunk_times: bool

    @property
    def count(self) -> int:
        return int(self.start_s.size)

    @property
    def succeeded(self) -> int:
        return int(self.ok.sum())

    @property
    def ttft_s(self) -> np.ndarray:
        return (self.first_s - self.start_s)[self.ok]

    @property
    def e2e_s(self) -> np.ndarray:
        return (self.end_s - self.start_s)[self.ok]

    @property
    def tpot_s(self) -> np.ndarray:
        ok = self.ok & (self.output_tokens > 1)
        return (self.end_s[ok] - self.first_s[ok]) / (self.output_tokens[ok] - 1)

    @property
    def itl_s(self) -> np.ndarray:
        return self.gap_end - self.gap_start

    @property
    def token_gap_s(self) -> np.ndarray:
        """Each gap divided by the tokens its chunk carried: time per token between chunks."""
        return self.itl_s / np.maximum(self.gap_tokens, 1.0)

    @property
    def window_s(self) -> tuple[float, float]:
        """First start to last end of the measured requests."""
        if not self.count:
            return 0.0, 0.0
        ends = self.end_s[np.isfinite(self.end_s)]
        last = float(ends.max()) if ends.size else float(self.start_s.max())
        return float(self.start_s.min()), last

    def in_flight(self, times: np.ndarray) -> np.ndarray:
        """Requests between start and end (successful ones) at each of ``times``."""
        ok = self.ok
        starts = np.sort(self.start_s[ok])
        ends = np.sort(self.end_s[ok])
        return np.searchsorted(starts, times, side="right") - np.searchsorted(
            ends, times, side="right"
        )


def request_table(rows: Iterable[RequestRecord]) -> RequestTable:
    """Arrays of the measured records of ``requests.jsonl`` (warm-up rows left out)."""
    start: list[float] = []
    first: list[float] = []
    end: list[float] = []
    sched: list[float] = []
    prompt: list[float] = []
    output: list[float] = []
    ok: list[bool] = []
    g_start: list[float] = []
    g_end: list[float] = []
    g_owner: list[int] = []
    g_tokens: list[float] = []
    has_chunks = False
    for row in rows:
        if row.warmup:
            continue
        good = row.ok and row.first_chunk_s is not None
        chunks = row.chunk_times_s or []
        e = row.end_s if good else None
        if good and e is None:
            e = chunks[-1] if chunks else row.first_chunk_s
        index = len(start)
        start.append(row.start_s)
        first.append(row.first_chunk_s if good and row.first_chunk_s is not None else math.nan)
        end.append(e if e is not None else math.nan)
        sched.append(row.scheduled_s if row.scheduled_s is not None else math.nan)
        p = row.prompt_tokens if row.prompt_tokens is not None else row.input_len_target
        prompt.append(float(p or 0))
        o = row.output_tokens
        if o is None and row.chunk_tokens:
            o = sum(row.chunk_tokens)
        output.append(float(o) if o else math.nan)
        ok.append(good)
        if good and len(chunks) > 1:
            has_chunks = True
            g_start.extend(chunks[:-1])
            g_end.extend(chunks[1:])
            g_owner.extend([index] * (len(chunks) - 1))
            tokens = (
                row.chunk_tokens
                if row.chunk_tokens and len(row.chunk_tokens) == len(chunks)
                else [1] * len(chunks)
            )
            g_tokens.extend(float(max(1, t)) for t in tokens[1:])
    return RequestTable(
        start_s=np.asarray(start, dtype=float),
        first_s=np.asarray(first, dtype=float),
        end_s=np.asarray(end, dtype=float),
        scheduled_s=np.asarray(sched, dtype=float),
        prompt_tokens=np.asarray(prompt, dtype=float),
        output_tokens=np.asarray(output, dtype=float),
        ok=np.asarray(ok, dtype=bool),
        gap_start=np.asarray(g_start, dtype=float),
        gap_end=np.asarray(g_end, dtype=float),
        gap_owner=np.asarray(g_owner, dtype=int),
        gap_tokens=np.asarray(g_tokens, dtype=float),
        has_chunk_times=has_chunks,
    )


@dataclass(frozen=True)
class TimeSeries:
    t_s: np.ndarray
    value: np.ndarray

    def __len__(self) -> int:
        return int(self.t_s.size)


@dataclass
class MetricTable:
    """Scraped Prometheus samples by metric name, summed over label sets per scrape."""

    series: dict[str, TimeSeries] = field(default_factory=dict)
    #: histogram name -> upper bound -> cumulative count over time
    buckets: dict[str, dict[float, TimeSeries]] = field(default_factory=dict)
    info: dict[str, str] = field(default_factory=dict)  # labels of vllm:cache_config_info
    scrapes: int = 0
    #: a disaggregated endpoint's pools, each its own table (samples labelled ``pool``)
    pools: dict[str, MetricTable] = field(default_factory=dict)

    def has(self, *names: str) -> bool:
        return any(n in self.series for n in names)

    def get(self, *names: str) -> TimeSeries | None:
        for name in names:
            if name in self.series:
                return self.series[name]
        return None

    def delta(self, *names: str) -> float | None:
        """Increase of a counter over the scrapes (resets, a restarted server, are skipped)."""
        s = self.get(*names)
        if s is None or len(s) == 0:
            return None
        steps = np.diff(s.value)
        return float(steps[steps > 0].sum()) if steps.size else 0.0

    def maximum(self, *names: str) -> float | None:
        s = self.get(*names)
        return float(s.value.max()) if s is not None and len(s) else None

    def mean(self, *names: str) -> float | None:
        s = self.get(*names)
        return float(s.value.mean()) if s is not None and len(s) else None

    def histogram_mean(self, name: str) -> float | None:
        total, count = self.delta(f"{name}_sum"), self.delta(f"{name}_count")
        if total is None or not count:
            return None
        return total / count

    def histogram_count(self, name: str) -> float | None:
        return self.delta(f"{name}_count")

    def histogram_quantile(self, name: str, q: float) -> float | None:
        """The ``q`` quantile of the observations made during the scrapes (needs buckets)."""
        by_le = self.buckets.get(name)
        if not by_le:
            return None
        bounds = sorted(by_le)
        counts = np.asarray(
            [max(0.0, float(by_le[b].value[-1] - by_le[b].value[0])) for b in bounds]
        )
        counts = np.maximum.accumulate(counts)  # cumulative by construction; guard jitter
        total = counts[-1]
        if total <= 0:
            return None
        rank = q * total
        i = int(np.searchsorted(counts, rank, side="left"))
        if i >= len(bounds):
            i = len(bounds) - 1
        upper = bounds[i]
        lower = bounds[i - 1] if i > 0 else 0.0
        if math.isinf(upper):  # above the last finite bound: report that bound
            return lower
        below = counts[i - 1] if i > 0 else 0.0
        inside = counts[i] - below
        frac = (rank - below) / inside if inside > 0 else 1.0
        return lower + (upper - lower) * frac

    def rate_series(self, *names: str) -> TimeSeries | None:
        """Per-second increase of a counter between successive scrapes (at their midpoints)."""
        s = self.get(*names)
        if s is None or len(s) < 2:
            return None
        dt = np.diff(s.t_s)
        dv = np.clip(np.diff(s.value), 0.0, None)
        keep = dt > 0
        return TimeSeries((s.t_s[1:][keep] + s.t_s[:-1][keep]) / 2, dv[keep] / dt[keep])


def metric_table(samples: Iterable[MetricSample]) -> MetricTable:
    """Group the samples of ``server_metrics.jsonl`` by metric, summed over label sets (a
    pool's count of the requests both pools see only once, :data:`POOL_COUNTED`); samples
    labelled with a ``pool`` also make that pool's own table (:attr:`MetricTable.pools`)."""
    rows = list(samples)
    by_pool: dict[str, list[MetricSample]] = defaultdict(list)
    for row in rows:
        pool = row.labels.get("pool")
        if pool:
            by_pool[str(pool)].append(row)
    table = _metric_table(
        r
        for r in rows
        if not r.labels.get("pool")
        or POOL_COUNTED.get(r.name, r.labels["pool"]) == r.labels["pool"]
    )
    table.pools = {pool: _metric_table(part) for pool, part in by_pool.items()}
    return table


def _metric_table(samples: Iterable[MetricSample]) -> MetricTable:
    sums: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    buckets: dict[str, dict[float, dict[float, float]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(float))
    )
    info: dict[str, str] = {}
    times: set[float] = set()
    for row in samples:
        name, t, labels = row.name, row.t_s, row.labels
        value = _num(row.value)
        if not name or not math.isfinite(t):
            continue
        if name == INFO_METRIC:
            info.update({str(k): str(v) for k, v in labels.items()})
            continue
        if value is None:
            continue
        times.add(t)
        if name.endswith("_bucket") and "le" in labels:
            le = _num(labels["le"]) if labels["le"] not in ("+Inf", "Inf") else math.inf
            if le is None:
                continue
            buckets[name.removesuffix("_bucket")][le][t] += value
            continue
        sums[name][t] += value

    def series(points: Mapping[float, float]) -> TimeSeries:
        ts = sorted(points)
        return TimeSeries(np.asarray(ts, dtype=float), np.asarray([points[t] for t in ts]))

    return MetricTable(
        series={name: series(points) for name, points in sums.items()},
        buckets={
            name: {le: series(points) for le, points in by_le.items()}
            for name, by_le in buckets.items()
        },
        info=info,
        scrapes=len(times),
    )


@dataclass
class RunEvidence:
    """Everything a diagnosis reads about one run (or one live scrape)."""

    tool: str  # key of SOURCES
    run_id: str | None
    duration_s: float | None
    requests: RequestTable | None
    metrics: MetricTable | None
    plan: dict[str, Any] | None = None
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    self_checks: list[dict[str, Any]] = field(default_factory=list)
    server_flags: dict[str, str] = field(default_factory=dict)
    simulated: bool = False
    base_url: str | None = None
    notes: list[str] = field(default_factory=list)
    #: the plan as the run stored it (typed: a disaggregated plan's pools, SLOs and cost)
    stored_plan: dict[str, Any] | None = None

    @property
    def source(self) -> str:
        return SOURCES.get(self.tool, self.tool)

    @property
    def has_requests(self) -> bool:
        return self.requests is not None and self.requests.succeeded > 0

    @property
    def has_server_metrics(self) -> bool:
        return self.metrics is not None and self.metrics.scrapes > 0

    @property
    def has_itl(self) -> bool:
        return self.requests is not None and self.requests.has_chunk_times

    def flag(self, *names: str) -> str | None:
        """An engine setting as the server reported it (cache_config_info) or the run recorded."""
        for name in names:
            for source in (self.server_flags, self.metrics.info if self.metrics else {}):
                value = source.get(name)
                if value not in (None, "", "None"):
                    return str(value)
        return None

    def self_check(self, name: str) -> dict[str, Any] | None:
        for check in self.self_checks:
            if check.get("name") == name:
                return check
        return None


def _tool_of(meta: Mapping[str, Any]) -> str:
    imported = (meta.get("config") or {}).get("imported_from") or meta.get("imported_from")
    if isinstance(imported, Mapping):
        tool = str(imported.get("tool") or "").lower()
        for key in ("vllm", "guidellm", "aiperf"):
            if key in tool:
                return key
    return "servewise"


def evidence_from_run(run: RunFiles) -> RunEvidence:
    """The evidence of a run directory (a Servewise run or an imported result)."""
    meta = run.meta
    config = dict(meta.get("config") or {})
    imported = config.get("imported_from") or {}
    requests = request_table(run.requests) if run.requests else None
    interpolated = isinstance(imported, Mapping) and imported.get("chunk_times_interpolated")
    if requests is not None and interpolated:
        requests = _without_chunk_times(requests)
    metrics = metric_table(run.server_metrics) if run.server_metrics else None
    summary = dict(meta.get("summary") or {})
    duration = _num(summary.get("duration"))
    if duration is None and requests is not None and requests.count:
        lo, hi = requests.window_s
        duration = hi - lo or None
    endpoint = meta.get("endpoint") or {}
    flags = {str(k): str(v) for k, v in (endpoint.get("server_flags") or {}).items()}
    return RunEvidence(
        tool=_tool_of(meta),
        run_id=str(meta.get("run_id") or run.run_id),
        duration_s=duration,
        requests=requests,
        metrics=metrics,
        plan=flat_plan(meta.get("plan")) if isinstance(meta.get("plan"), Mapping) else None,
        config=config,
        summary=summary,
        self_checks=[dict(c) for c in meta.get("self_checks") or [] if isinstance(c, Mapping)],
        server_flags=flags,
        simulated=bool(meta.get("simulated")),
        base_url=endpoint.get("base_url"),
        stored_plan=dict(meta["plan"]) if isinstance(meta.get("plan"), Mapping) else None,
    )


def _without_chunk_times(table: RequestTable) -> RequestTable:
    empty = np.zeros(0)
    return RequestTable(
        start_s=table.start_s,
        first_s=table.first_s,
        end_s=table.end_s,
        scheduled_s=table.scheduled_s,
        prompt_tokens=table.prompt_tokens,
        output_tokens=table.output_tokens,
        ok=table.ok,
        gap_start=empty,
        gap_end=empty,
        gap_owner=np.zeros(0, dtype=int),
        gap_tokens=empty,
        has_chunk_times=False,
    )


def evidence_from_scrape(
    samples: Sequence[MetricSample],
    *,
    duration_s: float,
    base_url: str | None = None,
    plan: Mapping[str, Any] | None = None,
) -> RunEvidence:
    """The evidence of watching a live endpoint: its ``/metrics`` over ``duration_s``, while it
    serves its own traffic (no requests of ours, so no per-request times)."""
    metrics = metric_table(samples)
    return RunEvidence(
        tool="live",
        run_id=None,
        duration_s=duration_s,
        requests=None,
        metrics=metrics,
        plan=dict(plan) if plan else None,
        server_flags=dict(metrics.info),
        base_url=base_url,
        stored_plan=dict(plan) if plan else None,
    )
