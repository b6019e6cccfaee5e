"""The distance to measured data: the vectorised index agrees with the per-pair definition."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.perf.uncertainty import MeasuredPoint, PointIndex, nearest, scenario_distance

POINT = st.builds(
    MeasuredPoint,
    family=st.sampled_from(["vllm", "trtllm", "sglang"]),
    gpu=st.sampled_from(["L4", "L40S", "H100-SXM", "h100-sxm", "B200"]),
    model=st.sampled_from(["meta-llama/a", "qwen/b", "x/c"]),
    params_b=st.floats(0.01, 1000),
    moe=st.booleans(),
    input_len=st.floats(0, 200_000),
    output_len=st.floats(0, 20_000),
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2, 4]),
    load=st.floats(0, 5000),
    link=st.sampled_from(["nvlink", "pcie_p2p", "pcie_host"]),
    label=st.just("row"),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(POINT, min_size=1, max_size=40), POINT)
def test_the_index_finds_the_nearest_point_at_the_pairwise_distance(
    points: list[MeasuredPoint], query: MeasuredPoint
) -> None:
    expected = min(scenario_distance(query, p) for p in points)
    found, distance = PointIndex(points).nearest(query)
    assert abs(distance - expected) < 1e-9
    assert found is not None and abs(scenario_distance(query, found) - expected) < 1e-9
    assert nearest(query, points)[1] == distance


def test_no_points_is_infinitely_far() -> None:
    query = MeasuredPoint("vllm", "L4", "m", 8, False, 1, 1, 1, 1, 1, "pcie_host", "q")
    assert PointIndex([]).nearest(query) == (None, float("inf"))
