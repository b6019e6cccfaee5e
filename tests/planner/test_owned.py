"""Owned servers: the hourly cost worked by hand, energy, break-even, the commitment mix, the
catalog rows and a user's override, and owned plans ranked beside rented ones."""

from __future__ import annotations

import csv
import math
from datetime import date
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.catalog import Catalog, load_catalog
from planner.catalog.schema import OwnedServer
from planner.cost import usd_per_million_tokens
from planner.errors import CatalogError, InvalidInputError
from planner.owned import (
    HOURS_PER_YEAR,
    RENTED_PUE,
    MixOption,
    break_even_grid,
    break_even_month,
    cheapest_mix,
    deployment_energy,
    hourly_cost,
    hourly_cost_rows,
    mix_options,
    owned_assumptions,
    owned_fleet,
    power_kw,
)

DATA = Path(__file__).resolve().parents[2] / "data"


def _server(**update: object) -> OwnedServer:
    """The by-hand server: USD 200,000 plus 10 % network and storage (capex 220,000), 10 %
    residual value, five years, 2 kW idle to 10 kW busy, PUE 1.5, USD 0.10/kWh, USD 150 per
    kW-month of colocation, USD 876 a month of operations."""
    fields: dict[str, object] = {
        "platform": "test-8",
        "gpu_id": "H100-SXM",
        "gpus": 8,
        "gpu_link": "nvlink",
        "server_usd": 200_000,
        "network_storage_pct": 10,
        "residual_value_pct": 10,
        "depreciation_years": 5,
        "cost_of_capital_pct": 0,
        "power_idle_kw": 2,
        "power_max_kw": 10,
        "pue": 1.5,
        "usd_per_kwh": 0.10,
        "colocation_usd_per_kw_month": 150,
        "ops_usd_per_server_month": 876,
        "source": "worked example",
        "as_of": date(2026, 12, 1),
    }
    fields.update(update)
    return OwnedServer.model_validate(fields)


# ----- by hand -------------------------------------------------------------------------------
def test_hourly_cost_per_million_tokens_and_break_even_by_hand() -> None:
    server = _server()
    cost = hourly_cost(server, 0.5)
    # capital: (220,000 - 22,000) / 5 = 39,600 a year; / 8,760 h = 4.5205 $/h
    assert cost.capex_usd == pytest.approx(220_000)
    assert round(cost.capital_usd_per_hour, 2) == 4.52
    # power at 50 %: 2 + (10 - 2) x 0.5 = 6 kW; x PUE 1.5 x 0.10 $/kWh = 0.90 $/h
    assert cost.power_kw == pytest.approx(6)
    assert cost.energy_usd_per_hour == pytest.approx(0.90)
    # colocation on the 10 kW provisioned: 10 x 150 x 12 / 8,760 = 2.0548 $/h
    assert round(cost.colocation_usd_per_hour, 2) == 2.05
    # operations: 876 x 12 / 8,760 = 1.20 $/h
    assert cost.ops_usd_per_hour == pytest.approx(1.20)
    # total: 4.5205 + 0.90 + 2.0548 + 1.20 = 8.6753 $/h
    assert round(cost.usd_per_hour, 2) == 8.68
    assert cost.usd_per_hour == pytest.approx(8.67534246, abs=1e-8)
    # $/M output tokens at 1,000 tokens/s when busy, busy half the time:
    # 8.6753 / (1,000 x 0.5 x 3,600) x 1e6 = 4.8196
    assert round(usd_per_million_tokens(cost.usd_per_hour, 1000, 0.5), 2) == 4.82
    # break-even against renting at 20 $/h always on (14,600 $/month): running costs
    # (0.90 + 2.0548 + 1.20) x 730 = 657 + 1,500 + 876 = 3,033 $/month;
    # 220,000 / (14,600 - 3,033) = 19.02 months
    fleet = owned_fleet(server, 1, 0.5)
    assert fleet.running_usd_per_month == pytest.approx(3033.0)
    months = fleet.break_even(20 * 730)
    assert months is not None and round(months, 2) == 19.02
    assert math.ceil(months) == 20


def test_cost_of_capital_by_hand() -> None:
    server = _server(cost_of_capital_pct=8)
    cost = hourly_cost(server, 0.5)
    # capital recovery factor at 8 % over 5 years: 0.08 / (1 - 1.08^-5) = 0.2504565;
    # (220,000 - 22,000 / 1.08^5) x 0.2504565 = (220,000 - 14,972.83) x 0.2504565 = 51,350.38
    # a year; / 8,760 = 5.8619 $/h; total 5.8619 + 0.90 + 2.0548 + 1.20 = 10.0167 $/h
    assert round(cost.capital_usd_per_hour * HOURS_PER_YEAR, 2) == 51_350.38
    assert round(cost.usd_per_hour, 2) == 10.02
    # break-even: the capex also costs 220,000 x 8 % / 12 = 1,466.67 $ a month:
    # 220,000 / (14,600 - 3,033 - 1,466.67) = 21.78 months
    months = owned_fleet(server, 1, 0.5).break_even(20 * 730)
    assert months is not None and round(months, 2) == 21.78


def test_the_shipped_hgx_h100_row_by_hand(catalog: Catalog) -> None:
    """The shipped defaults on the embedded HGX H100 row, worked by hand: USD 317,000, network
    and storage 20 %, residual 10 % after 5 years, cost of capital 10 %, 8.4 kW at any load,
    PUE 1.58, USD 0.0895/kWh, USD 184.06 per kW-month, operations 6 % a year of the price."""
    server = catalog.owned["hgx-h100-8"]
    cost = hourly_cost(server, 1.0)
    # capex 317,000 x 1.20 = 380,400; residual 38,040, worth 38,040 / 1.1^5 = 23,619.85 today;
    # capital recovery factor 0.1 / (1 - 1.1^-5) = 0.2637975;
    # (380,400 - 23,619.85) x 0.2637975 = 94,117.71 a year; / 8,760 = 10.7440 $/h
    assert cost.capex_usd == pytest.approx(380_400)
    assert round(cost.capital_usd_per_hour * HOURS_PER_YEAR, 2) == 94_117.71
    assert round(cost.capital_usd_per_hour, 2) == 10.74
    # energy 8.4 kW x 1.58 x 0.0895 = 1.1878 $/h; colocation 8.4 x 184.06 x 12 / 8,760 =
    # 2.1180 $/h; operations 317,000 x 6 % / 12 = 1,585 $/month, x 12 / 8,760 = 2.1712 $/h
    assert round(cost.energy_usd_per_hour, 4) == 1.1878
    assert round(cost.colocation_usd_per_hour, 4) == 2.1180
    assert server.ops_usd_per_server_month == 1585
    assert round(cost.ops_usd_per_hour, 4) == 2.1712
    # total 10.7440 + 1.1878 + 2.1180 + 2.1712 = 16.2211 $/h (2.03 $ a GPU-hour)
    assert round(cost.usd_per_hour, 2) == 16.22
    # at 1,000 output tokens/s busy all the time: 16.2211 / 3,600 x 1e6 / 1,000 = 4.51 $/M
    assert round(usd_per_million_tokens(cost.usd_per_hour, 1000, 1.0), 2) == 4.51
    # break-even against a p5.48xlarge on demand (55.04 $/h x 730 = 40,179.20 $/month):
    # running (1.1878 + 2.1180 + 2.1712) x 730 = 3,998.23 $/month, the capex's cost of capital
    # 380,400 x 10 % / 12 = 3,170.00 $/month; 380,400 / (40,179.20 - 3,998.23 - 3,170.00) =
    # 380,400 / 33,010.97 = 11.52 months
    fleet = owned_fleet(server, 1, 1.0)
    assert round(fleet.running_usd_per_month, 2) == 3998.23
    months = fleet.break_even(55.04 * 730)
    assert months is not None and round(months, 2) == 11.52


def test_the_owned_cost_table_adds_up_and_carries_its_sources(tmp_path: Path) -> None:
    server = _server(cost_of_capital_pct=8)
    rows = hourly_cost_rows(server, 0.5)
    by = {r["part"]: r for r in rows}
    assert list(by) == ["capital", "energy", "colocation", "operations", "total"]
    assert by["total"]["usd_per_hour"] == pytest.approx(hourly_cost(server, 0.5).usd_per_hour)
    assert by["total"]["usd_per_hour"] == pytest.approx(
        sum(r["usd_per_hour"] for r in rows if r["part"] != "total")
    )
    assert by["total"]["usd_per_gpu_hour"] == pytest.approx(by["total"]["usd_per_hour"] / 8)
    # each part names the figures it is computed from
    capital = by["capital"]["basis"]
    assert "USD 220,000" in capital and "8% cost of capital" in capital
    assert "6 kW at 50% busy x PUE 1.5" in by["energy"]["basis"]
    assert all("worked example" in r["source"] for r in rows)
    # a user's own row is marked theirs in the table and in the one-line summary
    _write_user_row(tmp_path, server_usd=250000, source="our own quote", as_of="2026-11-30")
    own = load_catalog(user_dir=tmp_path).owned["hgx-h100-8"]
    assert all("your own" in r["source"] for r in hourly_cost_rows(own))
    assert "your own owned_costs.csv row 'hgx-h100-8'" in owned_assumptions(own)


def test_no_shipped_owned_input_is_left_blank_to_flatter_owning(catalog: Catalog) -> None:
    """Every platform the issue names has a row; every priced row carries a residual value, a
    cost of capital, a network/storage share and operations (blank would cost them at 0)."""
    gpus = {s.gpu_id for s in catalog.owned.values()}
    named = {"H100-SXM", "H200", "B200", "B300", "MI300X", "MI325X", "MI355X", "RTXPRO6000"}
    assert named | {"L40S"} <= gpus
    priced = [s for s in catalog.owned.values() if s.server_usd is not None]
    assert {s.gpu_id for s in priced} == (named | {"L40S"}) - {"MI325X"}  # no MI325X price found
    for server in priced:
        assert server.residual_value_pct > 0 and server.cost_of_capital_pct > 0, server.platform
        assert server.network_storage_pct > 0 and server.ops_usd_per_server_month > 0
        assert server.depreciation_years <= 6
        # operations are 6 % of the server price a year
        assert server.ops_usd_per_server_month == pytest.approx(
            server.server_usd * 0.06 / 12, abs=0.01
        )
        assert "derived" in server.source or server.platform in {"hgx-h100-8", "dgx-b200-8"}


def test_power_without_an_idle_figure_is_the_maximum_at_any_load() -> None:
    server = _server(power_idle_kw=None)
    assert power_kw(server, 0.1) == power_kw(server, 1.0) == 10
    with pytest.raises(InvalidInputError, match="utilisation"):
        power_kw(server, 1.5)


def test_break_even_is_never_when_renting_is_cheaper_than_running() -> None:
    assert break_even_month(100_000, 5_000, 4_000) is None
    assert break_even_month(100_000, 1_000, 11_000) == pytest.approx(10.0)
    with pytest.raises(InvalidInputError, match="rent_usd_per_month"):
        break_even_month(1, 1, -1)


def test_break_even_grid_moves_with_utilisation_and_electricity() -> None:
    rows = break_even_grid(_server(), 2, 2 * 20 * 730, 0.5, [0.25, 0.5, 1.0], [0.05, 0.30])
    by = {(r["utilisation"], r["usd_per_kwh"]): r["break_even_months"] for r in rows}
    # at the current load and the row's own price it is the headline figure
    assert by[(0.5, 0.05)] is not None and by[(0.5, 0.30)] is not None
    assert by[(0.5, 0.05)] < by[(0.5, 0.30)]  # dearer power: later
    assert by[(1.0, 0.30)] is not None and by[(1.0, 0.30)] < by[(0.5, 0.30)]  # busier: sooner


# ----- properties ----------------------------------------------------------------------------
#: no deadline or slowness check: a loaded machine must not fail these
_PATIENT = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_PATIENT
@given(
    price=st.floats(1_000, 1e6),
    more=st.floats(1.01, 3),
    power=st.floats(0.5, 20),
    kwh=st.floats(0, 1),
    rate=st.floats(0, 30),
    u=st.floats(0, 1),
)
def test_cost_grows_with_price_power_electricity_and_rate(
    price: float, more: float, power: float, kwh: float, rate: float, u: float
) -> None:
    base = _server(
        server_usd=price, power_max_kw=power, power_idle_kw=None, usd_per_kwh=kwh,
        cost_of_capital_pct=rate,
    )  # fmt: skip
    cost = hourly_cost(base, u).usd_per_hour
    for field, value in (
        ("server_usd", price * more),
        ("power_max_kw", min(power * more, 200)),
        ("usd_per_kwh", kwh * more + 0.01),
        ("cost_of_capital_pct", min(rate * more + 0.5, 50)),
    ):
        assert hourly_cost(base.model_copy(update={field: value}), u).usd_per_hour > cost


@_PATIENT
@given(rent=st.floats(1_000, 1e6), more=st.floats(1.01, 3))
def test_break_even_comes_sooner_when_renting_costs_more(rent: float, more: float) -> None:
    first = break_even_month(100_000, 500, rent)
    later = break_even_month(100_000, 500, rent * more)
    assert first is not None and later is not None and later < first


# ----- energy --------------------------------------------------------------------------------
def test_energy_of_an_owned_and_a_rented_plan(catalog: Catalog) -> None:
    owned = deployment_energy(catalog, "owned-hgx-h100-8", 2, 0.5, 1000.0)
    assert owned is not None
    # 8.4 kW a server (no idle figure: at any load) x 2 x PUE 1.58 = 26.544 kW
    assert owned.facility_power_kw == pytest.approx(8.4 * 2 * 1.58)
    assert owned.joules_per_output_token == pytest.approx(26.544 * 1000 / 1000)
    assert owned.kwh_per_million_output_tokens == pytest.approx(26.544 / (1000 * 3600) * 1e6)
    rented = deployment_energy(catalog, "p5.48xlarge", 1, 0.5, 1000.0)
    assert rented is not None and rented.pue == RENTED_PUE
    # 8 x H100 SXM board power 700 W x PUE 1.58
    assert rented.facility_power_kw == pytest.approx(8 * 0.7 * RENTED_PUE)
    assert "Uptime" in rented.basis
    with pytest.raises(InvalidInputError, match="output_tokens_per_s"):
        deployment_energy(catalog, "p5.48xlarge", 1, 0.5, 0.0)


# ----- the commitment mix --------------------------------------------------------------------
def test_the_cheapest_mix_commits_the_base_and_rents_the_peak() -> None:
    demand = [1.0] * 12 + [3.0] * 12
    commit = MixOption(name="own", pricing="owned", usd_per_replica_hour=1.5, replica_rps=1.0)
    rent = MixOption(name="rent", pricing="on_demand", usd_per_replica_hour=2.0, replica_rps=1.0)
    mix = cheapest_mix(demand, [commit, rent])
    # b = 1: 1 x 24 x 1.5 + 12 h x 2 replicas x 2.0 = 36 + 48 = 84 $/day (b = 0: 96, b = 2:
    # 96, b = 3: 108)
    assert mix.committed == commit and mix.committed_replicas == 1 and mix.rented == rent
    assert mix.usd_per_day == pytest.approx(84.0)
    assert mix.usd_per_month == pytest.approx(84.0 * 730 / 24)
    assert mix.rented_replica_hours == 24
    assert [h["rented_rps"] for h in mix.hourly] == [0.0] * 12 + [2.0] * 12
    # renting only: 12 x 2 + 12 x 6 = 96; committing only: 3 x 24 x 1.5 = 108
    assert cheapest_mix(demand, [rent]).usd_per_day == pytest.approx(96.0)
    assert cheapest_mix(demand, [commit]).usd_per_day == pytest.approx(108.0)
    spares = cheapest_mix(demand, [commit, rent], spare_replicas=1)
    assert spares.usd_per_day == pytest.approx(84.0 + 24 * 1.5)
    with pytest.raises(InvalidInputError, match="demand_rps"):
        cheapest_mix([-1.0], [rent])


def test_shipped_commitment_prices_enter_the_mix(catalog: Catalog) -> None:
    """The catalog ships 1- and 3-year prices (AWS g6e in us-east-1, with their source); a
    g6e plan's replicas can then be bought at them, and a flat demand is served committed."""
    from planner.perf.model import get_performance_model
    from planner.recommend import (
        Demand,
        RecommendRequest,
        SearchSpace,
        Slo,
        perf_predictor,
        recommend,
    )

    for pricing, published in (("reserved_1y", 1.17), ("reserved_3y", 0.80)):
        price = catalog.price("g6e.xlarge", region="us-east-1", pricing=pricing)
        assert price.usd_per_hour == published and "modal.com" in price.source
        # every g6e size at the same share of its on-demand price
        big = catalog.price("g6e.12xlarge", region="us-east-1", pricing=pricing)
        on_demand = catalog.price("g6e.12xlarge", region="us-east-1").usd_per_hour
        assert big.usd_per_hour == pytest.approx(on_demand * published / 1.861, abs=1e-5)
        assert "derived" in big.notes
    request = RecommendRequest(
        model="meta-llama/Llama-3.1-8B-Instruct",
        input_len=1024,
        output_len=256,
        demand=Demand(avg_rate_rps=1.0, peak_rate_rps=1.0, spare_replicas=0),
        slo=Slo(ttft_p99_ms=5000, tpot_p99_ms=150),
        search=SearchSpace(instances=("g6e.xlarge",), regions=("us-east-1",), precisions=("bf16",)),
    )
    perf = get_performance_model(catalog)
    result = recommend(catalog, request, perf_predictor(catalog, request, perf))
    top = result.ranked[0]
    options = {o.pricing: o for o in mix_options(catalog, [top])}
    assert set(options) == {"on_demand", "spot", "reserved_1y", "reserved_3y"}
    od = options["on_demand"].usd_per_replica_hour
    # a replica-hour at each commitment: the on-demand one x the instance's price ratio
    assert options["reserved_1y"].usd_per_replica_hour == pytest.approx(od * 1.17 / 1.861)
    assert options["reserved_3y"].usd_per_replica_hour == pytest.approx(od * 0.80 / 1.861)
    # the same load all day: the 3-year reservation carries all of it (no spot: not allowed)
    flat = [o for o in options.values() if o.pricing != "spot"]
    mix = cheapest_mix([top.max_rps_per_replica] * 24, flat)
    assert mix.committed is not None and mix.committed.pricing == "reserved_3y"
    assert mix.rented_replica_hours == 0
    assert mix.usd_per_day == pytest.approx(24 * options["reserved_3y"].usd_per_replica_hour)


# ----- the catalog ---------------------------------------------------------------------------
def test_every_owned_input_shipped_has_a_source_and_a_date(catalog: Catalog) -> None:
    rows = list(csv.DictReader((DATA / "owned_costs.csv").open(encoding="utf-8")))
    assert rows and all(r["source"].strip() and r["as_of"].strip() for r in rows)
    assert {s.origin for s in catalog.owned.values()} == {"embedded"}
    priced = [s for s in catalog.owned.values() if s.server_usd is not None]
    unpriced = [s for s in catalog.owned.values() if s.server_usd is None]
    assert {s.instance for s in priced} <= set(catalog.instances)
    assert not {s.instance for s in unpriced} & set(catalog.instances)
    for server in priced:
        price = catalog.price(server.instance, pricing="owned")
        assert price.usd_per_hour == pytest.approx(hourly_cost(server, 1.0).usd_per_hour)
        assert price.region == "colocation" and server.source in price.source


def _write_user_row(user_dir: Path, **values: object) -> None:
    header = list(
        csv.DictReader((DATA / "owned_costs.csv").open(encoding="utf-8")).fieldnames or []
    )
    row = next(csv.DictReader((DATA / "owned_costs.csv").open(encoding="utf-8")))
    row.update({k: str(v) for k, v in values.items()})
    user_dir.mkdir(parents=True, exist_ok=True)
    with (user_dir / "owned_costs.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerow(row)


def test_a_users_row_overrides_the_embedded_one_and_is_marked_theirs(tmp_path: Path) -> None:
    _write_user_row(tmp_path, server_usd=250000, source="our own quote", as_of="2026-11-30")
    catalog = load_catalog(user_dir=tmp_path)
    server = catalog.owned["hgx-h100-8"]
    assert server.origin == "user" and server.server_usd == 250_000
    price = catalog.price(server.instance, pricing="owned")
    assert "your own" in price.source and "our own quote" in price.source
    assert price.usd_per_hour == pytest.approx(hourly_cost(server).usd_per_hour)
    assert price.usd_per_hour < load_catalog().price(server.instance, pricing="owned").usd_per_hour


def test_editing_owned_costs_keeps_the_fitted_model(tmp_path: Path) -> None:
    """A user's own prices, sources and dates of owned servers are not what a simulation
    reads: the fit's catalog fingerprint (and so the shipped fit) stays; a server's layout
    (its GPU link) is, and moves it."""
    from planner.perf.model import catalog_fingerprint

    embedded = catalog_fingerprint(load_catalog())
    _write_user_row(tmp_path, server_usd=250000, source="our own quote", as_of="2026-11-30")
    assert catalog_fingerprint(load_catalog(user_dir=tmp_path)) == embedded
    _write_user_row(tmp_path, gpu_link_bw_gbps=450)
    assert catalog_fingerprint(load_catalog(user_dir=tmp_path)) != embedded


def test_a_bad_owned_row_names_the_file_row_and_field(tmp_path: Path) -> None:
    _write_user_row(tmp_path, pue="0.5")
    with pytest.raises(CatalogError) as info:
        load_catalog(user_dir=tmp_path)
    message = str(info.value)
    assert "owned_costs.csv" in message and "pue" in message and "2" in message
    _write_user_row(tmp_path, gpu_id="Z999")
    with pytest.raises(CatalogError, match="unknown GPU 'Z999'"):
        load_catalog(user_dir=tmp_path)


# ----- owned beside rented in the search -----------------------------------------------------
def test_the_search_ranks_owned_servers_beside_rented_ones(catalog: Catalog) -> None:
    from planner.perf.model import get_performance_model
    from planner.recommend import (
        Demand,
        RecommendRequest,
        SearchSpace,
        Slo,
        perf_predictor,
        recommend,
    )

    request = RecommendRequest(
        model="meta-llama/Llama-3.1-70B-Instruct",
        input_len=2048,
        output_len=512,
        demand=Demand(avg_rate_rps=1.0, peak_rate_rps=2.0, spare_replicas=1),
        slo=Slo(ttft_p99_ms=5000, tpot_p99_ms=150),
        search=SearchSpace(
            instances=("owned-hgx-h100-8", "p5.48xlarge"), precisions=("bf16",)
        ),  # on-demand prices: the owned server is quoted at its owned cost all the same
    )
    perf = get_performance_model(catalog)
    result = recommend(catalog, request, perf_predictor(catalog, request, perf))
    by_provider = {rec.provider: rec for rec in reversed(result.ranked)}
    assert set(by_provider) == {"owned", "aws"}
    owned, rented = by_provider["owned"], by_provider["aws"]
    assert owned.pricing == "owned" and owned.region == "colocation"
    assert rented.pricing == "on_demand"
    # the same arithmetic: instances x the catalog's hourly price
    server_price = catalog.price("owned-hgx-h100-8", pricing="owned").usd_per_hour
    assert owned.usd_per_hour == pytest.approx(owned.instances_total * server_price)
    assert owned.rank < rented.rank  # 16.22 $/h a server against 55.04 $/h for p5.48xlarge
    for rec in (owned, rented):
        assert rec.kwh_per_million_output_tokens and rec.kwh_per_million_output_tokens > 0
        assert rec.joules_per_output_token and rec.joules_per_output_token > 0
        assert rec.energy_basis
