"""Cross-validation of the performance model on the stored measured results.

Schemes, from the hardest to the easiest:

- leave-one-source-out: every publisher's results (GPUStack's performance lab, NVIDIA's
  TensorRT-LLM tables, NVIDIA NIM, the Tandemn vLLM sweep, a user's own runs) predicted by a fit
  that never saw that publisher: its engines, versions, client and methodology. This is what a
  user faces with a result nobody fed the model;
- leave-one-model-class-out: every architecture class (dense GQA, coarse MoE, fine-grained MoE,
  MLA, sliding-window, hybrid linear attention; see
  :attr:`planner.catalog.ModelArchitecture.model_classes`) held out in turn. A model in several
  classes (DeepSeek-V3: MLA and fine-grained MoE) is held out with each, so every fold's fit has
  seen no model of its class;
- leave-one-GPU-out (the "GPU nobody profiled" case), leave-one-model-out, random 5-fold.

Each held-out row is predicted with the coefficients fitted on the other folds; a row whose
arrivals follow the clock is re-simulated with them. (The training rows' own clock-driven
schedules come from the full fit: they shape which steps a training row contains, never the
coefficients' view of a held-out row.)

Errors are absolute percentage errors |predicted / measured - 1| of output throughput, TTFT and
TPOT (each with the statistic the source reported: mean or p50; mean ITL for mean_itl), next to
those of the plain roofline in the same simulator, and the share of held-out rows whose measured
throughput falls inside the predicted 80% interval.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from planner.catalog import MODEL_CLASSES, MeasuredResult
from planner.perf.calibration import FitSample, FittedCoefficients, fit_coefficients
from planner.perf.metrics import RunMetrics, run_metrics
from planner.perf.simulator import simulate
from planner.perf.step_time import roofline_coefficients
from planner.perf.uncertainty import (
    MAX_NOVELTY,
    SeenData,
    interval_factors,
    layouts_of,
    novelty,
    term_shares,
    widen,
)

SCHEMES: dict[str, str] = {
    "source": "leave-one-source-out",
    "class": "leave-one-model-class-out",
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
    if itl_stat == "p50_tpot":
        out["tpot"] = m.tpot_ms("p50")
    elif itl_stat == "mean_tpot":
        out["tpot"] = m.tpot_ms("mean")
    else:
        out["tpot"] = m.itl_ms("mean")
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
    reasons: tuple[str, ...] = ()
    own_low: float = 1.0  # the interval's factors before the novelty widening
    own_high: float = 1.0

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


def source_key(result: MeasuredResult) -> str:
    """The publisher of a measured row: ``owner/repo`` of a repository reference, the host and
    first path segment of a URL, ``user`` for a user's runs."""
    if result.origin == "user":
        return "user"
    text = result.source.strip()
    if "://" in text:
        host, _, path = text.split("://", 1)[1].partition("/")
        first = path.split("/", 1)[0]
        return f"{host}/{first}" if first else host
    return text.split()[0].split("@")[0] if text else "unknown"


def sample_classes(sample: FitSample) -> tuple[str, ...]:
    return sample.dep.card.architecture.model_classes


def folds(
    samples: Sequence[FitSample], scheme: str, k: int = 5, seed: int = 0
) -> list[tuple[str, list[int]]]:
    """(fold name, test indices) of a scheme; class folds overlap (one a class a model has)."""
    if scheme == "class":
        out_c: dict[str, list[int]] = {}
        for i, sample in enumerate(samples):
            for cls in sample_classes(sample):
                out_c.setdefault(cls, []).append(i)
        return [(c, out_c[c]) for c in MODEL_CLASSES if c in out_c]
    if scheme == "source":
        keys = [source_key(s.result) for s in samples]
    elif scheme == "gpu":
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
    seen: SeenData,
) -> HeldOut:
    c = fitted.full_for(sample.key)
    trace = simulate(sample.dep, c) if sample.time_driven else sample.trace
    m = run_metrics(trace, c, sample.dep.replicas)
    own = interval_factors(fitted, sample.key, "output_tok_per_s", term_shares(trace.end, c))
    reasons = novelty(
        sample.key,
        sample.dep.card.architecture.model_classes,
        layouts_of(sample.dep.expert_parallel, sample.dep.data_parallel_size),
        seen,
    )
    lo, hi = widen(own, len(reasons))
    predicted = predicted_metrics(sample.result, m)
    return HeldOut(
        sample=sample,
        fold=fold,
        measured=measured_metrics(sample.result),
        predicted=predicted,
        roofline=roofline,
        low=predicted["output_tok_per_s"] * lo,
        high=predicted["output_tok_per_s"] * hi,
        far=(sample.family, sample.gpu.lower()) not in seen.family_gpu,
        reasons=tuple(reasons),
        own_low=own[0],
        own_high=own[1],
    )


def _fold_keys(sample: FitSample, scheme: str, j: int) -> tuple[str, ...]:
    """The fold(s) a test-only row belongs to."""
    if scheme == "random":
        return (f"fold {j % 5 + 1}",)
    if scheme == "class":
        return sample_classes(sample)
    if scheme == "source":
        return (source_key(sample.result),)
    return (sample.gpu if scheme == "gpu" else sample.result.model.lower(),)


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
    to (same source, class, GPU or model; for random folds, one each in turn) and are never
    trained on; their HeldOut rows follow the others. With class folds a row is predicted
    once for each class of its model.
    """
    roof = list(roofline) if roofline is not None else roofline_predictions(samples)
    roof_extra = roofline_predictions(test_only) if test_only else []
    plan = folds(samples, scheme)
    extra: dict[str, list[int]] = {}
    for j, sample in enumerate(test_only):
        for name in _fold_keys(sample, scheme, j):
            extra.setdefault(name, []).append(j)
    for name in extra:
        if name not in dict(plan):
            plan.append((name, []))
    held: list[HeldOut] = []
    held_extra: list[tuple[int, int, HeldOut]] = []
    for order, (name, test) in enumerate(plan):
        test_set = set(test)
        train = [s for i, s in enumerate(samples) if i not in test_set]
        if not train:
            continue
        fitted = fit(train)
        seen = SeenData.of(train)
        for i in test:
            held.append(predict_held_out(samples[i], fitted, name, roof[i], seen))
        for j in extra.get(name, []):
            held_extra.append(
                (j, order, predict_held_out(test_only[j], fitted, name, roof_extra[j], seen))
            )
    return held + [h for _, _, h in sorted(held_extra, key=lambda t: (t[0], t[1]))]


@dataclass
class ErrorRow:
    """Errors of a group of held-out rows; ``gpu`` is the group's second key (a GPU, a model
    class or a source, per :func:`error_table`'s ``by``)."""

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


def _group_keys(h: HeldOut, by: str) -> tuple[str, ...]:
    if by == "gpu":
        return (h.sample.gpu,)
    if by == "class":
        return sample_classes(h.sample)
    if by == "fold":
        return (h.fold,)
    if by == "source":
        return (source_key(h.sample.result),)
    raise ValueError(f"unknown grouping {by!r}; one of gpu, class, fold, source")


def error_table(held: Sequence[HeldOut], by: str = "gpu") -> list[ErrorRow]:
    """Per (engine family, ``by``), per family, per ``by`` over all families, and overall.

    ``by``: ``gpu``, ``class`` (a row counts in each class of its model), ``source``, or
    ``fold`` (the fold that held the row out: the class of a leave-one-class-out fold).
    """
    rows: list[ErrorRow] = []
    groups: dict[tuple[str, str], list[HeldOut]] = {}
    across: dict[str, list[HeldOut]] = {}
    for h in held:
        for key in _group_keys(h, by):
            groups.setdefault((h.sample.family, key), []).append(h)
            across.setdefault(key, []).append(h)
    for (family, key), members in sorted(groups.items()):
        rows.append(_summary(members, family, key))
    for family in sorted({h.sample.family for h in held}):
        rows.append(_summary([h for h in held if h.sample.family == family], family, "all"))
    if len({h.sample.family for h in held}) > 1:
        for key, members in sorted(across.items()):
            rows.append(_summary(members, "all", key))
    rows.append(_summary(held, "all", "all"))
    return rows


def _pct(x: float) -> str:
    return "    -" if not math.isfinite(x) else f"{100 * x:4.0f}%"


def format_table(title: str, rows: Sequence[ErrorRow], key: str = "gpu") -> str:
    head = (
        f"{'engine':<7} {key:<24} {'rows':>4} | {'output tok/s APE':^27} | "
        f"{'TTFT APE':^31} | {'TPOT APE':^31} | {'80% int':>7}\n"
        f"{'':<7} {'':<24} {'':>4} | {'ours med/p90':>13} {'roofline':>13} | "
        f"{'n':>3} {'ours med/p90':>13} {'roofline':>13} | "
        f"{'n':>3} {'ours med/p90':>13} {'roofline':>13} | {'cover':>7}"
    )
    lines = [title, head, "-" * len(head.splitlines()[0])]
    previous = ""
    for r in rows:
        _, med_t, p90_t, rmed_t, rp90_t = r.stat("output_tok_per_s")
        n_f, med_f, p90_f, rmed_f, rp90_f = r.stat("ttft")
        n_p, med_p, p90_p, rmed_p, rp90_p = r.stat("tpot")
        cover = "      -" if r.coverage is None else f"{100 * r.coverage:6.0f}%"
        if (r.gpu == "all" and r.engine != "all") or (r.engine == "all" and previous != "all"):
            lines.append("")
        previous = r.engine
        lines.append(
            f"{r.engine:<7} {r.gpu[:24]:<24} {r.rows:>4} | {_pct(med_t)} /{_pct(p90_t)} "
            f"{_pct(rmed_t)} /{_pct(rp90_t)} | {n_f:>3} {_pct(med_f)} /{_pct(p90_f)} "
            f"{_pct(rmed_f)} /{_pct(rp90_f)} | {n_p:>3} {_pct(med_p)} /{_pct(p90_p)} "
            f"{_pct(rmed_p)} /{_pct(rp90_p)} | {cover}"
        )
    return "\n".join(lines)


def median_ape(
    held: Sequence[HeldOut], family: str | None = None, *, moe: bool | None = None
) -> float:
    """Median APE of output throughput (optionally of one engine family's rows, or of the MoE
    (``moe=True``) or dense rows)."""
    errs = [
        e
        for h in held
        if (family is None or h.sample.family == family)
        and (moe is None or h.sample.dep.card.architecture.is_moe == moe)
        and (e := h.ape("output_tok_per_s")) is not None
    ]
    return float(np.median(errs)) if errs else math.nan


def interval_coverage(held: Sequence[HeldOut]) -> float | None:
    """Share of held-out rows whose measured throughput lies inside the 80% interval."""
    covered = [c for h in held if (c := h.covered) is not None]
    return float(np.mean(covered)) if covered else None


def calibrate_interval_multipliers(held: Sequence[HeldOut], target: float = 0.8) -> list[float]:
    """Half-width multipliers, for 0 .. MAX_NOVELTY (and more) novelty reasons, that make
    ``target`` of the held-out rows with that many reasons fall inside their 80% interval.

    A row's need is z = log(measured / predicted) over its own (unwidened) half-width on the
    side it falls: the multiplier is the ``target`` quantile of z in its group. Groups with
    fewer than 8 rows borrow the next smaller count's; the sequence is made non-decreasing
    (more that is new is never surer).
    """
    needs: dict[int, list[float]] = {}
    for h in held:
        meas = h.measured.get("output_tok_per_s")
        pred = h.predicted.get("output_tok_per_s")
        if not meas or not pred:
            continue
        ratio = math.log(meas / pred)
        half = math.log(h.own_high) if ratio >= 0 else -math.log(h.own_low)
        needs.setdefault(min(len(h.reasons), MAX_NOVELTY), []).append(abs(ratio) / max(half, 1e-6))
    out: list[float] = []
    for n in range(MAX_NOVELTY + 1):
        values = needs.get(n, [])
        if len(values) >= 8:
            out.append(float(np.quantile(values, target)))
        else:
            out.append(out[-1] if out else 1.0)
    for n in range(1, len(out)):
        out[n] = max(out[n], out[n - 1])
    return out


#: the headline held-out figures ``python -m planner validate --write-summary`` writes
SUMMARY_FILE = Path(__file__).resolve().parents[2] / "data" / "validation_summary.json"


def validation_summary(path: Path | None = None) -> dict[str, Any] | None:
    """The stored held-out figures (None when the file is missing or unreadable)."""
    try:
        loaded = json.loads((path or SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def summary_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row a fold: its median, p90, MoE and dense medians, per-engine medians, coverage
    (fractions; NaN where a fold has no such rows)."""
    rows = []
    for entry in summary.get("schemes", {}).values():
        rows.append(
            {
                "fold": entry["title"],
                "median": entry["median_ape_output_tok_per_s"],
                "p90": entry["p90_ape_output_tok_per_s"],
                "MoE median": entry["median_ape_output_tok_per_s_moe"],
                "dense median": entry["median_ape_output_tok_per_s_dense"],
                "vLLM": entry["vllm_median"],
                "SGLang": entry["sglang_median"],
                "TensorRT-LLM": entry["trtllm_median"],
                "80% interval coverage": entry["interval_coverage_80"],
            }
        )
    return rows
