"""Disaggregated prefill/decode: KV transfer, pool balance, wide EP and predict's columns."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from planner.catalog import Catalog
from planner.cli import main
from planner.errors import InvalidInputError
from planner.perf.disaggregated import (
    KV_LINKS,
    OVERLAP_EFFICIENCY,
    DisaggregatedLayout,
    KvTransfer,
    PoolLayout,
    PoolScales,
    balanced_pools,
    balanced_ratio,
    disaggregated_model,
    ep_all_to_all_nvlink_s,
    ep_all_to_all_s,
    fitted_scales,
    kv_streams,
    kv_transfer_bytes,
    kv_transfer_s,
    layout_from_row,
    link_bytes_per_s,
    predict_disaggregated,
    remote_copies_per_token,
    replay_pools,
)
from planner.perf.model import PerformanceModel
from planner.perf.scenario import Scenario
from planner.perf.step_time import IDX, StepBatch, engine_ranks, request_path_s, step_features

LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"
DEEPSEEK_R1 = "deepseek-ai/DeepSeek-R1-0528"


# ----- KV transfer: worked numbers ----------------------------------------------------------
def test_kv_bytes_of_a_4096_token_prompt_gqa_and_mla(catalog: Catalog) -> None:
    llama = catalog.model(LLAMA_70B).architecture
    # 80 layers x 2 x 8 KV heads x 128 x 2 B = 327,680 B a token (domain.md)
    assert kv_transfer_bytes(llama, 4096, 2.0) == 4096 * 327_680 == 1_342_177_280
    r1 = catalog.model(DEEPSEEK_R1).architecture
    # 61 layers x (512 latent + 64 rope) x 1 B (FP8 cache) = 35,136 B a token
    assert kv_transfer_bytes(r1, 4096, 1.0) == 4096 * 61 * 576 == 143_917_056
    assert kv_transfer_bytes(r1, 4096, 2.0) == 2 * 143_917_056


def test_kv_transfer_time_over_infiniband_efa_and_nvlink(catalog: Catalog) -> None:
    llama = catalog.model(LLAMA_70B).architecture
    r1 = catalog.model(DEEPSEEK_R1).architecture
    h100 = catalog.gpu("H100-SXM")
    p5 = catalog.instance("p5.48xlarge")
    gqa_bytes = 1_342_177_280.0
    # GQA at TP8 both sides: 8 shards (one KV head each) over 8 NICs in parallel
    assert kv_streams(llama, 8, 8) == 8
    assert kv_streams(llama, 8, 4) == 4
    ib = KV_LINKS["infiniband"]
    ib_rate = link_bytes_per_s(ib, h100, None)
    assert ib_rate == 50e9  # 400 Gb/s a GPU
    # 10 us + 1.342 GB / (8 x 50 GB/s x 0.86) = 3.9117 ms
    assert kv_transfer_s(gqa_bytes, 8, ib_rate, ib) == pytest.approx(3.9117e-3, rel=1e-4)
    # EFA on p5.48xlarge: 3200 Gb/s over 8 GPUs = 50 GB/s a GPU; 30 us + 3.9017 ms
    efa = KV_LINKS["efa"]
    efa_rate = link_bytes_per_s(efa, h100, p5)
    assert efa_rate == 50e9
    assert kv_transfer_s(gqa_bytes, 8, efa_rate, efa) == pytest.approx(3.9317e-3, rel=1e-4)
    # NVLink on H100: 900 GB/s both ways = 450 GB/s a direction at 0.96: 5 us + 0.3884 ms
    nv = KV_LINKS["nvlink"]
    nv_rate = link_bytes_per_s(nv, h100, None)
    assert nv_rate == 450e9
    assert kv_transfer_s(gqa_bytes, 8, nv_rate, nv) == pytest.approx(0.39336e-3, rel=1e-4)
    # MLA: the latent is on every TP rank, one copy travels: 10 us + 143.9 MB / 43 GB/s
    assert kv_streams(r1, 8, 8) == 1
    assert kv_transfer_s(143_917_056.0, 1, ib_rate, ib) == pytest.approx(3.3569e-3, rel=1e-4)


# ----- balance --------------------------------------------------------------------------------
def test_balanced_ratio_and_pool_sizes_on_a_worked_example() -> None:
    # a prefill replica serves 2 req/s, a decode replica 6: three prefill replicas a decode one
    assert balanced_ratio(2.0, 6.0) == 3.0
    # 10 req/s: ceil(10 / 2) = 5 prefill and ceil(10 / 6) = 2 decode replicas
    assert balanced_pools(10.0, 2.0, 6.0) == (5, 2)
    # at most 80% busy: ceil(10 / 1.6) = 7, ceil(10 / 4.8) = 3
    assert balanced_pools(10.0, 2.0, 6.0, utilization=0.8) == (7, 3)
    with pytest.raises(InvalidInputError, match="capacity"):
        balanced_ratio(0.0, 6.0)
    with pytest.raises(InvalidInputError, match="utilization"):
        balanced_pools(10.0, 2.0, 6.0, utilization=1.5)


# ----- wide expert parallelism ------------------------------------------------------------------
def test_all_to_all_over_the_network_worked_example() -> None:
    ib = KV_LINKS["infiniband"]
    args = {
        "hidden": 7168,
        "experts_per_token": 8,
        "gpus_per_node": 8,
        "moe_layers": 58,
        "dispatch_bytes": 1.0,
        "nic_bytes_per_s": 50e9,
        "link": ib,
    }
    # 128 tokens x 8 x 7168 x (1 + 2) B x (1 - 8/32) = 16,515,072 B a layer: 384.07 us at
    # 43 GB/s + 2 x 10 us; 58 MoE layers: 23.436 ms
    wide = ep_all_to_all_s(128, ep_size=32, **args)  # type: ignore[arg-type]
    assert wide == pytest.approx(58 * (16_515_072 / 43e9 + 20e-6), rel=1e-9)
    assert wide == pytest.approx(23.436e-3, rel=1e-4)
    # within one node the step-time model's NVLink terms price it: nothing on the network
    assert ep_all_to_all_s(128, ep_size=8, **args) == 0.0  # type: ignore[arg-type]
    # more nodes, a larger remote share
    assert ep_all_to_all_s(128, ep_size=64, **args) > wide  # type: ignore[arg-type]


def _r1(**update: object) -> Scenario:
    base = Scenario(
        engine="vllm",
        model=DEEPSEEK_R1,
        precision="fp8",
        gpu="H200",
        input_len=2000,
        output_len=500,
        load="rate",
        request_rate=2.0,
    )
    return base.model_copy(update=update)


def test_wide_ep_decode_pays_the_all_to_all_only_across_nodes(model: PerformanceModel) -> None:
    prefill = PoolLayout(replicas=1, tp=1, ep=8, attention_dp=8)
    node = disaggregated_model(
        model, _r1(), DisaggregatedLayout(prefill=prefill, decode=prefill, kv_link="infiniband")
    )
    wide_pool = PoolLayout(replicas=1, tp=1, ep=16, attention_dp=16)
    wide = disaggregated_model(
        model, _r1(), DisaggregatedLayout(prefill=prefill, decode=wide_pool, kv_link="infiniband")
    )
    assert not node.decode.wide_ep and wide.decode.wide_ep
    assert node.decode.all_to_all_s(32) == 0.0
    assert wide.decode.all_to_all_s(32) > 0.0
    # the busiest rank's experts (ep_imbalance over 16 ranks) and the network both show in the
    # decode step at the same batch a rank
    assert wide.decode_pool.step_s(32) > wide.decode.all_to_all_s(32)
    # a wide-EP pool's step pays what the two-batch overlap does not hide of the all-to-all
    # (in the idle term): max(0, all-to-all - compute) + (1 - eta) x min(all-to-all, compute);
    # the node-sized one's steps pay nothing on the network
    wide_prefill = disaggregated_model(
        model, _r1(), DisaggregatedLayout(prefill=wide_pool, decode=wide_pool)
    )
    idle = IDX["idle"]
    assert node.prefill_state.step(0.5).terms[idle] == 0
    batch = StepBatch.of([], [(2000, 0)])
    pool = wide_prefill.prefill
    x = pool.features(batch)
    compute = float(pool.c @ x) - pool.c[idle] * x[idle]
    a2a = pool.all_to_all_s(2000)
    assert a2a > 0
    eta = OVERLAP_EFFICIENCY
    assert x[idle] == pytest.approx(max(0.0, a2a - compute) + (1 - eta) * min(a2a, compute))
    # the overlap's efficiency reproduces SGLang's decode ablation it is taken from: 104 ms of
    # compute and 54 ms of all-to-all, 25.5% faster overlapped than not
    assert (104 + 54) / (104 + (1 - eta) * 54) == pytest.approx(1.255, abs=0.002)
    assert pool.step_s(batch) == pytest.approx(compute + pool.c[idle] * x[idle])
    # an engine over two nodes without expert parallelism is refused, naming the column
    with pytest.raises(InvalidInputError, match="decode_ep"):
        disaggregated_model(
            model,
            _r1(),
            DisaggregatedLayout(
                prefill=prefill, decode=PoolLayout(replicas=1, tp=1, ep=1, attention_dp=16)
            ),
        )


def test_remote_copies_per_token_worked_numbers() -> None:
    # decode (DeepEP low-latency kernels): one copy an expert off the node, 8 x (1 - 8/32) = 6
    assert remote_copies_per_token(8, 32, 8, node_dedup=False) == pytest.approx(6.0)
    # prefill (normal kernels): one copy a node: 3 other nodes x (1 - (3/4)^8) = 2.69966
    assert remote_copies_per_token(8, 32, 8, node_dedup=True) == pytest.approx(2.69966, rel=1e-5)
    # within a node nothing crosses the network either way
    assert remote_copies_per_token(8, 8, 8, node_dedup=True) == 0.0
    assert remote_copies_per_token(8, 8, 8, node_dedup=False) == 0.0
    # the prefill all-to-all of 128 tokens at EP32: 128 x 2.69966 x 7168 x 3 B a layer
    ib = KV_LINKS["infiniband"]
    t = ep_all_to_all_s(
        128,
        hidden=7168,
        experts_per_token=8,
        ep_size=32,
        gpus_per_node=8,
        moe_layers=58,
        dispatch_bytes=1.0,
        nic_bytes_per_s=50e9,
        link=ib,
        node_dedup=True,
    )
    assert t == pytest.approx(58 * (128 * 2.69966 * 7168 * 3 / 43e9 + 20e-6), rel=1e-5)


def test_all_to_all_inside_an_nvlink_domain_worked_example() -> None:
    # 1,000 tokens x 8 x 7168 x (0.5625 + 2) B x (1 - 1/48) a layer over 900 GB/s x 0.96,
    # + 2 x 5 us = 0.1765 ms; 58 layers = 10.24 ms
    t = ep_all_to_all_nvlink_s(
        1000,
        hidden=7168,
        experts_per_token=8,
        ep_size=48,
        moe_layers=58,
        dispatch_bytes=0.5625,
        nvlink_bytes_per_s=900e9,
    )
    per_layer = 1000 * 8 * 7168 * 2.5625 * (47 / 48)
    assert t == pytest.approx(58 * (per_layer / (900e9 * 0.96) + 10e-6), rel=1e-9)
    assert t == pytest.approx(10.239e-3, rel=1e-3)


def test_large_ep_inside_nvl72_replaces_the_gather_with_an_all_to_all(
    model: PerformanceModel,
) -> None:
    # DeepSeek-R1 FP4 decode on 48 GB200 ranks (one NVL72 rack): no network, but DeepEP's
    # all-to-all over NVLink instead of every rank gathering every rank's tokens
    sc = _r1(gpu="GB200", precision="fp4")
    pool = PoolLayout(replicas=1, tp=1, ep=48, attention_dp=48)
    prefill = PoolLayout(replicas=1, tp=1, ep=4, attention_dp=4)
    dm = disaggregated_model(
        model, sc, DisaggregatedLayout(prefill=prefill, decode=pool, kv_link="nvlink")
    )
    assert dm.decode.large_ep and not dm.decode.wide_ep
    batch = StepBatch.of([2000] * 64, [])
    x = dm.decode.features(batch)
    from planner.perf.step_time import step_features

    gathered = step_features(batch, dm.decode.dep)
    assert gathered[IDX["allreduce_nvlink"]] > 0
    assert x[IDX["allreduce_nvlink"]] == pytest.approx(0.0, abs=1e-12)
    assert x[IDX["idle"]] == pytest.approx(dm.decode.all_to_all_s(64)) and x[IDX["idle"]] > 0
    # the all-to-all moves k copies of 64 tokens; the gather moved all 48 ranks' tokens
    assert x[IDX["idle"]] < gathered[IDX["allreduce_nvlink"]]
    # an EP8 pool (one HGX board) keeps the step-time model's own gather and scatter
    small = PoolLayout(replicas=1, tp=1, ep=8, attention_dp=8)
    board = disaggregated_model(
        model, sc, DisaggregatedLayout(prefill=small, decode=small, kv_link="nvlink")
    )
    assert not board.decode.large_ep
    assert board.decode.all_to_all_s(64) == 0.0


def test_the_fitted_scale_multiplies_moe_pools_only(model: PerformanceModel) -> None:
    pool = PoolLayout(replicas=1, tp=1, ep=8, attention_dp=8)
    layout = DisaggregatedLayout(prefill=pool, decode=pool)
    half = PoolScales(prefill=0.5, decode=0.5, rows=1, source="test")
    plain = disaggregated_model(model, _r1(), layout, PoolScales())
    scaled = disaggregated_model(model, _r1(), layout, half)
    assert scaled.decode_pool.step_s(32) == pytest.approx(0.5 * plain.decode_pool.step_s(32))
    assert scaled.prefill_state.saturation_rate() == pytest.approx(
        2.0 * plain.prefill_state.saturation_rate(), rel=1e-6
    )
    # a dense model's pools keep the step-time model's own figures
    dense = DisaggregatedLayout(
        prefill=PoolLayout(replicas=1, tp=4), decode=PoolLayout(replicas=1, tp=4)
    )
    a = disaggregated_model(model, _llama(), dense, PoolScales())
    b = disaggregated_model(model, _llama(), dense, half)
    assert a.decode_pool.step_s(16) == b.decode_pool.step_s(16)
    # the shipped scale is read from data/disaggregated_fit.json and says so
    shipped = fitted_scales()
    assert shipped.rows >= 15 and 0.3 < shipped.decode < 1.5
    prediction = predict_disaggregated(model, _r1(), layout)
    assert any("scaled by the fit" in r for r in prediction.prediction.uncertain_because)


# ----- the pools against an aggregated deployment ------------------------------------------------
def _llama(**update: object) -> Scenario:
    base = Scenario(
        engine="vllm",
        model=LLAMA_70B,
        precision="bf16",
        gpu="H100-SXM",
        tp=4,
        input_len=4000,
        output_len=300,
        load="rate",
        request_rate=2.0,
    )
    return base.model_copy(update=update)


def test_decode_pool_tpot_is_free_of_prefill_interference(model: PerformanceModel) -> None:
    layout = DisaggregatedLayout(
        prefill=PoolLayout(replicas=2, tp=4), decode=PoolLayout(replicas=1, tp=4), kv_link="efa"
    )
    dm = disaggregated_model(model, _llama(), layout)
    aggregated = model.steady_state(_llama(num_gpus=4)).at_rate(0.6)
    assert aggregated.stable and aggregated.prefill_step_share > 0.01
    # the same deployment and batch: a decode-only step is the aggregated replica's decode step
    # (to 0.1%: the aggregated steady state averages the layer floor over a Poisson load's
    # running batch, SteadyStateModel._poisson_terms, where the pool prices its mean batch; 3e-5
    # here, Llama-70B at TP 4 being past most of its floor)
    batch = aggregated.decode_seqs
    assert dm.decode_pool.step_s(batch) == pytest.approx(aggregated.decode_step_s, rel=1e-3)
    # and the aggregated TPOT carries the prefill chunks its steps share (their share of the
    # steps times what a chunk adds to a step)
    gap = aggregated.prefill_step_share * (aggregated.prefill_step_s - aggregated.decode_step_s)
    assert aggregated.tpot_mean_s - dm.decode_pool.step_s(batch) == pytest.approx(gap, rel=0.5)
    assert dm.decode_pool.step_s(batch) < aggregated.tpot_mean_s

    disagg = predict_disaggregated(model, _llama(), layout)
    together = model.predict_steady(_llama(num_gpus=12))
    assert disagg.stable
    assert disagg.prediction.tpot_ms_mean < together.tpot_ms_mean
    assert disagg.prediction.tpot_ms_p99 < together.tpot_ms_p99
    # TTFT = prefill pool (queue + prompt + request path) + transfer + the decode pool's entry:
    # the rest of a step in progress (busy 1 - e^-d), its first step, its own request path
    pre = dm.prefill_state.at_rate(2.0 / 2)
    dec = dm.decode_pool.at_rate(2.0)
    path = request_path_s(dm.decode.c, True, engine_ranks(dm.decode.dep))  # TP 4: log2 4 = 2
    assert path > request_path_s(dm.decode.c) > 0
    entry = (1 - math.exp(-dec.running)) * dec.step_s / 2 + dec.step_s + path
    expected_ms = (pre.ttft_mean_s + dm.transfer_s + entry) * 1e3
    assert disagg.prediction.ttft_ms_mean == pytest.approx(expected_ms, rel=1e-9)
    # 1.31 GB of KV (4000 x 327,680 B) over 4 EFA streams at 50 GB/s x 0.86, plus 30 us
    assert disagg.kv_transfer_bytes == 4000 * 327_680
    assert disagg.kv_transfer_ms == pytest.approx(30e-3 + 4000 * 327_680 / (4 * 43e9) * 1e3)
    assert 0 < disagg.prefill_utilization < 1 and 0 < disagg.decode_utilization < 1
    assert disagg.balanced_prefill_per_decode == pytest.approx(
        disagg.decode_capacity_rps / disagg.prefill_capacity_rps
    )
    assert disagg.output_tok_per_s_per_gpu == pytest.approx(2.0 * 300 / 12)
    assert disagg.prediction.far_from_data
    assert any("disaggregated" in r for r in disagg.prediction.uncertain_because)


def test_a_rate_beyond_a_pool_is_unstable_and_a_closed_loop_settles(
    model: PerformanceModel,
) -> None:
    layout = DisaggregatedLayout(
        prefill=PoolLayout(replicas=1, tp=4), decode=PoolLayout(replicas=1, tp=4)
    )
    over = predict_disaggregated(model, _llama(request_rate=50.0), layout)
    assert not over.stable and over.prediction.ttft_ms_mean == float("inf")
    assert over.prefill_utilization == 1.0
    loop = predict_disaggregated(
        model, _llama(load="concurrency", concurrency=8.0, request_rate=None), layout
    )
    assert loop.stable
    # Little's law: 8 in flight = rate x E2E
    assert loop.prediction.request_per_s * loop.prediction.e2e_ms_mean / 1e3 == pytest.approx(
        8.0, rel=1e-3
    )


def test_each_pool_has_its_own_gpu_and_engine_settings(model: PerformanceModel) -> None:
    h100 = PoolLayout(replicas=1, tp=4)
    h200 = PoolLayout(replicas=1, tp=4, gpu="H200", engine_settings={"max_num_seqs": 64})
    same = disaggregated_model(model, _llama(), DisaggregatedLayout(prefill=h100, decode=h100))
    mixed = disaggregated_model(model, _llama(), DisaggregatedLayout(prefill=h100, decode=h200))
    assert mixed.prefill.dep.gpu.gpu_id == "H100-SXM" and mixed.decode.dep.gpu.gpu_id == "H200"
    assert mixed.decode.dep.max_num_seqs == 64 and same.decode.dep.max_num_seqs != 64
    # H200's 4.8 TB/s against H100's 3.35: a faster decode step at the same batch
    assert mixed.decode_pool.step_s(16) < same.decode_pool.step_s(16)
    with pytest.raises(InvalidInputError, match=r"decode\.engine_settings"):
        disaggregated_model(
            model,
            _llama(),
            DisaggregatedLayout(
                prefill=h100, decode=PoolLayout(replicas=1, tp=4, engine_settings={"tp": 8})
            ),
        )
    with pytest.raises(InvalidInputError, match="max_num_seqs"):
        disaggregated_model(
            model,
            _llama(),
            DisaggregatedLayout(
                prefill=PoolLayout(replicas=1, tp=4, engine_settings={"max_num_seqs": -3}),
                decode=h100,
            ),
        )


# ----- the scenario columns ---------------------------------------------------------------------
def test_layout_columns_blank_or_bad() -> None:
    assert layout_from_row({"model": LLAMA_70B, "prefill_tp": " ", "kv_link": ""}) is None
    layout = layout_from_row(
        {
            "prefill_replicas": "3",
            "prefill_tp": "4",
            "decode_replicas": "1",
            "decode_tp": "8",
            "decode_ep": "8",
            "kv_link": "RoCE",
        }
    )
    assert layout is not None and layout.kv_link == "roce"
    assert layout.prefill.gpus == 12 and layout.decode.gpus == 8 and layout.decode.ep == 8
    bad = [
        ({"prefill_replicas": "1", "decode_replicas": "1", "decode_ep": "3"}, "decode_ep=3"),
        (
            {"prefill_replicas": "1", "decode_replicas": "1", "kv_link": "pigeon"},
            "kv_link='pigeon'",
        ),
        ({"prefill_replicas": "1", "decode_tp": "2"}, "decode_replicas"),
        ({"prefill_replicas": "1.5", "decode_replicas": "1"}, "prefill_replicas='1.5'"),
        ({"prefill_replicas": "1", "decode_replicas": "0"}, "decode_replicas='0'"),
    ]
    for row, named in bad:
        with pytest.raises(InvalidInputError) as err:
            layout_from_row(row)
        assert named in str(err.value) and "\n" not in str(err.value)


COLUMNS = (
    "scenario_id,engine,model,precision,gpu,num_gpus,tp,input_len,output_len,load,request_rate,"
    "prefill_replicas,prefill_tp,prefill_ep,prefill_attention_dp,decode_replicas,decode_tp,"
    "decode_ep,decode_attention_dp,kv_link\n"
)


def test_predict_csv_round_trip_with_pool_columns(
    tmp_path: Path, model: PerformanceModel, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        f"agg,vllm,{LLAMA_70B},bf16,H100-SXM,12,4,4000,300,rate,2,,,,,,,,,",
        f"disagg,vllm,{LLAMA_70B},bf16,H100-SXM,,4,4000,300,rate,2,2,4,1,1,1,4,1,1,efa",
        f"badep,vllm,{LLAMA_70B},bf16,H100-SXM,,4,4000,300,rate,2,2,4,1,1,1,4,2,1,efa",
        f"dense,vllm,{LLAMA_70B},bf16,H100-SXM,,4,4000,300,rate,2,2,4,1,1,1,4,4,1,efa",
        f"badlink,vllm,{LLAMA_70B},bf16,H100-SXM,,4,4000,300,rate,2,2,4,1,1,1,4,1,1,smoke",
    ]
    source = tmp_path / "in.csv"
    source.write_text(COLUMNS + "\n".join(rows) + "\n", encoding="utf-8")
    out = tmp_path / "out.csv"
    assert main(["predict", "--scenarios", str(source), "--out", str(out), "--public-only"]) == 0
    got = {r["scenario_id"]: r for r in csv.DictReader(out.open(encoding="utf-8"))}
    agg, disagg = got["agg"], got["disagg"]
    assert agg["pred_error"] == "" and agg["pred_kv_transfer_ms"] == ""
    assert agg["pred_prefill_utilization"] == ""
    assert float(agg["pred_output_tok_per_s_per_gpu"]) == pytest.approx(
        float(agg["pred_output_tok_per_s"]) / 12,
        rel=1e-5,  # both cells are 6 digits
    )
    assert disagg["pred_error"] == ""
    assert float(disagg["pred_output_tok_per_s_per_gpu"]) == pytest.approx(600 / 12, rel=1e-4)
    assert float(disagg["pred_kv_transfer_ms"]) == pytest.approx(
        30e-3 + 4000 * 327_680 / (4 * 43e9) * 1e3, rel=1e-4
    )
    assert 0 < float(disagg["pred_prefill_utilization"]) < 1
    assert 0 < float(disagg["pred_decode_utilization"]) < 1
    assert float(disagg["pred_tpot_ms_p50"]) < float(agg["pred_tpot_ms_p50"])
    assert disagg["prefill_replicas"] == "2"  # input columns pass through
    assert "decode_ep=2" in got["badep"]["pred_error"]
    assert "decode_ep=4" in got["dense"]["pred_error"] and "dense" in got["dense"]["pred_error"]
    assert "kv_link='smoke'" in got["badlink"]["pred_error"]
    assert "predicted 2 of 5 scenarios" in capsys.readouterr().out


# ----- a run's requests replayed through both pools ---------------------------------------------
@pytest.fixture(scope="module")
def prior(catalog: Catalog) -> PerformanceModel:
    """The unfitted model (the spec-sheet prior coefficients): the figures of
    benchmarks/disaggregated_replay_bench.py, whatever the shipped fit says."""
    return PerformanceModel(catalog)


def test_one_request_replayed_is_its_steps_transfer_and_two_request_paths(
    model: PerformanceModel,
) -> None:
    """A lone 1,000-token prompt: one prefill step (the whole prompt, one token), the prefill
    answer's request path, its KV over EFA, the decode rank's first step (the prompt's last
    partial block: 1,000 = 62 x 16 + 8 tokens, 992 cached) and the decode request path; then
    one decode step a token."""
    layout = DisaggregatedLayout(
        prefill=PoolLayout(replicas=1, tp=4), decode=PoolLayout(replicas=1, tp=4), kv_link="efa"
    )
    dm = disaggregated_model(model, _llama(), layout)
    transfer = KvTransfer.between(dm.prefill.dep, dm.decode.dep, layout, KV_LINKS["efa"])
    one = replay_pools(dm.prefill, dm.decode, transfer, [0.5], [1000], [4])
    prefill = dm.prefill.step_s(StepBatch.of([], [(1000, 0)]))
    first = dm.decode.step_s(StepBatch.of([], [(8, 992)]))
    prefill_path = request_path_s(dm.prefill.c, True, engine_ranks(dm.prefill.dep))
    path = request_path_s(dm.decode.c, True, engine_ranks(dm.decode.dep))
    expected = prefill + prefill_path + transfer.seconds_of(1000) + first + path
    assert one.ttft_s[0] == pytest.approx(expected, rel=1e-9)
    # tokens 2-4: decode steps at contexts 1,001-1,003
    steps = [dm.decode.step_s(StepBatch.of([1000 + k])) for k in (1, 2, 3)]
    assert one.tpot_s[0] == pytest.approx(sum(steps) / 3, rel=1e-9)
    assert one.e2e_s[0] == pytest.approx(expected + sum(steps), rel=1e-9)


def test_a_rate_run_of_stated_requests_is_predicted_as_those_requests(
    prior: PerformanceModel,
) -> None:
    """A Verify run (a rate and a number of requests) is predicted as its own seeded arrivals
    replayed through both pools; a long one meets the steady state, a short one follows its own
    arrivals (seeds 0 and 1 of 40 requests differ by more than 10%, as the runs do)."""
    layout = DisaggregatedLayout(
        prefill=PoolLayout(replicas=1, tp=4), decode=PoolLayout(replicas=1, tp=4)
    )
    base = _llama(input_len=2048, output_len=32, request_rate=4.0)
    steady_state = predict_disaggregated(prior, base, layout)
    assert steady_state.stable
    steady = steady_state.prediction
    long = predict_disaggregated(prior, base.model_copy(update={"num_requests": 2000}), layout)
    assert long.prediction.ttft_ms_mean == pytest.approx(steady.ttft_ms_mean, rel=0.06)
    assert long.prediction.tpot_ms_mean == pytest.approx(steady.tpot_ms_mean, rel=0.03)
    assert any("replayed through both pools" in n for n in long.prediction.notes)
    assert not any("replayed" in n for n in steady.notes)
    # the steady state's other figures stay (capacity, utilisation, throughput)
    assert (
        long.prefill_utilization == predict_disaggregated(prior, base, layout).prefill_utilization
    )
    short = [
        predict_disaggregated(
            prior, base.model_copy(update={"num_requests": 40, "seed": seed}), layout
        ).prediction.ttft_ms_mean
        for seed in (0, 1)
    ]
    assert abs(short[1] / short[0] - 1) > 0.10
    # the interval keeps its factors around the replayed centre
    p = long.prediction
    assert p.ttft_ms_mean_low / p.ttft_ms_mean == pytest.approx(
        steady.ttft_ms_mean_low / steady.ttft_ms_mean, rel=1e-9
    )
    # beyond a pool's capacity the steady state's verdict stands: unbounded
    over = predict_disaggregated(
        prior, base.model_copy(update={"request_rate": 50.0, "num_requests": 40}), layout
    )
    assert not over.stable and over.prediction.ttft_ms_mean == float("inf")


def test_a_pool_engine_steps_with_its_all_to_all(model: PerformanceModel) -> None:
    """The simulated pools' engines take a step's terms from the prediction's own function: a
    DeepSeek-R1 decode pool of EP16 over two H200 nodes pays the network all-to-all (what the
    two-batch overlap leaves of it) in every step, as the prediction does."""
    from benchmarks_runner.simulated.disaggregated import pool_timing
    from planner.plan import Load, Plan, PlanPool, PlanWorkload

    plan = Plan(
        model=DEEPSEEK_R1,
        gpu="H200",
        tp=1,
        precision="fp8",
        replicas=1,
        prefill=PlanPool(replicas=1, tp=1, ep=8, attention_dp=8, gpu="H200"),
        decode=PlanPool(replicas=1, tp=1, ep=16, attention_dp=16, gpu="H200", nodes=2),
        kv_link="infiniband",
        workload=PlanWorkload.of(2000, 64),
        load=Load.rate(2.0),
    )
    layout = plan.disaggregated_layout()
    assert layout is not None
    scenario = plan.scenario()
    dm = disaggregated_model(model, scenario, layout)
    assert dm.decode.wide_ep
    coefficients = [float(v) for v in dm.decode.c]
    pool = pool_timing(plan, scenario, "decode", model.catalog, coefficients=coefficients)
    assert len(pool.ranks) == 16
    engine = pool.ranks[0].engine
    engine.submit(2000, 8, 2000)
    engine.step()  # the prompt's last partial block and the first token
    seconds = engine.step()  # one decode step at context 2,001
    batch = StepBatch.of([2001])
    assert seconds == pytest.approx(dm.decode.step_s(batch), rel=1e-9)
    # the all-to-all left after the overlap is in the step (the idle term, coefficient 1) and
    # replaces the attention-DP gather the plain step-time terms price: the old pools' step
    paid = dm.decode.features(batch)[IDX["idle"]]
    assert paid > 0 and step_features(batch, dm.decode.dep)[IDX["idle"]] == 0
    plain = float(np.asarray(coefficients) @ step_features(batch, dm.decode.dep))
    # how much depends on the fit (7.6% with the layer floor fitted, 10%+ before it)
    assert abs(seconds - plain) > 0.05 * seconds


def test_each_interval_of_the_pools_takes_its_own_metrics_multiplier(
    model: PerformanceModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With vLLM's TTFT factor at 3 and its p99 TPOT factor at 2 (no release spread), the pools'
    TTFT interval triples its log half-width and the p99 TPOT's doubles, while throughput's and
    mean TPOT's do not move: each interval widens by its own metric's multiplier, as an
    aggregated prediction's does (before, every one took throughput's)."""
    layout = DisaggregatedLayout(
        prefill=PoolLayout(replicas=1, tp=4), decode=PoolLayout(replicas=1, tp=4)
    )
    from planner.perf import uncertainty

    metrics = ("output_tok_per_s", "ttft", "tpot", "ttft_p99", "tpot_p99")
    payload: dict[str, object] = {
        "multipliers": {str(n): 1.0 for n in range(4)},
        "release_spread": dict.fromkeys(metrics, 0.0),
    }

    def predict(ttft: float, tpot_p99: float) -> object:
        payload["family_factors"] = {"vllm": {"ttft": ttft, "tpot_p99": tpot_p99}}
        path = tmp_path / f"cal{ttft}.json"
        path.write_text(json.dumps(payload), encoding="utf-8")
        monkeypatch.setattr(uncertainty, "CALIBRATION_FILE", path)
        uncertainty.reload_calibration()
        return predict_disaggregated(model, _llama(), layout).prediction

    try:
        one, wide = predict(1.0, 1.0), predict(3.0, 2.0)
    finally:
        uncertainty.reload_calibration()

    def half(p: object, name: str) -> float:
        return math.log(getattr(p, f"{name}_high") / getattr(p, name))

    assert half(one, "ttft_ms_mean") > 0 and half(one, "tpot_ms_p99") > 0
    assert half(wide, "ttft_ms_mean") == pytest.approx(3 * half(one, "ttft_ms_mean"))
    assert half(wide, "ttft_ms_p99") == pytest.approx(half(one, "ttft_ms_p99"))
    assert half(wide, "tpot_ms_p99") == pytest.approx(2 * half(one, "tpot_ms_p99"))
    assert half(wide, "tpot_ms_mean") == pytest.approx(half(one, "tpot_ms_mean"))
    assert half(wide, "output_tok_per_s") == pytest.approx(half(one, "output_tok_per_s"))
