"""``vllm bench serve --save-result [--save-detailed]`` JSON (checked against vLLM 0.33's files).

The file's aggregates are vLLM's own: they become the summary as they are (every key the file
has, no other under vLLM's names). With ``--save-detailed`` it also holds one entry per request
in ``start_times`` (perf_counter seconds), ``ttfts``, ``itls`` (gaps between output chunks),
``latencies``, ``input_lens``, ``output_lens``, ``queue_times`` (waiting for a concurrency
slot) and ``errors`` (empty for a success); those become the run's request records, chunk times
rebuilt as ``start + ttft + cumsum(itls)``. Without it there are no request records.

``date`` is written when the benchmark ends, in the local time of the machine that ran it
(no time zone): the run's start is ``date - duration``, taken as UTC and said so.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from functools import partial
from itertools import accumulate
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from benchmarks_runner.errors import ImportFormatError
from benchmarks_runner.importers.common import (
    MAX_FIGURE,
    Count,
    ImportedRun,
    NonNegative,
    RecordBuilder,
    load_json,
    planned_means,
    validate,
)
from benchmarks_runner.metrics import DETAILED_KEYS, peaks, request_times
from planner.run_files import RequestRecord

TOOL = "vllm bench serve"
_DISTRIBUTION = re.compile(r"^(mean|median|std|p\d+(\.\d+)?)_[a-z0-9_]+_ms$")


class VllmResult(BaseModel):
    """The part of vLLM's result file the importer reads; everything else is kept as is."""

    model_config = ConfigDict(extra="allow")

    date: str | None = None
    backend: str | None = None
    endpoint_type: str | None = None
    label: str | None = None
    model_id: str | None = None
    tokenizer_id: str | None = None
    num_prompts: Count | None = None
    request_rate: NonNegative | Literal["inf"] | None = None
    burstiness: float | None = Field(default=None, gt=0)
    max_concurrency: Count | None = None
    duration: NonNegative
    completed: Count
    failed: Count = 0
    total_input_tokens: Count | None = None
    total_output_tokens: Count | None = None
    request_throughput: NonNegative | None = None
    request_goodput: NonNegative | None = None
    output_throughput: NonNegative | None = None
    total_token_throughput: NonNegative | None = None
    max_output_tokens_per_s: NonNegative | None = None
    max_concurrent_requests: NonNegative | None = None
    input_lens: list[Count] | None = None
    output_lens: list[Count] | None = None
    ttfts: list[NonNegative] | None = None
    itls: list[list[NonNegative]] | None = None
    latencies: list[NonNegative] | None = None
    start_times: list[float] | None = None
    queue_times: list[NonNegative] | None = None
    errors: list[str] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> VllmResult:
        for key, value in (self.model_extra or {}).items():
            if _DISTRIBUTION.match(key) and not (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and 0 <= value <= MAX_FIGURE  # NaN and infinity fail too
            ):
                raise ValueError(f"{key}={value!r}: a finite number of milliseconds >= 0")
        if self.completed + self.failed > 0 and self.duration <= 0:
            raise ValueError(
                f"duration={self.duration}: {self.completed + self.failed} requests take time"
            )
        n = self.completed + self.failed
        if self.num_prompts is not None and n > self.num_prompts:
            raise ValueError(f"completed + failed = {n}: more than num_prompts={self.num_prompts}")
        lists = {k: v for k, v in self._detail().items() if v is not None}
        for key, values in lists.items():
            if len(values) != n:
                raise ValueError(
                    f"{key}: {len(values)} entries where completed + failed = {n} requests"
                )
        if self.errors is not None:
            succeeded = sum(1 for e in self.errors if not e)
            if succeeded != self.completed:
                raise ValueError(
                    f"completed={self.completed}: but {succeeded} requests have no error"
                )
        total = self.total_output_tokens
        if self.output_lens is not None and total is not None and sum(self.output_lens) != total:
            raise ValueError(
                f"total_output_tokens={total}: output_lens add up to {sum(self.output_lens)}"
            )
        return self

    def _detail(self) -> dict[str, list[Any] | None]:
        return {
            "input_lens": self.input_lens,
            "output_lens": self.output_lens,
            "ttfts": self.ttfts,
            "itls": self.itls,
            "latencies": self.latencies,
            "start_times": self.start_times,
            "queue_times": self.queue_times,
            "errors": self.errors,
        }

    @property
    def detailed(self) -> bool:
        return all(v is not None for v in (self.ttfts, self.itls, self.latencies, self.start_times))


def _records(result: VllmResult, path: Path) -> list[RequestRecord]:
    assert result.start_times is not None and result.ttfts is not None
    assert result.itls is not None and result.latencies is not None
    t0 = min(result.start_times, default=0.0)
    n = len(result.start_times)
    errors = result.errors or [""] * n
    builder = RecordBuilder(path, TOOL)
    for i, started in enumerate(result.start_times):
        start = started - t0
        ok = not errors[i]
        queue = result.queue_times[i] if result.queue_times is not None else None
        base = {
            "request_id": f"vllm-{i}",
            "request_index": i,
            "scheduled_s": None if queue is None else start - queue,
            "start_s": start,
            "prompt_tokens": result.input_lens[i] if result.input_lens is not None else None,
            "input_len_target": result.input_lens[i] if result.input_lens is not None else None,
        }
        if ok:
            first = start + result.ttfts[i]
            chunks = [first, *(first + gap for gap in accumulate(result.itls[i]))]
            output = result.output_lens[i] if result.output_lens is not None else None
            builder.add(
                f"request {i}",
                partial(
                    RequestRecord,
                    **base,
                    first_chunk_s=first,
                    first_content_s=first,
                    end_s=start + result.latencies[i],
                    chunk_times_s=chunks,
                    output_tokens=output or None,
                    output_len_target=output,
                    status="ok",
                    http_status=200,
                ),
            )
        else:
            last_line = errors[i].strip().splitlines()[-1] if errors[i].strip() else "failed"
            builder.add(
                f"request {i}",
                partial(RequestRecord, **base, status="error", error=last_line[:300]),
            )
    return builder.result()


def _started_at(result: VllmResult) -> tuple[str | None, str | None]:
    if not result.date:
        return None, None
    try:
        ended = datetime.strptime(result.date, "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None, None
    started = ended - timedelta(seconds=result.duration)

    def iso(t: datetime) -> str:
        return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    return iso(started), iso(ended)


def read(path: Path) -> list[ImportedRun]:
    data = load_json(path, TOOL)
    if not isinstance(data, dict) or "duration" not in data or "completed" not in data:
        raise ImportFormatError(
            f"{path}: not a vllm bench serve --save-result file (needs 'duration' and 'completed')"
        )
    result = validate(VllmResult, data, path, TOOL)
    backend = str(result.backend or result.endpoint_type or "openai")
    records = _records(result, path) if result.detailed else []
    summary = {k: v for k, v in data.items() if k not in DETAILED_KEYS}
    if records:
        # Servewise's own figure, next to vLLM's (its key means what vLLM means by it)
        ok = [r for r in records if r.ok]
        times = [t for t in (request_times(r) for r in ok) if t is not None]
        summary["max_in_flight_requests"] = peaks(ok, times).max_in_flight_requests
        summary["num_measured_requests"] = len(records)
    rate = result.request_rate
    started, finished = _started_at(result)
    config: dict[str, Any] = {
        "load": "rate" if rate not in (None, "inf") else "concurrency",
        "request_rate": None if rate in (None, "inf") else rate,
        "burstiness": result.burstiness,
        "concurrency": result.max_concurrency,
        "num_requests": result.num_prompts,
        **planned_means(records),
    }
    return [
        ImportedRun(
            tool=TOOL,
            source=path,
            records=records,
            summary=summary,
            config=config,
            model=result.model_id,
            api="chat" if "chat" in backend else "completions",
            started_at=started,
            finished_at=finished,
            result=data,
            imported_from={
                "detailed": result.detailed,
                "date": result.date,
                "started_at": "date - duration; date is local time of unknown zone, taken as UTC",
                "tokenizer_id": result.tokenizer_id,
            },
        )
    ]
