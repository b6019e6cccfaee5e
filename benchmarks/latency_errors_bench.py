"""Held-out TTFT and TPOT errors by fold, engine and load band (a benchmark to read).

    .venv/bin/python benchmarks/latency_errors_bench.py [--rows OUT.jsonl] [--from IN.jsonl]
        [--jobs N]

Runs the leave-one-source-out folds of ``planner validate --public-only --scheme source`` (the
same fits and held-out predictions) and prints, beside output tokens/s, the median and mean
absolute percentage error and the median predicted / measured of TTFT and TPOT (each with the
statistic its row reports), grouped overall, by engine, by fold, by load band (closed loops of
1-4, 5-16, 17-64 and more requests in flight; max-throughput, offline batch and rate runs) and
by engine and band. ``--rows`` keeps the held-out rows (one JSON object a line) so that two
versions of the model can be compared; ``--from`` prints the tables of such a file again.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog import load_catalog
from planner.perf.model import PerformanceModel
from planner.perf.validation import cross_validate

METRICS = ("output_tok_per_s", "ttft", "tpot")


def held_out_rows(jobs: int = 1) -> list[dict[str, Any]]:
    catalog = load_catalog()
    model = PerformanceModel(catalog).fit(list(catalog.measured))
    roofline = model.roofline_predictions()
    inconsistent = [e.sample for e in model.excluded if e.sample is not None]
    held = cross_validate(
        model.samples, "source", roofline=roofline, test_only=inconsistent, jobs=jobs
    )
    rows = []
    for h in held[: len(model.samples)]:
        r = h.sample.result
        rows.append(
            {
                "fold": h.fold,
                "engine": h.sample.family,
                "model": r.model,
                "gpu": r.gpu,
                "load": r.load,
                "concurrency": r.concurrency,
                "num_requests": r.num_requests,
                "source": r.source,
                "engine_version": r.engine_version,
                "entrypoint": r.entrypoint or ("offline" if r.load == "offline_batch" else "serve"),
                "input_len": r.input_len,
                "output_len": r.output_len,
                "ttft_stat": r.ttft_stat or ("mean" if r.ttft_ms else None),
                "tp": r.tp,
                "measured": h.measured,
                "predicted": h.predicted,
            }
        )
    return rows


def band(row: dict[str, Any]) -> str:
    in_flight = row.get("concurrency")
    if row["load"] != "concurrency" or not in_flight:
        return str(row["load"])
    if in_flight <= 4:
        return "1-4 in flight"
    if in_flight <= 16:
        return "5-16 in flight"
    return "17-64 in flight" if in_flight <= 64 else "> 64 in flight"


def errors(rows: list[dict[str, Any]], metric: str) -> str:
    ratios = [
        r["predicted"][metric] / r["measured"][metric]
        for r in rows
        if r["measured"].get(metric) and math.isfinite(r["predicted"].get(metric, math.nan))
    ]
    if not ratios:
        return f"{'-':>25}"
    ape = [abs(x - 1.0) for x in ratios]
    return (
        f"{len(ratios):4d} {statistics.median(ape):6.1%} {statistics.fmean(ape):7.1%} "
        f"{statistics.median(ratios):5.2f}"
    )


Grouping = tuple[str, Callable[[dict[str, Any]], str]]


def print_tables(rows: list[dict[str, Any]]) -> None:
    print_grouped(
        rows,
        [
            ("all", lambda r: "all"),
            ("engine", lambda r: str(r["engine"])),
            ("fold", lambda r: str(r["fold"])),
            ("band", band),
            ("engine and band", lambda r: f"{r['engine']} {band(r)}"),
        ],
    )


def print_grouped(rows: list[dict[str, Any]], groupings: list[Grouping]) -> None:
    """One table a grouping: its groups' rows, median and mean APE and median ratio of each
    metric (``benchmarks/gpu_generation_bench.py`` prints its GPU groupings with it)."""
    head = "   n median    mean ratio"
    for title, key in groupings:
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            groups[key(row)].append(row)
        print(f"\n{'by ' + title:36} | {'tokens/s':25} | {'TTFT':25} | {'TPOT':25}")
        print(f"{'':36} | {head:25} | {head:25} | {head:25}")
        for name in sorted(groups):
            cells = " | ".join(errors(groups[name], m) for m in METRICS)
            print(f"{name[:36]:36} | {cells}")


def held_out_rows_from_command_line(description: str) -> list[dict[str, Any]]:
    """The held-out rows a bench prints: computed (``--rows OUT`` keeps them as JSON lines) or,
    with ``--from IN``, read back from such a file so two versions of the model can be compared
    (this bench, ``gpu_generation_bench.py`` and ``ttft_residuals_bench.py`` share it)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rows", type=Path, help="write the held-out rows here (JSON lines)")
    parser.add_argument("--from", dest="source", type=Path, help="read held-out rows from here")
    parser.add_argument(
        "--jobs", type=int, default=1, help="fit the folds in this many forked processes"
    )
    args = parser.parse_args()
    if args.source:
        return [json.loads(line) for line in args.source.read_text().splitlines() if line]
    started = time.perf_counter()
    rows = held_out_rows(args.jobs)
    print(f"{len(rows)} held-out rows in {time.perf_counter() - started:.0f} s")
    if args.rows:
        args.rows.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def main() -> int:
    rows = held_out_rows_from_command_line(__doc__.split("\n")[0])
    print("median and mean absolute percentage error, median predicted / measured")
    print_tables(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
