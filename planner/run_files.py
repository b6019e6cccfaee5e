"""Run files: the one storage contract between what measures (the benchmark runner, the
importers of other tools' results) and what reads (the store, the Verify page, calibration).

Only one process may write a DuckDB file, so a run is written as plain files that the store
ingests. A run is a directory ``<runs_dir>/<run_id>/`` where ``run_id`` is a UTC timestamp and
a short random suffix, e.g. ``20261129T235959Z-a1b2c3``. It holds:

``run.json``
    Metadata, rewritten atomically (``run.json.tmp`` then ``os.replace``) at start and end::

        {"run_id", "status": "running"|"completed"|"cancelled"|"failed"|"interrupted",
         "started_at" (ISO 8601 UTC), "finished_at" (ISO UTC or null),
         "endpoint": {"base_url", "api": "completions"|"chat", "server_version",
                      "server_flags"},
         "model", "client_host",
         "simulated": bool  (true when /v1/models entries are owned_by "servewise-simulated"
                             or responses carry the header x-servewise-simulated),
         "config": {load pattern, concurrency, request_rate, burstiness, num_requests, warmup,
                    input/output length spec, seed, ...; "imported_from" for an import},
         "plan": the JSON object of the plan being verified, or null,
         "tokenizer": {...calibration: tokens_per_word, overhead, probes, deviation...},
         "summary": the measured figures (vLLM ``bench serve`` keys), or null while running,
         "self_checks": [{"name", "ok": bool, "message"}],
         "error": one-line reason or null,
         "writer": {"host", "pid"} of the process writing the run}

``requests.jsonl``
    One :class:`RequestRecord` a line, every key on every line in the same order (so DuckDB's
    ``read_json`` and any other reader see one schema), appended and flushed as each request
    finishes and ``os.fsync``-ed at least every second: a crash loses nothing already finished.

``server_metrics.jsonl``
    One :class:`MetricSample` a line (a scraped Prometheus sample), ``t_s`` on the clock of
    ``start_s``.

``result.json``
    At the end: the ``vllm bench serve --save-result --save-detailed`` JSON (for an import,
    the tool's own file as it was).

``.heartbeat``
    Touched every ``HEARTBEAT_INTERVAL_S`` while the writer runs; with ``run.json``'s
    ``"writer": {"host", "pid"}`` it tells a run still being written from one whose process
    died (:func:`writer_stopped`): such a run is marked ``interrupted`` by the store on its
    next start, its collected requests kept.

The API key and the Authorization header are never written to any of these files: the writer
passes every string it writes through a :class:`~planner.credentials.Scrubber` that knows the
run's secrets (``RunWriter.scrubber.add``) and redacts anything that looks like a credential,
as a last line behind the runner, which keeps them out in the first place.

One reader, :func:`read_run_dir`, for everyone. Its rule for JSON lines
(:func:`read_json_lines`): a last line without its newline that does not parse is a *torn*
write (the writer was killed mid-line) and is skipped; every other line that does not parse or
does not fit its record is skipped too and named in :attr:`RunFiles.problems` (file, line,
field, value). Every good line is kept, before and after a bad one.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import socket
import stat
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Annotated, Any, BinaryIO, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from planner.credentials import Scrubber
from planner.errors import RunFilesError

RUN_JSON = "run.json"
REQUESTS_JSONL = "requests.jsonl"
SERVER_METRICS_JSONL = "server_metrics.jsonl"
RESULT_JSON = "result.json"
HEARTBEAT = ".heartbeat"
#: ``interrupted``: the process writing the run stopped without finishing it (set by the
#: store on its next start, see :func:`writer_stopped`)
RUN_STATUSES = ("running", "completed", "cancelled", "failed", "interrupted")
FSYNC_INTERVAL_S = 1.0
#: the writer touches ``.heartbeat`` this often while it runs ...
HEARTBEAT_INTERVAL_S = 5.0
#: ... and a "running" run whose heartbeat (or newest file) is older than this has stopped
STALE_AFTER_S = 60.0


# ----- bounds ---------------------------------------------------------------------------------
# Every reader (the one reader, the store's bulk ingestion, the importers, the runner's own
# records) takes these bounds from here: what the store's columns hold (INTEGER is 32 bits) and
# what the performance model can use.
#: Tokens of one request (prompt, output, a chunk) and chunks of one request: ten times the
#: longest context a served model offers in 2026 (10M tokens, Llama 4 Scout; Meta's model card,
#: April 2025), well inside the store's INTEGER columns (2**31 - 1).
MAX_TOKENS = 100_000_000
#: A request's index in its run: the store's INTEGER column.
MAX_INDEX = 2**31 - 1
#: Times on a run's clock (seconds from its start; an import's may precede it): 115 days each
#: way, longer than any run or trace replay, and finite.
MAX_RUN_S = 1.0e7
#: A request may start this much before the time it was due (asyncio wakes a sleeper up to its
#: clock resolution early, ~1 ms on Linux); more is a negative queue time.
QUEUE_TOLERANCE_S = 0.01
#: A request id or error text.
MAX_TEXT_CHARS = 100_000
#: A run's ``requests.jsonl`` or ``server_metrics.jsonl``: 2 GB (a 24-hour trace replay of
#: 100,000 requests of 2,000 chunks each writes about 1.8 GB). Bigger is refused unread.
MAX_LINES_FILE_BYTES = 2_000_000_000
#: A run's ``run.json`` or ``result.json`` (read whole as JSON).
MAX_JSON_FILE_BYTES = 256_000_000
#: One line of a JSON-lines file (read whole as JSON).
MAX_LINE_BYTES = 64_000_000
#: Read chunk of the streaming readers.
READ_CHUNK_BYTES = 1 << 20

RunSeconds = Annotated[float, Field(ge=-MAX_RUN_S, le=MAX_RUN_S)]
TokenCount = Annotated[int, Field(ge=0, le=MAX_TOKENS)]


# ----- safe files ---------------------------------------------------------------------------
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # POSIX; elsewhere no FIFO blocks an open


def open_regular(path: Path, max_bytes: int, what: str = "") -> BinaryIO:
    """``path`` opened for reading when it is a regular file (a symlink to one is followed) of
    at most ``max_bytes``; else :class:`~planner.errors.RunFilesError` saying what it is.

    Opened without blocking (a FIFO would block ``open`` until a writer came) and checked on
    the open descriptor, so what is read is what was checked: a symlink to ``/dev/zero`` or a
    FIFO is refused at once, never read.
    """
    name = what or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise RunFilesError(f"{name}: cannot be opened ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = _file_kind(info.st_mode)
            raise RunFilesError(f"{name}: is {kind}, not a regular file; not read")
        if info.st_size > max_bytes:
            raise RunFilesError(
                f"{name}: {info.st_size:,} bytes, more than the {max_bytes:,} allowed; not read"
            )
        if _NONBLOCK:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def read_bounded(handle: BinaryIO, max_bytes: int, name: str) -> bytes:
    """All of ``handle`` when it holds at most ``max_bytes`` (a file may grow after its size
    was checked); else RunFilesError."""
    data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise RunFilesError(f"{name}: more than the {max_bytes:,} bytes allowed; not read")
    return data


def read_regular_bytes(path: Path, max_bytes: int, what: str = "") -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (see :func:`open_regular`)."""
    with open_regular(path, max_bytes, what) as handle:
        return read_bounded(handle, max_bytes, what or str(path))


def loads_json(data: bytes | str, name: str, *, finite_only: bool = False) -> Any:
    """JSON of ``data``; a value nested too deeply for the parser is a ValueError too (the
    standard library raises RecursionError), so every caller's one-line error covers it.
    ``finite_only``: ``NaN`` and ``Infinity`` (which JSON does not have, and this project's
    writers never write) are refused too."""
    try:
        if finite_only:
            return json.loads(data, parse_constant=_not_finite)
        return json.loads(data)
    except RecursionError:
        raise ValueError(f"{name}: nested too deeply to read") from None


def _not_finite(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number (a count, time or rate must be finite)")


# ----- records --------------------------------------------------------------------------------
class RequestRecord(BaseModel):
    """One finished request (success or failure), as ``requests.jsonl`` holds it.

    Times are seconds on the run's monotonic clock, relative to its start:

    - ``scheduled_s``: when the request was due (its arrival time, or when a closed-loop slot
      took it); ``start_s - scheduled_s`` is client-side queueing behind a concurrency cap;
    - ``start_s``: just before the POST;
    - ``first_chunk_s``: the first streamed chunk that carries output (content, reasoning or a
      tool call; an opening chunk with only the role is not output): vLLM's first token;
    - ``first_content_s``: the first chunk with ``content`` (reasoning models think first: the
      time to first content token is what a user waits for);
    - ``end_s``: the last output chunk of a success (vLLM's end of E2E), the moment the failure
      was seen for a failure;
    - ``chunk_times_s``: every output chunk, in order (vLLM's ITL is the gaps between them);
      ``None`` when the tool that measured the request kept no per-chunk times.

    ``chunk_tokens`` are the tokens of each chunk (from per-chunk usage when the server sends it,
    else 1 per chunk), ``None`` when not recorded. ``output_tokens`` is the server's
    ``usage.completion_tokens`` (``None`` if none). A request cancelled in flight (SIGINT,
    error-rate abort) is an error ``"cancelled before completion"``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    request_id: str = Field(max_length=MAX_TEXT_CHARS)
    request_index: int = Field(ge=0, le=MAX_INDEX)
    warmup: bool = False
    scheduled_s: float | None = Field(default=None, ge=-MAX_RUN_S, le=MAX_RUN_S)
    start_s: float = Field(ge=-MAX_RUN_S, le=MAX_RUN_S)
    first_chunk_s: float | None = Field(default=None, ge=-MAX_RUN_S, le=MAX_RUN_S)
    first_content_s: float | None = Field(default=None, ge=-MAX_RUN_S, le=MAX_RUN_S)
    end_s: float | None = Field(default=None, ge=-MAX_RUN_S, le=MAX_RUN_S)
    chunk_times_s: list[RunSeconds] | None = Field(default=None, max_length=MAX_TOKENS)
    chunk_tokens: list[TokenCount] | None = Field(default=None, max_length=MAX_TOKENS)
    prompt_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    output_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    input_len_target: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    output_len_target: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    status: Literal["ok", "error"]
    http_status: int | None = Field(default=None, ge=100, le=599)
    error: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)

    @model_validator(mode="after")
    def _consistent(self) -> RequestRecord:
        if self.status == "ok" and self.first_chunk_s is None:
            raise ValueError("first_chunk_s=None: a successful request has a first output chunk")
        for name in ("first_chunk_s", "first_content_s", "end_s"):
            value = getattr(self, name)
            if value is not None and value < self.start_s:
                raise ValueError(f"{name}={value}: before start_s={self.start_s}")
        end = self.end_s
        for name in ("first_chunk_s", "first_content_s"):
            value = getattr(self, name)
            if value is not None and end is not None and value > end:
                raise ValueError(f"{name}={value}: after end_s={end} (the request's end)")
        scheduled = self.scheduled_s
        if scheduled is not None and scheduled > self.start_s + QUEUE_TOLERANCE_S:
            raise ValueError(
                f"scheduled_s={scheduled}: after start_s={self.start_s} (a negative queue time)"
            )
        return self

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class MetricSample(BaseModel):
    """One scraped Prometheus sample (``server_metrics.jsonl``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=True)

    # a sample's time is finite (its value may be +Inf or NaN, as Prometheus writes them)
    t_s: float = Field(ge=-MAX_RUN_S, le=MAX_RUN_S)
    name: str = Field(max_length=MAX_TEXT_CHARS)
    labels: dict[str, str] = Field(default_factory=dict)
    value: float


#: A disaggregated endpoint labels each pool's samples ``pool="prefill"|"decode"`` (the
#: simulated router does; a Prometheus job label does the same for a real one). Both pools see
#: every request: its prompt is counted where it is prefilled and its answer where it is
#: decoded, so these counters sum over that pool only; everything else over both.
POOL_COUNTED: dict[str, str] = {
    "vllm:prompt_tokens_total": "prefill",
    "vllm:prefix_cache_queries_total": "prefill",
    "vllm:prefix_cache_hits_total": "prefill",
    "vllm:gpu_prefix_cache_queries_total": "prefill",
    "vllm:gpu_prefix_cache_hits_total": "prefill",
    "vllm:generation_tokens_total": "decode",
    "vllm:request_success_total": "decode",
}


Record = TypeVar("Record", RequestRecord, MetricSample)


@dataclass(frozen=True)
class FileProblem:
    """Why a line (or a whole file) of a run was not used."""

    file: str
    line: int | None
    field: str | None
    value: Any
    reason: str
    kind: Literal["torn", "invalid", "unreadable"] = "invalid"

    def __str__(self) -> str:
        where = self.file + (f" line {self.line}" if self.line is not None else "")
        what = f"{self.field}={self.value!r}: " if self.field is not None else ""
        return f"{where}: {what}{self.reason}"


# ----- reading --------------------------------------------------------------------------------
def _problem(path: Path, line: int, exc: ValidationError) -> FileProblem:
    first = exc.errors()[0]
    field_name = ".".join(str(p) for p in first["loc"]) or None
    reason = first["msg"].removeprefix("Value error, ")
    value = first.get("input") if field_name is not None else None
    if isinstance(value, dict | list):
        value = "{...}" if isinstance(value, dict) else "[...]"
    return FileProblem(path.name, line, field_name, value, reason)


def read_json_lines(path: Path, record: type[Record]) -> tuple[list[Record], list[FileProblem]]:
    """Every line of ``path`` that is a valid ``record``, and what was wrong with the others.

    JSON types are taken strictly (``"start_s": "1.5"`` is not a number). A missing file is an
    empty one; one that is not a regular file, or larger than ``MAX_LINES_FILE_BYTES``, is one
    ``unreadable`` problem. Read line by line: memory holds the records, never the file.
    """
    try:
        handle = open_regular(path, MAX_LINES_FILE_BYTES, path.name)
    except FileNotFoundError:
        return [], []
    except RunFilesError as exc:
        return [], [FileProblem(path.name, None, None, None, _after_name(exc, path), "unreadable")]
    out: list[Record] = []
    problems: list[FileProblem] = []
    read = 0
    try:
        with handle:
            for index, raw in enumerate(_lines(handle)):
                read += len(raw)
                if read > MAX_LINES_FILE_BYTES:
                    reason = (
                        f"more than the {MAX_LINES_FILE_BYTES:,} bytes allowed; the rest not read"
                    )
                    problems.append(
                        FileProblem(path.name, index + 1, None, None, reason, "unreadable")
                    )
                    break
                if not raw.strip():
                    continue
                torn = not raw.endswith(b"\n")
                if len(raw) > MAX_LINE_BYTES:
                    reason = f"a line of more than {MAX_LINE_BYTES:,} bytes; skipped"
                    problems.append(FileProblem(path.name, index + 1, None, None, reason))
                    continue
                try:
                    out.append(record.model_validate_json(raw, strict=True))
                except ValidationError as exc:
                    if torn and exc.errors()[0]["type"] == "json_invalid":
                        problems.append(
                            FileProblem(
                                path.name,
                                index + 1,
                                None,
                                None,
                                "torn last line (the writer stopped mid-line); skipped",
                                "torn",
                            )
                        )
                    else:
                        problems.append(_problem(path, index + 1, exc))
    except OSError as exc:
        problems.append(FileProblem(path.name, None, None, None, str(exc), "unreadable"))
    return out, problems


def _after_name(exc: RunFilesError, path: Path) -> str:
    return str(exc).removeprefix(f"{path.name}: ")


def _lines(handle: BinaryIO) -> Iterator[bytes]:
    """The lines of ``handle`` with their newline (the last one without, when it has none);
    a line longer than ``MAX_LINE_BYTES`` comes cut at that length, its rest skipped."""
    while True:
        line = handle.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while True:  # skip the rest of the overlong line without holding it
                rest = handle.readline(READ_CHUNK_BYTES)
                if not rest or rest.endswith(b"\n"):
                    break
        yield line


@dataclass
class RunFiles:
    """A run directory as read back: its metadata, records and what could not be used."""

    run_id: str
    path: Path
    meta: dict[str, Any]
    requests: list[RequestRecord] = field(default_factory=list)
    server_metrics: list[MetricSample] = field(default_factory=list)
    result: dict[str, Any] | None = None
    problems: list[FileProblem] = field(default_factory=list)

    @property
    def measured(self) -> list[RequestRecord]:
        """The requests of the measured phase (warm-up left out)."""
        return [r for r in self.requests if not r.warmup]


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        obj = loads_json(
            read_regular_bytes(path, MAX_JSON_FILE_BYTES),
            str(path),
            finite_only=path.name == RUN_JSON,
        )
    except FileNotFoundError:
        raise RunFilesError(f"{path.parent} is not a run directory: no {path.name}") from None
    except (OSError, ValueError) as exc:
        raise RunFilesError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise RunFilesError(f"{path}: must hold a JSON object, not {type(obj).__name__}")
    return obj


def read_run_dir(run_dir: Path) -> RunFiles:
    """Load one run directory. Raises :class:`~planner.errors.RunFilesError` when its run.json
    is missing or unreadable (nothing says what the run was); bad lines of the JSON-lines files
    are skipped and listed in ``problems``."""
    run_dir = Path(run_dir)
    meta = _read_json_object(run_dir / RUN_JSON)
    problems: list[FileProblem] = []
    status = meta.get("status")
    if status not in RUN_STATUSES:
        problems.append(
            FileProblem(RUN_JSON, None, "status", status, f"one of {', '.join(RUN_STATUSES)}")
        )
    requests, bad_requests = read_json_lines(run_dir / REQUESTS_JSONL, RequestRecord)
    samples, bad_samples = read_json_lines(run_dir / SERVER_METRICS_JSONL, MetricSample)
    result = None
    if (run_dir / RESULT_JSON).exists():
        try:
            result = _read_json_object(run_dir / RESULT_JSON)
        except RunFilesError as exc:
            problems.append(FileProblem(RESULT_JSON, None, None, None, str(exc), "unreadable"))
    return RunFiles(
        run_id=str(meta.get("run_id") or run_dir.name),
        path=run_dir,
        meta=meta,
        requests=requests,
        server_metrics=samples,
        result=result,
        problems=problems + bad_requests + bad_samples,
    )


def list_runs(runs_dir: Path) -> list[Path]:
    """Run directories under ``runs_dir`` (those holding a run.json), oldest first."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        return []
    return sorted(p for p in runs_dir.iterdir() if (p / RUN_JSON).is_file())


def run_signature(run_dir: Path) -> str | None:
    """Sizes and modification times of the run's files: changes whenever the run grows."""
    if not (run_dir / RUN_JSON).exists():
        return None
    parts = []
    for name in (RUN_JSON, REQUESTS_JSONL, SERVER_METRICS_JSONL):
        path = run_dir / name
        if path.exists():
            stat = path.stat()
            parts.append(f"{name}:{stat.st_size}:{stat.st_mtime_ns}")
    return "|".join(parts)


# ----- writing --------------------------------------------------------------------------------
def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_run_id(now: datetime | None = None) -> str:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(3)}"


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def finite(obj: Any) -> Any:
    """``obj`` with NaN and infinities (not valid JSON) replaced by None, recursively."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to ``path`` via a temporary file and ``os.replace`` (readers never see half)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        json.dump(finite(obj), fh, indent=1, allow_nan=False, default=_json_default)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class _JsonlAppender:
    """Append-only JSONL file: each line written and flushed at once; ``fsync`` runs in the
    writer's background thread at least every ``FSYNC_INTERVAL_S`` (never on the event loop,
    where a slow disk would delay chunk timestamps)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO[str] = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self._dirty = False

    def append_many(self, records: Iterable[BaseModel]) -> None:
        text = "".join(r.model_dump_json() + "\n" for r in records)
        if not text:
            return
        with self._lock:
            self._fh.write(text)
            self._fh.flush()
            self._dirty = True

    def sync(self) -> None:
        with self._lock:
            if self._fh.closed or not self._dirty:
                return
            self._dirty = False
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.flush()
                os.fsync(self._fh.fileno())
                self._fh.close()


class _Syncer(threading.Thread):
    """Background thread that fsyncs the run's JSONL files every ``FSYNC_INTERVAL_S`` and
    touches the heartbeat file every ``HEARTBEAT_INTERVAL_S``."""

    def __init__(self, files: list[_JsonlAppender], heartbeat: Path) -> None:
        super().__init__(name="servewise-run-fsync", daemon=True)
        self.files = files
        self.heartbeat = heartbeat
        self.stopped = threading.Event()

    def beat(self) -> None:
        with contextlib.suppress(OSError):
            self.heartbeat.touch()

    def run(self) -> None:
        last_beat = time.monotonic()
        while not self.stopped.wait(FSYNC_INTERVAL_S):
            for f in self.files:
                with contextlib.suppress(OSError, ValueError):  # closed under us
                    f.sync()
            if time.monotonic() - last_beat >= HEARTBEAT_INTERVAL_S:
                self.beat()
                last_beat = time.monotonic()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists, owned by someone else
    return True


def writer_stopped(run_dir: Path, meta: dict[str, Any], now: float | None = None) -> str | None:
    """Why a run whose ``run.json`` says ``running`` is no longer being written, or None while
    it may still be: its writer's process is gone (same host), or no sign of life (heartbeat,
    else the newest run file) for ``STALE_AFTER_S`` (any host)."""
    if meta.get("status") != "running":
        return None
    now = time.time() if now is None else now
    writer: dict[str, Any] = meta["writer"] if isinstance(meta.get("writer"), dict) else {}
    pid, host = writer.get("pid"), writer.get("host")
    if isinstance(pid, int) and host == socket.gethostname() and not _pid_alive(pid):
        return f"the process writing it (pid {pid} on {host}) is gone"
    times = []
    for name in (HEARTBEAT, RUN_JSON, REQUESTS_JSONL, SERVER_METRICS_JSONL):
        with contextlib.suppress(OSError):
            times.append((run_dir / name).stat().st_mtime)
        if name == HEARTBEAT and times:
            break  # a writer with a heartbeat: only the heartbeat counts
    if times and now - max(times) > STALE_AFTER_S:
        return f"no sign of its writer for {now - max(times):,.0f} s"
    return None


class RunWriter:
    """Creates a run directory and writes its files as the contract above says."""

    def __init__(self, runs_dir: Path, run_id: str | None = None) -> None:
        self.scrubber = Scrubber()
        self.run_id = run_id or new_run_id()
        self.dir = Path(runs_dir) / self.run_id
        self.dir.mkdir(parents=True, exist_ok=False)
        self._requests = _JsonlAppender(self.dir / REQUESTS_JSONL)
        self._metrics = _JsonlAppender(self.dir / SERVER_METRICS_JSONL)
        self._syncer = _Syncer([self._requests, self._metrics], self.dir / HEARTBEAT)
        self._syncer.beat()
        self._syncer.start()
        self.meta: dict[str, Any] = {
            "run_id": self.run_id,
            "status": "running",
            "started_at": utc_now_iso(),
            "finished_at": None,
            "endpoint": {
                "base_url": None,
                "api": None,
                "server_version": None,
                "server_flags": None,
            },
            "model": None,
            "client_host": None,
            "simulated": False,
            "config": {},
            "plan": None,
            "tokenizer": {},
            "summary": None,
            "self_checks": [],
            "error": None,
            "writer": {"host": socket.gethostname(), "pid": os.getpid()},
        }

    def write_meta(self, **updates: Any) -> None:
        self.meta.update(updates)
        self.meta["run_id"] = self.run_id
        if self.meta["status"] not in RUN_STATUSES:
            raise ValueError(f"status={self.meta['status']!r}: allowed {RUN_STATUSES}")
        write_json_atomic(self.dir / RUN_JSON, self.scrubber.value(self.meta))

    def append_requests(self, records: Sequence[RequestRecord]) -> None:
        self._requests.append_many(
            r if r.error is None else r.model_copy(update={"error": self.scrubber.text(r.error)})
            for r in records
        )

    def append_metric_samples(self, samples: Sequence[MetricSample]) -> None:
        self._metrics.append_many(
            s.model_copy(update={"labels": self.scrubber.value(s.labels)}) if s.labels else s
            for s in samples
        )

    def sync(self) -> None:
        self._requests.sync()
        self._metrics.sync()

    def write_result(self, result: dict[str, Any]) -> Path:
        path = self.dir / RESULT_JSON
        write_json_atomic(path, self.scrubber.value(result))
        return path

    def close(self) -> None:
        self._syncer.stopped.set()
        self._syncer.join(timeout=5)
        self._requests.close()
        self._metrics.close()


__all__ = [
    "REQUESTS_JSONL",
    "RESULT_JSON",
    "RUN_JSON",
    "RUN_STATUSES",
    "SERVER_METRICS_JSONL",
    "FileProblem",
    "MetricSample",
    "RequestRecord",
    "RunFiles",
    "RunWriter",
    "list_runs",
    "new_run_id",
    "read_json_lines",
    "read_run_dir",
    "run_signature",
    "utc_now_iso",
    "write_json_atomic",
    "writer_stopped",
]
