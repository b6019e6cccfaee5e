"""Diagnosis accuracy on purpose-made pathologies (benchmarks_runner.pathologies).

For each pathology: run it on the simulated endpoint, diagnose, run the fixed plan, and print
what was expected and found, the fix, and the change of the fix's figure as the what-if
predicted it and as the fixed run measured it (same direction = the what-if was right).

    .venv/bin/python benchmarks/diagnose_bench.py [NAME ...]

Both the server and the diagnosis use the spec-sheet prior coefficients (no fit).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks_runner.pathologies import BY_NAME, PATHOLOGIES, fixed_deployment, run_pathology  # noqa: E402
from planner.catalog import load_catalog  # noqa: E402
from planner.diagnosis import diagnose, evidence_from_run  # noqa: E402
from planner.perf.model import PerformanceModel  # noqa: E402
from planner.run_files import read_run_dir  # noqa: E402


def main(names: list[str]) -> int:
    model = PerformanceModel(load_catalog())
    chosen = [BY_NAME[n] for n in names] if names else list(PATHOLOGIES)
    header = (
        f"{'pathology':40} {'expected':18} {'found':28} {'predicted':>10} {'measured':>10}  fix"
    )
    print(header)
    agree = total = 0
    with tempfile.TemporaryDirectory(prefix="servewise-diagnose-bench-") as tmp:
        for p in chosen:
            t0 = time.monotonic()
            coefficients = list(model.coefficients_for("vllm", p.plan["gpu"]))
            d = diagnose(
                evidence_from_run(read_run_dir(run_pathology(p, Path(tmp), coefficients))),
                model=model,
            )
            found = ",".join(f.key for f in d.found) or "-"
            predicted = measured = "-"
            fix_text = ""
            if p.finding is not None and p.finding in [f.key for f in d.found]:
                f = d.finding(p.finding)
                if f.fix is not None and f.fix.what_if is not None:
                    w = f.fix.what_if
                    b, a = getattr(w.before, p.predicted), getattr(w.after, p.predicted)
                    if p.predicted == "output_tok_per_s":
                        b, a = b / w.before.gpus, a / w.after.gpus
                    predicted = f"{(a - b) / b * 100:+.0f}%"
                    served, load, requests = fixed_deployment(p, f.fix.scenario_changes)
                    run = run_pathology(
                        p, Path(tmp), coefficients, served=served, load=load, requests=requests
                    )
                    after = diagnose(evidence_from_run(read_run_dir(run)), model=model)
                    mb = d.summary[p.measured] or 0.0
                    ma = after.summary[p.measured] or 0.0
                    if p.measured == "output_throughput":
                        mb, ma = mb / int(p.plan.get("tp", 1)), ma / int(served.get("tp", 1))
                    measured = f"{(ma - mb) / mb * 100:+.0f}%" if mb else "-"
                    total += 1
                    agree += (a > b) == (ma > mb)
                    fix_text = f"{f.fix.summary} [{f.fix.vllm_args}]"
            print(
                f"{p.name:40} {p.finding or '(none)':18} {found:28} {predicted:>10} "
                f"{measured:>10}  {fix_text}  ({time.monotonic() - t0:.0f} s)"
            )
    print(f"what-if direction agreed with the fixed run in {agree} of {total} pathologies")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
