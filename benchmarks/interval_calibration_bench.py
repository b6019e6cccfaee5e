"""Interval coverage by engine and metric, in-sample and nested (a benchmark to read).

    .venv/bin/python benchmarks/interval_calibration_bench.py [--rows OUT.jsonl] [--from IN.jsonl]
        [--prior-rows K ...]

Runs the leave-one-source-out folds of ``planner validate --public-only --scheme source`` (the
same fits and held-out predictions) and prints the share of held-out rows inside their 80%
interval of output tok/s, TTFT, TPOT, p99 TTFT and p99 TPOT, per engine family, per family and
architecture group, and on the closed-loop and rate rows (those of 2025-07+ releases too: the
independent checks' shape), for four calibrations
(:func:`planner.perf.validation.calibrate_intervals`):

- pooled: one multiplier per metric and novelty count (the calibration before engine factors);
- family: times each engine family's factor per metric;
- family+arch: times each (family, architecture group)'s factor on top;
- load+fam+arch: the load shape's factor first (closed loop or rate; max throughput or offline
  batch), then the family's and the group's on top of it (what ``validate`` writes).

Each is scored two ways:

- in-sample: calibrated on all the held-out rows and scored on the same rows (what
  ``validate --calibrate-intervals`` reports right after writing the file);
- nested: for each held-out source, calibrated on the OTHER sources' held-out rows only and
  applied to that source's rows, so no row helps set the multipliers it is scored with.

``--prior-rows`` compares the shrinkage strengths (rows at which a group's own factor counts
half, :func:`planner.perf.validation.shrunk_factor`) on the nested check. ``--rows`` keeps the
held-out rows (what the calibration reads of them, one JSON object a line); ``--from`` reads
such a file back instead of fitting (~1-5 min).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog import load_catalog
from planner.perf.model import PerformanceModel
from planner.perf.uncertainty import ARCH_GROUPS, IntervalCalibration, arch_group, load_group
from planner.perf.validation import (
    CURRENT_SLICE,
    PRIOR_ROWS,
    SWEPT_SLICE,
    HeldOut,
    calibrate_intervals,
    cross_validate,
    is_current_release,
)

METRICS = (
    ("output_tok_per_s", "tok/s"),
    ("ttft", "TTFT"),
    ("tpot", "TPOT"),
    ("ttft_p99", "p99 TTFT"),
    ("tpot_p99", "p99 TPOT"),
)
FAMILIES = ("sglang", "trtllm", "vllm")
Calibrate = Callable[[Sequence[HeldOut]], IntervalCalibration]


def held_out() -> list[HeldOut]:
    catalog = load_catalog(user_dir=None)
    model = PerformanceModel(catalog).fit(list(catalog.measured))
    roofline = model.roofline_predictions()
    inconsistent = [e.sample for e in model.excluded if e.sample is not None]
    held = cross_validate(model.samples, "source", roofline=roofline, test_only=inconsistent)
    return held[: len(model.samples)]  # the fitted rows, as validate's tables and calibration


def to_json(h: HeldOut) -> dict[str, Any]:
    """What calibration and coverage read of a held-out row (and :func:`release_group`)."""
    dep = h.sample.dep
    arch = dep.card.architecture
    return {
        "fold": h.fold,
        "family": h.sample.family,
        "gpu": h.sample.gpu,
        "version": h.sample.key.version,
        "model_classes": list(arch.model_classes),
        "total_params": arch.total_params,
        "active_params": arch.active_params,
        "precision": h.sample.result.precision,
        "tp": dep.tp,
        "pp": dep.pp,
        "data_parallel_size": dep.data_parallel_size,
        "expert_parallel": dep.expert_parallel,
        "measured": h.measured,
        "predicted": {k: v for k, v in h.predicted.items() if math.isfinite(v)},
        "reasons": list(h.reasons),
        "own": {k: list(v) for k, v in h.own.items()},
        "new_release": h.new_release,
        "in_flight": h.in_flight,
        "load": h.sample.result.load,
        "engine_version": h.sample.result.engine_version,
    }


def from_json(row: dict[str, Any]) -> HeldOut:
    arch = SimpleNamespace(
        model_classes=tuple(row["model_classes"]),
        total_params=row["total_params"],
        active_params=row["active_params"],
        is_moe=any("MoE" in c for c in row["model_classes"]),
    )
    dep = SimpleNamespace(
        card=SimpleNamespace(architecture=arch),
        tp=row["tp"],
        pp=row["pp"],
        data_parallel_size=row["data_parallel_size"],
        expert_parallel=row["expert_parallel"],
    )
    sample = SimpleNamespace(
        key=SimpleNamespace(version=row["version"]),
        family=row["family"],
        gpu=row["gpu"],
        dep=dep,
        result=SimpleNamespace(
            precision=row["precision"],
            load=row.get("load", "max_throughput"),
            engine_version=row.get("engine_version"),
        ),
    )
    own = {k: (float(v[0]), float(v[1])) for k, v in row["own"].items()}
    return HeldOut(
        sample=sample,
        fold=row["fold"],
        measured=row["measured"],
        predicted=row["predicted"],
        roofline={},
        low=0.0,
        high=0.0,
        far=False,
        reasons=tuple(row["reasons"]),
        own_low=own["output_tok_per_s"][0],
        own_high=own["output_tok_per_s"][1],
        own=own,
        new_release=row["new_release"],
        in_flight=row["in_flight"],
    )


def coverage(
    scored: Sequence[tuple[HeldOut, IntervalCalibration]], metric: str
) -> tuple[int, float | None]:
    inside = [c for h, cal in scored if (c := h.covers(metric, cal)) is not None]
    return len(inside), (sum(inside) / len(inside) if inside else None)


def in_sample(
    held: Sequence[HeldOut], calibrate: Calibrate
) -> list[tuple[HeldOut, IntervalCalibration]]:
    cal = calibrate(held)
    return [(h, cal) for h in held]


def nested(
    held: Sequence[HeldOut], calibrate: Calibrate
) -> list[tuple[HeldOut, IntervalCalibration]]:
    """Each source's rows with the calibration of every other source's rows."""
    out = []
    for fold in sorted({h.fold for h in held}):
        cal = calibrate([h for h in held if h.fold != fold])
        out.extend((h, cal) for h in held if h.fold == fold)
    return out


def groups(held: Sequence[HeldOut]) -> list[tuple[str, Callable[[HeldOut], bool]]]:
    out: list[tuple[str, Callable[[HeldOut], bool]]] = [("all", lambda h: True)]
    for family in FAMILIES:
        out.append((family, lambda h, f=family: h.family == f))

    def swept(h: HeldOut) -> bool:
        return load_group(h.load) == SWEPT_SLICE

    out.append((SWEPT_SLICE, swept))
    out.append((CURRENT_SLICE, lambda h: swept(h) and is_current_release(h)))
    out.append(("max throughput / offline", lambda h: not swept(h)))
    for family in FAMILIES:
        for group in ARCH_GROUPS:
            if any(h.family == family and arch_group(h.model_classes) == group for h in held):
                out.append(
                    (
                        f"{family} {group}",
                        lambda h, f=family, g=group: (
                            h.family == f and arch_group(h.model_classes) == g
                        ),
                    )
                )
    return out


def table(
    title: str,
    held: Sequence[HeldOut],
    scorings: Sequence[tuple[str, list[tuple[HeldOut, IntervalCalibration]]]],
) -> None:
    """Rows: groups; columns: each metric's coverage under each scoring."""
    print(f"\n{title}")
    names = " ".join(f"{name[:9]:>9}" for name, _ in scorings)
    print(
        f"{'group':<28} | " + " | ".join(f"{label + ' (n)':<{len(names)}}" for _, label in METRICS)
    )
    print(f"{'':<28} | " + " | ".join(names for _ in METRICS))
    for name, keep in groups(held):
        cells = []
        for metric, _ in METRICS:
            parts = []
            n_rows = 0
            for _, scored in scorings:
                n, cover = coverage([(h, c) for h, c in scored if keep(h)], metric)
                n_rows = n
                parts.append(f"{'-' if cover is None else f'{100 * cover:.0f}%':>9}")
            cells.append(" ".join(parts) + f" ({n_rows})")
        print(f"{name[:28]:<28} | " + " | ".join(cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=Path, help="write the held-out rows here (JSON lines)")
    parser.add_argument("--from", dest="source", type=Path, help="read held-out rows from here")
    parser.add_argument(
        "--prior-rows",
        type=float,
        action="append",
        help=f"shrinkage strengths to compare on the nested check (default {PRIOR_ROWS:g})",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    if args.source:
        rows = [json.loads(line) for line in args.source.read_text().splitlines() if line]
        held = [from_json(r) for r in rows]
    else:
        held = held_out()
        if args.rows:
            args.rows.write_text("".join(json.dumps(to_json(h)) + "\n" for h in held))
    print(
        f"{len(held)} held-out rows from {len({h.fold for h in held})} sources "
        f"({time.perf_counter() - started:.0f} s)"
    )

    def pooled(rows: Sequence[HeldOut]) -> IntervalCalibration:
        return calibrate_intervals(rows, levels=())

    def family(rows: Sequence[HeldOut], k: float = PRIOR_ROWS) -> IntervalCalibration:
        return calibrate_intervals(rows, levels=("family",), prior_rows=k)

    def family_arch(rows: Sequence[HeldOut], k: float = PRIOR_ROWS) -> IntervalCalibration:
        return calibrate_intervals(rows, levels=("family", "arch"), prior_rows=k)

    def load_family_arch(rows: Sequence[HeldOut], k: float = PRIOR_ROWS) -> IntervalCalibration:
        return calibrate_intervals(rows, prior_rows=k)

    calibrations: list[tuple[str, Calibrate]] = [
        ("pooled", pooled),
        ("family", family),
        ("fam+arch", family_arch),
        ("+load", load_family_arch),
    ]
    table(
        "80% interval coverage, in-sample (calibrated and scored on all held-out rows)",
        held,
        [(name, in_sample(held, cal)) for name, cal in calibrations],
    )
    table(
        "80% interval coverage, nested leave-one-source-out (each source scored with the "
        "calibration of the others)",
        held,
        [(name, nested(held, cal)) for name, cal in calibrations],
    )
    for k in args.prior_rows or []:
        table(
            f"nested, prior rows {k:g}",
            held,
            [
                ("family", nested(held, lambda r, k=k: family(r, k))),
                ("fam+arch", nested(held, lambda r, k=k: family_arch(r, k))),
                ("+load", nested(held, lambda r, k=k: load_family_arch(r, k))),
            ],
        )
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
