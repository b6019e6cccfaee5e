"""Server-side metrics: parse Prometheus text from ``/metrics`` and scrape it during a run.

vLLM names (domain.md): gauges ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
``vllm:kv_cache_usage_perc`` (0-1; formerly ``vllm:gpu_cache_usage_perc``); counters
``vllm:num_preemptions_total``, ``vllm:prefix_cache_queries_total``,
``vllm:prefix_cache_hits_total``, ``vllm:prompt_tokens_total``,
``vllm:generation_tokens_total``, ``vllm:request_success_total``; the ``_sum``/``_count`` of
the latency histograms. Any of them may be missing; the scraper stores what it finds.

Speculative decoding (vllm/v1/spec_decode/metrics.py, ``SpecDecodingProm``): the counters
``vllm:spec_decode_num_drafts_total``, ``vllm:spec_decode_num_draft_tokens_total`` and
``vllm:spec_decode_num_accepted_tokens_total``; the mean accepted length of a step, the bonus
token included, is ``1 + delta accepted / delta drafts`` over the run. SGLang reports it as the
gauge ``sglang:spec_accept_length`` (its metrics collector), averaged over the run's scrapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks_runner.errors import EndpointUnreachable, ResponseTooLarge
from benchmarks_runner.http_client import EndpointClient
from planner.run_files import POOL_COUNTED, MetricSample

GAUGES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "sglang:spec_accept_length",
)
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
COUNTERS = (
    "vllm:num_preemptions_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:gpu_prefix_cache_queries_total",
    "vllm:gpu_prefix_cache_hits_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    SPEC_DRAFTS,
    SPEC_DRAFT_TOKENS,
    SPEC_ACCEPTED,
    # a disaggregated endpoint's router (benchmarks_runner.simulated.disaggregated)
    "servewise:kv_transfers_total",
    "servewise:kv_transfer_seconds_total",
    "servewise:kv_transfer_bytes_total",
)
HISTOGRAMS = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
)
WANTED: frozenset[str] = frozenset(
    GAUGES + COUNTERS + tuple(f"{h}_{s}" for h in HISTOGRAMS for s in ("sum", "count"))
)
INFO_METRIC = "vllm:cache_config_info"
#: Samples of the wanted metrics kept from one scrape (a server's own page holds a few dozen;
#: more are label sets without end, which would make a short run write hundreds of MB).
MAX_SAMPLES_PER_SCRAPE = 2_000
#: Lines longer than this are skipped unparsed (no metric line of a real server comes close).
MAX_METRIC_LINE_CHARS = 8_192

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse_prometheus(text: str, wanted: Iterable[str] | None = None) -> list[Sample]:
    """Samples of the Prometheus text exposition format (comments and bad lines skipped)."""
    keep = None if wanted is None else frozenset(wanted)
    out: list[Sample] = []
    for line in text.splitlines():
        if not line or line[0] == "#" or len(line) > MAX_METRIC_LINE_CHARS:
            continue
        m = _LINE.match(line.strip())
        if not m:
            continue
        name = m.group(1)
        if keep is not None and name not in keep:
            continue
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        labels = {
            k: v.replace('\\"', '"').replace("\\\\", "\\")
            for k, v in _LABEL.findall(m.group(3) or "")
        }
        out.append(Sample(name, labels, value))
    return out


def total(samples: Iterable[Sample], name: str) -> float | None:
    """Sum of a metric over its label sets (None if absent)."""
    vals = [s.value for s in samples if s.name == name]
    return sum(vals) if vals else None


@dataclass
class ScrapeStats:
    """What the scraper saw, for self-checks and the progress display."""

    scrapes_ok: int = 0
    scrapes_failed: int = 0
    first: dict[str, float] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)
    maxima: dict[str, float] = field(default_factory=dict)
    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    info_labels: dict[str, str] | None = None
    last_error: str | None = None

    def update(self, samples: Sequence[Sample], *, measuring: bool = True) -> None:
        """Fold one scrape in; gauge means only count scrapes of the measured phase."""
        totals: dict[str, float] = {}
        shares: dict[str, int] = {}
        for s in samples:
            pool = s.labels.get("pool")
            if pool is not None and POOL_COUNTED.get(s.name, pool) != pool:
                continue  # the other pool's count of the same requests
            totals[s.name] = totals.get(s.name, 0.0) + s.value
            if s.name.endswith("_perc"):  # a share (KV usage): the mean of its engines, pools
                shares[s.name] = shares.get(s.name, 0) + 1
        for name, n in shares.items():
            totals[name] /= n
        for name, v in totals.items():
            self.first.setdefault(name, v)
            self.last[name] = v
            self.maxima[name] = max(self.maxima.get(name, v), v)
            if measuring:
                self.sums[name] = self.sums.get(name, 0.0) + v
                self.counts[name] = self.counts.get(name, 0) + 1

    def delta(self, name: str) -> float | None:
        if name not in self.first:
            return None
        return self.last[name] - self.first[name]

    def mean(self, name: str) -> float | None:
        n = self.counts.get(name, 0)
        return self.sums[name] / n if n else None

    def kv_usage(self) -> float | None:
        for name in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
            if name in self.last:
                return self.last[name]
        return None

    def kv_usage_max(self) -> float | None:
        for name in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
            if name in self.maxima:
                return self.maxima[name]
        return None

    def spec_accept_len(self) -> float | None:
        """Mean tokens a speculative step accepted over the run, the bonus token included
        (vLLM's counters, else SGLang's gauge); None when the server did not speculate."""
        drafts, accepted = self.delta(SPEC_DRAFTS), self.delta(SPEC_ACCEPTED)
        if drafts and accepted is not None:
            return 1.0 + accepted / drafts
        return self.mean("sglang:spec_accept_length")

    def as_dict(self) -> dict[str, Any]:
        return {
            "spec_accept_len": self.spec_accept_len(),
            "scrapes_ok": self.scrapes_ok,
            "scrapes_failed": self.scrapes_failed,
            "deltas": {k: self.delta(k) for k in self.first if k in COUNTERS},
            "maxima": {k: v for k, v in self.maxima.items() if k in GAUGES},
            "means": {k: self.mean(k) for k in self.counts if k in GAUGES},
            "last_error": self.last_error,
        }


class MetricsScraper:
    """Scrapes ``path`` every ``interval_s`` and hands samples to ``sink`` as run-file records."""

    def __init__(
        self,
        client: EndpointClient,
        path: str,
        clock: Callable[[], float],
        sink: Callable[[list[MetricSample]], None],
        *,
        interval_s: float = 1.0,
    ) -> None:
        self.client = client
        self.path = path
        self.clock = clock
        self.sink = sink
        self.interval_s = interval_s
        self.stats = ScrapeStats()
        self.measuring = False
        self._stop = asyncio.Event()

    async def scrape_once(self) -> list[Sample]:
        t = self.clock()
        try:
            status, _, body = await self.client.get(
                self.path, timeout_s=max(0.5, self.interval_s * 0.9)
            )
        except (EndpointUnreachable, ResponseTooLarge) as exc:
            self.stats.scrapes_failed += 1
            self.stats.last_error = str(exc)
            return []
        if status != 200:
            self.stats.scrapes_failed += 1
            self.stats.last_error = f"HTTP {status} from {self.path}"
            return []
        text = body.decode(errors="replace")
        samples = parse_prometheus(text, WANTED | {INFO_METRIC})
        info = [s for s in samples if s.name == INFO_METRIC]
        if info and self.stats.info_labels is None:
            self.stats.info_labels = info[0].labels
        samples = [s for s in samples if s.name != INFO_METRIC]
        if len(samples) > MAX_SAMPLES_PER_SCRAPE:
            self.stats.last_error = (
                f"{self.path}: {len(samples):,} wanted samples in one scrape; the first "
                f"{MAX_SAMPLES_PER_SCRAPE:,} kept"
            )
            samples = samples[:MAX_SAMPLES_PER_SCRAPE]
        self.stats.scrapes_ok += 1
        self.stats.update(samples, measuring=self.measuring)
        ts = round(t, 6)
        self.sink(
            [MetricSample(t_s=ts, name=s.name, labels=s.labels, value=s.value) for s in samples]
        )
        return samples

    async def run(self) -> None:
        """Scrape until :meth:`stop`; each tick aims at a fixed grid to avoid drift."""
        next_t = time.monotonic()
        while not self._stop.is_set():
            await self.scrape_once()
            next_t += self.interval_s
            delay = next_t - time.monotonic()
            if delay < 0:
                next_t = time.monotonic()
                delay = 0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=delay)

    def stop(self) -> None:
        self._stop.set()


def server_flags_from_info(labels: Mapping[str, str] | None) -> dict[str, str] | None:
    """vLLM exposes its cache configuration as labels of ``vllm:cache_config_info``."""
    return dict(labels) if labels else None
