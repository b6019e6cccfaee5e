"""data/measured_mlperf.csv: MLPerf Inference v4.0, v4.1 and v5.0 datacenter results (closed).

The figures below are quoted from the rounds' ``mlperf_log_summary.txt`` (or, where the stored
copy lacks it, ``mlperf_log_detail.txt``) files named in each row's ``source_ref``, so a typo in
the file fails here.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from planner.catalog import Catalog
from planner.catalog.loader import EMBEDDED_DATA_DIR
from planner.catalog.schema import MeasuredResult

MLPERF_FILE = Path(EMBEDDED_DATA_DIR) / "measured_mlperf.csv"
ROUNDS = {
    "mlcommons/inference_results_v4.0": ("2024-03-27", 4),
    "mlcommons/inference_results_v4.1": ("2024-08-28", 6),
    "ntuhpc/mlperf_inference_results_v5.0": ("2025-04-02", 10),
}
COMMIT = re.compile(r"@[0-9a-f]{40}:closed/NVIDIA/results/")


def _rows() -> list[dict[str, str]]:
    with MLPERF_FILE.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _mlperf(catalog: Catalog) -> list[MeasuredResult]:
    return [m for m in catalog.measured if m.source.split()[0] in ROUNDS]


def test_every_row_names_its_round_log_commit_and_layout() -> None:
    rows = _rows()
    assert len(rows) == sum(n for _, n in ROUNDS.values())
    for row in rows:
        repo = row["source"].split()[0]
        published, _ = ROUNDS[repo]
        assert f"published {published}" in row["source"]
        assert COMMIT.search(row["source_ref"]) and "(layout: " in row["source_ref"]
        assert row["engine"] == "tensorrt-llm" and row["engine_version"]
        assert "result VALID" in row["notes"]
        # the dataset's lengths are cited with the file they were counted from
        assert "openshift-psap/performance-dashboard mlperf-data/summaries/" in row["notes"]
        if row["load"] == "rate":
            assert row["ttft_stat"] == "mean" and row["itl_stat"] == "mean_tpot"
            assert row["ttft_p99_ms"] and row["tpot_p99_ms"] and row["request_rate"]
        else:
            assert row["load"] == "max_throughput" and row["output_tok_per_s"]
            assert not row["ttft_ms"]
    assert {r["source"].split()[0] for r in rows} == set(ROUNDS)
    per_round = {repo: sum(r["source"].startswith(repo) for r in rows) for repo in ROUNDS}
    assert per_round == {repo: n for repo, (_, n) in ROUNDS.items()}


def test_a_server_row_without_throughput_says_why() -> None:
    # a Server run longer than a row holds is simulated shorter; its throughput is left out
    for row in _rows():
        if row["load"] == "rate" and not row["output_tok_per_s"]:
            assert row["num_requests"] == "100000"
            assert "output_tok_per_s left blank" in row["notes"]


def test_the_loader_keeps_every_row(catalog: Catalog) -> None:
    rows = _mlperf(catalog)
    assert len(rows) == 20
    assert {m.gpu for m in rows} == {"H100-SXM", "H200", "B200"}
    assert {m.model for m in rows} == {
        "meta-llama/Llama-2-70b-chat-hf",
        "meta-llama/Llama-3.1-405B-Instruct",
        "mistralai/Mixtral-8x7B-v0.1",
    }
    assert {m.entrypoint for m in rows} == {"offline", "triton"}


def _one(catalog: Catalog, repo: str, gpu: str, model: str, **match: object) -> MeasuredResult:
    found = [
        m
        for m in _mlperf(catalog)
        if m.source.startswith(repo)
        and m.gpu == gpu
        and m.model.endswith(model)
        and all(getattr(m, k) == v for k, v in match.items())
    ]
    assert len(found) == 1, (repo, gpu, model, match)
    return found[0]


@pytest.mark.parametrize(
    ("repo", "gpu", "model", "match", "figures"),
    [
        # v4.1 DGX-H100 llama2-70b-99 Server (mlperf_log_detail.txt): target qps 75,
        # "Mean First Token latency (ns) : 275926..." p99 461278...; TPOT mean 154960...,
        # p99 175354...; tokens/s 21605.8 over samples/s 74.4245 = 290 a request
        (
            "mlcommons/inference_results_v4.1",
            "H100-SXM",
            "Llama-2-70b-chat-hf",
            {"load": "rate"},
            {
                "request_rate": 75,
                "ttft_ms": 275.9,
                "ttft_p99_ms": 461.3,
                "itl_ms": 155.0,
                "tpot_p99_ms": 175.4,
                "output_len": 290,
                "tp": 2,
                "max_num_seqs": 1024,
            },
        ),
        # v4.1 H200x8 llama2-70b-99 Offline: "Tokens per second: 31302.7"
        (
            "mlcommons/inference_results_v4.1",
            "H200",
            "Llama-2-70b-chat-hf",
            {"load": "max_throughput", "entrypoint": "offline"},
            {"output_tok_per_s": 31302.7, "tp": 1, "max_num_seqs": 806},
        ),
        # v5.0 H200x8 llama3.1-405b Server: "Completed tokens per second: 291.37", target qps
        # 0.45, TTFT mean 1830.994 ms / p99 5636.871 ms, TPOT mean 53.874 ms / p99 100.731 ms
        (
            "ntuhpc/mlperf_inference_results_v5.0",
            "H200",
            "Llama-3.1-405B-Instruct",
            {"load": "rate"},
            {
                "output_tok_per_s": 291.37,
                "request_rate": 0.45,
                "ttft_ms": 1831.0,
                "ttft_p99_ms": 5636.9,
                "itl_ms": 53.9,
                "tpot_p99_ms": 100.7,
                "tp": 8,
                "num_requests": 270,
            },
        ),
        # v5.0 B200x8 llama3.1-405b Offline: "Tokens per second: 1526.29", TP 2 x PP 2, twice
        (
            "ntuhpc/mlperf_inference_results_v5.0",
            "B200",
            "Llama-3.1-405B-Instruct",
            {"load": "max_throughput"},
            {"output_tok_per_s": 1526.29, "tp": 2, "pp": 2, "precision": "fp4"},
        ),
        # v4.0 H200x8 llama2-70b-99.9 Server: target qps 91.5, TTFT mean 412.854 ms
        (
            "mlcommons/inference_results_v4.0",
            "H200",
            "Llama-2-70b-chat-hf",
            {"load": "rate"},
            {"request_rate": 91.5, "ttft_ms": 412.9, "itl_ms": 164.9, "kv_cache_dtype": None},
        ),
    ],
)
def test_quoted_cells(
    catalog: Catalog,
    repo: str,
    gpu: str,
    model: str,
    match: dict[str, object],
    figures: dict[str, object],
) -> None:
    row = _one(catalog, repo, gpu, model, **match)
    assert {k: getattr(row, k) for k in figures} == figures
