"""The GPUs of 2026 in the embedded catalog: sourced rows, and layouts, memory and the
performance model accept them (RTX PRO 6000 Blackwell Server Edition, B300, GB300, MI355X)."""

from __future__ import annotations

import math

import pytest

from planner.catalog import Catalog
from planner.engine import EngineConfig
from planner.layouts import evaluate_layout, precision_support
from planner.perf import Scenario, get_performance_model

NEW_GPUS = ("RTXPRO6000", "B300", "GB300", "MI355X")
LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"


@pytest.mark.parametrize("gpu_id", NEW_GPUS)
def test_new_gpu_rows_are_sourced_and_dated(catalog: Catalog, gpu_id: str) -> None:
    gpu = catalog.gpu(gpu_id)
    assert gpu.source.strip() and gpu.as_of.year == 2026
    # every 2026 part has native FP8 and FP4 units (Blackwell, Blackwell Ultra, CDNA4)
    assert gpu.fp8_dense_tflops and gpu.fp4_dense_tflops
    assert precision_support(gpu, "fp4") == (True, None)
    assert precision_support(gpu, "fp8") == (True, None)


def test_datasheet_figures_the_planner_relies_on(catalog: Catalog) -> None:
    rtx = catalog.gpu("RTXPRO6000")
    # Server Edition, not the 1,792 GB/s Workstation Edition
    assert (rtx.memory_gb, rtx.memory_bw_gbps, rtx.memory_type) == (96, 1597, "GDDR7")
    assert rtx.interconnect == "pcie" and rtx.interconnect_bw_gbps is None
    assert rtx.memory_bytes == 97887 * 2**20  # what nvidia-smi reports
    mi355x = catalog.gpu("MI355X")
    assert mi355x.compute_tflops("fp4") == pytest.approx(10066.3)  # native MXFP4, not weight-only
    assert mi355x.compute_tflops("fp8") == pytest.approx(5033.2)
    b300 = catalog.gpu("B300")
    # Blackwell Ultra: FP4 up, BF16/FP8 as on B200, INT8 cut to ~1/30 of FP8
    b200 = catalog.gpu("B200")
    assert b300.fp4_dense_tflops > b200.fp4_dense_tflops
    assert b300.bf16_dense_tflops == b200.bf16_dense_tflops
    assert b300.int8_dense_tops is not None and b300.int8_dense_tops < b300.fp8_dense_tflops / 20


def test_new_instances_have_prices_with_sources(catalog: Catalog) -> None:
    for name, gpu_id, gpus in [
        ("g7e.2xlarge", "RTXPRO6000", 1),
        ("g7e.48xlarge", "RTXPRO6000", 8),
        ("p6-b300.48xlarge", "B300", 8),
        ("BM.GPU.MI355X.8", "MI355X", 8),
        ("BM.GPU.GB300.4", "GB300", 4),
        ("BM.GPU.B300.8", "B300", 8),
    ]:
        instance = catalog.instance(name)
        assert (instance.gpu_id, instance.gpus) == (gpu_id, gpus)
        assert catalog.prices_for(name, pricing="on_demand"), name
    # g7e.2xlarge in us-east-1 on demand, straight from the SkyPilot AWS catalog
    assert catalog.price("g7e.2xlarge", "us-east-1").usd_per_hour == pytest.approx(3.36312)
    assert catalog.price("g7e.2xlarge", "us-east-1", "spot").usd_per_hour < 3.36312


def test_llama_70b_fits_one_rtx_pro_6000_in_fp8_but_not_in_bf16(catalog: Catalog) -> None:
    card = catalog.model(LLAMA_70B)
    one = catalog.instance("g7e.2xlarge")
    gpu = catalog.gpu("RTXPRO6000")
    fp8 = evaluate_layout(
        card, one, gpu, tp=1, precision="fp8", engine=EngineConfig(max_model_len=2560)
    )
    bf16 = evaluate_layout(
        card, one, gpu, tp=1, precision="bf16", engine=EngineConfig(max_model_len=2560)
    )
    assert fp8.feasible, fp8.reason
    assert not bf16.feasible and bf16.reason
    two = evaluate_layout(
        card,
        catalog.instance("g7e.12xlarge"),
        gpu,
        tp=2,
        precision="bf16",
        engine=EngineConfig(max_model_len=2560),
    )
    assert two.feasible, two.reason


@pytest.mark.parametrize(
    ("gpu_id", "instance", "tp", "precision"),
    [
        ("RTXPRO6000", "g7e.24xlarge", 4, "bf16"),
        ("RTXPRO6000", "g7e.2xlarge", 1, "fp8"),
        ("B300", "p6-b300.48xlarge", 1, "fp4"),
        ("GB300", "BM.GPU.GB300.4", 1, "bf16"),
        ("MI355X", "BM.GPU.MI355X.8", 1, "fp4"),
    ],
)
def test_performance_model_predicts_on_new_gpus(
    catalog: Catalog, gpu_id: str, instance: str, tp: int, precision: str
) -> None:
    model = get_performance_model(catalog)
    prediction = model.predict(
        Scenario(
            model=LLAMA_70B,
            gpu=gpu_id,
            tp=tp,
            instance=instance,
            precision=precision,
            input_len=2048,
            output_len=512,
            load="concurrency",
            concurrency=16,
            num_requests=32,
        )
    )
    assert math.isfinite(prediction.total_tok_per_s) and prediction.total_tok_per_s > 0


def test_bandwidth_orders_decode_speed_between_rtx_pro_6000_and_b300(catalog: Catalog) -> None:
    """Decode at small batch is bandwidth-bound: B300's 7.7 TB/s beats the RTX's 1.6 TB/s."""
    model = get_performance_model(catalog)

    def tpot(gpu_id: str, instance: str) -> float:
        p = model.predict(
            Scenario(
                model=LLAMA_70B,
                gpu=gpu_id,
                tp=1,
                instance=instance,
                precision="fp8",
                input_len=512,
                output_len=256,
                load="concurrency",
                concurrency=1,
                num_requests=4,
            )
        )
        return p.tpot_ms_mean

    assert tpot("B300", "p6-b300.48xlarge") < tpot("RTXPRO6000", "g7e.2xlarge") / 2
