"""How sure a prediction is: its 80% interval, how far it is from measured data, and why.

Interval (log space) = the residual spread of the fit for the engine family and metric (10th and
90th percentiles of log(measured / predicted) over the fitted rows) combined in quadrature with
the coefficients' own uncertainty at this scenario (Laplace approximation,
:meth:`FittedCoefficients.log_variance`, which adds the spread of every level the data never
saw: an unmeasured GPU, engine release or engine-and-model-kind gets a wider interval by
construction; a term fitted with a deliberately wide prior, the layer floor's, has the spread
of its well-measured keys as that prior in the covariance,
:data:`planner.perf.calibration.WIDE_PRIOR_SD`), then widened by what is new about the
scenario.

What is new (:func:`novelty`): each way the scenario leaves the measured data is one reason,
said in words on the prediction ("no measured MoE result on SGLang with H200"): the GPU, the
engine family on the GPU, the model kind (dense / MoE) with that family and GPU, the kind with
the family at all, the family's entrypoint (served over HTTP or an engine-only benchmark), the
engine release, each architecture class of the model (MLA, sliding-window, ...) with the family,
and an expert-parallel or attention-data-parallel layout with the family. In-sample residuals
understate the error on such scenarios; the half-widths are multiplied by a factor per metric
(throughput, TTFT, TPOT) and number of reasons (0, 1, 2, 3 or more) calibrated so that 80% of
the leave-one-source-out held-out rows that measure the metric fall inside
(``python -m planner validate --scheme source --calibrate-intervals`` writes them to
``data/interval_calibration.json``; :class:`IntervalCalibration`). The same factors serve a
latency's mean and p50; its p99 starts from the same factors and has multipliers of its own,
calibrated on the held-out rows that publish a p99 (a tail is further from the model than its
centre: one set for both held 83% of TTFT p99s but 65% of TPOT p99s).

The pooled multipliers hide engines that are far off (held out by source, SGLang's TTFT
intervals held 66% and TensorRT-LLM's throughput intervals 69%, 0% on its MLA rows, while
vLLM's held 87-93%): each engine family has a factor of its own per metric on top of them, and
each architecture group (:func:`arch_group`: MLA, fine-grained MoE, coarse MoE, dense) within
the family one more, each shrunk toward the level above it by the rows it rests on
(:meth:`IntervalCalibration.multiplier`, calibrated by
:func:`planner.perf.validation.calibrate_intervals`). Before both, the load shape the prediction
is for has a factor of its own (:func:`load_group`): a closed loop or a rate, as a concurrency
sweep or a plan's demand, is predicted two to three times closer than a max-throughput burst or
an offline batch, whose rows (GPUStack's, NVIDIA's tables) dominate the pooled multipliers; its
factor narrows the interval below the fit's own spread where the held-out rows say so (down to
:data:`MIN_MULTIPLIER` of it).

An engine release the data do not cover moves the whole prediction, whatever else is known:
its interval's log half-widths get the release spread added in quadrature: the least spread
that holds 80% of the held-out rows of releases their fold never saw, at most the 80% half-width
of log(release A / release B) over pairs of releases measured on the same engine, GPU, model,
precision and layout (:func:`planner.perf.validation.calibrate_intervals`, stored with the
multipliers).

A rate near its deployment's saturation: its latencies move several-fold with a few percent of
capacity (:func:`saturation_spread`), so a rate prediction's TTFT and TPOT (mean, p50, p99) get
the capacity's held-out error times ``rho / (1 - rho)`` added in quadrature to their own log
half-widths before the calibration (``rho`` the offered over the predicted saturation rate,
:meth:`planner.perf.model.PerformanceModel.utilisation`), and the prediction says so from 80% on.
Throughput is not widened: a rate below saturation is served as offered.

Distance to data: the nearest measured row under a weighted L1 distance over engine family,
GPU, model size and kind, lengths, layout and load (each term documented in
:func:`scenario_distance`). ``measured nearby`` within 1, ``interpolated`` within 3,
``extrapolated`` beyond, whenever the engine family has no measurement on the GPU, or when
two or more of the reasons above apply.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from planner.perf.calibration import CoefficientKey, FitSample, FittedCoefficients
from planner.perf.releases import listed
from planner.perf.scenario import Confidence, Scenario
from planner.perf.step_time import FITTED_IDX

if TYPE_CHECKING:
    from planner.perf.simulator import SimTrace

Z80 = 1.2815515655446004  # standard normal quantile of 0.9
RESIDUAL_INFLATION = 1.0
#: the interval multipliers by number of novelty reasons (see the module docstring)
CALIBRATION_FILE = Path(__file__).resolve().parents[2] / "data" / "interval_calibration.json"
MAX_NOVELTY = 3
#: the least a multiplier with its factors may be (:meth:`IntervalCalibration.multiplier`): the
#: fit's own residual spread is over every row of an engine family, and a closed loop's or a
#: rate's held-out errors are a third of a max-throughput burst's (tok/s median 14% against
#: 31%), so its intervals need half or less of it; below 0.5 the nested leave-one-source-out
#: check (benchmarks/interval_calibration_bench.py) lost coverage on the sources held out
MIN_MULTIPLIER = 0.5
FAMILY_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
#: when a family has too few fitted residuals for a metric
DEFAULT_LOG_SPREAD = (-0.35, 0.35)
NEARBY = 1.0
INTERPOLATED = 3.0


def term_shares(vector: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Share of each fitted term in ``c . vector`` (what the prediction's variance weighs)."""
    parts = (c * vector)[FITTED_IDX]
    total = float((c * vector).sum())
    if total <= 0:
        return np.zeros(len(FITTED_IDX))
    return parts / total


def latency_term_vectors(trace: SimTrace) -> tuple[np.ndarray, np.ndarray]:
    """The step terms of the mean request's TTFT and of its time per output token, for
    :func:`term_shares`: sum over requests of (first token - arrival) / requests, and of
    (finish - first token) / the decode tokens after the first."""
    count = trace.count[:, None]
    ttft = (count * (trace.first - trace.arrival)).sum(0) / max(trace.count.sum(), 1)
    decode_tokens = float((trace.count * np.maximum(trace.output_len - 1, 0)).sum())
    decode = (count * (trace.finish - trace.first)).sum(0) / max(decode_tokens, 1.0)
    return ttft, decode


def residual_quantiles(
    fitted: FittedCoefficients | None, family: str, metric: str
) -> tuple[float, float]:
    """10th/90th percentiles of log(measured / predicted) for a family's metric (inflated)."""
    if fitted is None:
        return DEFAULT_LOG_SPREAD
    held = fitted.residual_quantile_memo.get((family, metric))
    if held is None:
        held = fitted.residual_quantile_memo[family, metric] = _residual_quantiles(
            fitted, family, metric
        )
    return held


def _residual_quantiles(
    fitted: FittedCoefficients, family: str, metric: str
) -> tuple[float, float]:
    res = fitted.residuals.get((family, metric))
    if res is None or res.size < 8:
        pooled = [r for (f, m), r in fitted.residuals.items() if m == metric]
        res = np.concatenate(pooled) if pooled else None
    if res is None or res.size < 8:
        return DEFAULT_LOG_SPREAD
    # residuals are log(predicted time) - log(measured time): for throughput that is
    # log(measured / predicted); for latencies its negative
    ratio = res if metric == "output_tok_per_s" else -res
    lo, hi = np.quantile(ratio, [0.1, 0.9])
    return float(lo) * RESIDUAL_INFLATION, float(hi) * RESIDUAL_INFLATION


@dataclass(frozen=True)
class SeenData:
    """What the fitted rows cover, to tell what a scenario adds (:func:`novelty`)."""

    gpus: frozenset[str] = frozenset()
    family_gpu: frozenset[tuple[str, str]] = frozenset()
    family_kind_gpu: frozenset[tuple[str, str, str]] = frozenset()
    family_kind: frozenset[tuple[str, str]] = frozenset()
    family_entrypoint: frozenset[tuple[str, str]] = frozenset()
    versions: frozenset[str] = frozenset()
    family_class: frozenset[tuple[str, str]] = frozenset()
    family_layout: frozenset[tuple[str, str]] = frozenset()

    @classmethod
    def of(cls, samples: Iterable[FitSample]) -> SeenData:
        gpus: set[str] = set()
        fg: set[tuple[str, str]] = set()
        fkg: set[tuple[str, str, str]] = set()
        fk: set[tuple[str, str]] = set()
        fe: set[tuple[str, str]] = set()
        versions: set[str] = set()
        fc: set[tuple[str, str]] = set()
        fl: set[tuple[str, str]] = set()
        for sample in samples:
            key = sample.key
            gpu = key.gpu.lower()
            gpus.add(gpu)
            fg.add((key.family, gpu))
            fkg.add((key.family, key.kind or "", gpu))
            fk.add((key.family, key.kind or ""))
            fe.add((key.family, key.entrypoint or ""))
            if key.version:
                versions.add(key.version)
            for cls_ in sample.dep.card.architecture.model_classes:
                fc.add((key.family, cls_))
            for layout in layouts_of(sample.dep.expert_parallel, sample.dep.data_parallel_size):
                fl.add((key.family, layout))
        return cls(
            frozenset(gpus),
            frozenset(fg),
            frozenset(fkg),
            frozenset(fk),
            frozenset(fe),
            frozenset(versions),
            frozenset(fc),
            frozenset(fl),
        )


def layouts_of(expert_parallel: bool, data_parallel_size: int) -> tuple[str, ...]:
    out = []
    if expert_parallel:
        out.append("expert-parallel")
    if data_parallel_size > 1:
        out.append("attention-data-parallel")
    return tuple(out)


def novelty(
    key: CoefficientKey,
    model_classes: Iterable[str],
    layouts: Iterable[str],
    seen: SeenData,
) -> list[str]:
    """Why a prediction is uncertain: each way it leaves the measured data, in words."""
    family = FAMILY_NAMES.get(key.family, key.family)
    gpu = key.gpu.lower()
    kind = "MoE" if key.kind == "moe" else "dense"
    reasons: list[str] = []
    if gpu not in seen.gpus:
        reasons.append(f"no measured result on {key.gpu}")
    elif (key.family, gpu) not in seen.family_gpu:
        reasons.append(f"no measured {family} result on {key.gpu}")
    elif (key.family, key.kind or "", gpu) not in seen.family_kind_gpu:
        reasons.append(f"no measured {kind} result on {family} with {key.gpu}")
    if (key.family, key.kind or "") not in seen.family_kind:
        reasons.append(f"no measured {kind} model on {family}")
    if key.entrypoint and (key.family, key.entrypoint) not in seen.family_entrypoint:
        how = {
            "serve": "served over HTTP",
            "triton": "Triton-served",
        }.get(key.entrypoint, "engine-only (offline)")
        reasons.append(f"no {how} {family} measurement")
    if key.version and key.version not in seen.versions:
        release = key.version.split(":", 1)[-1]
        reasons.append(f"no measurement of {family} {release} (the release can move 2x)")
    for cls_ in model_classes:
        if cls_ != "dense GQA" and (key.family, cls_) not in seen.family_class:
            reasons.append(f"no {cls_} model measured on {family}")
    for layout in layouts:
        if (key.family, layout) not in seen.family_layout:
            reasons.append(f"no {layout} layout measured on {family}")
    return reasons


def version_note(key: CoefficientKey, seen: SeenData) -> str | None:
    """How the engine release entered the prediction, when the data hold releases of it: its
    own measured release's coefficients, or the releases pooled when none is given (an
    unmeasured release is an uncertainty reason, :func:`novelty`)."""
    family = FAMILY_NAMES.get(key.family, key.family)
    measured = sorted(v.split(":", 1)[-1] for v in seen.versions if v.startswith(f"{key.family}:"))
    if not measured:
        return None
    if key.version is None:
        return f"no {family} release given: its measured releases ({', '.join(measured)}) pooled"
    release = key.version.split(":", 1)[-1]
    if key.version in seen.versions:
        return f"fitted on measured {family} {release} results"
    if key.released is None:
        return None
    # an unmeasured release with a date: the measured releases' trend carries it there
    when = key.released.isoformat()
    if not listed(key.family, release):
        when += ", the release table's newest: a later release is taken as no older"
    return (
        f"no measured {family} {release} results: predicted at its release date ({when}) on "
        "the trend of the measured releases"
    )


#: the metrics with interval factors of their own (validation's names; the fit's "itl"
#: residuals are TPOT's, see :data:`METRIC_OF`)
INTERVAL_METRICS = ("output_tok_per_s", "ttft", "tpot")
#: the 99th percentiles, each with the latency whose factors it starts from: a p99 interval is
#: its latency's own factors, widened by multipliers calibrated on the p99s' own held-out rows
P99_OF = {"ttft_p99": "ttft", "tpot_p99": "tpot"}
#: every metric with calibrated multipliers and a release spread
CALIBRATED_METRICS = (*INTERVAL_METRICS, *P99_OF)
METRIC_OF = {
    "output_tok_per_s": "output_tok_per_s",
    "ttft": "ttft",
    "tpot": "tpot",
    "itl": "tpot",
    "ttft_p99": "ttft_p99",
    "tpot_p99": "tpot_p99",
}


#: the architecture groups an engine family's intervals are calibrated by, most specific first:
#: a model is in the first of them its classes name (DeepSeek-V3, MLA and fine-grained MoE, is
#: MLA), "dense" when none (:attr:`planner.catalog.ModelArchitecture.model_classes`)
ARCH_GROUPS = ("MLA", "fine-grained MoE", "coarse MoE", "dense")


def arch_group(model_classes: Iterable[str]) -> str:
    """The :data:`ARCH_GROUPS` entry of a model with these architecture classes."""
    classes = set(model_classes)
    return next((g for g in ARCH_GROUPS[:-1] if g in classes), "dense")


def family_arch(family: str, model_classes: Iterable[str]) -> str:
    """The key of an (engine family, architecture group) factor: ``trtllm/MLA``."""
    return f"{family}/{arch_group(model_classes)}"


#: loads whose requests arrive one by one (a closed loop of N in flight, a Poisson rate, a
#: replayed trace), as a concurrency sweep or a plan's demand: their TTFT is a request's wait
#: and prefill, not a burst's drain time (:data:`planner.loads.LoadKind`)
SWEPT_LOADS = ("concurrency", "rate", "trace")
#: the load-shape groups an interval is calibrated by (:func:`load_group`): requests arriving
#: one by one, or every request queued at once (``max_throughput``, ``offline_batch``)
LOAD_GROUPS = ("closed loop or rate", "max throughput or offline batch")


def load_group(load: str | None) -> str | None:
    """The :data:`LOAD_GROUPS` entry of a load kind (None when the load is not known)."""
    if not load:
        return None
    return LOAD_GROUPS[0] if load in SWEPT_LOADS else LOAD_GROUPS[1]


@dataclass(frozen=True)
class IntervalCalibration:
    """What :func:`widen` applies to an interval's own factors (``data/interval_calibration.json``).

    ``multipliers[metric][n]``: the half-width multiplier (log space) for ``n`` novelty reasons
    (``n`` = 0 .. MAX_NOVELTY, the last for that many or more), per metric: throughput, TTFT,
    TPOT and the p99s of TTFT and TPOT each calibrated on their own held-out rows (a p99 widens
    its latency's own factors by its own multiplier). ``release_spread[metric]``: the 80% half-width
    of log(release A / release B) of the same engine, GPU, model, precision and layout
    (:func:`planner.perf.validation.release_spread`), added in quadrature to the half-widths of
    a prediction for a release the data do not cover.

    ``load_factors[group][metric]``: a load shape's factor on the metric's multipliers
    (:func:`load_group`: a closed loop or a rate, where a concurrency sweep's errors are a
    fraction of a max-throughput burst's); ``family_factors[family][metric]``: an engine
    family's factor on top of it (every novelty count alike); ``arch_factors["family/group"]
    [metric]``: an architecture group's factor within the family (:func:`family_arch`) on top of
    that. Any missing means 1.0: the level above it, so a load, family or group the calibration
    never saw takes the multipliers above (and a file written before these existed loads with
    none).
    """

    multipliers: dict[str, tuple[float, ...]]
    release_spread: dict[str, float]
    family_factors: dict[str, dict[str, float]] = field(default_factory=dict)
    arch_factors: dict[str, dict[str, float]] = field(default_factory=dict)
    load_factors: dict[str, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def neutral(cls) -> IntervalCalibration:
        ones = (1.0,) * (MAX_NOVELTY + 1)
        return cls(dict.fromkeys(CALIBRATED_METRICS, ones), dict.fromkeys(CALIBRATED_METRICS, 0.0))

    @classmethod
    def of_payload(cls, payload: dict[str, object]) -> IntervalCalibration:
        """From the file's JSON. A file of one ``multipliers`` set (before latency intervals were
        calibrated) applies it to every metric, with no release widening; a file without the
        p99s' own multipliers gives each p99 its latency's."""
        by_metric = payload.get("multipliers_by_metric")
        shared = payload.get("multipliers")
        spread = payload.get("release_spread")
        spread = spread if isinstance(spread, dict) else {}
        multipliers: dict[str, tuple[float, ...]] = {}
        spreads: dict[str, float] = {}
        for metric in CALIBRATED_METRICS:
            values = by_metric.get(metric) if isinstance(by_metric, dict) else None
            own = metric
            if values is None and metric in P99_OF:
                own = P99_OF[metric]
                values = by_metric.get(own) if isinstance(by_metric, dict) else None
            values = values if values is not None else shared
            if not isinstance(values, dict):
                raise ValueError(f"no multipliers for {metric}")
            multipliers[metric] = tuple(float(values[str(n)]) for n in range(MAX_NOVELTY + 1))
            value = spread.get(metric, spread.get(own))
            spreads[metric] = max(float(value), 0.0) if value is not None else 0.0
        return cls(
            multipliers,
            spreads,
            _factors_of(payload.get("family_factors")),
            _factors_of(payload.get("arch_factors")),
            _factors_of(payload.get("load_factors")),
        )

    def multiplier(
        self,
        metric: str,
        reasons: int,
        family: str | None = None,
        model_classes: Iterable[str] = (),
        load: str | None = None,
    ) -> float:
        """The half-width multiplier of ``metric`` for ``reasons`` novelty reasons, a load kind,
        an engine family and a model's classes: max(m x l x f x a, 1), m the pooled multiplier
        for that many reasons, l the load shape's factor (:func:`load_group`), f the family's,
        a its architecture group's (1 where not calibrated or not known); never below
        :data:`MIN_MULTIPLIER`."""
        name = METRIC_OF.get(metric, metric)
        scale = self.multipliers[name][min(reasons, MAX_NOVELTY)]
        group = load_group(load)
        if group is not None:
            scale *= self.load_factors.get(group, {}).get(name, 1.0)
        if family is not None:
            scale *= self.family_factors.get(family, {}).get(name, 1.0)
            scale *= self.arch_factors.get(family_arch(family, model_classes), {}).get(name, 1.0)
        return max(scale, MIN_MULTIPLIER)

    def widen(
        self,
        factors: tuple[float, float],
        reasons: int,
        metric: str = "output_tok_per_s",
        release_unmeasured: bool = False,
        family: str | None = None,
        model_classes: Iterable[str] = (),
        load: str | None = None,
    ) -> tuple[float, float]:
        """(low, high) multipliers: each log half-width h becomes
        sqrt((m x h)^2 + s^2), m the metric's :meth:`multiplier` for ``reasons`` reasons, the
        engine family, the model's classes and the load kind, and s its release spread when
        the release is unmeasured (else 0)."""
        name = METRIC_OF.get(metric, metric)
        scale = self.multiplier(name, reasons, family, model_classes, load)
        spread = self.release_spread[name] if release_unmeasured else 0.0
        low, high = factors
        low_half = math.hypot(-math.log(low) * scale, spread)
        high_half = math.hypot(math.log(high) * scale, spread)
        return math.exp(-low_half), math.exp(high_half)


def _factors_of(section: object) -> dict[str, dict[str, float]]:
    """A file's ``family_factors`` / ``arch_factors`` / ``load_factors``: {key: {metric:
    factor}} (absent: none)."""
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ValueError(f"factors must be an object, not {section!r}")
    out: dict[str, dict[str, float]] = {}
    for key, factors in section.items():
        if not isinstance(factors, dict):
            raise ValueError(f"factors of {key} must be an object, not {factors!r}")
        values = {m: float(v) for m, v in factors.items() if m in CALIBRATED_METRICS}
        if any(not math.isfinite(v) or v <= 0 for v in values.values()):
            raise ValueError(f"factors of {key} must be finite and positive: {factors!r}")
        out[str(key)] = values
    return out


@lru_cache(maxsize=4)
def _load_calibration(path: Path) -> IntervalCalibration:
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
        return IntervalCalibration.of_payload(payload)
    except (OSError, KeyError, ValueError, TypeError, AttributeError):
        return IntervalCalibration.neutral()


def interval_calibration(path: Path | None = None) -> IntervalCalibration:
    """The calibration in ``data/interval_calibration.json`` (neutral when missing)."""
    return _load_calibration(path or CALIBRATION_FILE)


def reload_calibration() -> None:
    """Read the calibration file again at its next use (after it was rewritten)."""
    _load_calibration.cache_clear()


def calibration_multipliers(
    path: Path | None = None, metric: str = "output_tok_per_s"
) -> tuple[float, ...]:
    """Half-width multipliers of a metric for 0, 1, 2 and 3+ novelty reasons (1.0 when
    uncalibrated)."""
    return interval_calibration(path).multipliers[METRIC_OF.get(metric, metric)]


def release_unmeasured(key: CoefficientKey, seen: SeenData) -> bool:
    """Whether the scenario names an engine release the fitted rows do not cover."""
    return key.version is not None and key.version not in seen.versions


def widen(
    factors: tuple[float, float],
    reasons: int,
    metric: str = "output_tok_per_s",
    release_unmeasured: bool = False,
    family: str | None = None,
    model_classes: Iterable[str] = (),
    load: str | None = None,
) -> tuple[float, float]:
    """An interval's (low, high) multipliers widened for ``reasons`` novelty reasons, an
    unmeasured release, the engine family, the model's architecture classes and the load kind
    the prediction is for, with the stored calibration (:meth:`IntervalCalibration.widen`)."""
    return interval_calibration().widen(
        factors, reasons, metric, release_unmeasured, family, model_classes, load
    )


def interval_factors(
    fitted: FittedCoefficients | None,
    key: CoefficientKey,
    metric: str,
    shares: np.ndarray,
) -> tuple[float, float]:
    """Multipliers (low, high) of a prediction for its 80% interval, before :func:`widen`."""
    lo, hi = residual_quantiles(fitted, key.family, metric)
    sd = 1.0 if fitted is None else math.sqrt(max(fitted.log_variance(key, shares), 0.0))
    param = Z80 * sd
    low = math.sqrt(min(lo, 0.0) ** 2 + param**2)
    high = math.sqrt(max(hi, 0.0) ** 2 + param**2)
    return math.exp(-low), math.exp(high)


#: The 80% log half-width of a deployment's predicted capacity on results the fit never saw:
#: MLPerf's Server rates, each the highest a TensorRT-LLM layout sustained inside the round's p99
#: limits, came out 0.76-1.30x as the steady state predicts them with each round held out (median
#: error 12.6%; ``benchmarks/mlperf_capacity_bench.py``, 2026-12-04): about exp(+-0.2).
CAPACITY_LOG_SPREAD = 0.2
#: Utilisation past which the widening stops growing: at or beyond the predicted saturation rate
#: the queue grows for as long as the run lasts, and the interval says only that.
MAX_UTILISATION = 0.95


def saturation_spread(utilisation: float | None) -> float:
    """The log half-width a rate's latencies gain at ``utilisation`` (the offered rate over the
    predicted saturation rate of the same deployment).

    Near saturation the latencies are ill-conditioned in the capacity: with a step of ``a + b B``
    for a batch of ``B`` (compute-bound decode), a rate using a share ``rho`` of the asymptotic
    throughput settles at ``B = a rho / (b (1 - rho))`` and a TPOT of ``a / (1 - rho)``, so a
    relative capacity error ``e`` moves the latency by ``e rho / (1 - rho)`` in log. MLPerf's
    Server runs sit at 88-99.6% of their Offline throughput, and held out by round their mean
    TTFT came out 0.24-89x the measured (p99 0.18-85x), though their capacity was within 12.6%
    (median): the
    capacity error, times that gain, is the latency's extra spread (0.09 at rho 0.3, 0.8 at 0.8,
    3.8 from 0.95 on). A closed loop has no offered rate and gains nothing: it slows itself."""
    if utilisation is None or not utilisation > 0.0:
        return 0.0
    rho = min(utilisation, MAX_UTILISATION)
    return CAPACITY_LOG_SPREAD * rho / (1.0 - rho)


def near_saturation(
    factors: tuple[float, float], utilisation: float | None, metric: str = "ttft"
) -> tuple[float, float]:
    """A latency's own (low, high) interval factors with :func:`saturation_spread` added in
    quadrature to each log half-width (before the calibrated :func:`widen`); throughput's
    (``metric`` output_tok_per_s) as they are: a rate below saturation is served as offered."""
    extra = saturation_spread(utilisation)
    if extra <= 0.0 or metric == "output_tok_per_s":
        return factors
    low, high = factors
    return (
        math.exp(-math.hypot(math.log(low), extra)),
        math.exp(math.hypot(math.log(high), extra)),
    )


def saturation_note(utilisation: float | None) -> str | None:
    """What a prediction says of a rate at 80% or more of its predicted saturation rate."""
    if utilisation is None or utilisation < 0.8:
        return None
    allowance = math.exp(saturation_spread(utilisation))
    if utilisation >= 1.0:
        return (
            f"the offered rate is {utilisation:.0%} of the predicted saturation rate: requests "
            f"queue for as long as the run lasts; the latency intervals allow x{allowance:.0f} "
            "either way for the capacity's own error (a few percent of capacity decides it)"
        )
    return (
        f"the offered rate is {utilisation:.0%} of the predicted saturation rate: the latency "
        f"intervals allow x{allowance:.1f} either way for the capacity's own error (near "
        "saturation a few percent of capacity moves TTFT and TPOT several-fold)"
    )


@dataclass(frozen=True)
class MeasuredPoint:
    """What the distance looks at of a measured row (or of a scenario)."""

    family: str
    gpu: str
    model: str
    params_b: float
    moe: bool
    input_len: float
    output_len: float
    tp: int
    pp: int
    load: float  # requests in flight (concurrency), a large number for offline/max-throughput
    link: str
    label: str


def point_of(scenario: Scenario, params_b: float, moe: bool, link: str) -> MeasuredPoint:
    if scenario.load == "concurrency":
        load = float(scenario.concurrency or 1)
    elif scenario.load == "rate":
        load = float(scenario.request_rate or 1) * 10.0
    else:
        load = float(scenario.num_requests or 1000)
    return MeasuredPoint(
        family=scenario.engine_family,
        gpu=scenario.gpu,
        model=scenario.model.lower(),
        params_b=params_b,
        moe=moe,
        input_len=scenario.mean_input_len,
        output_len=scenario.mean_output_len,
        tp=scenario.tp,
        pp=scenario.pp,
        load=load,
        link=link,
        label=scenario.describe(),
    )


def scenario_distance(a: MeasuredPoint, b: MeasuredPoint) -> float:
    """Weighted L1 distance: 2 for another engine family or GPU, 1 for another link kind,
    |log2| of the ratio of model sizes (+0.5 across dense/MoE, +0.25 for another model of
    the same size), 0.5 x |log2| of length ratios and of TP and PP, 0.25 x |log2| of load."""
    d = 0.0
    d += 2.0 if a.family != b.family else 0.0
    d += 2.0 if a.gpu.lower() != b.gpu.lower() else 0.0
    d += 1.0 if a.link != b.link else 0.0
    d += abs(math.log2(max(a.params_b, 0.1) / max(b.params_b, 0.1)))
    d += 0.5 if a.moe != b.moe else 0.0
    d += 0.25 if a.model != b.model else 0.0
    d += 0.5 * abs(math.log2(max(a.input_len, 1) / max(b.input_len, 1)))
    d += 0.5 * abs(math.log2(max(a.output_len, 1) / max(b.output_len, 1)))
    d += 0.5 * abs(math.log2(a.tp / b.tp)) + 0.5 * abs(math.log2(a.pp / b.pp))
    d += 0.25 * abs(math.log2(max(a.load, 1) / max(b.load, 1)))
    return d


def nearest(
    point: MeasuredPoint, measured: list[MeasuredPoint]
) -> tuple[MeasuredPoint | None, float]:
    """The measured point closest to ``point`` (the first of equals) and its distance."""
    return PointIndex(measured).nearest(point)


class PointIndex:
    """The measured points as arrays: :func:`scenario_distance` to all of them in one numpy
    expression (a prediction asks once; a search asks for hundreds of candidates)."""

    def __init__(self, points: list[MeasuredPoint]) -> None:
        self.points = points
        self._codes: dict[str, dict[str, int]] = {}
        self.family = self._encode("family", [p.family for p in points])
        self.gpu = self._encode("gpu", [p.gpu.lower() for p in points])
        self.link = self._encode("link", [p.link for p in points])
        self.model = self._encode("model", [p.model for p in points])
        self.moe = np.array([p.moe for p in points], dtype=bool)
        self.log_params = np.log2(np.maximum([p.params_b for p in points], 0.1))
        self.log_in = np.log2(np.maximum([p.input_len for p in points], 1.0))
        self.log_out = np.log2(np.maximum([p.output_len for p in points], 1.0))
        self.log_tp = np.log2(np.array([p.tp for p in points], dtype=float))
        self.log_pp = np.log2(np.array([p.pp for p in points], dtype=float))
        self.log_load = np.log2(np.maximum([p.load for p in points], 1.0))

    def _encode(self, name: str, values: list[str]) -> np.ndarray:
        codes = self._codes.setdefault(name, {})
        return np.array([codes.setdefault(v, len(codes)) for v in values], dtype=np.int64)

    def _code(self, name: str, value: str) -> int:
        return self._codes[name].get(value, -1)

    def distances(self, a: MeasuredPoint) -> np.ndarray:
        """:func:`scenario_distance` from ``a`` to every point, same terms and weights."""
        d = 2.0 * (self.family != self._code("family", a.family))
        d = d + 2.0 * (self.gpu != self._code("gpu", a.gpu.lower()))
        d = d + 1.0 * (self.link != self._code("link", a.link))
        d = d + np.abs(math.log2(max(a.params_b, 0.1)) - self.log_params)
        d = d + 0.5 * (self.moe != a.moe)
        d = d + 0.25 * (self.model != self._code("model", a.model))
        d = d + 0.5 * np.abs(math.log2(max(a.input_len, 1)) - self.log_in)
        d = d + 0.5 * np.abs(math.log2(max(a.output_len, 1)) - self.log_out)
        d = d + 0.5 * np.abs(math.log2(a.tp) - self.log_tp)
        d = d + 0.5 * np.abs(math.log2(a.pp) - self.log_pp)
        return np.asarray(d + 0.25 * np.abs(math.log2(max(a.load, 1)) - self.log_load))

    def nearest(self, point: MeasuredPoint) -> tuple[MeasuredPoint | None, float]:
        if not self.points:
            return None, math.inf
        d = self.distances(point)
        i = int(np.argmin(d))
        return self.points[i], float(d[i])


def confidence_of(distance: float, family_has_gpu: bool, reasons: int = 0) -> Confidence:
    if not family_has_gpu or distance > INTERPOLATED or reasons >= 2:
        return "extrapolated"
    if distance <= NEARBY:
        return "measured nearby"
    return "interpolated"
