"""data/measured_benchmaq.csv: Scicom's vLLM runs from its llm-benchmaq repository.

The figures quoted below were read from the "Serving Benchmark Result" print-outs named in each
row's ``source`` (Scicom-AI-Enterprise-Organization/llm-benchmaq at the commits in
``source_ref``), so a typo in the file fails here.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from planner.catalog import Catalog
from planner.catalog.loader import EMBEDDED_DATA_DIR
from planner.perf.calibration import scenario_from_measured
from planner.perf.deployment import resolve_deployment

BENCHMAQ_FILE = Path(EMBEDDED_DATA_DIR) / "measured_benchmaq.csv"
REPO = "Scicom-AI-Enterprise-Organization/llm-benchmaq"
COMMIT = re.compile(REPO + r"@[0-9a-f]{40}:benchmarks/vllm/runpod_(h100sxm|h200sxm|b200)/")
DENSE = {
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-14B",
    "Qwen/Qwen3-32B",
    "meta-llama/Llama-3.1-70B-Instruct",
}


def _rows() -> list[dict[str, str]]:
    with BENCHMAQ_FILE.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_every_row_names_its_file_commit_run_date_and_client() -> None:
    rows = _rows()
    assert len(rows) == 124
    assert len({r["source"] for r in rows}) == len(rows)
    for row in rows:
        assert row["source"].startswith(REPO + " benchmarks/vllm/runpod_")
        assert (
            COMMIT.search(row["source_ref"]) and "per the paired .json 'date'" in row["source_ref"]
        )
        assert row["engine"] == "vllm" and row["engine_version"] in {"0.14.1", "0.19.0"}
        assert "inferred from date" in row["notes"] and "--ignore-eos" in row["notes"]
        assert row["load"] == "concurrency" and row["dataset"] == "random"
        assert row["ttft_stat"] == "mean" and row["itl_stat"] == "mean_tpot"
        for field in ("output_tok_per_s", "ttft_ms", "itl_ms", "ttft_p99_ms", "tpot_p99_ms"):
            assert float(row[field]) > 0, (row["source"], field)
        assert row["num_gpus"] == "8" and row["tp"] in {"4", "8"}


def test_a_dense_models_data_parallel_pair_is_two_replicas() -> None:
    # vLLM's --data-parallel-size on a dense model starts replicas behind one API server; the
    # planner keeps data_parallel_size for the attention data parallelism of MoE models
    for row in _rows():
        two_engines = "_TP4_DP2_" in row["source"]
        if row["model"] in DENSE:
            assert not row["data_parallel_size"]
            assert (row["tp"] == "4") == two_engines
            if two_engines:
                assert "entered as 2 replicas of TP 4" in row["notes"]
        else:
            assert row["model"] == "openai/gpt-oss-120b" and row["precision"] == "fp4"
            assert row["data_parallel_size"] == ("2" if two_engines else "")


@pytest.mark.parametrize(
    ("file", "cells"),
    [
        (  # Qwen3-14B, TP 8, 4,096 in / 128 out, 500 prompts at 50 in flight
            "Qwen3-14B/qwen3_14b_TP8_DP1_in4096_out128_p500_c50_a1ea49.txt",
            {
                "input_len": "4096",
                "output_len": "128",
                "num_requests": "500",
                "output_tok_per_s": "2097.81",
                "total_tok_per_s": "69227.79",
                "ttft_ms": "891.66",
                "itl_ms": "16.94",
                "ttft_p99_ms": "2225.10",
                "tpot_p99_ms": "22.84",
            },
        ),
        (  # Llama-3.1-70B-Instruct, TP 4 x 2 engines, 1,023 in / 128 out at 200 in flight
            "Llama-3.1-70B/llama31_70b_TP4_DP2_in1024_out128_p1000_c200_a664cf.txt",
            {
                "input_len": "1023",
                "output_len": "128",
                "num_requests": "1000",
                "output_tok_per_s": "2577.04",
                "ttft_ms": "2290.68",
                "itl_ms": "59.88",
                "ttft_p99_ms": "7116.95",
                "tpot_p99_ms": "75.98",
            },
        ),
        (  # gpt-oss-120b, TP 4 with attention data parallelism 2, 128 in / 128 out at 25
            "gpt-oss-120b/gpt_oss_120b_TP4_DP2_in128_out128_p1000_c25_135970.txt",
            {
                "input_len": "128",
                "output_len": "128",
                "output_tok_per_s": "3439.78",
                "ttft_ms": "131.48",
                "itl_ms": "6.23",
                "ttft_p99_ms": "3412.99",
                "tpot_p99_ms": "14.93",
            },
        ),
        (  # Qwen3-32B on 8 x B200, TP 8, one wave of 100 prompts of 8,192 tokens
            "Qwen3-32B/run_1_TP8_DP1_CTX8192_C100_P100_O128.txt",
            {
                "gpu": "B200",
                "engine_version": "0.14.1",
                "input_len": "8192",
                "num_requests": "100",
                "concurrency": "100",
                "output_tok_per_s": "1816.02",
                "ttft_ms": "3021.05",
                "itl_ms": "30.05",
                "ttft_p99_ms": "5738.42",
                "tpot_p99_ms": "49.50",
            },
        ),
    ],
)
def test_cells_match_the_print_outs(file: str, cells: dict[str, str]) -> None:
    (row,) = [r for r in _rows() if r["source"].endswith("/" + file)]
    for field, value in cells.items():
        assert row[field] == value, field


def test_the_loader_keeps_every_row_and_each_resolves(catalog: Catalog) -> None:
    rows = [m for m in catalog.measured if m.source.startswith(REPO)]
    assert len(rows) == 124
    assert {m.gpu for m in rows} == {"H100-SXM", "H200", "B200"}
    for m in rows:
        dep = resolve_deployment(scenario_from_measured(m), catalog)
        # two engines of TP 4 (replicas, or attention-DP ranks) or one of TP 8: 8 GPUs
        assert dep.replicas * dep.tp * dep.pp == 8, m.source
