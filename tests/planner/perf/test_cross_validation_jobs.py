"""Cross-validation in forked processes (``planner validate --jobs``) gives the rows one
process gives: each fold is fitted and predicted as it would be alone, and the predictions come
back to their rows."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from planner.perf.calibration import FitSample, FittedCoefficients, fit_coefficients
from planner.perf.model import PerformanceModel
from planner.perf.validation import cross_validate, source_key

#: four small sources: four folds of a few seconds each, rate and closed-loop rows among them
SOURCES = (
    "sgl-project/sglang",
    "ROCm/rocm-blogs",
    "datacrunch-research/h200-benchmarks",
    "docs.nvidia.com/nim",
)


def _rows_of(
    model: PerformanceModel, roofline: list[dict[str, float]], sources: Sequence[str]
) -> tuple[list[FitSample], list[dict[str, float]]]:
    """The fitted rows of ``sources`` and their roofline baselines."""
    chosen = [i for i, s in enumerate(model.samples) if source_key(s.result) in sources]
    return [model.samples[i] for i in chosen], [roofline[i] for i in chosen]


FORKS = pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="the platform does not fork"
)


@FORKS
def test_folds_in_forked_processes_predict_what_one_process_predicts(
    model: PerformanceModel, roofline: list[dict[str, float]], tmp_path: Path
) -> None:
    samples, roof = _rows_of(model, roofline, SOURCES)
    assert {source_key(s.result) for s in samples} == set(SOURCES)
    test_only = [e.sample for e in model.excluded if e.sample is not None][:2]
    alone = cross_validate(samples, "source", roofline=roof, test_only=test_only)

    def fit(rows: Sequence[FitSample]) -> FittedCoefficients:  # says which process fitted
        (tmp_path / f"{os.getpid()}-{len(rows)}").touch()
        return fit_coefficients(rows)

    forked = cross_validate(samples, "source", roofline=roof, test_only=test_only, jobs=3, fit=fit)
    fitted_by = {int(p.name.split("-")[0]) for p in tmp_path.iterdir()}
    # every fold fitted once: the four sources', and the excluded rows' own where they differ
    plan = {source_key(s.result) for s in [*samples, *test_only]}
    assert len(list(tmp_path.iterdir())) == len(plan) >= len(SOURCES)
    assert fitted_by and os.getpid() not in fitted_by  # and none of them here
    assert len(forked) == len(alone) >= len(samples)
    for a, b in zip(alone, forked, strict=True):
        assert a.sample is b.sample  # the parent's own rows, given back
        for f in dataclasses.fields(a):
            if f.name != "sample":
                assert getattr(a, f.name) == getattr(b, f.name), f.name


@FORKS
def test_a_fold_process_that_dies_is_an_error_and_not_a_wait(
    model: PerformanceModel, roofline: list[dict[str, float]]
) -> None:
    """A fold's process killed (the machine out of memory) fails the cross-validation at once."""
    samples, roof = _rows_of(model, roofline, SOURCES[:2])

    def dies(rows: Sequence[FitSample]) -> FittedCoefficients:
        os._exit(3)

    with pytest.raises(BrokenProcessPool):
        cross_validate(samples, "source", roofline=roof, jobs=2, fit=dies)
