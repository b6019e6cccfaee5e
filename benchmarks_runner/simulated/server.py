"""A simulated OpenAI-compatible LLM server for tests, demos and client benchmarks.

Run: ``python -m benchmarks_runner.simulated --port 0 [options]``; it prints
``LISTENING <port>`` on stdout once it accepts connections. It is marked as simulated in
``/v1/models`` (``owned_by: servewise-simulated``) and by an ``x-servewise-simulated: 1``
header on every response, so the runner records ``simulated: true``.

It speaks as vLLM 0.33 does: ``/v1/completions`` and ``/v1/chat/completions`` (streaming and
not; ``stream_options.include_usage`` and ``continuous_usage_stats``; ``max_tokens``,
``ignore_eos`` and ``min_tokens`` honoured). A chat stream opens with a chunk that carries only
``{"role": "assistant", "content": ""}``, sent on admission; a reasoning model's first tokens
stream in ``delta.reasoning`` (``--reasoning-tokens``). ``/v1/models``, ``/version``,
``/health`` and ``/metrics``: vLLM's metric names in the Prometheus text format, the latency
metrics as real histograms (``# TYPE ... histogram``, cumulative ``_bucket{le=...}`` series with
vLLM's bucket bounds, ``_sum``, ``_count``).

Timing comes from a :class:`~benchmarks_runner.simulated.timing.TimingModel`, which yields a
request's tokens as they become ready: ``FixedTiming`` (``--ttft-ms``, ``--token-delay-ms``)
ignores load; with ``--gpu`` or ``--scenario`` it is
:class:`~benchmarks_runner.simulated.perf_timing.EngineTiming`, the performance model's own
engine for that plan in real time (continuous batching, queueing, KV capacity and preemption
come from it, and so do the running and waiting requests, KV usage and preemptions of
``/metrics``). A chunk of several tokens (``--tokens-per-chunk``) is sent when its last token is
ready.

Prompt tokens are counted as ``round(words * tokens_per_word)`` (+ a chat-template overhead
for chat), so the runner's calibration can be tested against a tokenizer that is not 1:1. The
prefix cache hashes prompts in 16-word blocks chained as vLLM chains its blocks: the leading
blocks an earlier prompt already sent are hits, reported in ``vllm:prefix_cache_hits_total``
and, with the engine timing of a plan that enables prefix caching, not prefilled again.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import math
import random
import selectors
import sys
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from benchmarks_runner.simulated.timing import EngineState, FixedTiming, TimingModel

SIMULATED_OWNER = "servewise-simulated"
CHAT_OVERHEAD_TOKENS = 8
PREFIX_BLOCK_WORDS = 16

# Bucket bounds of vLLM's latency histograms, seconds (vllm-project/vllm,
# vllm/v1/metrics/loggers.py, read 2026-12-01).
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                  5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
TOKEN_LATENCY_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
                           2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
REQUEST_LATENCY_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                             40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0,
                             7680.0)  # fmt: skip


@dataclass
class ServerOptions:
    models: list[str] = field(default_factory=lambda: ["sim-model"])
    error_rate: float = 0.0
    error_status: int = 500
    drop_rate: float = 0.0
    malformed_rate: float = 0.0
    stall_rate: float = 0.0
    stall_s: float = 1.0
    max_concurrency: int | None = None
    kv_capacity_tokens: int | None = None
    tokens_per_word: float = 1.0
    tokens_per_chunk: int = 1
    reasoning_tokens: int = 0
    eos_after: int | None = None
    reject_extensions: bool = False
    api_key: str | None = None
    seed: int = 0
    version: str = "0.0.0-servewise-simulated"


class Histogram:
    """A Prometheus histogram: cumulative buckets, sum and count."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str, labels: dict[str, str]) -> list[str]:
        out = [f"# HELP {name} simulated", f"# TYPE {name} histogram"]
        running = 0
        for bound, n in zip((*self.bounds, math.inf), self.counts, strict=True):
            running += n
            le = "+Inf" if bound == math.inf else repr(float(bound))
            out.append(f"{name}_bucket{_labels(labels | {'le': le})} {float(running)}")
        out.append(f"{name}_sum{_labels(labels)} {self.sum!r}")
        out.append(f"{name}_count{_labels(labels)} {float(self.count)}")
        return out


def _labels(labels: dict[str, str]) -> str:
    """``{k="v",...}`` with the text format's escapes (backslash, quote, newline)."""
    if not labels:
        return ""

    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels.items()) + "}"


@dataclass
class _Stats:
    running: int = 0
    waiting: int = 0
    kv_used: int = 0
    preemptions: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    success: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS_S))
    itl: Histogram = field(default_factory=lambda: Histogram(TOKEN_LATENCY_BUCKETS_S))
    e2e: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS_S))
    queue: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS_S))


@dataclass
class _Request:
    """One admitted generation: what it asks for and the faults drawn for it."""

    rid: str
    chat: bool
    model: str
    prompt_tokens: int
    cached_tokens: int
    n_out: int
    include_usage: bool
    continuous: bool
    drop: bool
    malformed: bool
    stall: bool
    fault_pos: float
    arrived: float


class SimulatedServer:
    def __init__(self, options: ServerOptions, timing: TimingModel) -> None:
        self.opt = options
        self.timing = timing
        self.engine = timing if isinstance(timing, EngineState) else None
        self.rng = random.Random(options.seed)
        self.stats = _Stats()
        self.sem = asyncio.Semaphore(options.max_concurrency) if options.max_concurrency else None
        self.prefix_blocks: OrderedDict[int, None] = OrderedDict()
        self._seq = 0

    # ------------------------------------------------------------------ helpers

    def _prompt_tokens(self, text: str, chat: bool) -> tuple[int, int]:
        """(prompt tokens, of which found in the prefix cache)."""
        words = text.split()
        n = max(1, round(len(words) * self.opt.tokens_per_word))
        hit_words = self._prefix_lookup(words)
        tpw = self.opt.tokens_per_word
        if getattr(self.timing, "prefix_caching", True) is not False:
            # vLLM keeps no prefix-cache stats when prefix caching is off
            self.stats.prefix_queries += round(len(words) * tpw)
            self.stats.prefix_hits += round(hit_words * tpw)
        return n + (CHAT_OVERHEAD_TOKENS if chat else 0), round(hit_words * tpw)

    def _prefix_lookup(self, words: list[str]) -> int:
        """Words of the leading 16-word blocks already seen, chained by hash (like vLLM's)."""
        h = 0
        hit_blocks = 0
        matching = True
        for b in range(len(words) // PREFIX_BLOCK_WORDS):
            h = hash((h, tuple(words[b * PREFIX_BLOCK_WORDS : (b + 1) * PREFIX_BLOCK_WORDS])))
            if matching and h in self.prefix_blocks:
                hit_blocks += 1
                self.prefix_blocks.move_to_end(h)
            else:
                matching = False
                self.prefix_blocks[h] = None
        while len(self.prefix_blocks) > 200_000:
            self.prefix_blocks.popitem(last=False)
        return hit_blocks * PREFIX_BLOCK_WORDS

    @staticmethod
    def _error(status: int, message: str, kind: str) -> web.Response:
        return web.json_response(
            {"error": {"message": message, "type": kind, "code": status}}, status=status
        )

    def _check_auth(self, request: web.Request) -> web.Response | None:
        if self.opt.api_key is None:
            return None
        if request.headers.get("Authorization") != f"Bearer {self.opt.api_key}":
            return self._error(401, "invalid API key", "AuthenticationError")
        return None

    # ------------------------------------------------------------------ endpoints

    async def models(self, request: web.Request) -> web.Response:
        if (denied := self._check_auth(request)) is not None:
            return denied
        now = int(time.time())
        data = [
            {
                "id": m,
                "object": "model",
                "created": now,
                "owned_by": SIMULATED_OWNER,
                "root": m,
                "parent": None,
                "max_model_len": 1_000_000,
            }
            for m in self.opt.models
        ]
        return web.json_response({"object": "list", "data": data})

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self.opt.version})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def metrics(self, request: web.Request) -> web.Response:
        s = self.stats
        engine = self.engine
        labels = {"model_name": self.opt.models[0], "engine": "0"}
        if engine is not None:
            running, waiting = engine.running, engine.waiting
            kv, preemptions = engine.kv_usage, engine.preemptions
            capacity: int | None = engine.kv_capacity_tokens
        else:
            capacity = self.opt.kv_capacity_tokens
            running, waiting, preemptions = s.running, s.waiting, s.preemptions
            kv = min(1.0, s.kv_used / capacity) if capacity else 0.0
        lines: list[str] = []

        def metric(name: str, kind: str, value: float, tags: dict[str, str] = labels) -> None:
            lines.append(f"# HELP {name} simulated")
            lines.append(f"# TYPE {name} {kind}")
            lines.append(f"{name}{_labels(tags)} {float(value)!r}")

        metric("vllm:num_requests_running", "gauge", running)
        metric("vllm:num_requests_waiting", "gauge", waiting)
        metric("vllm:kv_cache_usage_perc", "gauge", kv)
        metric("vllm:num_preemptions_total", "counter", preemptions)
        metric("vllm:prefix_cache_queries_total", "counter", s.prefix_queries)
        metric("vllm:prefix_cache_hits_total", "counter", s.prefix_hits)
        metric("vllm:prompt_tokens_total", "counter", s.prompt_tokens)
        metric("vllm:generation_tokens_total", "counter", s.generation_tokens)
        metric("vllm:request_success_total", "counter", s.success)
        spec = getattr(self.timing, "speculation", None)
        if spec is not None:
            # a simulated step is one accepted token a sequence (planner.perf.speculative): the
            # decode tokens came from drafts of tau accepted tokens each, k drafted a step
            tau = spec.mean_accepted_length
            drafts = max(0, s.generation_tokens - s.ttft.count) / tau
            metric("vllm:spec_decode_num_drafts_total", "counter", drafts)
            metric(
                "vllm:spec_decode_num_draft_tokens_total", "counter", drafts * spec.num_spec_tokens
            )
            metric("vllm:spec_decode_num_accepted_tokens_total", "counter", drafts * (tau - 1))
        lines += s.ttft.lines("vllm:time_to_first_token_seconds", labels)
        lines += s.itl.lines("vllm:inter_token_latency_seconds", labels)
        lines += s.e2e.lines("vllm:e2e_request_latency_seconds", labels)
        lines += s.queue.lines("vllm:request_queue_time_seconds", labels)
        max_seqs = getattr(self.timing, "max_num_seqs", None) or self.opt.max_concurrency
        info = {
            "simulated": "true",
            "max_concurrency": str(max_seqs),
            "kv_capacity_tokens": str(capacity),
            "engine": "0",
            **self._cache_config_labels(capacity),
        }
        metric("vllm:cache_config_info", "gauge", 1.0, info)
        return web.Response(
            text="\n".join(lines) + "\n", content_type="text/plain", charset="utf-8"
        )

    def _cache_config_labels(self, capacity: int | None) -> dict[str, str]:
        """vLLM's own labels of ``vllm:cache_config_info`` for the plan the engine timing serves
        (block_size, num_gpu_blocks, gpu_memory_utilization, cache_dtype,
        enable_prefix_caching): what a diagnosis reads of a real server's settings."""
        deployment = getattr(self.timing, "deployment", None)
        if deployment is None:
            return {}
        engine = deployment.scenario.engine_config()
        block = int(deployment.block_size)
        return {
            "block_size": str(block),
            "num_gpu_blocks": str(capacity // block if capacity else 0),
            "gpu_memory_utilization": str(engine.gpu_memory_utilization),
            "cache_dtype": str(engine.kv_cache_dtype),
            "enable_prefix_caching": str(bool(getattr(self.timing, "prefix_caching", False))),
        }

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        if (denied := self._check_auth(request)) is not None:
            return denied
        arrived = time.monotonic()
        try:
            body = await request.json()
        except ValueError:
            return self._error(400, "request body is not JSON", "BadRequestError")
        if not isinstance(body, dict):
            return self._error(400, "request body must be a JSON object", "BadRequestError")
        model = body.get("model")
        if model not in self.opt.models:
            return self._error(404, f"The model `{model}` does not exist.", "NotFoundError")
        stream = bool(body.get("stream"))
        opts = body.get("stream_options") or {}
        if opts and not stream:
            return self._error(
                400, "Stream options can only be defined when `stream=True`.", "BadRequestError"
            )
        if self.opt.reject_extensions and (
            "ignore_eos" in body or "min_tokens" in body or "continuous_usage_stats" in opts
        ):
            return self._error(400, "unknown field", "BadRequestError")
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens", 16))
        if not isinstance(max_tokens, int) or max_tokens < 1:
            return self._error(
                400, f"max_tokens={max_tokens!r} must be an integer >= 1", "BadRequestError"
            )
        if chat:
            msgs = body.get("messages") or []
            text = " ".join(_message_text(m) for m in msgs if isinstance(m, dict))
        else:
            prompt = body.get("prompt", "")
            text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
        n_out = max_tokens
        min_tokens = int(body.get("min_tokens") or 0)
        if self.opt.eos_after is not None and not body.get("ignore_eos"):
            n_out = min(max_tokens, max(min_tokens, self.opt.eos_after))
        rng = self.rng
        fail = rng.random() < self.opt.error_rate
        drop = rng.random() < self.opt.drop_rate
        malformed = rng.random() < self.opt.malformed_rate
        stall = rng.random() < self.opt.stall_rate
        fault_pos = rng.random()
        if fail:
            return self._error(
                self.opt.error_status, "simulated internal server error", "InternalServerError"
            )
        prompt_tokens, cached = self._prompt_tokens(text, chat)
        if self.engine is not None and prompt_tokens + n_out > self.engine.kv_capacity_tokens:
            # the engine could never schedule it: refused on arrival, as vLLM refuses it
            return self._error(
                400,
                f"This request needs {prompt_tokens + n_out} tokens ({prompt_tokens} in the "
                f"prompt, {n_out} to generate), more than the KV cache's "
                f"{self.engine.kv_capacity_tokens}.",
                "BadRequestError",
            )
        self._seq += 1
        req = _Request(
            rid=f"{'chatcmpl' if chat else 'cmpl'}-sim-{self._seq}",
            chat=chat,
            model=str(model),
            prompt_tokens=prompt_tokens,
            cached_tokens=cached,
            n_out=n_out,
            include_usage=bool(opts.get("include_usage")),
            continuous=bool(opts.get("continuous_usage_stats")),
            drop=drop,
            malformed=malformed,
            stall=stall,
            fault_pos=fault_pos,
            arrived=arrived,
        )
        s = self.stats
        s.waiting += 1
        if self.sem is not None:
            await self.sem.acquire()
        s.waiting -= 1
        s.running += 1
        admitted = time.monotonic()
        s.prompt_tokens += prompt_tokens
        cap = self.opt.kv_capacity_tokens
        if self.engine is None and cap is not None and s.kv_used + prompt_tokens > cap:
            s.preemptions += 1
        s.kv_used += prompt_tokens
        try:
            tokens = self.timing.tokens(prompt_tokens, n_out, cached)
            async with contextlib.aclosing(tokens):
                if stream:
                    response = await self._stream(request, req, tokens)
                else:
                    response = await self._whole(req, tokens)
            self._finished(req, admitted, time.monotonic())
            return response
        finally:
            s.running -= 1
            s.kv_used -= prompt_tokens
            if self.sem is not None:
                self.sem.release()

    def _finished(self, req: _Request, admitted: float, last: float) -> None:
        """A request that finished: its latencies into the histograms. Its queue time is the
        wait for the server's ``--max-concurrency`` slot; an engine timing's own queue shows in
        the TTFT."""
        s = self.stats
        s.success += 1
        s.e2e.observe(last - req.arrived)
        s.queue.observe(admitted - req.arrived)

    async def _whole(self, req: _Request, tokens: AsyncGenerator[int, None]) -> web.Response:
        s = self.stats
        produced = 0
        async for count in tokens:
            if not produced:
                s.ttft.observe(time.monotonic() - req.arrived)
            produced = count
        s.generation_tokens += produced
        usage = {
            "prompt_tokens": req.prompt_tokens,
            "completion_tokens": req.n_out,
            "total_tokens": req.prompt_tokens + req.n_out,
        }
        out_text = " x" * req.n_out
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        if req.chat:
            choice["message"] = {"role": "assistant", "content": out_text}
        else:
            choice["text"] = out_text
        return web.json_response(
            {
                "id": req.rid,
                "object": "chat.completion" if req.chat else "text_completion",
                "created": int(time.time()),
                "model": req.model,
                "choices": [choice],
                "usage": usage,
            }
        )

    async def _stream(
        self, request: web.Request, req: _Request, tokens: AsyncGenerator[int, None]
    ) -> web.StreamResponse:
        s = self.stats
        chat, n_out, k = req.chat, req.n_out, max(1, self.opt.tokens_per_chunk)
        generated = 0  # KV held by this stream's output, released when it ends
        try:
            resp = web.StreamResponse(
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
            )
            await resp.prepare(request)
            n_chunks = math.ceil(n_out / k)
            fault_chunk = min(n_chunks - 1, int(req.fault_pos * n_chunks))
            created = int(time.time())
            obj_name = "chat.completion.chunk" if chat else "text_completion"
            reasoning = self.opt.reasoning_tokens if chat else 0
            cap = self.opt.kv_capacity_tokens
            preempted = False

            def frame(choices: list[dict[str, Any]], usage: dict[str, int] | None) -> bytes:
                chunk: dict[str, Any] = {
                    "id": req.rid,
                    "object": obj_name,
                    "created": created,
                    "model": req.model,
                    "choices": choices,
                }
                if usage is not None:
                    chunk["usage"] = usage
                return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"

            def usage_of(done: int) -> dict[str, int]:
                return {
                    "prompt_tokens": req.prompt_tokens,
                    "completion_tokens": done,
                    "total_tokens": req.prompt_tokens + done,
                }

            per_chunk = req.continuous and req.include_usage
            if chat:  # vLLM opens every chat stream with the role, before any token
                opening = {"role": "assistant", "content": ""}
                choice0 = {"index": 0, "delta": opening, "logprobs": None, "finish_reason": None}
                await resp.write(frame([choice0], usage_of(0) if per_chunk else None))
            sent = 0
            j = 0
            first: float | None = None
            last_token_at: float | None = None
            async for produced in tokens:
                now = time.monotonic()
                if first is None:
                    first = now
                    s.ttft.observe(now - req.arrived)
                elif last_token_at is not None:
                    s.itl.observe((now - last_token_at) / max(1, produced - generated))
                last_token_at = now
                s.generation_tokens += produced - generated
                s.kv_used += produced - generated
                generated = produced
                if cap is not None and s.kv_used > cap and not preempted and self.engine is None:
                    s.preemptions += 1
                    preempted = True
                while produced - sent >= k or (produced >= n_out and sent < n_out):
                    n_tok = min(k, n_out - sent)
                    if req.stall and j == fault_chunk:
                        await asyncio.sleep(self.opt.stall_s)
                    if req.drop and (j == max(1, fault_chunk) or n_chunks == 1):
                        transport = request.transport
                        if transport is not None:
                            transport.abort()
                        raise asyncio.CancelledError
                    if req.malformed and j == fault_chunk:
                        await resp.write(b'data: {"choices": [{"text": "broken\n\n')
                    n_reasoning = max(0, min(sent + n_tok, reasoning) - sent)
                    text_r = " think" * n_reasoning
                    text_c = " x" * (n_tok - n_reasoning)
                    sent += n_tok
                    finish = "length" if sent >= n_out else None
                    if chat:
                        delta: dict[str, Any] = {}
                        if text_r:
                            delta["reasoning"] = text_r
                        if text_c:
                            delta["content"] = text_c
                        choice: dict[str, Any] = {
                            "index": 0,
                            "delta": delta,
                            "logprobs": None,
                            "finish_reason": finish,
                        }
                    else:
                        choice = {
                            "index": 0,
                            "text": text_c,
                            "logprobs": None,
                            "finish_reason": finish,
                        }
                    await resp.write(frame([choice], usage_of(sent) if per_chunk else None))
                    j += 1
            if req.include_usage:
                await resp.write(frame([], usage_of(n_out)))
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        finally:
            s.kv_used -= generated


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content", "")
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


class PreciseEpollSelector(selectors.EpollSelector):
    """epoll with sub-millisecond timer precision.

    ``epoll_wait`` takes whole milliseconds and Python rounds timeouts up, so every timer of a
    plain asyncio loop fires up to 1 ms late, which shows as +-1 ms jitter in the simulated
    inter-token gaps. Here the whole milliseconds are waited in epoll and the sub-millisecond
    rest in short sleeps that poll for I/O in between.
    """

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or timeout <= 0:
            return super().select(timeout)
        deadline = time.monotonic() + timeout
        coarse = math.floor(timeout * 1000) / 1000
        ready = super().select(coarse if coarse > 0 else 0)
        while not ready:
            rest = deadline - time.monotonic()
            if rest <= 0:
                break
            time.sleep(min(rest, 0.0002))
            ready = super().select(0)
        return ready


#: the application's simulated server (aiohttp's typed application key)
SERVER_KEY = web.AppKey("server", SimulatedServer)


def create_app(options: ServerOptions, timing: TimingModel | None = None) -> web.Application:
    """The aiohttp application; ``timing`` defaults to ``FixedTiming()``."""
    server = SimulatedServer(options, timing or FixedTiming())
    app = web.Application(client_max_size=64 * 1024 * 1024)

    async def mark(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["x-servewise-simulated"] = "1"

    app.on_response_prepare.append(mark)
    app.router.add_post("/v1/completions", server.completions)
    app.router.add_post("/v1/chat/completions", server.chat_completions)
    app.router.add_get("/v1/models", server.models)
    app.router.add_get("/version", server.version)
    app.router.add_get("/health", server.health)
    app.router.add_get("/metrics", server.metrics)
    app[SERVER_KEY] = server
    return app


async def serve(options: ServerOptions, timing: TimingModel, host: str, port: int) -> None:
    await serve_app(create_app(options, timing), host, port)


async def serve_app(app: web.Application, host: str, port: int) -> None:
    """Serve ``app`` on ``host:port`` until cancelled; ``LISTENING <port>`` on stdout once
    bound (port 0: the one the system gave), which the process that started it reads."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096)
    await site.start()
    bound = port
    for sock in getattr(site._server, "sockets", None) or []:
        bound = sock.getsockname()[1]
        break
    sys.stdout.write(f"LISTENING {bound}\n")
    sys.stdout.flush()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
