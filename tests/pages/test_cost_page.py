"""Cost page: $/M tokens against utilisation, a month of demand, GPU-hours against tokens."""

from __future__ import annotations

from collections.abc import Callable

from streamlit.testing.v1 import AppTest

from tests.pages.conftest import frame_with, no_exception

PAGE = "pages/cost.py"


def test_default_costs_the_three_best_deployments(app: Callable[..., AppTest]) -> None:
    at = app(PAGE)
    monthly = frame_with(at, "deployment", "usd_per_month", "usd_per_month_autoscaled")
    assert len(monthly) == 3
    assert monthly["deployment"].str.startswith("#1 ").any()
    # An ideal autoscaler never pays more than capacity kept on for the peak.
    assert (monthly["usd_per_month_autoscaled"] <= monthly["usd_per_month"]).all()


def test_more_spare_replicas_cost_more(app: Callable[..., AppTest]) -> None:
    at = app(PAGE)
    before = frame_with(at, "deployment", "usd_per_month").set_index("deployment")
    at.number_input(key="cost_spares").set_value(3).run()
    no_exception(at)
    after = frame_with(at, "deployment", "usd_per_month").set_index("deployment")
    assert (after["replicas"] == before["replicas"] + 2).all()
    assert (after["usd_per_month"] > before["usd_per_month"]).all()
