"""Seconds from starting the simulated server (performance-model timing) to ``/health``.

    .venv/bin/python benchmarks/server_start_bench.py [--repeats 3]

Starts ``python -m benchmarks_runner.simulated --port 0 --model Llama-3.1-8B --gpu L4 --tp 1``
with a fresh user data directory and times, from the spawn to the first 200 on ``/health``:

- the first start, with no cached fit (it fits before binding the port, and says so);
- later starts, which read the fit from the cache (``<user_data_dir>/cache``);
- side by side, starts with the cache turned off (``SERVEWISE_FIT_CACHE=0``): what every start
  cost before the fit was cached.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMAND = [
    sys.executable, "-m", "benchmarks_runner.simulated", "--port", "0",
    "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "L4", "--tp", "1",
]  # fmt: skip


def time_to_health(env: dict[str, str]) -> float:
    """Seconds to the first 200 on /health (prints the first line the server said on stderr)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        COMMAND, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("LISTENING"):
            raise SystemExit(f"the server did not start: {line!r}")
        port = int(line.split()[1])
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.01)
        return time.perf_counter() - start
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        said = err.strip().splitlines()
        if said:
            print(f"    server said: {said[0][:110]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="cached starts to time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="servewise-start-") as user_dir:
        env = dict(os.environ, SERVEWISE_USER_DATA_DIR=user_dir)
        env.pop("SERVEWISE_CACHE_DIR", None)
        first = time_to_health(env)
        print(f"first start, no cached fit (fits once)   {first:6.2f} s")
        cached = [time_to_health(env) for _ in range(args.repeats)]
        off_env = dict(env, SERVEWISE_FIT_CACHE="0")
        uncached = [time_to_health(off_env) for _ in range(max(1, args.repeats // 2))]
    median_cached = statistics.median(cached)
    median_uncached = statistics.median(uncached)
    print(
        f"start with the fit cached                 median {median_cached:6.2f} s  "
        f"(min {min(cached):.2f}, max {max(cached):.2f}, n={len(cached)})"
    )
    print(
        f"start with the cache off (every start)    median {median_uncached:6.2f} s  "
        f"(n={len(uncached)})"
    )
    print(f"cached / uncached: {median_uncached / median_cached:.1f}x faster to /health")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
