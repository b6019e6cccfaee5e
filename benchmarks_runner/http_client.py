"""The one module that speaks HTTP: an async streaming client for OpenAI-compatible servers.

Library choice (by measurement, ``benchmarks/runner_client_bench.py``): aiohttp. On 2 cores
with the server pinned to one, aiohttp's C HTTP parser keeps up with several hundred streamed
requests/s at concurrency 1024, where httpx's pure-Python h11 stack loses most of its
throughput. Nothing else in the package imports aiohttp's client; swap it here if needed.

Streaming semantics follow ``vllm bench serve`` of vLLM 0.33 (see domain.md): a request's
start is taken just before the POST; every SSE message whose ``choices`` carry output is a
chunk with one timestamp (on completions every ``choices`` message; on chat one with content,
reasoning or a tool call, not the opening ``{"role": "assistant", "content": ""}``); the first
is the first token, the last ends the request; ``usage`` is read from the last message that
carries it (never summed). Per-chunk token deltas come from cumulative per-chunk usage when
the server sends it (vLLM ``continuous_usage_stats``), else 1 per chunk with output. The
API key travels only in the Authorization header and is never logged.
"""

from __future__ import annotations

import asyncio
import errno
import json
import json.scanner
import math
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp.abc import ResolveResult
from aiohttp.resolver import ThreadedResolver

from benchmarks_runner.errors import (
    AuthenticationFailed,
    EndpointUnreachable,
    ResponseTooLarge,
)
from planner.credentials import Scrubber, internal_address, is_credential_header
from planner.run_files import MAX_TOKENS

_perf = time.perf_counter


def one_line(text: str, limit: int = 300) -> str:
    """Collapse whitespace so an error message fits one line of a log or a table cell."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class MalformedChunk(Exception):
    """An SSE data line that is not JSON, or whose usage is no token count."""


#: The most a plain GET reads (``/v1/models``, ``/version``, ``/metrics``): a vLLM ``/metrics``
#: page is ~0.1-0.3 MB; a page 30 times that is no server's metrics.
MAX_GET_BYTES = 8_000_000
#: The longest SSE event the client holds while it waits for its end (a server that never
#: ends an event must not fill the memory): far above any chunk of tokens.
MAX_EVENT_BYTES = 16_000_000
#: how much of a streamed answer's start is kept to name what it was when it held no event
HEAD_BYTES = 200


def token_count(usage: dict[str, Any], key: str) -> int | None:
    """``usage[key]`` when it is a token count the run files hold (an integer in
    0..``MAX_TOKENS``), None when absent; else MalformedChunk naming the field and value."""
    value = usage.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        problem = "not a number"
    elif isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        problem = "not a whole number of tokens"
    elif not 0 <= value <= MAX_TOKENS:
        problem = f"outside 0..{MAX_TOKENS:,} tokens"
    else:
        return int(value)
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
    raise MalformedChunk(f"the server's usage.{key}={shown}: {problem}")


@dataclass(slots=True)
class StreamResult:
    """What the client observed for one request; times are ``time.perf_counter()`` values."""

    request_id: str
    start: float = 0.0
    first_chunk: float | None = None
    first_content: float | None = None
    end: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    http_status: int | None = None
    error: str | None = None
    per_chunk_usage: bool = False
    #: the request failed below HTTP (refused, reset, cut mid-stream): maybe the endpoint is gone
    transport_error: bool = False

    @property
    def ok(self) -> bool:
        """vLLM's success rule: HTTP 200 and at least one ``choices`` chunk, no error."""
        return self.error is None and self.http_status == 200 and bool(self.chunk_times)


@dataclass(frozen=True, slots=True)
class TlsOptions:
    verify: bool = True
    ca_file: str | None = None
    client_cert: str | None = None
    client_key: str | None = None

    def context(self) -> ssl.SSLContext | bool:
        if not self.verify:
            return False
        if self.ca_file is None and self.client_cert is None:
            return True
        ctx = ssl.create_default_context(cafile=self.ca_file)
        if self.client_cert is not None:
            ctx.load_cert_chain(self.client_cert, self.client_key)
        return ctx


class EndpointResolver(ThreadedResolver):
    """The system's resolver, refusing a name that resolves only to a link-local or cloud
    metadata address (a URL's own address is checked when it is parsed,
    :func:`planner.credentials.parse_endpoint_url`; a name is only known here)."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await super().resolve(host, port, family)
        allowed = [r for r in results if internal_address(r["host"]) is None]
        if results and not allowed:
            address = results[0]["host"]
            raise OSError(  # (errno, text): aiohttp shows the text as the reason
                errno.EADDRNOTAVAIL,
                f"{host} resolves to {address}, {internal_address(address)}: not an endpoint",
            )
        return allowed


class EndpointClient:
    """Async client for one server root (``http://host:port``, without ``/v1``).

    Use as ``async with EndpointClient(...) as client``. ``max_connections=0`` means no
    connector limit (the runner's own concurrency control decides).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        basic_auth: str | None = None,
        headers: dict[str, str] | None = None,
        tls: TlsOptions | None = None,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 300.0,
        request_timeout_s: float = 3600.0,
        max_connections: int = 0,
        trust_env: bool = False,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._basic_auth = basic_auth
        self._extra_headers = dict(headers or {})
        # Error texts are what a server sends back: one that echoes headers would echo these.
        self.scrubber = Scrubber(
            [api_key, basic_auth]
            + [v for k, v in self._extra_headers.items() if is_credential_header(k)]
        )
        self._tls = tls or TlsOptions()
        self._timeout = aiohttp.ClientTimeout(
            total=request_timeout_s, sock_connect=connect_timeout_s, sock_read=read_timeout_s
        )
        self._max_connections = max_connections
        self._trust_env = trust_env
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:  # never show the key
        return f"EndpointClient({self.base_url!r})"

    async def __aenter__(self) -> EndpointClient:
        connector = aiohttp.TCPConnector(
            resolver=EndpointResolver(),
            limit=self._max_connections,
            limit_per_host=0,
            ssl=self._tls.context(),
            keepalive_timeout=60,
            enable_cleanup_closed=True,
        )
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=self._timeout, trust_env=self._trust_env
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("EndpointClient used outside 'async with'")
        return self._session

    def headers(self, request_id: str | None = None) -> dict[str, str]:
        h = {"Content-Type": "application/json", **self._extra_headers}
        if self._api_key:
            h["Authorization"] = f"Bearer {self._api_key}"
        elif self._basic_auth:
            h["Authorization"] = self._basic_auth
        if request_id is not None:
            h["x-request-id"] = request_id
        return h

    # ------------------------------------------------------------------ plain requests

    async def get(
        self, path: str, *, timeout_s: float | None = None, max_bytes: int = MAX_GET_BYTES
    ) -> tuple[int, dict[str, str], bytes]:
        """GET ``path``; raises :class:`EndpointUnreachable` when no connection is made and
        :class:`ResponseTooLarge` when the body is longer than ``max_bytes`` (never held)."""
        url = f"{self.base_url}{path}"
        timeout = aiohttp.ClientTimeout(total=timeout_s) if timeout_s else None
        try:
            async with self.session.get(
                url, headers=self.headers(), timeout=timeout if timeout else self._timeout
            ) as resp:
                too_large = ResponseTooLarge(
                    f"{url} answered more than {max_bytes:,} bytes; not read"
                )
                if (resp.content_length or 0) > max_bytes:
                    raise too_large
                parts: list[bytes] = []
                size = 0
                async for part in resp.content.iter_any():
                    size += len(part)
                    if size > max_bytes:
                        raise too_large
                    parts.append(part)
                body = b"".join(parts)
                return resp.status, {k.lower(): v for k, v in resp.headers.items()}, body
        except (aiohttp.ClientConnectionError, TimeoutError, OSError) as exc:
            raise EndpointUnreachable(
                f"cannot reach {url}: {self._one_line(str(exc) or type(exc).__name__, 300)}"
            ) from None

    async def get_json(
        self, path: str, *, timeout_s: float | None = None
    ) -> tuple[int, dict[str, str], Any]:
        status, headers, body = await self.get(path, timeout_s=timeout_s)
        if status in (401, 403):
            raise AuthenticationFailed(
                f"{self.base_url}{path} answered HTTP {status}: check the API key"
            )
        try:
            return status, headers, json.loads(body) if body else None
        except (ValueError, RecursionError):
            return status, headers, None

    async def post_json(
        self, path: str, payload: dict[str, Any], *, timeout_s: float = 120.0
    ) -> tuple[int, Any]:
        """Non-streaming POST (probes); returns status and decoded JSON (or text)."""
        url = f"{self.base_url}{path}"
        try:
            async with self.session.post(
                url,
                data=json.dumps(payload).encode(),
                headers=self.headers(),
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as resp:
                body = await resp.read()
        except (aiohttp.ClientConnectionError, TimeoutError, OSError) as exc:
            raise EndpointUnreachable(
                f"cannot reach {url}: {self._one_line(str(exc) or type(exc).__name__, 300)}"
            ) from None
        try:
            return resp.status, json.loads(body)
        except ValueError:
            return resp.status, body.decode(errors="replace")

    # ------------------------------------------------------------------ streaming

    async def stream(self, path: str, body: bytes, result: StreamResult, *, chat: bool) -> None:
        """POST a streaming request and fill ``result`` as chunks arrive.

        ``result`` is filled in place so that a cancelled request keeps what it had received.
        Errors (HTTP status, dropped connection, malformed chunk, timeout) land in
        ``result.error``; only cancellation propagates.
        """
        url = f"{self.base_url}{path}"
        headers = self.headers(result.request_id)
        result.start = _perf()
        head = b""
        try:
            async with self.session.post(url, data=body, headers=headers) as resp:
                result.http_status = resp.status
                if resp.status != 200:
                    text = (await resp.content.read(2000)).decode(errors="replace")
                    result.error = f"HTTP {resp.status}: {self._one_line(text, 200)}"
                    return
                head = await _consume_sse(resp, result, chat, self._one_line)
        except asyncio.CancelledError:
            result.error = "cancelled before completion"
            raise
        except MalformedChunk as exc:
            result.error = f"malformed SSE chunk: {self._one_line(str(exc), 120)}"
        except (TypeError, AttributeError, KeyError, IndexError, ValueError) as exc:
            # JSON of an unexpected shape (choices that are no objects, ...)
            detail = self._one_line(f"{type(exc).__name__}: {exc}", 120)
            result.error = f"malformed SSE chunk: not the OpenAI shape ({detail})"
        except TimeoutError:
            result.error = "timeout: no data within the read timeout or request timeout"
        except (aiohttp.ClientError, OSError) as exc:
            result.error = f"{type(exc).__name__}: {self._one_line(str(exc), 200)}"
            result.transport_error = True
        if result.error is None and not result.chunk_times:
            result.error = self._one_line(_no_event_error(resp, head), 200)

    def _one_line(self, text: str, limit: int) -> str:
        """A server's text for a stored error: secrets out first, then cut to one line."""
        return one_line(self.scrubber.text(text), limit)


_scan_json = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _decode(payload: bytes) -> Any:
    """One JSON value from an SSE data field (no json.loads wrapper: this is the hot path)."""
    text = payload.decode("utf-8", "replace")
    try:
        obj, end = _scan_json(text, 0)
    except (StopIteration, ValueError, RecursionError):
        raise MalformedChunk(text[:80]) from None
    if end != len(text) and text[end:].strip():
        raise MalformedChunk(text[:80])
    return obj


async def _consume_sse(
    resp: aiohttp.ClientResponse,
    res: StreamResult,
    chat: bool,
    error_text: Callable[[str, int], str] = one_line,
) -> bytes:
    """Read the event stream into ``res``; returns the body's first bytes (what an answer
    that held no event was). An event not yet ended is held as its parts (joined once it
    ends): a line of many megabytes costs its length once, not once a network read, and one
    longer than :data:`MAX_EVENT_BYTES` is refused as soon as it is."""
    parser = _SseParser(res, chat, error_text)
    event = parser.event
    head = b""
    pending: list[bytes] = []  # the parts of an event not yet ended
    pending_bytes = 0
    async for data in resp.content.iter_any():
        now = _perf()
        if len(head) < HEAD_BYTES:
            head += data[: HEAD_BYTES - len(head)]
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        if pending:
            # the blank line that ends the event may straddle two reads
            if b"\n\n" not in data and not (data[:1] == b"\n" and pending[-1][-1:] == b"\n"):
                pending_bytes += len(data)
                if pending_bytes > MAX_EVENT_BYTES:
                    raise MalformedChunk(
                        f"an event of more than {MAX_EVENT_BYTES:,} bytes, unended"
                    )
                pending.append(data)
                continue
            data = b"".join(pending) + data
            pending, pending_bytes = [], 0
        if data.endswith(b"\n\n") and data.count(b"\n\n") == 1:
            event(data[:-2], now)  # the common case: exactly one whole event
            continue
        if b"\n\n" not in data:
            if len(data) > MAX_EVENT_BYTES:
                raise MalformedChunk(f"an event of more than {MAX_EVENT_BYTES:,} bytes, unended")
            pending, pending_bytes = [data], len(data)
            continue
        events = data.split(b"\n\n")
        rest = events.pop()
        if rest:
            pending, pending_bytes = [rest], len(rest)
        for ev in events:
            if ev:
                event(ev, now)
    rest = b"".join(pending).strip()
    if rest:
        event(rest, _perf())
    if res.chunk_times:
        res.end = res.chunk_times[-1]
    return head


def _no_event_error(resp: aiohttp.ClientResponse, head: bytes) -> str:
    """Why an HTTP 200 answer held no choices chunk, naming what it was instead: a login page
    from a proxy (text/html), a whole JSON completion (a server that does not stream), or an
    empty event stream."""
    content_type = resp.content_type or "none"
    shown = one_line(head.decode("utf-8", "replace"), 80)
    if content_type == "text/event-stream" or not head.strip():
        return "no choices chunk received (HTTP 200 with an empty stream)"
    return (
        f"no choices chunk received: HTTP 200 with Content-Type {content_type}, not an event "
        f"stream (text/event-stream), starting {shown!r}"
    )


class _SseParser:
    """Turns SSE events into chunk timestamps, token deltas and usage on a StreamResult."""

    __slots__ = ("chat", "error_text", "last_cum", "res")

    def __init__(
        self, res: StreamResult, chat: bool, error_text: Callable[[str, int], str] = one_line
    ) -> None:
        self.error_text = error_text
        self.res = res
        self.chat = chat
        self.last_cum = 0

    def event(self, ev: bytes, now: float) -> None:
        if ev[:6] == b"data: " and b"\n" not in ev:
            payload = ev[6:]
        elif ev[:5] == b"data:" and b"\n" not in ev:
            payload = ev[5:].strip()
        else:
            lines = [ln[5:] for ln in ev.split(b"\n") if ln.startswith(b"data:")]
            if not lines:
                return  # comment, event: or id: lines only
            payload = b"\n".join(lines).strip()
        if payload[:1] != b"{":
            if payload == b"[DONE]" or not payload.strip():
                return
            raise MalformedChunk(payload[:80].decode(errors="replace"))
        obj = _decode(payload)
        res = self.res
        if not isinstance(obj, dict):
            raise MalformedChunk(payload[:80].decode(errors="replace"))
        choices = obj.get("choices")
        usage = obj.get("usage")
        if usage and not isinstance(usage, dict):
            raise MalformedChunk(f"the server's usage={str(usage)[:40]!r}: not an object")
        if choices:
            c0 = choices[0]
            if self.chat:
                delta = c0.get("delta") or {}
                content = delta.get("content")
                # vLLM 0.33 streams reasoning in `reasoning` (older servers and other engines in
                # `reasoning_content`); a tool-call delta is output too. An opening chunk with
                # only the role (and empty content) is not.
                output = (
                    content
                    or delta.get("reasoning")
                    or delta.get("reasoning_content")
                    or delta.get("tool_calls")
                )
            else:
                content = c0.get("text")
                output = True  # every completions chunk counts, even an empty text (vLLM)
            if not output:
                if usage:  # per-chunk usage of a chunk that carries no output
                    self._usage_only(usage)
                return
            if res.first_chunk is None:
                res.first_chunk = now
            if content and res.first_content is None:
                res.first_content = now
            res.chunk_times.append(now)
            if usage:
                ct = token_count(usage, "completion_tokens")
                if ct is not None:
                    if ct < self.last_cum:
                        raise MalformedChunk(
                            f"the server's usage.completion_tokens={ct}: down from "
                            f"{self.last_cum} (a running count never goes down)"
                        )
                    res.per_chunk_usage = True
                    res.chunk_tokens.append(ct - self.last_cum)
                    self.last_cum = ct
                    res.output_tokens = ct
                    pt = token_count(usage, "prompt_tokens")
                    if pt is not None:
                        res.prompt_tokens = pt
                    return
            res.chunk_tokens.append(1 if (content or self.chat) else 0)
            if not usage:
                return
        elif obj.get("error") is not None:
            err = obj["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            res.error = f"server error in stream: {self.error_text(str(msg), 200)}"
        if usage:
            self._usage_only(usage)

    def _usage_only(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            raise MalformedChunk(f"the server's usage={str(usage)[:40]!r}: not an object")
        res = self.res
        pt = token_count(usage, "prompt_tokens")
        if pt is not None:
            res.prompt_tokens = pt
        ct = token_count(usage, "completion_tokens")
        if ct is not None:
            res.output_tokens = ct
            self.last_cum = max(self.last_cum, ct)
