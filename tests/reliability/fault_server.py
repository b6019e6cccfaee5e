"""A small OpenAI-compatible server on 127.0.0.1 that fails on purpose (a test tool).

    python tests/reliability/fault_server.py --fault stall --port 0

prints ``LISTENING <port>`` once it accepts connections. ``/v1/models`` lists ``fault-model``;
``/v1/completions`` and ``/v1/chat/completions`` stream ``--tokens`` chunks (vLLM's SSE
shape, with a final ``usage``) unless the fault says otherwise:

- ``none``: every request succeeds;
- ``stall``: the first chunk, then silence for ``--stall-s`` (past the client's read timeout);
- ``drop``: the first chunk, then the connection is cut mid-stream;
- ``5xx``: HTTP 503 with a JSON error body;
- ``echo``: HTTP 500 whose body echoes every request header (the Authorization header too),
  and ``/metrics`` echoes it in a label;
- ``echo-stream``: HTTP 200, then an SSE ``error`` event that echoes the request headers;
- ``die``: the first ``--die-after`` requests succeed, then the process exits at once
  (``os._exit``), as a server killed mid-run;
- ``usage``: the final ``usage`` says ``prompt_tokens`` is ``--usage-prompt-tokens``, written
  into the JSON as given (``3000000000``, ``-5``, ``NaN``, ``2.5``, ``"abc"``);
- ``slow-probe``: the runner's probes (one-token requests) stall ``--stall-s`` before their
  first chunk, as an endpoint that is up but slow to answer;
- ``slow-headers``: the response's status line and headers come after ``--stall-s``;
- ``truncated``: the first chunk, then half of the next chunk's JSON, then the stream ends
  cleanly (no ``[DONE]``, the connection closed in order);
- ``html``: HTTP 200 with ``text/html``, a login page (a proxy in front of the server);
- ``json``: HTTP 200 with ``application/json``, a whole non-streamed completion;
- ``huge-line``: the first chunk, then one SSE line of ``--line-mb`` MB with no line break;
- ``bad-utf8``: chunks whose text holds bytes that are no UTF-8 (``\xff\xfe``).

``--metrics-samples N`` makes ``/metrics`` hold N samples of ``vllm:num_requests_running``
(one label set each), built once.

Every fault but ``die`` hits every ``--every``-th request (1: all of them). Requests for one
token (the runner's probes before a run) are never faulty and are not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys

from aiohttp import web

MODEL = "fault-model"


def _chunk(i: int, chat: bool) -> bytes:
    text = f"t{i} "
    choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
    return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"


def _usage(prompt_tokens: int, tokens: int, raw_prompt_tokens: str | None = None) -> bytes:
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": tokens}
    text = json.dumps({"choices": [], "usage": usage})
    if raw_prompt_tokens is not None:  # as given, valid JSON or not
        text = text.replace(
            f'"prompt_tokens": {prompt_tokens}', f'"prompt_tokens": {raw_prompt_tokens}'
        )
    return b"data: " + text.encode() + b"\n\n"


class FaultServer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.served = 0
        self.metrics_page = "".join(
            f'vllm:num_requests_running{{engine="{i}"}} 0\n' for i in range(args.metrics_samples)
        ).encode()

    def faulty(self) -> bool:
        return self.args.fault != "none" and (self.served - 1) % max(1, self.args.every) == 0

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def metrics(self, request: web.Request) -> web.Response:
        if self.metrics_page:
            return web.Response(body=self.metrics_page, content_type="text/plain")
        echoed = request.headers.get("Authorization", "") if self.args.fault == "echo" else ""
        label = json.dumps(echoed)  # a quoted Prometheus label value
        text = "vllm:num_requests_running{echo=" + label + "} 0\n"
        return web.Response(text=text, content_type="text/plain")

    async def complete(self, request: web.Request) -> web.StreamResponse:
        chat = request.path.endswith("/chat/completions")
        body = await request.json()
        tokens = int(body.get("max_tokens") or self.args.tokens)
        probe = tokens == 1  # the runner's probes: never faulty, not counted
        if not probe:
            self.served += 1
        fault = self.args.fault
        if fault == "die" and self.served > self.args.die_after:
            os._exit(1)  # no cleanup, no goodbye: as kill -9
        hit = fault != "die" and not probe and self.faulty()
        echoed = dict(request.headers)
        if hit and fault == "5xx":
            return web.json_response({"error": {"message": "overloaded"}}, status=503)
        if hit and fault == "echo":
            return web.json_response({"error": {"headers": echoed}}, status=500)
        if hit and fault == "slow-headers":
            await asyncio.sleep(self.args.stall_s)
        if hit and fault == "html":
            page = "<html><body><form>Log in to continue</form></body></html>"
            return web.Response(text=page, content_type="text/html")
        prompt = str(body.get("prompt") or json.dumps(body.get("messages") or ""))
        if hit and fault == "json":
            usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": tokens}
            choice = {"index": 0, "text": "t " * tokens, "finish_reason": "length"}
            return web.json_response({"choices": [choice], "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if hit and fault in ("truncated", "huge-line"):
            await resp.write(_chunk(0, chat))
            if fault == "truncated":
                await resp.write(_chunk(1, chat)[:20])
            else:
                line = b"data: " + b"x" * int(self.args.line_mb * 2**20)
                for start in range(0, len(line), 2**20):
                    await resp.write(line[start : start + 2**20])
            await resp.write_eof()
            return resp
        if hit and fault == "echo-stream":
            event = {"error": {"message": f"rejected request with headers {echoed}"}}
            await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            return resp
        if probe and fault == "slow-probe":
            await asyncio.sleep(self.args.stall_s)
        for i in range(tokens):
            chunk = _chunk(i, chat)
            if hit and fault == "bad-utf8":
                chunk = chunk.replace(b"t%d " % i, b"t\xff\xfe%d " % i)
            await resp.write(chunk)
            if i == 0 and hit and fault == "stall":
                await asyncio.sleep(self.args.stall_s)
            if i == 0 and hit and fault == "drop":
                assert request.transport is not None
                request.transport.abort()  # cut mid-stream, no terminating chunk
                return resp
            await asyncio.sleep(self.args.token_delay_s)
        raw = self.args.usage_prompt_tokens if fault == "usage" and not probe else None
        await resp.write(_usage(len(prompt.split()), tokens, raw))
        await resp.write(b"data: [DONE]\n\n")
        return resp


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument(
        "--fault",
        default="none",
        choices=[
            "none", "stall", "drop", "5xx", "echo", "echo-stream", "die", "usage", "slow-probe",
            "slow-headers", "truncated", "html", "json", "huge-line", "bad-utf8",
        ],
    )  # fmt: skip
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--tokens", type=int, default=4)
    p.add_argument("--token-delay-s", type=float, default=0.002)
    p.add_argument("--stall-s", type=float, default=30.0)
    p.add_argument("--every", type=int, default=1)
    p.add_argument("--die-after", type=int, default=5)
    p.add_argument("--usage-prompt-tokens", default="3000000000")
    p.add_argument("--metrics-samples", type=int, default=0)
    p.add_argument("--line-mb", type=float, default=64.0)
    args = p.parse_args()
    server = FaultServer(args)
    app = web.Application()
    app.router.add_get("/v1/models", server.models)
    app.router.add_get("/metrics", server.metrics)
    app.router.add_post("/v1/completions", server.complete)
    app.router.add_post("/v1/chat/completions", server.complete)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)  # connections queue from here on, before the app serves them
    print(f"LISTENING {sock.getsockname()[1]}", flush=True)
    sys.stdout.flush()
    web.run_app(app, sock=sock, print=None, handle_signals=True)


if __name__ == "__main__":
    main()
