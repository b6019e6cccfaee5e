"""Token timing for the simulated server from the performance model's step time.

:class:`PerfTiming` implements the simulated server's ``TimingModel`` for one plan (model, GPU,
TP x PP, precision, engine knobs): the server calls it when a request is admitted with the
number of requests running, and again before each chunk (``live_token_delay_s``) so a request's
pace follows the batch as it grows and shrinks (continuous batching: latency grows with load).

One engine step of a batch of ``B`` running requests of ``I`` prompt and ``O`` output tokens is
priced with :func:`planner.perf.step_time.step_time_s` on the plan's resolved
:class:`~planner.perf.deployment.Deployment` and the fitted coefficients:

- token delay = one steady-state step: ``B`` sequences of which a share ``1/O`` is prefilling
  (every request spends one step of its ``O`` in prefill), decodes attending to
  ``I + O/2`` tokens on average;
- TTFT = half a steady-state step (a request arrives mid-step and waits for the next; none
  when the engine is idle) plus the
  steps that prefill its prompt *and the prompts admitted before it that have no first token
  yet* (vLLM schedules waiting prefills first-come-first-served) next to the decodes of the
  others, in chunks of what is left of ``max_num_batched_tokens`` (chunked prefill): a burst of
  arrivals spreads its TTFTs as the engine's does;
- both times ``slowdown`` (a server slower than the model predicts, for recalibration tests).

Requests beyond ``max_num_seqs`` queue in the server (``--max-concurrency``), so the queueing
part of TTFT is real waiting, not a formula. Step times are memoised on (batch, lengths rounded
to 1/32 of their value): a step costs ~30 us to price and a run asks for one per chunk.

The fit behind the coefficients takes ~10-15 s once: the fitted model is cached on disk
(:mod:`planner.perf.fit_cache`, shared with the dashboard and the command line), so a start
with a cached fit answers ``/health`` in about a second; the dashboard passes its own (possibly
refitted) vector with ``--coefficients``.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks_runner.simulated.timing import TokenTiming
from planner.catalog import Catalog, load_catalog
from planner.perf.deployment import Deployment, resolve_deployment
from planner.perf.model import PerformanceModel, get_performance_model
from planner.perf.scenario import Scenario
from planner.perf.step_time import FEATURES, StepBatch, step_time_s
from planner.settings import get_settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlanSpec:
    """What the simulated server imitates: one replica of a plan (``python -m
    benchmarks_runner.simulated --model HF_ID --gpu ID --tp N ...``)."""

    model: str
    gpu: str
    tp: int = 1
    pp: int = 1
    precision: str = "bf16"
    engine: str = "vllm"
    engine_version: str | None = None
    instance: str | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str | None = None  # None here and below: the engine's default
    enable_prefix_caching: bool | None = None
    gpu_memory_utilization: float | None = None

    @classmethod
    def from_plan(cls, plan: dict[str, Any]) -> PlanSpec:
        """From a run's ``plan`` object (keys as ``planner.verification`` writes them)."""
        knobs = {
            key: plan[key]
            for key in (
                "max_num_seqs",
                "max_num_batched_tokens",
                "engine_version",
                "instance",
                "kv_cache_dtype",
                "enable_prefix_caching",
                "gpu_memory_utilization",
            )
            if plan.get(key) is not None
        }
        return cls(
            model=str(plan["model"]),
            gpu=str(plan["gpu"]),
            tp=int(plan.get("tp") or 1),
            pp=int(plan.get("pp") or 1),
            precision=str(plan.get("precision") or "bf16"),
            engine=str(plan.get("engine") or "vllm"),
            **knobs,
        )

    def scenario(self, input_len: int = 1024, output_len: int = 256) -> Scenario:
        """A one-replica scenario of the plan (the lengths only bound ``max_model_len``)."""
        return Scenario(
            engine=self.engine,
            engine_version=self.engine_version,
            model=self.model,
            precision=self.precision,
            gpu=self.gpu,
            num_gpus=self.tp * self.pp,
            tp=self.tp,
            pp=self.pp,
            instance=self.instance,
            input_len=input_len,
            output_len=output_len,
            load="concurrency",
            concurrency=1,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            kv_cache_dtype=self.kv_cache_dtype,
            enable_prefix_caching=self.enable_prefix_caching,
            gpu_memory_utilization=self.gpu_memory_utilization,
        )


class PerfTiming:
    """``TimingModel`` of the simulated server priced by the performance model's step time."""

    def __init__(
        self,
        deployment: Deployment,
        coefficients: Sequence[float] | np.ndarray,
        *,
        slowdown: float = 1.0,
        tokens_per_chunk: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not slowdown > 0:
            raise ValueError(f"slowdown={slowdown}: must be > 0")
        self.deployment = deployment
        self.coefficients = np.asarray(coefficients, dtype=float)
        self.slowdown = float(slowdown)
        self.tokens_per_chunk = max(1, int(tokens_per_chunk))
        self._clock = clock  # the server's clock (its deadlines are on loop.time: monotonic)
        self._step = lru_cache(maxsize=65_536)(self._step_uncached)
        # (first-token deadline, prompt tokens) of admitted requests still prefilling
        self._prefilling: deque[tuple[float, float]] = deque()

    # ----- what the server needs besides the timing --------------------------------------------
    @property
    def max_num_seqs(self) -> int:
        return int(self.deployment.max_num_seqs)

    @property
    def kv_capacity_tokens(self) -> int:
        return int(self.deployment.kv_capacity_tokens)

    # ----- step prices -------------------------------------------------------------------------
    def _step_uncached(
        self, decodes: float, context: float, prefills: float, prefill_tokens: float
    ) -> float:

        dep = self.deployment
        batch = StepBatch()
        if decodes > 0:
            batch.add_decode(decodes, context, dep.sliding_window)
        if prefills > 0 and prefill_tokens > 0:
            batch.add_prefill(prefills, prefill_tokens, 0.0, dep.sliding_window)
        if batch.seqs <= 0:
            return 0.0
        return max(0.0, step_time_s(batch, dep, self.coefficients))

    def steady_step_s(self, running: int, input_len: int, output_len: int) -> float:
        """One engine step with ``running`` requests in their steady mix of prefill and decode."""
        b = max(1, int(running))
        i, o = _bucket(input_len), _bucket(max(1, output_len))
        prefilling = b / o
        return self._step(b - prefilling, i + o / 2.0, prefilling, float(i))

    def prefill_s(
        self, running: int, input_len: int, queued_prompts: int = 0, queued_tokens: float = 0.0
    ) -> float:
        """Steps that prefill a prompt of ``input_len`` after ``queued_prompts`` earlier prompts
        of ``queued_tokens`` in all, next to the decodes of the other running requests."""
        dep = self.deployment
        i = _bucket(input_len)
        prompts = 1 + max(0, queued_prompts)
        tokens = i + _bucket(queued_tokens) if queued_tokens > 0 else i
        decodes = max(0, int(running) - prompts)
        budget = max(1, int(dep.max_num_batched_tokens) - decodes)
        steps = max(1, math.ceil(tokens / budget))
        per_step = min(float(prompts), prompts / steps + 1.0)  # prompts a step touches
        chunk = tokens / steps / per_step
        return steps * self._step(float(decodes), i, per_step, _bucket(chunk))

    # ----- TimingModel -------------------------------------------------------------------------
    def timing(self, running: int, input_len: int, output_len: int) -> TokenTiming:
        now = self._clock()
        pending = self._prefilling
        while pending and pending[0][0] <= now:
            pending.popleft()
        queued_tokens = sum(tokens for _, tokens in pending)
        step = self.steady_step_s(running, input_len, output_len)
        wait = 0.5 * step if running > 1 else 0.0  # an idle engine starts at once
        ttft = wait + self.prefill_s(running, input_len, len(pending), queued_tokens)
        ttft *= self.slowdown
        # deadlines stay ordered: a later admission never gets its first token earlier
        due = max(now + ttft, pending[-1][0] if pending else 0.0)
        pending.append((due, float(input_len)))
        return TokenTiming(
            ttft_s=due - now,
            token_delay_s=step * self.slowdown,
            tokens_per_chunk=self.tokens_per_chunk,
        )

    def live_token_delay_s(self, running: int, input_len: int, output_len: int) -> float:
        """Seconds per token at the batch running now (asked by the server before each chunk)."""
        return self.steady_step_s(running, input_len, output_len) * self.slowdown


def _bucket(tokens: float) -> float:
    """Round to ~3% (1/32 of the value, at least 1): keeps the memo small, the price unchanged."""
    t = max(1.0, float(tokens))
    step = 2.0 ** max(0, math.floor(math.log2(t)) - 5)
    return float(round(t / step) * step)


# ----- building one from a plan ----------------------------------------------------------------
def coefficients_for_plan(model: PerformanceModel, spec: PlanSpec) -> list[float]:
    """The fitted coefficient vector the model would use to predict ``spec``."""
    return [float(v) for v in model.coefficients_of(spec.scenario())]


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


def perf_timing_for_plan(
    spec: PlanSpec,
    *,
    catalog: Catalog | None = None,
    coefficients: Sequence[float] | None = None,
    slowdown: float = 1.0,
    tokens_per_chunk: int = 1,
) -> PerfTiming:
    """A :class:`PerfTiming` for ``spec``: the deployment resolved against the catalog (the
    user's catalog files included), coefficients given or those of the fitted model (read from
    the fit cache, :mod:`planner.perf.fit_cache`, when any process fitted it before).

    Raises :class:`planner.errors.PlannerError` naming the field when the plan does not resolve
    (unknown model or GPU, TP not dividing the heads, ...).
    """

    if catalog is None:
        catalog = load_catalog(user_dir=get_settings().user_data_dir / "catalog")
    dep = resolve_deployment(spec.scenario(), catalog)
    vector = (
        list(coefficients)
        if coefficients is not None
        else coefficients_for_plan(get_performance_model(catalog), spec)
    )
    return PerfTiming(dep, vector, slowdown=slowdown, tokens_per_chunk=tokens_per_chunk)
