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
- newest releases held out: every row of an engine release that came out within
  :data:`RELEASE_FOLD_DAYS` of the newest dated release in the rows (first PyPI upload,
  :mod:`planner.perf.releases`), predicted by a fit on the older releases alone. This is what a
  user running a release newer than every measured one faces: the release-age trend carries it
  (:func:`planner.perf.calibration.release_age`);
- leave-one-GPU-out (the "GPU nobody profiled" case), leave-one-model-out, random 5-fold.

Each held-out row is predicted with the coefficients fitted on the other folds; a row whose
arrivals follow the clock is re-simulated with them. (The training rows' own clock-driven
schedules come from the full fit: they shape which steps a training row contains, never the
coefficients' view of a held-out row.)

Errors are absolute percentage errors |predicted / measured - 1| of output throughput, TTFT and
TPOT (each with the statistic the source reported: mean or p50; mean ITL for mean_itl), next to
those of the plain roofline in the same simulator, and for each metric the share of held-out
rows whose measured figure falls inside its predicted 80% interval; latencies also per
concurrency band (:data:`CONCURRENCY_BANDS`). The intervals' calibration is fitted on the
leave-one-source-out rows here too (:func:`calibrate_intervals`).
"""

from __future__ import annotations

import csv
import json
import math
import multiprocessing
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, fields
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from planner.catalog import MODEL_CLASSES, MeasuredResult
from planner.errors import InvalidInputError
from planner.perf import latency_stats
from planner.perf.calibration import FitSample, FittedCoefficients, fit_coefficients
from planner.perf.latency_stats import HISTOGRAM_ITL, HISTOGRAM_TTFT
from planner.perf.metrics import RunMetrics, run_metrics
from planner.perf.releases import release_date
from planner.perf.simulator import SimTrace, simulate
from planner.perf.steady_state import SteadyStateModel
from planner.perf.step_time import roofline_coefficients
from planner.perf.uncertainty import (
    CALIBRATED_METRICS,
    INTERVAL_METRICS,
    LOAD_GROUPS,
    MAX_NOVELTY,
    MIN_MULTIPLIER,
    P99_OF,
    SWEPT_LOADS,
    IntervalCalibration,
    SeenData,
    family_arch,
    interval_calibration,
    interval_factors,
    latency_term_vectors,
    layouts_of,
    load_group,
    near_saturation,
    novelty,
    release_unmeasured,
    term_shares,
)

SCHEMES: dict[str, str] = {
    "source": "leave-one-source-out",
    "class": "leave-one-model-class-out",
    "release": "newest releases held out",
    "gpu": "leave-one-GPU-out",
    "model": "leave-one-model-out",
    "random": "random 5-fold",
}
#: the 99th percentiles a source may report beside its mean or median, each with the latency
#: whose interval factors it starts from: ``predict`` widens a latency's p99 by those factors
#: and the p99's own multipliers (:mod:`planner.perf.uncertainty`), calibrated here on the rows
#: that publish the p99 (:func:`calibrate_intervals`), so scoring the p99 against its interval
#: checks the intervals the SLO gate reads.
P99_METRICS: dict[str, str] = P99_OF
METRIC_NAMES = ("output_tok_per_s", "ttft", "tpot", *P99_METRICS)
#: the latencies validation reports, with their labels
LATENCY_LABELS: tuple[tuple[str, str], ...] = (
    ("ttft", "TTFT"),
    ("tpot", "TPOT"),
    ("ttft_p99", "TTFT p99"),
    ("tpot_p99", "TPOT p99"),
)


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
    if result.ttft_p99_ms:
        out["ttft_p99"] = result.ttft_p99_ms
    if result.tpot_p99_ms:
        out["tpot_p99"] = result.tpot_p99_ms
    return out


def predicted_metrics(result: MeasuredResult, m: RunMetrics) -> dict[str, float]:
    """The simulated run's figures with the statistics the measured row reports."""
    out = {"output_tok_per_s": m.output_tok_per_s}
    out["ttft"] = latency_stats.ttft_ms(m, result.ttft_stat)
    out["tpot"] = latency_stats.tpot_ms(m, result.itl_stat)
    # the 99th percentile taken as the row's figure is (over the simulated requests, weighted
    # as the measured run's, or over vLLM's histogram of them)
    out["ttft_p99"] = latency_stats.ttft_p99_ms(m, result.ttft_stat)
    out["tpot_p99"] = latency_stats.tpot_p99_ms(m, result.itl_stat)
    return out


#: the concurrency bands validation reports latencies by: requests in flight (see
#: :attr:`HeldOut.in_flight`), inclusive upper bounds
CONCURRENCY_BANDS: tuple[tuple[str, float], ...] = (
    ("1-4", 4.0),
    ("5-16", 16.0),
    ("17-64", 64.0),
    (">64", math.inf),
)


def concurrency_band(in_flight: float) -> str:
    """The band of :data:`CONCURRENCY_BANDS` ``in_flight`` requests fall in."""
    for name, upper in CONCURRENCY_BANDS:
        if in_flight <= upper + 1e-9:
            return name
    return CONCURRENCY_BANDS[-1][0]


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
    own_low: float = 1.0  # the throughput interval's factors before the novelty widening
    own_high: float = 1.0
    #: each metric's interval factors before the widening (:data:`INTERVAL_METRICS`)
    own: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: the row's engine release is one the fold's fit never saw
    new_release: bool = False
    #: requests in flight: the stated concurrency of a closed loop, else the simulated mean
    #: running batch (a rate or an offline batch states none)
    in_flight: float = 1.0

    def ape(self, metric: str, baseline: bool = False) -> float | None:
        if metric not in self.measured:
            return None
        pred = (self.roofline if baseline else self.predicted).get(metric)
        if pred is None or not math.isfinite(pred):
            return None
        return abs(pred / self.measured[metric] - 1.0)

    def interval(
        self, metric: str, calibration: IntervalCalibration | None = None
    ) -> tuple[float, float] | None:
        """The metric's 80% interval with ``calibration`` (the stored one when None); a p99
        (:data:`P99_METRICS`) takes its latency's factors around its own prediction, widened by
        its own multipliers."""
        pred = self.predicted.get(metric)
        base = P99_METRICS.get(metric, metric)
        own = self.own.get(base)
        if own is None and base == "output_tok_per_s":
            own = (self.own_low, self.own_high)
        if pred is None or own is None or not math.isfinite(pred):
            return None
        cal = calibration or interval_calibration()
        lo, hi = cal.widen(
            own,
            len(self.reasons),
            metric,
            self.new_release,
            self.family,
            self.model_classes,
            self.load,
        )
        return pred * lo, pred * hi

    @property
    def family(self) -> str:
        """The row's engine family ('' for a row that does not say)."""
        return str(getattr(self.sample, "family", ""))

    @property
    def load(self) -> str | None:
        """How the row's requests were offered (:data:`planner.loads.LoadKind`; None for a row
        that does not say)."""
        load = getattr(getattr(self.sample, "result", None), "load", None)
        return str(load) if load else None

    @property
    def model_classes(self) -> tuple[str, ...]:
        """The model's architecture classes (none for a row that does not say)."""
        dep = getattr(self.sample, "dep", None)
        arch = getattr(getattr(dep, "card", None), "architecture", None)
        return tuple(getattr(arch, "model_classes", ()))

    def covers(self, metric: str, calibration: IntervalCalibration | None = None) -> bool | None:
        """Whether the measured figure lies inside the metric's 80% interval (None: unmeasured)."""
        meas = self.measured.get(metric)
        bounds = self.interval(metric, calibration)
        if meas is None or bounds is None:
            return None
        return bounds[0] <= meas <= bounds[1]

    @property
    def covered(self) -> bool | None:
        return self.covers("output_tok_per_s")

    @property
    def band(self) -> str:
        return concurrency_band(self.in_flight)


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


#: the newest releases' fold holds out the releases of this many days up to the newest dated one
#: (half a year: SGLang 0.5.6-0.5.9 and vLLM 0.12-0.22 on the shipped rows)
RELEASE_FOLD_DAYS = 183


def sample_release_date(sample: FitSample) -> date | None:
    return release_date(sample.family, sample.result.engine_version)


def release_cut(samples: Sequence[FitSample]) -> date | None:
    """The first release date of the newest releases' fold: :data:`RELEASE_FOLD_DAYS` before
    the newest dated release among ``samples`` (None when none is dated)."""
    dated = [d for s in samples if (d := sample_release_date(s)) is not None]
    return max(dated) - timedelta(days=RELEASE_FOLD_DAYS) if dated else None


def release_fold_name(cut: date) -> str:
    return f"released {cut.isoformat()} or later"


def folds(
    samples: Sequence[FitSample], scheme: str, k: int = 5, seed: int = 0
) -> list[tuple[str, list[int]]]:
    """(fold name, test indices) of a scheme; class folds overlap (one a class a model has)."""
    if scheme == "release":  # one fold: the newest releases (undated rows always train)
        cut = release_cut(samples)
        if cut is None:
            return []
        newest = [
            i
            for i, s in enumerate(samples)
            if (d := sample_release_date(s)) is not None and d >= cut
        ]
        return [(release_fold_name(cut), newest)]
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


def roofline_predictions(
    samples: Sequence[FitSample], *, simulated: bool = False
) -> list[dict[str, float]]:
    """The metrics each row's roofline coefficients predict; its clock-driven rows simulated
    with them here, or already (``simulated``: by
    :meth:`planner.perf.model.PerformanceModel.roofline_predictions`)."""
    c = roofline_coefficients()
    out = []
    for s in samples:
        trace = simulate(s.dep, c, timeline=False) if s.time_driven and not simulated else s.trace
        out.append(predicted_metrics(s.result, run_metrics(trace, c, s.dep.loaded_replicas)))
    return out


def predict_held_out(
    sample: FitSample,
    fitted: FittedCoefficients,
    fold: str,
    roofline: dict[str, float],
    seen: SeenData,
) -> HeldOut:
    c = fitted.full_for(sample.key)
    trace = simulate(sample.dep, c, timeline=False) if sample.time_driven else sample.trace
    m = run_metrics(trace, c, sample.dep.loaded_replicas)
    own = _own_factors(fitted, sample, trace, c)
    reasons = novelty(
        sample.key,
        sample.dep.card.architecture.model_classes,
        layouts_of(sample.dep.expert_parallel, sample.dep.data_parallel_size),
        seen,
    )
    new_release = release_unmeasured(sample.key, seen)
    lo, hi = interval_calibration().widen(
        own["output_tok_per_s"],
        len(reasons),
        "output_tok_per_s",
        new_release,
        sample.family,
        sample.dep.card.architecture.model_classes,
        sample.result.load,
    )
    predicted = predicted_metrics(sample.result, m)
    result = sample.result
    stated = result.concurrency if result.load == "concurrency" else None
    return HeldOut(
        sample=sample,
        fold=fold,
        measured=measured_metrics(result),
        predicted=predicted,
        roofline=roofline,
        low=predicted["output_tok_per_s"] * lo,
        high=predicted["output_tok_per_s"] * hi,
        far=(sample.family, sample.gpu.lower()) not in seen.family_gpu,
        reasons=tuple(reasons),
        own_low=own["output_tok_per_s"][0],
        own_high=own["output_tok_per_s"][1],
        own=own,
        new_release=new_release,
        in_flight=float(stated) if stated else max(m.mean_running_batch, 1.0),
    )


def _own_factors(
    fitted: FittedCoefficients, sample: FitSample, trace: SimTrace, c: np.ndarray
) -> dict[str, tuple[float, float]]:
    """Each metric's interval factors before widening, weighed by the terms of that metric as
    the model's prediction weighs them (the run's end for throughput, the mean request's
    TTFT and decode for TTFT and TPOT)."""
    ttft_vec, decode_vec = latency_term_vectors(trace)
    vectors = {"output_tok_per_s": trace.end, "ttft": ttft_vec, "tpot": decode_vec}
    fit_metric = {"output_tok_per_s": "output_tok_per_s", "ttft": "ttft", "tpot": "itl"}
    own = {
        metric: interval_factors(
            fitted, sample.key, fit_metric[metric], term_shares(vectors[metric], c)
        )
        for metric in INTERVAL_METRICS
    }
    # a rate near its predicted saturation: latencies widened as a prediction widens them
    # (planner.perf.model.PerformanceModel.utilisation)
    utilisation = rate_utilisation(sample, c)
    return {
        metric: near_saturation(factors, utilisation, metric) for metric, factors in own.items()
    }


def rate_utilisation(sample: FitSample, c: np.ndarray) -> float | None:
    """A rate row's offered rate over the saturation rate of its deployment with the
    coefficients ``c`` (None for the other loads)."""
    scenario = sample.scenario
    if scenario.load != "rate" or not scenario.request_rate:
        return None
    offered = scenario.request_rate / sample.dep.loaded_replicas  # one scheduler's share
    return SteadyStateModel(sample.dep, c).utilisation(offered)


def _fold_keys(sample: FitSample, scheme: str, j: int, cut: date | None = None) -> tuple[str, ...]:
    """The fold(s) a test-only row belongs to (``cut``: :func:`release_cut` of the fitted
    rows, for the newest releases' fold; an older or undated release belongs to none)."""
    if scheme == "release":
        released = sample_release_date(sample)
        if cut is None or released is None or released < cut:
            return ()
        return (release_fold_name(cut),)
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
    only: Collection[str] | None = None,
    jobs: int = 1,
) -> list[HeldOut]:
    """Held-out predictions of every sample under ``scheme`` (see :data:`SCHEMES`); with
    ``only``, of the folds so named alone (each still fitted on every row outside it).

    ``test_only`` rows (excluded from fitting) are predicted by the fit of the fold they belong
    to (same source, class, GPU or model; for random folds, one each in turn) and are never
    trained on; their HeldOut rows follow the others. With class folds a row is predicted
    once for each class of its model.

    ``jobs`` > 1 fits and predicts the folds in that many forked processes (where the platform
    forks: Linux, macOS), each fold as one process alone would, so the rows come out the same
    (:func:`_folds_forked`). Not from a process that runs other threads (a dashboard): a fork
    copies one thread only.
    """
    roof = list(roofline) if roofline is not None else roofline_predictions(samples)
    roof_extra = roofline_predictions(test_only) if test_only else []
    plan = folds(samples, scheme)
    cut = release_cut(samples) if scheme == "release" else None
    extra: dict[str, list[int]] = {}
    for j, sample in enumerate(test_only):
        for name in _fold_keys(sample, scheme, j, cut):
            extra.setdefault(name, []).append(j)
    for name in extra:
        if name not in dict(plan):
            plan.append((name, []))
    if only is not None:
        plan = [(name, test) for name, test in plan if name in only]
    work = _FoldWork(samples, test_only, roof, roof_extra, plan, extra, fit)
    if jobs > 1 and len(plan) > 1 and "fork" in multiprocessing.get_all_start_methods():
        done = _folds_forked(work, jobs)
    else:
        done = [_fold(work, order) for order in range(len(plan))]
    held = [h for fold_held, _ in done for _, h in fold_held]
    held_extra = [t for _, fold_extra in done for t in fold_extra]
    return held + [h for _, _, h in sorted(held_extra, key=lambda t: (t[0], t[1]))]


@dataclass(frozen=True)
class _FoldWork:
    """What every fold of one cross-validation reads."""

    samples: Sequence[FitSample]
    test_only: Sequence[FitSample]
    roof: Sequence[dict[str, float]]
    roof_extra: Sequence[dict[str, float]]
    plan: list[tuple[str, list[int]]]
    extra: dict[str, list[int]]
    fit: Callable[[Sequence[FitSample]], FittedCoefficients]


#: one fold's predictions: of its rows as (row index, prediction), of the test-only rows it
#: predicts as (test-only index, fold order, prediction)
FoldHeld = tuple[list[tuple[int, HeldOut]], list[tuple[int, int, HeldOut]]]


def _fold(work: _FoldWork, order: int) -> FoldHeld:
    """The fold ``work.plan[order]``: fitted without its rows, which it then predicts."""
    name, test = work.plan[order]
    test_set = set(test)
    train = [s for i, s in enumerate(work.samples) if i not in test_set]
    if not train:
        return [], []
    fitted = work.fit(train)
    seen = SeenData.of(train)
    held = [(i, predict_held_out(work.samples[i], fitted, name, work.roof[i], seen)) for i in test]
    held_extra = [
        (j, order, predict_held_out(work.test_only[j], fitted, name, work.roof_extra[j], seen))
        for j in work.extra.get(name, [])
    ]
    return held, held_extra


#: the cross-validation a forked fold process reads: set by the parent just before it forks,
#: so that the children see the simulated rows as they are, without pickling them
_FORKED_WORK: _FoldWork | None = None

#: :data:`FoldHeld` without the predictions' rows (each a dict of HeldOut's other fields)
_LightHeld = tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, int, dict[str, Any]]]]


def _forked_fold(order: int) -> _LightHeld:
    """:func:`_fold` in a forked process, its predictions without their rows (the parent has
    them; a row's simulated trace is the bulk of its pickle)."""
    assert _FORKED_WORK is not None
    held, held_extra = _fold(_FORKED_WORK, order)
    return [(i, _light(h)) for i, h in held], [(j, o, _light(h)) for j, o, h in held_extra]


def _light(held: HeldOut) -> dict[str, Any]:
    return {f.name: getattr(held, f.name) for f in fields(HeldOut) if f.name != "sample"}


def _folds_forked(work: _FoldWork, jobs: int) -> list[FoldHeld]:
    """Every fold of ``work`` in ``jobs`` forked processes, in the plan's order, each fold's
    predictions given back their rows."""
    global _FORKED_WORK
    _FORKED_WORK = work
    try:
        # an executor, not a Pool: a worker that dies (out of memory) raises BrokenProcessPool
        # here where a Pool would wait for its fold for ever
        with ProcessPoolExecutor(
            min(jobs, len(work.plan)), mp_context=multiprocessing.get_context("fork")
        ) as pool:
            light = list(pool.map(_forked_fold, range(len(work.plan))))
    finally:
        _FORKED_WORK = None
    return [
        (
            [(i, HeldOut(sample=work.samples[i], **h)) for i, h in held],
            [(j, o, HeldOut(sample=work.test_only[j], **h)) for j, o, h in held_extra],
        )
        for held, held_extra in light
    ]


@dataclass
class ErrorRow:
    """Errors of a group of held-out rows; ``gpu`` is the group's second key (a GPU, a model
    class or a source, per :func:`error_table`'s ``by``)."""

    engine: str
    gpu: str
    rows: int
    stats: dict[str, tuple[int, float, float, float, float]] = field(default_factory=dict)
    coverage: float | None = None
    #: mean APE per metric, and the share of its held-out rows inside their 80% interval
    means: dict[str, float] = field(default_factory=dict)
    coverages: dict[str, float | None] = field(default_factory=dict)

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
            row.means[metric] = float(np.mean(ours))
        row.coverages[metric] = interval_coverage(held, metric)
    row.coverage = row.coverages["output_tok_per_s"]
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
    if by == "band":
        return (h.band,)
    raise ValueError(f"unknown grouping {by!r}; one of gpu, class, fold, source, band")


def _group_order(by: str, key: str) -> tuple[int, str]:
    """Groups by name, concurrency bands from the fewest requests in flight."""
    bands = [name for name, _ in CONCURRENCY_BANDS]
    return (bands.index(key), key) if by == "band" and key in bands else (0, key)


def error_table(held: Sequence[HeldOut], by: str = "gpu") -> list[ErrorRow]:
    """Per (engine family, ``by``), per family, per ``by`` over all families, and overall.

    ``by``: ``gpu``, ``class`` (a row counts in each class of its model), ``source``,
    ``fold`` (the fold that held the row out: the class of a leave-one-class-out fold), or
    ``band`` (requests in flight, :data:`CONCURRENCY_BANDS`).
    """
    rows: list[ErrorRow] = []
    groups: dict[tuple[str, str], list[HeldOut]] = {}
    across: dict[str, list[HeldOut]] = {}
    for h in held:
        for key in _group_keys(h, by):
            groups.setdefault((h.sample.family, key), []).append(h)
            across.setdefault(key, []).append(h)
    for (family, key), members in sorted(
        groups.items(), key=lambda t: (t[0][0], _group_order(by, t[0][1]))
    ):
        rows.append(_summary(members, family, key))
    for family in sorted({h.sample.family for h in held}):
        rows.append(_summary([h for h in held if h.sample.family == family], family, "all"))
    if len({h.sample.family for h in held}) > 1:
        for key, members in sorted(across.items(), key=lambda t: _group_order(by, t[0])):
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


def format_latency_table(title: str, rows: Sequence[ErrorRow]) -> str:
    """TTFT, TPOT, their p99 and throughput of each (engine, concurrency band) group: n,
    median, mean and p90 APE and the 80% interval's coverage."""
    metrics = (*LATENCY_LABELS, ("output_tok_per_s", "output tok/s"))
    head = f"{'engine':<7} {'in flight':<9} | " + " | ".join(
        f"{name + ' APE med/mean/p90, cover':^34}" for _, name in metrics
    )
    sub = f"{'':<7} {'':<9} | " + " | ".join(
        f"{'n':>4} {'med':>5} {'mean':>5} {'p90':>5} {'80% cov':>10}" for _ in metrics
    )
    lines = [title, head, sub, "-" * len(head)]
    previous = ""
    for r in rows:
        if (r.gpu == "all" and r.engine != "all") or (r.engine == "all" and previous != "all"):
            lines.append("")
        previous = r.engine
        cells = []
        for metric, _ in metrics:
            n, med, p90, _, _ = r.stat(metric)
            cover = r.coverages.get(metric)
            cover_text = "-" if cover is None else f"{100 * cover:.0f}%"
            cells.append(
                f"{n:>4} {_pct(med)} {_pct(r.means.get(metric, math.nan))} {_pct(p90)} "
                f"{cover_text:>10}"
            )
        lines.append(f"{r.engine:<7} {r.gpu:<9} | " + " | ".join(cells))
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


def interval_coverage(
    held: Sequence[HeldOut],
    metric: str = "output_tok_per_s",
    calibration: IntervalCalibration | None = None,
) -> float | None:
    """Share of held-out rows measuring ``metric`` whose measured figure lies inside its
    predicted 80% interval (None when no row measures it)."""
    covered = [c for h in held if (c := h.covers(metric, calibration)) is not None]
    return float(np.mean(covered)) if covered else None


def latency_errors(held: Sequence[HeldOut], metric: str) -> dict[str, float | int | None]:
    """n, median, mean and p90 APE of ``metric`` over the rows that measure it, and the share
    inside their 80% interval (NaN / None where no row measures it)."""
    errs = [e for h in held if (e := h.ape(metric)) is not None]
    return {
        "n": len(errs),
        "median": float(np.median(errs)) if errs else math.nan,
        "mean": float(np.mean(errs)) if errs else math.nan,
        "p90": float(np.quantile(errs, 0.9)) if errs else math.nan,
        "coverage_80": interval_coverage(held, metric),
    }


def statistic_of(h: HeldOut, metric: str) -> str:
    """What the row's figure of ``metric`` is (:mod:`planner.perf.latency_stats`): its
    ``ttft_stat`` / ``itl_stat`` (blank: mean / mean_itl), a p99 over the requests or over vLLM's
    histogram; throughput is 'output tok/s'."""
    result = h.sample.result
    if metric == "ttft":
        return result.ttft_stat or "mean"
    if metric == "tpot":
        return result.itl_stat or "mean_itl"
    if metric == "ttft_p99":
        return "p99_vllm_histogram" if result.ttft_stat == HISTOGRAM_TTFT else "p99"
    if metric == "tpot_p99":
        return "p99_itl_vllm_histogram" if result.itl_stat == HISTOGRAM_ITL else "p99_tpot"
    return "output tok/s"


#: the metrics of :func:`statistic_table`, with their labels
STATISTIC_METRICS: tuple[tuple[str, str], ...] = (
    ("output_tok_per_s", "throughput"),
    *LATENCY_LABELS,
)


def statistic_table(held: Sequence[HeldOut]) -> list[tuple[str, str, dict[str, Any]]]:
    """(metric label, slice, :func:`latency_errors`) for every metric, over all rows that
    measure it, then per statistic the rows report (mean, median, vLLM histogram, p99), then
    the rows whose engine release the fold never saw (where an unmeasured release widens the
    interval by the release spread), then the closed-loop and rate runs and, of those, the
    runs of releases from mid-2025 on (:func:`is_current_release`)."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for metric, label in STATISTIC_METRICS:
        measuring = [h for h in held if metric in h.measured]
        if not measuring:
            continue
        out.append((label, "all", latency_errors(measuring, metric)))
        stats = sorted({statistic_of(h, metric) for h in measuring})
        if len(stats) > 1:
            for stat in stats:
                rows = [h for h in measuring if statistic_of(h, metric) == stat]
                out.append((label, stat, latency_errors(rows, metric)))
        new = [h for h in measuring if h.new_release]
        if new:
            out.append((label, "release unmeasured", latency_errors(new, metric)))
        swept = [h for h in measuring if h.load in SWEPT_LOADS]
        if swept:
            out.append((label, SWEPT_SLICE, latency_errors(swept, metric)))
        current = [h for h in swept if is_current_release(h)]
        if current:
            out.append((label, CURRENT_SLICE, latency_errors(current, metric)))
    return out


#: the rows whose requests arrive one by one, as in a concurrency sweep or a Poisson-rate run
#: (not a max-throughput burst, whose TTFT is the burst's drain time, nor an offline batch):
#: the load group the intervals have a factor for (:data:`planner.perf.uncertainty.LOAD_GROUPS`)
SWEPT_SLICE = LOAD_GROUPS[0]
#: releases from this date on are "current" for the slice below
CURRENT_SINCE = date(2025, 7, 1)
CURRENT_SLICE = "ditto, release 2025-07+"


def is_current_release(h: HeldOut) -> bool:
    """Whether the row names an engine release from :data:`CURRENT_SINCE` on
    (:func:`planner.perf.releases.release_date`): the shape of the checks on independent data
    (concurrency sweeps of current SGLang and TensorRT-LLM releases), where early-2025 DeepSeek
    releases, half as fast as today's, do not belong. A row without a dated release is not
    counted."""
    when = sample_release_date(h.sample)
    return when is not None and when >= CURRENT_SINCE


def format_statistic_table(title: str, table: Sequence[tuple[str, str, dict[str, Any]]]) -> str:
    """:func:`statistic_table` as text: n, median, mean and p90 APE, 80% coverage."""
    head = (
        f"{'metric':<13} {'statistic / slice':<24} {'n':>5} {'median':>7} {'mean':>7} "
        f"{'p90':>7} {'80% cover':>10}"
    )
    lines = [title, head, "-" * len(head)]
    previous = ""
    for label, name, f in table:
        if label != previous and previous:
            lines.append("")
        previous = label
        cover = "-" if f["coverage_80"] is None else f"{100 * f['coverage_80']:.0f}%"
        lines.append(
            f"{label:<13} {name:<24} {f['n']:>5} {_pct(f['median']):>7} {_pct(f['mean']):>7} "
            f"{_pct(f['p90']):>7} {cover:>10}"
        )
    return "\n".join(lines)


def _log_ratio(h: HeldOut, metric: str) -> float | None:
    meas, pred = h.measured.get(metric), h.predicted.get(metric)
    if not meas or not pred or not math.isfinite(pred) or pred <= 0:
        return None
    return math.log(meas / pred)


def release_group(h: HeldOut) -> tuple[object, ...]:
    """What must match for two rows' releases to be compared: engine family, GPU, the model's
    weights (total and active parameters: a re-release of the same architecture counts as the
    same model), precision and layout (TP, PP, attention DP, expert parallel)."""
    dep = h.sample.dep
    arch = dep.card.architecture
    return (
        h.sample.family,
        h.sample.gpu.lower(),
        arch.total_params,
        arch.active_params,
        h.sample.result.precision,
        dep.tp,
        dep.pp,
        dep.data_parallel_size,
        dep.expert_parallel,
    )


@dataclass(frozen=True)
class ReleaseMoves:
    """How far engine releases have been seen to move a metric: every pair of releases of one
    :func:`release_group`, the |difference| of their median log(measured / predicted)."""

    metric: str
    moves: tuple[float, ...]
    groups: int

    @property
    def spread(self) -> float:
        """The 80th percentile of the moves: an 80% half-width in log space (0 without any)."""
        return float(np.quantile(self.moves, 0.8)) if self.moves else 0.0


def release_moves(held: Sequence[HeldOut], metric: str) -> ReleaseMoves:
    """:class:`ReleaseMoves` of ``metric`` over held-out rows (a row without a known release is
    left out). The model's prediction takes the workload out (lengths, load): what remains
    between two releases of the same deployment is what the release moved, plus the model's
    error on each set of rows, so a move is an upper estimate."""
    by_group: dict[tuple[object, ...], dict[str, list[float]]] = {}
    for h in held:
        version = h.sample.key.version
        ratio = _log_ratio(h, metric)
        if version is None or ratio is None:
            continue
        by_group.setdefault(release_group(h), {}).setdefault(version, []).append(ratio)
    moves: list[float] = []
    groups = 0
    for releases in by_group.values():
        if len(releases) < 2:
            continue
        groups += 1
        medians = [float(np.median(v)) for _, v in sorted(releases.items())]
        for i, a in enumerate(medians):
            moves.extend(abs(a - b) for b in medians[i + 1 :])
    return ReleaseMoves(metric, tuple(moves), groups)


def release_spread_bound(held: Sequence[HeldOut], min_moves: int = 3) -> float:
    """What releases have been seen to move: throughput's :attr:`ReleaseMoves.spread` (0 with
    fewer than ``min_moves`` pairs of releases), the bound of the release spread
    :func:`calibrate_intervals` calibrates, one for every metric. A release moves the
    deployment's speed, and throughput is where the data compare it cleanly: the latencies' own
    moves between two releases also carry the latency model's error between their workloads
    (dstack's 3,200-token prompts against GPUStack's 219-token ones moved TTFT 17x, throughput
    2.9-3.5x), which their multipliers already calibrate."""
    moves = release_moves(held, "output_tok_per_s")
    return moves.spread if len(moves.moves) >= min_moves else 0.0


def unmeasured_release_coverage(
    held: Sequence[HeldOut], calibration: IntervalCalibration, metric: str = "output_tok_per_s"
) -> float | None:
    """The share of the held-out rows of a release their fold never saw whose ``metric`` falls
    inside its interval under ``calibration`` (None: no such row measures it)."""
    return interval_coverage([h for h in held if h.new_release], metric, calibration)


def calibrated_release_spread(
    coverage: Callable[[float], float | None], upper: float, target: float = 0.8
) -> float:
    """The least spread in [0, ``upper``] at which ``coverage`` (of the rows of unmeasured
    releases, everything else recalibrated with the spread) reaches ``target``, by bisection
    (the coverage grows with the spread); ``upper`` when even it falls short or no such row
    exists."""
    if upper <= 0.0:
        return 0.0
    reached = coverage(upper)
    if reached is None or reached < target:
        return upper
    low, high = 0.0, upper
    for _ in range(30):
        middle = (low + high) / 2
        if (coverage(middle) or 0.0) >= target:
            high = middle
        else:
            low = middle
    return high


def row_needs(
    held: Sequence[HeldOut], metric: str, release_spread: float = 0.0
) -> list[tuple[HeldOut, float]]:
    """Each row measuring ``metric`` with the multiplier its interval needs to hold it:
    sqrt(max(r^2 - s^2, 0)) / h, r = log(measured / predicted), h the interval's own log
    half-width on the side r falls, s = ``release_spread`` for a row whose release the fold never
    saw, else 0 (:meth:`IntervalCalibration.widen`: the row is inside when its multiplier is at
    least this)."""
    out: list[tuple[HeldOut, float]] = []
    for h in held:
        meas = h.measured.get(metric)
        pred = h.predicted.get(metric)
        if not meas or not pred or not math.isfinite(pred) or pred <= 0:
            continue
        own = getattr(h, "own", {}).get(P99_METRICS.get(metric, metric))
        if own is None:
            own = (h.own_low, h.own_high)
        ratio = math.log(meas / pred)
        half = math.log(own[1]) if ratio >= 0 else -math.log(own[0])
        spread = release_spread if getattr(h, "new_release", False) else 0.0
        need = math.sqrt(max(ratio**2 - spread**2, 0.0))
        out.append((h, need / max(half, 1e-6)))
    return out


def calibrate_interval_multipliers(
    held: Sequence[HeldOut],
    target: float = 0.8,
    metric: str = "output_tok_per_s",
    release_spread: float = 0.0,
) -> list[float]:
    """Half-width multipliers of ``metric``, for 0 .. MAX_NOVELTY (and more) novelty reasons,
    that make ``target`` of the held-out rows with that many reasons fall inside their 80%
    interval.

    An interval's log half-width h is widened to sqrt((m x h)^2 + s^2), s = ``release_spread``
    for a row whose release the fold never saw, else 0 (:meth:`IntervalCalibration.widen`). A
    row with r = log(measured / predicted) is inside when m >= sqrt(max(r^2 - s^2, 0)) / h, h on
    the side it falls: the multiplier is the ``target`` quantile of that need in its group.
    A group with fewer than 8 rows is pooled with the next (the last with the one before);
    adjacent groups whose multipliers would decrease are pooled until none do (more that is new
    is never surer; pool-adjacent-violators, each pool's multiplier the quantile over all its
    rows, so a small group never lifts the larger ones after it); each pool after the first is
    then shrunk toward the one before it by its row count (:func:`shrunk_factor`, PRIOR_ROWS),
    so a pool of a few rows of one source moves its counts part of the way. A count without
    rows takes the one before it (1.0 when no row at all). No pooled multiplier is below 1: over
    all rows an interval is never narrower than the fit's own residual spread and coefficient
    uncertainty (below it, the leave-one-source-out rows were held at 80% while the easier
    folds, a scenario near measured data, held 65%); only a group's factors
    (:func:`calibrate_group_factors`: a closed loop's) take it lower.
    """
    needs: dict[int, list[float]] = {}
    for h, need in row_needs(held, metric, release_spread):
        needs.setdefault(min(len(h.reasons), MAX_NOVELTY), []).append(need)
    # pools of consecutive counts: (counts, rows), small ones merged into the next
    pools: list[tuple[list[int], list[float]]] = []
    carry: tuple[list[int], list[float]] = ([], [])
    for n in range(MAX_NOVELTY + 1):
        if n not in needs:
            continue
        carry = (carry[0] + [n], carry[1] + needs[n])
        if len(carry[1]) >= 8:
            pools.append(carry)
            carry = ([], [])
    if carry[0]:
        if pools:
            pools[-1] = (pools[-1][0] + carry[0], pools[-1][1] + carry[1])
        else:
            pools.append(carry)
    merged = True
    while merged:
        merged = False
        for i in range(len(pools) - 1):
            here, after = pools[i], pools[i + 1]
            if np.quantile(here[1], target) > np.quantile(after[1], target):
                pools[i : i + 2] = [(here[0] + after[0], here[1] + after[1])]
                merged = True
                break
    # a pool after the first counts as much as the pool before it once it holds PRIOR_ROWS
    # rows (:func:`shrunk_factor`, as a group's factor does): 12 held-out rows of one
    # publisher with two reasons (Scicom's gpt-oss-120b under a vLLM release no fold saw, in
    # an attention-DP layout) had set every p99 TTFT interval with two or more reasons to
    # 3.4x its width
    value: dict[int, float] = {}
    before = 1.0
    for i, (counts, rows) in enumerate(pools):
        raw = max(float(np.quantile(rows, target)), 1.0)
        pooled = raw if i == 0 else before * shrunk_factor(raw / before, len(rows))
        value.update({n: pooled for n in counts})
        before = pooled
    out: list[float] = []
    for n in range(MAX_NOVELTY + 1):
        if n in value:
            out.append(value[n])
        else:
            out.append(out[-1] if out else next(iter(value.values()), 1.0))
    return out  # every pool's multiplier was raised to 1 above


#: how many held-out rows a group's own factor counts as much as the level above it
#: (:func:`shrunk_factor`); chosen on the nested leave-one-source-out check
#: (benchmarks/interval_calibration_bench.py)
PRIOR_ROWS = 20.0


def shrunk_factor(raw: float, rows: int, prior_rows: float = PRIOR_ROWS) -> float:
    """A group's factor blended toward 1 (the level above it) by its row count, in log space:
    exp(n / (n + k) x log(raw)), n the group's held-out rows and k = ``prior_rows``: a group of k
    rows goes half way, a group without rows stays at the level above."""
    if rows <= 0 or raw <= 0:
        return 1.0
    return math.exp(rows / (rows + prior_rows) * math.log(raw))


def group_factor(needs: Sequence[float], bases: Sequence[float], target: float = 0.8) -> float:
    """The factor f on each row's multiplier so far (``bases``) that puts ``target`` of the rows
    inside: the ``target`` quantile of need / base, and no lower than where every multiplier
    already sits at its floor, :data:`MIN_MULTIPLIER` (lower would change no interval)."""
    ratios = [n / b for n, b in zip(needs, bases, strict=True)]
    floor = min(MIN_MULTIPLIER / b for b in bases)
    return max(float(np.quantile(ratios, target)), floor)


#: the levels of interval factors (:class:`IntervalCalibration`), calibrated in this order, each
#: on top of the levels before it: the load shape (:func:`load_group`), the engine family, the
#: family's architecture group (:func:`family_arch`)
FACTOR_LEVELS = ("load", "family", "arch")


def factor_key(h: HeldOut, level: str) -> str | None:
    """The key of the row's factor at ``level`` (:data:`FACTOR_LEVELS`; None: the row does not
    say, and takes the level above)."""
    if level == "load":
        return load_group(h.load)
    if level == "family":
        return h.family or None
    if level == "arch":
        return family_arch(h.family, h.model_classes) if h.family else None
    raise ValueError(f"unknown factor level {level!r}; one of {', '.join(FACTOR_LEVELS)}")


@dataclass(frozen=True)
class GroupFactors:
    """What :func:`calibrate_group_factors` finds: ``factors[level][key][metric]`` and the
    held-out rows each factor rests on, ``rows[key][metric]`` (keys are distinct across
    levels: a load group's name, a family's, ``family/group``)."""

    factors: dict[str, dict[str, dict[str, float]]]
    rows: dict[str, dict[str, int]]


def calibrate_group_factors(
    held: Sequence[HeldOut],
    calibration: IntervalCalibration,
    target: float = 0.8,
    prior_rows: float = PRIOR_ROWS,
    levels: Sequence[str] = FACTOR_LEVELS,
) -> GroupFactors:
    """Each level's factors per metric (:data:`FACTOR_LEVELS`, in order): the load shape's on
    the pooled multipliers, each engine family's on that, each (family, architecture group)'s on
    the family's. A group's factor is :func:`group_factor` of its held-out rows, each row's base
    the pooled multiplier of its novelty count times the factors of the levels before
    (so the novelty counts keep their order), shrunk toward 1 (the level above) by the rows it
    rests on (:func:`shrunk_factor`).

    Only the closed loop's load factor may be below 1: the max-throughput bursts and offline
    batches are the rows the pooled multipliers and the fit's own spread are sized on, and
    nearly all of their latencies come from one publisher (GPUStack); held out, the few left
    (NVIDIA's, datacrunch's) narrowed the bursts' TTFT and TPOT intervals for every other
    source (nested check, benchmarks/interval_calibration_bench.py: TTFT 78% -> 74%, TPOT
    79% -> 75% of all rows inside)."""
    factors: dict[str, dict[str, dict[str, float]]] = {level: {} for level in levels}
    counts: dict[str, dict[str, int]] = {}
    for metric in CALIBRATED_METRICS:
        rows = row_needs(held, metric, calibration.release_spread[metric])
        bases = [calibration.multipliers[metric][min(len(h.reasons), MAX_NOVELTY)] for h, _ in rows]
        for level in levels:
            groups: dict[str, list[int]] = {}
            for i, (h, _) in enumerate(rows):
                key = factor_key(h, level)
                if key is not None:
                    groups.setdefault(key, []).append(i)
            for key, members in sorted(groups.items()):
                raw = group_factor(
                    [rows[i][1] for i in members], [bases[i] for i in members], target
                )
                f = shrunk_factor(raw, len(members), prior_rows)
                if level == "load" and key != SWEPT_SLICE:
                    f = max(f, 1.0)  # see the docstring: only a closed loop narrows
                factors[level].setdefault(key, {})[metric] = f
                counts.setdefault(key, {})[metric] = len(members)
                for i in members:
                    bases[i] *= f
    return GroupFactors(factors, counts)


def calibrate_intervals(
    held: Sequence[HeldOut],
    target: float = 0.8,
    *,
    levels: Sequence[str] = FACTOR_LEVELS,
    prior_rows: float = PRIOR_ROWS,
) -> IntervalCalibration:
    """The whole calibration from leave-one-source-out rows: the release spread, then each
    metric's multipliers given that spread; the p99s of TTFT and TPOT on their own rows and
    residuals (what a p99 needs beyond its latency's factors), not the mean's; then the factors
    of each of ``levels`` on them (:func:`calibrate_group_factors`; fewer levels leave the
    others out, for comparison).

    The release spread (one for every metric) is the least that puts ``target`` of the
    throughput of the rows whose release their fold never saw inside their interval, with
    everything after it calibrated on it (:func:`calibrated_release_spread`), and at most what
    releases have been seen to move (:func:`release_spread_bound`). Those moves are an upper
    estimate: each is the difference of two releases' median held-out errors, so it carries
    the model's error on both sets of rows besides the release's move, and the fit's own
    interval already widens an unmeasured release by the spread of the release levels it fitted
    (:meth:`planner.perf.calibration.FittedCoefficients.log_variance`). Taken whole (0.49 in
    log, session 60), they held 92% of those rows' throughput inside its 80% interval (89% of
    TPOT, 84% of TTFT), and 97% / 98% / 89% of the newest releases held out
    (``validate --scheme release``, session 61)."""

    def calibration(spread: float) -> IntervalCalibration:
        spreads = dict.fromkeys(CALIBRATED_METRICS, spread)
        pooled = IntervalCalibration(
            {
                m: tuple(calibrate_interval_multipliers(held, target, m, spreads[m]))
                for m in CALIBRATED_METRICS
            },
            spreads,
        )
        if not levels:
            return pooled
        found = calibrate_group_factors(held, pooled, target, prior_rows, levels).factors
        return IntervalCalibration(
            pooled.multipliers,
            spreads,
            found.get("family", {}),
            found.get("arch", {}),
            found.get("load", {}),
        )

    bound = release_spread_bound(held)
    spread = calibrated_release_spread(
        lambda s: unmeasured_release_coverage(held, calibration(s)), bound, target
    )
    return calibration(spread)


#: the headline held-out figures ``python -m planner validate --write-summary`` writes
SUMMARY_FILE = Path(__file__).resolve().parents[2] / "data" / "validation_summary.json"
#: every row held out by source, one line each (:func:`held_out_rows`), as the interval
#: calibration saw them: written by ``validate --calibrate-intervals``, shown row by row on the
#: Benchmarks page
HELD_OUT_ROWS_FILE = SUMMARY_FILE.with_name("held_out_rows.csv")


def validation_summary(path: Path | None = None) -> dict[str, Any] | None:
    """The stored held-out figures (None when the file is missing or unreadable)."""
    try:
        loaded = json.loads((path or SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def _figure(value: float) -> float:
    """A predicted figure to five significant digits (the model is not that exact)."""
    return float(f"{value:.5g}")


def held_out_rows(held: Sequence[HeldOut], scheme: str) -> list[dict[str, Any]]:
    """One flat record per held-out row, for a spreadsheet: the scenario the row ran, its fold,
    and for each metric it reports (:data:`CALIBRATED_METRICS`) the measured and predicted
    figures, their ratio, the statistic the source reports, the 80% interval and whether the
    measurement fell inside it (:meth:`HeldOut.interval`). Metrics a row does not report are
    blank."""
    records: list[dict[str, Any]] = []
    for h in held:
        r = h.sample.result
        record: dict[str, Any] = {
            "scheme": scheme,
            "fold": h.fold,
            "source": r.source,
            "engine": r.engine,
            "engine_version": r.engine_version,
            "model": r.model,
            "precision": r.precision,
            "gpu": r.gpu,
            "num_gpus": r.num_gpus,
            "tp": r.tp,
            "pp": r.pp,
            "input_len": r.input_len,
            "output_len": r.output_len,
            "load": r.load,
            "concurrency": r.concurrency,
            "request_rate": r.request_rate,
            "in_flight": round(h.in_flight, 2),
            "band": h.band,
            "release_unseen": h.new_release,
            "novelty": "; ".join(h.reasons),
        }
        for metric in CALIBRATED_METRICS:
            measured = h.measured.get(metric)
            predicted = h.predicted.get(metric) if measured is not None else None
            interval = h.interval(metric) if measured is not None else None
            record[f"{metric}_statistic"] = statistic_of(h, metric) if measured else None
            record[f"{metric}_measured"] = measured
            record[f"{metric}_predicted"] = _figure(predicted) if predicted is not None else None
            record[f"{metric}_ratio"] = (
                _figure(predicted / measured) if measured and predicted else None
            )
            low: float | None = None
            high: float | None = None
            inside: bool | None = None
            if interval is not None and measured is not None:
                low, high = _figure(interval[0]), _figure(interval[1])
                inside = low <= measured <= high
            record[f"{metric}_low"] = low
            record[f"{metric}_high"] = high
            record[f"{metric}_inside"] = inside
        records.append(record)
    return records


def write_held_out_rows(
    records: Sequence[dict[str, Any]], path: Path, field: str = "--rows-csv"
) -> None:
    """:func:`held_out_rows`' records to a CSV file (an unwritable path raises
    :class:`planner.errors.InvalidInputError` naming ``field``)."""
    columns = list(records[0]) if records else ["scheme", "fold"]
    try:
        with path.open("w", newline="", encoding="utf-8") as out:
            writer = csv.DictWriter(out, columns)
            writer.writeheader()
            writer.writerows(records)
    except OSError as exc:
        raise InvalidInputError(field, str(path), f"a writable file path ({exc.strerror})") from exc


def read_held_out_rows(path: Path | None = None) -> list[dict[str, str]]:
    """The stored held-out rows (:data:`HELD_OUT_ROWS_FILE`) as text fields; [] when the file is
    missing or unreadable."""
    try:
        with (path or HELD_OUT_ROWS_FILE).open(newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    except (OSError, csv.Error, UnicodeDecodeError):
        return []


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


def slice_summary_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The leave-one-source-out fold's errors by slice (:func:`statistic_table`): every row,
    a release the fold never saw, closed-loop and rate runs, and those of 2025-07+ releases,
    for each metric (fractions; empty for a summary written before slices were kept)."""
    entry = summary.get("schemes", {}).get("source")
    if not isinstance(entry, dict):
        return []
    shown = ("all", "release unmeasured", SWEPT_SLICE, CURRENT_SLICE)
    return [
        {
            "metric": r["metric"],
            "slice": r["slice"],
            "rows": r["n"],
            "median": r["median"],
            "mean": r["mean"],
            "p90": r["p90"],
            "80% interval coverage": r["coverage_80"],
        }
        for r in entry.get("by_statistic", [])
        if r.get("slice") in shown
    ]


def latency_summary_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row a fold and latency (TTFT, TPOT): rows measured, median, mean and p90 APE, 80%
    coverage, then the median APE per engine family and per concurrency band (fractions; NaN
    where none; empty for a summary written before latencies were validated)."""
    rows = []
    names = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
    for entry in summary.get("schemes", {}).values():
        latency = entry.get("latency")
        if not isinstance(latency, dict):
            continue
        for metric, label in LATENCY_LABELS:
            if metric not in latency:  # a summary written before p99s were scored
                continue
            figures = latency[metric]
            overall = figures.get("all", {})
            row: dict[str, Any] = {
                "fold": entry["title"],
                "latency": label,
                "rows": overall.get("n", 0),
                "median": _number(overall.get("median")),
                "mean": _number(overall.get("mean")),
                "p90": _number(overall.get("p90")),
                "80% interval coverage": _number(overall.get("coverage_80")),
            }
            for family, name in names.items():
                row[name] = _number(figures.get(family, {}).get("median"))
            for band, _ in CONCURRENCY_BANDS:
                row[f"{band} in flight"] = _number(figures.get(f"band {band}", {}).get("median"))
            rows.append(row)
    return rows


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else math.nan
