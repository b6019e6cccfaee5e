"""The edge of a monotone limit on a grid of loads: the last load that keeps inside it.

A capacity search asks where latency first breaks an SLO as the load grows. Bisection finds
that edge in ``log2(cells)`` evaluations whatever the latency curve looks like; the curve is
smooth, though, so interpolating how far each evaluated load is from its limit (a margin,
negative inside, positive beyond) lands near the edge at once. Plain interpolation (regula
falsi) can creep towards the edge from one side for many steps; the ITP method
(Oliveira & Takahashi, "An Enhancement of the Bisection Method Average Performance Preserving
Minmax Optimality", ACM TOMS 47(1), 2020) truncates the interpolated point towards the
midpoint and projects it into a band around it, so it never needs more than one evaluation
beyond bisection's and usually needs about half.

On an integer grid (grid cells of a load range, or whole requests in flight) the edge is a
cell boundary: for a limit that is monotone in the load, ITP and bisection find the same one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

#: ITP's truncation: ``kappa1 (b - a) ** kappa2``, ``kappa1`` relative to the first interval
_KAPPA1 = 0.2
_KAPPA2 = 2.0
#: evaluations allowed beyond bisection's
_SLACK = 1


def margin_of(value: float, limit: float) -> float:
    """How far ``value`` is beyond ``limit``, as a log ratio: > 0 exactly when ``not value <=
    limit`` (NaN and infinity count as beyond), finite for a value of zero."""
    if not value <= limit:
        return math.inf if not math.isfinite(value) else math.log(value / limit)
    if value <= 0.0:
        return -745.0  # log of the smallest double: far inside
    return math.log(value / limit)


def last_inside(
    margin: Callable[[int], float],
    inside: int,
    beyond: int,
    inside_margin: float,
    beyond_margin: float,
) -> tuple[int, int]:
    """(the last index inside the limit, the first beyond it) between ``inside`` (margin <= 0)
    and ``beyond`` (margin > 0), for a ``margin(index)`` that grows with the index."""
    if not inside < beyond:
        raise ValueError(f"inside {inside} must be below beyond {beyond}")
    first_width = beyond - inside
    kappa1 = _KAPPA1 / first_width
    most = math.ceil(math.log2(first_width)) + _SLACK if first_width > 1 else 0
    done = 0
    while beyond - inside > 1:
        a, b = inside, beyond
        middle = (a + b) / 2.0
        # how far from the middle the point may go and stay within bisection's bound
        radius = max(0.5 * 2.0 ** (most - done) - (b - a) / 2.0, 0.0)
        if math.isfinite(inside_margin) and math.isfinite(beyond_margin):
            falsi = a + (b - a) * (-inside_margin) / (beyond_margin - inside_margin)
        else:
            falsi = middle
        towards = math.copysign(1.0, middle - falsi)
        shift = kappa1 * (b - a) ** _KAPPA2
        point = falsi + towards * shift if shift <= abs(middle - falsi) else middle
        if abs(point - middle) > radius:
            point = middle - towards * radius
        index = min(max(round(point), a + 1), b - 1)
        found = margin(index)
        if not found <= 0.0:  # NaN counts as beyond
            beyond, beyond_margin = index, found
        else:
            inside, inside_margin = index, found
        done += 1
    return inside, beyond


@dataclass(frozen=True)
class EdgeHint:
    """Where a search of a similar question found its edge: the last index inside, and how
    fast the margin grew there (per index; None when not finite). A hint only decides where a
    search starts looking: for a monotone margin the edge found is the same whatever it says."""

    index: int
    slope: float | None


def hint_of(inside: int, inside_margin: float, beyond: int, beyond_margin: float) -> EdgeHint:
    """The hint a finished search leaves: its edge and the margin's slope across it."""
    slope = (beyond_margin - inside_margin) / max(beyond - inside, 1)
    return EdgeHint(inside, slope if math.isfinite(slope) and slope > 0 else None)


def bracket_from(
    margin: Callable[[int], float], hint: EdgeHint, lowest: int, highest: int
) -> tuple[int, float, int, float]:
    """The edge's bracket found outward from ``hint``, for a ``margin(index)`` that grows with
    the index on ``lowest..highest``: ``(inside, its margin, beyond, its margin)``, inside <
    beyond, to be narrowed by :func:`last_inside`; or ``(highest, m, highest, m)`` when even
    ``highest`` is inside, ``(lowest, m, lowest, m)`` when even ``lowest`` is beyond.

    Each probe goes where the margin's slope (the hint's, then the secant of the last two
    probes) says it crosses zero, at least twice as far as the probe before: a hint a few
    indices off costs two or three evaluations, a wrong one no more than a logarithmic
    number."""
    at = min(max(hint.index, lowest), highest)
    found = margin(at)
    slope = hint.slope
    least = 1
    while True:
        inside = found <= 0.0  # NaN counts as beyond
        if inside and at == highest:
            return at, found, at, found
        if not inside and at == lowest:
            return at, found, at, found
        distance = least
        if slope is not None and math.isfinite(found):
            distance = max(distance, math.ceil(abs(found) / slope))
        step = min(distance, highest - at) if inside else -min(distance, at - lowest)
        probe = at + step
        probe_margin = margin(probe)
        if inside != (probe_margin <= 0.0):
            if inside:
                return at, found, probe, probe_margin
            return probe, probe_margin, at, found
        if math.isfinite(probe_margin) and math.isfinite(found) and probe_margin != found:
            secant = (probe_margin - found) / step
            slope = secant if secant > 0 else slope
        at, found = probe, probe_margin
        least = 2 * abs(step)
