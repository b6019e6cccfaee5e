"""Each pathology on purpose, end to end (benchmarks_runner.pathologies): the simulated server
serves the pathology's engine settings (the performance model's engine in real time), the
runner measures it over HTTP on 127.0.0.1, the diagnosis finds exactly the expected mistake
with the right fix; then the server serves the plan with that fix and the run measures the
direction the fix's what-if predicted (one replica at its share of the load when the fix adds
replicas). A healthy run finds nothing.

Both sides use the spec-sheet prior coefficients (the server's ``--coefficients`` and an
unfitted model for the diagnosis), so no fit runs and the predictor and the server are the same
model. Timings are compared between two runs of one test, never with a wall-clock limit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks_runner.pathologies import PATHOLOGIES, Pathology, fixed_deployment, run_pathology
from planner.catalog import Catalog
from planner.diagnosis import Diagnosis, diagnose, evidence_from_run
from planner.perf.model import PerformanceModel
from planner.run_files import read_run_dir

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def prior(catalog: Catalog) -> PerformanceModel:
    return PerformanceModel(catalog)


def diagnosis_of(run_dir: Path, model: PerformanceModel) -> Diagnosis:
    return diagnose(evidence_from_run(read_run_dir(run_dir)), model=model)


def figure(d: Diagnosis, key: str, gpus: int) -> float:
    value = d.summary[key]
    assert value is not None
    return value / gpus if key == "output_throughput" else value


@pytest.mark.parametrize("p", PATHOLOGIES, ids=lambda p: p.name)
def test_a_pathology_is_found_and_its_fix_measures_as_predicted(
    p: Pathology, prior: PerformanceModel, tmp_path: Path
) -> None:
    coefficients = list(prior.coefficients_for("vllm", p.plan["gpu"]))
    d = diagnosis_of(run_pathology(p, tmp_path, coefficients), prior)
    found = [f.key for f in d.found]
    if p.finding is None:
        assert found == [], [(f.key, f.headline) for f in d.found]
        assert not any(b.lit for b in d.branches)
        return
    assert found == [p.finding], [(f.key, f.headline) for f in d.found]
    finding = d.finding(p.finding)
    assert finding.fix is not None and p.fix_flag in finding.fix.vllm_args
    w = finding.fix.what_if
    assert w is not None
    before, after = getattr(w.before, p.predicted), getattr(w.after, p.predicted)
    if p.predicted == "output_tok_per_s":
        before, after = before / w.before.gpus, after / w.after.gpus
    assert (after > before) == (p.better == "up"), (p.predicted, before, after)
    # the plan with the fix, served and measured
    served, load, requests = fixed_deployment(p, finding.fix.scenario_changes)
    d_after = diagnosis_of(
        run_pathology(p, tmp_path, coefficients, served=served, load=load, requests=requests),
        prior,
    )
    measured_before = figure(d, p.measured, int(p.plan.get("tp", 1)))
    measured_after = figure(d_after, p.measured, int(served.get("tp", 1)))
    assert (measured_after > measured_before) == (p.better == "up"), (
        p.measured,
        measured_before,
        measured_after,
    )
