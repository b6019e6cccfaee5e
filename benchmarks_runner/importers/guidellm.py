"""GuideLLM's benchmarks JSON (checked against GuideLLM 0.8.1's files; one run per benchmark).

Per request GuideLLM keeps Unix-second timings: ``request_start``, ``first_token_iteration``
(the first streamed output: vLLM's first token), ``first_output_token_iteration`` (the first
content), ``last_token_iteration`` (the last output: vLLM's end of E2E), ``request_end``,
``scheduled_at``, and ``token_iterations`` (how many chunks), but not when each chunk came: the
records have no chunk times, so the run has no ITL (vLLM's ITL is the gaps between chunks).
GuideLLM's own "ITL" (a request's mean gap, ``(last - first) / (tokens - 1)``: vLLM's TPOT) and
"TPOT" (which counts the first token: ``(last - start) / tokens``) are kept under GuideLLM's
names in ``summary["tool_metrics"]``, not under vLLM's.

Model, target URL and API come from ``config.spec.backend`` (``model``, ``target``,
``request_format``), or from a benchmark's own ``config.backend``; older files had
``args.model`` / ``args.target``.
"""

from __future__ import annotations

from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from benchmarks_runner.errors import ImportFormatError
from benchmarks_runner.importers.common import (
    Count,
    ImportedRun,
    NonNegative,
    RecordBuilder,
    iso_utc,
    load_json,
    planned_means,
    summarise,
    tool_stats,
    validate,
)
from planner.run_files import QUEUE_TOLERANCE_S, RequestRecord

TOOL = "GuideLLM"
#: GuideLLM's metrics kept as it printed them: its name -> the statistics of the successes
TOOL_METRICS = (
    "time_to_first_token_ms",
    "time_to_first_output_token_ms",
    "inter_token_latency_ms",
    "time_per_output_token_ms",
    "request_latency",
    "request_concurrency",
    "output_tokens_per_second",
    "tokens_per_second",
    "prompt_tokens_per_second",
    "requests_per_second",
)
STATS = ("mean", "median", "std_dev", "min", "max", "count")
PERCENTILES = ("p50", "p90", "p95", "p99")


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Timings(_Loose):
    request_start: float | None = None
    first_token_iteration: float | None = None
    first_output_token_iteration: float | None = None
    last_token_iteration: float | None = None
    request_end: float | None = None
    scheduled_at: float | None = None
    token_iterations: Count = 0

    @model_validator(mode="after")
    def _ordered(self) -> Timings:
        order = (
            ("request_start", self.request_start),
            ("first_token_iteration", self.first_token_iteration),
            ("last_token_iteration", self.last_token_iteration),
        )
        known = [(k, v) for k, v in order if v is not None]
        for (k1, v1), (k2, v2) in pairwise(known):
            if v2 < v1:
                raise ValueError(f"{k2}={v2}: before {k1}={v1} (a negative duration)")
        start, end = self.request_start, self.request_end
        if start is not None and end is not None and end < start:
            raise ValueError(
                f"request_end={end}: before request_start={start} (a negative duration)"
            )
        for name, value in order[1:]:
            if value is not None and end is not None and value > end:
                raise ValueError(f"{name}={value}: after request_end={end} (the request's end)")
        scheduled = self.scheduled_at
        if scheduled is not None and start is not None and scheduled > start + QUEUE_TOLERANCE_S:
            raise ValueError(
                f"scheduled_at={scheduled}: after request_start={start} (a negative queue time)"
            )
        return self


class Info(_Loose):
    request_id: str | None = None
    status: str | None = None
    error: str | None = None
    timings: Timings


class TokenMetrics(_Loose):
    total_tokens: Count | None = None
    text_tokens: Count | None = None

    @property
    def tokens(self) -> int | None:
        return self.total_tokens if self.total_tokens is not None else self.text_tokens


class Request(_Loose):
    request_id: str | None = None
    info: Info
    input_metrics: TokenMetrics | None = None
    output_metrics: TokenMetrics | None = None
    prompt_tokens: Count | None = None
    output_tokens: Count | None = None


class Requests(_Loose):
    successful: list[Request] = []
    errored: list[Request] = []
    incomplete: list[Request] = []


class Strategy(_Loose):
    type_: str | None = None
    streams: Count | None = None
    max_concurrency: Count | None = None
    rate: NonNegative | None = None


class Backend(_Loose):
    target: str | None = None
    model: str | None = None
    request_format: str | None = None


class BenchmarkConfig(_Loose):
    id_: str | None = None
    strategy: Strategy = Strategy()
    backend: Backend | None = None
    sample_size: Count | None = None


class Made(_Loose):
    successful: Count = 0
    errored: Count = 0
    incomplete: Count = 0
    total: Count | None = None


class SchedulerMetrics(_Loose):
    measure_start_time: float | None = None
    measure_end_time: float | None = None
    requests_made: Made | None = None


class Benchmark(_Loose):
    config: BenchmarkConfig = BenchmarkConfig()
    scheduler_metrics: SchedulerMetrics = SchedulerMetrics()
    metrics: dict[str, Any] = {}
    requests: Requests
    start_time: float | None = None
    end_time: float | None = None
    duration: NonNegative | None = None

    @model_validator(mode="after")
    def _adds_up(self) -> Benchmark:
        start, end = self.start_time, self.end_time
        if start is not None and end is not None and end < start:
            raise ValueError(f"end_time={end}: before start_time={start} (a negative duration)")
        made = self.scheduler_metrics.requests_made
        if made is not None:
            if made.total is not None and made.total != made.successful + made.errored + (
                made.incomplete
            ):
                raise ValueError(
                    f"scheduler_metrics.requests_made.total={made.total}: successful + errored "
                    f"+ incomplete = {made.successful + made.errored + made.incomplete}"
                )
            for kind in ("successful", "errored", "incomplete"):
                listed, counted = len(getattr(self.requests, kind)), getattr(made, kind)
                # without sampling every request is listed; sampled, no more than were made
                if listed > counted or (self.config.sample_size is None and listed != counted):
                    raise ValueError(
                        f"requests.{kind}: {listed} listed where scheduler_metrics.requests_made"
                        f".{kind} = {counted}"
                    )
        return self


class Report(_Loose):
    benchmarks: list[Benchmark]
    config: dict[str, Any] | None = None
    args: dict[str, Any] | None = None


def _backend(report: Report, bench: Benchmark) -> Backend:
    spec = ((report.config or {}).get("spec") or {}).get("backend") or {}
    args = report.args or {}
    own = bench.config.backend or Backend()
    return Backend(
        target=own.target or spec.get("target") or args.get("target"),
        model=own.model or spec.get("model") or args.get("model"),
        request_format=own.request_format or spec.get("request_format"),
    )


def _record(index: int, request: Request, kind: str, t0: float) -> RequestRecord:
    t = request.info.timings
    start = (t.request_start if t.request_start is not None else t0) - t0
    prompt = request.input_metrics.tokens if request.input_metrics else None
    if prompt is None:
        prompt = request.prompt_tokens
    output = request.output_metrics.tokens if request.output_metrics else None
    if output is None:
        output = request.output_tokens
    base: dict[str, Any] = {
        "request_id": request.request_id or request.info.request_id or f"guidellm-{index}",
        "request_index": index,
        "scheduled_s": None if t.scheduled_at is None else t.scheduled_at - t0,
        "start_s": start,
        "prompt_tokens": prompt,
        "input_len_target": prompt,
    }
    if kind == "successful" and t.first_token_iteration is not None:
        last = (
            t.last_token_iteration
            if t.last_token_iteration is not None
            else t.first_token_iteration
        )
        content = t.first_output_token_iteration
        return RequestRecord(
            **base,
            first_chunk_s=t.first_token_iteration - t0,
            first_content_s=None if content is None else content - t0,
            end_s=last - t0,
            output_tokens=output or None,
            output_len_target=output,
            status="ok",
            http_status=200,
        )
    reason = request.info.error or (
        "incomplete: cancelled at the end of the benchmark" if kind == "incomplete" else kind
    )
    end = t.request_end if t.request_end is not None else t.last_token_iteration
    return RequestRecord(
        **base,
        end_s=None if end is None else max(end - t0, start),
        status="error",
        error=" ".join(str(reason).split())[:300],
    )


def _tool_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in TOOL_METRICS:
        stats = (metrics.get(name) or {}).get("successful")
        if not isinstance(stats, dict):
            continue
        values = tool_stats(stats, STATS)
        values |= tool_stats(stats.get("percentiles") or {}, PERCENTILES)
        out[name] = values
    return out


def _run(path: Path, report: Report, index: int, bench: Benchmark) -> ImportedRun:
    backend = _backend(report, bench)
    sched = bench.scheduler_metrics
    kinds = (("successful", bench.requests.successful), ("errored", bench.requests.errored),
             ("incomplete", bench.requests.incomplete))  # fmt: skip
    listed = [(r, kind) for kind, requests in kinds for r in requests]
    starts = [r.info.timings.request_start for r, _ in listed]
    t0 = sched.measure_start_time or min((s for s in starts if s is not None), default=0.0)
    listed.sort(key=lambda rk: rk[0].info.timings.request_start or t0)
    builder = RecordBuilder(path, TOOL)
    for i, (r, kind) in enumerate(listed):
        builder.add(
            f"benchmarks[{index}].requests.{kind} (request {r.request_id or i})",
            partial(_record, i, r, kind, t0),
        )
    records = builder.result()
    if bench.duration is not None:
        duration = bench.duration
    elif sched.measure_end_time is not None:
        duration = sched.measure_end_time - t0
    else:
        duration = max((r.end_s or r.start_s for r in records), default=0.0)
    strategy = bench.config.strategy
    concurrency = strategy.streams or strategy.max_concurrency
    if strategy.type_ == "synchronous":
        concurrency = 1
    rate = strategy.rate if strategy.type_ in ("constant", "poisson") else None
    summary = summarise(records, duration, request_rate=rate)
    summary["tool_metrics"] = {"tool": TOOL, "metrics": _tool_metrics(bench.metrics)}
    request_format = backend.request_format or ""
    config: dict[str, Any] = {
        "load": "rate" if rate else "concurrency",
        "strategy": strategy.model_dump(exclude_none=True),
        "concurrency": None if rate else concurrency,
        "request_rate": rate,
        "num_requests": len(records),
        **planned_means(records),
    }
    return ImportedRun(
        tool=TOOL,
        source=path,
        records=records,
        summary=summary,
        config=config,
        model=backend.model,
        api="chat" if "chat" in request_format else "completions" if request_format else None,
        base_url=backend.target,
        started_at=iso_utc(bench.start_time if bench.start_time is not None else t0),
        finished_at=iso_utc(bench.end_time),
        imported_from={
            "benchmark_index": index,
            "benchmark_id": bench.config.id_,
            "per_chunk_times": False,
            "sample_size": bench.config.sample_size,
            "clock_origin_unix_s": t0,
        },
    )


def read(path: Path) -> list[ImportedRun]:
    data = load_json(path, TOOL)
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise ImportFormatError(f"{path}: not a GuideLLM benchmarks.json (no 'benchmarks' list)")
    report = validate(Report, data, path, TOOL)
    if not report.benchmarks:
        raise ImportFormatError(f"{path}: not a valid {TOOL} file: benchmarks: empty")
    return [_run(path, report, i, bench) for i, bench in enumerate(report.benchmarks)]
