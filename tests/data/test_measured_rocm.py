"""data/measured_rocm.csv: AMD Instinct serving results (sgl-cookbook PR 133 and MiniMax-M2
page, vLLM recipes, the sglang docs' MiniMax-M2.7 benchmarks file).

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
ROWS = 15
#: the sglang docs' benchmarks file gives rounded means only: no P99, no publication date
JSX = "sgl-project/sglang docs_new/src/snippets/configs/MiniMaxAI/minimax-m2.7-benchmarks.jsx"
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
            (
                "sgl-project/sgl-cookbook pull request 133",
                "sgl-project/sgl-cookbook docs/autoregressive/MiniMax/MiniMax-M2.md",
                "vllm-project/recipes",
                JSX,
            )
        )
        # the same recipe pages also carry NVIDIA runs (measured_github_vllm.csv)
        and m.gpu.startswith("MI")
    ]


def test_row_count_and_every_row_names_its_source_commit_and_date() -> None:
    rows = _rows()
    assert len(rows) == ROWS
    for row in rows:
        # the source names the page and its date (the benchmarks file: the day it was read);
        # source_ref the commit and the section
        assert COMMIT.search(row["source_ref"]), row["source_ref"]
        assert row["gpu"] in {"MI300X", "MI325X", "MI355X"}
        assert row["engine"] in {"sglang", "vllm"} and row["engine_version"]
        assert row["ttft_stat"] == "mean" and row["itl_stat"] == "mean_tpot"
        assert row["output_tok_per_s"] and row["ttft_ms"] and row["itl_ms"]
        assert "serve:" in row["notes"] and "client:" in row["notes"]
        if row["source"] == JSX:
            assert "read 2026-12-07 at the commit in source_ref" in row["notes"]
            assert not row["ttft_p99_ms"] and not row["tpot_p99_ms"]
            continue
        date = DATE.search(row["source"])
        assert date is not None, row["source"]
        assert "2025-07-01" <= date.group(1) <= "2026-12-02"
        assert row["ttft_p99_ms"] and row["tpot_p99_ms"]


def test_the_loader_keeps_every_row(catalog: Catalog) -> None:
    rows = _rocm(catalog)
    assert len(rows) == ROWS
    assert {m.gpu for m in rows} == {"MI300X", "MI355X"}
    assert sum(1 for m in rows if m.model == "MiniMaxAI/MiniMax-M2.5") == 8
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
    # the same branch three hours earlier (@cbb075b): "--max-concurrency 128", "--max-model-len
    # 32768", "Output token throughput (tok/s): 1408.53", "Mean TTFT (ms): 7585.82", "Mean TPOT
    # (ms): 80.02", "P99 TTFT (ms): 30544.70", "P99 TPOT (ms): 88.89"
    r128 = _one(catalog, "deepseek-ai/DeepSeek-R1", 128)
    assert (r128.input_len, r128.output_len, r128.num_requests) == (3195, 800, 500)
    assert (r128.output_tok_per_s, r128.ttft_ms, r128.itl_ms) == (1408.53, 7585.82, 80.02)
    assert (r128.ttft_p99_ms, r128.tpot_p99_ms, r128.max_model_len) == (30544.70, 88.89, 32768)


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


def test_minimax_cells(catalog: Catalog) -> None:
    # sgl-cookbook MiniMax-M2.md, 5.1.3 (4 x MI300X, SGLang 0.5.7): "Total input tokens: 249831",
    # "Total generated tokens: 252662" of 500, "Output token throughput (tok/s): 1643.75",
    # "Mean TTFT (ms): 387.41", "P99 TTFT (ms): 1192.44", "Mean TPOT (ms): 55.23"
    m2 = _one(catalog, "MiniMaxAI/MiniMax-M2.5", 100, engine_version="0.5.7")
    assert (m2.input_len, m2.output_len, m2.num_requests, m2.tp) == (500, 505, 500, 4)
    assert (m2.output_tok_per_s, m2.ttft_ms, m2.ttft_p99_ms, m2.itl_ms) == (
        1643.75, 387.41, 1192.44, 55.23
    )  # fmt: skip
    assert "checkpoint MiniMaxAI/MiniMax-M2 (FP8)" in (m2.notes or "")
    # minimax-m2.7-benchmarks.jsx, mi300x / fp8 / low-latency (tp 2, ep 2): max_concurrency 1,
    # num_prompts 64, "ttft_ms: 210, tpot_ms: 14.94, tokens_per_sec_per_gpu: 33"
    m27 = _one(catalog, "MiniMaxAI/MiniMax-M2.5", 1, engine_version="0.5.13.post1")
    assert (m27.tp, m27.enable_expert_parallel, m27.kv_cache_dtype) == (2, True, "fp8_e4m3")
    assert (m27.output_tok_per_s, m27.ttft_ms, m27.itl_ms) == (66.0, 210.0, 14.94)
    # the lengths of SGLang's seeded random draw, which gives the printed 10-prompt totals too
    import numpy as np

    def draw(n: int) -> tuple[int, int]:
        np.random.seed(1)
        return int(np.random.randint(1, 1001, n).sum()), int(np.random.randint(1, 1001, n).sum())

    assert draw(10) == (6101, 4220) and draw(500) == (249831, 252662)
    assert (m27.input_len, m27.output_len) == tuple(round(t / 64) for t in draw(64))
