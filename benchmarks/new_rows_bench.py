"""Held-out errors of the rows a data change added, and of the rows that were there before.

    .venv/bin/python benchmarks/new_rows_bench.py --rows OUT.jsonl
    .venv/bin/python benchmarks/new_rows_bench.py --compare BEFORE.jsonl AFTER.jsonl

``--rows`` runs the leave-one-source-out folds of ``planner validate --public-only --scheme
source`` (the same fits and held-out predictions) and writes one JSON object a held-out row: its
identity (source, source_ref, engine, model, GPU, layout, lengths, load and the measured
throughput), the measured and predicted figures and whether each lies inside its 80% interval.
Run it on two checkouts (before and after a data change, with the same interpreter) and
``--compare`` prints, for the rows found in both files ("old rows"), output tokens/s, TTFT,
TPOT and their p99 held out before and after (median, mean and p90 absolute percentage error
and 80% coverage), then the same for the rows only the second file has ("new rows"): whether
the added data made the old predictions worse, and how well the new rows are predicted.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog import load_catalog
from planner.perf.model import PerformanceModel
from planner.perf.validation import cross_validate

METRICS = ("output_tok_per_s", "ttft", "tpot", "ttft_p99", "tpot_p99")


def _identity(h: Any) -> str:
    r = h.sample.result
    return "|".join(
        str(v)
        for v in (
            r.source,
            r.source_ref,
            r.engine,
            r.engine_version,
            r.model,
            r.precision,
            r.gpu,
            r.num_gpus,
            r.tp,
            r.pp,
            r.input_len,
            r.output_len,
            r.load,
            r.concurrency,
            r.request_rate,
            r.num_requests,
            r.output_tok_per_s,
            r.ttft_ms,
        )
    )


def held_out_rows() -> list[dict[str, Any]]:
    catalog = load_catalog()
    model = PerformanceModel(catalog).fit(list(catalog.measured))
    roofline = model.roofline_predictions()
    inconsistent = [e.sample for e in model.excluded if e.sample is not None]
    held = cross_validate(model.samples, "source", roofline=roofline, test_only=inconsistent)
    rows = []
    for h in held[: len(model.samples)]:
        rows.append(
            {
                "id": _identity(h),
                "fold": h.fold,
                "engine": h.sample.family,
                "measured": h.measured,
                "predicted": {k: v for k, v in h.predicted.items() if math.isfinite(v)},
                "covered": {m: h.covers(m) for m in METRICS if m in h.measured},
            }
        )
    return rows


def _figures(rows: list[dict[str, Any]], metric: str) -> str:
    apes = [
        abs(r["predicted"][metric] / r["measured"][metric] - 1.0)
        for r in rows
        if metric in r["measured"] and metric in r["predicted"]
    ]
    covered = [r["covered"][metric] for r in rows if r["covered"].get(metric) is not None]
    if not apes:
        return f"{metric:<17} n    0"
    p90 = statistics.quantiles(apes, n=10)[-1] if len(apes) > 1 else apes[0]
    cover = f"{100 * sum(covered) / len(covered):4.0f}%" if covered else "    -"
    return (
        f"{metric:<17} n {len(apes):4d}  median {100 * statistics.median(apes):5.1f}%  "
        f"mean {100 * statistics.fmean(apes):6.1f}%  p90 {100 * p90:5.0f}%  80% cover {cover}"
    )


def compare(before_path: Path, after_path: Path) -> None:
    before = {r["id"]: r for r in map(json.loads, before_path.read_text().splitlines())}
    after = {r["id"]: r for r in map(json.loads, after_path.read_text().splitlines())}
    old = [k for k in after if k in before]
    new = [k for k in after if k not in before]
    gone = [k for k in before if k not in after]
    print(f"old rows (in both files): {len(old)}; new rows: {len(new)}; rows gone: {len(gone)}")
    for title, rows in (
        ("old rows, before", [before[k] for k in old]),
        ("old rows, after", [after[k] for k in old]),
        ("new rows", [after[k] for k in new]),
    ):
        print(f"\n{title} (leave-one-source-out, held out):")
        for metric in METRICS:
            print("  " + _figures(rows, metric))
    folds = sorted({after[k]["fold"] for k in new})
    for fold in folds:
        rows = [after[k] for k in new if after[k]["fold"] == fold]
        print(f"\nnew rows of {fold}:")
        for metric in METRICS:
            print("  " + _figures(rows, metric))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, help="write the held-out rows here (JSON lines)")
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    if not args.rows:
        parser.error("give --rows OUT.jsonl or --compare BEFORE.jsonl AFTER.jsonl")
    rows = held_out_rows()
    args.rows.write_text("".join(json.dumps(r, default=float) + "\n" for r in rows))
    print(f"{len(rows)} held-out rows written to {args.rows}")


if __name__ == "__main__":
    main()
