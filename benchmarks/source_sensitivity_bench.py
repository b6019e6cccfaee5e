"""How far one prediction moves when a publisher's rows leave the fit (a benchmark to read).

    .venv/bin/python benchmarks/source_sensitivity_bench.py --drop gpustack --drop dstack \
        [--engine tensorrt-llm --version 1.2.0 --model deepseek-ai/DeepSeek-R1-0528
         --precision fp8 --gpu H200 --tp 8 --input-len 1024 --output-len 1024
         --concurrency 4 16 64] [--family-only] [--together]

A planner reading a prediction for a layout the data barely cover wants to know which public
results it rests on. This fits the performance model on the embedded measured results without
the rows whose source contains each ``--drop`` substring (case-insensitive; with
``--family-only`` only those rows of the scenario's engine family; ``--together`` adds one fit
without all of them at once), the same fit as ``planner validate`` runs for a held-out fold,
and prints the scenario's mean TPOT, mean TTFT and output tokens/s at each concurrency under
every fit beside the fit on all rows, with the ratio to it. A closed loop of fixed lengths
(``vllm bench serve``'s random dataset), five requests per slot.

Each fit takes about a minute on two cores. The default scenario is DeepSeek-R1-0528 FP8 on
8 x H200 under TensorRT-LLM 1.2 at 1K/1K, where session 62 found the prediction rests on
GPUStack's and dstack's TensorRT-LLM runs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import ValidationError

from planner.catalog import load_catalog
from planner.catalog.loader import Catalog
from planner.catalog.schema import MeasuredResult
from planner.errors import PlannerError
from planner.perf.calibration import FitSample, FittedCoefficients, build_sample, fit_coefficients
from planner.perf.metrics import run_metrics
from planner.perf.model import PerformanceModel
from planner.perf.simulator import simulate
from planner.perf.validation import source_key
from planner.workload import planner_error

METRICS = (("TPOT ms", "tpot"), ("TTFT ms", "ttft"), ("tok/s", "tput"))


def scenario_samples(args: argparse.Namespace, catalog: Catalog) -> list[FitSample]:
    """One closed-loop sample per concurrency (its measured figures are placeholders: only the
    prediction is read); a field out of range is the planner's InvalidInputError."""
    out = []
    for c in args.concurrency:
        try:
            result = MeasuredResult(
                source="source_sensitivity_bench",
                engine=args.engine,
                engine_version=args.version,
                model=args.model,
                precision=args.precision,
                gpu=args.gpu,
                num_gpus=args.tp,
                tp=args.tp,
                pp=1,
                input_len=args.input_len,
                output_len=args.output_len,
                load="concurrency",
                concurrency=c,
                num_requests=5 * c,
                dataset="random",
                entrypoint="serve",
                output_tok_per_s=1.0,
            )
        except ValidationError as e:
            raise planner_error(e) from None
        out.append(build_sample(result, catalog))
    return out


def predicted(sample: FitSample, fitted: FittedCoefficients) -> dict[str, float]:
    """The sample's figures under ``fitted``, simulated again only where its arrivals follow the
    clock (as :func:`planner.perf.validation.predict_held_out` does)."""
    c = fitted.full_for(sample.key)
    trace = simulate(sample.dep, c, timeline=False) if sample.time_driven else sample.trace
    m = run_metrics(trace, c, sample.dep.loaded_replicas)
    return {"tpot": m.tpot_ms("mean"), "ttft": m.ttft_ms("mean"), "tput": m.output_tok_per_s}


def format_rows(
    fits: Sequence[tuple[str, int, list[dict[str, float]]]], concurrency: Sequence[int]
) -> str:
    base = fits[0][2]
    lines = []
    for name, dropped, preds in fits:
        cells = []
        for c, p, b in zip(concurrency, preds, base, strict=True):
            cells.append(
                f"c{c}: " + " ".join(f"{p[k]:.1f} ({p[k] / b[k]:.2f}x)" for _, k in METRICS)
            )
        lines.append(f"  {name:<30} -{dropped:<4d} " + " | ".join(cells))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drop", action="append", required=True, help="source substring")
    parser.add_argument("--family-only", action="store_true")
    parser.add_argument("--together", action="store_true")
    parser.add_argument("--engine", default="tensorrt-llm")
    parser.add_argument("--version", default="1.2.0")
    parser.add_argument("--model", default="deepseek-ai/DeepSeek-R1-0528")
    parser.add_argument("--precision", default="fp8")
    parser.add_argument("--gpu", default="H200")
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--input-len", type=int, default=1024)
    parser.add_argument("--output-len", type=int, default=1024)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4, 16, 64])
    args = parser.parse_args()
    started = time.perf_counter()
    catalog = load_catalog(user_dir=Path(tempfile.mkdtemp()))
    try:
        scenario = scenario_samples(args, catalog)
    except PlannerError as e:
        raise SystemExit(f"the scenario is not one the planner can predict: {e}") from None
    sources = {source_key(r).lower() for r in catalog.measured}
    for d in args.drop:
        if not any(d.lower() in k for k in sources):
            raise SystemExit(
                f"--drop {d!r} matches no measured row's source: give a substring of one "
                "(data/README.md lists the sources)"
            )
    model = PerformanceModel(catalog).fit(list(catalog.measured))
    samples = model.samples
    family = scenario[0].family
    drops = [(d,) for d in args.drop] + ([tuple(args.drop)] if args.together else [])
    # the baseline refitted the same way as the fits without rows (no re-simulation of the
    # clock-driven rows), so a ratio is the dropped rows' doing alone
    everything = fit_coefficients(samples)
    fits = [("all rows", 0, [predicted(s, everything) for s in scenario])]
    for drop in drops:
        out = [
            any(d.lower() in source_key(s.result).lower() for d in drop)
            and (not args.family_only or s.family == family)
            for s in samples
        ]
        if not any(out):
            raise SystemExit(
                f"--drop {' + '.join(drop)!r} matches no fitted row"
                + (f" of {family}" if args.family_only else "")
                + " (rows the fit excluded as inconsistent are not fitted)"
            )
        fitted = fit_coefficients([s for s, o in zip(samples, out, strict=True) if not o])
        fits.append(
            ("without " + " + ".join(drop), sum(out), [predicted(s, fitted) for s in scenario])
        )
        print(f"  fitted without {' + '.join(drop)} ({time.perf_counter() - started:.0f} s)")
    print(
        f"\n{args.model} {args.precision} on {args.tp} x {args.gpu}, {args.engine} {args.version}, "
        f"{args.input_len}/{args.output_len} tokens; each cell mean TPOT, mean TTFT, output "
        "tok/s (ratio to the fit on all rows); -N: rows left out\n"
    )
    print(format_rows(fits, args.concurrency))
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
