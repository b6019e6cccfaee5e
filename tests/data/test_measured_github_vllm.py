"""data/measured_github_vllm.csv: vLLM serving results transcribed from vllm-project GitHub pages.

Each row is one `vllm bench serve` / `benchmark_serving.py` result block; the cells checked
here are copied from the block named in the row's source_ref (the lines quoted below are the
source's own output, abbreviated).
"""

from __future__ import annotations

import csv
import re

import pytest

from planner.catalog.loader import EMBEDDED_DATA_DIR, load_catalog
from planner.catalog.schema import MeasuredResult

FILE = EMBEDDED_DATA_DIR / "measured_github_vllm.csv"
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


@pytest.fixture(scope="module")
def rows() -> list[MeasuredResult]:
    with FILE.open(newline="") as f:
        sources = [r["source"] for r in csv.DictReader(f)]
    catalog = load_catalog()
    mine = [m for m in catalog.measured if m.source in set(sources)]
    assert len(mine) == len(sources)
    return mine


def _by_source(rows: list[MeasuredResult], source: str) -> MeasuredResult:
    (row,) = [m for m in rows if m.source == source]
    return row


def test_row_count_and_every_row_cites_a_dated_page(rows: list[MeasuredResult]) -> None:
    assert len(rows) == 5
    for m in rows:
        assert m.source.startswith(("vllm-project/vllm pull request", "vllm-project/recipes"))
        assert m.source_ref and DATE.search(m.source_ref), m.source_ref
        assert m.engine == "vllm" and m.engine_version
        # the version came from the page or from the release current at its date: noted
        assert m.notes and ("inferred from date" in m.notes or "v0.11.0" in m.notes)
        assert m.ttft_stat == "mean" and m.itl_stat == "mean_tpot"
        assert m.ttft_p99_ms and m.tpot_p99_ms and m.output_tok_per_s


def test_recipe_qwen3_next_b200_cells(rows: list[MeasuredResult]) -> None:
    # vllm-project/recipes Qwen/Qwen3-Next.md, "B200 Outputs":
    #   Successful requests: 1000 / Maximum request concurrency: 256
    #   Total input tokens: 2043736 / Total generated tokens: 957462
    #   Output token throughput (tok/s): 8118.18 / Mean TTFT (ms): 1387.84
    #   P99 TTFT (ms): 8148.70 / Mean TPOT (ms): 29.40 / P99 TPOT (ms): 45.72
    m = _by_source(rows, "vllm-project/recipes Qwen/Qwen3-Next.md")
    assert (m.gpu, m.num_gpus, m.tp, m.precision) == ("B200", 4, 4, "bf16")
    assert (m.concurrency, m.num_requests) == (256, 1000)
    assert (m.input_len, m.output_len) == (round(2043736 / 1000), round(957462 / 1000))
    assert m.output_tok_per_s == pytest.approx(8118.18)
    assert (m.ttft_ms, m.ttft_p99_ms) == pytest.approx((1387.84, 8148.70))
    assert (m.itl_ms, m.tpot_p99_ms) == pytest.approx((29.40, 45.72))


def test_pull_request_blocks(rows: list[MeasuredResult]) -> None:
    # vllm PR 26887 (v0.11.0, 2 x H100, Qwen3-Next-80B-A3B-Instruct-FP8), 128 in / 1024 out,
    # "Before:": Output token throughput 2886.49, Mean TTFT 363.53, P99 TTFT 738.74,
    # Mean TPOT 21.36, P99 TPOT 21.83
    m = _by_source(rows, "vllm-project/vllm pull request 26887")
    assert (m.engine_version, m.precision, m.tp, m.concurrency) == ("0.11.0", "fp8", 2, 64)
    assert (m.output_tok_per_s, m.ttft_ms, m.itl_ms) == pytest.approx((2886.49, 363.53, 21.36))
    # vllm PR 23151 "WO tuned configs (TP=1, EP=1, on H100)": Output token throughput 739.79,
    # Mean TTFT 267.22, P99 TTFT 454.62, Mean TPOT 13.18, P99 TPOT 13.80
    m = _by_source(rows, "vllm-project/vllm pull request 23151")
    assert (m.model, m.gpu, m.concurrency) == ("Qwen/Qwen3-30B-A3B", "H100-SXM", 10)
    assert (m.ttft_p99_ms, m.tpot_p99_ms) == pytest.approx((454.62, 13.80))
    # vllm PR 23696 "FlashInfer:" gpt-oss-120b -tp 8 on B200, ShareGPT: 7404.72 tok/s out,
    # Mean TTFT 3449.17, Mean TPOT 94.12; all 1000 prompts sent at once
    m = _by_source(rows, "vllm-project/vllm pull request 23696")
    assert (m.load, m.dataset, m.num_requests) == ("max_throughput", "sharegpt", 1000)
    assert (m.output_tok_per_s, m.ttft_ms, m.itl_ms) == pytest.approx((7404.72, 3449.17, 94.12))


def test_pull_request_43232_b200_block_with_its_fp8_kv_cache(rows: list[MeasuredResult]) -> None:
    # vllm PR 43232, 2026-05-29, block "current" on B200 (commands from the 2026-06-03 rerun:
    # vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 --tensor-parallel-size 4
    # --kv-cache-dtype fp8 --max-model-len 32768 --gpu-memory-utilization 0.85 ...):
    #   Successful requests: 128 / Maximum request concurrency: 64
    #   Total input tokens: 3840000 / Total generated tokens: 128000
    #   Output token throughput (tok/s): 853.59 / Total token throughput (tok/s): 26461.39
    #   Mean TTFT (ms): 15855.81 / P99 TTFT (ms): 55192.74
    #   Mean TPOT (ms): 58.31 / P99 TPOT (ms): 71.77
    m = _by_source(rows, "vllm-project/vllm pull request 43232")
    assert (m.model, m.gpu, m.num_gpus, m.tp) == (
        "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "B200", 4, 4,
    )  # fmt: skip
    assert (m.kv_cache_dtype, m.gpu_memory_utilization, m.max_model_len) == ("fp8", 0.85, 32768)
    assert (m.input_len, m.output_len) == (3840000 // 128, 128000 // 128)
    assert (m.concurrency, m.num_requests) == (64, 128)
    assert (m.output_tok_per_s, m.total_tok_per_s) == pytest.approx((853.59, 26461.39))
    assert (m.ttft_ms, m.ttft_p99_ms) == pytest.approx((15855.81, 55192.74))
    assert (m.itl_ms, m.tpot_p99_ms) == pytest.approx((58.31, 71.77))
