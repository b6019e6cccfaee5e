"""Fast capacity questions for the recommendation search.

``max_rate_meeting_slo`` finds the highest Poisson request rate whose predicted p99 TTFT, p99
TPOT (and p99 E2E) stay inside the SLO:

1. the saturation rate, from a closed-loop run at the engine's full batch (the most requests
   per second the replica completes whatever the latency): the upper end of the search;
2. a bisection over the rate, each step a short discrete-event run (``num_requests`` Poisson
   arrivals, a fixed seed so that every rate sees the same arrival pattern scaled, which keeps
   the p99s monotone in the rate). One evaluation is one simulation, a few to a few tens of
   milliseconds; a search is about ten of them.

Rates are for the whole scenario (all replicas).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from planner.errors import InvalidInputError
from planner.perf.scenario import Prediction, Scenario

if TYPE_CHECKING:
    from planner.perf.model import PerformanceModel

Limit = Literal["ttft", "tpot", "e2e", "saturation", "none"]


@dataclass(frozen=True)
class RateSearchResult:
    """Highest rate meeting the SLO, the prediction there, and what binds."""

    max_rate: float  # requests/s (0 when even a trickle misses the SLO)
    saturation_rate: float  # requests/s the deployment completes at full batch
    prediction: Prediction | None  # at max_rate
    limited_by: Limit
    evaluations: int


def saturation_rate(model: PerformanceModel, scenario: Scenario) -> float:
    """Requests/s at full batch: a closed loop with as many requests in flight as the engine
    schedules (``max_num_seqs``, at most what the KV cache holds), four rounds of them."""
    dep = model.deployment(scenario)
    per_seq = scenario.mean_input_len + scenario.mean_output_len
    fit_kv = max(1, int(dep.kv_capacity_tokens / max(per_seq, 1.0)))
    in_flight = max(1, min(dep.max_num_seqs, fit_kv)) * dep.replicas
    closed = scenario.model_copy(
        update={
            "load": "concurrency",
            "concurrency": float(in_flight),
            "num_requests": max(4 * in_flight, 64),
            "request_rate": None,
        }
    )
    return model.predict(closed).request_per_s


def _violation(
    p: Prediction, ttft: float | None, tpot: float | None, e2e: float | None
) -> Limit | None:
    if ttft is not None and not p.ttft_ms_p99 <= ttft:
        return "ttft"
    if tpot is not None and not p.tpot_ms_p99 <= tpot:
        return "tpot"
    if e2e is not None and not p.e2e_ms_p99 <= e2e:
        return "e2e"
    return None


def max_rate_meeting_slo(
    model: PerformanceModel,
    scenario: Scenario,
    slo_ttft_p99_ms: float | None = None,
    slo_tpot_p99_ms: float | None = None,
    slo_e2e_p99_ms: float | None = None,
    *,
    num_requests: int = 300,
    rel_tol: float = 0.03,
    max_evaluations: int = 14,
) -> RateSearchResult:
    """Bisection over the request rate (see the module docstring)."""
    for name, value in (
        ("slo_ttft_p99_ms", slo_ttft_p99_ms),
        ("slo_tpot_p99_ms", slo_tpot_p99_ms),
        ("slo_e2e_p99_ms", slo_e2e_p99_ms),
    ):
        if value is not None and not value > 0:
            raise InvalidInputError(name, value, "a latency > 0 ms, or None for no limit")
    sat = saturation_rate(model, scenario)
    evaluations = 1

    def at(rate: float) -> Prediction:
        nonlocal evaluations
        evaluations += 1
        return model.predict(
            scenario.model_copy(
                update={
                    "load": "rate",
                    "request_rate": rate,
                    "num_requests": num_requests,
                    "concurrency": None,
                }
            )
        )

    # a rate just under saturation: if it meets the SLO, saturation binds
    hi = sat * 0.98
    top = at(hi)
    if _violation(top, slo_ttft_p99_ms, slo_tpot_p99_ms, slo_e2e_p99_ms) is None:
        return RateSearchResult(hi, sat, top, "saturation", evaluations)
    lo = 0.0
    best: Prediction | None = None
    limit: Limit = _violation(top, slo_ttft_p99_ms, slo_tpot_p99_ms, slo_e2e_p99_ms) or "none"
    probe = sat * 0.01
    low = at(probe)
    if _violation(low, slo_ttft_p99_ms, slo_tpot_p99_ms, slo_e2e_p99_ms) is not None:
        return RateSearchResult(0.0, sat, None, limit, evaluations)
    lo, best = probe, low
    while hi - lo > rel_tol * hi and evaluations < max_evaluations:
        mid = math.sqrt(lo * hi) if lo > 0 else hi / 2
        p = at(mid)
        v = _violation(p, slo_ttft_p99_ms, slo_tpot_p99_ms, slo_e2e_p99_ms)
        if v is None:
            lo, best = mid, p
        else:
            hi, limit = mid, v
    return RateSearchResult(lo, sat, best, limit, evaluations)
