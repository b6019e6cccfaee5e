"""Ingestion of run directories (planner.ingest): bulk reads that agree line for line with the
one reader, quarantine with named reasons, interrupted runs, incremental by content, background.

Real DuckDB files, real run directories written by ``planner.run_files.RunWriter``, and a real
process killed with SIGKILL for the interrupted run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planner.catalog import Catalog
from planner.ingest import ingest
from planner.run_files import (
    REQUESTS_JSONL,
    RUN_JSON,
    SERVER_METRICS_JSONL,
    MetricSample,
    RequestRecord,
    RunWriter,
    read_json_lines,
    read_run_dir,
)
from planner.runs import run_to_measured_result
from planner.store import Store

ROOT = Path(__file__).resolve().parents[2]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _record(i: int, run: str = "r") -> RequestRecord:
    start = 0.1 * i
    chunks = [start + 0.2 + 0.02 * k for k in range(8)]
    return RequestRecord(
        request_id=f"{run}-{i}",
        request_index=i,
        warmup=i == 0,
        scheduled_s=start,
        start_s=start,
        first_chunk_s=chunks[0],
        first_content_s=chunks[0],
        end_s=chunks[-1],
        chunk_times_s=chunks,
        chunk_tokens=[1] * 8,
        prompt_tokens=256,
        output_tokens=8,
        input_len_target=256,
        output_len_target=8,
        status="ok" if i != 7 else "error",
        http_status=200 if i != 7 else 503,
        error=None if i != 7 else "HTTP 503",
    )


def write_completed_run(runs_dir: Path, run_id: str, requests: int = 30) -> Path:
    writer = RunWriter(runs_dir, run_id=run_id)
    writer.append_requests([_record(i, run_id) for i in range(requests)])
    writer.append_metric_samples(
        [
            MetricSample(t_s=0.5 * k, name="vllm:num_requests_running", labels={"m": "x"}, value=k)
            for k in range(5)
        ]
    )
    writer.write_meta(
        status="completed",
        model=MODEL,
        simulated=True,
        endpoint={"base_url": "http://127.0.0.1:9", "api": "completions"},
        config={"concurrency": 4, "num_requests": requests},
        plan={"engine": "vllm", "model": MODEL, "gpu": "L4", "tp": 1, "pp": 1, "num_gpus": 1},
        summary={"output_throughput": 100.0, "median_ttft_ms": 200.0, "median_tpot_ms": 20.0},
    )
    writer.close()
    return writer.dir


def _stored_rows(store: Store, run_id: str) -> list[dict[str, object]]:
    frame = store.run_requests(run_id).drop(columns=["run_id"])
    rows = []
    for record in frame.to_dict(orient="records"):
        clean = {}
        for key, value in record.items():
            if hasattr(value, "tolist"):
                value = value.tolist()
            if isinstance(value, float) and value != value:
                value = None
            clean[key] = value
        rows.append(RequestRecord.model_validate(clean).model_dump())
    return sorted(rows, key=lambda r: str(r["request_id"]))


# ----- bulk and one reader agree ------------------------------------------------------------
def test_bulk_ingestion_stores_what_the_one_reader_reads(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    ids = [f"20261201T1000{i:02d}Z-00000{i}" for i in range(3)]
    for run_id in ids:
        write_completed_run(runs, run_id)
    bulk_store = Store(tmp_path / "bulk.duckdb")
    progress = ingest(bulk_store, runs)
    assert sorted(progress.ingested) == ids
    assert progress.files_bulk == 6 and progress.files_one_reader == 0
    reader_store = Store(tmp_path / "reader.duckdb")
    assert ingest(reader_store, runs, bulk=False).files_one_reader == 6
    for run_id in ids:
        expected = sorted(
            (r.model_dump() for r in read_run_dir(runs / run_id).requests),
            key=lambda r: str(r["request_id"]),
        )
        assert _stored_rows(bulk_store, run_id) == expected == _stored_rows(reader_store, run_id)
        samples = bulk_store.run_server_samples(run_id)
        assert samples.value.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
        assert json.loads(samples.labels[0]) == {"m": "x"}
    # the measured results (calibration points) are those of the one reader's records
    expected_measured = sorted(
        (run_to_measured_result(read_run_dir(runs / run_id)) for run_id in ids),
        key=lambda m: str(m.run_id),  # type: ignore[union-attr]
    )
    for store in (bulk_store, reader_store):
        user = sorted(
            (m for m in store.measured_results() if m.origin == "user"), key=lambda m: str(m.run_id)
        )
        assert user == expected_measured
    runs_frame = bulk_store.runs().set_index("run_id")
    assert runs_frame.loc[ids[0], "requests_total"] == 30
    assert runs_frame.loc[ids[0], "requests_ok"] == 29  # request 7 failed


#: one bad line each, what the one reader says about it (field), and how it is written
BAD_LINES: list[tuple[str, str | None, str]] = [
    ("string for a number", "start_s", '"start_s":"abc"'),
    ("numeric string for a number", "start_s", '"start_s":"1.5"'),
    ("float for an int", "request_index", '"request_index":2.5'),
    ("bool for an int", "prompt_tokens", '"prompt_tokens":true'),
    ("number for a string", "request_id", '"request_id":12'),
    ("null for a bool with a default", "warmup", '"warmup":null'),
    ("negative count", "output_tokens", '"output_tokens":-3'),
    ("status not allowed", "status", '"status":"maybe"'),
    ("string in a list of floats", "chunk_times_s.1", '"chunk_times_s":[0.1,"x"]'),
    ("numeric string in a list", "chunk_times_s.0", '"chunk_times_s":["0.1"]'),
    ("bool in a list of floats", "chunk_times_s.0", '"chunk_times_s":[true]'),
    ("null in a list", "chunk_times_s.1", '"chunk_times_s":[0.1,null]'),
    ("float in a list of ints", "chunk_tokens.0", '"chunk_tokens":[1.5]'),
    ("object for a list", "chunk_tokens", '"chunk_tokens":{"a":1}'),
]


def _line_with(record: RequestRecord, fragment: str) -> str:
    """``record``'s JSON line with one key's value replaced by ``fragment``."""
    key = fragment.split(":", 1)[0].strip('"')
    data = json.loads(record.model_dump_json())
    text = json.dumps(data, separators=(",", ":"))
    start = text.index(f'"{key}":')
    # the value ends at the next top-level comma or the closing brace
    depth, end = 0, start + len(key) + 3
    while end < len(text):
        ch = text[end]
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            if depth == 0:
                break
            depth -= 1
        elif ch == "," and depth == 0:
            break
        end += 1
    return text[:start] + fragment + text[end:]


def _poisoned_run(runs: Path, run_id: str, lines: list[str]) -> Path:
    run_dir = write_completed_run(runs, run_id, requests=0)
    (run_dir / REQUESTS_JSONL).write_text("".join(line + "\n" for line in lines))
    return run_dir


@pytest.mark.parametrize(("case", "field", "fragment"), BAD_LINES, ids=[b[0] for b in BAD_LINES])
def test_a_bad_line_is_quarantined_with_file_line_and_field_and_the_rest_kept(
    tmp_path: Path, case: str, field: str | None, fragment: str
) -> None:
    runs = tmp_path / "runs"
    good = [_record(i, "p").model_dump_json() for i in range(1, 6)]
    lines = [*good[:2], _line_with(_record(9, "p"), fragment), *good[2:]]
    run_dir = _poisoned_run(runs, "20261201T110000Z-bad000", lines)
    accepted, problems = read_json_lines(run_dir / REQUESTS_JSONL, RequestRecord)
    assert len(accepted) == 5 and len(problems) == 1, problems  # the one reader's verdict
    store = Store(tmp_path / "s.duckdb")
    progress = ingest(store, runs)
    assert progress.error is None
    assert _stored_rows(store, "20261201T110000Z-bad000") == sorted(
        (r.model_dump() for r in accepted), key=lambda r: str(r["request_id"])
    )
    found = store.run_problems()
    assert len(found) == 1
    row = found.iloc[0]
    assert (row.file, int(row.line), row.field) == (REQUESTS_JSONL, 3, field)
    assert row.run_dir == str(run_dir) and row.reason


def test_unknown_fields_torn_lines_and_repeated_ids_are_named(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    good = [_record(i, "q") for i in range(1, 5)]
    extra = json.loads(good[0].model_dump_json()) | {"surprise": 1, "request_id": "q-9"}
    lines = [
        good[0].model_dump_json(),
        json.dumps(extra),
        "[1, 2]",
        good[1].model_dump_json(),
        good[1].model_copy(update={"end_s": 99.0}).model_dump_json(),  # same id again
        good[2].model_dump_json(),
    ]
    run_dir = _poisoned_run(runs, "20261201T120000Z-bad001", lines)
    with (run_dir / REQUESTS_JSONL).open("a") as handle:
        handle.write('{"request_id": "q-7", "start_')  # torn: the writer died mid-line
    store = Store(tmp_path / "s.duckdb")
    ingest(store, runs)
    problems = store.run_problems()
    by_line = {p.line: p for p in problems.itertuples()}
    assert by_line[2].field == "surprise"
    assert by_line[3].field is None and by_line[3].reason
    assert by_line[7].kind == "torn"
    repeated = [p for p in problems.itertuples() if p.field == "request_id"]
    assert len(repeated) == 1 and repeated[0].value == "q-2"
    stored = _stored_rows(store, "20261201T120000Z-bad001")
    assert [r["request_id"] for r in stored] == ["q-1", "q-2", "q-3"]
    assert next(r for r in stored if r["request_id"] == "q-2")["end_s"] == 99.0  # the last wins


def test_a_bad_metrics_file_is_read_line_by_line(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run_dir = write_completed_run(runs, "20261201T130000Z-bad002", requests=5)
    with (run_dir / SERVER_METRICS_JSONL).open("a") as handle:
        handle.write('{"t_s": 9, "name": "x", "labels": {"gpu": null}, "value": 1}\n')
        handle.write('{"t_s": "late", "name": "x", "labels": {}, "value": 1}\n')
    store = Store(tmp_path / "s.duckdb")
    ingest(store, runs)
    assert len(store.run_server_samples("20261201T130000Z-bad002")) == 5
    fields = sorted(store.run_problems().field.tolist())
    assert fields == ["labels.gpu", "t_s"]


def test_an_unreadable_run_is_skipped_whole_and_the_others_keep_working(
    tmp_path: Path, catalog: Catalog
) -> None:
    runs = tmp_path / "runs"
    good = write_completed_run(runs, "20261201T140000Z-good00")
    bad = write_completed_run(runs, "20261201T140001Z-bad003")
    store = Store(tmp_path / "s.duckdb")
    store.sync_catalog(catalog)
    assert len(store.ingest_runs(runs)) == 2
    (bad / RUN_JSON).write_text('{"run_id": "20261201T140001Z-bad003", "status": ')
    time.sleep(0.01)
    (good / SERVER_METRICS_JSONL).open("a").write(
        MetricSample(t_s=9, name="y", value=1).model_dump_json() + "\n"
    )
    assert store.ingest_runs(runs) == ["20261201T140000Z-good00"]
    problems = store.run_problems()
    assert problems.file.tolist() == [RUN_JSON] and problems.kind.tolist() == ["unreadable"]
    assert "the whole run is skipped" in problems.reason[0]
    # what was ingested before the file went bad is kept, and calibration still works
    assert len(store.run_requests("20261201T140001Z-bad003")) == 30
    assert len([m for m in store.measured_results() if m.origin == "user"]) == 2
    assert store.ingest_runs(runs) == []  # the quarantined run is not re-read until it changes


# ----- incremental by content ---------------------------------------------------------------
def test_a_touched_run_is_not_reingested_a_changed_one_is(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run_dir = write_completed_run(runs, "20261201T150000Z-aaaaaa")
    store = Store(tmp_path / "s.duckdb")
    assert store.ingest_runs(runs) == ["20261201T150000Z-aaaaaa"]
    later = time.time() + 5
    for name in (RUN_JSON, REQUESTS_JSONL):
        os.utime(run_dir / name, (later, later))  # copied or synced: new times, same bytes
    assert store.ingest_runs(runs) == []
    with (run_dir / REQUESTS_JSONL).open("a") as handle:
        handle.write(_record(40, "20261201T150000Z-aaaaaa").model_dump_json() + "\n")
    assert store.ingest_runs(runs) == ["20261201T150000Z-aaaaaa"]
    assert len(store.run_requests("20261201T150000Z-aaaaaa")) == 31


def test_a_run_written_before_credentials_were_scrubbed_stores_none(tmp_path: Path) -> None:
    """A run.json from an older runner, with URL credentials and a bearer token in its error,
    is stored without them (the run files themselves are the user's and stay as they are)."""
    runs = tmp_path / "runs"
    writer = RunWriter(runs, run_id="20261201T160000Z-cccccc")
    writer.append_requests([_record(i, "c") for i in range(3)])
    writer.write_meta(status="failed", model=MODEL)
    meta = json.loads((writer.dir / RUN_JSON).read_text())
    url = "http://alice:s3cret-pass@127.0.0.1:9/v1"  # as an older runner wrote it, unscrubbed
    meta.update(
        endpoint={"base_url": url, "api": "completions"},
        config={"base_url": url},
        error="HTTP 401: Authorization: Bearer sk-old-MARKER-0123456789abcdef rejected",
    )
    (writer.dir / RUN_JSON).write_text(json.dumps(meta))
    store = Store(tmp_path / "s.duckdb")
    assert store.ingest_runs(runs) == ["20261201T160000Z-cccccc"]
    store.close()
    data = (tmp_path / "s.duckdb").read_bytes()
    for marker in (b"s3cret-pass", b"alice:", b"sk-old-MARKER-0123456789abcdef"):
        assert marker not in data
    store = Store(tmp_path / "s.duckdb")
    run = store.query("SELECT base_url, error FROM benchmark_runs").iloc[0]
    assert run.base_url == "http://127.0.0.1:9/v1"
    assert "401" in run.error and "MARKER" not in run.error


# ----- interrupted runs ---------------------------------------------------------------------
WRITER = """
import sys, time
from pathlib import Path
from planner.run_files import RunWriter, RequestRecord
writer = RunWriter(Path(sys.argv[1]), run_id=sys.argv[2])
writer.write_meta(status="running", model="m", config={"concurrency": 2})
for i in range(5):
    writer.append_requests([RequestRecord(request_id=f"x-{i}", request_index=i, start_s=i,
                                          first_chunk_s=i + 0.5, end_s=i + 1.0, status="ok")])
writer.sync()
print("WROTE", flush=True)
time.sleep(600)
"""


def test_a_run_whose_writer_was_killed_is_marked_interrupted_with_what_it_collected(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    run_id = "20261201T160000Z-killed"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(runs), run_id],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "WROTE"
        store = Store(tmp_path / "s.duckdb")
        store.ingest_runs(runs)
        assert store.runs().status.tolist() == ["running"]  # alive: left alone
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    store.ingest_runs(runs)  # the next start
    run = store.runs().iloc[0]
    assert run.status == "interrupted"
    assert f"pid {proc.pid}" in run.error and "kept" in run.error
    assert run.requests_total == 5 and len(store.run_requests(run_id)) == 5
    on_disk = json.loads((runs / run_id / RUN_JSON).read_text())
    assert on_disk["status"] == "interrupted" and on_disk["finished_at"]
    assert read_run_dir(runs / run_id).problems == []  # a status the one reader accepts


def test_a_running_run_without_sign_of_life_is_interrupted_whatever_the_host(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    run_dir = write_completed_run(runs, "20261201T170000Z-stale0", requests=3)
    meta = json.loads((run_dir / RUN_JSON).read_text())
    meta |= {"status": "running", "writer": {"host": "another-host", "pid": 1}}
    (run_dir / RUN_JSON).write_text(json.dumps(meta))
    old = time.time() - 3600
    for path in run_dir.iterdir():
        os.utime(path, (old, old))
    store = Store(tmp_path / "s.duckdb")
    store.ingest_runs(runs)
    run = store.runs().iloc[0]
    assert run.status == "interrupted" and "no sign of its writer" in run.error


# ----- in the background --------------------------------------------------------------------
def test_background_ingestion_reports_progress_and_finishes(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for i in range(4):
        write_completed_run(runs, f"20261201T18000{i}Z-bbbbb{i}")
    store = Store(tmp_path / "s.duckdb")
    progress = store.ingest_in_background(runs)
    assert store.ingest_in_background(runs) is progress or not progress.running
    store.ingest_job.wait(timeout=120)
    assert not progress.running and progress.error is None
    assert progress.runs_done == progress.runs_total == 4
    assert progress.bytes_done == progress.bytes_total > 0
    assert "Read 4 of 4 new or changed run directories" in progress.describe()
    assert "4 runs ingested" in progress.describe()
    assert len(store.runs()) == 4


def test_a_background_pass_holds_off_while_a_page_computes_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a page computes inside ``IngestJob.foreground`` (its search), the background pass
    waits before its next batch; once the page is done, or after ``FOREGROUND_HOLD_S`` at the
    most, it goes on, and every run lands. Deterministic: a hold that does not hold makes the
    waiting thread end at once; only then can the first assertion fail."""
    import threading

    from planner import ingest as ingest_module

    monkeypatch.setattr(ingest_module, "FOREGROUND_HOLD_S", 60.0)
    runs_dir = tmp_path / "runs"
    for i in range(3):
        write_completed_run(runs_dir, f"20261201T10000{i}Z-ffff{i:02d}")
    store = Store(tmp_path / "store.duckdb")
    job = store.ingest_job
    with job.foreground():
        waiter = threading.Thread(target=job._hold_for_foreground)
        waiter.start()
        waiter.join(0.2)
        assert waiter.is_alive()  # held while the page computes
        progress = store.ingest_in_background(runs_dir)
        assert progress.runs_total == 3
    waiter.join(10)
    assert not waiter.is_alive()
    job.wait(timeout=60)
    assert sorted(store.runs()["run_id"]) == [f"20261201T10000{i}Z-ffff{i:02d}" for i in range(3)]
    monkeypatch.setattr(ingest_module, "FOREGROUND_HOLD_S", 0.01)
    with job.foreground():  # a page that never ends holds a pass back only so long
        bounded = threading.Thread(target=job._hold_for_foreground)
        bounded.start()
        bounded.join(10)
        assert not bounded.is_alive()
    store.close()


def test_a_pass_someone_waits_for_does_not_hold_off_for_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page that waits for a small pass inside its own computation (``foreground``) must get
    it: waiting lets the pass run (else the page would wait the whole hold for nothing)."""
    from planner import ingest as ingest_module

    monkeypatch.setattr(ingest_module, "FOREGROUND_HOLD_S", 600.0)
    runs_dir = tmp_path / "runs"
    write_completed_run(runs_dir, "20261201T110000Z-eeee00")
    store = Store(tmp_path / "store.duckdb")
    with store.ingest_job.foreground():
        store.ingest_in_background(runs_dir)
        progress = store.ingest_job.wait(timeout=120)
        assert progress is not None and not progress.running
    assert list(store.runs()["run_id"]) == ["20261201T110000Z-eeee00"]
    store.close()
