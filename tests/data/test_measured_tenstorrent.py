"""data/measured_tenstorrent.csv: tenstorrent/tt-inference-server issue 356, DeepSeek-R1-0528
on H100 GPUs (July 2025), one source family; the engine column tells SGLang from vLLM.

The issue's tables print mean TTFT and mean TPOT per (ISL, OSL, concurrency) and a request
throughput; the rows' output throughput is that request throughput times OSL (noted per row).
"""

from __future__ import annotations

import re

import pytest

from planner.catalog.loader import load_catalog
from planner.catalog.schema import MeasuredResult

SOURCE = "tenstorrent/tt-inference-server issue 356"
DATE = re.compile(r"posted 2025-07-(09|10)\b")


@pytest.fixture(scope="module")
def rows() -> list[MeasuredResult]:
    return [m for m in load_catalog().measured if m.source == SOURCE]


def test_row_count_engines_and_dates(rows: list[MeasuredResult]) -> None:
    assert len(rows) == 12
    sglang = [m for m in rows if m.engine == "sglang"]
    vllm = [m for m in rows if m.engine == "vllm"]
    assert len(sglang) == len(vllm) == 6
    for m in rows:
        assert m.source_ref and DATE.search(m.source_ref), m.source_ref
        assert "/issues/356" in m.source_ref
        assert m.notes and "inferred from date" in m.notes
        assert (m.load, m.concurrency, m.ttft_stat, m.itl_stat) == (
            "concurrency",
            1,
            "mean",
            "mean_tpot",
        )
    assert {(m.num_gpus, m.tp, m.precision) for m in sglang} == {(16, 16, "fp8")}
    assert {(m.num_gpus, m.tp, m.precision) for m in vllm} == {(8, 8, "int4")}


def test_cells_match_the_issue_tables(rows: list[MeasuredResult]) -> None:
    def cell(engine: str, isl: int, osl: int) -> MeasuredResult:
        (row,) = [m for m in rows if (m.engine, m.input_len, m.output_len) == (engine, isl, osl)]
        return row

    # 16 H100 (SGLANG + INFINIBAND): |  128 |  128 | 1 | 8 | 179.7 | 23.1 | ... | 0.321 |
    m = cell("sglang", 128, 128)
    assert (m.num_requests, m.ttft_ms, m.itl_ms) == pytest.approx((8, 179.7, 23.1))
    assert m.output_tok_per_s == pytest.approx(0.321 * 128, abs=0.01)
    # |  1024 |  128 | 1 | 4 | 391.7 | 23.2 | ... | 0.299 |
    m = cell("sglang", 1024, 128)
    assert (m.ttft_ms, m.itl_ms, m.output_tok_per_s) == pytest.approx(
        (391.7, 23.2, 0.299 * 128), abs=0.01
    )
    # DeepSeek-R1-0528-AWQ on 8xH100s (vLLM): |  128 | 1024 | 1 | 4 | 27.3 | 16.1 | ... | 0.061 |
    m = cell("vllm", 128, 1024)
    assert (m.num_requests, m.ttft_ms, m.itl_ms) == pytest.approx((4, 27.3, 16.1))
    assert m.output_tok_per_s == pytest.approx(0.061 * 1024, abs=0.01)
    # |  4096 |  128 | 1 | 2 | 120.1 | 16.4 | ... | 0.453 |
    m = cell("vllm", 4096, 128)
    assert (m.num_requests, m.ttft_ms, m.itl_ms) == pytest.approx((2, 120.1, 16.4))
