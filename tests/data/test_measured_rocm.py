"""data/measured_rocm.csv: AMD Instinct serving results (sgl-cookbook PR 133, vLLM recipes).

Each check below quotes the line of the source it was read from, so a typo in the file fails here.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from planner.catalog import Catalog
from planner.catalog.loader import EMBEDDED_DATA_DIR
from planner.catalog.schema import MeasuredResult

ROCM_FILE = Path(EMBEDDED_DATA_DIR) / "measured_rocm.csv"
ROWS = 6
COMMIT = re.compile(r"@[0-9a-f]{40}:")
DATE = re.compile(r"\((20\d\d-\d\d-\d\d)\)$")


def _rows() -> list[dict[str, str]]:
    with ROCM_FILE.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _rocm(catalog: Catalog) -> list[MeasuredResult]:
    return [
        m
        for m in catalog.measured
        if m.source.startswith(
            ("sgl-project/sgl-cookbook pull request 133", "vllm-project/recipes")
        )
        # the same recipe pages also carry NVIDIA runs (measured_github_vllm.csv)
        and m.gpu.startswith("MI")
    ]


def test_row_count_and_every_row_names_its_source_commit_and_date() -> None:
    rows = _rows()
    assert len(rows) == ROWS
    for row in rows:
        # the source names the page and its date; source_ref the commit and the section
        date = DATE.search(row["source"])
        assert date is not None, row["source"]
        assert "2025-07-01" <= date.group(1) <= "2026-12-02"
        assert COMMIT.search(row["source_ref"]), row["source_ref"]
        assert row["gpu"] in {"MI300X", "MI325X", "MI355X"}
        assert row["engine"] in {"sglang", "vllm"} and row["engine_version"]
        assert row["ttft_stat"] == "mean" and row["itl_stat"] == "mean_tpot"
        assert row["ttft_p99_ms"] and row["tpot_p99_ms"] and row["output_tok_per_s"]
        assert "serve:" in row["notes"] and "client:" in row["notes"]


def test_the_loader_keeps_every_row(catalog: Catalog) -> None:
    rows = _rocm(catalog)
    assert len(rows) == ROWS
    assert {m.gpu for m in rows} == {"MI300X", "MI355X"}
    assert all(m.load == "concurrency" and m.entrypoint == "serve" for m in rows)


def _one(catalog: Catalog, model: str, concurrency: float, **match: object) -> MeasuredResult:
    found = [
        m
        for m in _rocm(catalog)
        if m.model == model
        and m.concurrency == concurrency
        and all(getattr(m, k) == v for k, v in match.items())
    ]
    assert len(found) == 1, (model, concurrency, match)
    return found[0]


def test_kimi_k2_and_deepseek_cells(catalog: Catalog) -> None:
    # Kimi-K2.md (PR 133), 5.1.2: "Output token throughput (tok/s): 298.41",
    # "Mean TTFT (ms): 977.11", "P99 TTFT (ms): 4595.69", "Mean TPOT (ms): 46.85",
    # "P99 TPOT (ms): 98.94"
    kimi = _one(catalog, "moonshotai/Kimi-K2-Instruct", 16)
    assert (kimi.output_tok_per_s, kimi.ttft_ms, kimi.ttft_p99_ms) == (298.41, 977.11, 4595.69)
    assert (kimi.itl_ms, kimi.tpot_p99_ms) == (46.85, 98.94)
    # recipes DeepSeek/AMD_GPU/README.md (PR 199): "--max-concurrency 256", "Total input
    # tokens: 1597574", "Output token throughput (tok/s): 1709.39", "P99 TTFT (ms): 59776.29"
    r1 = _one(catalog, "deepseek-ai/DeepSeek-R1", 256)
    assert (r1.input_len, r1.output_len, r1.num_requests) == (3195, 800, 500)
    assert (r1.output_tok_per_s, r1.ttft_p99_ms, r1.engine_version) == (1709.39, 59776.29, "0.10.0")


def test_llama33_mi355x_cells(catalog: Catalog) -> None:
    # recipes Llama3.3-70B-ROCm.md (PR 127): FP8-KV "Output token throughput (tok/s): 873.98",
    # "Mean TTFT (ms): 11639.66", "Mean TPOT (ms): 61.81"; MXFP4 "Output token throughput
    # (tok/s): 999.30", "P99 TPOT (ms): 62.95"; "Total input tokens: 1048448" of 128 requests
    fp8 = _one(catalog, "meta-llama/Llama-3.3-70B-Instruct", 64, precision="fp8", gpu="MI355X")
    fp4 = _one(catalog, "meta-llama/Llama-3.3-70B-Instruct", 64, precision="fp4", gpu="MI355X")
    assert (fp8.output_tok_per_s, fp8.ttft_ms, fp8.itl_ms) == (873.98, 11639.66, 61.81)
    assert (fp4.output_tok_per_s, fp4.tpot_p99_ms) == (999.30, 62.95)
    assert fp8.input_len == fp4.input_len == 8191 and fp8.num_gpus == fp8.tp == 1
    # both launch commands pass "--kv-cache-dtype fp8": the fit simulates an FP8 cache,
    # half the bytes a token of a 16-bit one (Llama-3.3-70B: 80 layers x 8 KV heads x 128)
    assert fp8.kv_cache_dtype == fp4.kv_cache_dtype == "fp8"
    from planner.perf.calibration import scenario_from_measured
    from planner.perf.deployment import resolve_deployment

    cached = resolve_deployment(scenario_from_measured(fp8), catalog)
    plain = resolve_deployment(
        scenario_from_measured(fp8.model_copy(update={"kv_cache_dtype": None})), catalog
    )
    assert cached.kv_bytes_per_token_full == plain.kv_bytes_per_token_full / 2
    assert cached.kv_bytes_per_token_full == 80 * 2 * 8 * 128 * 1
