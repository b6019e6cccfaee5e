"""Run files: the storage contract between the runner (and importers) and the store.

Only one process may write a DuckDB file, so runs are written as plain files that the store
ingests. A run is a directory ``<runs_dir>/<run_id>/`` where ``run_id`` is a UTC timestamp and
a short random suffix, e.g. ``20261129T235959Z-a1b2c3``. It holds:

``run.json``
    Metadata, rewritten atomically (write ``run.json.tmp`` then ``os.replace``) at start and
    at end::

        {"run_id", "status": "running"|"completed"|"cancelled"|"failed",
         "started_at" (ISO 8601 UTC), "finished_at" (ISO UTC or null),
         "endpoint": {"base_url", "api": "completions"|"chat", "server_version",
                      "server_flags"},
         "model", "client_host",
         "simulated": bool  (true when /v1/models entries are owned_by "servewise-simulated"
                             or responses carry the header x-servewise-simulated),
         "config": {load pattern, concurrency, request_rate, burstiness, num_requests, warmup,
                    input/output length spec, seed, ...},
         "plan": the JSON object of the plan being verified, or null,
         "tokenizer": {...calibration: tokens_per_word, overhead, probes, deviation...},
         "summary": the vllm-bench-style metrics dict, or null while running,
         "self_checks": [{"name", "ok": bool, "message"}],
         "error": one-line reason or null}

``requests.jsonl``
    One JSON object per finished request (success or failure), appended and flushed as each
    request finishes and ``os.fsync``-ed at least every second, so a crash loses nothing
    already finished::

        {"request_id", "request_index", "warmup": bool,
         "start_s" (monotonic seconds relative to run start), "first_chunk_s",
         "first_content_s", "end_s", "chunk_times_s": [...],
         "chunk_tokens": [...token delta per chunk: from usage deltas when the server reports
                          per-chunk usage, else 1 per non-empty chunk],
         "prompt_tokens" (server usage), "output_tokens" (usage.completion_tokens; null if
         none), "input_len_target", "output_len_target",
         "status": "ok"|"error", "http_status", "error"}

    ``end_s`` is the last ``choices`` chunk of a successful request (vLLM's end of E2E) and
    the moment the failure was seen for a failed one. A request cancelled in flight (SIGINT,
    error-rate abort) is stored as an error ``"cancelled before completion"``.
    Runner addition (the store may ignore it): ``scheduled_s``, when the request was due (its
    arrival time, or when a closed-loop slot took it); ``start_s - scheduled_s`` is the
    client-side queueing behind a concurrency cap plus schedule lag.

``server_metrics.jsonl``
    One line per scraped Prometheus sample: ``{"t_s", "name", "labels": {...}, "value"}``
    with ``t_s`` on the same clock as ``start_s``.

``result.json``
    At the end: the ``vllm bench serve --save-result --save-detailed`` JSON.

The API key and the Authorization header are never written to any of these files.
:func:`read_run` loads a run directory back into plain Python lists and dicts.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from benchmarks_runner.errors import RunFilesError

RUN_JSON = "run.json"
REQUESTS_JSONL = "requests.jsonl"
SERVER_METRICS_JSONL = "server_metrics.jsonl"
RESULT_JSON = "result.json"
RUN_STATUSES = ("running", "completed", "cancelled", "failed")
FSYNC_INTERVAL_S = 1.0


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_run_id(now: datetime | None = None) -> str:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(3)}"


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to ``path`` via a temporary file and ``os.replace`` (readers never see half)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=1, allow_nan=False, default=_json_default)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _finite(obj: Any) -> Any:
    """Replace NaN/inf (not valid JSON) by None, recursively."""
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


class _JsonlAppender:
    """Append-only JSONL file: each line written and flushed at once; ``fsync`` runs in the
    writer's background thread at least every ``FSYNC_INTERVAL_S`` (never on the event loop,
    where a slow disk would delay chunk timestamps)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO[str] = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self._dirty = False

    def append_many(self, objs: list[dict[str, Any]]) -> None:
        if not objs:
            return
        text = "".join(
            json.dumps(o, separators=(",", ":"), default=_json_default) + "\n" for o in objs
        )
        with self._lock:
            self._fh.write(text)
            self._fh.flush()
            self._dirty = True

    def sync(self) -> None:
        with self._lock:
            if self._fh.closed or not self._dirty:
                return
            self._dirty = False
            fd = self._fh.fileno()
            os.fsync(fd)

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.flush()
                os.fsync(self._fh.fileno())
                self._fh.close()


class _Syncer(threading.Thread):
    """Background thread that fsyncs the run's JSONL files every ``FSYNC_INTERVAL_S``."""

    def __init__(self, files: list[_JsonlAppender]) -> None:
        super().__init__(name="servewise-run-fsync", daemon=True)
        self.files = files
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(FSYNC_INTERVAL_S):
            for f in self.files:
                with contextlib.suppress(OSError, ValueError):  # closed under us
                    f.sync()


@dataclass
class RunWriter:
    """Creates a run directory and writes its files as the contract above says."""

    runs_dir: Path
    run_id: str = field(default_factory=new_run_id)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.dir = Path(self.runs_dir) / self.run_id
        self.dir.mkdir(parents=True, exist_ok=False)
        self._requests = _JsonlAppender(self.dir / REQUESTS_JSONL)
        self._metrics = _JsonlAppender(self.dir / SERVER_METRICS_JSONL)
        self._syncer = _Syncer([self._requests, self._metrics])
        self._syncer.start()
        self.meta = {
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
        } | self.meta
        self.meta["run_id"] = self.run_id

    def write_meta(self, **updates: Any) -> None:
        self.meta.update(updates)
        if self.meta["status"] not in RUN_STATUSES:
            raise ValueError(f"status={self.meta['status']!r}: allowed {RUN_STATUSES}")
        write_json_atomic(self.dir / RUN_JSON, _finite(self.meta))

    def append_requests(self, rows: list[dict[str, Any]]) -> None:
        self._requests.append_many(rows)

    def append_metric_samples(self, samples: list[dict[str, Any]]) -> None:
        self._metrics.append_many(samples)

    def sync(self) -> None:
        self._requests.sync()
        self._metrics.sync()

    def write_result(self, result: dict[str, Any]) -> Path:
        path = self.dir / RESULT_JSON
        write_json_atomic(path, _finite(result))
        return path

    def close(self) -> None:
        self._syncer.stopped.set()
        self._syncer.join(timeout=5)
        self._requests.close()
        self._metrics.close()


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                break  # a torn last line after a hard crash: keep what precedes it
    return out


def read_run(run_dir: Path) -> dict[str, Any]:
    """Load a run directory: ``{"run": run.json, "requests": [...], "server_metrics": [...],
    "result": result.json or None}``."""
    run_dir = Path(run_dir)
    meta_path = run_dir / RUN_JSON
    if not meta_path.is_file():
        raise RunFilesError(f"{run_dir} is not a run directory: {RUN_JSON} is missing")
    with meta_path.open(encoding="utf-8") as fh:
        meta = json.load(fh)
    result_path = run_dir / RESULT_JSON
    result = None
    if result_path.is_file():
        with result_path.open(encoding="utf-8") as fh:
            result = json.load(fh)
    return {
        "run": meta,
        "requests": _read_jsonl(run_dir / REQUESTS_JSONL),
        "server_metrics": _read_jsonl(run_dir / SERVER_METRICS_JSONL),
        "result": result,
    }


def list_runs(runs_dir: Path) -> list[Path]:
    """Run directories under ``runs_dir`` (those holding a run.json), oldest first."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        return []
    return sorted(p for p in runs_dir.iterdir() if (p / RUN_JSON).is_file())
