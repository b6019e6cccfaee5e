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

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, Field, ValidationError

from benchmarks_runner.errors import ImportFormatError
from benchmarks_runner.metrics import compute_summary
from planner.run_files import RequestRecord, RunWriter, utc_now_iso

#: Percentiles of the summaries computed from imported requests.
PERCENTILES = (50.0, 90.0, 95.0, 99.0)

NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]


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


def load_json(path: Path, tool: str) -> Any:
    try:
        with path.open(encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise ImportFormatError(f"{path}: not a readable {tool} JSON file ({exc})") from None


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
