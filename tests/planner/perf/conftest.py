"""One fitted performance model for the whole session (the shipped fit of the public rows; every
test reads it)."""

from __future__ import annotations

import pytest

from planner.catalog import Catalog
from planner.perf.model import PerformanceModel, get_performance_model


@pytest.fixture(scope="session")
def model(catalog: Catalog) -> PerformanceModel:
    return get_performance_model(catalog)


@pytest.fixture(scope="session")
def roofline(model: PerformanceModel) -> list[dict[str, float]]:
    return model.roofline_predictions()
