"""Reading a large request trace: time and peak memory, streamed against kept in memory.

    .venv/bin/python benchmarks/trace_bench.py [--rows 2000000]

writes a synthetic ``timestamp,input_tokens,output_tokens`` CSV of ``--rows`` requests
(11,900,000 rows is the 200 MB trace of the reliability issue) and measures, each in its own
process (peak resident memory is per process), side by side in one run:

- ``planner.workload.load_trace``, which streams the file into histograms and keeps the first
  100,000 requests to replay;
- the same rows kept as one ``TraceRequest`` each, the shape the loader had before it streamed
  (every request of the file held in memory), as the baseline;
- the runner's ``load_trace`` with ``--num-requests 1000`` (it stops reading there) and whole;
- ``python -m benchmarks_runner run --trace`` against an endpoint that is not there: the
  seconds until the error, which comes before the trace is read.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    "planner load_trace (streamed)": """
from planner.workload import load_trace
w = load_trace(PATH)
result = w.num_requests
""",
    "every row kept (pre-streaming shape)": """
import csv
from planner.workload import TraceRequest
with open(PATH, newline="") as fh:
    reader = csv.reader(fh)
    next(reader)
    rows = tuple(
        TraceRequest(timestamp_s=float(t), input_len=int(i), output_len=int(o))
        for t, i, o in reader
    )
result = len(rows)
""",
    "runner load_trace, --num-requests 1000": """
from benchmarks_runner.workload import load_trace
result = len(load_trace(Path(PATH), "csv", max_requests=1000))
""",
    "runner load_trace, whole file": """
from benchmarks_runner.workload import load_trace
result = len(load_trace(Path(PATH), "csv"))
""",
}

_RUNNER = """
import json, resource, sys, time
from pathlib import Path
PATH = sys.argv[1]
t0 = time.perf_counter()
{body}
seconds = time.perf_counter() - t0
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"seconds": seconds, "peak_mb": peak_mb, "result": result}}))
"""


def write_trace(path: Path, rows: int) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    with path.open("w") as fh:
        fh.write("timestamp,input_tokens,output_tokens\n")
        t = 0.0
        for start in range(0, rows, 500_000):
            n = min(500_000, rows - start)
            gaps = rng.exponential(0.01, n)
            ins, outs = rng.integers(1, 8192, n), rng.integers(1, 1024, n)
            times = t + np.cumsum(gaps)
            t = float(times[-1])
            fh.write(
                "\n".join(f"{a:.3f},{b},{c}" for a, b, c in zip(times, ins, outs, strict=True))
                + "\n"
            )


def measure(body: str, path: Path) -> dict[str, float]:
    code = _RUNNER.format(body=body.strip())
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def dead_endpoint_seconds(path: Path, runs: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(
        [
            sys.executable, "-m", "benchmarks_runner", "run", "--base-url", "http://127.0.0.1:9",
            "--model", "m", "--concurrency", "1", "--trace", str(path), "--trace-format", "csv",
            "--runs-dir", str(runs), "--no-progress",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )  # fmt: skip
    return time.perf_counter() - t0, out.stderr.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="servewise-trace-bench-") as tmp:
        path = Path(tmp) / "trace.csv"
        write_trace(path, args.rows)
        size_mb = path.stat().st_size / 1e6
        print(f"trace: {args.rows:,} requests, {size_mb:,.1f} MB ({path.name})")
        print(f"{'reader':<42} {'seconds':>8} {'peak MB':>8} {'requests':>11}")
        figures = {}
        for name, body in CASES.items():
            figures[name] = measure(body, path)
            f = figures[name]
            print(f"{name:<42} {f['seconds']:>8.1f} {f['peak_mb']:>8.0f} {int(f['result']):>11,}")
        streamed = figures["planner load_trace (streamed)"]
        kept = figures["every row kept (pre-streaming shape)"]
        print(
            f"streamed / kept: {streamed['seconds'] / kept['seconds']:.2f}x the time, "
            f"{streamed['peak_mb'] / kept['peak_mb']:.2f}x the peak memory"
        )
        seconds, line = dead_endpoint_seconds(path, Path(tmp) / "runs")
        print(f"runner with this trace and no endpoint: {seconds:.1f} s to '{line[:90]}'")


if __name__ == "__main__":
    main()
