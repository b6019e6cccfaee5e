"""Client benchmark: how many streamed requests/s can each client drive on one core?

A fast canned streaming server (pre-rendered SSE, HTTP/1.1 keep-alive, raw asyncio) runs
pinned to CPU 0 with ``taskset``; each client runs pinned to CPU 1 and sends N requests of
128 streamed tokens (chat completions) at concurrency 64, 256 and 1024. Clients, measured
in the same run:

- ``servewise``: this project's runner (``benchmarks_runner.run_benchmark``, run files and all).
- ``aiohttp``: a plain aiohttp client with vLLM bench serve's streaming logic.
- ``httpx``: the same logic on httpx (the alternative HTTP library; the reason for aiohttp).
- ``guidellm``: ``guidellm run`` from a separate venv (/tmp/guidellm-venv) if it is installed
  and can run offline; otherwise the reason is printed.

Timing accuracy (``--timing``, also printed after the client table): the runner against the
simulated server with a fixed 30 ms TTFT and 10 ms a token, 48 requests of 64 tokens at
concurrency 8; the measured median and p99 inter-token latency, TPOT and TTFT beside the
server's own figures. A loaded machine shows here as a long p99 gap; no test asserts it.

Usage (from the repository root)::

    .venv/bin/python benchmarks/runner_client_bench.py [--concurrency 64,256,1024] [--timing]

Everything stays on 127.0.0.1. Each client run is bounded by a request count and a timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parents[1]
TOKENS = 128
PROMPT_WORDS = 32
GUIDELLM_VENV = Path("/tmp/guidellm-venv")
CLIENT_TIMEOUT_S = 120

# ---------------------------------------------------------------------------- canned server

_CL = re.compile(rb"content-length:\s*(\d+)", re.IGNORECASE)
_MAX = re.compile(rb'"max_(?:completion_)?tokens":\s*(\d+)')


def _chunked(events: list[bytes]) -> bytes:
    out = []
    for ev in events:
        out.append(b"%x\r\n%s\r\n" % (len(ev), ev))
    out.append(b"0\r\n\r\n")
    return b"".join(out)


def _sse(chat: bool, n: int, continuous: bool) -> bytes:
    events = []
    for i in range(n):
        if chat:
            choice: dict[str, Any] = {"index": 0, "delta": {"content": " x"}, "finish_reason": None}
        else:
            choice = {"index": 0, "text": " x", "finish_reason": None}
        obj: dict[str, Any] = {
            "id": "c",
            "object": "chunk",
            "created": 0,
            "model": "sim-model",
            "choices": [choice],
        }
        if continuous:
            obj["usage"] = {
                "prompt_tokens": PROMPT_WORDS,
                "completion_tokens": i + 1,
                "total_tokens": PROMPT_WORDS + i + 1,
            }
        events.append(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")
    usage = {
        "prompt_tokens": PROMPT_WORDS,
        "completion_tokens": n,
        "total_tokens": PROMPT_WORDS + n,
    }
    events.append(
        b"data: " + json.dumps({"id": "c", "choices": [], "usage": usage}).encode() + b"\n\n"
    )
    events.append(b"data: [DONE]\n\n")
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
    )
    return head + _chunked(events)


def _json_response(obj: Any, status: bytes = b"200 OK") -> bytes:
    body = json.dumps(obj).encode()
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\nConnection: keep-alive\r\n\r\n"
        + body
    )


class _Canned(asyncio.Protocol):
    cache: ClassVar[dict[tuple[bool, int, bool], bytes]] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t: asyncio.Transport = transport  # type: ignore[assignment]
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                return
            head = self.buf[:i]
            m = _CL.search(head)
            n = int(m.group(1)) if m else 0
            if len(self.buf) < i + 4 + n:
                return
            body = self.buf[i + 4 : i + 4 + n]
            self.buf = self.buf[i + 4 + n :]
            method, path = head.split(b"\r\n", 1)[0].split(b" ")[:2]
            self.t.write(self.respond(method, path, body))

    def respond(self, method: bytes, path: bytes, body: bytes) -> bytes:
        if method == b"GET":
            if path.startswith(b"/v1/models"):
                return _json_response(
                    {
                        "object": "list",
                        "data": [
                            {
                                "id": "sim-model",
                                "object": "model",
                                "owned_by": "servewise-simulated",
                                "root": "sim-model",
                            }
                        ],
                    }
                )
            if path.startswith(b"/health"):
                return b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
            return _json_response({"error": "not found"}, b"404 Not Found")
        chat = b"chat" in path
        m = _MAX.search(body)
        n = int(m.group(1)) if m else 16
        if b'"stream":true' not in body.replace(b" ", b""):
            return _json_response(
                {
                    "choices": [{"text": " x" * n}],
                    "usage": {"prompt_tokens": PROMPT_WORDS, "completion_tokens": n},
                }
            )
        key = (chat, n, b"continuous_usage_stats" in body)
        resp = self.cache.get(key)
        if resp is None:
            resp = self.cache[key] = _sse(*key)
        return resp


async def _serve(port_file: Path) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Canned, "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    port_file.write_text(str(port))
    async with server:
        await server.serve_forever()


# ---------------------------------------------------------------------------- clients


def _payload(chat: bool = True) -> dict[str, Any]:
    p: dict[str, Any] = {
        "model": "sim-model",
        "max_tokens": TOKENS,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    text = " ".join(["hello"] * PROMPT_WORDS)
    if chat:
        p["messages"] = [{"role": "user", "content": text}]
    else:
        p["prompt"] = text
    return p


def _parse_messages(buf: bytes, state: dict[str, Any], now: float) -> bytes:
    """vLLM bench serve's handling: split on blank lines, json.loads, choices vs usage."""
    while b"\n\n" in buf:
        msg, buf = buf.split(b"\n\n", 1)
        msg = msg.strip()
        if not msg or msg.startswith(b":"):
            continue
        chunk = msg.removeprefix(b"data: ")
        if chunk == b"[DONE]":
            continue
        data = json.loads(chunk)
        if data.get("choices"):
            if state["ttft"] is None:
                state["ttft"] = now - state["st"]
            else:
                state["itl"].append(now - state["last"])
            state["last"] = now
        elif data.get("usage"):
            state["tokens"] = data["usage"].get("completion_tokens")
    return buf


async def _client_aiohttp(port: int, conc: int, n: int) -> tuple[float, int, int]:
    import aiohttp

    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    connector = aiohttp.TCPConnector(limit=conc, limit_per_host=conc, keepalive_timeout=60)
    sem = asyncio.Semaphore(conc)
    ok = tokens = 0
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=600)
    ) as session:

        async def one() -> None:
            nonlocal ok, tokens
            async with sem:
                st = time.perf_counter()
                state: dict[str, Any] = {"st": st, "ttft": None, "itl": [], "last": st, "tokens": 0}
                async with session.post(url, json=_payload()) as r:
                    buf = b""
                    async for data in r.content.iter_any():
                        buf = _parse_messages(buf + data, state, time.perf_counter())
                if state["ttft"] is not None:
                    ok += 1
                    tokens += state["tokens"] or 0

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return time.perf_counter() - t0, ok, tokens


async def _client_httpx(port: int, conc: int, n: int) -> tuple[float, int, int]:
    import httpx

    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    sem = asyncio.Semaphore(conc)
    ok = tokens = 0
    limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
    async with httpx.AsyncClient(limits=limits, timeout=600, trust_env=False) as client:

        async def one() -> None:
            nonlocal ok, tokens
            async with sem:
                st = time.perf_counter()
                state: dict[str, Any] = {"st": st, "ttft": None, "itl": [], "last": st, "tokens": 0}
                async with client.stream("POST", url, json=_payload()) as r:
                    buf = b""
                    async for data in r.aiter_raw():
                        buf = _parse_messages(buf + data, state, time.perf_counter())
                if state["ttft"] is not None:
                    ok += 1
                    tokens += state["tokens"] or 0

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return time.perf_counter() - t0, ok, tokens


def _client_servewise(port: int, conc: int, n: int) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from benchmarks_runner import build_synthetic_specs, make_run_config
    from benchmarks_runner.runner import run_benchmark_sync
    from planner.workload import LengthDistribution

    cfg = make_run_config(
        base_url=f"http://127.0.0.1:{port}",
        model="sim-model",
        concurrency=conc,
        scrape_metrics=False,
        api="chat",
    )
    specs = build_synthetic_specs(
        n, LengthDistribution.fixed(PROMPT_WORDS), LengthDistribution.fixed(TOKENS)
    )
    with tempfile.TemporaryDirectory() as runs:
        res = run_benchmark_sync(cfg, specs, Path(runs))
    s = res.summary or {}
    cpu = next((c for c in res.self_checks if c["name"] == "client_cpu_saturation"), None)
    return {
        "req_s": s.get("request_throughput"),
        "tok_s": s.get("output_throughput"),
        "ok": s.get("completed"),
        "failed": s.get("failed"),
        "bottleneck_flag": None if cpu is None else (not cpu["ok"]),
        "self_check": cpu["message"] if cpu else None,
    }


def _client_main(kind: str, port: int, conc: int, n: int) -> None:
    if kind == "servewise":
        out = _client_servewise(port, conc, n)
    else:
        fn = _client_aiohttp if kind == "aiohttp" else _client_httpx
        wall, ok, tokens = asyncio.run(fn(port, conc, n))
        out = {"req_s": ok / wall, "tok_s": tokens / wall, "ok": ok, "failed": n - ok}
    print("RESULT " + json.dumps(out))


# ---------------------------------------------------------------------------- guidellm


def _guidellm_tokenizer(dir_: Path) -> str | None:
    """A local word-level tokenizer so GuideLLM can build synthetic prompts offline."""
    code = (
        "import sys\n"
        "from tokenizers import Tokenizer, models, pre_tokenizers\n"
        "from transformers import PreTrainedTokenizerFast\n"
        "vocab = {w: i for i, w in enumerate(['[UNK]', 'hello', 'x', 'the', 'a'] + "
        "[f'w{i}' for i in range(2000)])}\n"
        "tok = Tokenizer(models.WordLevel(vocab, unk_token='[UNK]'))\n"
        "tok.pre_tokenizer = pre_tokenizers.Whitespace()\n"
        "PreTrainedTokenizerFast(tokenizer_object=tok, unk_token='[UNK]')"
        ".save_pretrained(sys.argv[1])\n"
    )
    py = GUIDELLM_VENV / "bin" / "python"
    p = subprocess.run(
        [str(py), "-c", code, str(dir_)],
        capture_output=True,
        text=True,
        timeout=300,
        env=_offline_env(),
    )
    return None if p.returncode == 0 else (p.stderr.strip().splitlines() or ["?"])[-1]


def _offline_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
    )
    return env


def _run_guidellm(
    port: int, conc: int, n: int, tok_dir: Path, out_dir: Path, core: str
) -> dict[str, Any]:
    exe = GUIDELLM_VENV / "bin" / "guidellm"
    out = out_dir / f"guidellm-{conc}.json"
    cmd = [
        "taskset",
        "-c",
        core,
        str(exe),
        "run",
        # GuideLLM 0.8.1 fails to build /v1/completions prompts from synthetic data
        # ("missing text_column"), so every client in this benchmark uses chat completions.
        "--backend",
        f"kind=openai_http,target=http://127.0.0.1:{port},model=sim-model",
        "--profile",
        f"kind=concurrent,streams={conc}",
        "--constraint",
        f"kind=max_requests,count={n}",
        "--data",
        f"kind=synthetic_text,prompt_tokens={PROMPT_WORDS},output_tokens={TOKENS}",
        "--tokenizer",
        f"kind=huggingface_auto,model={tok_dir}",
        "--output",
        f"kind=json,path={out}",
        "--disable-console-interactive",
    ]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(
            cmd, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S * 2, env=_offline_env()
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {CLIENT_TIMEOUT_S * 2} s"}
    wall = time.perf_counter() - t0
    if p.returncode != 0 or not out.exists():
        tail = (p.stderr or p.stdout).strip().splitlines()
        return {"error": f"exit {p.returncode}: {tail[-1] if tail else '?'}"[:300]}
    report = json.loads(out.read_text())
    bench = report["benchmarks"][0]
    sched = bench["scheduler_metrics"]
    made = sched["requests_made"]
    # first request sent to last request completed (its "duration" is the measure window)
    dur = float(sched["request_end_time"]) - float(sched["request_start_time"]) or wall
    m = bench.get("metrics", {})
    out_tok = ((m.get("output_token_count") or {}).get("successful") or {}).get("total_sum")
    if out_tok is None:
        toks = [r.get("output_tokens") or 0 for r in bench["requests"]["successful"]]
        out_tok = sum(toks) * made["successful"] / max(1, len(toks))
    return {
        "req_s": made["successful"] / dur,
        "tok_s": float(out_tok) / dur,
        "ok": made["successful"],
        "failed": made["errored"] + made["incomplete"],
    }


# ---------------------------------------------------------------------------- orchestration


def _run_client(kind: str, port: int, conc: int, n: int, core: str) -> dict[str, Any]:
    cmd = [
        "taskset",
        "-c",
        core,
        sys.executable,
        str(Path(__file__).resolve()),
        "--client",
        kind,
        "--port",
        str(port),
        "--concurrency",
        str(conc),
        "--requests",
        str(n),
    ]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {CLIENT_TIMEOUT_S} s"}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[7:]))
    tail = (p.stderr or p.stdout).strip().splitlines()
    return {"error": f"exit {p.returncode}: {tail[-1] if tail else '?'}"[:300]}


def timing_accuracy() -> None:
    """The runner's TTFT, ITL and TPOT against a server whose timing is known exactly."""
    sys.path.insert(0, str(ROOT))
    from benchmarks_runner import build_synthetic_specs, make_run_config, run_benchmark_sync
    from benchmarks_runner.endpoints import SimulatedEndpoint
    from planner.workload import LengthDistribution

    endpoint = SimulatedEndpoint(["--ttft-ms", "30", "--token-delay-ms", "10"])
    base = endpoint.start(threading.Event())
    try:
        config = make_run_config(base_url=base, model="sim-model", concurrency=8, warmup=4)
        specs = build_synthetic_specs(
            48, LengthDistribution.fixed(64), LengthDistribution.fixed(64)
        )
        with tempfile.TemporaryDirectory() as runs:
            summary = run_benchmark_sync(config, specs, Path(runs)).summary or {}
    finally:
        endpoint.stop()
    print("\ntiming accuracy against the simulated server (30 ms TTFT, 10 ms a token):")
    for name, key, expected in (
        ("median ITL", "median_itl_ms", 10.0),
        ("p99 ITL", "p99_itl_ms", 10.0),
        ("mean TPOT", "mean_tpot_ms", 10.0),
        ("median TTFT", "median_ttft_ms", 30.0),
    ):
        value = float(summary.get(key) or 0.0)
        off = value / expected - 1
        print(f"  {name:<12} {value:8.2f} ms   server {expected:5.1f} ms   {off:+7.1%}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", default="64,256,1024")
    ap.add_argument(
        "--requests",
        type=int,
        default=0,
        help="requests per client run (default max(2000, 4 x concurrency))",
    )
    ap.add_argument("--clients", default="servewise,aiohttp,httpx,guidellm")
    ap.add_argument("--timing", action="store_true", help="only the timing-accuracy section")
    ap.add_argument("--serve", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--client", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve is not None:
        asyncio.run(_serve(args.serve))
        return 0
    if args.client is not None:
        _client_main(args.client, args.port, int(args.concurrency), args.requests)
        return 0
    if args.timing:
        timing_accuracy()
        return 0

    if shutil.which("taskset") is None or (os.cpu_count() or 1) < 2:
        print("needs taskset and 2 CPUs (server on CPU 0, client on CPU 1)")
        return 2
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    work = Path(tempfile.mkdtemp(prefix="sw-client-bench-"))
    port_file = work / "port"
    server = subprocess.Popen(
        [
            "taskset",
            "-c",
            "0",
            sys.executable,
            str(Path(__file__).resolve()),
            "--serve",
            str(port_file),
        ],
        cwd=ROOT,
    )
    try:
        for _ in range(200):
            if port_file.exists() and port_file.read_text():
                break
            time.sleep(0.05)
        port = int(port_file.read_text())
        guidellm_note = None
        tok_dir = work / "tokenizer"
        if "guidellm" in clients:
            if not (GUIDELLM_VENV / "bin" / "guidellm").exists():
                guidellm_note = f"not installed in {GUIDELLM_VENV}"
            else:
                err = _guidellm_tokenizer(tok_dir)
                if err:
                    guidellm_note = f"cannot build a local tokenizer offline: {err}"
        print(
            f"canned server on 127.0.0.1:{port} pinned to CPU 0; clients pinned to CPU 1; "
            f"{TOKENS} streamed tokens/request, {PROMPT_WORDS}-word prompts"
        )
        print(
            f"{'concurrency':>11} {'client':>10} {'requests':>8} {'req/s':>9} {'tok/s':>11} "
            f"{'failed':>6}  note"
        )
        verdicts = []
        for conc in [int(c) for c in args.concurrency.split(",")]:
            n = args.requests or max(2000, 4 * conc)
            results: dict[str, dict[str, Any]] = {}
            for kind in clients:
                if kind == "guidellm":
                    res = (
                        {"error": guidellm_note}
                        if guidellm_note
                        else _run_guidellm(port, conc, n, tok_dir, work, "1")
                    )
                else:
                    res = _run_client(kind, port, conc, n, "1")
                results[kind] = res
                if "error" in res:
                    print(
                        f"{conc:>11} {kind:>10} {n:>8} {'-':>9} {'-':>11} {'-':>6}  {res['error']}"
                    )
                else:
                    note = ""
                    if kind == "servewise":
                        note = (
                            "flags itself as the bottleneck: "
                            if res.get("bottleneck_flag")
                            else "self-check: "
                        ) + str(res.get("self_check"))
                    print(
                        f"{conc:>11} {kind:>10} {n:>8} {res['req_s']:>9.1f} "
                        f"{res['tok_s']:>11.0f} {res['failed']:>6}  {note}"
                    )
                sys.stdout.flush()
            rivals = {
                k: v["req_s"]
                for k, v in results.items()
                if k in ("aiohttp", "guidellm") and "error" not in v
            }
            own = results.get("servewise", {}).get("req_s")
            if rivals and own:
                best = max(rivals, key=lambda k: rivals[k])
                verdicts.append(
                    f"concurrency {conc}: servewise {own:.0f} req/s vs fastest other "
                    f"({best}) {rivals[best]:.0f} req/s -> "
                    f"{'at least as fast' if own >= rivals[best] * 0.97 else 'SLOWER'}"
                )
        print()
        for v in verdicts:
            print(v)
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    timing_accuracy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
