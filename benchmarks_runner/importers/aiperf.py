"""AIPerf artifact folders (checked against AIPerf 0.13's): a profile, warm-up phases, sweeps.

``profile_export.jsonl`` holds one record a request: ``metadata`` (``request_start_ns``,
``request_end_ns``, ``credit_issued_ns``: when it was due, ``benchmark_phase``: ``warmup`` or
``profiling``, ``x_request_id``, ``was_cancelled``), ``metrics`` (``{"value", "unit"}``:
``time_to_first_token``, ``time_to_first_output_token``, ``inter_chunk_latency``: the gaps
between output chunks, vLLM's ITL; ``input_sequence_length``, ``output_token_count``) and
``error`` (``code``, ``type``, ``message``). ``profile_export_aiperf.json`` beside it holds the
summary: model (``input_config.models.items[].name``), URL (``input_config.endpoint.urls``),
API (``endpoint.type``), load (``input_config.phases``: the profiling phase's ``concurrency`` or
request rate), the measured window (``start_time`` .. ``end_time``, which AIPerf divides its
throughputs by) and its figures, kept under AIPerf's names in ``summary["tool_metrics"]``
(AIPerf's "inter_token_latency" is vLLM's TPOT).

Warm-up requests are stored with ``warmup: true`` and left out of the summary. A folder of
folders (a concurrency sweep: ``concurrency_4/``, ``concurrency_8/``, ...) imports as one run a
folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from functools import partial
from itertools import accumulate
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from benchmarks_runner.errors import ImportFormatError
from benchmarks_runner.importers.common import (
    Count,
    ImportedRun,
    NonNegative,
    RecordBuilder,
    UnixNanos,
    iso_utc,
    load_json,
    open_import,
    planned_means,
    schema_error,
    summarise,
    tool_stats,
    validate,
)
from planner.run_files import RequestRecord, loads_json

TOOL = "AIPerf"
RECORDS = "profile_export.jsonl"
SUMMARY = "profile_export_aiperf.json"
_UNIT_S = {"ms": 1e-3, "ns": 1e-9, "us": 1e-6, "s": 1.0, "sec": 1.0}
#: AIPerf's metrics kept as it printed them
TOOL_METRICS = (
    "time_to_first_token",
    "time_to_second_token",
    "time_to_first_output_token",
    "inter_token_latency",
    "inter_chunk_latency",
    "request_latency",
    "request_throughput",
    "output_token_throughput",
    "output_token_throughput_per_user",
    "input_token_throughput",
    "total_token_throughput",
    "request_count",
    "error_request_count",
    "benchmark_duration",
    "total_output_tokens",
    "total_isl",
    "effective_concurrency",
)
STATS = ("avg", "min", "max", "std", "p50", "p90", "p95", "p99", "count", "sum")


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Metric(_Loose):
    value: NonNegative | list[NonNegative]
    unit: str = "ms"

    def seconds(self) -> float | list[float]:
        scale = _UNIT_S.get(self.unit.lower())
        if scale is None:
            raise ValueError(f"unit={self.unit!r}: one of {', '.join(_UNIT_S)}")
        if isinstance(self.value, list):
            return [v * scale for v in self.value]
        return self.value * scale


class Metadata(_Loose):
    request_start_ns: UnixNanos
    request_end_ns: UnixNanos | None = None
    credit_issued_ns: UnixNanos | None = None
    benchmark_phase: str = "profiling"
    x_request_id: str | None = None
    was_cancelled: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> Metadata:
        if self.request_end_ns is not None and self.request_end_ns < self.request_start_ns:
            raise ValueError(
                f"request_end_ns={self.request_end_ns}: before request_start_ns="
                f"{self.request_start_ns} (a negative duration)"
            )
        return self


class Failure(_Loose):
    code: int | None = None
    type: str | None = None
    message: str | None = None


class Record(_Loose):
    metadata: Metadata
    metrics: dict[str, Metric] = {}
    error: Failure | None = None

    def scalar(self, name: str) -> float | None:
        metric = self.metrics.get(name)
        return None if metric is None or isinstance(metric.value, list) else metric.value


class Stat(_Loose):
    avg: NonNegative | None = None


class Phase(_Loose):
    kind: str | None = None
    type: str | None = None
    concurrency: Count | None = None
    request_rate: NonNegative | None = None
    requests: Count | None = None


class Endpoint(_Loose):
    urls: list[str] = []
    type: str | None = None


class ModelItem(_Loose):
    name: str


class Models(_Loose):
    items: list[ModelItem] = []


class InputConfig(_Loose):
    models: Models | None = None
    endpoint: Endpoint | None = None
    phases: list[Phase] = []


class Summary(_Loose):
    """``profile_export_aiperf.json`` (the part the importer reads)."""

    request_count: Stat | None = None
    error_request_count: Stat | None = None
    benchmark_duration: Stat | None = None
    input_config: InputConfig | None = None
    start_time: str | None = None
    end_time: str | None = None
    was_cancelled: bool = False


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """The numbered lines of a regular file of at most ``MAX_IMPORT_BYTES``, read one by one."""
    try:
        with open_import(path, TOOL) as handle:
            yield from enumerate(handle, start=1)
    except OSError as exc:
        raise ImportFormatError(f"{path}: not readable ({exc})") from None


def _read_records(path: Path) -> list[Record]:
    records: list[Record] = []
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:
            obj = loads_json(line, "the line")
        except ValueError as exc:
            raise ImportFormatError(f"{path}:{number}: not a JSON line ({exc})") from None
        if not isinstance(obj, dict) or "metadata" not in obj:
            raise ImportFormatError(
                f"{path}:{number}: not an AIPerf record (needs 'metadata' and 'metrics')"
            )
        try:
            records.append(Record.model_validate(obj, strict=True))
        except ValidationError as exc:
            raise schema_error(path, TOOL, exc, prefix=f"line {number}") from None
    if not records:
        raise ImportFormatError(f"{path}: no records")
    return records


def _seconds(record: Record, name: str, number: int, path: Path) -> Any:
    metric = record.metrics.get(name)
    if metric is None:
        return None
    try:
        return metric.seconds()
    except ValueError as exc:
        raise ImportFormatError(
            f"{path}: not a valid {TOOL} file: line {number} metrics.{name}.{exc}"
        ) from None


def _to_record(index: int, record: Record, t0_ns: int, number: int, path: Path) -> RequestRecord:
    md = record.metadata
    start = (md.request_start_ns - t0_ns) / 1e9
    prompt = record.scalar("input_sequence_length") or record.scalar("error_isl")
    base: dict[str, Any] = {
        "request_id": md.x_request_id or f"aiperf-{index}",
        "request_index": index,
        "warmup": md.benchmark_phase == "warmup",
        "scheduled_s": None if md.credit_issued_ns is None else (md.credit_issued_ns - t0_ns) / 1e9,
        "start_s": start,
        "prompt_tokens": None if prompt is None else int(prompt),
        "input_len_target": None if prompt is None else int(prompt),
    }
    ttft = _seconds(record, "time_to_first_token", number, path)
    if record.error is None and not md.was_cancelled and isinstance(ttft, float):
        gaps = _seconds(record, "inter_chunk_latency", number, path) or []
        gaps = gaps if isinstance(gaps, list) else [gaps]
        first = start + ttft
        chunks = [first, *(first + g for g in accumulate(gaps))]
        content = _seconds(record, "time_to_first_output_token", number, path)
        output = record.scalar("output_token_count") or record.scalar("output_sequence_length")
        # (the sum of the gaps may pass the end by rounding: a millisecond is allowed)
        if md.request_end_ns is not None and chunks[-1] > (md.request_end_ns - t0_ns) / 1e9 + 1e-3:
            raise ImportFormatError(
                f"{path}: not a valid {TOOL} file: line {number}: time_to_first_token and "
                f"inter_chunk_latency put a token at {chunks[-1] - start:.6f} s, after "
                f"metadata.request_end_ns ({(md.request_end_ns - md.request_start_ns) / 1e9:.6f}"
                " s after the start): a token after the request's end"
            )
        return RequestRecord(
            **base,
            first_chunk_s=first,
            first_content_s=start + content if isinstance(content, float) else first,
            end_s=chunks[-1],
            chunk_times_s=chunks,
            output_tokens=None if output is None else int(output),
            output_len_target=None if output is None else int(output),
            status="ok",
            http_status=200,
        )
    failure = record.error or Failure(type="cancelled" if md.was_cancelled else "no first token")
    end = None if md.request_end_ns is None else (md.request_end_ns - t0_ns) / 1e9
    text = " ".join(f"{failure.type or 'error'}: {failure.message or ''}".split())
    return RequestRecord(
        **base,
        end_s=end,
        status="error",
        http_status=failure.code,
        error=text[:300],
    )


def _summary(folder: Path) -> tuple[Summary | None, dict[str, Any]]:
    path = folder / SUMMARY
    if not path.is_file():
        return None, {}
    data = load_json(path, TOOL)
    if not isinstance(data, dict):
        raise ImportFormatError(f"{path}: not a valid {TOOL} file: a JSON object is expected")
    return validate(Summary, data, path, TOOL), data


def _window_s(summary: Summary | None, path: Path) -> float | None:
    if summary is None or not summary.start_time or not summary.end_time:
        return None
    try:
        span = (
            datetime.fromisoformat(summary.end_time) - datetime.fromisoformat(summary.start_time)
        ).total_seconds()
    except ValueError as exc:
        raise ImportFormatError(
            f"{path}: not a valid {TOOL} file: start_time/end_time: {exc}"
        ) from None
    if span < 0:
        raise ImportFormatError(
            f"{path}: not a valid {TOOL} file: end_time={summary.end_time!r}: before start_time="
            f"{summary.start_time!r} (a negative duration)"
        )
    return span


def _one(folder: Path, jsonl: Path) -> ImportedRun:
    raw = _read_records(jsonl)
    summary, summary_data = _summary(folder)
    order = sorted(range(len(raw)), key=lambda i: raw[i].metadata.request_start_ns)
    profiling = [r for r in raw if r.metadata.benchmark_phase != "warmup"]
    if summary is not None and summary.request_count is not None:
        counted = (summary.request_count.avg or 0) + (
            summary.error_request_count.avg or 0 if summary.error_request_count else 0
        )
        if counted != len(profiling):
            raise ImportFormatError(
                f"{folder / SUMMARY}: not a valid {TOOL} file: request_count + "
                f"error_request_count = {counted:g}, but {jsonl.name} holds {len(profiling)} "
                "profiling records"
            )
    t0_ns = min(r.metadata.request_start_ns for r in (profiling or raw))
    builder = RecordBuilder(jsonl, TOOL)
    for i, k in enumerate(order):
        builder.add(f"line {k + 1}", partial(_to_record, i, raw[k], t0_ns, k + 1, jsonl))
    records = builder.result()
    measured = [r for r in records if not r.warmup]
    duration = _window_s(summary, folder / SUMMARY)
    if duration is None:
        ends = [r.end_s for r in measured if r.end_s is not None]
        duration = max(ends, default=0.0) - min((r.start_s for r in measured), default=0.0)
    cfg = summary.input_config if summary and summary.input_config else InputConfig()
    phase = next((p for p in cfg.phases if p.kind != "warmup"), Phase())
    rate = phase.request_rate if phase.type in ("request_rate", "rate", "poisson") else None
    concurrency = None if rate else phase.concurrency
    run_summary = summarise(records, duration, request_rate=rate)
    run_summary["tool_metrics"] = {
        "tool": TOOL,
        "metrics": {
            name: tool_stats(summary_data[name], STATS)
            for name in TOOL_METRICS
            if isinstance(summary_data.get(name), dict)
        },
    }
    endpoint = cfg.endpoint or Endpoint()
    models = cfg.models.items if cfg.models else []
    api = {"chat": "chat", "completions": "completions"}.get(endpoint.type or "")
    config: dict[str, Any] = {
        "load": "rate" if rate else "concurrency",
        "concurrency": concurrency,
        "request_rate": rate,
        "num_requests": len(measured),
        "warmup": len(records) - len(measured),
        **planned_means(records),
    }
    return ImportedRun(
        tool=TOOL,
        source=jsonl,
        records=records,
        summary=run_summary,
        config=config,
        model=models[0].name if models else None,
        api=api,
        base_url=endpoint.urls[0] if endpoint.urls else None,
        started_at=iso_utc(t0_ns / 1e9),
        finished_at=iso_utc(t0_ns / 1e9 + duration),
        imported_from={"per_chunk_times": True, "clock_origin_unix_ns": t0_ns},
    )


def read(path: Path) -> list[ImportedRun]:
    if path.is_file():
        return [_one(path.parent, path)]
    if (path / RECORDS).is_file():
        return [_one(path, path / RECORDS)]
    sweep = sorted(p for p in path.iterdir() if p.is_dir() and (p / RECORDS).is_file())
    if not sweep:
        raise ImportFormatError(
            f"{path}: no AIPerf {RECORDS} here nor in its folders (a profile, or a sweep)"
        )
    return [_one(folder, folder / RECORDS) for folder in sweep]
