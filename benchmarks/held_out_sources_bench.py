"""Accuracy on publishers the model never saw, held out together (a benchmark to read).

    .venv/bin/python benchmarks/held_out_sources_bench.py [--hold SUBSTRING ...]

Fits the performance model on the embedded measured results without the rows of the held-out
publishers (by default GPUStack's performance lab and the SGLang cookbook, the MoE-on-vLLM/SGLang
sources issue 11 added) and predicts those rows as ``planner predict`` would a user's CSV: the
strictest test the stored data allow, stricter than leave-one-source-out (which still trains on
the other of the two). Prints the median and p90 absolute percentage error of output
throughput, the median predicted / measured and the 80%-interval coverage, overall and by MoE /
dense, engine, model class and GPU, next to the plain roofline's median.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog import load_catalog
from planner.perf.calibration import fit_coefficients
from planner.perf.model import PerformanceModel
from planner.perf.uncertainty import SeenData
from planner.perf.validation import (
    HeldOut,
    predict_held_out,
    roofline_predictions,
    sample_classes,
    source_key,
)

DEFAULT_HELD = ("gpustack", "sglang")


def line(name: str, held: Sequence[HeldOut]) -> str:
    errs = [e for h in held if (e := h.ape("output_tok_per_s")) is not None]
    if not errs:
        return f"  {name:<34} rows    0"
    ratios = [
        h.predicted["output_tok_per_s"] / h.measured["output_tok_per_s"]
        for h in held
        if "output_tok_per_s" in h.measured
    ]
    roof = [e for h in held if (e := h.ape("output_tok_per_s", baseline=True)) is not None]
    covered = [c for h in held if (c := h.covered) is not None]
    return (
        f"  {name:<34} rows {len(errs):4d}  median APE {100 * np.median(errs):5.1f}%  "
        f"p90 {100 * np.quantile(errs, 0.9):4.0f}%  predicted/measured {np.median(ratios):5.2f}  "
        f"80% coverage {100 * np.mean(covered):3.0f}%  (roofline {100 * np.median(roof):4.0f}%)"
    )


def grouped(
    held: Sequence[HeldOut], key: Callable[[HeldOut], Sequence[str]]
) -> dict[str, list[HeldOut]]:
    out: dict[str, list[HeldOut]] = {}
    for h in held:
        for k in key(h):
            out.setdefault(k, []).append(h)
    return dict(sorted(out.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--hold",
        action="append",
        help="hold out the publishers whose source key contains this (repeatable; default: "
        + ", ".join(DEFAULT_HELD)
        + ")",
    )
    args = parser.parse_args()
    holds = tuple(s.lower() for s in (args.hold or DEFAULT_HELD))
    started = time.perf_counter()
    catalog = load_catalog(user_dir=Path(tempfile.mkdtemp()))
    model = PerformanceModel(catalog).fit(list(catalog.measured))
    samples = model.samples
    keys = [source_key(s.result) for s in samples]
    held_out = [any(h in k.lower() for h in holds) for k in keys]
    train = [s for s, out in zip(samples, held_out, strict=True) if not out]
    test = [s for s, out in zip(samples, held_out, strict=True) if out]
    if not test or not train:
        raise SystemExit(f"--hold {holds} leaves {len(train)} rows to fit, {len(test)} to predict")
    fitted = fit_coefficients(train)
    seen = SeenData.of(train)
    roofline = roofline_predictions(test)
    held = [
        predict_held_out(s, fitted, "held out", roof, seen)
        for s, roof in zip(test, roofline, strict=True)
    ]
    sources = sorted({k for k, out in zip(keys, held_out, strict=True) if out})
    print(
        f"fitted on {len(train)} rows without {', '.join(sources)}; predicting their "
        f"{len(test)} rows (output tok/s; APE = |predicted / measured - 1|)\n"
    )
    print(line("all", held))
    is_moe = {id(h): h.sample.dep.card.architecture.is_moe for h in held}
    print(line("MoE", [h for h in held if is_moe[id(h)]]))
    print(line("dense", [h for h in held if not is_moe[id(h)]]))
    for title, key in (
        ("engine", lambda h: (h.sample.family,)),
        ("MoE by engine", lambda h: (h.sample.family,) if is_moe[id(h)] else ()),
        (
            "model class",
            lambda h: tuple(f"{h.sample.family} {c}" for c in sample_classes(h.sample)),
        ),
        ("GPU", lambda h: (f"{h.sample.family} {h.sample.gpu}",)),
    ):
        print(f"\n by {title}")
        for name, members in grouped(held, key).items():
            print(line(name, members))
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
