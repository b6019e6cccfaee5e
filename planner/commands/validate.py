"""``python -m planner validate``: how wrong the performance model is on held-out measurements.

For leave-one-GPU-out, leave-one-model-out and random 5-fold splits of the stored measured
results (the public set and the user's runs), prints the median and p90 absolute percentage
error of output throughput, TTFT and TPOT per engine family and GPU, next to the same errors of
a plain roofline (max(bytes / bandwidth, FLOPs / peak) per step, same simulator), and the share
of held-out rows inside the predicted 80% interval.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from typing import Any

from planner.catalog import load_catalog
from planner.perf.model import PerformanceModel
from planner.perf.validation import (
    SCHEMES,
    cross_validate,
    error_table,
    format_table,
    measured_metrics,
    median_ape,
    roofline_predictions,
)
from planner.settings import get_settings

#: the issue's acceptance limits on the median APE of output throughput
LIMIT_ALL = 0.25
LIMIT_VLLM = 0.35


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "validate", help="cross-validate the performance model against the measured results"
    )
    parser.add_argument(
        "--scheme",
        action="append",
        choices=list(SCHEMES),
        help="split(s) to run (default: all three)",
    )
    parser.add_argument(
        "--public-only", action="store_true", help="use the public results only, not user runs"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from planner.commands.predict import user_measured_results

    started = time.perf_counter()
    catalog = load_catalog(user_dir=get_settings().user_data_dir / "catalog")
    user = [] if args.public_only else user_measured_results(catalog)
    results = [*catalog.measured, *user]
    model = PerformanceModel(catalog).fit(results)
    roofline = roofline_predictions(model.samples)
    schemes = args.scheme or list(SCHEMES)
    report: dict[str, Any] = {
        "rows": len(model.samples),
        "user_rows": sum(1 for s in model.samples if s.result.origin == "user"),
        "excluded": [
            {
                "model": e.result.model,
                "gpu": e.result.gpu,
                "tp": e.result.tp,
                "pp": e.result.pp,
                "input_len": e.result.input_len,
                "output_len": e.result.output_len,
                "reason": e.reason,
            }
            for e in model.excluded
        ],
        "schemes": {},
    }
    tables = []
    inconsistent = [e.sample for e in model.excluded if e.sample is not None]
    for scheme in schemes:
        everything = cross_validate(
            model.samples, scheme, roofline=roofline, test_only=inconsistent
        )
        held = everything[: len(model.samples)]
        with_excluded = everything
        rows = error_table(held)
        covered = [c for h in held if (c := h.covered) is not None]
        report["schemes"][scheme] = {
            "title": SCHEMES[scheme],
            "median_ape_output_tok_per_s": median_ape(held),
            "median_ape_output_tok_per_s_vllm": median_ape(held, "vllm"),
            "median_ape_output_tok_per_s_with_excluded": median_ape(with_excluded),
            "median_ape_output_tok_per_s_vllm_with_excluded": median_ape(with_excluded, "vllm"),
            "interval_coverage_80": sum(covered) / len(covered) if covered else None,
            "rows": [
                {
                    "engine": r.engine,
                    "gpu": r.gpu,
                    "rows": r.rows,
                    "coverage": r.coverage,
                    **{
                        f"{m}_{k}": v
                        for m in ("output_tok_per_s", "ttft", "tpot")
                        for k, v in zip(
                            ("n", "median", "p90", "roofline_median", "roofline_p90"),
                            r.stat(m),
                            strict=True,
                        )
                    },
                }
                for r in rows
            ],
        }
        tables.append(format_table(f"== {SCHEMES[scheme]} ==", rows))
    if args.json:
        print(json.dumps(report, indent=2, default=float))
        return 0
    print(
        f"Servewise performance model, cross-validated on {report['rows']} measured rows "
        f"({report['user_rows']} of them the user's runs); APE = |predicted / measured - 1|; "
        "TTFT and TPOT with the statistic each source reported (mean or p50).\n"
    )
    print("\n\n".join(tables))
    print("\nChecks (median APE of output throughput; issue #4 limits 25% overall, 35% vLLM):")
    ok = True
    for scheme in schemes:
        entry = report["schemes"][scheme]
        med = entry["median_ape_output_tok_per_s"]
        med_vllm = entry["median_ape_output_tok_per_s_vllm"]
        passed = med <= LIMIT_ALL and (math.isnan(med_vllm) or med_vllm <= LIMIT_VLLM)
        ok = ok and passed
        cover = entry["interval_coverage_80"]
        print(
            f"  {entry['title']:<22} overall {100 * med:5.1f}%  vLLM {100 * med_vllm:5.1f}%  "
            f"80%-interval coverage {100 * (cover or 0):3.0f}%  "
            f"{'PASS' if passed else 'FAIL'}"
        )
        if inconsistent:
            print(
                f"  {'':<22} with the {len(inconsistent)} excluded rows scored as stated: "
                f"overall {100 * entry['median_ape_output_tok_per_s_with_excluded']:5.1f}%  "
                f"vLLM {100 * entry['median_ape_output_tok_per_s_vllm_with_excluded']:5.1f}%"
            )
    print(
        f"  {'roofline baseline':<22} overall "
        f"{100 * _roofline_median(model, roofline):5.1f}%  vLLM "
        f"{100 * _roofline_median(model, roofline, 'vllm'):5.1f}%  (no fit: spec sheet only)"
    )
    if report["excluded"]:
        print(
            f"\nExcluded from the fit and from the tables ({len(report['excluded'])} rows; "
            "scored as held-out rows in the lines above):"
        )
        for e in report["excluded"]:
            print(
                f"  - {e['model']} on {e['gpu']} TP{e['tp']}xPP{e['pp']} "
                f"{e['input_len']}/{e['output_len']}: {e['reason']}"
            )
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0 if ok else 1


def _roofline_median(
    model: PerformanceModel, roofline: list[dict[str, float]], family: str | None = None
) -> float:
    errs = []
    for sample, roof in zip(model.samples, roofline, strict=True):
        meas = measured_metrics(sample.result).get("output_tok_per_s")
        if meas and (family is None or sample.family == family):
            errs.append(abs(roof["output_tok_per_s"] / meas - 1))
    return statistics.median(errs) if errs else math.nan
