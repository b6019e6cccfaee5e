"""Ingestion's memory stays bounded on a large run, and the run is still stored whole.

A real DuckDB file and a real run directory of ~48 MB of request lines, ingested in a child
process whose peak resident memory (``VmHWM``, which starts afresh at exec) is read back. The
figures this bounds are printed by ``benchmarks/ingest_memory_bench.py``: before the bound a
58 MB ``requests.jsonl`` took 1,188 MB at peak (~1,060 MB over the imports), 20x the file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from planner.run_files import REQUESTS_JSONL, MetricSample, RequestRecord, RunWriter

ROOT = Path(__file__).resolve().parents[2]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
OUTPUT_LEN = 1024
REQUESTS = 3_600  # ~13 KB a line: ~48 MB

_CHILD = r"""
import json, sys
from pathlib import Path
from planner.ingest import ingest
from planner.store import Store


def hwm_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024


store = Store(Path(sys.argv[1]))
limits = []
before = hwm_mb()
bulk_cursor = store.bulk_cursor


def spied_cursor():  # entered inside the bound, where the batch reads and writes
    limits.append(store.query("SELECT current_setting('memory_limit') AS m")["m"][0])
    return bulk_cursor()


store.bulk_cursor = spied_cursor
progress = ingest(store, Path(sys.argv[2]))
peak = hwm_mb()
rows = int(store.query("SELECT count(*) AS n FROM request_results")["n"][0])
chunks = int(store.query("SELECT sum(len(chunk_times_s)) AS n FROM request_results")["n"][0])
after = store.query("SELECT current_setting('memory_limit') AS m")["m"][0]
print(json.dumps({
    "before_mb": before, "peak_mb": peak, "rows": rows, "chunks": chunks,
    "bulk": progress.files_bulk, "one_reader": progress.files_one_reader,
    "error": progress.error, "limits": limits, "after": after,
}))
"""


def _large_run(runs_dir: Path) -> Path:
    """One completed run: REQUESTS lines of OUTPUT_LEN chunk times each (one line built by the
    record, the others by changing its id and index: fast to write)."""
    writer = RunWriter(runs_dir, run_id="20261202T040000Z-large")
    chunks = [round(0.25 + 0.0123456 * k, 6) for k in range(OUTPUT_LEN)]
    template = RequestRecord(
        request_id="REQ",
        request_index=0,
        scheduled_s=0.0,
        start_s=0.0,
        first_chunk_s=chunks[0],
        first_content_s=chunks[0],
        end_s=chunks[-1],
        chunk_times_s=chunks,
        chunk_tokens=[1] * OUTPUT_LEN,
        prompt_tokens=1024,
        output_tokens=OUTPUT_LEN,
        input_len_target=1024,
        output_len_target=OUTPUT_LEN,
        status="ok",
        http_status=200,
    ).model_dump_json()
    assert '"request_index":0,' in template
    writer.write_meta(
        status="running",
        model=MODEL,
        simulated=True,
        endpoint={"base_url": "http://127.0.0.1:9", "api": "completions"},
        config={"concurrency": 8, "num_requests": REQUESTS},
    )
    with (writer.dir / REQUESTS_JSONL).open("w") as out:
        for i in range(REQUESTS):
            line = template.replace('"REQ"', f'"large-{i}"').replace(
                '"request_index":0,', f'"request_index":{i},'
            )
            out.write(line + "\n")
    writer.append_metric_samples(
        [
            MetricSample(
                t_s=0.5, name="vllm:num_requests_running", labels={"model_name": MODEL}, value=8.0
            )
        ]
    )
    writer.write_meta(
        status="completed",
        model=MODEL,
        simulated=True,
        endpoint={"base_url": "http://127.0.0.1:9", "api": "completions"},
        config={"concurrency": 8, "num_requests": REQUESTS},
        summary={"output_throughput": 100.0, "median_ttft_ms": 250.0, "median_tpot_ms": 12.3},
    )
    writer.close()
    return writer.dir / REQUESTS_JSONL


def test_a_large_run_ingests_whole_in_bulk_within_a_bounded_memory(tmp_path: Path) -> None:
    requests_file = _large_run(tmp_path / "runs")
    size_mb = requests_file.stat().st_size / 1e6
    assert size_mb > 40
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "store.duckdb"), str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["error"] is None
    assert result["rows"] == REQUESTS
    assert result["chunks"] == REQUESTS * OUTPUT_LEN
    # read by DuckDB in bulk, not handed to the one reader (which a memory error would do)
    assert result["bulk"] == 2 and result["one_reader"] == 0
    # the bound is in force while the batch is written, and lifted afterwards
    assert result["limits"] and all(m.startswith("366") for m in result["limits"]), result
    assert not result["after"].startswith("366")
    # before the bound: ~18x the file over the imports (1,060 MB for 58 MB); with it ~7x,
    # most of it the JSON reader's buffers, which do not grow with the file
    grown_mb = result["peak_mb"] - result["before_mb"]
    assert grown_mb < 11 * size_mb, (grown_mb, size_mb)
