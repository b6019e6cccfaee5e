"""Drive an endpoint with a list of RequestSpec and store what it measures (run files).

Public entry points: :func:`run_benchmark` (async) and :func:`run_benchmark_sync` (own event
loop; safe in a non-main thread, where no signal handler is installed).

Load patterns: ``concurrency`` (closed loop: C workers, each sends its next request as soon
as the previous one finished), ``rate`` (Poisson/gamma arrivals, optional concurrency cap)
and ``trace`` (the specs' own arrival times, optional cap). Warm-up requests run first and
are stored with ``warmup: true`` and excluded from the summary. The run stops when every spec
was sent and finished, when ``duration_s`` has passed (no new request is sent; those in flight
finish), when the error rate exceeds ``max_error_rate`` (in-flight requests are cancelled; run
status ``failed``), when the endpoint is lost (a request failed below HTTP and the endpoint no
longer answers: status ``failed``, ``endpoint lost after N successful requests``), or on cancel
(in-flight requests cancelled and stored as errors; status ``cancelled``). A run that went to
its end is ``failed`` all the same when no request succeeded or more than
``max_failed_share`` of them failed: its figures would measure the failures, not the serving.
In every case run.json, the summary and result.json are written, with every row collected.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import secrets
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from benchmarks_runner.config import RunConfig
from benchmarks_runner.errors import (
    BenchmarkError,
    EndpointError,
    EndpointUnreachable,
    ModelNotServed,
    ProbeFailed,
)
from benchmarks_runner.http_client import EndpointClient, StreamResult, TlsOptions, one_line
from benchmarks_runner.metrics import build_vllm_result, compute_summary
from benchmarks_runner.prompts import (
    Calibration,
    PromptBuilder,
    ServerFeatures,
    fit_calibration,
    request_body,
)
from benchmarks_runner.self_checks import RunObservations, prompt_calibration, run_all
from benchmarks_runner.server_metrics import MetricsScraper, server_flags_from_info
from benchmarks_runner.workload import RequestSpec, arrival_times, with_arrivals
from planner.run_files import RequestRecord, RunWriter, utc_now_iso

log = logging.getLogger(__name__)
#: requests a warm-up without a concurrency of its own (a rate run's) keeps in flight
WARMUP_WIDTH = 8
SIMULATED_OWNER = "servewise-simulated"
SIMULATED_HEADER = "x-servewise-simulated"
PROBE_WORDS = (16, 256)
_perf = time.perf_counter

CancelEvent = asyncio.Event | threading.Event


@dataclass(frozen=True, slots=True)
class ProgressSnapshot:
    """Live state of a run, handed to the ``progress`` callback about twice a second."""

    requests_done: int
    requests_failed: int
    requests_total: int
    elapsed_s: float
    output_tok_per_s: float
    ttft_ms_p50: float | None
    ttft_ms_p99: float | None
    kv_cache_usage: float | None
    phase: str = "measure"


@dataclass
class RunResult:
    """Outcome of :func:`run_benchmark`; the run files under ``run_dir`` hold everything."""

    run_id: str
    run_dir: Path
    status: str
    summary: dict[str, Any] | None
    self_checks: list[dict[str, Any]]
    error: str | None
    result: dict[str, Any] | None = None

    @property
    def result_json_path(self) -> Path:
        return self.run_dir / "result.json"


@dataclass
class _Live:
    done: int = 0
    failed: int = 0
    out_tokens: int = 0
    ttfts_ms: list[float] = field(default_factory=list)
    inflight: int = 0


@dataclass(frozen=True, slots=True)
class EndpointInfo:
    models: list[str]
    simulated: bool
    server_version: str | None


async def preflight(client: EndpointClient, model: str) -> EndpointInfo:
    """Check /v1/models lists ``model``; detect a simulated server; read /version."""
    status, headers, obj = await client.get_json("/v1/models", timeout_s=15.0)
    simulated = headers.get(SIMULATED_HEADER) == "1"
    models: list[str] = []
    if status == 200 and isinstance(obj, dict) and isinstance(obj.get("data"), list):
        for m in obj["data"]:
            if isinstance(m, dict) and "id" in m:
                models.append(str(m["id"]))
                simulated = simulated or m.get("owned_by") == SIMULATED_OWNER
        if model not in models:
            raise ModelNotServed(
                f"model {model!r} is not served by {client.base_url}; /v1/models lists "
                f"{models or 'no model'}"
            )
    elif status != 404:
        raise EndpointError(f"{client.base_url}/v1/models answered HTTP {status}")
    version = None
    try:
        vstatus, _, vobj = await client.get_json("/version", timeout_s=5.0)
        if vstatus == 200 and isinstance(vobj, dict) and vobj.get("version"):
            version = str(vobj["version"])
    except EndpointError:
        pass
    return EndpointInfo(models, simulated, version)


async def probe_server(
    client: EndpointClient, config: RunConfig, builder: PromptBuilder
) -> tuple[Calibration, ServerFeatures, list[str]]:
    """Probe requests (``max_tokens=1``): which optional fields the server accepts, and
    tokens-per-word from ``usage.prompt_tokens`` for two prompt sizes."""
    path = "/v1/chat/completions" if config.api == "chat" else "/v1/completions"
    chat = config.api == "chat"
    notes: list[str] = []

    async def probe(words: int, feats: ServerFeatures, use: bool) -> StreamResult:
        body = request_body(
            api=config.api,
            model=config.model,
            text=builder.probe_text(words),
            max_tokens=1,
            features=feats,
            use_ignore_eos=use,
            use_min_tokens=use,
            use_continuous_usage=use,
            temperature=config.temperature,
            extra_body=config.extra_body,
        )
        res = StreamResult(request_id=f"servewise-probe-{words}-{time.monotonic_ns()}")
        await client.stream(path, body, res, chat=chat)
        return res

    full = ServerFeatures()
    features = full
    first = await probe(PROBE_WORDS[0], full, True)
    if not first.ok and first.http_status in (400, 422):
        plain = await probe(PROBE_WORDS[0], full, False)
        if not plain.ok:
            raise ProbeFailed(f"probe request failed: {plain.error}")
        accepted = {}
        for name in ("ignore_eos", "min_tokens", "continuous_usage_stats"):
            only = ServerFeatures(
                **{k: k == name for k in ("ignore_eos", "min_tokens", "continuous_usage_stats")}
            )
            accepted[name] = (await probe(PROBE_WORDS[0], only, True)).ok
        features = ServerFeatures(**accepted)
        rejected = [k for k, v in accepted.items() if not v]
        notes.append(f"server rejected {rejected}; requests are sent without them")
        first = plain
    elif not first.ok:
        if first.http_status in (401, 403):
            raise ProbeFailed(f"probe request answered HTTP {first.http_status}: check the API key")
        raise ProbeFailed(f"probe request failed: {first.error}")
    if not config.calibrate:
        return Calibration(), features, notes
    points: list[tuple[int, int]] = []
    if first.prompt_tokens:
        points.append((PROBE_WORDS[0], first.prompt_tokens))
        second = await probe(PROBE_WORDS[1], features, True)
        if second.ok and second.prompt_tokens:
            points.append((PROBE_WORDS[1], second.prompt_tokens))
    else:
        notes.append("server reported no usage.prompt_tokens; assumed 1 token per word")
    return fit_calibration(points), features, notes


def _relative(times: list[float], t0: float) -> list[float]:
    """Times relative to the run start, rounded to the microsecond (vectorised: hot path)."""
    if len(times) < 8:
        return [round(t - t0, 6) for t in times]
    out: list[float] = np.round(np.asarray(times) - t0, 6).tolist()
    return out


class _Run:
    """State of one run: the client, the writer, live counters and the phase machinery."""

    def __init__(
        self,
        config: RunConfig,
        client: EndpointClient,
        writer: RunWriter,
        progress: Callable[[ProgressSnapshot], None] | None,
    ) -> None:
        self.config = config
        self.client = client
        self.writer = writer
        self.progress = progress
        self.chat = config.api == "chat"
        self.path = "/v1/chat/completions" if self.chat else "/v1/completions"
        self.t0 = _perf()
        self.records: list[RequestRecord] = []
        self.live = _Live()
        self.total = 0
        self.phase = "setup"
        self.phase_start = self.t0
        self.phase_end: float | None = None
        self.stop_reason: str | None = None
        self.status = "completed"
        self.stop_dispatch = False
        self.tasks: set[asyncio.Task[None]] = set()
        self.dispatch_lags: list[float] = []
        self.dispatched = 0
        self.first_dispatch: float | None = None
        self.last_dispatch: float | None = None
        self.inflight_samples: list[int] = []
        self.loop_lags: list[float] = []
        self.scraper: MetricsScraper | None = None
        self._seq = 0
        self._liveness: asyncio.Task[None] | None = None
        self._last_liveness = -math.inf

    # ------------------------------------------------------------------ one request

    def _record(
        self, spec: RequestSpec, res: StreamResult, warmup: bool, due: float, failed_at: float
    ) -> None:
        try:
            record = self._record_of(spec, res, warmup, due, failed_at)
        except ValidationError as exc:
            # a value the run files cannot hold: the request is an error that says which
            first = exc.errors()[0]
            field_name = ".".join(str(p) for p in first["loc"]) or "record"
            res.error = one_line(
                f"not recordable: {field_name}={first.get('input')!r}: "
                f"{first['msg'].removeprefix('Value error, ')}",
                300,
            )
            res.prompt_tokens = res.output_tokens = None
            res.chunk_tokens, res.chunk_times = [], []
            res.first_chunk = res.first_content = None
            record = self._record_of(spec, res, warmup, due, failed_at)
        self.records.append(record)
        self.writer.append_requests([record])
        ok = record.ok
        if warmup:
            if res.transport_error:
                self._check_endpoint_soon(record.error or "connection failed")
            return
        live = self.live
        live.done += 1
        if ok:
            live.out_tokens += res.output_tokens or sum(res.chunk_tokens)
            if res.first_chunk is not None:
                live.ttfts_ms.append((res.first_chunk - res.start) * 1000)
        else:
            live.failed += 1
            if res.transport_error:
                self._check_endpoint_soon(record.error or "connection failed")
            cfg = self.config
            if (
                cfg.max_error_rate is not None
                and live.done >= cfg.min_requests_for_error_rate
                and live.failed / live.done > cfg.max_error_rate
                and self.stop_reason is None
            ):
                self.stop(
                    f"aborted: error rate {live.failed}/{live.done} = "
                    f"{live.failed / live.done:.2f} exceeds max_error_rate "
                    f"{cfg.max_error_rate}; last error: {record.error}",
                    status="failed",
                )

    def _record_of(
        self, spec: RequestSpec, res: StreamResult, warmup: bool, due: float, failed_at: float
    ) -> RequestRecord:
        t0 = self.t0
        ok = res.ok
        end = res.end if ok else (res.end or failed_at)
        return RequestRecord(
            request_id=res.request_id,
            request_index=spec.request_index,
            warmup=warmup,
            scheduled_s=round(due - t0, 6),
            start_s=round(res.start - t0, 6),
            first_chunk_s=None if res.first_chunk is None else round(res.first_chunk - t0, 6),
            first_content_s=(
                None if res.first_content is None else round(res.first_content - t0, 6)
            ),
            end_s=None if end is None else round(end - t0, 6),
            chunk_times_s=_relative(res.chunk_times, t0),
            chunk_tokens=res.chunk_tokens,
            prompt_tokens=res.prompt_tokens,
            output_tokens=res.output_tokens,
            input_len_target=spec.input_len,
            output_len_target=spec.output_len,
            status="ok" if ok else "error",
            http_status=res.http_status,
            error=None if ok else (res.error or "failed"),
        )

    async def _one(self, spec: RequestSpec, body: bytes, warmup: bool, due: float) -> None:
        self._seq += 1
        res = StreamResult(request_id=f"sw-{self.writer.run_id}-{'w' if warmup else ''}{self._seq}")
        self.live.inflight += 1
        try:
            await self.client.stream(self.path, body, res, chat=self.chat)
        except asyncio.CancelledError:
            self._record(spec, res, warmup, due, _perf())
            raise
        finally:
            self.live.inflight -= 1
        self._record(spec, res, warmup, due, _perf())

    # ------------------------------------------------------------------ control

    def _check_endpoint_soon(self, error: str) -> None:
        """A request failed below HTTP: is the endpoint still there? (one check at a time, at
        most one a second; a server that drops streams but answers stays in the run)."""
        now = _perf()
        running = self._liveness is not None and not self._liveness.done()
        if self.stop_reason is not None or running or now - self._last_liveness < 1.0:
            return
        self._last_liveness = now
        self._liveness = asyncio.get_running_loop().create_task(self._check_endpoint(error))

    async def _check_endpoint(self, error: str) -> None:
        try:
            await self.client.get("/v1/models", timeout_s=min(5.0, self.config.connect_timeout_s))
        except EndpointUnreachable:
            live = self.live
            self.stop(
                f"endpoint lost after {live.done - live.failed} successful requests "
                f"({live.done} of {self.total} finished); last error: {error}",
                status="failed",
            )

    async def finish_checks(self) -> None:
        if self._liveness is not None and not self._liveness.done():
            self._liveness.cancel()
            await asyncio.gather(self._liveness, return_exceptions=True)

    def stop(self, reason: str, *, status: str) -> None:
        """Stop sending and cancel in-flight requests (they are stored as errors)."""
        if self.stop_reason is None:
            self.stop_reason = reason
            self.status = status
        self.stop_dispatch = True
        for t in list(self.tasks):
            t.cancel()

    def _track(self, task: asyncio.Task[None]) -> None:
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _closed_loop(
        self, items: Sequence[tuple[RequestSpec, bytes]], concurrency: int, warmup: bool
    ) -> None:
        queue = deque(items)

        async def worker() -> None:
            while queue and not self.stop_dispatch:
                spec, body = queue.popleft()
                now = _perf()
                self.dispatched += 0 if warmup else 1
                await self._one(spec, body, warmup, now)

        workers = [asyncio.create_task(worker()) for _ in range(min(concurrency, len(items)))]
        for w in workers:
            self._track(w)
        await asyncio.gather(*workers, return_exceptions=True)

    async def _open_loop(self, items: Sequence[tuple[RequestSpec, bytes]], cap: int | None) -> None:
        sem = asyncio.Semaphore(cap) if cap else None
        start = self.phase_start
        pending: list[asyncio.Task[None]] = []

        async def limited(spec: RequestSpec, body: bytes, due: float) -> None:
            if sem is None:
                await self._one(spec, body, False, due)
                return
            async with sem:
                if self.stop_dispatch and self.stop_reason is not None:
                    return
                await self._one(spec, body, False, due)

        for spec, body in items:
            if self.stop_dispatch:
                break
            due = start + float(spec.arrival_s or 0.0)
            delay = due - _perf()
            if delay > 0:
                await asyncio.sleep(delay)
                if self.stop_dispatch:
                    break
            now = _perf()
            self.dispatch_lags.append(max(0.0, now - due))
            if self.first_dispatch is None:
                self.first_dispatch = now
            self.last_dispatch = now
            self.dispatched += 1
            task = asyncio.create_task(limited(spec, body, due))
            self._track(task)
            pending.append(task)
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    async def _sampler(self) -> None:
        """Samples in-flight requests (Little's law) and event-loop lag every 50 ms."""
        interval = 0.05
        while True:
            t = _perf()
            await asyncio.sleep(interval)
            self.loop_lags.append(max(0.0, _perf() - t - interval))
            if self.phase == "measure":
                self.inflight_samples.append(self.live.inflight)

    def snapshot(self) -> ProgressSnapshot:
        live = self.live
        end = self.phase_end if self.phase_end is not None else _perf()
        elapsed = end - self.phase_start if self.phase in ("measure", "done") else 0.0
        p50 = p99 = None
        if live.ttfts_ms:
            p50, p99 = (float(v) for v in np.percentile(live.ttfts_ms, [50, 99]))
        kv = self.scraper.stats.kv_usage() if self.scraper else None
        return ProgressSnapshot(
            requests_done=live.done,
            requests_failed=live.failed,
            requests_total=self.total,
            elapsed_s=elapsed,
            output_tok_per_s=live.out_tokens / elapsed if elapsed > 0 else 0.0,
            ttft_ms_p50=p50,
            ttft_ms_p99=p99,
            kv_cache_usage=kv,
            phase=self.phase,
        )

    def emit_progress(self) -> None:
        if self.progress is None:
            return
        try:
            self.progress(self.snapshot())
        except Exception:  # a broken callback must not break the run
            log.exception("progress callback failed")

    async def _progress_loop(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            self.emit_progress()


async def _watch_cancel(cancel: CancelEvent, run: _Run) -> None:
    await _wait_for(cancel)
    run.stop("cancelled by the user", status="cancelled")


def _prepare_specs(config: RunConfig, specs: Sequence[RequestSpec]) -> list[RequestSpec]:
    specs = list(specs)
    if config.load == "rate" and config.request_rate is not None:
        if any(s.arrival_s is None for s in specs):
            specs = with_arrivals(
                specs,
                arrival_times(len(specs), config.request_rate, config.burstiness, config.seed),
            )
    elif config.load == "trace":
        missing = [s.request_index for s in specs if s.arrival_s is None]
        if missing:
            raise BenchmarkError(
                f"load 'trace' needs arrival_s on every spec; {len(missing)} have none "
                f"(first: request {missing[0]})"
            )
        specs.sort(key=lambda s: float(s.arrival_s or 0.0))
    return specs


def _offered_rate(config: RunConfig, specs: Sequence[RequestSpec]) -> float | None:
    if config.load == "rate":
        return config.request_rate
    if config.load == "trace" and len(specs) > 1:
        span = float(specs[-1].arrival_s or 0.0) - float(specs[0].arrival_s or 0.0)
        return (len(specs) - 1) / span if span > 0 else None
    return None


async def run_benchmark(
    config: RunConfig,
    specs: list[RequestSpec],
    runs_dir: Path,
    *,
    plan: dict[str, Any] | None = None,
    progress: Callable[[ProgressSnapshot], None] | None = None,
    cancel: CancelEvent | None = None,
) -> RunResult:
    """Run ``specs`` against ``config.base_url`` and write a run directory under ``runs_dir``.

    Raises :class:`~benchmarks_runner.errors.EndpointUnreachable`,
    :class:`~benchmarks_runner.errors.ModelNotServed`,
    :class:`~benchmarks_runner.errors.ProbeFailed` or
    :class:`~benchmarks_runner.errors.ConfigError` when the run could not start at all (the
    run directory is still written, with status ``failed`` and the reason in ``error``).
    Returns a :class:`RunResult` otherwise, also when requests failed or the run was cancelled.
    """
    writer = RunWriter(Path(runs_dir))
    specs = _prepare_specs(config, specs)
    public = config.public_dict() | {"num_requests": len(specs)}
    if specs:  # planned means at top level, as the store reads them
        public["input_len"] = round(sum(s.input_len for s in specs) / len(specs))
        public["output_len"] = round(sum(s.output_len for s in specs) / len(specs))
        # the share of prompt tokens that are a prefix shared with other requests, as sent
        # (a group's prefix is cut to its shortest prompt: less than the planned share)
        shared = sum(s.prefix_len for s in specs if s.prefix_group)
        public["shared_prefix_share"] = round(shared / max(1, sum(s.input_len for s in specs)), 4)
    writer.write_meta(
        endpoint={
            "base_url": config.root_url,
            "api": config.api,
            "server_version": None,
            "server_flags": None,
        },
        model=config.model,
        client_host=socket.gethostname(),
        config=public,
        plan=plan,
    )
    gc_state = _quiet_gc()
    try:
        for secret in config.secrets():
            writer.scrubber.add(secret)
        async with client_for(config) as client:
            if cancel is None:
                return await _run_with_client(config, specs, writer, client, progress, None)
            return await _cancellable(
                config, specs, writer, client, progress, cancel, time.monotonic()
            )
    except BenchmarkError as exc:
        writer.write_meta(status="failed", finished_at=utc_now_iso(), error=one_line(str(exc)))
        raise
    except asyncio.CancelledError:
        writer.write_meta(
            status="cancelled", finished_at=utc_now_iso(), error="the run's task was cancelled"
        )
        raise
    except Exception as exc:  # keep run.json truthful, then let the caller see the bug
        writer.write_meta(
            status="failed",
            finished_at=utc_now_iso(),
            error=one_line(f"internal error: {type(exc).__name__}: {exc}"),
        )
        raise
    finally:
        _restore_gc(gc_state)
        writer.close()


def record_cancelled_run(
    runs_dir: Path | str, config: RunConfig | None, reason: str, *, model: str | None = None
) -> RunResult:
    """The run files of a run cancelled before :func:`run_benchmark` began (while its command
    read a trace, say): ``run.json`` says ``cancelled`` and why, no request was sent. Without a
    config (its arguments not checked yet) the endpoint is not recorded: a URL not yet
    checked may hold credentials."""
    writer = RunWriter(Path(runs_dir))
    try:
        if config is not None:
            for secret in config.secrets():
                writer.scrubber.add(secret)
        writer.write_meta(
            endpoint={
                "base_url": config.root_url if config is not None else None,
                "api": config.api if config is not None else None,
                "server_version": None,
                "server_flags": None,
            },
            model=config.model if config is not None else model,
            client_host=socket.gethostname(),
            config=config.public_dict() if config is not None else None,
            status="cancelled",
            finished_at=utc_now_iso(),
            error=reason,
        )
    finally:
        writer.close()
    return RunResult(writer.run_id, writer.dir, "cancelled", None, [], reason)


async def _wait_for(cancel: CancelEvent) -> None:
    if isinstance(cancel, asyncio.Event):
        await cancel.wait()
    else:
        while not cancel.is_set():
            await asyncio.sleep(0.05)


async def _cancellable(
    config: RunConfig,
    specs: list[RequestSpec],
    writer: RunWriter,
    client: EndpointClient,
    progress: Callable[[ProgressSnapshot], None] | None,
    cancel: CancelEvent,
    started_s: float,
) -> RunResult:
    """The run, where a cancel before its first request (while the preflight and the probes
    wait on a slow endpoint) stops it at once: nothing was measured, the run is ``cancelled``.
    Once requests are sent, the run's own watcher cancels it, keeping every row."""
    sending = asyncio.Event()
    main = asyncio.ensure_future(
        _run_with_client(config, specs, writer, client, progress, cancel, sending)
    )
    watcher = asyncio.ensure_future(_wait_for(cancel))
    try:
        await asyncio.wait({main, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if main.done() or sending.is_set():
            return await main
        main.cancel()
        # whatever the cancelled setup ends with (a probe's error too), the user stopped it
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await main
        if main.done() and not main.cancelled() and main.exception() is None:
            return main.result()  # it finished before the cancel reached it
    except asyncio.CancelledError:  # the caller's task was cancelled: so is the run
        main.cancel()
        raise
    finally:
        watcher.cancel()
    error = (
        f"cancelled by the user before the first request "
        f"({time.monotonic() - started_s:,.1f} s into checking the endpoint); nothing measured"
    )
    writer.write_meta(status="cancelled", finished_at=utc_now_iso(), error=error)
    return RunResult(writer.run_id, writer.dir, "cancelled", None, [], error)


def client_for(config: RunConfig) -> EndpointClient:
    """The endpoint client of a run (raises ConfigError when the key's variable is unset)."""
    return EndpointClient(
        config.root_url,
        api_key=config.resolved_api_key(),
        basic_auth=config.resolved_basic_auth(),
        headers=config.headers,
        tls=TlsOptions(
            config.tls_verify, config.tls_ca_file, config.tls_client_cert, config.tls_client_key
        ),
        connect_timeout_s=config.connect_timeout_s,
        read_timeout_s=config.read_timeout_s,
        request_timeout_s=config.request_timeout_s,
    )


async def check_endpoint(config: RunConfig) -> EndpointInfo:
    """The preflight of a run alone (does /v1/models list the model?): a run that must read a
    large trace first learns in a second that the endpoint is not there. Raises what
    :func:`preflight` raises."""
    async with client_for(config) as client:
        return await preflight(client, config.model)


def _quiet_gc() -> tuple[int, int, int]:
    """Keep garbage-collector pauses out of the chunk timestamps (as vLLM's
    ``freeze_gc_heap``): move what exists to the permanent generation and make collections
    rare while the run lasts (a full pass over a big heap stalls the loop for tens of ms)."""
    old = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(max(old[0], 50_000), max(old[1], 50), max(old[2], 100))
    return old


def _restore_gc(old: tuple[int, int, int]) -> None:
    gc.set_threshold(*old)
    gc.unfreeze()


async def _run_with_client(
    config: RunConfig,
    specs: list[RequestSpec],
    writer: RunWriter,
    client: EndpointClient,
    progress: Callable[[ProgressSnapshot], None] | None,
    cancel: CancelEvent | None,
    sending: asyncio.Event | None = None,
) -> RunResult:
    run = _Run(config, client, writer, progress)
    info = EndpointInfo([], False, None)
    if config.preflight:
        info = await preflight(client, config.model)
    prompt_seed = config.prompt_seed
    if prompt_seed is None:  # prompts of their own: no prefix-cache hits on an earlier run's
        prompt_seed = secrets.randbits(31)
    builder = PromptBuilder(Calibration(), seed=prompt_seed)
    features = ServerFeatures()
    notes: list[str] = []
    if config.preflight:
        calibration, features, notes = await probe_server(client, config, builder)
        builder = PromptBuilder(calibration, seed=prompt_seed)
    tokenizer = builder.calibration.as_dict() | {
        "prompt_seed": prompt_seed,
        "features_accepted": {
            "ignore_eos": features.ignore_eos,
            "min_tokens": features.min_tokens,
            "continuous_usage_stats": features.continuous_usage_stats,
        },
        "notes": notes,
    }
    writer.write_meta(
        endpoint={
            "base_url": config.root_url,
            "api": config.api,
            "server_version": info.server_version,
            "server_flags": None,
        },
        simulated=info.simulated,
        tokenizer=tokenizer,
    )

    def body_for(spec: RequestSpec, unique: str = "") -> bytes:
        return request_body(
            api=config.api,
            model=config.model,
            text=builder.text(spec, unique=unique),
            max_tokens=spec.output_len,
            features=features,
            use_ignore_eos=config.ignore_eos,
            use_min_tokens=config.use_min_tokens,
            use_continuous_usage=config.continuous_usage_stats,
            temperature=config.temperature,
            extra_body=config.extra_body,
        )

    warm_specs = [specs[i % len(specs)] for i in range(config.warmup)] if specs else []
    warm_items = [(s, body_for(s, f"-warmup-{i}")) for i, s in enumerate(warm_specs)]
    items = [(s, body_for(s)) for s in specs]
    run.total = len(items)

    background: list[asyncio.Task[None]] = []
    if config.scrape_metrics:
        metrics_path = config.metrics_url or "/metrics"
        run.scraper = MetricsScraper(
            client,
            metrics_path,
            lambda: round(_perf() - run.t0, 6),
            writer.append_metric_samples,
            interval_s=config.metrics_interval_s,
        )
        await run.scraper.scrape_once()  # baseline for counter deltas
        flags = server_flags_from_info(run.scraper.stats.info_labels)
        if flags:
            writer.write_meta(endpoint=writer.meta["endpoint"] | {"server_flags": flags})
        background.append(asyncio.create_task(run.scraper.run()))
    background.append(asyncio.create_task(run._sampler()))
    background.append(asyncio.create_task(run._progress_loop()))
    if cancel is not None:
        background.append(asyncio.create_task(_watch_cancel(cancel, run)))
        if sending is not None:
            sending.set()  # from here on the run's own watcher cancels it, keeping its rows

    cpu_fraction = None
    try:
        if warm_items and not run.stop_dispatch:
            run.phase = "warmup"
            width = config.concurrency or min(WARMUP_WIDTH, len(warm_items))
            await run._closed_loop(warm_items, width, True)
        run.stop_dispatch = run.stop_reason is not None
        run.phase = "measure"
        run.phase_start = _perf()
        if run.scraper is not None:
            run.scraper.measuring = True
        cpu0 = time.process_time()
        deadline_task = None
        if config.duration_s is not None:

            async def deadline() -> None:
                await asyncio.sleep(float(config.duration_s or 0))
                run.stop_dispatch = True

            deadline_task = asyncio.create_task(deadline())
        if not run.stop_dispatch:
            if config.load == "concurrency":
                await run._closed_loop(items, int(config.concurrency or 1), False)
            else:
                await run._open_loop(items, config.concurrency)
        if deadline_task is not None:
            deadline_task.cancel()
        phase_end = _perf()
        run.phase_end = phase_end
        if run.scraper is not None:
            run.scraper.measuring = False
        wall = phase_end - run.phase_start
        cpu_fraction = (time.process_time() - cpu0) / wall if wall > 0 else None
    finally:
        run.phase = "done"
        for t in background:
            t.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await run.finish_checks()
    if run.status == "completed":
        problem = run_outcome_problem([r for r in run.records if not r.warmup], config)
        if problem is not None:
            run.status, run.stop_reason = "failed", problem
    if (
        run.scraper is not None
        and run.status != "cancelled"
        and "endpoint lost" not in (run.stop_reason or "")
    ):
        await run.scraper.scrape_once()  # final sample for counter deltas
    duration = phase_end - run.phase_start
    measured = [r for r in run.records if not r.warmup]
    percentiles = sorted(set(config.percentiles) | {99.0})
    cap = config.concurrency
    rate = config.request_rate if config.load == "rate" else None
    summary = compute_summary(
        measured,
        duration,
        percentiles=percentiles,
        goodput_slos_ms={str(k): v for k, v in config.goodput_slos_ms.items()},
        max_concurrency=cap,
        request_rate=rate,
    )
    summary["warmup_requests"] = len(warm_items)
    summary["measure_start_s"] = round(run.phase_start - run.t0, 6)
    if run.scraper is not None:
        stats = run.scraper.stats
        summary["server_metrics"] = stats.as_dict()
        hits = stats.delta("vllm:prefix_cache_hits_total")
        queries = stats.delta("vllm:prefix_cache_queries_total")
        summary["server_prefix_cache_hit_rate"] = (
            hits / queries if hits is not None and queries else None
        )
        # speculative decoding: mean tokens a step accepted (beside TPOT in the summary)
        summary["server_spec_accept_len"] = stats.spec_accept_len()
    if run.first_dispatch is not None and run.last_dispatch is not None:
        window = run.last_dispatch - run.phase_start
    else:
        window = duration
    obs = RunObservations(
        load=config.load,
        duration_s=duration,
        rows=measured,
        all_rows=run.records,
        offered_rate=_offered_rate(config, specs),
        dispatched=run.dispatched,
        dispatch_window_s=window,
        dispatch_lags_s=run.dispatch_lags,
        cpu_fraction=cpu_fraction,
        loop_lag_p99_s=float(np.percentile(run.loop_lags, 99)) if run.loop_lags else None,
        inflight_mean=float(np.mean(run.inflight_samples)) if run.inflight_samples else None,
        concurrency=config.concurrency,
        scrape=run.scraper.stats if run.scraper else None,
        features=tokenizer["features_accepted"],
    )
    checks = run_all(obs)
    deviation, calib_check = prompt_calibration(measured)
    if calib_check is not None:
        checks.append(calib_check)
        tokenizer["deviation"] = deviation
    result = build_vllm_result(
        measured,
        summary,
        date=time.strftime("%Y%m%d-%H%M%S"),
        backend="openai-chat" if config.api == "chat" else "openai",
        label=config.label,
        model_id=config.model,
        num_prompts=len(specs),
        request_rate=rate,
        burstiness=config.burstiness,
        max_concurrency=config.concurrency,
    )
    writer.write_result(result)
    run.emit_progress()
    writer.write_meta(
        status=run.status,
        finished_at=utc_now_iso(),
        summary=summary,
        self_checks=checks,
        tokenizer=tokenizer,
        error=run.stop_reason if run.status != "completed" else None,
    )
    return RunResult(
        writer.run_id,
        writer.dir,
        run.status,
        summary,
        checks,
        run.stop_reason if run.status != "completed" else None,
        result,
    )


def run_outcome_problem(records: Sequence[RequestRecord], config: RunConfig) -> str | None:
    """Why a run that went to its end measured nothing usable, in words; None if it did.

    No request measured, none succeeded, or more than ``config.max_failed_share`` failed.
    """
    if not records:
        return "no request was measured"
    failed = [r for r in records if not r.ok]
    if not failed:
        return None
    common, times = Counter(r.error or "failed" for r in failed).most_common(1)[0]
    why = f"most common error ({times}x): {common}"
    if len(failed) == len(records):
        return f"no request succeeded: {len(failed)} of {len(records)} failed; {why}"
    share = len(failed) / len(records)
    limit = config.max_failed_share
    if limit is not None and share > limit:
        return (
            f"{len(failed)} of {len(records)} requests failed ({share:.0%}, more than the "
            f"{limit:.0%} max_failed_share allows); {why}"
        )
    return None


def run_benchmark_sync(
    config: RunConfig,
    specs: list[RequestSpec],
    runs_dir: Path,
    *,
    plan: dict[str, Any] | None = None,
    progress: Callable[[ProgressSnapshot], None] | None = None,
    cancel: threading.Event | None = None,
) -> RunResult:
    """Blocking :func:`run_benchmark` on a fresh event loop (usable from any thread).

    Pass a ``threading.Event`` as ``cancel`` to stop the run from another thread.
    """
    return asyncio.run(
        run_benchmark(config, specs, runs_dir, plan=plan, progress=progress, cancel=cancel)
    )
