"""planner.perf.edge_search: the last index inside a monotone limit, as bisection finds it, in
at most one evaluation more than bisection and far fewer on a smooth margin."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.perf.edge_search import EdgeHint, bracket_from, hint_of, last_inside, margin_of


def _bisect(inside_at: int, beyond_at: int, beyond: set[int] | int) -> tuple[int, int, int]:
    good, bad, n = inside_at, beyond_at, 0
    while bad - good > 1:
        mid = (good + bad) // 2
        n += 1
        if (mid in beyond) if isinstance(beyond, set) else mid >= beyond:
            bad = mid
        else:
            good = mid
    return good, bad, n


@given(
    width=st.integers(2, 4096),
    edge_share=st.floats(0.0, 1.0),
    curvature=st.floats(0.2, 5.0),
    scale=st.floats(1e-3, 1e3),
)
def test_the_edge_is_bisections_within_one_more_evaluation(
    width: int, edge_share: float, curvature: float, scale: float
) -> None:
    edge = 1 + round(edge_share * (width - 1))  # the first index beyond: 1..width

    def shape(i: int) -> float:  # grows with i, crosses zero between edge - 1 and edge
        x = (i - edge + 0.5) / width
        return scale * math.copysign(abs(x) ** curvature, x)

    calls: list[int] = []

    def margin(i: int) -> float:
        calls.append(i)
        return shape(i)

    found = last_inside(margin, 0, width, shape(0), shape(width)) if edge > 0 else None
    good, bad, bisections = _bisect(0, width, edge)
    assert found == (good, bad) == (edge - 1, edge)
    assert len(calls) <= math.ceil(math.log2(width)) + 1
    assert all(0 < i < width for i in calls)
    assert bisections >= 0


def test_a_straight_margin_is_found_in_fewer_evaluations_than_bisection() -> None:
    calls: list[int] = []

    def margin(i: int) -> float:
        calls.append(i)
        return (i - 300.5) / 512

    assert last_inside(margin, 0, 512, margin(0), margin(512)) == (300, 301)
    assert len(calls) - 2 <= 5  # bisection: 9


def test_an_infinite_or_undefined_margin_counts_as_beyond() -> None:
    assert margin_of(math.nan, 1.0) == math.inf
    assert margin_of(math.inf, 1.0) == math.inf
    assert margin_of(0.0, 1.0) < -700
    assert margin_of(2.0, 1.0) == pytest.approx(math.log(2.0))
    assert margin_of(1.0, 1.0) == 0.0  # at the limit is inside

    # a saturated top (infinite margin) and NaN margins are bisected, not interpolated
    def margin(i: int) -> float:
        return math.nan if i >= 40 else -1.0

    assert last_inside(margin, 0, 100, -1.0, math.inf) == (39, 40)


def test_the_bracket_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="below"):
        last_inside(lambda i: 0.0, 5, 5, -1.0, 1.0)


@given(
    width=st.integers(1, 4096),
    edge_share=st.floats(0.0, 1.0),
    start_share=st.floats(0.0, 1.0),
    slope=st.one_of(st.none(), st.floats(1e-6, 1e3)),
    curvature=st.floats(0.2, 5.0),
)
def test_a_search_from_any_hint_finds_the_edge_bisection_finds(
    width: int, edge_share: float, start_share: float, slope: float | None, curvature: float
) -> None:
    """Wherever a hint points and whatever slope it claims, the bracket it leads to, narrowed
    by last_inside, ends at the edge the whole range's bisection finds (even at the ends:
    inside everywhere, beyond everywhere), in a logarithmic number of evaluations."""
    edge = round(edge_share * (width + 1))  # the first index beyond: 0 (none inside)..width+1

    def shape(i: int) -> float:
        x = (i - edge + 0.5) / (width + 1)
        return math.copysign(abs(x) ** curvature, x)

    calls: list[int] = []

    def margin(i: int) -> float:
        calls.append(i)
        return shape(i)

    hint = EdgeHint(round(start_share * width), slope)
    inside, inside_margin, beyond, beyond_margin = bracket_from(margin, hint, 0, width)
    assert 0 <= inside <= beyond <= width
    if inside == beyond:  # the ends: all inside, or all beyond
        assert (inside, inside_margin <= 0) == ((width, True) if edge > width else (0, False))
        return
    assert inside_margin <= 0 < beyond_margin
    assert last_inside(margin, inside, beyond, inside_margin, beyond_margin) == (edge - 1, edge)
    assert len(set(calls)) <= 2 * math.ceil(math.log2(width + 1)) + 3


def test_a_hint_near_the_edge_finds_it_in_a_few_evaluations() -> None:
    """At the edge: its two cells; a few cells off: the slope's step over the edge, then
    last_inside's interpolation (bisection from scratch: 9)."""
    calls: list[int] = []

    def margin(i: int) -> float:
        calls.append(i)
        return (i - 300.5) / 512

    left = hint_of(300, margin(300), 301, margin(301))
    assert left.index == 300 and left.slope == pytest.approx(1 / 512)
    for start, most in ((300, 2), (301, 2), (296, 4), (305, 4)):
        calls.clear()
        inside, m_in, beyond, m_out = bracket_from(margin, EdgeHint(start, 1 / 512), 0, 512)
        assert last_inside(margin, inside, beyond, m_in, m_out) == (300, 301)
        assert len(calls) <= most, (start, calls)
    # a slope that is not finite or not growing leaves no slope to follow
    assert hint_of(10, -1.0, 11, math.inf).slope is None
    assert hint_of(10, -1.0, 11, -2.0).slope is None
