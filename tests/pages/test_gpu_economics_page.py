"""GPU economics page: Figure 1 from the catalog's prices, $/M tokens from measurements."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from streamlit.testing.v1 import AppTest

from tests.pages.conftest import frame_with, no_exception

PAGE = "pages/gpu_economics.py"


def test_default_reproduces_the_brief_figure_one_economics(app: Callable[..., AppTest]) -> None:
    at = app(PAGE)
    spec = frame_with(at, "gpu", "usd_per_tflop_hour_bf16", "usd_per_gb_hour")
    by_gpu = spec.set_index("gpu")
    assert {"L40S", "A10G", "L4", "H100-SXM"} <= set(by_gpu.index)
    assert (spec["region"] == "us-east-1").all()
    assert (by_gpu["usd_per_gpu_hour"] > 0).all()


def test_figure_one_instances_price_the_2xlarge_sizes(app: Callable[..., AppTest]) -> None:
    at = app(PAGE)
    before = frame_with(at, "gpu", "usd_per_gb_hour").set_index("gpu")
    at.toggle(key="econ_fig1").set_value(True).run()
    no_exception(at)
    after = frame_with(at, "gpu", "usd_per_gb_hour").set_index("gpu")
    assert after.loc["L40S", "instance"] == "g6e.2xlarge"
    assert before.loc["L4", "instance"] != after.loc["L4", "instance"]
    # docs/domain.md: L40S $0.006 per dense FP16 TFLOP-hour, A10G $0.017, L4 $0.041 per GB,
    # A10G $0.0020 per GB/s. Three GPUs win three different contests.
    assert after.loc["L40S", "usd_per_tflop_hour_bf16"] == pytest.approx(0.006, abs=0.0005)
    assert after.loc["A10G", "usd_per_tflop_hour_bf16"] == pytest.approx(0.017, abs=0.0005)
    assert after.loc["L4", "usd_per_gb_hour"] == pytest.approx(0.041, abs=0.0005)
    assert after.loc["A10G", "usd_per_gbps_hour"] == pytest.approx(0.0020, abs=0.00005)
    three = after.loc[["L40S", "A10G", "L4"]]
    winners = {
        three["usd_per_tflop_hour_bf16"].idxmin(),
        three["usd_per_gb_hour"].idxmin(),
        three["usd_per_gbps_hour"].idxmin(),
    }
    assert winners == {"L40S", "L4", "A10G"}


def test_measured_token_costs_of_the_brief_headline_case(app: Callable[..., AppTest]) -> None:
    # 4 x L40S (g6e.12xlarge, $10.49264/h), TP=4, 2,048 in / 512 out: 106.0 output tok/s.
    at = app(PAGE, model="deepseek-ai/DeepSeek-R1-Distill-Llama-70B")
    costs = frame_with(at, "label", "kind", "usd_per_m_output")
    measured = costs[costs["kind"] == "measured"].set_index("label")
    headline = measured.loc["g6e.12xlarge TP4 PP1 bf16 (vllm)", "usd_per_m_output"]
    assert headline == pytest.approx(10.49264 / (106.0 * 3600) * 1e6, rel=1e-6)
    at.toggle(key="util_manual").set_value(True).run()
    at.slider(key="util").set_value(20).run()  # 20% busy: 5x the cost per token
    costs = frame_with(at, "label", "kind", "usd_per_m_output").set_index("label")
    assert costs.loc["g6e.12xlarge TP4 PP1 bf16 (vllm)", "usd_per_m_output"] == pytest.approx(
        5 * headline, rel=1e-6
    )


def test_owned_servers_beside_their_rented_gpu(app: Callable[..., AppTest]) -> None:
    at = app(PAGE)
    owned = frame_with(at, "gpu", "owned_usd_per_bf16_tflop_hour", "rented_usd_per_bf16_tflop_hour")
    by_gpu = owned.set_index("gpu")
    assert {"H100-SXM", "B200"} <= set(by_gpu.index)  # the priced owned servers
    h100 = by_gpu.loc["H100-SXM"]
    # an owned HGX H100 (16.22 $/h for 8 GPUs, tests/planner/test_owned.py works it by hand)
    # is cheaper a TFLOP-hour than any rented H100
    assert h100["owned_usd_per_gpu_hour"] == pytest.approx(16.2211 / 8, abs=0.001)
    assert h100["owned_usd_per_bf16_tflop_hour"] < h100["rented_usd_per_bf16_tflop_hour"]
    # the table (and its CSV) says where each owned cost comes from
    assert "Thinkmate" in h100["owned_source"] and "CoreWeave" in h100["owned_source"]
    assert "derived" in by_gpu.loc["MI355X", "owned_source"]  # no public server price
