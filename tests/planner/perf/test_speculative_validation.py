"""The speculative rows of a validation: the published rows with and without speculation
(data/measured_speculative.csv) paired, their errors and speed-ups in worked numbers."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from planner.catalog import Catalog, MeasuredResult
from planner.perf.calibration import scenario_from_measured
from planner.perf.speculative_validation import format_slice, speculative_slice
from planner.perf.validation import HeldOut


def _held(result: MeasuredResult, predicted_scale: float) -> HeldOut:
    measured = {"output_tok_per_s": result.output_tok_per_s, "tpot": result.itl_ms}
    predicted = {k: v * predicted_scale for k, v in measured.items() if v is not None}
    sample: Any = SimpleNamespace(result=result)
    return HeldOut(sample, "fold", measured, predicted, {}, 1.0, 1.0, False)  # type: ignore[arg-type]


def test_every_speculative_row_has_its_baseline_and_resolves(catalog: Catalog) -> None:
    rows = [r for r in catalog.measured if r.spec_method not in (None, "none")]
    # GPUStack's 4, the AMD MTP post's 5, SGLang PR 10281's 1, vLLM issue 20780's 6,
    # TensorRT-LLM tech blog 1's 5
    assert len(rows) == 21
    assert len({r.source for r in rows}) >= 5
    by_ref = {r.source_ref: r for r in catalog.measured}
    for row in rows:
        base = by_ref[row.spec_baseline_ref or ""]
        # the baseline: the same model, GPUs, engine, lengths and load, without speculation
        assert base.spec_method in (None, "none")
        same = ("model", "gpu", "num_gpus", "tp", "engine", "input_len", "load", "concurrency")
        assert all(getattr(base, f) == getattr(row, f) for f in same), row.source_ref
        scenario = scenario_from_measured(row)
        assert scenario.spec_method == row.spec_method
        assert scenario.num_spec_tokens == row.num_spec_tokens


def test_the_slice_pairs_each_row_with_its_baseline(catalog: Catalog) -> None:
    spec = [r for r in catalog.measured if r.spec_method == "mtp" and r.model.endswith("R1-0528")]
    (row,) = spec
    base = next(r for r in catalog.measured if r.source_ref == row.spec_baseline_ref)
    # the baseline predicted exactly, the speculative row 10% high on both metrics
    (got,) = speculative_slice([_held(row, 1.1), _held(base, 1.0)])
    assert got.method == "mtp" and got.num_spec_tokens == 1
    assert got.ape["output_tok_per_s"] == pytest.approx(0.1)
    # SGLang's 48-request cap with MTP: 1060.10 / 3414.99 tok/s, TPOT 304.71 / 42.24 ms
    measured, predicted = got.speedup["output_tok_per_s"] or (0.0, 0.0)
    assert measured == pytest.approx(1060.10 / 3414.99)
    assert predicted == pytest.approx(1.1 * 1060.10 / 3414.99)
    tpot = got.speedup["tpot"]
    assert tpot is not None and tpot[0] == pytest.approx(304.71 / 42.24)
    assert got.speedup_error("output_tok_per_s") == pytest.approx(0.1)
    assert "median speed-up error output_tok_per_s 10%" in format_slice([got])
    # a row whose baseline was not held out has no speed-up, and says so
    (alone,) = speculative_slice([_held(row, 1.0)])
    assert alone.speedup["output_tok_per_s"] is None


def test_tensorrt_llm_mtp_sweep_pairs_every_draft_length_with_one_baseline(
    catalog: Catalog,
) -> None:
    # TensorRT-LLM tech blog 1, "Autoregressive MTP Layers": DeepSeek-R1 (NVFP4 MoE) on 8 x B200
    # at one request in flight, 111 TPS/User without MTP, 198-253 with 1-5 MTP draft steps
    sweep = [r for r in catalog.measured if r.engine == "tensorrt-llm" and r.spec_method == "mtp"]
    assert [r.num_spec_tokens for r in sweep] == [1, 2, 3, 4, 5]
    assert {r.spec_baseline_ref for r in sweep} == {sweep[0].spec_baseline_ref}
    base = next(r for r in catalog.measured if r.source_ref == sweep[0].spec_baseline_ref)
    assert base.spec_method is None and base.output_tok_per_s == 111
    assert (base.entrypoint, base.concurrency, base.precision) == ("offline", 1, "fp4")
    # the mean accepted length grows with the draft, never past k + 1
    accept = [r.spec_accept_len or 0.0 for r in sweep]
    assert accept == [1.92, 2.58, 2.82, 2.99, 3.01]
    assert all(a <= (r.num_spec_tokens or 0) + 1 for a, r in zip(accept, sweep, strict=True))
    got = speculative_slice([_held(r, 1.0) for r in [base, *sweep]])
    speedups = [g.speedup["output_tok_per_s"] for g in got]
    assert [s[0] if s else None for s in speedups] == pytest.approx(
        [198 / 111, 250 / 111, 253 / 111, 245 / 111, 239 / 111]
    )
    # the blog's own speed-up column: 1.78x at MTP 1, 2.28x at MTP 3
    assert speedups[0] and round(speedups[0][0], 2) == 1.78
    assert speedups[2] and round(speedups[2][0], 2) == 2.28
