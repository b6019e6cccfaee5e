"""One fitted performance model and its cross-validation for the whole session (the fit on the
526 public rows takes a few seconds; every test reads it)."""

from __future__ import annotations

import pytest

from planner.catalog import Catalog
from planner.perf.model import PerformanceModel, get_performance_model
from planner.perf.validation import HeldOut, cross_validate, roofline_predictions


@pytest.fixture(scope="session")
def model(catalog: Catalog) -> PerformanceModel:
    return get_performance_model(catalog)


@pytest.fixture(scope="session")
def roofline(model: PerformanceModel) -> list[dict[str, float]]:
    return roofline_predictions(model.samples)


@pytest.fixture(scope="session")
def held_out_gpu(model: PerformanceModel, roofline: list[dict[str, float]]) -> list[HeldOut]:
    return cross_validate(model.samples, "gpu", roofline=roofline)
