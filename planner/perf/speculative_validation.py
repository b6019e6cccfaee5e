"""The speculative rows of a validation as their own slice, with the speed-up over the same
configuration measured without speculation (``MeasuredResult.spec_baseline_ref``).

For each measured row that speculated, from held-out predictions (each row predicted by a model
fitted without it, :func:`planner.perf.validation.cross_validate`): the absolute percentage
error of output tokens/s and TPOT, and the speed-up with/without speculation measured
(``tok/s with / tok/s without``; for TPOT ``without / with``) against the one predicted from
the two held-out predictions. The issue's targets: median APE <= 20% and the predicted speed-up
within 15% of the measured one.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from planner.perf.validation import HeldOut

METRICS = ("output_tok_per_s", "tpot")


@dataclass(frozen=True)
class SpeculativeRow:
    """One speculative row: its errors and its speed-ups, measured and predicted."""

    label: str
    method: str
    num_spec_tokens: int | None
    ape: dict[str, float | None]
    #: metric -> (measured speed-up, predicted speed-up); None without a baseline row
    speedup: dict[str, tuple[float, float] | None]

    def speedup_error(self, metric: str) -> float | None:
        pair = self.speedup.get(metric)
        return abs(pair[1] / pair[0] - 1.0) if pair else None


def _ratio(held: HeldOut, base: HeldOut, metric: str, which: str) -> float | None:
    a = getattr(held, which).get(metric)
    b = getattr(base, which).get(metric)
    if not a or not b:
        return None
    # throughput: with / without; time per token: without / with (both > 1 is a gain)
    return a / b if metric == "output_tok_per_s" else b / a


def speculative_slice(held: list[HeldOut]) -> list[SpeculativeRow]:
    """The speculative rows of ``held`` with their errors and speed-ups."""
    by_ref = {h.sample.result.source_ref: h for h in held if h.sample.result.source_ref}
    rows: list[SpeculativeRow] = []
    for h in held:
        r = h.sample.result
        if r.spec_method in (None, "none"):
            continue
        base = by_ref.get(r.spec_baseline_ref) if r.spec_baseline_ref else None
        speedup: dict[str, tuple[float, float] | None] = {}
        for metric in METRICS:
            measured = _ratio(h, base, metric, "measured") if base else None
            predicted = _ratio(h, base, metric, "predicted") if base else None
            speedup[metric] = (measured, predicted) if measured and predicted else None
        rows.append(
            SpeculativeRow(
                label=(
                    f"{r.engine} {r.engine_version or ''} {r.model} {r.precision} "
                    f"{r.num_gpus}x{r.gpu} TP{r.tp}, {r.input_len}/{r.output_len}, {r.load}"
                ),
                method=str(r.spec_method),
                num_spec_tokens=r.num_spec_tokens,
                ape={m: h.ape(m) for m in METRICS},
                speedup=speedup,
            )
        )
    return rows


def format_slice(rows: list[SpeculativeRow]) -> str:
    """The slice as a text table with its medians."""
    if not rows:
        return "== Speculative decoding ==\n(no measured row speculated)"
    lines = [
        "== Speculative decoding (held out) ==",
        f"{'row':<72} {'method':>8} {'APE tok/s':>9} {'APE TPOT':>8} "
        f"{'speed-up tok/s meas/pred':>25} {'TPOT meas/pred':>15}",
    ]

    def pct(v: float | None) -> str:
        return f"{v:.0%}" if v is not None else "-"

    def pair(p: tuple[float, float] | None) -> str:
        return f"{p[0]:.2f}x/{p[1]:.2f}x" if p else "-"

    for row in rows:
        method = f"{row.method} k={row.num_spec_tokens or '-'}"
        lines.append(
            f"{row.label[:72]:<72} {method:>8} {pct(row.ape['output_tok_per_s']):>9} "
            f"{pct(row.ape['tpot']):>8} {pair(row.speedup['output_tok_per_s']):>25} "
            f"{pair(row.speedup['tpot']):>15}"
        )
    summary = []
    for metric in METRICS:
        apes = [r.ape[metric] for r in rows if r.ape[metric] is not None]
        errors = [e for r in rows if (e := r.speedup_error(metric)) is not None]
        if apes:
            summary.append(f"median APE {metric} {statistics.median(apes):.0%}")  # type: ignore[type-var]
        if errors:
            summary.append(f"median speed-up error {metric} {statistics.median(errors):.0%}")
    lines.append("; ".join(summary))
    return "\n".join(lines)
