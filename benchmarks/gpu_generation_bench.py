"""Held-out errors by GPU and GPU generation (a benchmark to read, issue 26: the B200 TPOT bias).

    .venv/bin/python benchmarks/gpu_generation_bench.py [--rows OUT.jsonl] [--from IN.jsonl]

Runs the leave-one-source-out folds of ``planner validate --public-only --scheme source``
(``benchmarks/latency_errors_bench.py``'s held-out rows: the same fits and predictions) and
prints, for output tokens/s, TTFT and TPOT, the rows, the median and mean absolute percentage
error and the median predicted / measured, overall and grouped by GPU generation (Blackwell:
B200, B300, GB200, GB300; Hopper; Ampere; Ada; CDNA3; CDNA4), by GPU, and by GPU generation,
engine and requests in flight. ``--rows`` keeps the held-out rows so two versions of the model
can be compared; ``--from`` prints the tables of such a file again.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.latency_errors_bench import band, held_out_rows_from_command_line, print_grouped

METRICS = ("output_tok_per_s", "ttft", "tpot")
#: GPU id -> generation (the catalog's ids, data/gpus.csv)
GENERATIONS = {
    "B200": "Blackwell",
    "B300": "Blackwell",
    "GB200": "Blackwell",
    "GB300": "Blackwell",
    "RTXPRO6000": "Blackwell (SM120)",
    "H100-SXM": "Hopper",
    "H100-PCIe": "Hopper",
    "H200": "Hopper",
    "GH200": "Hopper",
    "MI300X": "CDNA3",
    "MI325X": "CDNA3",
    "MI355X": "CDNA4",
}


def generation(gpu: str) -> str:
    if gpu in GENERATIONS:
        return GENERATIONS[gpu]
    if gpu.startswith("A100") or gpu == "A10G":
        return "Ampere"
    if gpu.startswith("L4"):
        return "Ada"
    return "other"


def print_tables(rows: list[dict[str, Any]]) -> None:
    print_grouped(
        rows,
        [
            ("all", lambda r: "all"),
            ("generation", lambda r: generation(r["gpu"])),
            ("GPU", lambda r: str(r["gpu"])),
            (
                "generation, engine, load",
                lambda r: f"{generation(r['gpu'])} {r['engine']} {band(r)}",
            ),
        ],
    )


def main() -> int:
    rows = held_out_rows_from_command_line(__doc__.split("\n")[0])
    print(f"{len(rows)} held-out rows (leave-one-source-out); ratio = median predicted / measured")
    print_tables(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
