"""data/measured_sglang_cookbook.csv against the cookbook pages it was transcribed from.

The 29 rows added on 2026-12-02 come from the sgl-project/sgl-cookbook repository's pages at
commit 7b5bd9c05e3d86da5161ac2be9b91c19a34bf49d (GLM-4.6's from commit
9b10fad9f6a3233cb19d2eb866a5eaa37d1dacfb, whose hardware line names only the B200); the 17
older rows from the same cookbook as sgl-project/sglang's docs_new pages carry, since then, the
P99 TTFT and P99 TPOT that bench_serving printed for the same runs. The 9 DeepSeek-V3.1 rows on
8 x MI300X (added 2026-12-06) are from the same commit's DeepSeek-V3_1.md."""

from __future__ import annotations

import re

import pytest

from planner.catalog import Catalog
from planner.catalog.schema import MeasuredResult

SGL_COOKBOOK = "sgl-project/sgl-cookbook"


def _added(catalog: Catalog) -> list[MeasuredResult]:
    # measured_rocm.csv's rows from the same repository's pull request 133 are not this file's
    return [
        m
        for m in catalog.measured
        if m.source.startswith(SGL_COOKBOOK) and "pull request 133" not in m.source
    ]


def _one(rows: list[MeasuredResult], **match: object) -> MeasuredResult:
    found = [m for m in rows if all(getattr(m, k) == v for k, v in match.items())]
    assert len(found) == 1, (match, len(found))
    return found[0]


def test_row_count_sources_and_dates(catalog: Catalog) -> None:
    added = _added(catalog)
    # 38 rows here, the MiniMax-M2.7 GB300 pair (2026-12-07) and measured_rocm.csv's two
    # MiniMax-M2 MI300X rows of the same repository
    assert len(added) == 42
    for m in added:
        # the page, pinned to a commit, and the result block's line
        assert re.search(
            r"@[0-9a-f]{40}:docs/autoregressive/\S+\.md, section .*line \d+", m.source_ref or ""
        )
        # the date the block first appeared in the repository's history
        assert re.search(
            r"published 20\d\d-\d\d-\d\d \(sgl-project/sgl-cookbook commit [0-9a-f]{7}",
            m.notes or "",
        )
        assert m.engine == "sglang" and m.load == "concurrency"
        # the printed mean TTFT, but DeepSeek-V3.1's median (its mean carries stalls, below)
        assert m.ttft_stat == ("p50" if m.model == "deepseek-ai/DeepSeek-V3.1" else "mean")
        assert m.itl_stat == "mean_tpot"
        # the MiniMax-M2.7 page's blocks print no P99s
        assert (m.ttft_p99_ms and m.tpot_p99_ms) or m.gpu == "GB300"
        assert m.spec_method is None and "speculative" not in (m.notes or "")
    by_gpu = {g: sum(1 for m in added if m.gpu == g) for g in {m.gpu for m in added}}
    assert by_gpu == {"B200": 21, "H100-SXM": 3, "MI300X": 16, "GB300": 2}


def test_minimax_on_h100_matches_the_page(catalog: Catalog) -> None:
    # docs/autoregressive/MiniMax/MiniMax-M2.5.md, 5.1.3.3 High Concurrency (H100, SGLang 0.5.9):
    #   "Successful requests: 500", "Total input tokens: 249831", "Total generated tokens: 252662",
    #   "Output token throughput (tok/s): 3133.56", "Mean TTFT (ms): 149.32",
    #   "P99 TTFT (ms): 374.62", "Mean TPOT (ms): 28.92", "P99 TPOT (ms): 34.31"
    m = _one(_added(catalog), model="MiniMaxAI/MiniMax-M2.5", gpu="H100-SXM", concurrency=100)
    assert m.engine_version == "0.5.9" and m.enable_expert_parallel is True and m.tp == 8
    assert (m.input_len, m.output_len, m.num_requests) == (500, 505, 500)
    assert m.output_tok_per_s == pytest.approx(3133.56)
    assert (m.ttft_ms, m.ttft_p99_ms) == pytest.approx((149.32, 374.62))
    assert (m.itl_ms, m.tpot_p99_ms) == pytest.approx((28.92, 34.31))
    assert m.gpu_memory_utilization == pytest.approx(0.85)


def test_glm_summarization_on_b200_matches_the_page(catalog: Catalog) -> None:
    # docs/autoregressive/GLM/GLM-4.6.md @9b10fad, Summarization 8K/1K at max-concurrency 64:
    #   "Total input tokens: 1273893", "Total generated tokens: 169680" over 320 requests,
    #   "Output token throughput (tok/s): 1245.44", "Mean TTFT (ms): 355.82",
    #   "P99 TTFT (ms): 858.64", "Mean TPOT (ms): 46.62", "P99 TPOT (ms): 58.88"
    rows = [m for m in _added(catalog) if m.model == "zai-org/GLM-4.6"]
    assert len(rows) == 9 and {m.gpu for m in rows} == {"B200"}
    m = _one(rows, concurrency=64, input_len=3981)
    assert m.output_len == 530 and m.dataset == "uniform" and m.precision == "bf16"
    assert m.output_tok_per_s == pytest.approx(1245.44)
    assert (m.ttft_ms, m.ttft_p99_ms, m.itl_ms, m.tpot_p99_ms) == pytest.approx(
        (355.82, 858.64, 46.62, 58.88)
    )
    assert "9b10fad9f6a3233cb19d2eb866a5eaa37d1dacfb" in (m.source_ref or "")


def test_dp_attention_layouts_and_datasets(catalog: Catalog) -> None:
    added = _added(catalog)
    # DeepSeek-V3 on MI300X: --tp 8 --ep 8 --dp 8 --enable-dp-attention, no --dataset-name
    # (bench_serving's ShareGPT default: 301701 input tokens over 1000 requests)
    v3 = _one(added, model="deepseek-ai/DeepSeek-V3")
    assert (v3.gpu, v3.tp, v3.data_parallel_size, v3.enable_expert_parallel) == (
        "MI300X",
        1,
        8,
        True,
    )
    assert (v3.dataset, v3.input_len, v3.output_len) == ("sharegpt", 302, 188)
    # Kimi-K2-Instruct on B200: --tp 8 --dp 4 --enable-dp-attention (attention TP 2 in 4 ranks)
    k2 = _one(added, model="moonshotai/Kimi-K2-Instruct")
    assert (k2.tp, k2.data_parallel_size, k2.enable_expert_parallel) == (2, 4, None)
    # Llama 4 at max-concurrency 1 is left out: its first request's cold start (P99 TTFT 48 s)
    llama4 = [m for m in added if m.model.startswith("meta-llama/Llama-4")]
    assert len(llama4) == 4 and all(m.concurrency and m.concurrency > 1 for m in llama4)


def test_older_rows_carry_the_same_runs_p99(catalog: Catalog) -> None:
    older = [
        m
        for m in catalog.measured
        if m.source.startswith("sgl-project/sglang docs_new/cookbook") and m.gpu == "B200"
    ]
    assert len(older) == 17 and all(m.ttft_p99_ms and m.tpot_p99_ms for m in older)
    # DeepSeek-R1.md, Chat 1K/1K at max-concurrency 100: "Output token throughput (tok/s):
    # 2282.90", "P99 TTFT (ms): 2632.11", "P99 TPOT (ms): 50.10"
    r1 = _one(older, model="deepseek-ai/DeepSeek-R1-0528", concurrency=100)
    assert r1.output_tok_per_s == pytest.approx(2282.9)
    assert (r1.ttft_p99_ms, r1.tpot_p99_ms) == pytest.approx((2632.11, 50.10))
    # Qwen3.md, Reasoning 1K/8K at max-concurrency 64: the docs_new page omits the latency lines
    # the sgl-cookbook page prints for that run ("Mean TTFT (ms): 265.03", "Mean TPOT (ms): 23.66")
    q = _one(older, model="Qwen/Qwen3-235B-A22B-Instruct-2507", concurrency=64, output_len=4065)
    assert (q.ttft_ms, q.itl_ms) == pytest.approx((265.03, 23.66))


def test_deepseek_v3_1_on_mi300x_matches_the_page(catalog: Catalog) -> None:
    """docs/autoregressive/DeepSeek/DeepSeek-V3_1.md @7b5bd9c, section 5.1.4: three scenarios at
    max-concurrency 1, 16 and 64 or 100, SGLang 0.5.7, --tp 8, no speculative decoding."""
    rows = [m for m in _added(catalog) if m.model == "deepseek-ai/DeepSeek-V3.1"]
    assert len(rows) == 9 and {(m.gpu, m.tp, m.engine_version) for m in rows} == {
        ("MI300X", 8, "0.5.7")
    }
    assert sorted({m.concurrency for m in rows}) == [1, 16, 64, 100]
    # Summarization 8K/1K at max-concurrency 64 (result block at line 823): "Successful
    # requests: 320", "Total input tokens: 1273893", "Total generated tokens: 170000", "Output
    # token throughput (tok/s): 601.67", "Median TTFT (ms): 499.38", "P99 TTFT (ms): 2925.98",
    # "Mean TPOT (ms): 97.93", "P99 TPOT (ms): 157.84"
    m = _one(rows, concurrency=64, input_len=3981)
    assert (m.output_len, m.num_requests, m.dataset) == (531, 320, "uniform")
    assert m.output_tok_per_s == pytest.approx(601.67)
    assert (m.ttft_ms, m.ttft_p99_ms, m.itl_ms, m.tpot_p99_ms) == pytest.approx(
        (499.38, 2925.98, 97.93, 157.84)
    )
    # why the median: at one in flight, where every request is alike, Chat 1K/1K printed a mean
    # TTFT of 557.85 ms against a median of 213.58 (Reasoning 1K/8K: 156.67 against 156.19)
    chat = _one(rows, concurrency=1, output_len=422, input_len=610)
    assert chat.ttft_stat == "p50" and chat.ttft_ms == pytest.approx(213.58)
    assert "mean 557.85 vs median 213.58" in (chat.notes or "")


def test_minimax_m27_on_gb300_matches_the_page(catalog: Catalog) -> None:
    # docs/autoregressive/MiniMax/MiniMax-M2.7.md @7b5bd9c, 5.2.2 High Concurrency (2 x GB300,
    # "Tensor Parallelism: 2", SGLang 0.5.10.post1): "Successful requests: 500", "Total input
    # tokens: 249831", "Total generated tokens: 252662", "Output token throughput (tok/s):
    # 2521.66", "Mean TTFT (ms): 247.94", "Mean TPOT (ms): 35.75"
    m = _one(_added(catalog), gpu="GB300", concurrency=100)
    assert (m.engine_version, m.tp, m.num_gpus, m.model) == (
        "0.5.10.post1", 2, 2, "MiniMaxAI/MiniMax-M2.5"
    )  # fmt: skip
    assert (m.input_len, m.output_len, m.num_requests) == (500, 505, 500)
    assert (m.output_tok_per_s, m.ttft_ms, m.itl_ms) == pytest.approx((2521.66, 247.94, 35.75))
    assert m.ttft_p99_ms is None and "checkpoint MiniMaxAI/MiniMax-M2.7 (FP8)" in (m.notes or "")
