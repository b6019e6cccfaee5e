"""What every importer shares: the run it builds, the schema errors it raises, the writing.

An importer reads one tool's result file, checks it against that tool's schema (pydantic
models of the part it reads: JSON types taken strictly, durations and counts non-negative,
counts that add up), and returns :class:`ImportedRun` values; :func:`write_run` turns each into
a run directory of :mod:`planner.run_files`.

Summaries carry ``vllm bench serve`` keys only with vLLM's meaning: computed from the tool's
per-request data with vLLM's definitions (:func:`benchmarks_runner.metrics.compute_summary`),
or, for a vLLM file, the file's own values. What the tool did not measure is absent (no ITL
without per-chunk times). The tool's own figures, under its own names and with its own
definitions, are kept beside them in ``summary["tool_metrics"]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, BinaryIO

from pydantic import BaseModel, Field, ValidationError

from benchmarks_runner.errors import ImportFormatError
from benchmarks_runner.metrics import compute_summary
from planner.errors import RunFilesError
from planner.run_files import (
    RequestRecord,
    RunWriter,
    loads_json,
    open_regular,
    read_bounded,
    utc_now_iso,
)

#: The largest file an importer reads (it is parsed whole as JSON, which takes about ten times
#: its size in memory): 64 MB holds a GuideLLM or vLLM result of ~100,000 requests.
MAX_IMPORT_BYTES = 64_000_000

#: Percentiles of the summaries computed from imported requests.
PERCENTILES = (50.0, 90.0, 95.0, 99.0)

#: A tool's duration, rate or time (in its unit, ns included), and a count (of requests, or a
#: run's total tokens): finite and far above any real run (a request's own tokens and times are
#: bounded tighter by the request record, :mod:`planner.run_files`).
MAX_FIGURE = 1e15
NonNegative = Annotated[float, Field(ge=0, le=MAX_FIGURE, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=int(MAX_FIGURE))]
#: A Unix time in nanoseconds (a signed 64-bit integer, as the tools write them).
UnixNanos = Annotated[int, Field(ge=0, le=2**63 - 1)]


@dataclass
class ImportedRun:
    """One run read from another tool's file, before it is written as run files."""

    tool: str
    source: Path
    records: list[RequestRecord]
    summary: dict[str, Any]
    config: dict[str, Any]
    model: str | None = None
    api: str | None = None
    base_url: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    result: dict[str, Any] | None = None
    imported_from: dict[str, Any] = field(default_factory=dict)


def schema_error(
    path: Path, tool: str, exc: ValidationError, prefix: str = ""
) -> ImportFormatError:
    """The first problem of a validation error as one line: file, field, value, what is allowed."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in (*([prefix] if prefix else []), *first["loc"]))
    value = first.get("input")
    if isinstance(value, dict | list):
        value = "{...}" if isinstance(value, dict) else "[...]"
    message = first["msg"].removeprefix("Value error, ")
    if not where:  # a check across fields: the message names them
        shown = ""
    elif first["type"] == "missing":
        shown = f"{where}: "
    else:
        shown = f"{where}={value!r}: "
    return ImportFormatError(f"{path}: not a valid {tool} file: {shown}{message}")


def open_import(path: Path, tool: str) -> BinaryIO:
    """``path`` opened for reading when it is a regular file of at most
    ``MAX_IMPORT_BYTES`` (a FIFO or a device is refused at once, never read)."""
    try:
        return open_regular(path, MAX_IMPORT_BYTES, str(path))
    except FileNotFoundError:
        raise ImportFormatError(f"{path} does not exist") from None
    except RunFilesError as exc:
        raise ImportFormatError(f"not a readable {tool} file: {exc}") from None


def load_json(path: Path, tool: str) -> Any:
    try:
        with open_import(path, tool) as handle:
            data = read_bounded(handle, MAX_IMPORT_BYTES, str(path))
        return loads_json(data, "the JSON")
    except (OSError, ValueError, RunFilesError) as exc:
        raise ImportFormatError(f"{path}: not a readable {tool} JSON file ({exc})") from None


class RecordBuilder:
    """The :class:`RequestRecord` of each request of one file, under the bounds and rules
    every reader shares (:mod:`planner.run_files`). A request the record refuses is counted
    and the first one named (where, field, value, rule) in one line, after all were tried."""

    def __init__(self, path: Path, tool: str) -> None:
        self.path = path
        self.tool = tool
        self.records: list[RequestRecord] = []
        self.refused = 0
        self.first: tuple[str, ValidationError] | None = None

    def add(self, where: str, build: Callable[[], RequestRecord]) -> None:
        try:
            self.records.append(build())
        except ValidationError as exc:
            self.refused += 1
            if self.first is None:
                self.first = (where, exc)

    def result(self) -> list[RequestRecord]:
        if self.first is None:
            return self.records
        where, exc = self.first
        first = exc.errors()[0]
        field_name = ".".join(str(p) for p in first["loc"])
        value = first.get("input")
        if isinstance(value, dict | list):
            value = "{...}" if isinstance(value, dict) else "[...]"
        message = first["msg"].removeprefix("Value error, ")
        if not field_name:  # a rule across fields: the message names them
            shown = ""
        elif first["type"] == "missing":
            shown = f"{field_name}: "
        else:
            shown = f"{field_name}={value!r}: "
        total = self.refused + len(self.records)
        more = f" ({self.refused:,} of {total:,} requests refused; the first is named)"
        raise ImportFormatError(
            f"{self.path}: not a valid {self.tool} file: {where}: {shown}{message}"
            + (more if self.refused > 1 else "")
        )


def validate(model: type[BaseModel], data: Any, path: Path, tool: str, prefix: str = "") -> Any:
    """``data`` as ``model`` (JSON types strictly), or ImportFormatError naming the field."""
    try:
        return model.model_validate(data, strict=True)
    except ValidationError as exc:
        raise schema_error(path, tool, exc, prefix) from None


def iso_utc(unix_s: float | None) -> str | None:
    if unix_s is None or not math.isfinite(unix_s):
        return None
    return datetime.fromtimestamp(unix_s, UTC).isoformat().replace("+00:00", "Z")


def summarise(
    records: Sequence[RequestRecord],
    duration_s: float,
    *,
    max_concurrency: int | None = None,
    request_rate: float | None = None,
) -> dict[str, Any]:
    """vLLM's aggregates of imported requests over the tool's own measured duration."""
    return compute_summary(
        records,
        duration_s,
        percentiles=PERCENTILES,
        max_concurrency=max_concurrency,
        request_rate=request_rate,
    )


def planned_means(records: Iterable[RequestRecord]) -> dict[str, int]:
    """``input_len``/``output_len`` of run.json's config: the mean lengths the tool sent."""
    measured = [r for r in records if not r.warmup and r.ok]
    out: dict[str, int] = {}
    for key, values in (
        ("input_len", [r.prompt_tokens for r in measured if r.prompt_tokens]),
        ("output_len", [r.output_tokens for r in measured if r.output_tokens]),
    ):
        if values:
            out[key] = round(sum(values) / len(values))
    return out


def tool_stats(stats: Mapping[str, Any], keys: Iterable[str]) -> dict[str, float]:
    """The numeric entries ``keys`` of one of the tool's statistics objects."""
    return {k: float(stats[k]) for k in keys if isinstance(stats.get(k), int | float)}


def write_run(runs_dir: Path, run: ImportedRun, plan: dict[str, Any] | None) -> Path:
    """Write ``run`` as a completed run directory under ``runs_dir``."""
    writer = RunWriter(Path(runs_dir))
    config = dict(run.config)
    config["imported_from"] = {"tool": run.tool, "file": str(run.source), **run.imported_from}
    try:
        writer.write_meta(
            started_at=run.started_at or utc_now_iso(),
            model=run.model,
            endpoint={
                "base_url": run.base_url,
                "api": run.api,
                "server_version": None,
                "server_flags": None,
            },
            config=config,
            plan=plan,
            tokenizer={"tokenizer": f"as {run.tool} counted the tokens"},
        )
        writer.append_requests(run.records)
        if run.result is not None:
            writer.write_result(run.result)
        writer.write_meta(
            status="completed",
            finished_at=run.finished_at or utc_now_iso(),
            summary=run.summary,
            self_checks=[],
        )
    finally:
        writer.close()
    return writer.dir
