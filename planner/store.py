"""The DuckDB store: catalog, measured results, benchmark runs, per-request rows, server metrics.

One database file (default ``<user_data_dir>/servewise.duckdb``, ``SERVEWISE_DB_PATH`` to share
one among a team). DuckDB lets one process write a file, so:

- benchmark runs never write the database: the runner writes a *run directory* of plain files
  (``run.json``, ``requests.jsonl``, ``server_metrics.jsonl``; format in
  :mod:`planner.run_files`), appended as requests finish, and the store ingests run
  directories (again when their content changes) on :meth:`Store.ingest_runs` or, without
  waiting, :meth:`Store.ingest_in_background` (:mod:`planner.ingest`: DuckDB reads the JSON
  lines in bulk; a bad run or line is quarantined with its reason, :meth:`Store.run_problems`).
  A run started from the command line and one started from the dashboard land the same way,
  and a crash of either loses nothing already flushed to the run files;
- a second process that finds the file locked (the dashboard holds it) opens an in-memory
  store built from the same catalog and run files instead (:func:`open_store`), read-mostly.

``SERVEWISE_PARQUET_DIR`` adds a directory of Parquet files of measured results (columns of
:class:`~planner.catalog.MeasuredResult`) shared by a team; :meth:`Store.export_parquet`
writes them.

All access goes through one connection guarded by a lock, each call on its own cursor, so the
store is safe to share across Streamlit's script threads.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import logging
import math
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import duckdb
import pandas as pd
import pyarrow as pa

from planner.catalog import Catalog, MeasuredResult
from planner.errors import StoreError

if TYPE_CHECKING:
    from planner.ingest import IngestJob, IngestProgress

log = logging.getLogger(__name__)

#: Versioned migrations: (version, statements). Applied in order, once each.
MIGRATIONS: list[tuple[int, list[str]]] = [
    (
        1,
        [
            """CREATE TABLE catalog_gpus (
                gpu_id VARCHAR PRIMARY KEY, record JSON NOT NULL, origin VARCHAR NOT NULL)""",
            """CREATE TABLE catalog_instances (
                instance VARCHAR PRIMARY KEY, provider VARCHAR NOT NULL, gpu_id VARCHAR NOT NULL,
                record JSON NOT NULL, origin VARCHAR NOT NULL)""",
            """CREATE TABLE catalog_prices (
                provider VARCHAR, instance VARCHAR, region VARCHAR, pricing VARCHAR,
                usd_per_hour DOUBLE NOT NULL, source VARCHAR, as_of DATE,
                PRIMARY KEY (instance, region, pricing))""",
            """CREATE TABLE catalog_models (
                hf_id VARCHAR PRIMARY KEY, name VARCHAR, config JSON NOT NULL, source VARCHAR,
                as_of DATE, origin VARCHAR NOT NULL)""",
            """CREATE TABLE catalog_meta (key VARCHAR PRIMARY KEY, value VARCHAR)""",
            """CREATE TABLE measured_results (
                result_key VARCHAR PRIMARY KEY,
                source VARCHAR, source_ref VARCHAR, engine VARCHAR, engine_version VARCHAR,
                model VARCHAR, precision VARCHAR, gpu VARCHAR, num_gpus INTEGER, tp INTEGER,
                pp INTEGER, input_len INTEGER, output_len INTEGER, load VARCHAR,
                concurrency DOUBLE, request_rate DOUBLE, num_requests DOUBLE, instance VARCHAR,
                nodes INTEGER, output_tok_per_s DOUBLE, total_tok_per_s DOUBLE, ttft_ms DOUBLE,
                ttft_stat VARCHAR, itl_ms DOUBLE, itl_stat VARCHAR, origin VARCHAR NOT NULL,
                run_id VARCHAR, simulated BOOLEAN NOT NULL DEFAULT FALSE)""",
            """CREATE TABLE benchmark_runs (
                run_id VARCHAR PRIMARY KEY, status VARCHAR, started_at TIMESTAMP,
                finished_at TIMESTAMP, base_url VARCHAR, api VARCHAR, model VARCHAR,
                server_version VARCHAR, simulated BOOLEAN, config JSON, plan JSON,
                tokenizer JSON, summary JSON, self_checks JSON, error VARCHAR,
                run_dir VARCHAR, files_signature VARCHAR, ingested_at TIMESTAMP)""",
            """CREATE TABLE request_results (
                run_id VARCHAR, request_id VARCHAR, request_index INTEGER, warmup BOOLEAN,
                start_s DOUBLE, first_chunk_s DOUBLE, first_content_s DOUBLE, end_s DOUBLE,
                chunk_times_s DOUBLE[], chunk_tokens INTEGER[], prompt_tokens INTEGER,
                output_tokens INTEGER, input_len_target INTEGER, output_len_target INTEGER,
                status VARCHAR, http_status INTEGER, error VARCHAR,
                PRIMARY KEY (run_id, request_id))""",
            """CREATE TABLE server_metric_samples (
                run_id VARCHAR, t_s DOUBLE, name VARCHAR, labels JSON, value DOUBLE)""",
            "CREATE INDEX server_metric_samples_run ON server_metric_samples (run_id)",
        ],
    ),
    (
        2,
        [
            # incremental, quarantining ingestion (planner.ingest)
            "ALTER TABLE request_results ADD COLUMN scheduled_s DOUBLE",
            "ALTER TABLE benchmark_runs ADD COLUMN content_hash VARCHAR",
            "ALTER TABLE benchmark_runs ADD COLUMN requests_total INTEGER",
            "ALTER TABLE benchmark_runs ADD COLUMN requests_ok INTEGER",
            "ALTER TABLE benchmark_runs ADD COLUMN problems INTEGER",
            """CREATE TABLE run_dirs (
                run_dir VARCHAR PRIMARY KEY, run_id VARCHAR, signature VARCHAR,
                content_hash VARCHAR, state VARCHAR NOT NULL, checked_at TIMESTAMP)""",
            """CREATE TABLE run_problems (
                run_dir VARCHAR NOT NULL, run_id VARCHAR, file VARCHAR NOT NULL, line INTEGER,
                field VARCHAR, value VARCHAR, reason VARCHAR NOT NULL, kind VARCHAR NOT NULL,
                found_at TIMESTAMP)""",
            "CREATE INDEX run_problems_dir ON run_problems (run_dir)",
        ],
    ),
    (
        3,
        [
            # expert / attention-data parallelism, the engine knobs a run set, the dataset
            "ALTER TABLE measured_results ADD COLUMN data_parallel_size INTEGER",
            "ALTER TABLE measured_results ADD COLUMN enable_expert_parallel BOOLEAN",
            "ALTER TABLE measured_results ADD COLUMN max_num_seqs INTEGER",
            "ALTER TABLE measured_results ADD COLUMN max_num_batched_tokens INTEGER",
            "ALTER TABLE measured_results ADD COLUMN max_model_len INTEGER",
            "ALTER TABLE measured_results ADD COLUMN gpu_memory_utilization DOUBLE",
            "ALTER TABLE measured_results ADD COLUMN dataset VARCHAR",
            "ALTER TABLE measured_results ADD COLUMN entrypoint VARCHAR",
            "ALTER TABLE measured_results ADD COLUMN notes VARCHAR",
        ],
    ),
    (
        4,
        [
            # speculative decoding of a measured row (planner.perf.speculative)
            "ALTER TABLE measured_results ADD COLUMN spec_method VARCHAR",
            "ALTER TABLE measured_results ADD COLUMN num_spec_tokens INTEGER",
            "ALTER TABLE measured_results ADD COLUMN spec_accept_len DOUBLE",
            "ALTER TABLE measured_results ADD COLUMN spec_baseline_ref VARCHAR",
        ],
    ),
    (
        5,
        [
            # the p99 TTFT and TPOT a source reports beside its mean or median (validation)
            "ALTER TABLE measured_results ADD COLUMN ttft_p99_ms DOUBLE",
            "ALTER TABLE measured_results ADD COLUMN tpot_p99_ms DOUBLE",
        ],
    ),
    (
        6,
        [
            # the KV cache dtype a run set (an FP8 cache holds twice the tokens)
            "ALTER TABLE measured_results ADD COLUMN kv_cache_dtype VARCHAR",
        ],
    ),
    (
        7,
        [
            # a random-dataset run's length spread (vLLM bench's --random-range-ratio)
            "ALTER TABLE measured_results ADD COLUMN random_range_ratio DOUBLE",
        ],
    ),
    (
        8,
        [
            # prompts a run repeated from an earlier run on the same server (a warm prefix cache)
            "ALTER TABLE measured_results ADD COLUMN warm_prompts INTEGER",
            "ALTER TABLE measured_results ADD COLUMN warm_prompt_tokens INTEGER",
        ],
    ),
    (
        9,
        [
            # a run without CUDA graphs (stated, or its release's default)
            "ALTER TABLE measured_results ADD COLUMN enforce_eager BOOLEAN",
        ],
    ),
    (
        10,
        [
            # a server setting the planner does not model (the row is scored, never fitted)
            "ALTER TABLE measured_results ADD COLUMN unmodelled_setting VARCHAR",
        ],
    ),
]

MEASURED_COLUMNS = list(MeasuredResult.model_fields)


def _result_key(result: MeasuredResult) -> str:
    payload = json.dumps(result.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def _insert_rows(
    cur: duckdb.DuckDBPyConnection,
    table: str,
    columns: Sequence[str],
    rows: list[list[Any]],
    *,
    replace: bool = False,
) -> None:
    """Insert (``replace``: or replace) ``rows`` (values in ``columns``' order) in one
    statement over an Arrow table: DuckDB's ``executemany`` runs a statement per row (a fresh
    store's catalog took 0.3 s)."""
    if not rows:
        return
    frame = pa.table({c: pa.array([row[i] for row in rows]) for i, c in enumerate(columns)})
    cur.register("new_rows", frame)
    try:
        names = ", ".join(columns)
        verb = "INSERT OR REPLACE" if replace else "INSERT"
        cur.execute(f"{verb} INTO {table} ({names}) SELECT {names} FROM new_rows")
    finally:
        cur.unregister("new_rows")


def _clean(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


_DATABASE_LOCKS: dict[str, threading.RLock] = {}
_DATABASE_LOCKS_GUARD = threading.Lock()


#: DuckDB's memory limit while a pass ingests into a database file: its bulk read of a large
#: ``requests.jsonl`` then spills the staged rows to the database's temporary directory instead
#: of growing with the file (one run of 179 MB: 785 MB peak RSS unbounded, 606 MB with this; the
#: JSON reader alone needs ~120-240 MB of buffers, so a lower limit stops it;
#: benchmarks/ingest_memory_bench.py, 2026-12-02)
INGEST_MEMORY_LIMIT = "384MB"

#: ingestion passes under way per database file (the limit is the database's, not a cursor's)
_INGESTING: dict[str, int] = {}
_INGESTING_GUARD = threading.Lock()


def _database_lock(path: Path | None) -> threading.RLock:
    """The write lock of a database file, shared by every :class:`Store` of it in this process
    (an in-memory store has one of its own)."""
    if path is None:
        return threading.RLock()
    key = str(path.resolve())
    with _DATABASE_LOCKS_GUARD:
        return _DATABASE_LOCKS.setdefault(key, threading.RLock())


class Store:
    """A DuckDB database of the catalog, measured results and benchmark runs."""

    def __init__(self, path: Path | str | None, *, parquet_dir: Path | None = None) -> None:
        self.path = Path(path) if path not in (None, ":memory:") else None
        self.parquet_dir = parquet_dir
        self._lock = threading.RLock()
        self._ingest_job: IngestJob | None = None
        try:
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._con = duckdb.connect(str(self.path))
            else:
                self._con = duckdb.connect(":memory:")
        except duckdb.IOException as exc:
            raise StoreError(f"cannot open the database {self.path}: {exc}") from exc
        # One DuckDB thread: the store's queries are small, and ingestion (the one large read)
        # is as fast on one thread as on two here (200 runs, 67 MB: 2.07 s on one, 2.05 s on
        # two, with 2.0 against 2.9 CPU seconds), while a second thread would take the other
        # core from the page being drawn meanwhile.
        self._con.execute("SET threads = 1")
        self.migrate()

    # ----- plumbing ----------------------------------------------------------------------------
    @contextmanager
    def _cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self._lock:
            cursor = self._con.cursor()
            try:
                yield cursor
            finally:
                cursor.close()

    def close(self) -> None:
        with self._lock:
            self._con.close()

    def query(self, sql: str, params: list[Any] | None = None) -> pd.DataFrame:
        """Run a read query and return a DataFrame."""
        with self._cursor() as cur:
            return cur.execute(sql, params or []).df()

    def migrate(self) -> list[int]:
        """Apply the migrations not applied yet; running it twice changes nothing."""
        applied_now = []
        with self._cursor() as cur:
            cur.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, applied_at TIMESTAMP)"
            )
            done = {
                row[0] for row in cur.execute("SELECT version FROM schema_migrations").fetchall()
            }
            for version, statements in MIGRATIONS:
                if version in done:
                    continue
                cur.execute("BEGIN TRANSACTION")
                try:
                    for statement in statements:
                        cur.execute(statement)
                    cur.execute(
                        "INSERT INTO schema_migrations VALUES (?, ?)",
                        [version, datetime.now(UTC).replace(tzinfo=None)],
                    )
                    cur.execute("COMMIT")
                except Exception:
                    cur.execute("ROLLBACK")
                    raise
                applied_now.append(version)
        return applied_now

    def schema_version(self) -> int:
        with self._cursor() as cur:
            row = cur.execute("SELECT max(version) FROM schema_migrations").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    # ----- catalog -----------------------------------------------------------------------------
    @staticmethod
    def catalog_signature(catalog: Catalog) -> str:
        digest = hashlib.sha256()
        for gpu in sorted(catalog.gpus.values(), key=lambda g: g.gpu_id):
            digest.update(gpu.model_dump_json().encode())
        for inst in sorted(catalog.instances.values(), key=lambda i: i.instance):
            digest.update(inst.model_dump_json().encode())
        for price in sorted(catalog.prices, key=lambda p: (p.instance, p.region, p.pricing)):
            digest.update(price.model_dump_json().encode())
        for card in sorted(catalog.models.values(), key=lambda c: c.hf_id):
            digest.update(json.dumps(card.config, sort_keys=True).encode())
            digest.update(card.origin.encode())
        for result in catalog.measured:
            digest.update(result.model_dump_json().encode())
        return digest.hexdigest()

    def sync_catalog(self, catalog: Catalog) -> bool:
        """Load the catalog into the database when it changed; returns whether it did."""
        signature = self.catalog_signature(catalog)
        with self._cursor() as cur:
            row = cur.execute("SELECT value FROM catalog_meta WHERE key = 'signature'").fetchone()
            if row and row[0] == signature:
                return False
            cur.execute("BEGIN TRANSACTION")
            try:
                for table in (
                    "catalog_gpus",
                    "catalog_instances",
                    "catalog_prices",
                    "catalog_models",
                ):
                    cur.execute(f"DELETE FROM {table}")
                cur.execute("DELETE FROM measured_results WHERE origin = 'public'")
                _insert_rows(
                    cur,
                    "catalog_gpus",
                    ["gpu_id", "record", "origin"],
                    [[g.gpu_id, g.model_dump_json(), "embedded"] for g in catalog.gpus.values()],
                )
                _insert_rows(
                    cur,
                    "catalog_instances",
                    ["instance", "provider", "gpu_id", "record", "origin"],
                    [
                        [i.instance, i.provider, i.gpu_id, i.model_dump_json(), "embedded"]
                        for i in catalog.instances.values()
                    ],
                )
                _insert_rows(
                    cur,
                    "catalog_prices",
                    [
                        "provider",
                        "instance",
                        "region",
                        "pricing",
                        "usd_per_hour",
                        "source",
                        "as_of",
                    ],
                    [
                        [
                            p.provider,
                            p.instance,
                            p.region,
                            p.pricing,
                            p.usd_per_hour,
                            p.source,
                            p.as_of,
                        ]
                        for p in catalog.prices
                    ],
                )
                _insert_rows(
                    cur,
                    "catalog_models",
                    ["hf_id", "name", "config", "source", "as_of", "origin"],
                    [
                        [c.hf_id, c.name, json.dumps(c.config), c.source, c.as_of, c.origin]
                        for c in catalog.models.values()
                    ],
                )
                self._insert_measured(cur, [m for m in catalog.measured if m.origin == "public"])
                cur.execute(
                    "INSERT OR REPLACE INTO catalog_meta VALUES ('signature', ?)", [signature]
                )
                cur.execute("COMMIT")
            except Exception:
                cur.execute("ROLLBACK")
                raise
        return True

    # ----- measured results --------------------------------------------------------------------
    @staticmethod
    def _insert_measured(cur: duckdb.DuckDBPyConnection, results: Iterable[MeasuredResult]) -> int:
        """Insert (or replace) measured results in one statement."""
        results = list(results)
        rows = [
            [_result_key(result), *(record[c] for c in MEASURED_COLUMNS)]
            for result, record in ((r, r.model_dump()) for r in results)
        ]
        _insert_rows(cur, "measured_results", ["result_key", *MEASURED_COLUMNS], rows, replace=True)
        return len(rows)

    def add_measured_results(self, results: Iterable[MeasuredResult]) -> int:
        with self._cursor() as cur:
            return self._insert_measured(cur, results)

    def measured_results(self, *, include_user: bool = True) -> list[MeasuredResult]:
        """Every measured result: public rows, the user's runs, and the team's Parquet files."""
        where = "" if include_user else "WHERE origin = 'public'"
        columns = ", ".join(MEASURED_COLUMNS)
        frame = self.query(f"SELECT {columns} FROM measured_results {where} ORDER BY result_key")
        if self.parquet_dir is not None and include_user:
            extra = self._parquet_results()
            if not extra.empty:
                frame = pd.concat([frame, extra[[c for c in MEASURED_COLUMNS if c in extra]]])
        results = []
        for record in frame.to_dict(orient="records"):
            clean = {k: _clean(v) for k, v in record.items() if _clean(v) is not None}
            results.append(MeasuredResult.model_validate(clean))
        return results

    def _parquet_results(self) -> pd.DataFrame:
        assert self.parquet_dir is not None
        files = sorted(self.parquet_dir.glob("*.parquet"))
        if not files:
            return pd.DataFrame()
        pattern = str(self.parquet_dir / "*.parquet")
        frame = self.query("SELECT * FROM read_parquet(?, union_by_name = true)", [pattern])
        if "origin" not in frame:
            frame["origin"] = "user"
        return frame

    def export_parquet(self, directory: Path) -> Path:
        """Write the user's measured results to ``directory/measured_results.parquet``."""
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / "measured_results.parquet"
        with self._cursor() as cur:
            cur.execute(
                f"COPY (SELECT {', '.join(MEASURED_COLUMNS)} FROM measured_results "
                f"WHERE origin = 'user') TO '{target.as_posix()}' (FORMAT parquet)"
            )
        return target

    # ----- benchmark runs ----------------------------------------------------------------------
    def ingest_runs(self, runs_dir: Path) -> list[str]:
        """Ingest every run directory under ``runs_dir`` that is new or changed since last time
        (see :mod:`planner.ingest`), waiting for it; returns the ids of the runs (re)ingested.

        A bad run directory or line never aborts the others: it is quarantined with its file,
        line, field and reason (:meth:`run_problems`). Use :meth:`ingest_in_background` where a
        caller must not wait.
        """
        from planner.ingest import ingest

        return ingest(self, Path(runs_dir)).ingested

    def ingest_in_background(self, runs_dir: Path) -> IngestProgress:
        """Start (or join) a background ingestion pass of ``runs_dir``; its live progress."""
        return self.ingest_job.start(Path(runs_dir))

    @property
    def ingest_job(self) -> IngestJob:
        from planner.ingest import IngestJob

        with self._lock:
            if self._ingest_job is None:
                self._ingest_job = IngestJob(self)
            return self._ingest_job

    def run_dir_states(self) -> dict[str, tuple[str | None, str | None]]:
        """Run directory -> (files signature, content hash) as last ingested or quarantined."""
        frame = self.query("SELECT run_dir, signature, content_hash FROM run_dirs")
        return {str(row[0]): (row[1], row[2]) for row in frame.itertuples(index=False, name=None)}

    def run_problems(self) -> pd.DataFrame:
        """What ingestion left out: run directory, run id, file, line, field, value, reason."""
        frame = self.query(
            "SELECT run_dir, run_id, file, line, field, value, reason, kind, found_at "
            "FROM run_problems ORDER BY run_dir, file, line NULLS FIRST"
        )
        return frame.astype(object).where(frame.notna(), None)

    @contextmanager
    def bulk_cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor of its own for bulk reading (temporary tables, ``read_json``), used without
        the store's lock; writes through it take :meth:`write_lock`."""
        with self._lock:
            cursor = self._con.cursor()
        try:
            yield cursor
        finally:
            cursor.close()

    @contextmanager
    def ingest_memory(self) -> Iterator[None]:
        """DuckDB's memory bounded at :data:`INGEST_MEMORY_LIMIT` while ingestion reads in bulk
        (set by the first pass of a database file, reset to DuckDB's default by the last). An
        in-memory store holds its rows in memory whatever the limit: it is left as it is."""
        if self.path is None:
            yield
            return
        key = str(self.path.resolve())
        with _INGESTING_GUARD:
            if not _INGESTING.get(key):
                with self._cursor() as cur:
                    cur.execute(f"SET memory_limit = '{INGEST_MEMORY_LIMIT}'")
            _INGESTING[key] = _INGESTING.get(key, 0) + 1
        try:
            yield
        finally:
            with _INGESTING_GUARD:
                _INGESTING[key] -= 1
                if not _INGESTING[key]:
                    del _INGESTING[key]
                    with contextlib.suppress(duckdb.Error), self._cursor() as cur:
                        cur.execute("RESET memory_limit")

    @contextmanager
    def write_lock(self) -> Iterator[None]:
        """Held while writing through a bulk cursor: every store of one database file in this
        process takes the same lock (they share DuckDB's database), so two ingestion passes
        never write the same runs at once (a second pass then sees the first one's rows)."""
        with _database_lock(self.path), self._lock:
            yield

    def runs(self) -> pd.DataFrame:
        return self.query("SELECT * FROM benchmark_runs ORDER BY started_at DESC NULLS LAST")

    def run_requests(self, run_id: str) -> pd.DataFrame:
        return self.query(
            "SELECT * FROM request_results WHERE run_id = ? ORDER BY start_s", [run_id]
        )

    def run_server_samples(self, run_id: str) -> pd.DataFrame:
        return self.query(
            "SELECT * FROM server_metric_samples WHERE run_id = ? ORDER BY t_s", [run_id]
        )


def _open_file_store(path: Path, parquet_dir: Path | None) -> Store:
    """A store of the database file ``path``. A lock this process holds itself through a
    store nobody closed (a connection the garbage collector has not freed yet) is released by
    a collection and the file opened again, rather than falling back to an in-memory copy
    that would ingest every run again."""
    try:
        return Store(path, parquet_dir=parquet_dir)
    except StoreError as exc:
        if "lock" not in str(exc).lower() or f"PID {os.getpid()})" not in str(exc):
            raise
    gc.collect()
    return Store(path, parquet_dir=parquet_dir)


def open_store(
    path: Path | None = None,
    *,
    catalog: Catalog | None = None,
    runs_dir: Path | None = None,
    parquet_dir: Path | None = None,
    ingest: Literal["wait", "background", "no"] = "wait",
) -> Store:
    """Open the store from settings, sync the catalog and ingest new runs (``ingest``: wait
    for it, start it in the background, or leave it to the caller).

    When another process holds the database file, fall back to an in-memory store built from
    the same catalog and run files, so a command-line tool still sees everything.
    """
    from planner.catalog import load_catalog
    from planner.settings import get_settings

    settings = get_settings()
    path = path or settings.database_file
    runs_dir = runs_dir or settings.runs_directory
    parquet_dir = parquet_dir or settings.parquet_dir
    catalog = catalog or load_catalog(user_dir=settings.user_data_dir / "catalog")
    try:
        store = _open_file_store(path, parquet_dir)
    except StoreError as exc:
        if "lock" not in str(exc).lower():
            raise
        store = Store(None, parquet_dir=parquet_dir)
    store.sync_catalog(catalog)
    if ingest == "wait":
        store.ingest_runs(runs_dir)
    elif ingest == "background":
        store.ingest_in_background(runs_dir)
    return store
