"""How much load one replica carries inside the SLO, as the performance model predicts it.

- :func:`search_capacity`: bisection for the highest load (a request rate, or requests in
  flight) whose predicted p99 TTFT, p99 TPOT (and p99 E2E) meet the SLO; latency grows with
  load, so the edge is found in a handful of predictions.
- :class:`CapacityCache`: those searches memoised on everything a prediction depends on, so a
  change of price, region, pricing mode, utilisation or demand re-ranks without predicting.
- :func:`perf_predictor`: the performance model (:mod:`planner.perf`) as the recommender's
  predictor of one replica of a layout.
- :func:`max_rate_meeting_slo`: the same search for one scenario of a fitted model, bounded by
  the rate the deployment completes at full batch.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from planner.catalog import Catalog
from planner.engine import EngineConfig
from planner.errors import InvalidInputError, PlannerError
from planner.layouts import LayoutCandidate
from planner.perf.deployment import default_memory_fraction
from planner.perf.edge_search import EdgeHint
from planner.perf.scenario import Prediction, Scenario, engine_fields
from planner.plan import Load, Slo
from planner.recommend.request import (
    PredictKind,
    Predictor,
    RecommendRequest,
    grid_value,
)

if TYPE_CHECKING:
    from planner.perf.model import PerformanceModel

#: What limits a replica's load: an SLO, or the throughput of a full batch.
Limit = Literal["ttft", "tpot", "e2e", "kv", "saturation", "none"]
_LIMITS: dict[str, Limit] = {
    "ttft": "ttft",
    "tpot": "tpot",
    "e2e": "e2e",
    "saturation": "saturation",
}


# ----- the SLO search ----------------------------------------------------------------------------
@dataclass(frozen=True)
class CapacityResult:
    """The highest load one replica sustains inside the SLO, and the prediction there.

    ``limited_by``: what stops more load (the SLO that broke first above ``max_load``, or
    ``saturation`` when the highest load searched meets the SLO)."""

    max_load: float  # req/s (rate) or sequences (concurrency); 0 when even the least fails
    prediction: Prediction | None
    reason: str | None
    limited_by: Limit = "none"
    #: output tokens/s at ``max_load`` when known without a full prediction (a saturation
    #: bound from the steady state)
    throughput_tok_per_s: float | None = None
    #: where a steady-state search found its edge (:class:`~planner.perf.edge_search.EdgeHint`):
    #: a search of the same candidate for another workload or SLO starts there
    edge: EdgeHint | None = None

    @property
    def output_tok_per_s(self) -> float:
        if self.throughput_tok_per_s is not None:
            return self.throughput_tok_per_s
        assert self.prediction is not None
        return float(self.prediction.output_tok_per_s)


def slo_violations(prediction: Prediction, slo: Slo) -> list[tuple[Limit, str]]:
    """Each p99 of ``prediction`` above its SLO: (which, in words)."""
    broken: list[tuple[Limit, str]] = []
    ttft, tpot, e2e = prediction.ttft_ms_p99, prediction.tpot_ms_p99, prediction.e2e_ms_p99
    if slo.ttft_p99_ms is not None and ttft > slo.ttft_p99_ms:
        broken.append(("ttft", f"p99 TTFT {ttft:,.0f} ms > SLO {slo.ttft_p99_ms:,.0f} ms"))
    if slo.tpot_p99_ms is not None and tpot > slo.tpot_p99_ms:
        broken.append(("tpot", f"p99 TPOT {tpot:,.1f} ms > SLO {slo.tpot_p99_ms:,.1f} ms"))
    if slo.e2e_p99_ms is not None and e2e > slo.e2e_p99_ms:
        broken.append(("e2e", f"p99 E2E {e2e:,.0f} ms > SLO {slo.e2e_p99_ms:,.0f} ms"))
    kv, headroom = prediction.kv_occupancy_max, slo.kv_occupancy_max
    if headroom is not None and kv > headroom:
        broken.append(("kv", f"peak KV cache {kv:.1%} of the pool > headroom {headroom:.0%}"))
    return broken


def slo_straddles(prediction: Prediction, slo: Slo) -> list[str]:
    """Each p99 latency SLO (TTFT, TPOT) the point prediction meets while its 80% interval
    reaches above it, in words: the plan meets that SLO as predicted, but the measured p99 may
    not (:mod:`planner.perf.uncertainty` calibrates the interval). The search ranks by the
    point prediction all the same; this says which plans are close enough to their SLO for
    the model's error to matter."""
    out: list[str] = []
    checks = (
        ("TTFT", prediction.ttft_ms_p99, prediction.ttft_ms_p99_high, slo.ttft_p99_ms, ",.0f"),
        ("TPOT", prediction.tpot_ms_p99, prediction.tpot_ms_p99_high, slo.tpot_p99_ms, ",.1f"),
    )
    for name, point, high, limit, fmt in checks:
        if limit is None or not math.isfinite(high) or point > limit:
            continue
        if high > limit:
            out.append(
                f"p99 {name} {point:{fmt}} ms meets the SLO {limit:{fmt}} ms, but its 80% "
                f"interval reaches {high:{fmt}} ms"
            )
    return out


def search_capacity(
    predict_at: Callable[[float], Prediction],
    slo: Slo,
    *,
    kind: Literal["rate", "concurrency"],
    lowest: float,
    highest: float,
    steps: int = 7,
) -> CapacityResult:
    """Bisection for the highest load meeting the SLO (latency grows with load).

    ``predict_at(load)`` returns a prediction. Rates are bisected geometrically, concurrency
    in whole requests. With no SLO at all the answer is the load at which throughput stops
    growing, approximated by ``highest``.
    """
    low_prediction = predict_at(lowest)
    broken = slo_violations(low_prediction, slo)
    if broken:
        unit = "req/s" if kind == "rate" else "concurrent requests"
        reason = f"even at {lowest:g} {unit}: {'; '.join(text for _, text in broken)}"
        return CapacityResult(0.0, low_prediction, reason, broken[0][0])
    high_prediction = predict_at(highest)
    broken = slo_violations(high_prediction, slo)
    if not broken:
        return CapacityResult(highest, high_prediction, None, "saturation")
    good, good_prediction, bad, limit = lowest, low_prediction, highest, broken[0][0]
    for _ in range(steps):
        if kind == "concurrency" and bad - good <= 1:
            break
        mid = math.sqrt(good * bad) if kind == "rate" else float(int((good + bad) / 2))
        prediction = predict_at(mid)
        broken = slo_violations(prediction, slo)
        if broken:
            bad, limit = mid, broken[0][0]
        else:
            good, good_prediction = mid, prediction
    return CapacityResult(good, good_prediction, None, limit)


def guarded(compute: Callable[..., CapacityResult], *args: Any) -> CapacityResult:
    """``compute(*args)``, or why these engine settings cannot run the layout at all (a grid
    point whose batch does not fit beside the weights where the engine's own settings do)."""
    try:
        return compute(*args)
    except PlannerError as exc:
        return CapacityResult(0.0, None, str(exc))


class CapacityCache:
    """Memo of capacity searches keyed by everything a prediction depends on: the predictor
    (a refitted model is another predictor), the hardware (not the instance name: providers
    selling the same box share it), layout, engine settings, workload and SLO."""

    def __init__(self, max_entries: int = 50_000) -> None:
        self._lock = threading.Lock()
        self._data: dict[tuple[Any, ...], CapacityResult] = {}
        self.max_entries = max_entries
        #: the last edge found for a candidate, by its key less the workload and the SLO
        self._edges: dict[tuple[Any, ...], EdgeHint] = {}
        self.misses = 0
        #: misses by the first element of the key ("saturated", "slo", "verified")
        self.misses_by_kind: dict[str, int] = {}

    def get_or_compute(
        self, key: tuple[Any, ...], compute: Callable[[], CapacityResult]
    ) -> CapacityResult:
        with self._lock:
            if key in self._data:
                return self._data[key]
        result = compute()
        with self._lock:
            if len(self._data) >= self.max_entries:  # oldest first: dicts keep insertion order
                del self._data[next(iter(self._data))]
            self._data[key] = result
            self.misses += 1
            kind = str(key[0]) if key else ""
            self.misses_by_kind[kind] = self.misses_by_kind.get(kind, 0) + 1
        return result

    def held(self, key: tuple[Any, ...]) -> CapacityResult | None:
        """The result memoised under ``key``, if any (no search)."""
        with self._lock:
            return self._data.get(key)

    def keep(self, key: tuple[Any, ...], result: CapacityResult) -> None:
        """Memoise ``result`` under ``key``: one derived from another search (not a miss)."""
        with self._lock:
            if key not in self._data and len(self._data) >= self.max_entries:
                del self._data[next(iter(self._data))]
            self._data[key] = result

    def edge_hint(self, key: tuple[Any, ...]) -> EdgeHint | None:
        """Where the last search of the candidate ``key`` names found its edge (or None)."""
        with self._lock:
            return self._edges.get(key)

    def remember_edge(self, key: tuple[Any, ...], result: CapacityResult) -> None:
        """Keep where ``result``'s search found its edge, for the candidate's next search."""
        if result.edge is None:
            return
        with self._lock:
            self._edges.pop(key, None)  # re-inserted last: the oldest go first
            self._edges[key] = result.edge
            if len(self._edges) > self.max_entries:
                del self._edges[next(iter(self._edges))]

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._edges.clear()


CAPACITY_CACHE = CapacityCache()


def saturated_capacity(
    predictor: Predictor, layout: LayoutCandidate, settings: EngineConfig
) -> CapacityResult:
    """What a full batch of ``layout`` completes: from the steady state when the predictor
    has one (:class:`PerfPredictor`), else a saturated prediction."""
    if isinstance(predictor, PerfPredictor) and predictor.steady:
        return predictor.steady_saturation(layout, settings)
    full = float(seats(layout, settings))
    return CapacityResult(full, predictor(layout, settings, "saturation", full), None)


def replica_capacity(
    predictor: Predictor,
    layout: LayoutCandidate,
    settings: EngineConfig,
    request: RecommendRequest,
    kind: Literal["rate", "concurrency"],
    saturated: CapacityResult,
    hint: EdgeHint | None = None,
) -> CapacityResult:
    """The highest load of one replica inside the SLO. The performance model answers from
    its steady state (:meth:`PerfPredictor.steady_capacity`, no simulation; ``hint``: where
    the candidate's last search found its edge, to start from); any other predictor is
    bisected, one prediction a step."""
    if isinstance(predictor, PerfPredictor) and predictor.steady:
        return predictor.steady_capacity(layout, settings, request, kind, hint)
    if kind == "concurrency":
        # No replica ever holds more than the whole demand: search only up to it.
        return search_capacity(
            lambda load: predictor(layout, settings, "concurrency", load),
            request.slo,
            kind="concurrency",
            lowest=1,
            highest=float(concurrency_ceiling(request, settings, layout)),
        )
    # The rate bracket comes from the replica's saturated throughput, so a tiny model on a
    # big GPU and a 405B model on L4s are searched over rates that matter for them.
    ceiling = max(saturated.output_tok_per_s / request.output_len * 1.2, 1e-3)
    return search_capacity(
        lambda load: predictor(layout, settings, "rate", load),
        request.slo,
        kind="rate",
        lowest=ceiling / 200,
        highest=ceiling,
    )


def seats(layout: LayoutCandidate, settings: EngineConfig) -> int:
    """The sequences one replica runs at once: ``max_num_seqs`` per scheduler, and a replica
    with attention data parallelism runs one scheduler per attention-DP rank."""
    return grid_value(settings.max_num_seqs, "max_num_seqs") * max(layout.attention_dp, 1)


def concurrency_ceiling(
    request: RecommendRequest, settings: EngineConfig, layout: LayoutCandidate
) -> int:
    """The most requests in flight one replica is searched up to: its seats, at most the
    whole demand."""
    most = seats(layout, settings)
    return min(most, request.demand.concurrency or most)


#: The loads a shortlisted candidate is simulated at, as shares of its steady-state capacity,
#: until one meets the SLO. Down to half: a KV-bound layout (70B fp8 on one GH200 at 2,048 /
#: 512 tokens) meets it in simulation at 0.6 of its steady-state estimate, where the
#: simulation-only search ranks it second.
VERIFY_STEPS = (1.0, 0.94, 0.88, 0.8, 0.7, 0.6, 0.5)


def verified_capacity(
    predictor: Predictor,
    layout: LayoutCandidate,
    settings: EngineConfig,
    request: RecommendRequest,
    kind: Literal["rate", "concurrency"],
    estimate: CapacityResult,
    hint: EdgeHint | None = None,
) -> CapacityResult:
    """The steady-state capacity checked by simulation (for the shortlist): simulated at the
    estimated load, and lower (:data:`VERIFY_STEPS`) until the simulation meets the SLO too,
    then once halfway back to the last load that failed; the prediction kept is the simulated
    one. The estimate is an upper limit: a short simulation that has not reached steady state
    can look better than the steady state.

    ``hint``: the step at which the candidate's last verification (another workload or SLO)
    met the SLO (``len(VERIFY_STEPS)``: none did). When the estimate fails, the steps are
    tried from there (down towards the estimate while they pass, or on while they fail)
    instead of from the top: the same step for a simulation whose p99s grow with the load,
    in fewer simulations when the hint is several steps down or none passed. The result's
    ``edge`` is this verification's step, for the next one."""
    if estimate.prediction is None or estimate.max_load <= 0:
        return estimate
    load = estimate.max_load
    last = len(VERIFY_STEPS) - 1

    def trial_load(share: float) -> float:
        trial = load * share
        return float(max(1, math.floor(trial))) if kind == "concurrency" else trial

    runs: dict[int, tuple[float, Prediction, bool]] = {}

    def meets(step: int) -> bool:
        if step not in runs:
            trial = trial_load(VERIFY_STEPS[step])
            prediction = predictor(layout, settings, kind, trial)
            runs[step] = (trial, prediction, not slo_violations(prediction, request.slo))
        return runs[step][2]

    passed = _first_step_meeting(meets, last, hint)
    first = runs[0][1]
    if passed is not None:
        trial, prediction, _ = runs[passed]
        edge = EdgeHint(passed, None)
        if passed > 0:
            # one step back up: halfway to the share that failed
            between = trial_load((VERIFY_STEPS[passed] + VERIFY_STEPS[passed - 1]) / 2)
            if between > trial:
                closer = predictor(layout, settings, kind, between)
                if not slo_violations(closer, request.slo):
                    return CapacityResult(between, closer, None, estimate.limited_by, edge=edge)
        return CapacityResult(trial, prediction, None, estimate.limited_by, edge=edge)
    broken = slo_violations(first, request.slo)
    unit = "req/s" if kind == "rate" else "concurrent requests"
    reason = (
        f"the steady state meets the SLO up to {load:.3g} {unit}, but simulated down to "
        f"{load * VERIFY_STEPS[-1]:.3g} {unit} it does not: {'; '.join(t for _, t in broken)}"
    )
    limit = broken[0][0] if broken else "none"
    return CapacityResult(0.0, first, reason, limit, edge=EdgeHint(last + 1, None))


def _first_step_meeting(
    meets: Callable[[int], bool], last: int, hint: EdgeHint | None
) -> int | None:
    """The first of the steps ``0..last`` (ever lower loads) whose simulation meets the SLO,
    or None; step 0 (the estimate) is always simulated. From the hinted step when there is
    one (see :func:`verified_capacity`), else one step after another."""
    if meets(0):
        return 0
    start = 1 if hint is None else min(max(hint.index, 1), last)
    if meets(start):
        while start > 1 and meets(start - 1):
            start -= 1
        return start
    for step in range(start + 1, last + 1):
        if meets(step):
            return step
    return None


# ----- the performance model as a predictor -------------------------------------------------------
class PerfPredictor:
    """One replica of a layout predicted by :mod:`planner.perf` (a :data:`Predictor`).

    Called, it simulates (rate loads: ``RATE_SEARCH_REQUESTS`` Poisson arrivals). With
    ``steady`` (the default) the search asks its capacities of the steady state instead
    (:meth:`steady_capacity`, :meth:`steady_saturation`: no simulation) and simulates only
    the shortlist (:func:`verified_capacity`); ``steady=False`` is the simulation-only search
    (every bisection step a simulation), kept for comparison. ``cache_key`` names the fitted
    model and the method: a refit is another predictor.
    """

    def __init__(
        self,
        catalog: Catalog,
        request: RecommendRequest,
        perf: PerformanceModel,
        *,
        steady: bool = True,
    ):
        self.catalog = catalog
        self.request = request
        self.perf = perf
        self.steady = steady
        self.card = catalog.model(request.model)
        self.cache_key = ("perf", id(perf), "steady" if steady else "simulated")

    def __call__(
        self, layout: LayoutCandidate, settings: EngineConfig, kind: PredictKind, load: float
    ) -> Prediction:
        """A simulated prediction of one replica at ``load``."""
        return self.perf.predict(self.scenario(layout, settings, kind, load))

    def steady_capacity(
        self,
        layout: LayoutCandidate,
        settings: EngineConfig,
        request: RecommendRequest,
        kind: Literal["rate", "concurrency"],
        hint: EdgeHint | None = None,
    ) -> CapacityResult:
        """The highest load of one replica inside the SLO from the steady state
        (:meth:`planner.perf.steady_state.SteadyStateModel.max_rate`), no simulation.
        ``hint``: where a search of the same candidate for another workload or SLO found its
        edge; the search starts there and finds the same edge in fewer states."""
        slo = request.slo
        limits = [None if v is None else v / 1e3 for v in (slo.ttft_p99_ms, slo.tpot_p99_ms)]
        e2e = None if slo.e2e_p99_ms is None else slo.e2e_p99_ms / 1e3
        probe = self.scenario(layout, settings, kind, 1.0)
        model = self.perf.steady_state(probe)
        # the steady state is one scheduler's: a replica with attention data parallelism runs
        # ``dp`` of them, each taking 1/dp of the replica's load
        schedulers = model.dep.replicas
        if kind == "rate":
            found = model.max_rate(limits[0], limits[1], e2e, hint=hint)
        else:
            highest = math.ceil(concurrency_ceiling(request, settings, layout) / schedulers)
            found = model.max_concurrency(
                limits[0],
                limits[1],
                e2e,
                highest=highest,
                run_requests=lambda n: math.ceil(
                    _requests_to_simulate("concurrency", n * schedulers) / schedulers
                ),
                hint=hint,
            )
        found = replace(found, max_load=found.max_load * schedulers)
        at = self.scenario(layout, settings, kind, max(found.max_load, 1e-9))
        prediction = self.perf.steady_prediction(at, found.state)
        limit = _LIMITS.get(found.limited_by, "none")
        if found.max_load > 0 and slo_violations(prediction, slo):
            # inside the latency SLO but past the KV headroom: the highest steady load within
            def steady_at(load: float) -> Prediction:
                each = load / schedulers  # one scheduler's share
                state = model.at_rate(each) if kind == "rate" else model.at_concurrency(each)
                return self.perf.steady_prediction(
                    self.scenario(layout, settings, kind, load), state
                )

            lowest = found.max_load / 200 if kind == "rate" else 1.0
            within = search_capacity(
                steady_at, slo, kind=kind, lowest=lowest, highest=found.max_load
            )
            return replace(within, edge=found.edge)
        if found.max_load <= 0:
            broken = slo_violations(prediction, slo)
            unit = "req/s" if kind == "rate" else "concurrent requests"
            texts = "; ".join(t for _, t in broken) or f"limited by {found.limited_by}"
            low = found.state.rate if kind == "rate" else 1.0
            reason = f"even at {low:.3g} {unit}: {texts}"
            return CapacityResult(0.0, prediction, reason, limit, edge=found.edge)
        return CapacityResult(found.max_load, prediction, None, limit, edge=found.edge)

    def steady_saturation(self, layout: LayoutCandidate, settings: EngineConfig) -> CapacityResult:
        """A full batch of one replica from the steady state: the cost bound's throughput
        (no latency figures: the bound needs none)."""
        probe = self.scenario(layout, settings, "rate", 1.0)
        model = self.perf.steady_state(probe)
        throughput = model.saturation_rate() * model.work.mean_output * model.dep.replicas
        return CapacityResult(float(seats(layout, settings)), None, None, "saturation", throughput)

    def scenario(
        self, layout: LayoutCandidate, settings: EngineConfig, kind: PredictKind, load: float
    ) -> Scenario:
        """The performance model's scenario of one replica of ``layout`` at ``load``."""
        catalog, request, card = self.catalog, self.request, self.card
        inst = catalog.instance(layout.instance)
        gpus = layout.gpus_per_replica
        engine = settings.model_copy(
            update={
                "kv_cache_dtype": layout.kv_cache_dtype,
                "data_parallel_size": layout.attention_dp,
                "enable_expert_parallel": layout.expert_parallel,
                "spec_method": layout.engine.spec_method,
                "num_spec_tokens": layout.engine.num_spec_tokens,
                **raised_memory(layout),
            }
        )
        fields = engine_fields(engine)
        if not engine.memory_stated:
            # predicted at the share the plan's command starts the engine with: its default
            # (SGLang's depends on the GPU and the layout), never raised behind the command's
            # back (a raised share is the layout's: planner.recommend.startup)
            gpu = catalog.gpu(inst.gpu_id)
            fields["gpu_memory_utilization"] = default_memory_fraction(
                engine, gpu, card.architecture, tp=layout.tp, pp=layout.pp
            )
        # saturation: a full closed loop
        load_kind: Literal["rate", "concurrency"] = "rate" if kind == "rate" else "concurrency"
        return Scenario(
            **fields,
            model=card.hf_id,
            precision=layout.precision,
            gpu=inst.gpu_id,
            num_gpus=gpus,
            tp=layout.tp,
            pp=layout.pp,
            **request.workload.scenario_fields(),
            load=load_kind,
            request_rate=load if kind == "rate" else None,
            concurrency=None if kind == "rate" else load,
            num_requests=_requests_to_simulate(kind, load),
            instance=layout.instance,
            nodes=math.ceil(gpus / inst.gpus),
        )


def raised_memory(layout: LayoutCandidate) -> dict[str, float]:
    """The engine update that states a layout's raised memory share (none at the default)."""
    raised = layout.raised_memory_fraction
    return {} if raised is None else {"gpu_memory_utilization": raised}


def perf_predictor(
    catalog: Catalog,
    request: RecommendRequest,
    model: PerformanceModel | None = None,
    *,
    steady: bool = True,
) -> PerfPredictor:
    """The performance model fitted on ``catalog.measured`` (or ``model``) as a predictor."""
    from planner.perf.model import get_performance_model

    return PerfPredictor(catalog, request, model or get_performance_model(catalog), steady=steady)


RATE_SEARCH_REQUESTS = 160


def plan_load(kind: Literal["rate", "concurrency"], load: float) -> Load:
    """The load a capacity search predicted one replica at, as a plan states it (the same
    request count, so the plan's scenario is the prediction's)."""
    if kind == "rate":
        return Load.rate(load, _requests_to_simulate("rate", load))
    return Load.closed_loop(load, _requests_to_simulate("concurrency", load))


def _requests_to_simulate(kind: PredictKind, load: float) -> int:
    if kind == "rate":
        return RATE_SEARCH_REQUESTS
    if kind == "saturation":  # two waves of a full batch: past ramp-up, cheap to simulate
        return max(int(load) * 2, 64)
    return max(int(load) * 4, 64)


# ----- the highest rate of one scenario -----------------------------------------------------------
@dataclass(frozen=True)
class RateSearchResult:
    """Highest Poisson rate meeting the SLO, the prediction there, and what binds."""

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


def max_rate_meeting_slo(
    model: PerformanceModel, scenario: Scenario, slo: Slo, *, num_requests: int = 300
) -> RateSearchResult:
    """The highest Poisson rate of ``scenario`` whose predicted p99s meet ``slo``: the
    :func:`search_capacity` bisection between 1% and 98% of the saturation rate, each step a
    ``num_requests``-request simulation with the same seed (the same arrival pattern scaled,
    which keeps the p99s monotone in the rate)."""
    if num_requests < 1:
        raise InvalidInputError("num_requests", num_requests, "an integer >= 1")
    saturation = saturation_rate(model, scenario)
    evaluations = 1

    def at(rate: float) -> Prediction:
        nonlocal evaluations
        evaluations += 1
        update = {"load": "rate", "request_rate": rate, "num_requests": num_requests}
        return model.predict(scenario.model_copy(update={**update, "concurrency": None}))

    found = search_capacity(
        at, slo, kind="rate", lowest=saturation * 0.01, highest=saturation * 0.98
    )
    prediction = found.prediction if found.max_load > 0 else None
    return RateSearchResult(found.max_load, saturation, prediction, found.limited_by, evaluations)
