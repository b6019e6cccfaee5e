"""The simulated server timed by the performance model itself: one timing model, not two.

:class:`EngineTiming` is the server's ``TimingModel`` for one replica of a plan: the predictor's
own engine (:class:`planner.perf.simulator.LiveEngine`: the scheduler of
:func:`planner.perf.simulator.simulate` with the fitted step-time coefficients) stepped in real
time. Requests join its waiting queue as they arrive; each step is scheduled as the simulator
schedules it (admission under ``max_num_seqs``, the token budget and the KV blocks; chunked
prefill; preemption of the latest request when blocks run out) and lasts ``c . terms`` seconds
(times ``slowdown``, a server slower than the model, for recalibration tests); the tokens a
step produced are streamed at its end. A load the runner sends therefore measures what the
predictor predicts for it; the difference left is the real one of any server: a request that
arrives while a step runs waits for the next.

Prompt tokens found in the server's prefix cache skip their prefill (whole blocks), when the
plan enables prefix caching.

The deployment comes from a :class:`~planner.perf.scenario.Scenario` (``--scenario``: the exact
scenario the prediction was made for) or from a :class:`planner.plan.Plan`
(:func:`timing_scenario`; ``--gpu --tp ...`` on the command line). The fit behind the
coefficients takes ~10-15 s once: the fitted model is cached on disk
(:mod:`planner.perf.fit_cache`, shared with the dashboard and the command line), so a start
with a cached fit answers ``/health`` in about a second; the dashboard passes its own (possibly
refitted) vector with ``--coefficients``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from planner.catalog import Catalog, load_catalog
from planner.perf.deployment import Deployment, resolve_deployment
from planner.perf.model import PerformanceModel, get_performance_model
from planner.perf.scenario import Scenario
from planner.perf.simulator import LiveEngine, StepTerms
from planner.perf.speculative import SpeculativeStep
from planner.perf.step_time import FEATURES, fill_step_features
from planner.plan import Load, Plan, PlanWorkload
from planner.settings import get_settings

log = logging.getLogger(__name__)


def timing_scenario(plan: Plan | Scenario) -> Scenario:
    """The scenario the server is timed by: the one given, or one replica of ``plan`` under its
    engine settings (the lengths, 1,024 in and 256 out, only matter where the plan leaves
    max_model_len open)."""
    if isinstance(plan, Scenario):
        return plan
    accept_len = plan.workload.spec_accept_len if plan.workload is not None else None
    workload = PlanWorkload.of(1024, 256, spec_accept_len=accept_len)
    return plan.scenario(workload=workload, load=Load.closed_loop(1))


#: Closed loop: the predictor counts a client's turnaround as zero (the request that replaces a
#: finished one joins the very next step). The next step's batch waits for as many new requests
#: as the last step finished, at most this long and half that step; the step still ends on time.
RETURN_WAIT_S = 0.02
#: Requests that arrive together (a closed loop's first ones, an offline batch) within this long
#: of the first start a step from idle together, as the predictor admits them at once.
IDLE_GATHER_S = 0.005
#: The clock keeps absolute step deadlines, but forgives an event loop that fell further behind.
MAX_LAG_S = 0.05


@dataclass
class _Waiter:
    """A stream's view of its request, updated at the end of every step."""

    ready: asyncio.Event = field(default_factory=asyncio.Event)
    produced: int = 0
    finished: bool = False
    #: (when the step ended, tokens by then) of each step that gave it tokens, not yet sent
    due: deque[tuple[float, int]] = field(default_factory=deque)


class EngineTiming:
    """``TimingModel`` of the simulated server: the performance model's engine in real time."""

    def __init__(
        self,
        deployment: Deployment,
        coefficients: Sequence[float] | np.ndarray,
        *,
        slowdown: float = 1.0,
        prefix_caching: bool | None = None,
        step_terms: StepTerms = fill_step_features,
    ) -> None:
        if not slowdown > 0:
            raise ValueError(f"slowdown={slowdown}: must be > 0")
        self.deployment = deployment
        self.coefficients = np.asarray(coefficients, dtype=float)
        self.slowdown = float(slowdown)
        self.prefix_caching = (
            deployment.scenario.enable_prefix_caching if prefix_caching is None else prefix_caching
        )
        self.engine = LiveEngine(deployment, self.coefficients, step_terms)
        self.steps = 0
        self.closed_loop = deployment.scenario.load not in ("rate", "trace")
        self._submitted = 0
        self._waiters: dict[int, _Waiter] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ----- what the server reports (EngineState) ------------------------------------------------
    @property
    def speculation(self) -> SpeculativeStep | None:
        """The plan's speculative decoding (its stated or default acceptance), if any."""
        return self.deployment.speculation

    @property
    def max_num_seqs(self) -> int:
        return self.engine.max_num_seqs

    @property
    def kv_capacity_tokens(self) -> int:
        return self.engine.kv_capacity_tokens

    @property
    def running(self) -> int:
        return self.engine.running

    @property
    def waiting(self) -> int:
        return self.engine.waiting

    @property
    def kv_usage(self) -> float:
        return self.engine.kv_usage

    @property
    def preemptions(self) -> int:
        return self.engine.preemptions

    # ----- TimingModel ----------------------------------------------------------------------------
    async def tokens(
        self, prompt_tokens: int, output_tokens: int, cached_tokens: int = 0
    ) -> AsyncGenerator[int, None]:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        cached = cached_tokens if self.prefix_caching else 0
        rid = self.engine.submit(prompt_tokens, output_tokens, cached)
        self._submitted += 1
        waiter = _Waiter()
        self._waiters[rid] = waiter
        self._wake.set()
        # a served request's tokens reach it the fitted request path after their step (as the
        # prediction times them, planner.perf.step_time ``request_path``); the steps already
        # due when a late stream runs go as one delta
        loop = asyncio.get_running_loop()
        delay = self.engine.request_path_s * self.slowdown
        sent = 0
        try:
            while True:
                if not waiter.due:
                    if waiter.finished:
                        break
                    await waiter.ready.wait()
                    waiter.ready.clear()
                    continue
                await _sleep_until(loop, waiter.due[0][0] + delay)
                now, produced = loop.time(), sent
                while waiter.due and waiter.due[0][0] + delay <= now:
                    produced = waiter.due.popleft()[1]
                if produced > sent:
                    sent = produced
                    yield sent
        finally:
            self._waiters.pop(rid, None)
            self.engine.cancel(rid)  # a finished request is only forgotten

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        clock = loop.time()  # when the next step starts
        expected, wait_s, seen = 0, 0.0, 0
        while True:
            if self.engine.idle:
                self._wake.clear()
                await self._wake.wait()
                clock = loop.time()
                if self.closed_loop:
                    await _sleep_until(loop, clock + IDLE_GATHER_S)
            elif expected:
                await self._arrivals(loop, seen + expected, clock + wait_s)
            seconds = self.engine.step()
            if seconds is None:  # nothing fits yet: wait for a request to come or go
                self._wake.clear()
                await self._wake.wait()
                clock = loop.time()
                continue
            self.steps += 1
            duration = seconds * self.slowdown
            clock = max(clock, loop.time() - MAX_LAG_S) + duration
            await _sleep_until(loop, clock)
            seen = self._submitted
            expected = self.engine.finished_last_step if self.closed_loop else 0
            wait_s = min(RETURN_WAIT_S, duration / 2)
            # what each request has at this step's end, read now: the next step, scheduled
            # before its stream runs again, must not show early
            for rid, waiter in self._waiters.items():
                produced = self.engine.generated(rid)
                if produced > waiter.produced:
                    waiter.due.append((clock, produced))
                waiter.produced = produced
                waiter.finished = self.engine.finished(rid)
                waiter.ready.set()

    async def _arrivals(self, loop: asyncio.AbstractEventLoop, count: int, deadline: float) -> None:
        """Until ``count`` requests have been submitted in all, or ``deadline``."""
        while self._submitted < count:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), remaining)


async def _sleep_until(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    delay = deadline - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)


# ----- building one from a plan ----------------------------------------------------------------
def coefficients_for_plan(model: PerformanceModel, plan: Plan | Scenario) -> list[float]:
    """The fitted coefficient vector the model uses to predict ``plan``."""
    return [float(v) for v in model.coefficients_of(timing_scenario(plan))]


def parse_coefficients(text: str) -> list[float]:
    """``--coefficients``: a JSON list over the step terms, a JSON object by term name, or the
    path of a file holding either."""
    source = text.strip()
    if not source.startswith(("[", "{")):
        try:
            source = Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"--coefficients {text!r}: not JSON and not a readable file") from exc
    try:
        data: Any = json.loads(source)
    except ValueError as exc:
        raise ValueError(f"--coefficients: not valid JSON ({exc})") from None
    if isinstance(data, dict):
        unknown = sorted(set(data) - set(FEATURES))
        if unknown:
            raise ValueError(f"--coefficients: unknown terms {unknown}; known: {list(FEATURES)}")
        return [float(data.get(name, 0.0)) for name in FEATURES]
    if not isinstance(data, list) or len(data) != len(FEATURES):
        raise ValueError(
            f"--coefficients: expected a list of {len(FEATURES)} numbers (one per step term "
            f"{list(FEATURES)}) or an object by term name"
        )
    values = [float(v) for v in data]
    if any(v < 0 or not math.isfinite(v) for v in values):
        raise ValueError("--coefficients: every coefficient must be finite and >= 0")
    return values


def engine_timing(
    plan: Plan | Scenario,
    *,
    catalog: Catalog | None = None,
    coefficients: Sequence[float] | None = None,
    slowdown: float = 1.0,
) -> EngineTiming:
    """An :class:`EngineTiming` for one replica of ``plan``: the deployment resolved against
    the catalog (the user's catalog files included), coefficients given or those of the fitted
    model (read from the fit cache, :mod:`planner.perf.fit_cache`, when any process fitted it
    before).

    Raises :class:`planner.errors.PlannerError` naming the field when the plan does not resolve
    (unknown model or GPU, TP not dividing the heads, ...).
    """
    if catalog is None:
        catalog = load_catalog(user_dir=get_settings().user_data_dir / "catalog")
    scenario = timing_scenario(plan)
    dep = resolve_deployment(scenario, catalog)
    vector = (
        list(coefficients)
        if coefficients is not None
        else coefficients_for_plan(get_performance_model(catalog), scenario)
    )
    return EngineTiming(dep, vector, slowdown=slowdown)
