"""A disaggregated plan served as two simulated pools behind one OpenAI-compatible router.

``python -m benchmarks_runner.simulated --plan PLAN`` with a disaggregated plan (its
``prefill``, ``decode`` and ``kv_link``) starts three processes on 127.0.0.1:

- a **prefill pool** and a **decode pool**: each the simulated server
  (:mod:`benchmarks_runner.simulated.server`) timed by :class:`PoolTiming`, one
  :class:`~benchmarks_runner.simulated.perf_timing.EngineTiming` a rank (an engine, or an
  attention-DP rank of one) of the pool's own resolved deployment and coefficients
  (:func:`planner.perf.disaggregated.pool_scenario`, :func:`~planner.perf.disaggregated.
  pool_deployment`: the very deployment the prediction prices). The prefill pool's scenario
  answers one token; the decode pool's ranks hold the transferred KV as cached prompt blocks,
  so they only decode (the last partial block of a prompt is computed in its first step, as
  an engine recomputes a prompt's last token). Each request goes to a rank drawn with the
  server's seed, the Poisson split of the load the prediction assumes (``rate / ranks`` a
  rank). Each pool serves its own ``/metrics`` (vLLM's names: running and waiting requests,
  KV usage, token and request counters, latency histograms);
- the **router** (this module's :func:`router_app`), the endpoint a client uses: as vLLM's
  disaggregated proxy (``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py``) it sends
  a request to the prefill pool with ``max_tokens=1`` and streaming off, waits for it, waits the
  KV transfer of its prompt (:class:`planner.perf.disaggregated.KvTransfer`, the formula the
  prediction uses: bytes of the prompt's KV over the link's streams, plus its latency), then
  streams the answer from the decode pool. ``GET /pools`` says where the pools are
  (``{"prefill": {"url", "metrics_url", "ranks"}, "decode": {...}, "kv_link": ...}``);
  ``GET /metrics`` serves the router's own counters (``servewise:kv_transfers_total``,
  ``servewise:kv_transfer_seconds_total``, ``servewise:kv_transfer_bytes_total``) and each
  pool's page with a ``pool="prefill"`` / ``pool="decode"`` label on every sample, so one
  scrape of the router records per-pool samples.

A pool's engine times its steps with the prediction's own function
(:meth:`planner.perf.disaggregated.PoolContext.fill_step_terms`), so a pool whose expert-
parallel group is larger than a board pays the all-to-all the prediction charges: inside an
NVL72 rack on NVLink, across nodes over the network less what the two-batch overlap hides.
:func:`planner.perf.disaggregated.replay_pools` steps the same engines on a virtual clock
(the run's latencies its prediction states).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
from aiohttp import web

from benchmarks_runner.simulated.perf_timing import EngineTiming
from benchmarks_runner.simulated.server import serve_app
from planner.catalog import Catalog
from planner.perf.deployment import Deployment
from planner.perf.disaggregated import (
    KvTransfer,
    kv_link,
    pool_context,
    pool_deployment,
    pool_scenario,
)
from planner.perf.scenario import Scenario
from planner.plan import Plan

PoolRole = Literal["prefill", "decode"]
ROLES: tuple[PoolRole, PoolRole] = ("prefill", "decode")
#: how long the launcher waits for a pool's LISTENING line (a cached fit: ~2 s)
POOL_START_TIMEOUT_S = 120.0


class PoolTiming:
    """``TimingModel`` and ``EngineState`` of one pool: its ranks' engines side by side.

    A request goes to a rank drawn with ``seed`` (each rank then sees a Poisson share of the
    pool's arrivals, as the prediction's ``rate / ranks``). On the decode pool the whole
    prompt is cached: its KV came from the prefill pool. The pool's gauges are the ranks'
    sums (running, waiting, preemptions) and mean (KV usage), as a scrape of a vLLM
    data-parallel server adds up its engines.
    """

    def __init__(self, role: PoolRole, ranks: Sequence[EngineTiming], seed: int = 0) -> None:
        if not ranks:
            raise ValueError("a pool needs at least one rank")
        self.role = role
        self.ranks = list(ranks)
        self.rng = random.Random(seed)
        # the plan's setting, as /metrics reports it (a decode rank reads the transferred KV as
        # cached blocks whatever it says)
        self.prefix_caching = bool(self.ranks[0].deployment.scenario.enable_prefix_caching)

    async def tokens(
        self, prompt_tokens: int, output_tokens: int, cached_tokens: int = 0
    ) -> AsyncGenerator[int, None]:
        rank = self.ranks[self.rng.randrange(len(self.ranks))]
        cached = prompt_tokens if self.role == "decode" else cached_tokens
        stream = rank.tokens(prompt_tokens, output_tokens, cached)
        async with contextlib.aclosing(stream):
            async for produced in stream:
                yield produced

    @property
    def deployment(self) -> Deployment:
        return self.ranks[0].deployment

    @property
    def speculation(self) -> None:
        return None

    @property
    def max_num_seqs(self) -> int:
        return self.ranks[0].max_num_seqs

    @property
    def kv_capacity_tokens(self) -> int:
        return self.ranks[0].kv_capacity_tokens

    @property
    def running(self) -> int:
        return sum(r.running for r in self.ranks)

    @property
    def waiting(self) -> int:
        return sum(r.waiting for r in self.ranks)

    @property
    def kv_usage(self) -> float:
        return sum(r.kv_usage for r in self.ranks) / len(self.ranks)

    @property
    def preemptions(self) -> int:
        return sum(r.preemptions for r in self.ranks)


def pool_timing(
    plan: Plan,
    scenario: Scenario,
    role: PoolRole,
    catalog: Catalog,
    *,
    coefficients: Sequence[float] | None = None,
    slowdown: float = 1.0,
    seed: int = 0,
) -> PoolTiming:
    """The pool ``role`` of ``plan`` under ``scenario`` (lengths, load, engine settings): its
    deployment as the prediction resolves it, ``coefficients`` given or the fitted model's
    for that pool with the pools' fitted step scale (the model read from the fit cache when
    any process fitted it). Each rank's steps are the prediction's own
    (:meth:`planner.perf.disaggregated.PoolContext.fill_step_terms`: the step-time model's
    terms with a large EP group's all-to-all, on NVLink or over the network with the two-batch
    overlap)."""
    layout = plan.disaggregated_layout()
    if layout is None:
        raise ValueError("the plan is not disaggregated (it states no prefill/decode pools)")
    pool = layout.prefill if role == "prefill" else layout.decode
    sc = pool_scenario(scenario, pool, role)
    dep = pool_deployment(sc, catalog)
    if coefficients is None:
        from planner.perf.model import get_performance_model

        vector = [
            float(v)
            for v in pool_coefficients(get_performance_model(catalog), plan, scenario)[role]
        ]
    else:
        vector = [float(v) for v in coefficients]
    context = pool_context(sc, dep, vector, kv_link(layout.kv_link), role)
    ranks = []
    for _ in range(dep.replicas):
        rank = EngineTiming(
            dep,
            vector,
            slowdown=slowdown,
            prefix_caching=True if role == "decode" else None,
            step_terms=context.fill_step_terms,
        )
        rank.closed_loop = False  # a pool's arrivals are whatever the router sends
        ranks.append(rank)
    return PoolTiming(role, ranks, seed)


def kv_transfer_of(plan: Plan, scenario: Scenario, catalog: Catalog) -> KvTransfer:
    """The KV transfer between ``plan``'s pools (no coefficients needed)."""
    layout = plan.disaggregated_layout()
    if layout is None:
        raise ValueError("the plan is not disaggregated (it states no prefill/decode pools)")
    link = kv_link(layout.kv_link)
    pre = pool_deployment(pool_scenario(scenario, layout.prefill, "prefill"), catalog)
    dec = pool_deployment(pool_scenario(scenario, layout.decode, "decode"), catalog)
    return KvTransfer.between(pre, dec, layout, link)


# ----- the router --------------------------------------------------------------------------------
def pool_coefficients(model: Any, plan: Plan, scenario: Scenario) -> dict[str, list[float]]:
    """Each pool's fitted coefficient vector, as the prediction of ``plan`` under ``scenario``
    uses it (``model``: a :class:`planner.perf.model.PerformanceModel`)."""
    from planner.perf.disaggregated import disaggregated_model

    layout = plan.disaggregated_layout()
    if layout is None:
        raise ValueError("the plan is not disaggregated (it states no prefill/decode pools)")
    dm = disaggregated_model(model, scenario, layout)
    return {
        "prefill": [float(v) for v in dm.prefill.c],
        "decode": [float(v) for v in dm.decode.c],
    }


@dataclass
class PoolAddress:
    role: PoolRole
    url: str
    ranks: int

    @property
    def metrics_url(self) -> str:
        return f"{self.url}/metrics"


@dataclass
class _RouterStats:
    transfers: int = 0
    transfer_s: float = 0.0
    transfer_bytes: float = 0.0


class Router:
    """The OpenAI-compatible front of the two pools (see the module docstring)."""

    def __init__(
        self,
        prefill: PoolAddress,
        decode: PoolAddress,
        transfer: KvTransfer,
        *,
        slowdown: float = 1.0,
        link_name: str = "",
    ) -> None:
        self.prefill = prefill
        self.decode = decode
        self.transfer = transfer
        self.slowdown = slowdown
        self.link_name = link_name
        self.stats = _RouterStats()
        self._session: aiohttp.ClientSession | None = None

    async def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    @staticmethod
    def _forward_headers(request: web.Request) -> dict[str, str]:
        auth = request.headers.get("Authorization")
        return {"Authorization": auth} if auth else {}

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "/v1/completions")

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "/v1/chat/completions")

    async def _generate(self, request: web.Request, path: str) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return _error(400, "request body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object")
        session = await self.session()
        headers = self._forward_headers(request)
        # 1. the prompt on the prefill pool: one token, not streamed (vLLM's PD proxy)
        first = {k: v for k, v in body.items() if k not in ("stream_options", "min_tokens")}
        first |= {"max_tokens": 1, "stream": False}
        if "max_completion_tokens" in first:
            first["max_completion_tokens"] = 1
        async with session.post(self.prefill.url + path, json=first, headers=headers) as resp:
            answer = await resp.read()
            if resp.status != 200:
                return web.Response(
                    body=answer, status=resp.status, content_type="application/json"
                )
        try:
            prompt_tokens = int(json.loads(answer)["usage"]["prompt_tokens"])
        except (ValueError, KeyError, TypeError):
            return _error(502, "the prefill pool's answer carries no usage.prompt_tokens")
        # 2. its KV cache over the link
        seconds = self.transfer.seconds_of(prompt_tokens) * self.slowdown
        self.stats.transfers += 1
        self.stats.transfer_s += seconds
        self.stats.transfer_bytes += self.transfer.bytes_of(prompt_tokens)
        await asyncio.sleep(seconds)
        # 3. the answer from the decode pool, passed through as it streams
        async with session.post(self.decode.url + path, data=raw, headers=headers) as resp:
            out = web.StreamResponse(status=resp.status)
            out.content_type = resp.content_type
            if resp.headers.get("Cache-Control"):
                out.headers["Cache-Control"] = resp.headers["Cache-Control"]
            await out.prepare(request)
            async for chunk in resp.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    async def passthrough(self, request: web.Request) -> web.Response:
        """``/v1/models`` and ``/version``: the decode pool's (it serves the answers)."""
        session = await self.session()
        async with session.get(
            self.decode.url + request.path, headers=self._forward_headers(request)
        ) as resp:
            return web.Response(
                body=await resp.read(), status=resp.status, content_type=resp.content_type
            )

    async def health(self, request: web.Request) -> web.Response:
        session = await self.session()
        for pool in (self.prefill, self.decode):
            try:
                async with session.get(pool.url + "/health") as resp:
                    if resp.status != 200:
                        return web.Response(status=503, text=f"{pool.role} pool unhealthy")
            except aiohttp.ClientError:
                return web.Response(status=503, text=f"{pool.role} pool unreachable")
        return web.Response(status=200)

    async def pools(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                p.role: {"url": p.url, "metrics_url": p.metrics_url, "ranks": p.ranks}
                for p in (self.prefill, self.decode)
            }
            | {"kv_link": self.link_name}
        )

    async def metrics(self, request: web.Request) -> web.Response:
        s = self.stats
        lines = []
        for name, value, what in (
            ("servewise:kv_transfers_total", s.transfers, "KV transfers the router waited"),
            ("servewise:kv_transfer_seconds_total", s.transfer_s, "seconds of KV transfer"),
            ("servewise:kv_transfer_bytes_total", s.transfer_bytes, "bytes of KV moved"),
        ):
            lines += [f"# HELP {name} {what}", f"# TYPE {name} counter", f"{name} {value!r}"]
        session = await self.session()
        for pool in (self.prefill, self.decode):
            try:
                async with session.get(pool.metrics_url) as resp:
                    text = (await resp.read()).decode(errors="replace")
            except aiohttp.ClientError:
                continue
            lines += relabel(text, pool.role)
        return web.Response(
            text="\n".join(lines) + "\n", content_type="text/plain", charset="utf-8"
        )


def relabel(text: str, pool: str) -> list[str]:
    """A pool's Prometheus page with ``pool="<pool>"`` added to every sample (comments left
    out: two pools' families would repeat them)."""
    out = []
    label = f'pool="{pool}"'
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, brace, rest = line.partition("{")
        if brace:
            out.append(f"{name}{{{label},{rest}")
        else:
            metric, _, value = line.partition(" ")
            out.append(f"{metric}{{{label}}} {value}")
    return out


def _error(status: int, message: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": "BadRequestError", "code": status}}, status=status
    )


#: the application's router (aiohttp's typed application key)
ROUTER_KEY = web.AppKey("router", Router)


def router_app(router: Router) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)

    async def mark(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["x-servewise-simulated"] = "1"

    async def close(app: web.Application) -> None:
        await router.close()

    app.on_response_prepare.append(mark)
    app.on_cleanup.append(close)
    app.router.add_post("/v1/completions", router.completions)
    app.router.add_post("/v1/chat/completions", router.chat_completions)
    app.router.add_get("/v1/models", router.passthrough)
    app.router.add_get("/version", router.passthrough)
    app.router.add_get("/health", router.health)
    app.router.add_get("/metrics", router.metrics)
    app.router.add_get("/pools", router.pools)
    app[ROUTER_KEY] = router
    return app


async def serve_router(router: Router, host: str, port: int) -> None:
    await serve_app(router_app(router), host, port)


# ----- the pool processes ------------------------------------------------------------------------
class PoolProcesses:
    """The two pool servers as child processes (``python -m benchmarks_runner.simulated
    --pool ROLE ...``), each in the launcher's process group, stopped with it."""

    def __init__(self) -> None:
        self.children: list[subprocess.Popen[bytes]] = []

    def start(self, role: PoolRole, argv: Sequence[str]) -> int:
        """Start one pool; its port once it listens. Raises RuntimeError with the reason."""
        cmd = [sys.executable, "-m", "benchmarks_runner.simulated", *argv, "--pool", role]
        child = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.children.append(child)
        assert child.stdout is not None
        deadline = time.monotonic() + POOL_START_TIMEOUT_S
        buffer = b""
        with selectors.DefaultSelector() as selector:
            selector.register(child.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if selector.select(timeout=0.1):
                    chunk = os.read(child.stdout.fileno(), 4096)
                    if not chunk:
                        break
                    buffer += chunk
                    for line in buffer.decode(errors="replace").splitlines():
                        if line.startswith("LISTENING "):
                            return int(line.split()[1])
                elif child.poll() is not None:
                    break
        self.stop()
        raise RuntimeError(f"the {role} pool did not start (exit code {child.poll()})")

    def stop(self) -> None:
        for child in self.children:
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signal.SIGTERM)
        for child in self.children:
            try:
                child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(timeout=5)
            if child.stdout is not None:
                with contextlib.suppress(OSError):
                    child.stdout.close()
        self.children.clear()


__all__ = [
    "ROLES",
    "PoolAddress",
    "PoolProcesses",
    "PoolTiming",
    "Router",
    "kv_transfer_of",
    "pool_coefficients",
    "pool_timing",
    "relabel",
    "router_app",
    "serve_router",
]
