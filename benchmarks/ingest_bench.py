"""How fast a fresh store ingests a team's runs folder.

    .venv/bin/python benchmarks/ingest_bench.py [--runs 200] [--requests 100] [--output-len 256]

Generates ``--runs`` completed run directories with the project's own run writer
(``planner.run_files.RunWriter``: ``run.json``, ``requests.jsonl`` with one chunk
timestamp per output token, ``server_metrics.jsonl``), then times a fresh DuckDB store
ingesting all of them (:mod:`planner.ingest`: DuckDB reads the JSON lines in bulk), a second
pass over the unchanged folder (nothing new to do), and, side by side in the same run, a
fresh store fed by the one per-line reader (``bulk=False``, what a bad file gets). Prints MB/s,
request rows/s, the ratio, and whether both stored the same rows.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.ingest import ingest
from planner.run_files import MetricSample, RequestRecord, RunWriter
from planner.store import Store

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def write_runs(runs_dir: Path, runs: int, requests: int, output_len: int, seed: int = 0) -> None:
    """``runs`` completed runs of ``requests`` requests each (deterministic for a seed)."""
    rng = random.Random(seed)
    for r in range(runs):
        stamp = f"{r // 3600:02d}{r // 60 % 60:02d}{r % 60:02d}"
        writer = RunWriter(runs_dir, run_id=f"20261201T{stamp}Z-{r:06x}")
        ttft = 0.05 + 0.2 * rng.random()
        gap = 0.01 + 0.03 * rng.random()
        rows = []
        for i in range(requests):
            start = 0.1 * i
            chunks = [round(start + ttft + k * gap, 6) for k in range(output_len)]
            rows.append(
                RequestRecord(
                    request_id=f"run{r}-{i}",
                    request_index=i,
                    warmup=i < 2,
                    scheduled_s=start,
                    start_s=start,
                    first_chunk_s=chunks[0],
                    first_content_s=chunks[0],
                    end_s=chunks[-1],
                    chunk_times_s=chunks,
                    chunk_tokens=[1] * output_len,
                    prompt_tokens=1024,
                    output_tokens=output_len,
                    input_len_target=1024,
                    output_len_target=output_len,
                    status="ok",
                    http_status=200,
                )
            )
        writer.append_requests(rows)
        writer.append_metric_samples(
            [
                MetricSample(t_s=0.5 * k, name=name, labels={"model_name": MODEL}, value=float(k))
                for k in range(60)
                for name in ("vllm:num_requests_running", "vllm:kv_cache_usage_perc")
            ]
        )
        duration = rows[-1].end_s or 0.0
        writer.write_meta(
            status="completed",
            model=MODEL,
            simulated=True,
            endpoint={"base_url": "http://127.0.0.1:8000", "api": "completions"},
            config={
                "concurrency": 8,
                "num_requests": requests,
                "input_len": 1024,
                "output_len": output_len,
            },
            plan={"engine": "vllm", "model": MODEL, "gpu": "L4", "tp": 1, "pp": 1, "num_gpus": 1},
            summary={
                "duration": duration,
                "completed": requests,
                "output_throughput": requests * output_len / duration,
                "total_token_throughput": requests * (1024 + output_len) / duration,
                "median_ttft_ms": ttft * 1e3,
                "median_tpot_ms": gap * 1e3,
            },
        )
        writer.close()


def folder_bytes(runs_dir: Path) -> int:
    return sum(p.stat().st_size for p in runs_dir.rglob("*") if p.is_file())


def _timed_ingest(store_path: Path, runs_dir: Path, *, bulk: bool) -> tuple[Store, float, float]:
    """The store, wall seconds and CPU seconds (all threads: DuckDB reads in parallel)."""
    store = Store(store_path)
    start, cpu = time.perf_counter(), time.process_time()
    progress = ingest(store, runs_dir, bulk=bulk)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    if progress.error:
        raise SystemExit(f"ingestion failed: {progress.error}")
    return store, elapsed, cpu


def _content(store: Store) -> list[tuple[object, ...]]:
    return list(
        store.query(
            "SELECT run_id, request_id, start_s, end_s, len(chunk_times_s), status "
            "FROM request_results ORDER BY run_id, request_id"
        ).itertuples(index=False, name=None)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--requests", type=int, default=100, help="request rows per run")
    parser.add_argument("--output-len", type=int, default=256, help="chunks per request")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="servewise-ingest-") as tmp:
        runs_dir = Path(tmp) / "runs"
        start = time.perf_counter()
        write_runs(runs_dir, args.runs, args.requests, args.output_len)
        size = folder_bytes(runs_dir)
        print(
            f"generated {args.runs} runs, {args.runs * args.requests:,} request rows, "
            f"{size / 1e6:,.1f} MB in {time.perf_counter() - start:.1f} s"
        )
        timings = {}
        contents = {}
        for label, bulk in (
            ("DuckDB bulk read (the store)", True),
            ("one reader, per line", False),
        ):
            store, elapsed, cpu = _timed_ingest(
                Path(tmp) / f"store-{bulk}.duckdb", runs_dir, bulk=bulk
            )
            stored = int(store.query("SELECT count(*) AS n FROM request_results")["n"][0])
            timings[label] = elapsed
            contents[label] = _content(store)
            print(
                f"fresh store, {label:<30} {elapsed:7.2f} s  {size / 1e6 / elapsed:7.1f} MB/s  "
                f"{stored / elapsed:9,.0f} request rows/s  ({stored:,} rows); {cpu:.2f} s CPU, "
                f"{size / 1e6 / cpu:.1f} MB per CPU second"
            )
            if bulk:
                start = time.perf_counter()
                again = store.ingest_runs(runs_dir)
                print(
                    f"  second pass, nothing changed:      {time.perf_counter() - start:7.2f} s  "
                    f"({len(again)} runs re-ingested)"
                )
            store.close()
        bulk_s, reader_s = timings.values()
        same = len({json.dumps(c, default=str) for c in contents.values()}) == 1
        print(f"bulk read / one reader: {reader_s / bulk_s:.1f}x faster; same rows stored: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
