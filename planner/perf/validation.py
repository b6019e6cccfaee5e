"""Cross-validation of the performance model on the stored measured results.

Schemes: leave-one-GPU-out (every GPU predicted by a fit that never saw it: the "GPU nobody
profiled" case), leave-one-model-out, and random 5-fold. Each held-out row is predicted with the
coefficients fitted on the other folds; a row whose arrivals follow the clock is re-simulated with
them. (The training rows' own clock-driven schedules come from the full fit: they shape which
steps a training row contains, never the coefficients' view of a held-out row.)

Errors are absolute percentage errors |predicted / measured - 1| of output throughput, TTFT and
TPOT (each with the statistic the source reported: mean or p50; mean ITL for mean_itl), next to
those of the plain roofline in the same simulator, and the share of held-out rows whose measured
throughput falls inside the predicted 80% interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from planner.catalog import MeasuredResult
from planner.perf.calibration import FitSample, FittedCoefficients, fit_coefficients
from planner.perf.metrics import RunMetrics, run_metrics
from planner.perf.simulator import simulate
from planner.perf.step_time import roofline_coefficients
from planner.perf.uncertainty import interval_factors, term_shares

SCHEMES: dict[str, str] = {
    "gpu": "leave-one-GPU-out",
    "model": "leave-one-model-out",
    "random": "random 5-fold",
}
METRIC_NAMES = ("output_tok_per_s", "ttft", "tpot")


def measured_metrics(result: MeasuredResult) -> dict[str, float]:
    out: dict[str, float] = {}
    tps = result.output_tok_per_s
    if tps is None and result.total_tok_per_s:
        tps = result.total_tok_per_s * result.output_len / (result.input_len + result.output_len)
    if tps:
        out["output_tok_per_s"] = tps
    if result.ttft_ms:
        out["ttft"] = result.ttft_ms
    if result.itl_ms:
        out["tpot"] = result.itl_ms
    return out


def predicted_metrics(result: MeasuredResult, m: RunMetrics) -> dict[str, float]:
    """The simulated run's figures with the statistics the measured row reports."""
    out = {"output_tok_per_s": m.output_tok_per_s}
    ttft_stat = result.ttft_stat or "mean"
    out["ttft"] = m.ttft_ms("p50" if ttft_stat == "p50" else "mean")
    itl_stat = result.itl_stat or "mean_itl"
    out["tpot"] = m.tpot_ms("p50") if itl_stat == "p50_tpot" else m.itl_ms("mean")
    return out


@dataclass
class HeldOut:
    sample: FitSample
    fold: str
    measured: dict[str, float]
    predicted: dict[str, float]
    roofline: dict[str, float]
    low: float
    high: float
    far: bool

    def ape(self, metric: str, baseline: bool = False) -> float | None:
        if metric not in self.measured:
            return None
        pred = (self.roofline if baseline else self.predicted).get(metric)
        if pred is None or not math.isfinite(pred):
            return None
        return abs(pred / self.measured[metric] - 1.0)

    @property
    def covered(self) -> bool | None:
        meas = self.measured.get("output_tok_per_s")
        if meas is None:
            return None
        return self.low <= meas <= self.high


def folds(
    samples: Sequence[FitSample], scheme: str, k: int = 5, seed: int = 0
) -> list[tuple[str, list[int]]]:
    if scheme == "gpu":
        keys = [s.gpu for s in samples]
    elif scheme == "model":
        keys = [s.result.model.lower() for s in samples]
    elif scheme == "random":
        order = np.random.default_rng(seed).permutation(len(samples))
        return [(f"fold {i + 1}", sorted(int(j) for j in order[i::k])) for i in range(k)]
    else:
        raise ValueError(f"unknown scheme {scheme!r}; one of {list(SCHEMES)}")
    out: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        out.setdefault(key, []).append(i)
    return sorted(out.items())


def roofline_predictions(samples: Sequence[FitSample]) -> list[dict[str, float]]:
    c = roofline_coefficients()
    out = []
    for s in samples:
        trace = simulate(s.dep, c) if s.time_driven else s.trace
        out.append(predicted_metrics(s.result, run_metrics(trace, c, s.dep.replicas)))
    return out


def predict_held_out(
    sample: FitSample,
    fitted: FittedCoefficients,
    fold: str,
    roofline: dict[str, float],
    seen_groups: set[tuple[str, str]],
) -> HeldOut:
    c = fitted.full_for(sample.family, sample.gpu, sample.version)
    trace = simulate(sample.dep, c) if sample.time_driven else sample.trace
    m = run_metrics(trace, c, sample.dep.replicas)
    lo, hi = interval_factors(
        fitted,
        sample.family,
        sample.gpu,
        sample.version,
        "output_tok_per_s",
        term_shares(trace.end, c),
    )
    predicted = predicted_metrics(sample.result, m)
    return HeldOut(
        sample=sample,
        fold=fold,
        measured=measured_metrics(sample.result),
        predicted=predicted,
        roofline=roofline,
        low=predicted["output_tok_per_s"] * lo,
        high=predicted["output_tok_per_s"] * hi,
        far=(sample.family, sample.gpu) not in seen_groups,
    )


def _fold_key(sample: FitSample, scheme: str) -> str:
    return sample.gpu if scheme == "gpu" else sample.result.model.lower()


def cross_validate(
    samples: Sequence[FitSample],
    scheme: str,
    *,
    roofline: Sequence[dict[str, float]] | None = None,
    fit: Callable[[Sequence[FitSample]], FittedCoefficients] = fit_coefficients,
    test_only: Sequence[FitSample] = (),
) -> list[HeldOut]:
    """Held-out predictions of every sample under ``scheme`` (see :data:`SCHEMES`).

    ``test_only`` rows (excluded from fitting) are predicted by the fit of the fold they belong
    to (same GPU or model; for random folds, one each in turn) and are never trained on; their
    HeldOut rows follow the others, in order.
    """
    roof = list(roofline) if roofline is not None else roofline_predictions(samples)
    roof_extra = roofline_predictions(test_only) if test_only else []
    plan = folds(samples, scheme)
    extra: dict[str, list[int]] = {}
    for j, sample in enumerate(test_only):
        name = f"fold {j % 5 + 1}" if scheme == "random" else _fold_key(sample, scheme)
        extra.setdefault(name, []).append(j)
    for name in extra:
        if name not in dict(plan):
            plan.append((name, []))
    held: list[HeldOut] = []
    held_extra: dict[int, HeldOut] = {}
    for name, test in plan:
        test_set = set(test)
        train = [s for i, s in enumerate(samples) if i not in test_set]
        if not train:
            continue
        fitted = fit(train)
        seen = {(s.family, s.gpu) for s in train}
        for i in test:
            held.append(predict_held_out(samples[i], fitted, name, roof[i], seen))
        for j in extra.get(name, []):
            held_extra[j] = predict_held_out(test_only[j], fitted, name, roof_extra[j], seen)
    return held + [held_extra[j] for j in sorted(held_extra)]


@dataclass
class ErrorRow:
    engine: str
    gpu: str
    rows: int
    stats: dict[str, tuple[int, float, float, float, float]] = field(default_factory=dict)
    coverage: float | None = None

    def stat(self, metric: str) -> tuple[int, float, float, float, float]:
        """(n, median, p90, roofline median, roofline p90) of the metric's APE."""
        return self.stats.get(metric, (0, math.nan, math.nan, math.nan, math.nan))


def _summary(held: Sequence[HeldOut], engine: str, gpu: str) -> ErrorRow:
    row = ErrorRow(engine=engine, gpu=gpu, rows=len(held))
    for metric in METRIC_NAMES:
        ours = [e for h in held if (e := h.ape(metric)) is not None]
        base = [e for h in held if (e := h.ape(metric, baseline=True)) is not None]
        if ours:
            row.stats[metric] = (
                len(ours),
                float(np.median(ours)),
                float(np.quantile(ours, 0.9)),
                float(np.median(base)) if base else math.nan,
                float(np.quantile(base, 0.9)) if base else math.nan,
            )
    covered = [c for h in held if (c := h.covered) is not None]
    row.coverage = float(np.mean(covered)) if covered else None
    return row


def error_table(held: Sequence[HeldOut]) -> list[ErrorRow]:
    """Per (engine family, GPU), per family, and overall."""
    rows: list[ErrorRow] = []
    groups: dict[tuple[str, str], list[HeldOut]] = {}
    for h in held:
        groups.setdefault((h.sample.family, h.sample.gpu), []).append(h)
    for (family, gpu), members in sorted(groups.items()):
        rows.append(_summary(members, family, gpu))
    for family in sorted({h.sample.family for h in held}):
        rows.append(_summary([h for h in held if h.sample.family == family], family, "all"))
    rows.append(_summary(held, "all", "all"))
    return rows


def _pct(x: float) -> str:
    return "    -" if not math.isfinite(x) else f"{100 * x:4.0f}%"


def format_table(title: str, rows: Sequence[ErrorRow]) -> str:
    head = (
        f"{'engine':<7} {'gpu':<14} {'rows':>4} | {'output tok/s APE':^27} | "
        f"{'TTFT APE':^31} | {'TPOT APE':^31} | {'80% int':>7}\n"
        f"{'':<7} {'':<14} {'':>4} | {'ours med/p90':>13} {'roofline':>13} | "
        f"{'n':>3} {'ours med/p90':>13} {'roofline':>13} | "
        f"{'n':>3} {'ours med/p90':>13} {'roofline':>13} | {'cover':>7}"
    )
    lines = [title, head, "-" * len(head.splitlines()[0])]
    for r in rows:
        _, med_t, p90_t, rmed_t, rp90_t = r.stat("output_tok_per_s")
        n_f, med_f, p90_f, rmed_f, rp90_f = r.stat("ttft")
        n_p, med_p, p90_p, rmed_p, rp90_p = r.stat("tpot")
        cover = "      -" if r.coverage is None else f"{100 * r.coverage:6.0f}%"
        if r.gpu == "all" and r.engine != "all":
            lines.append("")
        lines.append(
            f"{r.engine:<7} {r.gpu:<14} {r.rows:>4} | {_pct(med_t)} /{_pct(p90_t)} "
            f"{_pct(rmed_t)} /{_pct(rp90_t)} | {n_f:>3} {_pct(med_f)} /{_pct(p90_f)} "
            f"{_pct(rmed_f)} /{_pct(rp90_f)} | {n_p:>3} {_pct(med_p)} /{_pct(p90_p)} "
            f"{_pct(rmed_p)} /{_pct(rp90_p)} | {cover}"
        )
    return "\n".join(lines)


def median_ape(held: Sequence[HeldOut], family: str | None = None) -> float:
    """Median APE of output throughput (optionally of one engine family's rows)."""
    errs = [
        e
        for h in held
        if (family is None or h.sample.family == family)
        and (e := h.ape("output_tok_per_s")) is not None
    ]
    return float(np.median(errs)) if errs else math.nan
