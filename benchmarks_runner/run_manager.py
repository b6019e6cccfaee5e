"""Benchmark runs that outlive a page: a process-wide manager of background runs.

The dashboard starts a verification run and the user walks away: to another page, or reloads
the browser. :class:`RunManager` (one a process; the dashboard holds it with
``st.cache_resource``, nothing here imports streamlit) runs each run in its own thread with
:func:`~benchmarks_runner.runner.run_benchmark_sync`, keeps its latest
:class:`~benchmarks_runner.runner.ProgressSnapshot` and a cancel event, and lists the active and
finished runs, so any script run of any session finds them again. The run files are written as
for any run (:mod:`planner.run_files`): after the process ends they are what remains.

A run may bring its own endpoint (:mod:`benchmarks_runner.endpoints`): a simulated server child
process or a ``vllm serve`` child. The manager starts it before the run (its start-up counts as
the run's ``starting`` state and can be cancelled) and stops it when the run ends, however it
ends.

Two runs at once, against different endpoints, each have their own thread, event loop and run
directory. The runner quiets the garbage collector for the length of a run (process-wide
thresholds and ``gc.freeze``); with overlapping runs those calls interleave, so the manager
restores the thresholds it found once the last of its runs has ended.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import logging
import secrets
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from benchmarks_runner.config import RunConfig, make_run_config
from benchmarks_runner.endpoints import Endpoint, Faults, LaunchedVllm, SimulatedEndpoint
from benchmarks_runner.errors import BenchmarkError, ConfigError, EndpointStartError
from benchmarks_runner.runner import WARMUP_WIDTH, ProgressSnapshot, RunResult, run_benchmark_sync
from benchmarks_runner.workload import (
    RequestSpec,
    build_synthetic_specs,
    with_arrivals,
    workload_record,
)
from planner.errors import RunFilesError
from planner.perf.scenario import Scenario
from planner.perf.simulator import request_arrivals
from planner.plan import Load, Plan, PlanWorkload, Verification
from planner.run_files import (
    MAX_JSON_FILE_BYTES,
    RUN_JSON,
    list_runs,
    loads_json,
    read_regular_bytes,
)
from planner.workload import LengthDistribution

log = logging.getLogger(__name__)

RunState = Literal["starting", "running", "completed", "cancelled", "failed"]
ACTIVE_STATES = ("starting", "running")


# ----- a verification run of a plan -----------------------------------------------------------
EndpointKind = Literal["simulated", "url", "vllm"]
#: the most warm-up requests a verification run sends (a closed loop of more sends this many)
WARMUP_CAP = 256


@dataclass(frozen=True)
class VerificationRequest:
    """Everything the Verify page decides about one verification run of ``plan``.

    ``endpoint``: ``simulated`` (a simulated server for the plan, timed by the performance
    model with ``coefficients``, ``slowdown`` and ``faults``), ``url`` (``base_url``, with
    ``api_key`` and ``served_model``) or ``vllm`` (``vllm serve`` of ``vllm_config``, its log
    under ``log_dir``). Load: a closed loop of ``concurrency`` or Poisson ``request_rate``.
    Lengths: the predicted scenario's distributions; the run sends exactly the requests the
    prediction simulates (:func:`planner.workload.draw_lengths` with ``seed``), and
    :meth:`scenario` is that prediction's scenario.
    """

    plan: Plan
    input_len: LengthDistribution
    output_len: LengthDistribution
    num_requests: int
    concurrency: int | None = None
    request_rate: float | None = None
    endpoint: EndpointKind = "simulated"
    base_url: str | None = None
    api_key: str | None = None
    served_model: str | None = None
    api: Literal["completions", "chat"] = "completions"
    slowdown: float = 1.0
    faults: Faults | None = None
    #: the step-time coefficients of the simulated endpoint (a disaggregated plan's by pool)
    coefficients: Sequence[float] | Mapping[str, Sequence[float]] | None = None
    vllm_config: Any = None  # planner.vllm_command.VllmServeConfig
    log_dir: Path | None = None
    seed: int = 0

    @property
    def warmup_requests(self) -> int:
        """Requests sent before the measured ones and left out of the run's figures: one wave
        of a real server's load (a closed loop's concurrency; at a rate the runner's
        WARMUP_WIDTH, the warm-up's width there; at most the run's own count and WARMUP_CAP),
        none for the simulated endpoint.

        A server compiles some kernels the first time a batch needs them: SGLang's start-up
        warm-up sends one request, so its first prefill of several requests compiled Triton's
        generic extend-attention kernel after the server said it was ready (sglang pull
        request 36050, 2026-08-23: 1.07 s, and a first wave's largest TTFT of 10.8 s against
        3.0 s warmed). Measured, that one-time cost would enter the run's TTFT and the
        recalibration would learn it as every request's. The warm-up prompts are drawn apart
        from the measured ones (``-warmup-i`` seeds), so they leave nothing in the prefix cache
        that a measured request could find."""
        if self.endpoint == "simulated":
            return 0
        wave = WARMUP_WIDTH if self.request_rate else (self.concurrency or 1)
        return max(0, min(wave, self.num_requests, WARMUP_CAP))

    def run_config(self) -> RunConfig:
        """The run's configuration; raises ConfigError naming a bad field."""
        rate = self.request_rate
        return make_run_config(
            base_url=self.base_url or "http://127.0.0.1",
            model=self.served_model or self.plan.model,
            api=self.api,
            api_key=self.api_key,
            load="rate" if rate else "concurrency",
            concurrency=None if rate else self.concurrency,
            request_rate=rate,
            seed=self.seed,
            warmup=self.warmup_requests,
            workload=workload_record(
                self.input_len, self.output_len, prefix_share=self.prefix_share
            ),
        )

    def specs(self) -> list[RequestSpec]:
        """The requests the prediction simulates: its lengths and, at a rate, its arrivals."""
        specs = build_synthetic_specs(
            self.num_requests,
            self.input_len,
            self.output_len,
            prefix_share=self.prefix_share,
            seed=self.seed,
        )
        arrivals = request_arrivals(self.scenario())
        return specs if arrivals is None else with_arrivals(specs, arrivals.tolist())

    def load(self) -> Load:
        if self.request_rate:
            return Load.rate(self.request_rate, self.num_requests)
        if self.concurrency is None:
            raise ConfigError("a verification run needs a concurrency or a request rate")
        return Load.closed_loop(self.concurrency, self.num_requests)

    @property
    def prefix_share(self) -> float:
        """The plan's shared-prefix share: the run sends it, the prediction assumes it."""
        return self.plan.workload.prefix_share if self.plan.workload else 0.0

    def scenario(self) -> Scenario:
        """The scenario the run is predicted by: this plan, these lengths, load and seed."""
        workload = PlanWorkload(
            input_len=self.input_len, output_len=self.output_len, prefix_share=self.prefix_share
        )
        return self.plan.scenario(workload=workload, load=self.load(), seed=self.seed)

    def make_endpoint(self) -> Endpoint | None:
        if self.endpoint == "simulated":
            return SimulatedEndpoint.for_plan(
                self.plan,
                coefficients=self.coefficients,
                slowdown=self.slowdown,
                faults=self.faults,
                scenario=self.scenario(),
            )
        if self.endpoint == "vllm":
            if self.vllm_config is None:
                raise EndpointStartError("launching vLLM needs the plan's vllm_config")
            log_dir = self.log_dir or Path(tempfile.gettempdir())
            return LaunchedVllm(self.vllm_config, log_path=log_dir / "vllm-serve.log")
        if not self.base_url:
            raise EndpointStartError("an endpoint URL is needed (http://host:port, no /v1)")
        return None

    def stored_plan(self) -> Plan:
        """The plan as run.json keeps it, with how it was verified."""
        faults = self.faults or Faults()
        how = Verification(endpoint=self.endpoint, slowdown=self.slowdown, faults=faults.recorded())
        return self.plan.model_copy(update={"verification": how})


# ----- runs ----------------------------------------------------------------------------------
@dataclass(eq=False)
class ManagedRun:
    """One run the manager started; read it from any thread, the worker writes it."""

    id: str
    label: str
    model: str
    plan: Plan | None
    endpoint: str
    started_at: float = field(default_factory=time.time)
    state: RunState = "starting"
    message: str = "starting"
    base_url: str | None = None
    progress: ProgressSnapshot | None = None
    result: RunResult | None = None
    run_dir: Path | None = None
    error: str | None = None
    finished_at: float | None = None
    cancel_event: threading.Event = field(default_factory=threading.Event, repr=False)
    _done: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def run_id(self) -> str | None:
        return self.run_dir.name if self.run_dir is not None else None

    @property
    def cancel_requested(self) -> bool:
        return self.cancel_event.is_set()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the run ended (True) or ``timeout_s`` passed (False)."""
        return self._done.wait(timeout_s)


class _GcGuard:
    """Thresholds as found before the first of overlapping runs, restored after the last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._saved: tuple[int, int, int] | None = None

    def enter(self) -> None:
        with self._lock:
            if self._active == 0:
                self._saved = gc.get_threshold()
            self._active += 1

    def exit(self) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0 and self._saved is not None:
                gc.set_threshold(*self._saved)
                gc.unfreeze()


_GC_GUARD = _GcGuard()


class RunManager:
    """Starts runs in background threads and keeps them findable (see the module docstring)."""

    def __init__(self, runs_dir: Path, *, keep_finished: int = 50) -> None:
        self.runs_dir = Path(runs_dir)
        self.keep_finished = keep_finished
        self._lock = threading.Lock()
        self._runs: dict[str, ManagedRun] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._endpoints: dict[str, Endpoint] = {}
        atexit.register(_shutdown_at_exit, weakref.ref(self))

    # ----- starting ----------------------------------------------------------------------------
    def start(
        self,
        config: RunConfig,
        specs: list[RequestSpec],
        *,
        plan: Plan | None = None,
        endpoint: Endpoint | None = None,
        label: str | None = None,
        on_finish: Callable[[ManagedRun], None] | None = None,
    ) -> ManagedRun:
        """Start a run in a new thread and return its handle at once.

        With ``endpoint``, ``config.base_url`` is replaced by the endpoint's once it is up.
        ``on_finish`` is called in the run's thread after it ended (any state); its errors are
        logged, never raised.
        """
        run_key = f"{time.strftime('%H%M%S')}-{secrets.token_hex(3)}"
        text = label or config.label or f"{config.model} at {config.base_url}"
        tagged = config.model_copy(update={"label": f"{text} [{run_key}]"})
        run = ManagedRun(
            id=run_key,
            label=text,
            model=config.model,
            plan=plan,
            endpoint=endpoint.description if endpoint is not None else config.root_url,
            base_url=None if endpoint is not None else config.root_url,
        )
        thread = threading.Thread(
            target=self._work,
            args=(run, tagged, specs, endpoint, on_finish),
            name=f"servewise-run-{run_key}",
            daemon=True,
        )
        with self._lock:
            self._runs[run_key] = run
            self._threads[run_key] = thread
            if endpoint is not None:
                self._endpoints[run_key] = endpoint
            self._prune()
        _GC_GUARD.enter()
        thread.start()
        return run

    def start_verification(
        self,
        request: VerificationRequest,
        *,
        on_finish: Callable[[ManagedRun], None] | None = None,
    ) -> ManagedRun:
        """Start a verification run (raises ConfigError or EndpointStartError at once when the
        request cannot make a run)."""
        config = request.run_config()
        endpoint = request.make_endpoint()
        label = request.plan.label
        return self.start(
            config,
            request.specs(),
            plan=request.stored_plan(),
            endpoint=endpoint,
            label=f"verify {label}",
            on_finish=on_finish,
        )

    def _work(
        self,
        run: ManagedRun,
        config: RunConfig,
        specs: list[RequestSpec],
        endpoint: Endpoint | None,
        on_finish: Callable[[ManagedRun], None] | None,
    ) -> None:
        started = time.time()
        try:
            if endpoint is not None:
                run.message = f"starting the {endpoint.description}"
                base_url = endpoint.start(run.cancel_event)
                run.base_url = base_url or None
                if run.cancel_event.is_set():
                    run.state, run.message = "cancelled", "cancelled before the run started"
                    return
                config = config.model_copy(update={"base_url": base_url})
            run.state, run.message = "running", "running"

            def progress(snapshot: ProgressSnapshot) -> None:
                run.progress = snapshot
                if run.run_dir is None:
                    run.run_dir = self._find_run_dir(config.label, started)

            result = run_benchmark_sync(
                config,
                specs,
                self.runs_dir,
                plan=run.plan.model_dump(mode="json") if run.plan is not None else None,
                progress=progress,
                cancel=run.cancel_event,
            )
            run.result = result
            run.run_dir = result.run_dir
            run.error = result.error
            run.state = _state(result.status)
            run.message = result.status if result.error is None else result.error
        except BenchmarkError as exc:
            run.state, run.error, run.message = "failed", str(exc), str(exc)
        except Exception as exc:  # a bug must end the run visibly, not kill the thread silently
            log.exception("run %s failed", run.id)
            run.state = "failed"
            run.error = run.message = f"internal error: {type(exc).__name__}: {exc}"
        finally:
            if endpoint is not None:
                try:
                    endpoint.stop()
                except Exception:
                    log.exception("stopping the endpoint of run %s failed", run.id)
                with self._lock:
                    self._endpoints.pop(run.id, None)
            if run.run_dir is None:
                run.run_dir = self._find_run_dir(config.label, started)
            _GC_GUARD.exit()
            run.finished_at = time.time()
            if on_finish is not None:
                try:
                    on_finish(run)
                except Exception:
                    log.exception("on_finish of run %s failed", run.id)
            run._done.set()

    def _find_run_dir(self, label: str | None, since: float) -> Path | None:
        """The run directory whose run.json carries this run's tagged label."""
        for run_dir in reversed(list_runs(self.runs_dir)):
            path = run_dir / RUN_JSON
            try:
                if path.stat().st_mtime < since - 1:
                    continue
                meta = loads_json(read_regular_bytes(path, MAX_JSON_FILE_BYTES), RUN_JSON)
            except (OSError, ValueError, RunFilesError):
                continue
            if (meta.get("config") or {}).get("label") == label:
                return run_dir
        return None

    # ----- looking -----------------------------------------------------------------------------
    def get(self, run_key: str) -> ManagedRun | None:
        with self._lock:
            return self._runs.get(run_key)

    def runs(self) -> list[ManagedRun]:
        """Every run still remembered, newest first."""
        with self._lock:
            return sorted(self._runs.values(), key=lambda r: r.started_at, reverse=True)

    def active(self) -> list[ManagedRun]:
        return [r for r in self.runs() if r.active]

    def finished(self) -> list[ManagedRun]:
        return [r for r in self.runs() if not r.active]

    def find(self, run_id: str) -> ManagedRun | None:
        """The managed run that wrote run directory ``run_id``."""
        return next((r for r in self.runs() if r.run_id == run_id), None)

    # ----- stopping ----------------------------------------------------------------------------
    def cancel(self, run_key: str) -> bool:
        """Ask a run to stop (in-flight requests are cancelled and stored as errors)."""
        run = self.get(run_key)
        if run is None or not run.active:
            return False
        run.cancel_event.set()
        run.message = "cancelling"
        return True

    def wait(self, run_key: str, timeout_s: float | None = None) -> ManagedRun:
        run = self.get(run_key)
        if run is None:
            raise KeyError(f"run {run_key!r} is not known to this manager")
        run.wait(timeout_s)
        return run

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Cancel every active run, wait for them, stop any endpoint left."""
        for run in self.active():
            run.cancel_event.set()
        deadline = time.monotonic() + timeout_s
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            endpoints = list(self._endpoints.values())
            self._endpoints.clear()
        for endpoint in endpoints:
            with contextlib.suppress(Exception):
                endpoint.stop()

    def _prune(self) -> None:
        done = [r for r in self._runs.values() if not r.active and r._done.is_set()]
        done.sort(key=lambda r: r.started_at)
        for run in done[: max(0, len(done) - self.keep_finished)]:
            self._runs.pop(run.id, None)
            self._threads.pop(run.id, None)


def _shutdown_at_exit(ref: weakref.ref[RunManager]) -> None:
    """No simulated or vLLM server outlives the process that started it."""
    manager = ref()
    if manager is not None:
        manager.shutdown(timeout_s=10.0)


def _state(status: str) -> RunState:
    if status in ("completed", "cancelled", "failed"):
        return status  # type: ignore[return-value]
    return "failed"
