"""The disaggregated slice: the public disaggregated / wide-EP rows against the model, the fit
of the pools' step scales on them, and its error held out by source.

Every row of ``data/measured_disaggregated.csv`` is one phase measured on its own (the other
phase given what it needs, SGLang's slow-down API holding the decode pool full), so the pool
the source measured is priced on its own (:func:`pool_alone`):

- **decode**: ``d`` sequences a rank (the stated batch, ``decode_batch_per_rank``; else the
  closed loop's ``concurrency / ranks`` up to the rank's KV seats), one step ``T(d)``
  (:class:`planner.perf.disaggregated.DecodePool`): output tok/s a GPU ``= d / (T(d) x tp)``
  and TPOT ``= T(d)``;
- **prefill**: the pool's saturation rate a rank (:meth:`SteadyStateModel.saturation_rate`):
  input tok/s a GPU ``= rate x input_len / tp``.

**Fit** (:func:`fit_scales`): one scale for both pools, ``exp(median(ln(predicted /
measured)))`` of the tokens a second a GPU of every row with the step-time model as is (a
pool's time a token is its step over its tokens, so the ratio is the step's), applied to an MoE
pool's coefficients (:class:`planner.perf.disaggregated.PoolScales`). A median of logs: one
odd row (a post's approximate figure, an unstated batch) moves it little. A scale a phase was
tried and held out worse (2026-12-02, 15 rows, median APE of tokens/s a GPU held out by
source: 28% with a scale a phase, 22% with a phase's scale the median of its sources', 19%
with one scale): the prefill rows disagree by source (H100 EP32 near 0.5, GB200 and H200 at
0.5-0.8), and a phase's own scale follows whichever source has the most rows.

**Held out by source** (:func:`disaggregated_slice`): each source's rows are predicted with the
scales fitted on the other sources' rows (a phase no other source measured keeps 1.0), so the
figures say what a result nobody fed the fit would see. Reported: the median absolute
percentage error of tokens/s a GPU (all rows, and output tok/s a decode GPU alone) and of TPOT
(rows whose batch is stated, TPOT derived as batch / rate), before the fit and held out.
Issue 25's target: output tok/s a GPU and TPOT within 25% median on independent results.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

from planner.catalog.loader import load_disaggregated_results
from planner.errors import PlannerError
from planner.perf.disaggregated import (
    FIT_FILE,
    PoolScales,
    disaggregated_model,
    layout_from_row,
)
from planner.perf.model import PerformanceModel
from planner.perf.scenario import Scenario

#: issue 25's target on independent disaggregated results (median APE)
TARGET_MEDIAN = 0.25
UNSCALED = PoolScales()


def _number(text: str | None) -> float | None:
    text = (text or "").strip()
    return float(text) if text else None


@dataclass(frozen=True)
class PoolFigures:
    """A tested pool's predicted figures: tokens/s a GPU of the pool and TPOT (decode)."""

    tok_per_s_per_gpu: float
    tpot_ms: float | None


@dataclass(frozen=True)
class DisaggregatedRow:
    """One published figure, predicted before the fit and held out."""

    line: int
    label: str
    source: str
    phase: str
    measured: float
    measured_tpot_ms: float | None
    raw: PoolFigures
    held: PoolFigures | None = None

    @property
    def ratio(self) -> float:
        """Predicted over measured tokens/s a GPU, before the fit."""
        return self.raw.tok_per_s_per_gpu / self.measured

    def ape(self, which: str, metric: str) -> float | None:
        figures = self.raw if which == "before" else self.held
        if figures is None:
            return None
        if metric == "tpot":
            if self.measured_tpot_ms is None or figures.tpot_ms is None:
                return None
            return abs(figures.tpot_ms / self.measured_tpot_ms - 1.0)
        return abs(figures.tok_per_s_per_gpu / self.measured - 1.0)


def pool_alone(
    model: PerformanceModel, row: dict[str, str], scales: PoolScales = UNSCALED
) -> PoolFigures:
    """The tested pool of ``row`` priced on its own (see the module docstring)."""
    scenario = Scenario.from_row(row)
    layout = layout_from_row(row)
    if layout is None:
        raise PlannerError(f"a disaggregated row states both pools: {row.get('source')}")
    dm = disaggregated_model(model, scenario, layout, scales)
    if row["tested_phase"] == "prefill":
        rate = dm.prefill_state.saturation_rate()
        return PoolFigures(rate * scenario.mean_input_len / layout.prefill.tp, None)
    stated = _number(row.get("decode_batch_per_rank"))
    if stated is not None:
        running = stated
    else:
        in_flight = float(scenario.concurrency or 1.0) / dm.decode_ranks
        running = min(in_flight, dm.decode_pool.seats)
    step_s = dm.decode_pool.step_s(running)
    return PoolFigures(running / step_s / layout.decode.tp, step_s * 1e3)


def measured_rows(
    model: PerformanceModel, rows: Sequence[dict[str, str]] | None = None
) -> list[DisaggregatedRow]:
    """The rows with their measured figure and the step-time model's own prediction."""
    rows = list(rows) if rows is not None else load_disaggregated_results()
    out: list[DisaggregatedRow] = []
    for line, row in enumerate(rows, start=2):
        phase = row["tested_phase"]
        column = "input_tok_per_s_per_gpu" if phase == "prefill" else "output_tok_per_s_per_gpu"
        measured = _number(row.get(column))
        if measured is None or measured <= 0:
            continue
        label = (
            f"row {line}: {row['engine']} {row['model'].split('/')[-1]} {row['precision']} "
            f"{row['gpu']} {phase}"
        )
        out.append(
            DisaggregatedRow(
                line=line,
                label=label,
                source=row["source"],
                phase=phase,
                measured=measured,
                measured_tpot_ms=_number(row.get("tpot_ms")),
                raw=pool_alone(model, row),
            )
        )
    return out


def fit_scales(rows: Sequence[DisaggregatedRow], as_of: str = "") -> PoolScales:
    """One scale for both pools: ``exp(median(ln(predicted / measured)))`` of tokens/s a GPU
    over ``rows`` (1.0 without rows)."""
    logs = [math.log(r.ratio) for r in rows]
    scale = math.exp(statistics.median(logs)) if logs else 1.0
    return PoolScales(
        prefill=scale,
        decode=scale,
        rows=len(rows),
        source=f"fitted on {len(rows)} rows" + (f", {as_of}" if as_of else ""),
    )


@dataclass(frozen=True)
class DisaggregatedSlice:
    """The slice: every row before the fit and held out by source, and the fit on all."""

    rows: list[DisaggregatedRow]
    fit: PoolScales
    fold_scales: dict[str, PoolScales] = field(default_factory=dict)

    def median_ape(self, which: str, metric: str, phase: str | None = None) -> float | None:
        values = [
            e
            for r in self.rows
            if phase is None or r.phase == phase
            if (e := r.ape(which, metric)) is not None
        ]
        return statistics.median(values) if values else None

    def count(self, metric: str, phase: str | None = None) -> int:
        return sum(
            1
            for r in self.rows
            if (phase is None or r.phase == phase) and r.ape("before", metric) is not None
        )

    def summary(self) -> dict[str, Any]:
        """The figures ``planner validate --json`` reports."""
        out: dict[str, Any] = {
            "rows": len(self.rows),
            "sources": len({r.source for r in self.rows}),
            "fit": {"prefill_step_scale": self.fit.prefill, "decode_step_scale": self.fit.decode},
        }
        for key, metric, phase in (
            ("tok_per_s_per_gpu", "throughput", None),
            ("output_tok_per_s_per_gpu", "throughput", "decode"),
            ("tpot", "tpot", None),
        ):
            out[key] = {
                "n": self.count(metric, phase),
                "median_ape_before": self.median_ape("before", metric, phase),
                "median_ape_held_out": self.median_ape("held", metric, phase),
            }
        out["per_row"] = [
            {
                "row": r.label,
                "source": r.source,
                "measured": r.measured,
                "before": r.raw.tok_per_s_per_gpu,
                "held_out": r.held.tok_per_s_per_gpu if r.held else None,
                "measured_tpot_ms": r.measured_tpot_ms,
                "tpot_ms_held_out": r.held.tpot_ms if r.held else None,
            }
            for r in self.rows
        ]
        return out


def disaggregated_slice(
    model: PerformanceModel, rows: Sequence[dict[str, str]] | None = None
) -> DisaggregatedSlice:
    """Every row before the fit and held out by source (its source's rows predicted with the
    scales fitted on the others'), and the fit on all rows."""
    raw_rows = list(rows) if rows is not None else load_disaggregated_results()
    measured = measured_rows(model, raw_rows)
    by_line = {line: row for line, row in enumerate(raw_rows, start=2)}
    folds: dict[str, PoolScales] = {}
    held_rows: list[DisaggregatedRow] = []
    for r in measured:
        if r.source not in folds:
            folds[r.source] = fit_scales([o for o in measured if o.source != r.source])
        held = pool_alone(model, by_line[r.line], folds[r.source])
        held_rows.append(replace(r, held=held))
    return DisaggregatedSlice(rows=held_rows, fit=fit_scales(measured), fold_scales=folds)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def format_slice(sl: DisaggregatedSlice) -> str:
    """The slice as ``planner validate`` prints it."""
    lines = [
        "== Disaggregated prefill/decode and wide-EP rows (data/measured_disaggregated.csv), "
        "tested pool alone, held out by source ==",
        f"{len(sl.rows)} rows from {len({r.source for r in sl.rows})} sources; the pools' step "
        f"scale fitted on all rows: {sl.fit.decode:.3f} (each source held out: its rows "
        "predicted with the scale fitted on the others')",
        f"  {'row':<58} {'measured':>9} {'before':>9} {'held out':>9}  TPOT ms meas/held",
    ]
    for r in sl.rows:
        held = r.held.tok_per_s_per_gpu if r.held else float("nan")
        tpot = ""
        if r.measured_tpot_ms is not None and r.held and r.held.tpot_ms is not None:
            tpot = f"{r.measured_tpot_ms:.0f} / {r.held.tpot_ms:.0f}"
        lines.append(
            f"  {r.label[:58]:<58} {r.measured:9,.0f} {r.raw.tok_per_s_per_gpu:9,.0f} "
            f"{held:9,.0f}  {tpot}"
        )
    for name, metric, phase in (
        ("tok/s a GPU of the tested pool", "throughput", None),
        ("output tok/s a decode GPU", "throughput", "decode"),
        ("TPOT (batch stated)", "tpot", None),
    ):
        lines.append(
            f"  median APE {name:<31} (n {sl.count(metric, phase):>2}): before the fit "
            f"{_pct(sl.median_ape('before', metric, phase)):>4}, held out by source "
            f"{_pct(sl.median_ape('held', metric, phase)):>4} (target <= {TARGET_MEDIAN:.0%})"
        )
    return "\n".join(lines)


def write_fit(sl: DisaggregatedSlice, path: Path = FIT_FILE) -> bool:
    """Write the fit on all rows to ``path`` (``data/disaggregated_fit.json``); the same figures
    keep the file's date and bytes. True when the file changed."""
    figures = {
        "prefill_step_scale": round(sl.fit.prefill, 4),
        "decode_step_scale": round(sl.fit.decode, 4),
        "rows": len(sl.rows),
        "sources": len({r.source for r in sl.rows}),
        "held_out_by_source": {
            "median_ape_tok_per_s_per_gpu": _round(sl.median_ape("held", "throughput")),
            "median_ape_output_tok_per_s_per_decode_gpu": _round(
                sl.median_ape("held", "throughput", "decode")
            ),
            "median_ape_tpot": _round(sl.median_ape("held", "tpot")),
        },
    }
    old: dict[str, Any] = {}
    if path.exists():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            old = {}
    if {k: old.get(k) for k in figures} == figures:
        return False
    data = {
        "source": "python -m planner validate --write-disaggregated-fit: exp(median(ln("
        "predicted / measured))) of the tested pool's tokens/s a GPU over every row "
        "of data/measured_disaggregated.csv, the step-time model of data/perf_fit.npz as is "
        "(planner/perf/disaggregated_validation.py)",
        "as_of": date.today().isoformat(),
        **figures,
    }
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return True


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


__all__ = [
    "TARGET_MEDIAN",
    "DisaggregatedRow",
    "DisaggregatedSlice",
    "PoolFigures",
    "disaggregated_slice",
    "fit_scales",
    "format_slice",
    "measured_rows",
    "pool_alone",
    "write_fit",
]
