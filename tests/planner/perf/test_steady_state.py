"""The steady-state model of continuous batching agrees with the simulator it stands in for.

Both price a step with the same function and coefficients; they differ in how the queue is
treated. The reference for a Poisson load is a simulation long enough to reach steady state
(1,000 requests: a 160-request run starting from an empty engine has not, near capacity);
for a closed loop, the simulator's own finite run (its first wave queues for the prefill).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from planner.catalog import Catalog
from planner.perf.deployment import resolve_deployment
from planner.perf.model import PerformanceModel
from planner.perf.scenario import Scenario
from planner.perf.simulator import FRONT_END_SPACING
from planner.perf.steady_state import (
    SteadyStateModel,
    _broken,
    _generalised_poisson_rows,
    _linear_quantile,
)
from planner.perf.step_time import IDX, StepBatch, full_coefficients, step_features
from tests.planner.perf.test_simulator import FITTED_COEFFICIENTS, STEP_TAIL

LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"
H100 = {"gpu": "H100-SXM", "tp": 2, "instance": "p5.48xlarge", "precision": "fp8"}
A100 = {"gpu": "A100-80GB-SXM", "tp": 4, "instance": "p4de.24xlarge", "precision": "bf16"}
#: MoE layouts (the step prices the experts a batch touches): gpt-oss-120b's MXFP4 checkpoint
#: on one and on two H100s, Qwen3-235B-A22B in FP8 on eight
GPT_OSS_TP1 = {"model": "openai/gpt-oss-120b", "gpu": "H100-SXM", "tp": 1,
               "instance": "p5.48xlarge", "precision": "fp4"}  # fmt: skip
GPT_OSS_TP2 = {**GPT_OSS_TP1, "tp": 2}
QWEN3_235B = {"model": "Qwen/Qwen3-235B-A22B", "gpu": "H100-SXM", "tp": 8,
              "instance": "p5.48xlarge", "precision": "fp8"}  # fmt: skip


def _scenario(layout: dict[str, object], **load: object) -> Scenario:
    fields = {"model": LLAMA_70B, **layout, **load}
    return Scenario(
        engine="vllm", input_len=2048, output_len=512, max_num_seqs=256,
        max_num_batched_tokens=8192, **fields,  # type: ignore[arg-type]
    )  # fmt: skip


def _close(a: float, b: float, tolerance: float) -> bool:
    return abs(a / b - 1.0) <= tolerance


#: gpt-oss-120b on one H100 at a fifth of its capacity: the steady state's p99 TTFT is 20-27%
#: below the simulation's (the means agree): the gamma fitted to a prompt's wait misses the tail
#: of arriving during one of the long MoE prefill steps. Near capacity, where a search compares
#: it with an SLO, it agrees (the 0.5 case). The known shortfall is checked as such: below the
#: simulation and within 35% (a strict xfail at 20% flipped when session 37's refit moved the
#: shortfall from ~27% to 19.9%). Its p99 TPOT falls short the same way, a decode held behind
#: those prefill steps: 10.9 ms against 12.9 (15.4%) with session 38's fit, 15% before.
LOW_LOAD_MOE_P99 = 0.35


@pytest.mark.parametrize(
    ("layout", "load_share", "p99_ttft_tolerance"),
    [
        (H100, 0.2, 0.2), (H100, 0.5, 0.2), (A100, 0.2, 0.2), (A100, 0.5, 0.2),
        (GPT_OSS_TP1, 0.2, LOW_LOAD_MOE_P99), (GPT_OSS_TP1, 0.5, 0.2),
        (GPT_OSS_TP2, 0.2, 0.2), (QWEN3_235B, 0.5, 0.2),
    ],
    ids=[
        "H100 TP2 fp8-0.2", "H100 TP2 fp8-0.5", "A100 TP4 bf16-0.2", "A100 TP4 bf16-0.5",
        "gpt-oss-120b H100 TP1-0.2", "gpt-oss-120b H100 TP1-0.5", "gpt-oss-120b H100 TP2-0.2",
        "Qwen3-235B H100 TP8 fp8-0.5",
    ],
)  # fmt: skip
def test_a_poisson_load_matches_a_long_simulation(
    model: PerformanceModel,
    layout: dict[str, object],
    load_share: float,
    p99_ttft_tolerance: float,
) -> None:
    probe = _scenario(layout, load="rate", request_rate=1.0, num_requests=1000)
    rate = model.steady_state(probe).saturation_rate() * load_share
    scenario = probe.model_copy(update={"request_rate": rate})
    simulated = model.predict(scenario)
    steady = model.predict_steady(scenario)
    assert _close(steady.output_tok_per_s, simulated.output_tok_per_s, 0.05)
    assert _close(steady.ttft_ms_mean, simulated.ttft_ms_mean, 0.10)
    assert _close(steady.ttft_ms_p99, simulated.ttft_ms_p99, p99_ttft_tolerance)
    if p99_ttft_tolerance == LOW_LOAD_MOE_P99:
        assert steady.ttft_ms_p99 < simulated.ttft_ms_p99  # the known shortfall's direction
    # 7%: gpt-oss-120b on one H100 at half its capacity is 6.1% short (12.20 vs 12.99 ms) since
    # session 53's eager floor (5.2% with the release-age fit before it, planner.perf.
    # calibration), the rest within 5%
    assert _close(steady.tpot_ms_mean, simulated.tpot_ms_mean, 0.07)
    if p99_ttft_tolerance == LOW_LOAD_MOE_P99:
        assert steady.tpot_ms_p99 < simulated.tpot_ms_p99
        assert _close(steady.tpot_ms_p99, simulated.tpot_ms_p99, 0.25)
    else:
        assert _close(steady.tpot_ms_p99, simulated.tpot_ms_p99, 0.15)
    assert "steady-state estimate (no simulation)" in steady.notes


@pytest.mark.parametrize(
    "layout", [H100, A100, GPT_OSS_TP1], ids=["H100 TP2 fp8", "A100 TP4 bf16", "gpt-oss-120b"]
)
@pytest.mark.parametrize("in_flight", [4, 16])
def test_a_closed_loop_matches_the_simulated_run(
    model: PerformanceModel, layout: dict[str, object], in_flight: int
) -> None:
    scenario = _scenario(
        layout, load="concurrency", concurrency=in_flight, num_requests=4 * in_flight
    )
    simulated = model.predict(scenario)
    steady = model.predict_steady(scenario)
    assert _close(steady.output_tok_per_s, simulated.output_tok_per_s, 0.05)
    # the first wave of the run queues for the prefill: it sets the tail
    assert _close(steady.ttft_ms_p99, simulated.ttft_ms_p99, 0.10)


#: how far above the steady-state edge the simulation must break the SLO: 10%, and 20% for
#: Qwen3-235B on 8 x H100, whose eager prefill steps (94 MoE layers' launches, session 53's
#: eager floor) cost ~5x a decode step: the steady state's p99 TPOT near capacity comes out
#: ~20% above the simulation's (98.6 against 80.0 ms at its edge), so its edge is ~13% low,
#: on the safe side (the simulation meets the SLO at 1.1x it and breaks it at 1.2x)
QWEN3_235B_EDGE_ABOVE = 1.2


@pytest.mark.parametrize(
    ("layout", "above_factor"),
    [(H100, 1.1), (GPT_OSS_TP1, 1.1), (QWEN3_235B, QWEN3_235B_EDGE_ABOVE)],
    ids=["H100 TP2 fp8", "gpt-oss-120b", "Qwen3-235B"],
)
def test_the_capacity_inside_an_slo_is_the_simulators_edge(
    model: PerformanceModel, layout: dict[str, object], above_factor: float
) -> None:
    """Highest rate with p99 TTFT <= 3 s and p99 TPOT <= 100 ms, steady state against
    1,000-request simulations 10% below and 10% (Qwen3-235B: 20%) above it."""
    probe = _scenario(layout, load="rate", request_rate=1.0, num_requests=1000)
    found = model.steady_state(probe).max_rate(3.0, 0.100)
    assert found.max_load > 0 and found.limited_by in ("ttft", "tpot", "saturation")
    at = probe.model_copy(update={"request_rate": found.max_load * 0.9})
    above = probe.model_copy(update={"request_rate": found.max_load * above_factor})
    inside, outside = model.predict(at), model.predict(above)

    def meets(p: object) -> bool:
        return p.ttft_ms_p99 <= 3000 and p.tpot_ms_p99 <= 100  # type: ignore[attr-defined]

    # 10% below the steady-state edge the simulation meets the SLO; above it, unless the
    # replica is saturated there, it does not
    assert meets(inside)
    if found.limited_by != "saturation":
        assert not meets(outside)


def test_what_bounds_a_full_batch(model: PerformanceModel) -> None:
    few_seats = _scenario(H100, load="rate", request_rate=1.0).model_copy(
        update={"max_num_seqs": 8}
    )
    steady = model.steady_state(few_seats)
    assert steady.saturation()[1] == "max_num_seqs"
    tight_budget = _scenario(H100, load="rate", request_rate=1.0).model_copy(
        update={"max_num_batched_tokens": 512, "output_len": 8}
    )
    assert model.steady_state(tight_budget).saturation()[1] == "token_budget"
    roomy = model.steady_state(_scenario(H100, load="rate", request_rate=1.0))
    assert roomy.saturation()[1] in ("kv_cache", "max_num_seqs")
    assert roomy.at_rate(roomy.saturation_rate() * 1.05).stable is False


def test_an_unstated_chunking_is_the_engines_default_as_the_simulator_reads_it(
    model: PerformanceModel,
) -> None:
    # a scenario's None is the engine's default (vLLM chunks; TensorRT-LLM's server schedules
    # whole prompts): the steady state reads the resolved engine, not the scenario's None
    base = _scenario(H100, load="rate", request_rate=1.0).model_copy(
        update={"max_num_batched_tokens": 2048}
    )
    for engine, default in (("vllm", True), ("tensorrt-llm", False)):
        unstated = base.model_copy(update={"engine": engine})
        stated = unstated.model_copy(update={"enable_chunked_prefill": default})
        steady, same = model.steady_state(unstated), model.steady_state(stated)
        assert steady.chunked is default
        assert steady.budget == same.budget
        # a 2,048-token prompt beside the decodes needs two chunks of a 2,048 budget
        assert (steady.at_rate(1.0).chunks > 1) is default
        assert steady.at_rate(1.0).ttft_p99_s == pytest.approx(same.at_rate(1.0).ttft_p99_s)


def test_latency_grows_with_load(model: PerformanceModel) -> None:
    steady = model.steady_state(_scenario(A100, load="rate", request_rate=1.0))
    top = steady.saturation_rate()
    states = [steady.at_rate(top * share) for share in (0.1, 0.3, 0.5, 0.7, 0.9)]
    for before, after in itertools.pairwise(states):
        assert after.ttft_p99_s >= before.ttft_p99_s
        assert after.tpot_p99_s >= before.tpot_p99_s
        assert after.rate > before.rate


def test_the_incomplete_gamma_matches_scipys() -> None:
    from scipy.special import gammaincc

    from planner.perf.steady_state import upper_gamma_q

    for a in (0.05, 0.5, 1.0, 3.7, 12.0, 95.0, 256.0):
        for x in (0.0, 0.01, 0.5, 1.0, a * 0.5, a, a * 1.5, a + 30.0):
            assert abs(upper_gamma_q(a, x) - float(gammaincc(a, x))) < 1e-10


@pytest.mark.parametrize("layout", [H100, A100, GPT_OSS_TP1], ids=["H100", "A100", "gpt-oss"])
@pytest.mark.parametrize(
    "limits", [(3.0, 0.100, None), (0.8, None, None), (None, 0.040, None), (3.0, 0.100, 30.0)]
)
def test_the_capacity_searchs_limit_check_is_the_states_quantiles(
    model: PerformanceModel, layout: dict[str, object], limits: tuple[float | None, ...]
) -> None:
    """The bisection checks each limit by the tail at the limit (one survival evaluation)
    instead of computing the quantile: it says what the full state's quantiles say, at every
    load from idle to saturation."""
    steady = model.steady_state(_scenario(layout, load="rate", request_rate=1.0))
    u_max, _ = steady.saturation()
    for share in (0.01, 0.05, 0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 0.97, 0.999):
        u = u_max * share
        state = steady._open_loop(u, 0.99, stable=True, bound="none")
        assert steady._margin_at(u, 0.99, limits)[0] == _broken(state, limits), share


def test_the_branching_counts_have_the_generalised_poissons_moments() -> None:
    """Consul's generalised Poisson: mean theta / (1 - m), variance theta / (1 - m)^3 (up to
    the tail cut at 12 standard deviations); a row with no immigrants is all at zero; each
    row sums to one."""
    theta = np.array([0.0, 0.3, 2.0, 12.0, 40.0])
    m = np.array([0.5, 0.0, 0.4, 0.8, 0.2])
    counts, pmf, support = _generalised_poisson_rows(theta, m)
    assert np.allclose(pmf.sum(axis=1), 1.0)
    assert pmf[0, 0] == 1.0 and not support[0, 1:].any()
    assert (pmf[~support] == 0).all()
    mean = pmf @ counts
    variance = pmf @ counts**2 - mean**2
    assert np.allclose(mean[1:], theta[1:] / (1 - m[1:]), rtol=1e-4)
    assert np.allclose(variance[1:], theta[1:] / (1 - m[1:]) ** 3, rtol=2e-2)


def test_the_linear_quantile_is_numpys() -> None:
    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 10, 101, 1000):
        values = np.sort(rng.lognormal(size=n))
        for q in (0.0, 0.01, 0.5, 0.9, 0.99, 1.0):
            assert _linear_quantile(values, q) == float(np.quantile(values, q))


def _bisected_rate_edge(
    steady: SteadyStateModel, limits: tuple[float | None, ...]
) -> tuple[float, str]:
    """The capacity search as it was: bisection of the arrivals per step between 1% of
    saturation and saturation, to 1%."""
    import math

    u_max, _ = steady.saturation()

    def broken_at(u: float, quantile: float, limits: tuple[float | None, ...]) -> str | None:
        return steady._margin_at(u, quantile, limits)[0]

    limit = broken_at(u_max * (1 - 1e-6), 0.99, limits)
    assert limit is not None, "these cases are bound by an SLO"
    lo, hi = u_max * 0.01, u_max
    assert broken_at(lo, 0.99, limits) is None
    while hi - lo > 0.01 * hi:
        mid = math.sqrt(lo * hi)
        broken = broken_at(mid, 0.99, limits)
        if broken is None:
            lo = mid
        else:
            hi, limit = mid, broken
    return lo, limit


def test_the_capacity_search_finds_the_edge_bisection_finds_in_fewer_evaluations(
    model: PerformanceModel,
) -> None:
    """max_rate interpolates on the limits' margins (planner.perf.edge_search) instead of
    bisecting: the same grid cell, so the same capacity and binding limit, each search with
    at most one state more than bisection and fewer over all."""
    bisected = searched = 0
    cases = itertools.product(
        [H100, A100, GPT_OSS_TP1], [(3.0, 0.100, None), (2.0, None, None), (3.0, 0.060, 30.0)]
    )
    for layout, limits in cases:
        steady = model.steady_state(_scenario(layout, load="rate", request_rate=1.0))
        before = steady.evaluations
        expected, expected_limit = _bisected_rate_edge(steady, limits)
        by_bisection = steady.evaluations - before
        before = steady.evaluations
        found = steady.max_rate(*limits)
        by_search = steady.evaluations - before - 1  # the state at the edge, computed once
        assert found.state.arrivals_per_step == pytest.approx(expected, rel=1e-12)
        assert found.limited_by == expected_limit
        assert by_search <= by_bisection + 1
        bisected += by_bisection
        searched += by_search
    assert searched < bisected


def test_the_concurrency_search_finds_bisections_number_of_requests(
    model: PerformanceModel,
) -> None:
    """Whole requests in flight: the same number as bisection over the closed-loop states."""
    checked = 0
    for layout, limits in itertools.product(
        [H100, A100, GPT_OSS_TP1], [(3.0, 0.100, None), (1.0, 0.050, None), (None, 0.030, 20.0)]
    ):
        steady = model.steady_state(_scenario(layout, load="concurrency", concurrency=8))
        found = steady.max_concurrency(*limits, highest=512)
        if found.limited_by == "saturation" or found.max_load == 0:
            continue
        good, bad = 1, 512
        while bad - good > 1:
            mid = (good + bad) // 2
            if _broken(steady.at_concurrency(float(mid)), limits) is None:
                good = mid
            else:
                bad = mid
        assert found.max_load == good
        assert found.limited_by == _broken(steady.at_concurrency(float(bad)), limits)
        checked += 1
    assert checked >= 4  # most of the cases are bound by an SLO inside 512 in flight


def test_a_search_started_from_another_workloads_edge_finds_the_same_capacity(
    model: PerformanceModel,
) -> None:
    """A capacity search of a new workload starts where the last workload's found its edge
    (planner.perf.edge_search.bracket_from): the same capacity and binding limit as a search
    from scratch, from that hint or any other, in fewer states over all."""
    from planner.perf.edge_search import EdgeHint

    scratch = hinted = 0
    cases = itertools.product(
        [H100, A100, GPT_OSS_TP1], [(3.0, 0.100, None), (2.0, None, None), (3.0, 0.060, 30.0)]
    )
    for layout, limits in cases:
        before = model.steady_state(_scenario(layout, load="rate", request_rate=1.0))
        edge = before.max_rate(*limits).edge
        assert edge is not None
        for output_len in (448, 576):
            probe = _scenario(layout, load="rate", request_rate=1.0).model_copy(
                update={"output_len": output_len, "max_model_len": 2048 + output_len}
            )
            fresh = SteadyStateModel(model.deployment(probe), model.coefficients_of(probe))
            expected = fresh.max_rate(*limits)
            scratch += fresh.evaluations
            steady = SteadyStateModel(model.deployment(probe), model.coefficients_of(probe))
            found = steady.max_rate(*limits, hint=edge)
            hinted += steady.evaluations
            assert (found.max_load, found.limited_by) == (expected.max_load, expected.limited_by)
            assert found.edge == expected.edge
            for other in (EdgeHint(0, None), EdgeHint(256, 1e-6), EdgeHint(512, 50.0)):
                again = steady.max_rate(*limits, hint=other)
                assert (again.max_load, again.limited_by) == (found.max_load, found.limited_by)
    assert hinted < 0.7 * scratch


def test_a_concurrency_search_from_a_hint_finds_the_same_number(
    model: PerformanceModel,
) -> None:
    from planner.perf.edge_search import EdgeHint

    for layout, limits in itertools.product(
        [H100, A100], [(3.0, 0.100, None), (1.0, 0.050, None), (None, 0.030, 20.0)]
    ):
        steady = model.steady_state(_scenario(layout, load="concurrency", concurrency=8))
        expected = steady.max_concurrency(*limits, highest=200)
        for hint in (expected.edge, EdgeHint(1, None), EdgeHint(100, 0.5), EdgeHint(200, None)):
            found = steady.max_concurrency(*limits, highest=200, hint=hint)
            assert (found.max_load, found.limited_by) == (expected.max_load, expected.limited_by)


def test_a_served_request_pays_the_request_path_in_the_steady_state_too(
    model: PerformanceModel,
) -> None:
    """The steady state adds the request path (step_time ``request_path``) to every TTFT of a
    vLLM, SGLang or TensorRT-LLM (trtllm-serve) server, open or closed loop, as the simulator
    does, and to no TPOT; TensorRT-LLM behind Triton's C++ front end has none."""
    c = model.coefficients_of(_scenario(H100, load="rate", request_rate=1.0))
    no_path = c.copy()
    no_path[IDX["request_path"]] = 0.0
    path_s = float(c[IDX["request_path"]]) * 10e-3
    assert 0.005 < path_s < 0.5  # fitted: tens of milliseconds
    cases = (
        ("vllm", "serve", path_s),
        ("sglang", "serve", path_s),
        ("trtllm", "serve", path_s),
        ("trtllm", "triton", 0.0),
    )
    for engine, entrypoint, paid in cases:
        for load in ({"load": "rate", "request_rate": 1.0}, {"concurrency": 8}):
            sc = _scenario(H100, **load).model_copy(
                update={"engine": engine, "entrypoint": entrypoint}
            )
            dep = model.deployment(sc)
            states = []
            for coefficients in (c, no_path):
                ss = SteadyStateModel(dep, coefficients)
                rate = load.get("request_rate")
                states.append(ss.at_rate(1.0) if rate else ss.at_concurrency(8))
            with_path, without = states
            assert with_path.ttft_mean_s - without.ttft_mean_s == pytest.approx(paid, abs=1e-9)
            assert with_path.ttft_p50_s - without.ttft_p50_s == pytest.approx(paid, abs=1e-6)
            assert with_path.ttft_p99_s - without.ttft_p99_s == pytest.approx(paid, abs=1e-6)
            assert with_path.tpot_mean_s == pytest.approx(without.tpot_mean_s, rel=1e-12)


# ----- SGLang: prefill batches before the decode step -----------------------------------------
def test_sglang_prefill_batches_hold_no_decodes_in_the_steady_state(catalog: Catalog) -> None:
    """A step that holds a prompt is SGLang's prefill batch alone and then the decode step
    (``T_p = T_d + T_alone``), the chunk budget is the prompts' whole (``R = B``), a prompt's
    first token comes out of its batch, and in a closed loop of equal answers every wave of
    prompts queues as the first: 32 prompts of 8,000 tokens (one a batch of 8,192) have
    their first tokens after 1, 2, ..., 32 batches, a mean of 16.5 batches, in every wave
    (the later waves' less what they arrived after the first of theirs)."""
    c = full_coefficients(np.array([*FITTED_COEFFICIENTS, *STEP_TAIL]))
    scenario = Scenario(
        engine="sglang", model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100-SXM",
        input_len=8000, output_len=100, load="concurrency", concurrency=32, num_requests=64,
    )  # fmt: skip
    dep = resolve_deployment(scenario, catalog)
    ss = SteadyStateModel(dep, c)
    st = ss.step(0.01)
    assert st.room == dep.max_num_batched_tokens == 8192  # the decodes do not take from it
    decodes = StepBatch()
    decodes.add_decode(st.decode, ss.work.decode_context, None)
    alone = StepBatch()
    alone.add_prefill(1, 8000, 0, None)
    t_d, t_a = c @ step_features(decodes, dep), c @ step_features(alone, dep)
    assert st.decode_s == pytest.approx(t_d)
    assert st.prefill_s == pytest.approx(t_d + t_a)
    state = ss.at_concurrency(32, run_requests=64)
    # the second wave's replacements reach the server FRONT_END_SPACING x the request path
    # apart: its j-th (from 0) waits j of those less, 15.5 on average, half the run's requests
    spacing = FRONT_END_SPACING * ss.path_s
    assert state.ttft_mean_s == pytest.approx(16.5 * t_a - 7.75 * spacing + ss.path_s, rel=1e-9)
    # vLLM mixes the chunk into the decode step, and its later waves are staggered
    vllm = SteadyStateModel(
        resolve_deployment(scenario.model_copy(update={"engine": "vllm"}), catalog), c
    )
    assert vllm.step(0.01).room < 8192
    assert vllm.at_concurrency(32, run_requests=64).ttft_mean_s < state.ttft_mean_s / 1.5


@pytest.mark.parametrize("in_flight", [4, 16])
def test_an_sglang_closed_loop_matches_the_simulated_run(
    model: PerformanceModel, in_flight: int
) -> None:
    scenario = _scenario(
        H100, load="concurrency", concurrency=in_flight, num_requests=4 * in_flight
    ).model_copy(update={"engine": "sglang"})
    simulated = model.predict(scenario)
    steady = model.predict_steady(scenario)
    assert _close(steady.output_tok_per_s, simulated.output_tok_per_s, 0.05)
    assert _close(steady.ttft_ms_mean, simulated.ttft_ms_mean, 0.10)
    assert _close(steady.ttft_ms_p99, simulated.ttft_ms_p99, 0.10)
    assert _close(steady.tpot_ms_mean, simulated.tpot_ms_mean, 0.10)


#: vLLM pipeline parallelism over two one-GPU instances: each macro-step schedules two 8,192-
#: token budgets, a micro-batch each (planner.perf.step_time's PP note)
H100_PP2 = {"gpu": "H100-SXM", "tp": 1, "pp": 2, "instance": "p5.4xlarge", "nodes": 2,
            "precision": "fp8"}  # fmt: skip


def test_a_pipelined_closed_loops_latency_never_falls_as_it_grows(
    model: PerformanceModel,
) -> None:
    """One prompt more in a vLLM PP macro-step is never a shorter step: the fullest
    micro-batch holds min(P, B) prompt tokens. Rounding the micro-batches up (P / ceil(P / B)
    a chain) made 5 prompts of 2,048 tokens faster than 4 (1.10 vs 1.74 s p99 TTFT here), and
    the concurrency search, which assumes latency grows with the load, then found an edge
    that depended on its hint."""
    from planner.perf.edge_search import EdgeHint

    steady = model.steady_state(_scenario(H100_PP2, load="concurrency", concurrency=8))
    assert steady.budget == 2 * 8192
    states = [steady.at_concurrency(float(n), 0.99, max(4 * n, 64)) for n in range(1, 49)]
    for before, after in itertools.pairwise(states):
        assert after.ttft_p99_s >= before.ttft_p99_s
        assert after.tpot_p99_s >= before.tpot_p99_s
    limits = (5.0, 0.150, None)
    runs = lambda n: max(4 * n, 64)  # noqa: E731  (the recommender's closed-loop run length)
    expected = steady.max_concurrency(*limits, highest=64, run_requests=runs)
    assert expected.limited_by == "ttft" and 1 < expected.max_load < 64
    for hint in (EdgeHint(1, None), EdgeHint(4, 0.3), EdgeHint(30, None), EdgeHint(64, 0.02)):
        found = steady.max_concurrency(*limits, highest=64, run_requests=runs, hint=hint)
        assert (found.max_load, found.limited_by) == (expected.max_load, expected.limited_by)
