"""The runner's self-checks judged on given numbers: what a loaded machine would make a run
measure (a busy client, a late event loop, a skewed in-flight sample), fed in directly, so the
verdicts are tested without depending on the machine's load."""

from __future__ import annotations

import pytest

from benchmarks_runner.self_checks import (
    CPU_SATURATION,
    LITTLE_TOLERANCE,
    LOOP_LAG_LIMIT_S,
    RunObservations,
    client_cpu,
    littles_law,
)
from planner.run_files import RequestRecord


def _obs(**fields: object) -> RunObservations:
    base: dict[str, object] = {
        "load": "concurrency",
        "duration_s": 10.0,
        "rows": [],
        "all_rows": [],
    }
    return RunObservations(**(base | fields))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cpu", "lag_s", "ok", "says"),
    [
        (0.35, 0.004, True, "client CPU 35% of one core, event-loop lag p99 4.0 ms"),
        (CPU_SATURATION - 0.01, LOOP_LAG_LIMIT_S, True, "lag p99 20.0 ms"),
        (CPU_SATURATION, 0.004, False, "the client is the bottleneck"),
        (0.97, 0.050, False, "the client is the bottleneck"),
        (0.20, LOOP_LAG_LIMIT_S + 0.001, False, "other processes starved the client"),
        (0.05, 0.300, False, "other processes starved the client"),
    ],
)
def test_client_cpu_saturation_on_given_figures(
    cpu: float, lag_s: float, ok: bool, says: str
) -> None:
    check = client_cpu(_obs(cpu_fraction=cpu, loop_lag_p99_s=lag_s))
    assert check is not None and check["name"] == "client_cpu_saturation"
    assert check["ok"] is ok and says in check["message"], check


def test_client_cpu_saturation_needs_a_measured_cpu_share() -> None:
    assert client_cpu(_obs(cpu_fraction=None, loop_lag_p99_s=0.5)) is None
    check = client_cpu(_obs(cpu_fraction=0.5, loop_lag_p99_s=None))  # no lag sampled: none
    assert check is not None and check["ok"]


def _rows(n: int, span_s: float) -> list[RequestRecord]:
    return [
        RequestRecord(
            request_id=f"r{i}",
            request_index=i,
            start_s=float(i),
            first_chunk_s=float(i) + 0.1,
            end_s=float(i) + span_s,
            status="ok",
        )
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("inflight_mean", "ok"),
    [
        (4.0, True),  # 20 requests in 10 s of 2 s each: L = 2/s x 2 s = 4
        (4.0 * (1 + LITTLE_TOLERANCE) - 0.01, True),
        (4.0 / (1 - LITTLE_TOLERANCE) + 0.6, False),  # a sampler that saw too many
        (1.5, False),  # ... or too few
        (0.2, True),  # off by less than half a request: small runs are not judged by share
    ],
)
def test_littles_law_on_given_figures(inflight_mean: float, ok: bool) -> None:
    rows = _rows(20, 2.0) if inflight_mean != 0.2 else _rows(1, 0.5)
    check = littles_law(_obs(rows=rows, inflight_mean=inflight_mean, concurrency=4))
    assert check is not None and check["ok"] is ok, check
    assert check["message"].startswith("lambda*W = ")
