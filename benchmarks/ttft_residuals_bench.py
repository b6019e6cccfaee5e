"""Where held-out TTFT goes wrong: predicted / measured by engine, band, source, prompt length,
entrypoint and the statistic a row reports (a benchmark to read, issue 26 item 1).

    .venv/bin/python benchmarks/ttft_residuals_bench.py [--from ROWS.jsonl] [--rows OUT.jsonl]

The rows are the leave-one-source-out held-out rows of
``benchmarks/latency_errors_bench.py`` (``--from`` reads a file it or this script wrote). For
each group it prints the rows, the median absolute percentage error, the median and the 10th /
90th percentiles of predicted / measured TTFT, and the median *difference* predicted - measured
in ms: a fixed path the model lacks shows as a constant negative difference at low load (the
ratio then depends on the prompt), a scheduling or queueing error as a ratio that grows with
the load. The last tables split 1-4 and 17+ in flight by prompt length to tell the two apart.

What it showed on main (2026-12-02, 1,017 fitted rows, 461 with TTFT): at 1-4 in flight
predicted/measured 0.40, about 40 ms short whatever the prompt (a fixed path: the
``request_path`` term of planner.perf.step_time followed); max-throughput rows 1.45 and rate
rows 1.01, where TTFT follows the throughput error (gpustack's MoE rows 2-4x slow in tok/s are
2-4x long in TTFT); closed loops at 17-64 and beyond 0.41 and 0.20, of which Tandemn's vLLM
sweeps (117 rows, p50 TTFT) are 0.38 and fall with concurrency while their tok/s is within 15%,
and dstack's early-2025 DeepSeek rows 0.21 with tok/s 2x over (release speed, not scheduling);
NVIDIA's TensorRT-LLM rows (Triton's C++ server) 1.03, with no path beyond the prefill.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.latency_errors_bench import band, held_out_rows_from_command_line


def prompt_band(row: dict[str, Any]) -> str:
    """Prompt length class: the prefill's share of a low-load TTFT grows with it."""
    tokens = int(row.get("input_len") or 0)
    for limit, name in ((256, "<= 256"), (1024, "257-1k"), (4096, "1k-4k")):
        if tokens <= limit:
            return f"prompt {name}"
    return "prompt > 4k"


def ttft_pairs(rows: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(predicted, measured) TTFT in ms of the rows that measure it."""
    out = []
    for r in rows:
        meas, pred = r["measured"].get("ttft"), r["predicted"].get("ttft", math.nan)
        if meas and math.isfinite(pred):
            out.append((float(pred), float(meas)))
    return out


def summary(rows: list[dict[str, Any]]) -> str | None:
    pairs = ttft_pairs(rows)
    if not pairs:
        return None
    ratios = sorted(p / m for p, m in pairs)
    ape = [abs(x - 1.0) for x in ratios]
    diff = statistics.median(p - m for p, m in pairs)
    single = [ratios[0]] * 9
    q = statistics.quantiles(ratios, n=10, method="inclusive") if len(ratios) > 1 else single
    return (
        f"{len(pairs):4d} {statistics.median(ape):7.1%} {statistics.median(ratios):6.2f} "
        f"{q[0]:6.2f} {q[-1]:6.2f} {diff:+10.0f}"
    )


def print_tables(rows: list[dict[str, Any]]) -> None:
    groupings: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("all", lambda r: "all"),
        ("engine", lambda r: str(r["engine"])),
        ("band", band),
        ("engine and band", lambda r: f"{r['engine']} {band(r)}"),
        ("entrypoint and engine", lambda r: f"{r.get('entrypoint')} {r['engine']}"),
        ("statistic", lambda r: str(r.get("ttft_stat"))),
        ("prompt length", prompt_band),
        ("source", lambda r: str(r.get("source"))[:44]),
        (
            "1-4 in flight by engine and prompt",
            lambda r: f"{r['engine']} {prompt_band(r)}" if band(r) == "1-4 in flight" else "",
        ),
        (
            "17+ in flight by engine and prompt",
            lambda r: (
                f"{r['engine']} {prompt_band(r)}"
                if band(r) in ("17-64 in flight", "> 64 in flight")
                else ""
            ),
        ),
    ]
    head = f"{'n':>4} {'APE':>7} {'ratio':>6} {'p10':>6} {'p90':>6} {'diff ms':>10}"
    for title, key in groupings:
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            name = key(row)
            if name:
                groups[name].append(row)
        print(f"\nTTFT by {title}")
        print(f"{'':46} {head}")
        for name in sorted(groups):
            line = summary(groups[name])
            if line:
                print(f"{name[:46]:46} {line}")


def main() -> int:
    rows = held_out_rows_from_command_line(__doc__.split("\n")[0])
    print("held-out TTFT: rows, median |pred/meas - 1|, median pred/meas (p10, p90), ")
    print("median predicted - measured (ms)")
    print_tables(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
