"""Ingesting run directories into the store: incremental, in bulk, in the background, quarantining.

A team's runs folder grows to hundreds of runs and hundreds of MB of JSON lines; reading them
row by row in Python ran at ~0.6 MB/s. Here:

- **incremental**: a run directory is looked at again only when its files' sizes or times
  changed, and re-ingested only when their content (SHA-256) changed;
- **in bulk**: DuckDB reads the ``requests.jsonl`` and ``server_metrics.jsonl`` of a batch of
  runs itself (``read_json`` with the column types of :class:`~planner.run_files.RequestRecord`
  and :class:`~planner.run_files.MetricSample`) and checks them in SQL against the same rules
  the one reader (:func:`planner.run_files.read_json_lines`) applies: JSON types taken strictly
  (from the merged ``json_group_structure`` of each file), no unknown keys, required fields,
  bounds, allowed values and the records' own consistency rules. A file that passes is
  inserted from DuckDB directly; a file that does not (or that DuckDB cannot read: a torn last
  line, a string where a number belongs) goes through the one reader, which keeps every good
  line and names each bad one;
- **quarantining**: whatever is not used is kept in ``run_problems`` with its run directory,
  file, line, field, value and reason (a run whose ``run.json`` cannot be read is skipped as a
  whole, its earlier data kept); :meth:`planner.store.Store.run_problems` lists them, and so do
  the Benchmarks and Data pages and ``python -m planner store check``;
- **interrupted runs**: a run whose ``run.json`` still says ``running`` but whose writer is gone
  (:func:`planner.run_files.writer_stopped`) is marked ``interrupted`` in its ``run.json`` and
  in the store, with every request it collected;
- **in the background**: :class:`IngestJob` runs the batches in a thread and reports progress
  (runs and bytes done of those pending); every batch is one short transaction, so readers see
  what is ingested so far and never wait on more than one batch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import sys
import threading
import time
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import duckdb
import pyarrow as pa
from annotated_types import Ge, Le, MaxLen
from pydantic import BaseModel

from planner.credentials import Scrubber
from planner.errors import RunFilesError
from planner.run_files import (
    MAX_JSON_FILE_BYTES,
    MAX_LINES_FILE_BYTES,
    QUEUE_TOLERANCE_S,
    READ_CHUNK_BYTES,
    REQUESTS_JSONL,
    RUN_JSON,
    RUN_STATUSES,
    SERVER_METRICS_JSONL,
    FileProblem,
    MetricSample,
    RequestRecord,
    loads_json,
    open_regular,
    read_json_lines,
    read_regular_bytes,
    run_signature,
    utc_now_iso,
    write_json_atomic,
    writer_stopped,
)
from planner.runs import RequestCounts, measured_result_of

if TYPE_CHECKING:
    from planner.store import Store

log = logging.getLogger(__name__)

#: a batch closes once it holds this many bytes of run files (or BATCH_RUNS runs)
BATCH_BYTES = 24_000_000
BATCH_RUNS = 64


# ----- a record type as DuckDB columns and SQL checks -----------------------------------------
_JSON_NUMBER = {"UBIGINT", "BIGINT", "DOUBLE"}
_JSON_INT = {"UBIGINT", "BIGINT"}


@dataclass(frozen=True)
class _Column:
    name: str
    sql_type: str  # what read_json converts to
    kinds: frozenset[str]  # allowed json_group_structure entries (a "[...]" for lists)
    element_kinds: frozenset[str] = frozenset()  # for lists and dicts
    nullable: bool = False
    required: bool = False
    default_not_null: bool = False  # has a default but an explicit null is invalid
    ge: float | None = None
    literals: tuple[str, ...] = ()
    is_float: bool = False
    container: Literal["", "list", "dict"] = ""
    le: float | None = None
    element_ge: float | None = None
    element_le: float | None = None
    max_length: int | None = None  # characters of a string, elements of a list


def _scalar(tp: Any) -> tuple[str, set[str], bool, tuple[str, ...]]:
    """(DuckDB type, JSON kinds, is float, literal values) of a scalar annotation."""
    if tp is str:
        return "VARCHAR", {"VARCHAR"}, False, ()
    if tp is bool:
        return "BOOLEAN", {"BOOLEAN"}, False, ()
    if tp is int:
        return "BIGINT", set(_JSON_INT), False, ()
    if tp is float:
        return "DOUBLE", set(_JSON_NUMBER), True, ()
    if typing.get_origin(tp) is Literal and all(isinstance(a, str) for a in typing.get_args(tp)):
        return "VARCHAR", {"VARCHAR"}, False, tuple(typing.get_args(tp))
    raise TypeError(f"no DuckDB mapping for {tp!r}")


def _flat_metadata(metadata: Iterable[Any]) -> list[Any]:
    """Annotated metadata with pydantic's ``FieldInfo`` opened into its constraints."""
    out: list[Any] = []
    for item in metadata:
        out.extend(getattr(item, "metadata", None) or [item])
    return out


def _bounds(metadata: Iterable[Any]) -> tuple[float | None, float | None]:
    """The ``ge`` and ``le`` of a field's metadata (None where it has none)."""
    ge = le = None
    for m in metadata:
        if isinstance(m, Ge):
            ge = float(m.ge)  # type: ignore[arg-type]
        elif isinstance(m, Le):
            le = float(m.le)  # type: ignore[arg-type]
    return ge, le


def _columns(model: type[BaseModel]) -> list[_Column]:
    out = []
    for name, info in model.model_fields.items():
        tp = info.annotation
        nullable = False
        if typing.get_origin(tp) in (types.UnionType, typing.Union):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            nullable = len(args) < len(typing.get_args(tp))
            if len(args) != 1:
                raise TypeError(f"{model.__name__}.{name}: no DuckDB mapping for {tp!r}")
            tp = args[0]
        required = info.is_required()
        if required and nullable:
            # read_json cannot tell a missing key from a null: the check would be ambiguous
            raise TypeError(f"{model.__name__}.{name}: a required nullable field")
        ge, le = _bounds(info.metadata)
        origin = typing.get_origin(tp)
        if origin is list:
            element = typing.get_args(tp)[0]
            element_ge, element_le = None, None
            if typing.get_origin(element) is Annotated:
                element, *element_metadata = typing.get_args(element)
                element_ge, element_le = _bounds(_flat_metadata(element_metadata))
            sql, kinds, is_float, _ = _scalar(element)
            column = _Column(
                name,
                f"{sql}[]",
                frozenset({"list"}),
                frozenset(kinds),
                nullable,
                required,
                not nullable and not required,
                ge,
                (),
                is_float,
                "list",
                le,
                element_ge,
                element_le,
            )
        elif origin is dict:
            key, value = typing.get_args(tp)
            if key is not str:
                raise TypeError(f"{model.__name__}.{name}: dict keys must be str")
            _, kinds, is_float, _ = _scalar(value)
            column = _Column(
                name,
                "JSON",
                frozenset({"dict"}),
                frozenset(kinds),
                nullable,
                required,
                not nullable and not required,
                ge,
                (),
                is_float,
                "dict",
            )
        else:
            sql, kinds, is_float, literals = _scalar(tp)
            column = _Column(
                name,
                sql,
                frozenset(kinds),
                frozenset(),
                nullable,
                required,
                not nullable and not required,
                ge,
                literals,
                is_float,
                "",
                le,
            )
        max_length = next((int(m.max_length) for m in info.metadata if isinstance(m, MaxLen)), None)
        out.append(dataclasses.replace(column, max_length=max_length))
    return out


@dataclass(frozen=True)
class RecordSchema:
    """How DuckDB reads and checks one record type of the run files."""

    model: type[BaseModel]
    columns: tuple[_Column, ...]
    #: SQL predicates (over the typed columns) that mark a row the record would refuse
    rules: tuple[str, ...] = ()

    @classmethod
    def of(cls, model: type[BaseModel], rules: Sequence[str] = ()) -> RecordSchema:
        return cls(model, tuple(_columns(model)), tuple(rules))

    @property
    def allow_inf_nan(self) -> bool:
        return bool(self.model.model_config.get("allow_inf_nan", True))

    def read_json_columns(self) -> str:
        """The ``columns`` argument of ``read_json`` (a struct literal)."""
        return "{" + ", ".join(f"'{c.name}': '{c.sql_type}'" for c in self.columns) + "}"

    def bad_row_sql(self) -> str:
        """A predicate true for a row the record refuses (what the merged JSON structure
        cannot show: nulls, bounds, values, non-finite numbers, the model's own rules)."""
        parts = []
        for c in self.columns:
            q = f'"{c.name}"'
            if c.required:
                parts.append(f"{q} IS NULL")
            if c.ge is not None:
                parts.append(f"{q} < {c.ge!r}")
            if c.le is not None:
                parts.append(f"{q} > {c.le!r}")
            if c.max_length is not None:
                length = "len" if c.container == "list" else "length"
                parts.append(f"{length}({q}) > {c.max_length}")
            if c.element_ge is not None:
                parts.append(f"len(list_filter({q}, lambda e: e < {c.element_ge!r})) > 0")
            if c.element_le is not None:
                parts.append(f"len(list_filter({q}, lambda e: e > {c.element_le!r})) > 0")
            if c.literals:
                allowed = ", ".join("'" + v.replace("'", "''") + "'" for v in c.literals)
                parts.append(f"{q} NOT IN ({allowed})")
            if c.container == "list":
                parts.append(f"len(list_filter({q}, lambda e: e IS NULL)) > 0")
                if c.is_float and not self.allow_inf_nan:
                    parts.append(f"len(list_filter({q}, lambda e: isnan(e) OR isinf(e))) > 0")
            elif c.is_float and not self.allow_inf_nan:
                parts.append(f"(isnan({q}) OR isinf({q}))")
        parts.extend(f"({rule})" for rule in self.rules)
        return " OR ".join(f"coalesce({p}, false)" for p in parts) or "false"

    def structure_problem(self, structure: Any) -> str | None:
        """Why a file's merged ``json_group_structure`` shows a line the record refuses."""
        if not isinstance(structure, dict):
            return f"a line is not a JSON object ({structure!r})"
        known = {c.name: c for c in self.columns}
        extra = sorted(set(structure) - set(known))
        if extra and self.model.model_config.get("extra") == "forbid":
            return f"unknown field {extra[0]!r}"
        for name, kind in structure.items():
            c = known.get(name)
            if c is None:
                continue
            if c.container == "list":
                if kind == "NULL" and (c.nullable or c.default_not_null):
                    if c.default_not_null:
                        return f"{name}: null"
                    continue
                if not (isinstance(kind, list) and len(kind) == 1):
                    return f"{name}: not a list ({kind!r})"
                if kind[0] != "NULL" and kind[0] not in c.element_kinds:
                    return f"{name}: elements of type {kind[0]}"
            elif c.container == "dict":
                if kind == "NULL":
                    return f"{name}: null" if not c.nullable else None
                if not isinstance(kind, dict):
                    return f"{name}: not an object ({kind!r})"
                bad = [k for k, v in kind.items() if v not in c.element_kinds]
                if bad:
                    return f"{name}.{bad[0]}: of type {kind[bad[0]]!r}"
            elif kind == "NULL":
                if c.default_not_null:
                    return f"{name}: null"
            elif kind not in c.kinds:
                return f"{name}: of type {kind!r}"
        return None


REQUESTS = RecordSchema.of(
    RequestRecord,
    rules=(
        # RequestRecord._consistent
        "status = 'ok' AND first_chunk_s IS NULL",
        "first_chunk_s < start_s",
        "first_content_s < start_s",
        "end_s < start_s",
        "first_chunk_s > end_s",
        "first_content_s > end_s",
        f"scheduled_s > start_s + {QUEUE_TOLERANCE_S!r}",
    ),
)
METRICS = RecordSchema.of(MetricSample)

#: an explicit null where the record has a non-null default: read_json cannot tell it from a
#: missing key, so such a file goes to the one reader (a false alarm only costs speed)
_DEFAULT_NULL = {
    REQUESTS_JSONL: re.compile(rb'"warmup"\s*:\s*null'),
    SERVER_METRICS_JSONL: re.compile(rb"null"),  # labels or their values; metrics hold no null
}


# ----- what is pending ----------------------------------------------------------------------
@dataclass
class PendingRun:
    run_dir: Path
    signature: str
    size: int
    known_hash: str | None = None


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def pending_runs(
    runs_dir: Path, known: dict[str, tuple[str | None, str | None]]
) -> list[PendingRun]:
    """Run directories new or changed since the store last looked (by sizes and times);
    ``known`` maps a run directory to its stored (signature, content hash)."""
    if not runs_dir.is_dir():
        return []
    out = []
    for run_dir in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
        signature = run_signature(run_dir)
        if signature is None:
            continue
        stored_signature, stored_hash = known.get(str(run_dir), (None, None))
        if stored_signature == signature:
            continue
        size = sum(
            _file_size(run_dir / name) for name in (RUN_JSON, REQUESTS_JSONL, SERVER_METRICS_JSONL)
        )
        out.append(PendingRun(run_dir, signature, size, stored_hash))
    return out


# ----- progress -------------------------------------------------------------------------------
@dataclass
class IngestProgress:
    """How far an ingestion pass is (thread-safe snapshot via :meth:`snapshot`)."""

    runs_total: int = 0
    runs_done: int = 0
    bytes_total: int = 0
    bytes_done: int = 0
    ingested: list[str] = field(default_factory=list)
    quarantined: int = 0  # problems found in this pass
    files_bulk: int = 0  # JSON-lines files DuckDB read and checked in bulk
    files_one_reader: int = 0  # files that went through the one reader (bad or torn lines)
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    error: str | None = None

    @property
    def running(self) -> bool:
        return self.finished_at is None

    @property
    def fraction(self) -> float:
        if self.bytes_total:
            return min(1.0, self.bytes_done / self.bytes_total)
        return 1.0 if not self.runs_total else self.runs_done / self.runs_total

    def describe(self) -> str:
        done = f"{self.runs_done:,} of {self.runs_total:,} new or changed run directories"
        size = f"{self.bytes_done / 1e6:,.1f} of {self.bytes_total / 1e6:,.1f} MB"
        if self.error:
            return f"Ingestion stopped after {done}: {self.error}"
        if self.running:
            return f"Ingesting run files in the background: {done} ({size}) so far"
        took = (self.finished_at or time.time()) - self.started_at
        quarantined = f", {self.quarantined:,} problems quarantined" if self.quarantined else ""
        return (
            f"Read {done} ({size}) in {took:,.1f} s: {len(self.ingested):,} runs "
            f"ingested{quarantined}"
        )


# ----- the ingestion of one batch -----------------------------------------------------------
@dataclass
class _Run:
    pending: PendingRun
    run_id: str
    meta: dict[str, Any]
    content_hash: str
    problems: list[FileProblem] = field(default_factory=list)
    fast: dict[str, bool] = field(default_factory=dict)  # file name -> read by DuckDB
    records: dict[str, list[Any]] = field(default_factory=dict)  # one-reader results
    counts: RequestCounts | None = None


@dataclass
class _FileScan:
    """What one pass over a run file saw (the file itself is never held whole, except
    run.json, which is read as JSON anyway)."""

    present: bool = False
    size: int = 0
    ends_with_newline: bool = False
    default_null: bool = False  # an explicit null where the record has a default
    error: str | None = None  # not a regular file, too large, unreadable
    data: bytes | None = None  # run.json only


def _scan_file(path: Path, name: str, digest: Any) -> _FileScan:
    scan = _FileScan()
    limit = MAX_JSON_FILE_BYTES if name == RUN_JSON else MAX_LINES_FILE_BYTES
    try:
        handle = open_regular(path, limit, name)
    except FileNotFoundError:
        digest.update(name.encode() + b"\0\x01missing")
        return scan
    except RunFilesError as exc:
        scan.present, scan.error = True, str(exc).removeprefix(f"{name}: ")
        digest.update(name.encode() + b"\0\x02" + scan.error.encode())
        return scan
    scan.present = True
    digest.update(name.encode() + b"\0")
    pattern = _DEFAULT_NULL.get(name)
    chunks: list[bytes] = []
    tail = b""
    try:
        with handle:
            while chunk := handle.read(READ_CHUNK_BYTES):
                scan.size += len(chunk)
                if scan.size > limit:
                    scan.error = f"more than the {limit:,} bytes allowed; not read"
                    digest.update(b"\x02" + scan.error.encode())
                    return scan
                digest.update(chunk)
                if name == RUN_JSON:
                    chunks.append(chunk)
                elif pattern is not None and not scan.default_null:
                    # the tail of the previous chunk: a match across the boundary is found too
                    scan.default_null = pattern.search(tail + chunk) is not None
                    tail = chunk[-4096:]
                scan.ends_with_newline = chunk.endswith(b"\n")
    except OSError as exc:
        scan.error = f"unreadable ({exc})"
        return scan
    if name == RUN_JSON:
        scan.data = b"".join(chunks)
    return scan


def _content_hash(run_dir: Path) -> tuple[str, dict[str, _FileScan]]:
    digest = hashlib.sha256()
    scans = {
        name: _scan_file(run_dir / name, name, digest)
        for name in (RUN_JSON, REQUESTS_JSONL, SERVER_METRICS_JSONL)
    }
    return digest.hexdigest(), scans


def _suitable_for_duckdb(scan: _FileScan) -> bool:
    """A file DuckDB can read whole: a regular file, not empty, every line ended (no torn last
    line), no null where the record forbids one."""
    return scan.error is None and scan.size > 0 and scan.ends_with_newline and not scan.default_null


#: a run id: what the store's tables, the pages and the command line show
MAX_RUN_ID_CHARS = 200


def _run_id_problem(run_id: str) -> str | None:
    """Why ``run_id`` (a run.json's, or its folder's name) cannot name a run, None if it can."""
    if len(run_id) > MAX_RUN_ID_CHARS or any(ord(c) < 0x20 or ord(c) == 0x7F for c in run_id):
        return (
            f"at most {MAX_RUN_ID_CHARS} characters without control characters: the whole run "
            "is skipped"
        )
    return None


def _mark_interrupted(run_dir: Path, meta: dict[str, Any], reason: str) -> dict[str, Any]:
    """``run.json`` says ``interrupted`` from now on (in the store at least, if the folder is
    read-only): the collected requests stay, nothing claims the run is still going."""
    newest = 0.0
    for name in (REQUESTS_JSONL, SERVER_METRICS_JSONL, RUN_JSON):
        with contextlib.suppress(OSError):
            newest = max(newest, (run_dir / name).stat().st_mtime)
    finished = (
        datetime.fromtimestamp(newest, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
        if newest
        else utc_now_iso()
    )
    updated = {
        **meta,
        "status": "interrupted",
        "finished_at": meta.get("finished_at") or finished,
        "error": meta.get("error") or f"interrupted: {reason}; the requests it finished are kept",
    }
    try:
        write_json_atomic(run_dir / RUN_JSON, updated)
    except OSError as exc:
        log.warning("run %s: could not mark it interrupted in %s (%s)", run_dir, RUN_JSON, exc)
        updated["_not_written"] = True
    return updated


_ARROW_TYPES = {
    "VARCHAR": pa.string(),
    "BIGINT": pa.int64(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "DOUBLE[]": pa.list_(pa.float64()),
    "BIGINT[]": pa.list_(pa.int64()),
}


def _arrow_requests(records: list[tuple[str, RequestRecord]]) -> pa.Table:
    """Request records read by the one reader, as a table DuckDB inserts in one statement."""
    columns: dict[str, pa.Array] = {
        "run_id": pa.array([run_id for run_id, _ in records], type=pa.string())
    }
    for c in REQUESTS.columns:
        values = [getattr(record, c.name) for _, record in records]
        columns[c.name] = pa.array(values, type=_ARROW_TYPES[c.sql_type])
    return pa.table(columns)


def _arrow_metrics(records: list[tuple[str, MetricSample]]) -> pa.Table:
    return pa.table(
        {
            "run_id": pa.array([run_id for run_id, _ in records], type=pa.string()),
            "t_s": pa.array([r.t_s for _, r in records], type=pa.float64()),
            "name": pa.array([r.name for _, r in records], type=pa.string()),
            "labels": pa.array([json.dumps(r.labels) for _, r in records], type=pa.string()),
            "value": pa.array([r.value for _, r in records], type=pa.float64()),
        }
    )


_REQUEST_COLUMNS = [c.name for c in REQUESTS.columns]


class _Batch:
    """One batch: read and check with DuckDB on its own cursor, then one write transaction."""

    def __init__(self, store: Store, pending: Sequence[PendingRun], *, bulk: bool = True) -> None:
        self.store = store
        self.pending = pending
        self.bulk = bulk  # False: every file through the one reader (for comparison)
        self.runs: list[_Run] = []
        self.unchanged: list[PendingRun] = []  # same content, new signature
        self.skipped: list[tuple[PendingRun, FileProblem]] = []  # run.json unreadable
        self.failed: list[_Run] = []  # read, but the store could not hold them: quarantined
        self.already: list[_Run] = []  # stored meanwhile by another pass, same content

    # -- reading ------------------------------------------------------------------------------
    def read(self, con: duckdb.DuckDBPyConnection) -> None:
        for pending in self.pending:
            content_hash, scans = _content_hash(pending.run_dir)
            if content_hash == pending.known_hash:
                self.unchanged.append(pending)
                continue
            meta = self._meta(pending, scans[RUN_JSON])
            if meta is None:
                continue
            reason = writer_stopped(pending.run_dir, meta)
            if reason is not None:
                meta = _mark_interrupted(pending.run_dir, meta, reason)
                meta.pop("_not_written", None)
                pending.signature = run_signature(pending.run_dir) or pending.signature
                content_hash, scans = _content_hash(pending.run_dir)
            run_id = str(meta.get("run_id") or pending.run_dir.name)
            bad_id = _run_id_problem(run_id)
            if bad_id is not None:
                self.skipped.append(
                    (pending, FileProblem(RUN_JSON, None, "run_id", run_id[:80], bad_id))
                )
                continue
            run = _Run(pending, run_id, meta, content_hash)
            status = meta.get("status")
            if status not in RUN_STATUSES:
                run.problems.append(
                    FileProblem(
                        RUN_JSON, None, "status", status, f"one of {', '.join(RUN_STATUSES)}"
                    )
                )
            for name in (REQUESTS_JSONL, SERVER_METRICS_JSONL):
                run.fast[name] = self.bulk and _suitable_for_duckdb(scans[name])
            self.runs.append(run)
        self._stage(con, REQUESTS_JSONL, REQUESTS, "staged_requests")
        self._stage(con, SERVER_METRICS_JSONL, METRICS, "staged_metrics")
        self._counts(con)
        for run in self.runs:
            if not run.fast[REQUESTS_JSONL]:
                path = run.pending.run_dir / REQUESTS_JSONL
                requests, problems = read_json_lines(path, RequestRecord)
                requests, duplicates = _dedupe(requests)
                run.records[REQUESTS_JSONL] = requests
                run.problems.extend([*problems, *duplicates])
            if not run.fast[SERVER_METRICS_JSONL]:
                path = run.pending.run_dir / SERVER_METRICS_JSONL
                samples, problems = read_json_lines(path, MetricSample)
                run.records[SERVER_METRICS_JSONL] = samples
                run.problems.extend(problems)
            if run.counts is None:
                run.counts = RequestCounts.of(run.records.get(REQUESTS_JSONL, []))

    def _meta(self, pending: PendingRun, scan: _FileScan) -> dict[str, Any] | None:
        problem = None
        meta: Any = None
        if scan.error is not None:
            problem = scan.error
        elif scan.data is None:
            problem = "missing"
        else:
            try:
                meta = loads_json(scan.data, RUN_JSON, finite_only=True)
            except ValueError as exc:
                problem = f"not readable JSON ({exc})"
            else:
                if not isinstance(meta, dict):
                    problem = f"must hold a JSON object, not {type(meta).__name__}"
        if problem is not None:
            self.skipped.append(
                (
                    pending,
                    FileProblem(
                        RUN_JSON,
                        None,
                        None,
                        None,
                        f"{problem}: the whole run is skipped",
                        "unreadable",
                    ),
                )
            )
            return None
        return meta

    def _stage(
        self, con: duckdb.DuckDBPyConnection, name: str, schema: RecordSchema, table: str
    ) -> None:
        """Read every suitable ``name`` file of the batch into ``table``; a file DuckDB cannot
        read or whose lines the record would refuse goes to the one reader instead."""
        by_file = {str(r.pending.run_dir / name): r for r in self.runs if r.fast[name]}
        con.execute(f"DROP TABLE IF EXISTS {table}")
        files = list(by_file)
        columns = schema.read_json_columns()
        select = (
            f"SELECT * FROM read_json(?, format = 'newline_delimited', filename = true, "
            f"columns = {columns})"
        )
        while True:
            try:
                if files:
                    con.execute(f"CREATE TEMP TABLE {table} AS {select}", [files])
                break
            except duckdb.Error:
                # one file DuckDB cannot read: find it (rare), the rest stays in bulk
                good = []
                for path in files:
                    try:  # materialised: a count alone would not convert the columns
                        probe = f"CREATE OR REPLACE TEMP TABLE probe_file AS {select}"
                        con.execute(probe, [[path]])
                        good.append(path)
                    except duckdb.Error:
                        by_file[path].fast[name] = False
                con.execute("DROP TABLE IF EXISTS probe_file")
                if len(good) == len(files):
                    raise
                files = good
        if not files:
            self._empty_table(con, table, schema)
            return
        # Merged over one line of each distinct structure, not over every line: the same
        # merged structure (merging is a union), but json_group_structure over every line of
        # a 58 MB file held ~940 MB, over the distinct ones ~270 MB
        # (benchmarks/ingest_memory_bench.py)
        structures = con.execute(
            "SELECT filename, json_group_structure(line) FROM ("
            "SELECT filename, any_value(json) AS line FROM read_ndjson_objects(?, "
            "filename = true) GROUP BY filename, json_structure(json)) GROUP BY filename",
            [files],
        ).fetchall()
        for path, structure in structures:
            if schema.structure_problem(json.loads(structure)) is not None:
                by_file[path].fast[name] = False
        bad = con.execute(
            f"SELECT filename FROM {table} GROUP BY filename "
            f"HAVING count(*) FILTER (WHERE {schema.bad_row_sql()}) > 0"
            + (" OR count(DISTINCT request_id) < count(*)" if schema is REQUESTS else "")
        ).fetchall()
        for (path,) in bad:
            by_file[path].fast[name] = False

    @staticmethod
    def _empty_table(con: duckdb.DuckDBPyConnection, table: str, schema: RecordSchema) -> None:
        columns = ", ".join(f'"{c.name}" {c.sql_type}' for c in schema.columns)
        con.execute(f"CREATE TEMP TABLE {table} ({columns}, filename VARCHAR)")

    def _counts(self, con: duckdb.DuckDBPyConnection) -> None:
        fast = {
            str(r.pending.run_dir / REQUESTS_JSONL): r for r in self.runs if r.fast[REQUESTS_JSONL]
        }
        if not fast:
            return
        ok_measured = "NOT coalesce(warmup, false) AND status = 'ok'"
        rows = con.execute(
            "SELECT filename, count(*) FILTER (WHERE NOT coalesce(warmup, false)), "
            f"count(*) FILTER (WHERE {ok_measured}), "
            f"avg(coalesce(input_len_target, 0)) FILTER (WHERE {ok_measured}), "
            f"avg(coalesce(output_len_target, 0)) FILTER (WHERE {ok_measured}) "
            "FROM staged_requests GROUP BY filename"
        ).fetchall()
        for path, measured, succeeded, input_mean, output_mean in rows:
            run = fast.get(path)
            if run is not None and run.fast[REQUESTS_JSONL]:
                run.counts = RequestCounts(
                    int(measured),
                    int(succeeded),
                    None if input_mean is None else float(input_mean),
                    None if output_mean is None else float(output_mean),
                )

    # -- writing ------------------------------------------------------------------------------
    def write(self, con: duckdb.DuckDBPyConnection) -> list[str]:
        """One transaction for the whole batch: its runs, their rows, measured results,
        directory states and problems (set-wise statements, not one per run).

        Idempotent under any interleaving of passes over the same runs (the caller holds the
        store's write lock, which every store of one database file in this process shares):
        inside the transaction, a run directory already stored with this content is left as
        it is. When the batch cannot be written (a value a column cannot hold, a run.json
        whose JSON the store refuses), its runs are written one at a time and each that still
        fails is quarantined alone, with the database's reason; the others are ingested."""
        now = datetime.now(UTC).replace(tzinfo=None)
        runs = self._unique_runs()
        try:
            return self._commit(con, runs, self.skipped, self.unchanged, now)
        except Exception as exc:  # whatever one run does, the others go in
            if not runs:
                raise
            log.info("a batch of %d runs could not be written (%s): one by one", len(runs), exc)
        ingested: list[str] = []
        for run in runs:
            try:
                ingested += self._commit(con, [run], [], [], now)
            except Exception as exc:  # quarantined with its reason
                reason = _one_line(f"{type(exc).__name__}: {exc}")
                problem = FileProblem(
                    RUN_JSON,
                    None,
                    None,
                    None,
                    f"the run could not be stored, nothing of it is: {reason}",
                    "unreadable",
                )
                self.skipped.append((run.pending, problem))
                self.failed.append(run)
        self._commit(con, [], self.skipped, self.unchanged, now)
        return ingested

    def _commit(
        self,
        con: duckdb.DuckDBPyConnection,
        runs: list[_Run],
        skipped: list[tuple[PendingRun, FileProblem]],
        unchanged: list[PendingRun],
        now: datetime,
    ) -> list[str]:
        runs = list(runs)
        con.execute("BEGIN TRANSACTION")
        try:
            stored = self._stored_hashes(con, [r.pending for r in runs])
            already = [r for r in runs if stored.get(str(r.pending.run_dir)) == r.content_hash]
            if already:  # another pass stored this content meanwhile: nothing to redo
                runs = [r for r in runs if r not in already]
                unchanged = [*unchanged, *(r.pending for r in already)]
            registered = self._register(con, runs)
            try:
                self._write(con, runs, skipped, unchanged, now)
            finally:
                for name in registered:
                    con.unregister(name)
            con.execute("COMMIT")
        except Exception:
            with contextlib.suppress(duckdb.Error):  # a failed COMMIT has rolled back already
                con.execute("ROLLBACK")
            raise
        self.already.extend(already)
        return [run.run_id for run in runs]

    @staticmethod
    def _stored_hashes(
        con: duckdb.DuckDBPyConnection, pending: list[PendingRun]
    ) -> dict[str, str | None]:
        if not pending:
            return {}
        rows = con.execute(
            "SELECT run_dir, content_hash FROM run_dirs WHERE state = 'ingested' "
            "AND run_dir IN (SELECT unnest(?))",
            [[str(p.run_dir) for p in pending]],
        ).fetchall()
        return {str(run_dir): content_hash for run_dir, content_hash in rows}

    @staticmethod
    def _register(con: duckdb.DuckDBPyConnection, runs: list[_Run]) -> list[str]:
        batch = pa.table(
            {
                "run_id": [r.run_id for r in runs],
                "requests_file": [str(r.pending.run_dir / REQUESTS_JSONL) for r in runs],
                "metrics_file": [str(r.pending.run_dir / SERVER_METRICS_JSONL) for r in runs],
                "fast_requests": [r.fast[REQUESTS_JSONL] for r in runs],
                "fast_metrics": [r.fast[SERVER_METRICS_JSONL] for r in runs],
            },
            schema=pa.schema(
                [
                    ("run_id", pa.string()),
                    ("requests_file", pa.string()),
                    ("metrics_file", pa.string()),
                    ("fast_requests", pa.bool_()),
                    ("fast_metrics", pa.bool_()),
                ]
            ),
        )
        registered = {
            "batch_runs": batch,
            "fallback_requests": _arrow_requests(
                [(r.run_id, x) for r in runs for x in r.records.get(REQUESTS_JSONL, [])]
            ),
            "fallback_metrics": _arrow_metrics(
                [(r.run_id, x) for r in runs for x in r.records.get(SERVER_METRICS_JSONL, [])]
            ),
        }
        for name, table in registered.items():
            con.register(name, table)
        return list(registered)

    def _unique_runs(self) -> list[_Run]:
        """One run per run id (two directories claiming one id: the later one wins and the
        other is quarantined, saying so)."""
        by_id: dict[str, _Run] = {}
        for run in self.runs:
            held = by_id.get(run.run_id)
            if held is not None:
                self.skipped.append(
                    (
                        held.pending,
                        FileProblem(
                            RUN_JSON,
                            None,
                            "run_id",
                            run.run_id,
                            f"also the id of {run.pending.run_dir.name}, which is kept",
                            "invalid",
                        ),
                    )
                )
            by_id[run.run_id] = run
        return list(by_id.values())

    def _write(
        self,
        con: duckdb.DuckDBPyConnection,
        runs: list[_Run],
        skipped: list[tuple[PendingRun, FileProblem]],
        unchanged: list[PendingRun],
        now: datetime,
    ) -> None:
        from planner.store import Store

        in_batch = "run_id IN (SELECT run_id FROM batch_runs)"
        for table in (
            "benchmark_runs",
            "request_results",
            "server_metric_samples",
            "measured_results",
        ):
            con.execute(f"DELETE FROM {table} WHERE {in_batch}")
        columns = ", ".join(f'"{c}"' for c in _REQUEST_COLUMNS)
        staged = ", ".join(f's."{c}"' for c in _REQUEST_COLUMNS)
        con.execute(
            f"INSERT INTO request_results (run_id, {columns}) SELECT b.run_id, {staged} "
            "FROM staged_requests s JOIN batch_runs b ON s.filename = b.requests_file "
            "WHERE b.fast_requests"
        )
        con.execute(
            f"INSERT INTO request_results (run_id, {columns}) SELECT run_id, {columns} "
            "FROM fallback_requests"
        )
        metrics = "INSERT INTO server_metric_samples (run_id, t_s, name, labels, value) "
        con.execute(
            metrics + "SELECT b.run_id, s.t_s, s.name, coalesce(s.labels, '{}'), s.value "
            "FROM staged_metrics s JOIN batch_runs b ON s.filename = b.metrics_file "
            "WHERE b.fast_metrics"
        )
        con.execute(metrics + "SELECT run_id, t_s, name, labels, value FROM fallback_metrics")
        stored = dict.fromkeys((r.run_id for r in runs), (0, 0))
        for run_id, total, ok in con.execute(
            "SELECT run_id, count(*), count(*) FILTER (WHERE status = 'ok') "
            f"FROM request_results WHERE {in_batch} GROUP BY run_id"
        ).fetchall():
            stored[str(run_id)] = (int(total), int(ok))
        con.register("batch_meta", _arrow_runs(runs, stored, now))
        try:
            con.execute("INSERT INTO benchmark_runs BY NAME SELECT * FROM batch_meta")
        finally:
            con.unregister("batch_meta")
        measured = []
        for run in runs:
            assert run.counts is not None
            result = measured_result_of(run.run_id, run.meta, run.counts)
            if result is not None:
                measured.append(result)
        Store._insert_measured(con, measured)
        dirs: list[_DirRow] = [
            (r.pending, r.run_id, r.content_hash, "ingested", r.problems) for r in runs
        ]
        dirs += [(p, None, None, "quarantined", [problem]) for p, problem in skipped]
        if unchanged:
            con.executemany(
                "UPDATE run_dirs SET signature = ?, checked_at = ? WHERE run_dir = ?",
                [[p.signature, now, str(p.run_dir)] for p in unchanged],
            )
        con.register("batch_dirs", _arrow_dirs(dirs, now))
        con.register("batch_problems", _arrow_problems(dirs, now))
        try:
            con.execute("INSERT OR REPLACE INTO run_dirs BY NAME SELECT * FROM batch_dirs")
            con.execute(
                "DELETE FROM run_problems WHERE run_dir IN (SELECT run_dir FROM batch_dirs)"
            )
            con.execute("INSERT INTO run_problems BY NAME SELECT * FROM batch_problems")
        finally:
            con.unregister("batch_dirs")
            con.unregister("batch_problems")


def _arrow_runs(runs: list[_Run], stored: dict[str, tuple[int, int]], now: datetime) -> pa.Table:
    rows: dict[str, list[Any]] = {name: [] for name in _RUN_COLUMNS}
    scrubber = Scrubber()  # run.json written before the runner scrubbed it keeps no credential
    for run in runs:
        meta = scrubber.value(run.meta)
        endpoint: dict[str, Any] = (
            meta["endpoint"] if isinstance(meta.get("endpoint"), dict) else {}
        )
        total, ok = stored.get(run.run_id, (0, 0))
        values = {
            "run_id": run.run_id,
            "status": _text(meta.get("status")),
            "started_at": _timestamp(meta.get("started_at")),
            "finished_at": _timestamp(meta.get("finished_at")),
            "base_url": _text(endpoint.get("base_url")),
            "api": _text(endpoint.get("api")),
            "model": _text(meta.get("model")),
            "server_version": _text(endpoint.get("server_version")),
            "simulated": bool(meta.get("simulated", False)),
            "config": json.dumps(meta.get("config")),
            "plan": json.dumps(meta.get("plan")),
            "tokenizer": json.dumps(meta.get("tokenizer")),
            "summary": json.dumps(meta.get("summary")),
            "self_checks": json.dumps(meta.get("self_checks")),
            "error": _text(meta.get("error")),
            "run_dir": str(run.pending.run_dir),
            "files_signature": run.pending.signature,
            "ingested_at": now,
            "content_hash": run.content_hash,
            "requests_total": total,
            "requests_ok": ok,
            "problems": len(run.problems),
        }
        for name in _RUN_COLUMNS:
            rows[name].append(values[name])
    return pa.table({name: pa.array(rows[name], type=t) for name, t in _RUN_COLUMNS.items()})


_RUN_COLUMNS: dict[str, pa.DataType] = {
    "run_id": pa.string(),
    "status": pa.string(),
    "started_at": pa.timestamp("us"),
    "finished_at": pa.timestamp("us"),
    "base_url": pa.string(),
    "api": pa.string(),
    "model": pa.string(),
    "server_version": pa.string(),
    "simulated": pa.bool_(),
    "config": pa.string(),
    "plan": pa.string(),
    "tokenizer": pa.string(),
    "summary": pa.string(),
    "self_checks": pa.string(),
    "error": pa.string(),
    "run_dir": pa.string(),
    "files_signature": pa.string(),
    "ingested_at": pa.timestamp("us"),
    "content_hash": pa.string(),
    "requests_total": pa.int32(),
    "requests_ok": pa.int32(),
    "problems": pa.int32(),
}


#: a run directory's new state: (pending, run id, content hash, state, problems)
_DirRow = tuple[PendingRun, str | None, str | None, str, list[FileProblem]]


def _arrow_dirs(dirs: list[_DirRow], now: datetime) -> pa.Table:
    return pa.table(
        {
            "run_dir": pa.array([str(p.run_dir) for p, *_ in dirs], type=pa.string()),
            "run_id": pa.array([d[1] for d in dirs], type=pa.string()),
            "signature": pa.array([d[0].signature for d in dirs], type=pa.string()),
            "content_hash": pa.array([d[2] for d in dirs], type=pa.string()),
            "state": pa.array([d[3] for d in dirs], type=pa.string()),
            "checked_at": pa.array([now] * len(dirs), type=pa.timestamp("us")),
        }
    )


def _arrow_problems(dirs: list[_DirRow], now: datetime) -> pa.Table:
    rows = [
        (str(pending.run_dir), run_id, problem)
        for pending, run_id, _, _, problems in dirs
        for problem in problems
    ]
    return pa.table(
        {
            "run_dir": pa.array([r[0] for r in rows], type=pa.string()),
            "run_id": pa.array([r[1] for r in rows], type=pa.string()),
            "file": pa.array([p.file for _, _, p in rows], type=pa.string()),
            "line": pa.array([p.line for _, _, p in rows], type=pa.int32()),
            "field": pa.array([p.field for _, _, p in rows], type=pa.string()),
            "value": pa.array(
                [None if p.value is None else str(p.value)[:200] for _, _, p in rows],
                type=pa.string(),
            ),
            "reason": pa.array([p.reason for _, _, p in rows], type=pa.string()),
            "kind": pa.array([p.kind for _, _, p in rows], type=pa.string()),
            "found_at": pa.array([now] * len(rows), type=pa.timestamp("us")),
        }
    )


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed


def _dedupe(records: list[RequestRecord]) -> tuple[list[RequestRecord], list[FileProblem]]:
    """The last record of each request id (as the writer's retry would leave it)."""
    last: dict[str, int] = {}
    for i, record in enumerate(records):
        last[record.request_id] = i
    if len(last) == len(records):
        return records, []
    problems = [
        FileProblem(
            REQUESTS_JSONL,
            None,
            "request_id",
            record.request_id,
            "repeated: the last line with this id is kept",
            "invalid",
        )
        for i, record in enumerate(records)
        if last[record.request_id] != i
    ]
    return [records[i] for i in sorted(last.values())], problems


def _batches(pending: Sequence[PendingRun]) -> Iterable[list[PendingRun]]:
    batch: list[PendingRun] = []
    size = 0
    for run in pending:
        batch.append(run)
        size += run.size
        if size >= BATCH_BYTES or len(batch) >= BATCH_RUNS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def mark_stopped_runs(store: Store) -> list[str]:
    """Mark ``interrupted`` every stored run that says ``running`` but whose writer is gone;
    its run directory then counts as changed and is re-ingested as such."""
    marked = []
    for run_id, run_dir in store.query(
        "SELECT run_id, run_dir FROM benchmark_runs WHERE status = 'running'"
    ).itertuples(index=False, name=None):
        path = Path(str(run_dir))
        try:
            meta = loads_json(read_regular_bytes(path / RUN_JSON, MAX_JSON_FILE_BYTES), RUN_JSON)
        except (OSError, ValueError, RunFilesError):
            continue
        if not isinstance(meta, dict):
            continue
        reason = writer_stopped(path, meta)
        if reason is not None:
            updated = _mark_interrupted(path, meta, reason)
            if updated.pop("_not_written", False):  # a read-only folder: the store says it
                with store.write_lock(), store.bulk_cursor() as con:
                    con.execute(
                        "UPDATE benchmark_runs SET status = 'interrupted', error = ? "
                        "WHERE run_id = ?",
                        [updated["error"], str(run_id)],
                    )
            marked.append(str(run_id))
    return marked


def ingest(
    store: Store,
    runs_dir: Path,
    progress: IngestProgress | None = None,
    on_batch: Callable[[IngestProgress], None] | None = None,
    *,
    bulk: bool = True,
) -> IngestProgress:
    """Ingest what is new or changed under ``runs_dir``, batch after batch (see the module
    docstring); returns the progress record, finished. ``bulk=False`` reads every file with
    the one reader instead of DuckDB (slower; for comparison)."""
    progress = progress or IngestProgress()
    pending = scan(store, runs_dir, progress)
    return ingest_pending(store, runs_dir, pending, progress, on_batch, bulk=bulk)


def scan(store: Store, runs_dir: Path, progress: IngestProgress) -> list[PendingRun]:
    """What a pass has to do (runs that stopped marked ``interrupted`` first): sizes and
    times of the run files only, milliseconds for hundreds of runs."""
    mark_stopped_runs(store)
    pending = pending_runs(Path(runs_dir), store.run_dir_states())
    progress.runs_total = len(pending)
    progress.bytes_total = sum(p.size for p in pending)
    return pending


def ingest_pending(
    store: Store,
    runs_dir: Path,
    pending: list[PendingRun],
    progress: IngestProgress,
    on_batch: Callable[[IngestProgress], None] | None = None,
    *,
    bulk: bool = True,
    before_batch: Callable[[], None] | None = None,
) -> IngestProgress:
    """The batches of a scanned pass (see :func:`ingest`); ``before_batch`` is called before
    each (a background pass holds off there while a page computes)."""
    try:
        for pending_batch in _batches(pending):
            if before_batch is not None:
                before_batch()
            batch = _Batch(store, pending_batch, bulk=bulk)
            with store.ingest_memory(), store.bulk_cursor() as con:
                batch.read(con)
                with store.write_lock():
                    ingested = batch.write(con)
            progress.ingested.extend(ingested)
            stored = [r for r in batch.runs if r not in batch.failed and r not in batch.already]
            for run in stored:
                for name in (REQUESTS_JSONL, SERVER_METRICS_JSONL):
                    if (run.pending.run_dir / name).exists():
                        if run.fast[name]:
                            progress.files_bulk += 1
                        else:
                            progress.files_one_reader += 1
            progress.quarantined += sum(len(r.problems) for r in stored) + len(batch.skipped)
            for pending_run, problem in batch.skipped:
                log.info("run %s skipped: %s", pending_run.run_dir, problem)
            for run in batch.runs:
                for problem in run.problems:
                    log.info("run %s: %s", run.pending.run_dir.name, problem)
            progress.runs_done += len(pending_batch)
            progress.bytes_done += sum(p.size for p in pending_batch)
            if on_batch is not None:
                on_batch(progress)
    except (duckdb.Error, OSError, RunFilesError) as exc:
        progress.error = f"{type(exc).__name__}: {exc}"
        log.warning("ingestion of %s stopped: %s", runs_dir, progress.error)
    finally:
        progress.finished_at = time.time()
    if progress.quarantined:
        log.warning(
            "%d problems quarantined while ingesting %s (python -m planner store check lists them)",
            progress.quarantined,
            runs_dir,
        )
    return progress


def _lower_thread_priority() -> None:
    """Background work yields the cores to the pages: the calling thread (and DuckDB's work on
    it, the store runs one DuckDB thread) at nice 10. Linux schedules threads one by one; where
    a thread's priority cannot be set this way nothing changes."""
    if not sys.platform.startswith("linux"):
        return  # elsewhere a thread id is no process id: setpriority could name another one
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


#: The longest a background pass holds off for a page's computation at one time: a page that
#: keeps computing cannot stall ingestion for longer.
FOREGROUND_HOLD_S = 3.0


class IngestJob:
    """One background ingestion at a time per store: :meth:`start` returns the progress of
    the pass in flight (or of a new one); the last finished pass stays readable. While a page
    computes inside :meth:`foreground`, the pass waits before its next batch (the batches are
    mostly Python, which would share the interpreter lock with the page)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._foreground = threading.Condition()
        self._busy = 0  # pages computing in foreground()
        self._waiters = 0  # callers of wait(): a pass someone waits for never holds off
        self._thread: threading.Thread | None = None
        self.current: IngestProgress | None = None
        self.last_finished: IngestProgress | None = None
        self.passes = 0  # finished passes that ingested something

    def start(self, runs_dir: Path) -> IngestProgress:
        """Scan now (so the progress says at once what is coming), ingest in a thread."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive() and self.current:
                return self.current
            progress = IngestProgress()
            try:
                pending = scan(self.store, Path(runs_dir), progress)
            except (duckdb.Error, OSError) as exc:
                progress.error = f"{type(exc).__name__}: {exc}"
                progress.finished_at = time.time()
                pending = []
            if not pending and progress.finished_at is None:
                progress.finished_at = time.time()  # nothing to do: no thread
            self.current = progress
            if progress.finished_at is not None:
                self.last_finished = progress
                return progress
            self._thread = threading.Thread(
                target=self._run,
                args=(Path(runs_dir), pending, progress),
                name="servewise-ingest",
                daemon=True,
            )
            self._thread.start()
            return progress

    @contextlib.contextmanager
    def foreground(self) -> Iterator[None]:
        """A page's computation (a search) that background batches wait for (at most
        :data:`FOREGROUND_HOLD_S` at a time), unless someone waits for the pass (a page that
        waits for a small pass inside it lets it run)."""
        with self._foreground:
            self._busy += 1
        try:
            yield
        finally:
            with self._foreground:
                self._busy -= 1
                self._foreground.notify_all()

    def _hold_for_foreground(self) -> None:
        with self._foreground:
            self._foreground.wait_for(
                lambda: self._busy == 0 or self._waiters > 0, timeout=FOREGROUND_HOLD_S
            )

    def _run(self, runs_dir: Path, pending: list[PendingRun], progress: IngestProgress) -> None:
        _lower_thread_priority()
        try:
            ingest_pending(
                self.store, runs_dir, pending, progress, before_batch=self._hold_for_foreground
            )
        except Exception as exc:  # a background thread must not die silently
            progress.error = f"{type(exc).__name__}: {exc}"
            progress.finished_at = time.time()
            log.exception("background ingestion of %s failed", runs_dir)
        with self._lock:
            self.last_finished = progress
            if progress.ingested:
                self.passes += 1

    def wait(self, timeout: float | None = None) -> IngestProgress | None:
        """The pass in flight, once it ends or ``timeout`` passes; meanwhile it does not hold
        off for pages (the caller is waiting for it)."""
        thread = self._thread
        if thread is not None:
            with self._foreground:
                self._waiters += 1
                self._foreground.notify_all()
            try:
                thread.join(timeout)
            finally:
                with self._foreground:
                    self._waiters -= 1
        return self.current
