"""Ingestion is idempotent under any interleaving of passes over the same runs folder.

Two stores of one database file in one process (the dashboard's background pass and a page, or
``planner store check`` run in-process twice) share DuckDB's database: a pass that scanned
before another one wrote must find that pass's rows and leave them, not ingest them again.
Real DuckDB files and real run directories.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from planner.cli import main
from planner.ingest import IngestProgress, ingest, ingest_pending, scan
from planner.settings import get_settings
from planner.store import Store
from tests.patience import PATIENT_S
from tests.planner.test_ingest import write_completed_run

REQUESTS_PER_RUN = 30


def _counts(store: Store) -> tuple[int, int, int]:
    runs = int(store.query("SELECT count(*) AS n FROM benchmark_runs")["n"][0])
    rows = int(store.query("SELECT count(*) AS n FROM request_results")["n"][0])
    dirs = int(store.query("SELECT count(*) AS n FROM run_dirs")["n"][0])
    return runs, rows, dirs


_RESULTS_LOCK = threading.Lock()


def _pass(
    store: Store, runs: Path, barrier: threading.Barrier, results: list[IngestProgress]
) -> None:
    barrier.wait()
    progress = ingest(store, runs)
    with _RESULTS_LOCK:
        results.append(progress)


def test_a_pass_that_scanned_before_another_wrote_ingests_nothing_again(tmp_path: Path) -> None:
    """The interleaving behind the flaky ``store check`` (scan, scan, write, write), made
    deterministic: the second writer sees the first one's content and counts nothing new."""
    runs = tmp_path / "runs"
    for i in range(3):
        write_completed_run(runs, f"20261201T10000{i}Z-race0{i}", REQUESTS_PER_RUN)
    db = tmp_path / "store.duckdb"
    first, second = Store(db), Store(db)
    try:
        progress_first, progress_second = IngestProgress(), IngestProgress()
        pending_first = scan(first, runs, progress_first)
        pending_second = scan(second, runs, progress_second)
        assert len(pending_first) == len(pending_second) == 3  # both found the same work
        ingest_pending(first, runs, pending_first, progress_first)
        ingest_pending(second, runs, pending_second, progress_second)
        assert progress_first.error is None and progress_second.error is None
        assert len(progress_first.ingested) == 3 and progress_second.ingested == []
        assert _counts(second) == (3, 3 * REQUESTS_PER_RUN, 3)
        # and the next pass of either finds nothing to do
        assert ingest(first, runs).ingested == [] and ingest(second, runs).ingested == []
    finally:
        first.close()
        second.close()


def test_racing_passes_store_every_run_and_row_once(tmp_path: Path) -> None:
    """Four threads (two stores of one file, two passes each) start together, three rounds of
    new runs: every run is ingested by exactly one pass, every row stored once, no error."""
    runs = tmp_path / "runs"
    db = tmp_path / "store.duckdb"
    stores = [Store(db), Store(db)]
    try:
        total = 0
        for round_ in range(3):
            for i in range(4):
                write_completed_run(runs, f"20261201T1{round_}000{i}Z-rr{round_}{i:03d}", 20)
            total += 4
            barrier = threading.Barrier(4)
            results: list[IngestProgress] = []
            threads = [
                threading.Thread(target=_pass, args=(s, runs, barrier, results)) for s in stores * 2
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=PATIENT_S)
            assert [p.error for p in results] == [None] * 4
            ingested = [run for p in results for run in p.ingested]
            assert len(ingested) == len(set(ingested)) == 4, ingested  # each run once
            assert _counts(stores[0]) == (total, total * 20, total)
    finally:
        for store in stores:
            store.close()


def test_a_store_check_while_another_process_holds_the_database_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process (a dashboard) holds the file: the check runs on an in-memory copy and
    says so, and the file gets every run once when it is free again."""
    runs = tmp_path / "runs"
    write_completed_run(runs, "20261201T100000Z-held00", REQUESTS_PER_RUN)
    db = tmp_path / "held.duckdb"
    Store(db).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_DATABASE, str(db)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        monkeypatch.setenv("SERVEWISE_DB_PATH", str(db))
        get_settings.cache_clear()
        assert main(["store", "check", "--runs-dir", str(runs)]) == 0
        out = capsys.readouterr().out
        assert "1 runs stored" in out and "checked in memory" in out
    finally:
        holder.kill()
        holder.wait()
    assert main(["store", "check", "--runs-dir", str(runs), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["database"] == str(db) and report["ingested_now"] == 1
    store = Store(db)
    try:
        assert _counts(store) == (1, REQUESTS_PER_RUN, 1)
    finally:
        store.close()


HOLD_DATABASE = """
import sys, time, duckdb
connection = duckdb.connect(sys.argv[1])
print("held", flush=True)
time.sleep(600)
"""
