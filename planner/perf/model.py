"""The performance model: fit on measured results, predict any scenario, say how sure it is.

    model = get_performance_model(catalog)           # fitted on catalog.measured, cached
    prediction = model.predict(Scenario(...))        # throughput, latencies, 80% intervals
    model.coefficients["vllm/L40S"]["allreduce_pcie_host"]

A prediction resolves the scenario (:mod:`planner.perf.deployment`), simulates it with the
coefficients of its engine family, GPU and release (:mod:`planner.perf.simulator`), reads the
benchmark metrics off the run (:mod:`planner.perf.metrics`) and attaches the interval and the
distance to the nearest measured row (:mod:`planner.perf.uncertainty`). A GPU or engine family
without measurements gets the shared coefficients (spec-sheet terms x fitted efficiencies) and a
wider interval; it is flagged ``far_from_data``.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from planner.catalog import Catalog, MeasuredResult
from planner.errors import InvalidInputError, PlannerError
from planner.owned import OWNED_PROVIDER
from planner.perf import fit_cache, sample_cache
from planner.perf.calibration import (
    CoefficientKey,
    FitSample,
    FittedCoefficients,
    build_sample,
    calibrate,
    coefficient_key,
    full_from_theta,
    gpu_generation,
    measurement_problem,
    prior_theta,
    resimulate,
    targets_for,
)
from planner.perf.deployment import Deployment, resolve_deployment
from planner.perf.fit_cache import FitState
from planner.perf.metrics import RunMetrics, Timeline, run_metrics, timeline
from planner.perf.scenario import Prediction, Scenario
from planner.perf.simulator import SimTrace, simulate
from planner.perf.speculative import LearntAcceptance, learn_acceptance
from planner.perf.steady_state import SteadyState, SteadyStateModel
from planner.perf.step_time import FEATURES, StepBatch, roofline_coefficients, step_time_s
from planner.perf.uncertainty import (
    MeasuredPoint,
    PointIndex,
    SeenData,
    confidence_of,
    interval_factors,
    latency_term_vectors,
    layouts_of,
    near_saturation,
    novelty,
    point_of,
    release_unmeasured,
    saturation_note,
    term_shares,
    version_note,
    widen,
)


def _scenario_key(scenario: Scenario) -> str:
    """The scenario as a cache key: its JSON, with each length distribution by its digest (a
    trace's thousands of lengths would be dumped again for every candidate of a search)."""
    if scenario.input_dist is None and scenario.output_dist is None:
        return scenario.model_dump_json()
    head = scenario.model_dump_json(exclude={"input_dist", "output_dist"})
    dists = [d.key() if d is not None else "-" for d in (scenario.input_dist, scenario.output_dist)]
    return f"{head}|{dists[0]}|{dists[1]}"


#: The load of a scenario (what a deployment does not depend on), at a neutral value.
_NO_LOAD: dict[str, Any] = {
    "load": "concurrency",
    "concurrency": 1.0,
    "request_rate": None,
    "num_requests": None,
    "seed": 0,
    "burstiness_cv": 1.0,
}

#: measured rows already simulated, by (catalog fingerprint, row): refits reuse them
_SAMPLE_CACHE: OrderedDict[tuple[str, str], FitSample] = OrderedDict()
_SAMPLE_CACHE_SIZE = 5000
_LOCK = threading.Lock()


def catalog_fingerprint(catalog: Catalog) -> str:
    """Hash of what a simulation reads from the catalog (GPUs, instances, model configs)."""
    digest = hashlib.sha256()
    for gpu in sorted(catalog.gpus.values(), key=lambda g: g.gpu_id):
        digest.update(gpu.model_dump_json().encode())
    for inst in sorted(catalog.instances.values(), key=lambda i: i.instance):
        # an owned server's provenance (its owned_costs.csv row's sources and date, "your own"
        # once a user edits a cost) is not what a simulation reads: editing costs keeps the fit
        provenance = {"source", "as_of", "notes"} if inst.provider == OWNED_PROVIDER else None
        digest.update(inst.model_dump_json(exclude=provenance).encode())
    for key in sorted(catalog.models):
        digest.update(key.encode())
        digest.update(json.dumps(catalog.models[key].config, sort_keys=True).encode())
    return digest.hexdigest()


def _result_key(result: MeasuredResult) -> str:
    return result.model_dump_json()


@dataclass(frozen=True)
class Excluded:
    """A measured row left out of the fit, and why; ``sample`` when it could still be simulated
    as stated (validation scores it as a held-out row all the same)."""

    result: MeasuredResult
    reason: str
    sample: FitSample | None = None


def _model_params(dep: Deployment) -> tuple[float, bool]:
    arch = dep.card.architecture
    return arch.active_params / 1e9, arch.is_moe


class PerformanceModel:
    """Step-time coefficients fitted on measured results, and predictions with error bars."""

    def __init__(self, catalog: Catalog, *, cache_dir: Path | None = None) -> None:
        self.catalog = catalog
        #: where simulated measured rows are kept between fits (:mod:`planner.perf.sample_cache`)
        self.cache_dir = cache_dir
        self.fitted: FittedCoefficients | None = None
        self._samples: list[FitSample] = []
        self._excluded: list[Excluded] = []
        self._points: list[MeasuredPoint] = []
        self._point_index = PointIndex([])
        self._steady: OrderedDict[str, SteadyStateModel] = OrderedDict()
        self._groups: set[tuple[str, str]] = set()
        self._seen = SeenData()
        self._clocks: dict[str, np.ndarray] = {}
        self._combos: list[tuple[str, str, str | None]] = []
        #: measured results of a model restored from the fit cache, until its samples are asked
        self._unsimulated: Sequence[MeasuredResult] | None = None
        #: whether the fit was read from the disk cache rather than computed in this process
        self.from_cache = False
        self._fit_lock = threading.Lock()
        self._dep_cache: OrderedDict[str, Deployment] = OrderedDict()
        self._dep_lock = threading.Lock()
        #: speculative decoding's acceptance measured per model, method and engine (the rows
        #: fitted or restored), used by predictions whose scenario states none
        self.learnt_acceptance = LearntAcceptance({})

    # ----- fitting ---------------------------------------------------------------------------
    def fit(
        self, results: Sequence[MeasuredResult], catalog: Catalog | None = None
    ) -> PerformanceModel:
        """Fit on ``results`` (public rows and a user's runs); rows that cannot be used are
        kept in :attr:`excluded` with the reason. Returns self."""
        if catalog is not None:
            self.catalog = catalog
        samples, excluded = simulate_measured(results, self.catalog, self.cache_dir)
        self._excluded = excluded
        self._learn(results)
        clocks: dict[str, np.ndarray] = {}
        if not samples:
            self.fitted, self._samples = None, []
        else:
            fit_key = fit_cache.cache_key(results_fingerprint(self.catalog, results))

            def again(rows: Sequence[FitSample], c: Sequence[np.ndarray | None]) -> list[FitSample]:
                return resimulate_measured(rows, c, fit_key, self.cache_dir, write=False)

            self.fitted, self._samples, vectors = calibrate(
                samples, self.catalog, resimulator=again
            )
            clocks = {
                sample_cache.row_key(_result_key(s.result)): c
                for s, c in zip(self._samples, vectors, strict=True)
                if c is not None
            }
        self._unsimulated = None
        points = [
            point_of(s.scenario, *_model_params(s.dep), s.dep.link_class) for s in self._samples
        ]
        self._restore(
            FitState(
                self.fitted,
                points,
                fit_cache.combos_of(self._samples),
                SeenData.of(self._samples),
                clocks,
            )
        )
        return self

    def _learn(self, results: Sequence[MeasuredResult]) -> None:
        learnt = learn_acceptance(results)
        if learnt != self.learnt_acceptance:
            with self._dep_lock:  # deployments resolved with the old acceptance
                self._dep_cache.clear()
                self._steady.clear()
            self.learnt_acceptance = learnt

    def _restore(self, state: FitState) -> None:
        self.fitted = state.fitted
        self._points = list(state.points)
        self._point_index = PointIndex(self._points)
        self._combos = list(state.combos)
        self._groups = {(family, gpu.lower()) for family, gpu, _ in state.combos}
        self._seen = state.seen
        self._clocks = dict(state.clocks)

    def fit_state(self) -> FitState:
        """What predictions need of the fit (see :mod:`planner.perf.fit_cache`)."""
        return FitState(
            self.fitted, list(self._points), list(self._combos), self._seen, dict(self._clocks)
        )

    @classmethod
    def from_fit_state(
        cls,
        catalog: Catalog,
        state: FitState,
        results: Sequence[MeasuredResult],
        *,
        cache_dir: Path | None = None,
    ) -> PerformanceModel:
        """A model that predicts from a cached fit at once; its :attr:`samples` and
        :attr:`excluded` (the simulated rows) are rebuilt from ``results`` when first asked."""
        model = cls(catalog, cache_dir=cache_dir)
        model._restore(state)
        model._learn(results)
        model._unsimulated = list(results)
        model.from_cache = True
        return model

    def _simulated(self) -> None:
        with self._fit_lock:
            results = self._unsimulated
            if results is not None and not self._rebuild(results):
                cached = self.fit_state()
                self.fit(results)
                self._restore(cached)  # the same fit; keep the one predictions were made with

    def _rebuild(self, results: Sequence[MeasuredResult]) -> bool:
        """Rebuild the fitted rows of a fit read from disk without fitting: simulate
        ``results`` (from the sample cache where it has them) and the clock-driven ones again
        with the vectors the fit used (:attr:`FitState.clocks`). False, and nothing changed,
        when the fit holds no vector for one of them or the rows are not the fitted ones."""
        samples, excluded = simulate_measured(results, self.catalog, self.cache_dir)
        if len(samples) != len(self._points) or self.fitted is None:
            return False
        clocks: list[np.ndarray | None] = []
        for sample in samples:
            if sample.time_driven:
                c = self._clocks.get(sample_cache.row_key(_result_key(sample.result)))
                if c is None:
                    return False
                clocks.append(c)
            else:
                clocks.append(None)
        fit_key = fit_cache.cache_key(results_fingerprint(self.catalog, results))
        self._samples = resimulate_measured(samples, clocks, fit_key, self.cache_dir)
        self._excluded = excluded
        self._unsimulated = None
        return True

    def roofline_predictions(self) -> list[dict[str, float]]:
        """What the spec sheet alone predicts for each of :attr:`samples` (``planner
        validate``'s baseline, :func:`planner.perf.validation.roofline_predictions`); the
        clock-driven rows simulated with the roofline coefficients come from the disk where a
        process simulated them before."""
        from planner.perf.validation import roofline_predictions

        samples = self.samples
        c = roofline_coefficients()
        clocks = [c if s.time_driven else None for s in samples]
        key = sample_cache.cache_key(catalog_fingerprint(self.catalog))
        again = resimulate_measured(samples, clocks, key, self.cache_dir, kind="roofline")
        return roofline_predictions(again, simulated=True)

    @property
    def samples(self) -> list[FitSample]:
        """The fitted measured rows, simulated (``planner validate``, refits)."""
        self._simulated()
        return self._samples

    @property
    def excluded(self) -> list[Excluded]:
        """Measured rows left out of the fit, with the reason."""
        self._simulated()
        return self._excluded

    @property
    def coefficients(self) -> dict[str, dict[str, float]]:
        """Fitted coefficients (full term vector) by ``"family/gpu"``, ``"family:release/gpu"``
        for every measured combination, ``"family/*"`` (a GPU without data) and ``"*"``."""
        out: dict[str, dict[str, float]] = {}

        def named(c: np.ndarray) -> dict[str, float]:
            return {name: float(v) for name, v in zip(FEATURES, c, strict=True)}

        out["*"] = named(full_from_theta(self.fitted.theta0 if self.fitted else prior_theta()))
        combos = self._combos
        for family in sorted({family for family, _, _ in combos}):
            out[f"{family}/*"] = named(self.coefficients_for(family, "*"))
        for family, gpu, version in combos:
            out[f"{family}/{gpu}"] = named(self.coefficients_for(family, gpu))
            if version is not None:
                out[f"{version}/{gpu}"] = named(self.coefficients_for(family, gpu, version))
        return out

    def coefficients_for(
        self,
        family: str,
        gpu: str,
        version: str | None = None,
        *,
        entrypoint: str | None = None,
        kind: str | None = None,
    ) -> np.ndarray:
        """Full coefficient vector over :data:`planner.perf.step_time.FEATURES` (see
        :class:`planner.perf.calibration.CoefficientKey` for the arguments)."""
        if self.fitted is None:
            return full_from_theta(prior_theta())
        known = self.catalog.gpus.get(gpu)
        generation = gpu_generation(known) if known is not None else None
        return self.fitted.full_for(
            CoefficientKey(family, gpu, version, entrypoint, kind, generation)
        )

    def coefficients_of(self, scenario: Scenario, dep: Deployment | None = None) -> np.ndarray:
        """The coefficient vector a scenario is predicted with (``dep``: its deployment, when
        the caller has it)."""
        if dep is None:
            dep = self.deployment(scenario)
        if self.fitted is None:
            return full_from_theta(prior_theta())
        return self.fitted.full_for(coefficient_key(scenario, dep))

    # ----- prediction ------------------------------------------------------------------------
    def deployment(self, scenario: Scenario) -> Deployment:
        """Resolved constants of a scenario, cached on the scenario less its load.

        The deployment is resolved from that load-free scenario itself, so what is cached
        cannot depend on the load it was first asked with: a prediction never depends on
        what was predicted before it.
        """
        return self._deployment(scenario)[0]

    def _deployment(self, scenario: Scenario) -> tuple[Deployment, str]:
        """:meth:`deployment` and the key of the load-free scenario it is cached on."""
        unloaded = scenario.model_copy(update=_NO_LOAD)
        key = _scenario_key(unloaded)
        with self._dep_lock:
            dep = self._dep_cache.get(key)
        if dep is None:
            dep = resolve_deployment(
                unloaded, self.catalog, learnt_acceptance=self.learnt_acceptance
            )
            with self._dep_lock:
                self._dep_cache[key] = dep
                if len(self._dep_cache) > 2048:
                    self._dep_cache.popitem(last=False)
        if dep.scenario != scenario:
            dep = _with_scenario(dep, scenario)
        return dep, key

    def simulate(
        self, scenario: Scenario, *, timeline: bool = True
    ) -> tuple[Deployment, SimTrace, np.ndarray]:
        dep = self.deployment(scenario)
        c = self.coefficients_of(scenario, dep)
        return dep, simulate(dep, c, timeline=timeline), c

    def predict(self, scenario: Scenario) -> Prediction:
        """Simulate the scenario with the fitted coefficients; see :class:`Prediction`."""
        dep, trace, c = self.simulate(scenario, timeline=False)
        return self._prediction(scenario, dep, trace, c)

    def predict_many(self, scenarios: Iterable[Scenario]) -> list[Prediction | PlannerError]:
        """One result per scenario, in order; a scenario that cannot be predicted gets its
        typed error instead of stopping the others."""
        out: list[Prediction | PlannerError] = []
        for scenario in scenarios:
            try:
                out.append(self.predict(scenario))
            except PlannerError as exc:
                out.append(exc)
            except RuntimeError as exc:
                out.append(InvalidInputError("scenario", scenario.describe(), str(exc)))
        return out

    def timeline(self, scenario: Scenario) -> Timeline:
        """KV occupancy, running and waiting requests over the simulated run."""
        _, trace, c = self.simulate(scenario)
        return timeline(trace, c)

    def step_time_s(self, scenario: Scenario, batch: StepBatch) -> float:
        """Seconds one engine step of ``batch`` takes on the scenario's deployment."""
        dep = self.deployment(scenario)
        return step_time_s(batch, dep, self.coefficients_of(scenario, dep))

    def request_timing(
        self, scenario: Scenario, running: int, input_len: int, output_len: int
    ) -> tuple[float, float]:
        """(TTFT s, seconds per output token) of one request admitted next to ``running``
        decoding ones: its prompt in budget-sized chunks beside them, then decode steps with
        all of them at the request's mid-answer context. For a simulated server's timing."""
        dep = self.deployment(scenario)
        c = self.coefficients_of(scenario, dep)
        context = input_len + output_len // 2
        ttft = 0.0
        done = 0
        while done < input_len:
            chunk = min(input_len - done, max(dep.max_num_batched_tokens - running, 1))
            batch = StepBatch.of([context] * running, [(chunk, done)], dep.sliding_window)
            ttft += step_time_s(batch, dep, c)
            done += chunk
        decode = StepBatch.of([context] * (running + 1), (), dep.sliding_window)
        return ttft, step_time_s(decode, dep, c)

    # ----- the steady state (no simulation) ------------------------------------------------------
    def steady_state(self, scenario: Scenario) -> SteadyStateModel:
        """The steady-state model of the scenario's deployment with its fitted coefficients
        (:mod:`planner.perf.steady_state`), cached on everything but the load."""
        dep, key = self._deployment(scenario)
        with self._dep_lock:
            held = self._steady.get(key)
        if held is None:
            held = SteadyStateModel(dep, self.coefficients_of(scenario, dep))
            with self._dep_lock:
                self._steady[key] = held
                if len(self._steady) > 2048:
                    self._steady.popitem(last=False)
        return held

    def predict_steady(self, scenario: Scenario) -> Prediction:
        """:meth:`predict` from the steady state instead of a simulation: a few step
        evaluations, not a discrete-event run (for searches over many candidates; the
        simulator stays the reference for what is shown in detail). Rate and concurrency
        loads; a rate beyond the deployment's capacity has infinite TTFT."""
        if scenario.load not in ("rate", "concurrency"):
            raise InvalidInputError(
                "load", scenario.load, "rate or concurrency for a steady-state prediction"
            )
        model = self.steady_state(scenario)
        replicas = self.deployment(scenario).loaded_replicas
        if scenario.load == "rate":
            state = model.at_rate((scenario.request_rate or 0.0) / replicas)
        else:
            in_flight = max((scenario.concurrency or 1.0) / replicas, 1.0)
            run = max(1, math.ceil(scenario.effective_num_requests() / replicas))
            state = model.at_concurrency(in_flight, run_requests=run)
        return self.steady_prediction(scenario, state)

    def steady_prediction(self, scenario: Scenario, state: SteadyState) -> Prediction:
        """A :class:`Prediction` of a steady state of one replica (whole deployment rates)."""
        dep = self.deployment(scenario)
        c = self.coefficients_of(scenario, dep)
        key = coefficient_key(scenario, dep)
        family, gpu = key.family, key.gpu
        shares = term_shares(state.step_terms, c)
        reasons = self.uncertainty_reasons(scenario, dep)
        new_release = release_unmeasured(key, self._seen)
        classes = dep.card.architecture.model_classes
        load = scenario.load  # the load shape's interval factor (uncertainty.load_group)
        utilisation = self.utilisation(scenario, dep)

        def factors(metric: str, widen_as: str | None = None) -> tuple[float, float]:
            own = interval_factors(self.fitted, key, metric, shares)
            own = near_saturation(own, utilisation, metric)
            return widen(own, len(reasons), widen_as or metric, new_release, family, classes, load)

        thr_lo, thr_hi = factors("output_tok_per_s")
        ttft_lo, ttft_hi = factors("ttft")
        tpot_lo, tpot_hi = factors("itl")
        # a p99: its latency's own factors, its own multipliers (planner.perf.uncertainty)
        ttft99_lo, ttft99_hi = factors("ttft", "ttft_p99")
        tpot99_lo, tpot99_hi = factors("itl", "tpot_p99")
        params_b, moe = _model_params(dep)
        near, distance = self._point_index.nearest(
            point_of(scenario, params_b, moe, dep.link_class)
        )
        has_gpu = (family, gpu.lower()) in self._groups
        confidence = confidence_of(distance, has_gpu, len(reasons))
        replicas = dep.loaded_replicas
        out = state.output_tok_per_s * replicas
        mean_in = scenario.mean_input_len
        total = out + state.rate * replicas * mean_in
        ms = 1e3
        itl_p99 = state.prefill_step_s if state.prefill_step_share > 0.01 else state.decode_step_s
        e2e_mean = state.ttft_mean_s + (scenario.mean_output_len - 1) * state.tpot_mean_s
        release = version_note(key, self._seen)
        saturated = saturation_note(utilisation)
        notes = (
            *dep.notes,
            *([release] if release is not None else []),
            *([saturated] if saturated is not None else []),
            "steady-state estimate (no simulation)",
        )
        return Prediction(
            output_tok_per_s=out,
            output_tok_per_s_low=out * thr_lo,
            output_tok_per_s_high=out * thr_hi,
            total_tok_per_s=total,
            total_tok_per_s_low=total * thr_lo,
            total_tok_per_s_high=total * thr_hi,
            request_per_s=state.rate * replicas,
            ttft_ms_mean=state.ttft_mean_s * ms,
            ttft_ms_mean_low=state.ttft_mean_s * ms * ttft_lo,
            ttft_ms_mean_high=state.ttft_mean_s * ms * ttft_hi,
            ttft_ms_p50=state.ttft_p50_s * ms,
            ttft_ms_p50_low=state.ttft_p50_s * ms * ttft_lo,
            ttft_ms_p50_high=state.ttft_p50_s * ms * ttft_hi,
            ttft_ms_p90=(state.ttft_p50_s + 0.7 * (state.ttft_p99_s - state.ttft_p50_s)) * ms,
            ttft_ms_p99=state.ttft_p99_s * ms,
            ttft_ms_p99_low=state.ttft_p99_s * ms * ttft99_lo,
            ttft_ms_p99_high=state.ttft_p99_s * ms * ttft99_hi,
            tpot_ms_mean=state.tpot_mean_s * ms,
            tpot_ms_mean_low=state.tpot_mean_s * ms * tpot_lo,
            tpot_ms_mean_high=state.tpot_mean_s * ms * tpot_hi,
            tpot_ms_p50=state.tpot_p50_s * ms,
            tpot_ms_p50_low=state.tpot_p50_s * ms * tpot_lo,
            tpot_ms_p50_high=state.tpot_p50_s * ms * tpot_hi,
            tpot_ms_p90=(state.tpot_p50_s + 0.7 * (state.tpot_p99_s - state.tpot_p50_s)) * ms,
            tpot_ms_p99=state.tpot_p99_s * ms,
            tpot_ms_p99_low=state.tpot_p99_s * ms * tpot99_lo,
            tpot_ms_p99_high=state.tpot_p99_s * ms * tpot99_hi,
            itl_ms_mean=state.step_s * ms,
            itl_ms_p50=state.decode_step_s * ms,
            itl_ms_p99=itl_p99 * ms,
            e2e_ms_mean=e2e_mean * ms,
            e2e_ms_p50=(state.ttft_p50_s + (scenario.mean_output_len - 1) * state.tpot_p50_s) * ms,
            e2e_ms_p99=state.e2e_p99_s * ms,
            duration_s=0.0,
            mean_running_batch=state.running * replicas,
            kv_occupancy_mean=state.kv_occupancy,
            kv_occupancy_max=state.kv_occupancy,
            kv_capacity_tokens=dep.kv_capacity_tokens,
            preemptions=0,
            far_from_data=confidence == "extrapolated",
            confidence=confidence,
            nearest_measured="no measured results in the fit" if near is None else near.label,
            distance=round(distance, 3) if math.isfinite(distance) else 99.0,
            uncertain_because=tuple(reasons),
            release_note=release,
            spec_accept_len=_accept_len(dep),
            utilisation=utilisation,
            notes=notes,
        )

    def roofline(self, scenario: Scenario) -> RunMetrics:
        """The plain roofline baseline of the same scenario (no overheads, spec rates)."""
        dep = self.deployment(scenario)
        c = roofline_coefficients()
        return run_metrics(simulate(dep, c, timeline=False), c, dep.loaded_replicas)

    def uncertainty_reasons(self, scenario: Scenario, dep: Deployment | None = None) -> list[str]:
        """Why a prediction of ``scenario`` is uncertain: what about it the measured data do
        not cover (:func:`planner.perf.uncertainty.novelty`); empty when all is covered."""
        if dep is None:
            dep = self.deployment(scenario)
        return novelty(
            coefficient_key(scenario, dep),
            dep.card.architecture.model_classes,
            layouts_of(dep.expert_parallel, dep.data_parallel_size),
            self._seen,
        )

    def utilisation(self, scenario: Scenario, dep: Deployment | None = None) -> float | None:
        """The offered rate over the predicted saturation rate (:meth:`steady_state`), for a
        rate load; None for the others (a closed loop or a burst offers no rate). Near 1 the
        latencies are ill-conditioned and their intervals widen
        (:func:`planner.perf.uncertainty.saturation_spread`)."""
        if scenario.load != "rate" or not scenario.request_rate:
            return None
        if dep is None:
            dep = self.deployment(scenario)
        return self.steady_state(scenario).utilisation(scenario.request_rate / dep.loaded_replicas)

    def _prediction(
        self, scenario: Scenario, dep: Deployment, trace: SimTrace, c: np.ndarray
    ) -> Prediction:
        m = run_metrics(trace, c, dep.loaded_replicas)
        key = coefficient_key(scenario, dep)
        family, gpu = key.family, key.gpu
        fitted = self.fitted
        reasons = self.uncertainty_reasons(scenario, dep)
        new_release = release_unmeasured(key, self._seen)
        classes = dep.card.architecture.model_classes
        load = scenario.load  # the load shape's interval factor (uncertainty.load_group)
        utilisation = self.utilisation(scenario, dep)

        def factors(
            metric: str, vector: np.ndarray, widen_as: str | None = None
        ) -> tuple[float, float]:
            own = interval_factors(fitted, key, metric, term_shares(vector, c))
            own = near_saturation(own, utilisation, metric)
            return widen(own, len(reasons), widen_as or metric, new_release, family, classes, load)

        mean_ttft_vec, mean_decode_vec = latency_term_vectors(trace)
        thr_lo, thr_hi = factors("output_tok_per_s", trace.end)
        ttft_lo, ttft_hi = factors("ttft", mean_ttft_vec)
        tpot_lo, tpot_hi = factors("itl", mean_decode_vec)
        # a p99: its latency's own factors, its own multipliers (planner.perf.uncertainty)
        ttft99_lo, ttft99_hi = factors("ttft", mean_ttft_vec, "ttft_p99")
        tpot99_lo, tpot99_hi = factors("itl", mean_decode_vec, "tpot_p99")
        params_b, moe = _model_params(dep)
        point = point_of(scenario, params_b, moe, dep.link_class)
        near, distance = self._point_index.nearest(point)
        has_gpu = (family, gpu.lower()) in self._groups
        confidence = confidence_of(distance, has_gpu, len(reasons))
        near_text = "no measured results in the fit" if near is None else near.label
        notes = list(dep.notes)
        release = version_note(key, self._seen)
        if release is not None:
            notes.append(release)
        if not has_gpu:
            notes.append(f"no {family} measurements on {gpu}: shared coefficients from specs")
        saturated = saturation_note(utilisation)
        if saturated is not None:
            notes.append(saturated)
        ttft = {s: m.ttft_ms(s) for s in ("mean", "p50", "p90", "p99")}
        tpot = {s: m.tpot_ms(s) for s in ("mean", "p50", "p90", "p99")}
        return Prediction(
            output_tok_per_s=m.output_tok_per_s,
            output_tok_per_s_low=m.output_tok_per_s * thr_lo,
            output_tok_per_s_high=m.output_tok_per_s * thr_hi,
            total_tok_per_s=m.total_tok_per_s,
            total_tok_per_s_low=m.total_tok_per_s * thr_lo,
            total_tok_per_s_high=m.total_tok_per_s * thr_hi,
            request_per_s=m.request_per_s,
            ttft_ms_mean=ttft["mean"],
            ttft_ms_mean_low=ttft["mean"] * ttft_lo,
            ttft_ms_mean_high=ttft["mean"] * ttft_hi,
            ttft_ms_p50=ttft["p50"],
            ttft_ms_p50_low=ttft["p50"] * ttft_lo,
            ttft_ms_p50_high=ttft["p50"] * ttft_hi,
            ttft_ms_p90=ttft["p90"],
            ttft_ms_p99=ttft["p99"],
            ttft_ms_p99_low=ttft["p99"] * ttft99_lo,
            ttft_ms_p99_high=ttft["p99"] * ttft99_hi,
            tpot_ms_mean=tpot["mean"],
            tpot_ms_mean_low=tpot["mean"] * tpot_lo,
            tpot_ms_mean_high=tpot["mean"] * tpot_hi,
            tpot_ms_p50=tpot["p50"],
            tpot_ms_p50_low=tpot["p50"] * tpot_lo,
            tpot_ms_p50_high=tpot["p50"] * tpot_hi,
            tpot_ms_p90=tpot["p90"],
            tpot_ms_p99=tpot["p99"],
            tpot_ms_p99_low=tpot["p99"] * tpot99_lo,
            tpot_ms_p99_high=tpot["p99"] * tpot99_hi,
            itl_ms_mean=m.itl_ms("mean"),
            itl_ms_p50=m.itl_ms("p50"),
            itl_ms_p99=m.itl_ms("p99"),
            e2e_ms_mean=m.e2e_ms("mean"),
            e2e_ms_p50=m.e2e_ms("p50"),
            e2e_ms_p99=m.e2e_ms("p99"),
            duration_s=m.duration_s,
            mean_running_batch=m.mean_running_batch,
            kv_occupancy_mean=m.kv_occupancy_mean,
            kv_occupancy_max=m.kv_occupancy_max,
            kv_capacity_tokens=dep.kv_capacity_tokens,
            preemptions=m.preemptions,
            far_from_data=confidence == "extrapolated",
            confidence=confidence,
            nearest_measured=near_text,
            distance=round(distance, 3) if math.isfinite(distance) else 99.0,
            uncertain_because=tuple(reasons),
            release_note=release,
            spec_accept_len=_accept_len(dep),
            utilisation=utilisation,
            notes=tuple(notes),
        )


def _accept_len(dep: Deployment) -> float | None:
    """The mean accepted tokens a step a speculating deployment was predicted with."""
    return dep.speculation.mean_accepted_length if dep.speculation is not None else None


def _with_scenario(dep: Deployment, scenario: Scenario) -> Deployment:
    from dataclasses import replace

    return replace(dep, scenario=scenario)


def simulate_measured(
    results: Sequence[MeasuredResult], catalog: Catalog, cache_dir: Path | None = None
) -> tuple[list[FitSample], list[Excluded]]:
    """Simulate every usable measured row; the rest with their reason. A row simulated
    before is reused: from this process's memory, or from the disk (``cache_dir``, see
    :mod:`planner.perf.sample_cache`), where the rows simulated here are added. When many rows
    are missing there, processes fitting at the same time simulate them in parts, each part
    once (:func:`_simulate_in_parts`)."""
    fingerprint = catalog_fingerprint(catalog)
    disk_key = sample_cache.cache_key(fingerprint)
    contents = [_result_key(result) for result in results]
    with _LOCK:
        known = {content: _SAMPLE_CACHE.get((fingerprint, content)) for content in contents}
    stored: dict[str, SimTrace] = {}
    built: dict[str, FitSample | PlannerError | RuntimeError] = {}  # simulated in parts
    if any(sample is None for sample in known.values()):
        stored = sample_cache.load(cache_dir, disk_key) if cache_dir else {}
        missing = {
            content: result
            for content, result in zip(contents, results, strict=True)
            if known[content] is None and sample_cache.row_key(content) not in stored
        }
        if cache_dir is not None and len(missing) >= sample_cache.COOPERATE_MIN:
            built = _simulate_in_parts(list(missing.items()), catalog, cache_dir, disk_key, stored)
    fresh: dict[str, SimTrace] = {}
    samples: list[FitSample] = []
    excluded: list[Excluded] = []
    for result, content in zip(results, contents, strict=True):
        sample = known[content]
        if sample is None:
            row = sample_cache.row_key(content)
            got = built.get(content)
            if isinstance(got, PlannerError | RuntimeError):
                excluded.append(Excluded(result, str(got)))
                continue
            try:
                if got is None:
                    got = build_sample(result, catalog, simulated=stored.get(row))
                sample = got
            except (PlannerError, RuntimeError) as exc:
                excluded.append(Excluded(result, str(exc)))
                continue
            if row not in stored:
                fresh[row] = sample.trace
            with _LOCK:
                _SAMPLE_CACHE[(fingerprint, content)] = sample
                while len(_SAMPLE_CACHE) > _SAMPLE_CACHE_SIZE:
                    _SAMPLE_CACHE.popitem(last=False)
        problem = measurement_problem(result)
        if problem is not None:
            excluded.append(Excluded(result, problem, sample))
            continue
        if not sample.targets:
            excluded.append(Excluded(result, "no throughput or latency figure to fit"))
            continue
        samples.append(sample)
    if fresh and cache_dir is not None:
        sample_cache.save(cache_dir, disk_key, {**stored, **fresh}, added=fresh)
    return samples, excluded


def _simulate_in_parts(
    missing: list[tuple[str, MeasuredResult]],
    catalog: Catalog,
    cache_dir: Path,
    disk_key: str,
    stored: dict[str, SimTrace],
) -> dict[str, FitSample | PlannerError | RuntimeError]:
    """Simulate the ``missing`` rows (content -> row) with the other processes fitting now:
    dealt into :data:`~planner.perf.sample_cache.PARTS` parts, this process simulates each part
    it claims first and writes it to ``cache_dir``; the parts others claimed it waits for and
    reads into ``stored``. Returns what this process simulated (content -> sample, or the error
    that excludes the row). Where the directory takes no claim, it simulates every part."""
    n = sample_cache.PARTS
    pending: dict[str, list[tuple[str, MeasuredResult]]] = {}
    for k in range(n):
        part = missing[k::n]
        if part:
            pending[sample_cache.part_name([sample_cache.row_key(c) for c, _ in part])] = part
    built: dict[str, FitSample | PlannerError | RuntimeError] = {}
    while pending:
        progressed = False
        for name, part in list(pending.items()):
            claimed = None
            rows = sample_cache.load_part(cache_dir, disk_key, name)
            if rows is None:
                claimed = sample_cache.claim(cache_dir, disk_key, name)
                if claimed is False:
                    continue  # another process is simulating it
                if claimed:  # the part may have been written between the two looks
                    rows = sample_cache.load_part(cache_dir, disk_key, name)
            try:
                if rows is not None:
                    stored.update(rows)
                else:
                    traces = _simulate_part(part, catalog, built)
                    if claimed and sample_cache.save_part(cache_dir, disk_key, name, traces):
                        stored.update(
                            {r: t for r, t in traces.items() if sample_cache.cacheable(t)}
                        )
            finally:  # a failure here must not keep the others waiting for the part
                if claimed:
                    sample_cache.release(cache_dir, disk_key, name)
            del pending[name]
            progressed = True
        if pending and not progressed:
            time.sleep(0.05)
    return built


def _simulate_part(
    part: list[tuple[str, MeasuredResult]],
    catalog: Catalog,
    built: dict[str, FitSample | PlannerError | RuntimeError],
) -> dict[str, SimTrace]:
    traces: dict[str, SimTrace] = {}
    for content, result in part:
        try:
            sample = build_sample(result, catalog)
        except (PlannerError, RuntimeError) as exc:
            built[content] = exc
            continue
        built[content] = sample
        traces[sample_cache.row_key(content)] = sample.trace
    return traces


def resimulate_measured(
    samples: Sequence[FitSample],
    clocks: Sequence[np.ndarray | None],
    fit_key: str,
    cache_dir: Path | None = None,
    *,
    write: bool = True,
    kind: str = "clocked",
) -> list[FitSample]:
    """``samples`` with each row whose entry of ``clocks`` is not None simulated again with that
    coefficient vector (the second round of the fit ``fit_key``); taken from the fit's file on
    disk (``cache_dir``, :func:`planner.perf.sample_cache.save_clocked`) where a process
    simulated that row with that vector before. With ``write`` the file is written when any
    was missing: by a process that rebuilds a fit's rows, not by the fit itself (the file,
    ~65 MB for the embedded rows, takes seconds to write, and the fitting process keeps its
    rows in memory)."""
    if not any(c is not None for c in clocks):
        return list(samples)
    stored = sample_cache.load_clocked(cache_dir, fit_key, kind) if cache_dir else {}
    traces: dict[str, SimTrace] = {}
    out: list[FitSample] = []
    for sample, c in zip(samples, clocks, strict=True):
        if c is None:
            out.append(sample)
            continue
        row = sample_cache.clocked_row_key(sample_cache.row_key(_result_key(sample.result)), c)
        trace = stored.get(row)
        if trace is None:
            again = resimulate(sample, c)
            traces[row] = again.trace
            out.append(again)
            continue
        traces[row] = trace
        targets = targets_for(sample.result, trace, sample.dep.loaded_replicas)
        out.append(FitSample(sample.result, sample.scenario, sample.dep, trace, targets))
    if write and cache_dir is not None and set(traces) - set(stored):
        sample_cache.save_clocked(cache_dir, fit_key, traces, kind)
    return out


_MODEL_CACHE: OrderedDict[str, PerformanceModel] = OrderedDict()
_MODEL_CACHE_SIZE = 4


def results_fingerprint(catalog: Catalog, results: Sequence[MeasuredResult]) -> str:
    digest = hashlib.sha256(catalog_fingerprint(catalog).encode())
    for result in results:
        digest.update(_result_key(result).encode())
    return digest.hexdigest()


def get_performance_model(
    catalog: Catalog,
    user_results: Iterable[MeasuredResult] = (),
    *,
    cache_dir: Path | None = None,
    disk_cache: bool | None = None,
) -> PerformanceModel:
    """The model fitted on ``catalog.measured`` plus ``user_results``.

    Cached by the content of the results and of the catalog, in memory and on disk
    (:mod:`planner.perf.fit_cache`, under ``cache_dir``, default the settings' cache
    directory; ``disk_cache=False`` or ``SERVEWISE_FIT_CACHE=0`` turns the disk off): the same
    data returns the same fitted model, in another process too; an added run refits (reusing
    every row this process simulated before). With no user results on the embedded catalog
    the shipped fit (``data/perf_fit.npz``) serves when the user's cache has none: a fresh
    install fits nothing.
    """
    results = [*catalog.measured, *user_results]
    key = results_fingerprint(catalog, results)
    with _LOCK:
        cached = _MODEL_CACHE.get(key)
        if cached is not None:
            _MODEL_CACHE.move_to_end(key)
            return cached
    directory = disk_cache_dir(cache_dir, disk_cache)
    disk_key = fit_cache.cache_key(key)
    state = None
    if directory is not None:
        state = fit_cache.load(directory, disk_key)
        if state is None:
            state = fit_cache.load_shipped(disk_key)
    if state is not None:
        model = PerformanceModel.from_fit_state(catalog, state, results, cache_dir=directory)
    else:
        model = PerformanceModel(catalog, cache_dir=directory).fit(results)
        if directory is not None:
            fit_cache.save(directory, disk_key, model.fit_state())
    with _LOCK:
        _MODEL_CACHE[key] = model
        while len(_MODEL_CACHE) > _MODEL_CACHE_SIZE:
            _MODEL_CACHE.popitem(last=False)
    return model


_BACKGROUND_FITS: dict[str, Any] = {}  # data key -> the thread or process fitting it


class _FitProcess:
    """A fit in a Python process of its own (``python -m planner.perf.refit``), handed its
    catalog and results in a pickle file this process wrote; the fit lands in the disk cache.
    (Not ``multiprocessing``: a spawned child would re-run the parent's main module, the
    dashboard's script.)"""

    def __init__(self, catalog: Catalog, results: list[MeasuredResult], cache_dir: Path):
        import os
        import pickle
        import subprocess
        import sys
        import tempfile

        handle, name = tempfile.mkstemp(prefix="servewise-refit-", suffix=".pickle")
        with os.fdopen(handle, "wb") as out:
            pickle.dump((catalog, results, str(cache_dir)), out)
        self._payload = Path(name)
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self._process = subprocess.Popen(
            [sys.executable, "-m", "planner.perf.refit", name],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def start(self) -> None:  # started on creation
        return None

    def is_alive(self) -> bool:
        alive = self._process.poll() is None
        if not alive:
            self._payload.unlink(missing_ok=True)
        return alive

    def join(self, timeout: float | None = None) -> None:
        import subprocess

        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            return
        self._payload.unlink(missing_ok=True)


def performance_model_nowait(
    catalog: Catalog,
    user_results: Iterable[MeasuredResult] = (),
    *,
    wait_s: float = 0.0,
    cache_dir: Path | None = None,
) -> PerformanceModel | None:
    """The fitted model if it is at hand within ``wait_s`` seconds (fitted in this process or
    on disk), else None while a fit this call starts runs on: in a process of its own that
    leaves it in the disk cache (a fit is pure Python and would hold this process's
    interpreter lock), or in a thread when the disk cache is off. For callers that must not
    wait for a refit (a dashboard page shows the previous fit meanwhile)."""
    results = list(user_results)
    if fit_is_cached(catalog, results, cache_dir=cache_dir):
        return get_performance_model(catalog, results, cache_dir=cache_dir)
    key = results_fingerprint(catalog, [*catalog.measured, *results])
    directory = disk_cache_dir(cache_dir, None)
    with _LOCK:
        worker = _BACKGROUND_FITS.get(key)
        if worker is None or not worker.is_alive():
            if directory is not None:
                worker = _FitProcess(catalog, results, directory)
            else:
                worker = threading.Thread(
                    target=get_performance_model,
                    args=(catalog, results),
                    name="servewise-refit",
                    daemon=True,
                )
            _BACKGROUND_FITS[key] = worker
            worker.start()
    worker.join(wait_s)
    if worker.is_alive():
        return None
    with _LOCK:
        _BACKGROUND_FITS.pop(key, None)
    return get_performance_model(catalog, results, cache_dir=cache_dir)


def fit_is_cached(
    catalog: Catalog,
    user_results: Iterable[MeasuredResult] = (),
    *,
    cache_dir: Path | None = None,
) -> bool:
    """Whether :func:`get_performance_model` would return at once (fitted in this process,
    on disk, or shipped for exactly these results), rather than fit (~10-15 s)."""
    results = [*catalog.measured, *user_results]
    key = results_fingerprint(catalog, results)
    with _LOCK:
        if key in _MODEL_CACHE:
            return True
    directory = disk_cache_dir(cache_dir, None)
    if directory is None:
        return False
    disk_key = fit_cache.cache_key(key)
    if fit_cache.cache_file(directory, disk_key).is_file():
        return True
    return fit_cache.shipped_problem(disk_key) is None


def disk_cache_dir(cache_dir: Path | None = None, enabled: bool | None = None) -> Path | None:
    """Where fits and simulated rows are cached: ``cache_dir``, else the settings' cache
    directory; None when caching is off (``enabled`` False, or by default ``SERVEWISE_FIT_CACHE``
    0)."""
    from planner.settings import get_settings

    settings = get_settings()
    if enabled is False or (enabled is None and not settings.fit_cache):
        return None
    return cache_dir or settings.cache_directory
