"""No measurement is in the shipped data twice under two descriptions.

GPUStack's GLM-4.5-Air H100 page printed eight result blocks that repeat its A100 page's to the
last digit; read as H100 rows they taught the fit a slow H100 until 2026-12-05
(data/README.md, ``measured_tuning_gpustack.csv``). A run's output tokens/s, TTFT and TPOT
together do not recur by chance, so two rows that share all three are one run copied: this
test finds such a copy in any file, old or added later."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from planner.catalog import Catalog, MeasuredResult


def _copies(rows: Iterable[MeasuredResult]) -> list[list[MeasuredResult]]:
    """Groups of two or more rows with the same output tokens/s, TTFT and TPOT."""
    runs: dict[tuple[float, float, float | None], list[MeasuredResult]] = defaultdict(list)
    for m in rows:
        if m.output_tok_per_s and m.ttft_ms:
            runs[(m.output_tok_per_s, m.ttft_ms, m.itl_ms)].append(m)
    return [group for group in runs.values() if len(group) > 1]


def test_no_two_shipped_rows_share_a_runs_throughput_ttft_and_tpot(catalog: Catalog) -> None:
    copies = _copies(catalog.measured)
    assert [[(m.source_ref, m.gpu) for m in group] for group in copies] == []
    assert sum(1 for m in catalog.measured if m.output_tok_per_s and m.ttft_ms) > 700


def test_the_glm_copy_it_was_written_for_is_found(catalog: Catalog) -> None:
    """The A100 run the H100 page repeated (vLLM, random 32,000-token prompts), entered once
    more as an H100 row, is the one copy found."""
    (a100,) = [
        m
        for m in catalog.measured
        if m.model == "zai-org/GLM-4.5-Air"
        and m.gpu == "A100-80GB-SXM"
        and m.engine == "vllm"
        and m.input_len == 32000
    ]
    assert (a100.output_tok_per_s, a100.ttft_ms, a100.itl_ms) == (20.02, 248013.29, 305.47)
    copied = a100.model_copy(update={"gpu": "H100-SXM"})
    (group,) = _copies([*catalog.measured, copied])
    assert [m.gpu for m in group] == ["A100-80GB-SXM", "H100-SXM"]
