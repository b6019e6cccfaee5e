"""Cost page: $/M tokens against utilisation, a month of demand, GPU-hours against tokens."""

from __future__ import annotations

from collections.abc import Callable

import pytest
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


def test_own_or_rent_mix_break_even_and_energy(app: Callable[..., AppTest]) -> None:
    at = app(PAGE)
    energy = frame_with(
        at, "deployment", "kwh_per_million_output_tokens", "joules_per_output_token"
    )
    assert len(energy) == 3 and (energy["kwh_per_million_output_tokens"] > 0).all()
    # the default scenario's ranking holds owned and rented plans: the mix commits (or owns)
    # a base and the break-even compares the owned plan with the rented ones
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Cheapest mix, a month"].startswith("$")
    mix = frame_with(at, "hour", "requests_per_s", "committed_rps", "rented_rps")
    assert len(mix) == 24
    served = mix["committed_rps"] + mix["rented_rps"]
    assert (served - mix["requests_per_s"]).abs().max() < 1e-9
    break_even = frame_with(at, "option", "rent_usd_per_month", "break_even_months")
    assert len(break_even) >= 1
    finite = break_even["break_even_months"].dropna()
    assert (finite > 0).all()
    assert "owned" not in set(break_even["option"].str.split().str[0])
    # what the owned server costs an hour, part by part, with the sources of its inputs
    owned = frame_with(at, "part", "usd_per_hour", "basis", "source").set_index("part")
    assert list(owned.index) == ["capital", "energy", "colocation", "operations", "total"]
    assert owned.loc["total", "usd_per_hour"] == pytest.approx(
        owned["usd_per_hour"].drop("total").sum()
    )
    assert owned["source"].str.contains("CoreWeave").all()  # the cost of capital's source
    charts = {c.proto.id for c in at.get("plotly_chart")}
    assert charts  # the mix and the break-even are drawn with the other charts
