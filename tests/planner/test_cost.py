"""Cost: $/hour, $/token, $/request, monthly cost of a demand curve, GPU economics, cold start."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.catalog import Catalog
from planner.cost import (
    FIGURE_1_INSTANCES,
    cold_start_s,
    cost_per_request,
    deployment_usd_per_hour,
    gpu_economics,
    monthly_cost,
    token_costs,
    usd_per_million_tokens,
)
from planner.errors import InvalidInputError, UnknownEntityError
from tests.planner.test_layouts import build_catalog


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    return build_catalog(Path(tmp_path_factory.mktemp("cost-catalog")))


# ----- $/hour ------------------------------------------------------------------------------------


def test_deployment_price_is_instances_times_price(small: Catalog) -> None:
    assert deployment_usd_per_hour(small, "g6e.12xlarge", 2, "us-east-1") == pytest.approx(
        2 * 10.49264
    )
    assert deployment_usd_per_hour(small, "g6e.12xlarge", pricing="spot") == 4.5
    with pytest.raises(UnknownEntityError, match="reserved_1y"):
        deployment_usd_per_hour(small, "g6e.12xlarge", pricing="reserved_1y")
    with pytest.raises(InvalidInputError) as info:
        deployment_usd_per_hour(small, "g6e.12xlarge", pricing="cheap")
    assert info.value.field == "pricing"
    with pytest.raises(InvalidInputError, match="nodes"):
        deployment_usd_per_hour(small, "g6e.12xlarge", 0)
    with pytest.raises(UnknownEntityError, match="instance"):
        deployment_usd_per_hour(small, "x9.tiny")


# ----- $/token -----------------------------------------------------------------------------------


def test_usd_per_million_tokens_formula() -> None:
    # g6e.12xlarge at the measured 106 output tok/s (domain.md) and 532 total tok/s
    costs = token_costs(10.49264, output_tokens_per_s=106, total_tokens_per_s=532)
    assert costs.usd_per_million_output_tokens == pytest.approx(10.49264 / (106 * 3600) * 1e6)
    assert costs.usd_per_million_output_tokens == pytest.approx(27.50, abs=0.01)
    assert costs.usd_per_million_total_tokens == pytest.approx(5.48, abs=0.01)


def test_at_20_percent_utilisation_a_token_costs_5x() -> None:
    busy = usd_per_million_tokens(10.0, 1000.0, 1.0)
    idle = usd_per_million_tokens(10.0, 1000.0, 0.2)
    assert idle / busy == pytest.approx(5.0)


@given(
    price=st.floats(0.01, 500),
    tps=st.floats(0.1, 1e6),
    factor=st.floats(1.01, 100),
    util=st.floats(0.01, 1.0),
)
def test_cost_per_token_falls_with_throughput_and_rises_with_price(
    price: float, tps: float, factor: float, util: float
) -> None:
    base = usd_per_million_tokens(price, tps, util)
    assert usd_per_million_tokens(price, tps * factor, util) < base
    assert usd_per_million_tokens(price * factor, tps, util) > base
    assert usd_per_million_tokens(price, tps, util / factor) > base
    # one request per "token": the same formula without the 1e6
    assert cost_per_request(price, tps, util) == pytest.approx(base / 1e6)
    assert cost_per_request(price, tps * factor, util) < cost_per_request(price, tps, util)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((10.0, 0.0, 1.0), "tokens_per_s"),
        ((10.0, -5.0, 1.0), "tokens_per_s"),
        ((0.0, 5.0, 1.0), "usd_per_hour"),
        ((10.0, 5.0, 0.0), "utilisation"),
        ((10.0, 5.0, 1.5), "utilisation"),
    ],
)
def test_invalid_cost_inputs(args: tuple[float, float, float], field: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        usd_per_million_tokens(*args)
    assert info.value.field == field
    assert "(0, 1]" in str(info.value) or "> 0" in str(info.value)


def test_cost_per_request() -> None:
    assert cost_per_request(36.0, 2.0) == pytest.approx(0.005)
    assert cost_per_request(36.0, 2.0, 0.5) == pytest.approx(0.01)


# ----- a month of demand ------------------------------------------------------------------------


def test_monthly_cost_provisions_the_peak_plus_spares() -> None:
    month = monthly_cost(
        10.0,
        avg_requests_per_s=3.0,
        peak_requests_per_s=9.5,
        replica_requests_per_s=2.0,
        spare_replicas=1,
    )
    assert month.replicas_for_peak == 5 and month.replicas == 6
    assert month.usd_per_month == pytest.approx(6 * 10.0 * 730)
    assert month.avg_utilisation == pytest.approx(3.0 / 12.0)
    assert month.usd_per_request == pytest.approx(43_800 / (3.0 * 730 * 3600))
    assert month.usd_per_month_autoscaled == pytest.approx(10.0 * 730 * (1.5 + 1))
    exact = monthly_cost(
        1.0, avg_requests_per_s=4, peak_requests_per_s=4, replica_requests_per_s=2, spare_replicas=0
    )
    assert exact.replicas == 2 and exact.avg_utilisation == 1.0
    with pytest.raises(InvalidInputError, match="peak_requests_per_s"):
        monthly_cost(1.0, avg_requests_per_s=4, peak_requests_per_s=2, replica_requests_per_s=1)
    with pytest.raises(InvalidInputError, match="spare_replicas"):
        monthly_cost(
            1.0,
            avg_requests_per_s=1,
            peak_requests_per_s=2,
            replica_requests_per_s=1,
            spare_replicas=-1,
        )


# ----- GPU economics (the brief's Figure 1) -------------------------------------------------------


def check_figure_1(catalog: Catalog) -> None:
    rows = {
        r.gpu_id: r
        for r in gpu_economics(catalog, "us-east-1", "on_demand", instances=FIGURE_1_INSTANCES)
    }
    assert rows["L40S"].instance == "g6e.2xlarge"
    # L40S $0.006 per dense FP16 TFLOP-hour: $2.24208 / 362.05 TF
    assert rows["L40S"].usd_per_dense_tflop_hour["fp16"] == pytest.approx(0.006193, abs=5e-6)
    assert round(rows["L40S"].usd_per_dense_tflop_hour["fp16"], 3) == 0.006
    # A10G $0.017: $1.212 / 70 TF
    assert round(rows["A10G"].usd_per_dense_tflop_hour["fp16"], 3) == 0.017
    # L4 $0.041 per GB of VRAM: $0.9776 / 24 GB
    assert round(rows["L4"].usd_per_gb_hour, 3) == 0.041
    # A10G $0.0020 per GB/s: $1.212 / 600 GB/s
    assert round(rows["A10G"].usd_per_gbps_hour, 4) == 0.0020
    # three GPUs win three different contests
    assert min(rows.values(), key=lambda r: r.usd_per_dense_tflop_hour["fp16"]).gpu_id == "L40S"
    assert min(rows.values(), key=lambda r: r.usd_per_gbps_hour).gpu_id == "A10G"
    assert min(rows.values(), key=lambda r: r.usd_per_gb_hour).gpu_id == "L4"


def test_figure_1_from_a_small_catalog(small: Catalog) -> None:
    subset = Catalog(
        gpus={k: v for k, v in small.gpus.items() if k in FIGURE_1_INSTANCES},
        instances=small.instances,
        prices=small.prices,
    )
    check_figure_1(subset)


def test_figure_1_from_the_embedded_prices(catalog: Catalog) -> None:
    if not all(name in catalog.instances for name in FIGURE_1_INSTANCES.values()):
        pytest.skip("data/ does not list the 2xlarge instances yet")
    subset = Catalog(
        gpus={k: v for k, v in catalog.gpus.items() if k in FIGURE_1_INSTANCES},
        instances=catalog.instances,
        prices=catalog.prices,
    )
    check_figure_1(subset)


def test_default_instance_is_the_smallest_single_gpu_one(small: Catalog) -> None:
    rows = {r.gpu_id: r for r in gpu_economics(small)}
    assert rows["L40S"].instance == "g6e.xlarge" and rows["L40S"].usd_per_gpu_hour == 1.861
    assert rows["A10G"].instance == "g5.xlarge"
    # only an 8-GPU instance: price per GPU
    assert rows["H100-SXM"].instance == "p5.48xlarge"
    assert rows["H100-SXM"].usd_per_gpu_hour == pytest.approx(55.04 / 8)
    assert "MI300X" not in rows  # priced in eastus only
    assert "MI300X" in {r.gpu_id for r in gpu_economics(small, region="eastus")}
    assert "fp8" not in rows["A10G"].usd_per_dense_tflop_hour
    azure_only = gpu_economics(small, region="eastus", provider="azure")
    assert [r.gpu_id for r in azure_only] == ["MI300X"]
    assert gpu_economics(small, provider="azure") == []
    with pytest.raises(InvalidInputError, match="instances"):
        gpu_economics(small, instances={"L4": "g6e.2xlarge"})


def test_flops_per_byte_h100_295_h200_206(small: Catalog) -> None:
    rows = {r.gpu_id: r for r in gpu_economics(small)}
    assert rows["H100-SXM"].flops_per_byte_bf16 == pytest.approx(295, abs=1)
    assert small.gpu("H200").flops_per_byte("bf16") == pytest.approx(206, abs=1)


def test_flops_per_byte_from_the_embedded_gpus(catalog: Catalog) -> None:
    assert catalog.gpu("H100-SXM").flops_per_byte("bf16") == pytest.approx(295, abs=1)
    assert catalog.gpu("H200").flops_per_byte("bf16") == pytest.approx(206, abs=1)


# ----- cold start --------------------------------------------------------------------------------


def test_cold_start_is_bytes_over_bandwidth() -> None:
    assert cold_start_s(141.1e9, 2.0) == pytest.approx(70.55)
    assert cold_start_s(141.1e9, 2.0, fixed_s=30) == pytest.approx(100.55)
    with pytest.raises(InvalidInputError, match="load_gbps"):
        cold_start_s(1e9, 0)
    with pytest.raises(InvalidInputError, match="weight_bytes"):
        cold_start_s(-1, 1)
