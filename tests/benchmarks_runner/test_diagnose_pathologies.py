"""Each pathology on purpose, end to end (benchmarks_runner.pathologies): the simulated server
serves the pathology's engine settings (the performance model's engine in real time), the
runner measures it over HTTP on 127.0.0.1, the diagnosis finds exactly the expected mistake
with the right fix; then the server serves the plan with that fix and the run measures the
direction the fix's what-if predicted (one replica at its share of the load when the fix adds
replicas). A healthy run finds nothing.

Both sides use the spec-sheet prior coefficients (the server's ``--coefficients`` and an
unfitted model for the diagnosis), so no fit runs and the predictor and the server are the same
model. Timings are compared between two runs of one test, never with a wall-clock limit. A
machine busy with other work makes the client read chunks late and in bursts; the host-overhead
run is also diagnosed as such a client records it (its gaps collapsed), so what load does to the
client's readings is part of what the test proves is handled.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from benchmarks_runner.pathologies import PATHOLOGIES, Pathology, fixed_deployment, run_pathology
from planner.catalog import Catalog
from planner.diagnosis import Diagnosis, diagnose, evidence_from_run
from planner.perf.model import PerformanceModel
from planner.run_files import read_run_dir
from tests.patience import PATIENT_S

pytestmark = pytest.mark.timeout(2 * PATIENT_S)  # a hang detector (tests/patience.py)


@pytest.fixture(scope="module")
def prior(catalog: Catalog) -> PerformanceModel:
    return PerformanceModel(catalog)


def diagnosis_of(run_dir: Path, model: PerformanceModel) -> Diagnosis:
    return diagnose(evidence_from_run(read_run_dir(run_dir)), model=model)


def figure(d: Diagnosis, key: str, gpus: int) -> float:
    value = d.summary[key]
    assert value is not None
    return value / gpus if key == "output_throughput" else value


#: how late a starved client's event loop reads (p99 of its lag, s), as measured on two busy
#: cores with the client at nice 19 (see planner/diagnosis/checks/host.py)
STARVED_LAG_S = 0.6
READ_EVERY_S = 0.05


def read_by_a_lagging_client(run_dir: Path, out: Path) -> Path:
    """A copy of the run as a client whose event loop ran every 50 ms would have recorded it
    (what a machine loaded by other work does to the runner): each chunk time is the next
    read, chunks queued meanwhile share it, and the client self-check reports a 600 ms lag.
    A request's first and last chunk move by less than one read; its chunk gaps collapse."""

    def read_at(t: float | None) -> float | None:
        return None if t is None else math.ceil(t / READ_EVERY_S) * READ_EVERY_S

    shutil.copytree(run_dir, out)
    lines = (out / "requests.jsonl").read_text(encoding="utf-8").splitlines()
    rows = []
    for line in lines:
        row = json.loads(line)
        for key in ("first_chunk_s", "first_content_s", "end_s"):
            row[key] = read_at(row.get(key))
        row["chunk_times_s"] = [read_at(t) for t in row.get("chunk_times_s") or []]
        rows.append(json.dumps(row))
    (out / "requests.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    meta = json.loads((out / "run.json").read_text(encoding="utf-8"))
    meta["self_checks"] = [c for c in meta["self_checks"] if c["name"] != "client_cpu_saturation"]
    meta["self_checks"].append(
        {
            "name": "client_cpu_saturation",
            "ok": False,
            "message": f"client CPU 4% of one core, event-loop lag p99 {STARVED_LAG_S * 1e3:.1f} "
            "ms: the event loop ran late while this process used little CPU",
        }
    )
    (out / "run.json").write_text(json.dumps(meta), encoding="utf-8")
    gaps = evidence_from_run(read_run_dir(out)).requests
    assert gaps is not None  # the copy's chunk gaps are what a starved client sees: collapsed
    assert float(np.median(gaps.token_gap_s)) < float(np.median(gaps.tpot_s)) / 2
    return out


@pytest.mark.parametrize("p", PATHOLOGIES, ids=lambda p: p.name)
def test_a_pathology_is_found_and_its_fix_measures_as_predicted(
    p: Pathology, prior: PerformanceModel, tmp_path: Path
) -> None:
    coefficients = list(prior.coefficients_for("vllm", p.plan["gpu"]))
    run_dir = run_pathology(p, tmp_path, coefficients)
    d = diagnosis_of(run_dir, prior)
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
    if p.finding == "host_overhead":
        # the same run as a starved client reads it: the diagnosis does not change
        starved = diagnosis_of(read_by_a_lagging_client(run_dir, tmp_path / "starved"), prior)
        assert [f.key for f in starved.found] == [p.finding]
        fix = starved.finding(p.finding).fix
        assert fix is not None and p.fix_flag in fix.vllm_args
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
