"""data/measured_cloudrift.csv: CloudRift's raw `vllm bench serve` output files (GLM-4.6 on four
GPU types, Kimi-K2.5 NVFP4 on 4 x B200 with vLLM and SGLang).

The cells checked here quote the result blocks and server commands named in each row's
source_ref (cloudrift-ai/server-benchmark and cloudrift-ai/deplodock), so a typo fails here.
"""

from __future__ import annotations

import csv
import re

import pytest

from planner.catalog import Catalog, MeasuredResult
from planner.catalog.loader import EMBEDDED_DATA_DIR
from planner.perf.validation import source_key

FILE = EMBEDDED_DATA_DIR / "measured_cloudrift.csv"
REF = re.compile(r"^cloudrift-ai/(server-benchmark|deplodock)@[0-9a-f]{40}:\S+")


@pytest.fixture(scope="module")
def rows(catalog: Catalog) -> list[MeasuredResult]:
    with FILE.open(newline="") as f:
        sources = {r["source"] for r in csv.DictReader(f)}
    return [m for m in catalog.measured if m.source in sources]


def _one(rows: list[MeasuredResult], path_part: str) -> MeasuredResult:
    (row,) = [m for m in rows if path_part in m.source]
    return row


def test_every_row_names_its_file_commit_and_commands(rows: list[MeasuredResult]) -> None:
    assert len(rows) == 44
    for m in rows:
        assert m.source_ref and REF.match(m.source_ref), m.source_ref
        assert re.search(r"\((run|committed) .*20(25|26)(-\d\d-\d\d)?\)$", m.source), m.source
        assert m.notes and "server" in m.notes and "vllm bench serve" in m.notes
        assert m.ttft_stat == "mean" and m.itl_stat == "mean_tpot" and m.entrypoint == "serve"
        assert m.ttft_p99_ms and m.tpot_p99_ms and m.output_tok_per_s and m.load == "concurrency"
    assert {source_key(m) for m in rows} == {
        "cloudrift-ai/server-benchmark",
        "cloudrift-ai/deplodock",
    }
    assert {m.gpu for m in rows} == {"H200", "H100-SXM", "B200", "RTXPRO6000"}
    assert {(m.engine, m.engine_version) for m in rows} == {
        ("vllm", "0.11.0"), ("vllm", "0.11.2"), ("vllm", "0.14.1"), ("vllm", "0.17.0"),
        ("sglang", "0.5.9"),
    }  # fmt: skip


def test_glm_cells(rows: list[MeasuredResult]) -> None:
    # server-benchmark pro6000_x_8_zai-org_GLM-4.6-FP8_vllm_benchmark.txt (2025-10-16):
    # "Successful requests: 1024", "Maximum request concurrency: 256", "Total input tokens:
    # 1022553", "Output token throughput (tok/s): 1349.16", "Mean TTFT (ms): 8804.07",
    # "P99 TTFT (ms): 47041.77", "Mean TPOT (ms): 180.76", "P99 TPOT (ms): 187.61";
    # server "--tensor-parallel-size 8 ... --max-num-seqs 256 --max-model-len 8192
    # --kv-cache-dtype fp8"
    m = _one(rows, "pro6000_l40s_h100_h200/pro6000_x_8_zai-org_GLM-4.6-FP8")
    assert (m.gpu, m.num_gpus, m.tp, m.pp, m.precision) == ("RTXPRO6000", 8, 8, 1, "fp8")
    assert (m.concurrency, m.num_requests, m.input_len) == (256, 1024, round(1022553 / 1024))
    assert (m.output_tok_per_s, m.ttft_ms, m.ttft_p99_ms) == (1349.16, 8804.07, 47041.77)
    assert (m.itl_ms, m.tpot_p99_ms) == (180.76, 187.61)
    assert (m.max_num_seqs, m.max_model_len, m.kv_cache_dtype) == (256, 8192, "fp8")
    # deplodock 01_2026 h100/concurrency_64: 128 requests at 64, 1024000 tokens each way,
    # "Output token throughput (tok/s): 1349.45", "Mean TTFT (ms): 8402.09", "Mean TPOT (ms):
    # 46.31"; server "--max-num-seqs 256 --max-model-len 16384 --enable-expert-parallel
    # --kv-cache-dtype fp8"
    m = _one(rows, "h100/concurrency_64/")
    assert (m.gpu, m.input_len, m.output_len, m.num_requests) == ("H100-SXM", 8000, 8000, 128)
    assert (m.output_tok_per_s, m.ttft_ms, m.itl_ms) == (1349.45, 8402.09, 46.31)
    assert m.enable_expert_parallel and m.max_model_len == 16384 and m.kv_cache_dtype == "fp8"
    assert _one(rows, "h100/concurrency_64_no_ep/").enable_expert_parallel is None


def test_kimi_cells_are_the_base_model_at_fp4(rows: list[MeasuredResult]) -> None:
    kimi = [m for m in rows if "Kimi-K2.5-NVFP4" in m.source]
    assert len(kimi) == 19
    assert all(m.model == "moonshotai/Kimi-K2.5" and m.precision == "fp4" for m in kimi)
    assert all("checkpoint nvidia/Kimi-K2.5-NVFP4" in (m.notes or "") for m in kimi)
    assert all((m.gpu, m.num_gpus, m.tp, m.input_len) == ("B200", 4, 4, 8000) for m in kimi)
    # no server sets --kv-cache-dtype: both engines take the NVFP4 checkpoint's FP8 KV algorithm
    assert all(m.kv_cache_dtype == "fp8" and "kv_cache_quant_algo" in (m.notes or "") for m in kimi)
    assert all("--kv-cache-dtype" not in (m.notes or "").split(" | ")[0] for m in kimi)
    # b200x4_mc12_np40_mcr12_vllm_benchmark.txt (vllm/vllm-openai:v0.17.0): 40 requests at 12,
    # "Mean TTFT (ms): 836.41", "P99 TTFT (ms): 2369.92", "Mean TPOT (ms): 17.97"
    m = _one(rows, "b200x4_mc12_np40_mcr12_vllm_benchmark.txt")
    assert (m.engine_version, m.concurrency, m.num_requests, m.max_num_seqs) == (
        "0.17.0",
        12,
        40,
        12,
    )
    assert (m.ttft_ms, m.ttft_p99_ms, m.itl_ms) == (836.41, 2369.92, 17.97)
    # the SGLang run at 40 in flight queued: "Mean TTFT (ms): 23491.76", "P99 TTFT (ms):
    # 324037.57"; server "--tp 4 ... --max-running-requests 40 --mem-fraction-static 0.9"
    m = _one(rows, "b200x4_mc40_np40_mcr40_sglang_benchmark.txt")
    assert (m.engine, m.max_num_seqs, m.gpu_memory_utilization) == ("sglang", 40, 0.9)
    assert (m.ttft_ms, m.ttft_p99_ms) == (23491.76, 324037.57)
