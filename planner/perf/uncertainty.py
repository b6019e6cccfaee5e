"""How sure a prediction is: its 80% interval and how far it is from measured data.

Interval (log space) = the residual spread of the fit for the engine family and metric (10th and
90th percentiles of log(measured / predicted) over the fitted rows, widened by
:data:`RESIDUAL_INFLATION` because in-sample residuals understate held-out ones) combined in
quadrature with the coefficients' own uncertainty at this scenario (Laplace approximation,
:meth:`FittedCoefficients.log_variance`, which adds the prior variance of every level the data
never saw: an unmeasured GPU or engine release gets a wider interval by construction).

Distance to data: the nearest measured row under a weighted L1 distance over engine family,
GPU, model size and kind, lengths, layout and load (each term documented in
:func:`scenario_distance`). ``measured nearby`` within 1, ``interpolated`` within 3,
``extrapolated`` beyond, or whenever the engine family has no measurement on the GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.perf.calibration import FittedCoefficients
from planner.perf.scenario import Confidence, Scenario
from planner.perf.step_time import FITTED_IDX

Z80 = 1.2815515655446004  # standard normal quantile of 0.9
RESIDUAL_INFLATION = 1.0
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


def residual_quantiles(
    fitted: FittedCoefficients | None, family: str, metric: str
) -> tuple[float, float]:
    """10th/90th percentiles of log(measured / predicted) for a family's metric (inflated)."""
    if fitted is None:
        return DEFAULT_LOG_SPREAD
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


def interval_factors(
    fitted: FittedCoefficients | None,
    family: str,
    gpu: str,
    version: str | None,
    metric: str,
    shares: np.ndarray,
) -> tuple[float, float]:
    """Multipliers (low, high) of a prediction for its 80% interval."""
    lo, hi = residual_quantiles(fitted, family, metric)
    if fitted is None:
        sd = 1.0
    else:
        sd = math.sqrt(max(fitted.log_variance(family, gpu, version, shares), 0.0))
    param = Z80 * sd
    low = math.sqrt(min(lo, 0.0) ** 2 + param**2)
    high = math.sqrt(max(hi, 0.0) ** 2 + param**2)
    return math.exp(-low), math.exp(high)


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


def confidence_of(distance: float, family_has_gpu: bool) -> Confidence:
    if not family_has_gpu or distance > INTERPOLATED:
        return "extrapolated"
    if distance <= NEARBY:
        return "measured nearby"
    return "interpolated"
