"""A simulated OpenAI-compatible LLM server for tests, demos and client benchmarks.

Run: ``python -m benchmarks_runner.simulated --port 0 [options]``; it prints
``LISTENING <port>`` on stdout once it accepts connections. It is marked as simulated in
``/v1/models`` (``owned_by: servewise-simulated``) and by an ``x-servewise-simulated: 1``
header on every response, so the runner records ``simulated: true``.

Endpoints: ``/v1/completions`` and ``/v1/chat/completions`` (streaming and not;
``stream_options.include_usage`` and vLLM's ``continuous_usage_stats``; ``max_tokens``,
``ignore_eos`` and ``min_tokens`` honoured), ``/v1/models``, ``/version``, ``/health`` and
``/metrics`` with vLLM's metric names.

Timing comes from a :class:`~benchmarks_runner.simulated.timing.TimingModel`: given the
number of running requests and the request's input and output lengths it returns the TTFT and
the per-token delay. The default ``FixedTiming`` ignores load; ``--gpu ID --tp N [--pp N]``
(with ``--model HF_ID``) selects :class:`~benchmarks_runner.simulated.perf_timing.PerfTiming`,
the performance model's step time for that plan (continuous batching: latency grows with load;
``max_num_seqs`` and the KV capacity come from the plan), and ``--slowdown F`` makes either F
times slower. Token *i* (0-based) is ready at ``TTFT + i * token_delay`` after admission, on
absolute deadlines so delays do not accumulate; a chunk of several tokens is sent when its last
token is ready. A load-aware model paces each later chunk at the batch running at that moment
instead.

Prompt tokens are counted as ``round(words * tokens_per_word)`` (+ a chat-template overhead
for chat), so the runner's calibration can be tested against a tokenizer that is not 1:1.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import selectors
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from benchmarks_runner.simulated.timing import FixedTiming, TimingModel, TokenTiming

SIMULATED_OWNER = "servewise-simulated"
CHAT_OVERHEAD_TOKENS = 8
PREFIX_BLOCK_WORDS = 16


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
    reasoning_tokens: int = 0
    eos_after: int | None = None
    reject_extensions: bool = False
    api_key: str | None = None
    seed: int = 0
    version: str = "0.0.0-servewise-simulated"


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
    ttft_sum: float = 0.0
    ttft_count: int = 0
    e2e_sum: float = 0.0
    e2e_count: int = 0


class SimulatedServer:
    def __init__(self, options: ServerOptions, timing: TimingModel) -> None:
        self.opt = options
        self.timing = timing
        self.rng = random.Random(options.seed)
        self.stats = _Stats()
        self.sem = asyncio.Semaphore(options.max_concurrency) if options.max_concurrency else None
        self.prefix_blocks: OrderedDict[int, None] = OrderedDict()
        self._seq = 0

    # ------------------------------------------------------------------ helpers

    def _prompt_tokens(self, text: str, chat: bool) -> int:
        words = text.split()
        n = max(1, round(len(words) * self.opt.tokens_per_word))
        self._prefix_lookup(words)
        return n + (CHAT_OVERHEAD_TOKENS if chat else 0)

    def _prefix_lookup(self, words: list[str]) -> None:
        """Prefix-cache accounting over 16-word blocks chained by hash (like vLLM's)."""
        h = 0
        hit_blocks = 0
        matching = True
        n_blocks = len(words) // PREFIX_BLOCK_WORDS
        for b in range(n_blocks):
            h = hash((h, tuple(words[b * PREFIX_BLOCK_WORDS : (b + 1) * PREFIX_BLOCK_WORDS])))
            if matching and h in self.prefix_blocks:
                hit_blocks += 1
                self.prefix_blocks.move_to_end(h)
            else:
                matching = False
                self.prefix_blocks[h] = None
        while len(self.prefix_blocks) > 200_000:
            self.prefix_blocks.popitem(last=False)
        tpw = self.opt.tokens_per_word
        self.stats.prefix_queries += round(len(words) * tpw)
        self.stats.prefix_hits += round(hit_blocks * PREFIX_BLOCK_WORDS * tpw)

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
        cap = self.opt.kv_capacity_tokens
        kv = min(1.0, s.kv_used / cap) if cap else 0.0
        lbl = f'{{model_name="{self.opt.models[0]}"}}'
        lines: list[str] = []

        def metric(name: str, kind: str, value: float, labels: str = lbl) -> None:
            lines.append(f"# HELP {name} simulated")
            lines.append(f"# TYPE {name} {kind}")
            lines.append(f"{name}{labels} {float(value)}")

        metric("vllm:num_requests_running", "gauge", s.running)
        metric("vllm:num_requests_waiting", "gauge", s.waiting)
        metric("vllm:kv_cache_usage_perc", "gauge", kv)
        metric("vllm:num_preemptions_total", "counter", s.preemptions)
        metric("vllm:prefix_cache_queries_total", "counter", s.prefix_queries)
        metric("vllm:prefix_cache_hits_total", "counter", s.prefix_hits)
        metric("vllm:prompt_tokens_total", "counter", s.prompt_tokens)
        metric("vllm:generation_tokens_total", "counter", s.generation_tokens)
        metric("vllm:request_success_total", "counter", s.success)
        lines.append(f"vllm:time_to_first_token_seconds_sum{lbl} {s.ttft_sum}")
        lines.append(f"vllm:time_to_first_token_seconds_count{lbl} {float(s.ttft_count)}")
        lines.append(f"vllm:e2e_request_latency_seconds_sum{lbl} {s.e2e_sum}")
        lines.append(f"vllm:e2e_request_latency_seconds_count{lbl} {float(s.e2e_count)}")
        flags = (
            f'{{simulated="true",max_concurrency="{self.opt.max_concurrency}",'
            f'kv_capacity_tokens="{cap}"}}'
        )
        metric("vllm:cache_config_info", "gauge", 1.0, flags)
        return web.Response(
            text="\n".join(lines) + "\n", content_type="text/plain", charset="utf-8"
        )

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        if (denied := self._check_auth(request)) is not None:
            return denied
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
            text = " ".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))
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
        prompt_tokens = self._prompt_tokens(text, chat)
        self._seq += 1
        rid = f"{'chatcmpl' if chat else 'cmpl'}-sim-{self._seq}"
        s = self.stats
        s.waiting += 1
        if self.sem is not None:
            await self.sem.acquire()
        s.waiting -= 1
        s.running += 1
        s.prompt_tokens += prompt_tokens
        cap = self.opt.kv_capacity_tokens
        if cap is not None and s.kv_used + prompt_tokens > cap:
            s.preemptions += 1
        s.kv_used += prompt_tokens
        held = prompt_tokens
        t_admit = time.monotonic()
        try:
            tm = self.timing.timing(s.running, prompt_tokens, n_out)
            if stream:
                return await self._stream(
                    request,
                    chat=chat,
                    rid=rid,
                    model=model,
                    n_out=n_out,
                    tm=tm,
                    prompt_tokens=prompt_tokens,
                    include_usage=bool(opts.get("include_usage")),
                    continuous=bool(opts.get("continuous_usage_stats")),
                    drop=drop,
                    malformed=malformed,
                    stall=stall,
                    fault_pos=fault_pos,
                    t_admit=t_admit,
                )
            await asyncio.sleep(tm.ttft_s + tm.token_delay_s * max(0, n_out - 1))
            s.generation_tokens += n_out
            s.success += 1
            s.ttft_count += 1
            s.ttft_sum += tm.ttft_s
            s.e2e_count += 1
            s.e2e_sum += time.monotonic() - t_admit
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": n_out,
                "total_tokens": prompt_tokens + n_out,
            }
            out_text = " x" * n_out
            choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
            if chat:
                choice["message"] = {"role": "assistant", "content": out_text}
            else:
                choice["text"] = out_text
            return web.json_response(
                {
                    "id": rid,
                    "object": "chat.completion" if chat else "text_completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [choice],
                    "usage": usage,
                }
            )
        finally:
            s.running -= 1
            s.kv_used -= held
            if self.sem is not None:
                self.sem.release()

    async def _stream(
        self,
        request: web.Request,
        *,
        chat: bool,
        rid: str,
        model: str,
        n_out: int,
        tm: TokenTiming,
        prompt_tokens: int,
        include_usage: bool,
        continuous: bool,
        drop: bool,
        malformed: bool,
        stall: bool,
        fault_pos: float,
        t_admit: float,
    ) -> web.StreamResponse:
        s = self.stats
        generated = 0  # KV held by this stream's output, released when it ends
        try:
            resp = web.StreamResponse(
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
            )
            await resp.prepare(request)
            k = tm.tokens_per_chunk
            n_chunks = math.ceil(n_out / k)
            fault_chunk = min(n_chunks - 1, int(fault_pos * n_chunks))
            created = int(time.time())
            obj_name = "chat.completion.chunk" if chat else "text_completion"
            reasoning = self.opt.reasoning_tokens if chat else 0
            loop = asyncio.get_running_loop()
            t_start = loop.time()
            stall_extra = 0.0
            sent = 0
            cap = self.opt.kv_capacity_tokens
            preempted = False
            # a load-aware model re-prices each chunk at the batch running now
            live = getattr(self.timing, "live_token_delay_s", None)
            due = t_start
            for j in range(n_chunks):
                n_tok = min(k, n_out - sent)
                last_tok = sent + n_tok - 1
                if stall and j == fault_chunk:
                    stall_extra += self.opt.stall_s
                if live is None or j == 0:
                    due = t_start + tm.ttft_s + last_tok * tm.token_delay_s + stall_extra
                else:
                    due += n_tok * live(s.running, prompt_tokens, n_out) + (
                        self.opt.stall_s if stall and j == fault_chunk else 0.0
                    )
                delay = due - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                if drop and (j == max(1, fault_chunk) or n_chunks == 1):
                    transport = request.transport
                    if transport is not None:
                        transport.abort()
                    raise asyncio.CancelledError
                if malformed and j == fault_chunk:
                    await resp.write(b'data: {"choices": [{"text": "broken\n\n')
                text_r = text_c = ""
                for t in range(sent, sent + n_tok):
                    if t < reasoning:
                        text_r += " think"
                    else:
                        text_c += " x"
                sent += n_tok
                s.generation_tokens += n_tok
                s.kv_used += n_tok
                generated += n_tok
                if cap is not None and s.kv_used > cap and not preempted:
                    s.preemptions += 1
                    preempted = True
                if j == 0:
                    s.ttft_count += 1
                    s.ttft_sum += time.monotonic() - t_admit
                finish = "length" if sent >= n_out else None
                if chat:
                    delta: dict[str, Any] = {}
                    if j == 0:
                        delta["role"] = "assistant"
                    if text_r:
                        delta["reasoning_content"] = text_r
                    if text_c or not text_r:
                        delta["content"] = text_c
                    choice: dict[str, Any] = {
                        "index": 0,
                        "delta": delta,
                        "logprobs": None,
                        "finish_reason": finish,
                    }
                else:
                    choice = {"index": 0, "text": text_c, "logprobs": None, "finish_reason": finish}
                chunk: dict[str, Any] = {
                    "id": rid,
                    "object": obj_name,
                    "created": created,
                    "model": model,
                    "choices": [choice],
                }
                if continuous and include_usage:
                    chunk["usage"] = {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": sent,
                        "total_tokens": prompt_tokens + sent,
                    }
                await resp.write(
                    b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
                )
            if include_usage:
                final = {
                    "id": rid,
                    "object": obj_name,
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": n_out,
                        "total_tokens": prompt_tokens + n_out,
                    },
                }
                await resp.write(
                    b"data: " + json.dumps(final, separators=(",", ":")).encode() + b"\n\n"
                )
            await resp.write(b"data: [DONE]\n\n")
            s.success += 1
            s.e2e_count += 1
            s.e2e_sum += time.monotonic() - t_admit
            await resp.write_eof()
            return resp
        finally:
            s.kv_used -= generated


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
    app["server"] = server
    return app


async def serve(options: ServerOptions, timing: TimingModel, host: str, port: int) -> None:
    app = create_app(options, timing)
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
