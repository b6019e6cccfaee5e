"""Peak memory of ingesting one large run: what a store check costs on a big ``requests.jsonl``.

    .venv/bin/python benchmarks/ingest_memory_bench.py [--mb 64] [--output-len 1024]

Generates one completed run whose ``requests.jsonl`` is about ``--mb`` MB (the project's own
run writer, one chunk timestamp per output token: ``benchmarks/ingest_bench.py``'s runs), then
ingests it into a fresh DuckDB store in a child process, once in bulk (the store's path) and
once through the one per-line reader, and prints each child's peak resident memory
(``VmHWM``), its ratio to the file's size, the seconds taken and the request rows stored.
A child process starts from the same imports for both, so the figures are comparable; the
baseline of those imports alone is printed too. ``--repo`` runs another checkout's planner
on the same file (before/after a change).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.ingest_bench import write_runs

_CHILD = """
import sys, time
from pathlib import Path
from planner.ingest import ingest
from planner.store import Store
mode, store_path, runs_dir = sys.argv[1:4]
def peak():  # kB; VmHWM starts afresh at exec (ru_maxrss keeps the parent's)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
if mode != "imports":
    store = Store(Path(store_path))
    start = time.perf_counter()
    progress = ingest(store, Path(runs_dir), bulk=mode == "bulk")
    elapsed = time.perf_counter() - start
    rows = int(store.query("SELECT count(*) AS n FROM request_results")["n"][0])
    print(peak(), f"{elapsed:.2f} {rows} {progress.error or ''}")
else:
    print(peak(), "0 0")
"""


def _child_peak(
    mode: str, store_path: Path, runs_dir: Path, repo: Path
) -> tuple[float, float, int, str]:
    """Peak RSS (MB, the child's own ``VmHWM``), seconds and rows of one child that ingests in
    ``mode`` with the code of the checkout ``repo``."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, str(store_path), str(runs_dir)],
        capture_output=True,
        text=True,
        check=True,
        cwd=repo,
    )
    peak_kb, seconds, rows, *error = done.stdout.split(maxsplit=3)
    return int(peak_kb) / 1024, float(seconds), int(rows), " ".join(error)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=64.0, help="size of requests.jsonl")
    parser.add_argument("--output-len", type=int, default=1024, help="chunks per request")
    parser.add_argument(
        "--modes", default="imports,bulk,reader", help="comma-separated: imports, bulk, reader"
    )
    parser.add_argument(
        "--repo",
        type=Path,
        default=Path(__file__).resolve().parents[1],
        help="the checkout whose planner ingests (another one's, e.g. main's, for a before/after)",
    )
    args = parser.parse_args()
    bytes_per_row = 14 * args.output_len + 400  # a chunk time ~11 bytes, its token count ~3
    requests = max(1, int(args.mb * 1e6 / bytes_per_row))
    with tempfile.TemporaryDirectory(prefix="servewise-ingest-mem-") as tmp:
        runs_dir = Path(tmp) / "runs"
        start = time.perf_counter()
        write_runs(runs_dir, 1, requests, args.output_len)
        size_mb = sum(p.stat().st_size for p in runs_dir.rglob("requests.jsonl")) / 1e6
        print(
            f"one run, {requests:,} request rows, requests.jsonl {size_mb:,.1f} MB "
            f"(generated in {time.perf_counter() - start:.1f} s)"
        )
        print(f"planner of {args.repo}")
        for mode in args.modes.split(","):
            peak_mb, seconds, rows, error = _child_peak(
                mode, Path(tmp) / f"store-{mode}.duckdb", runs_dir, args.repo
            )
            print(
                f"{mode:<8} peak RSS {peak_mb:8,.0f} MB  ({peak_mb / size_mb:5.1f}x the file)  "
                f"{seconds:6.2f} s  {rows:,} rows stored{'  ' + error if error else ''}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
