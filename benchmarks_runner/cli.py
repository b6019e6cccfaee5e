"""Command line: ``python -m benchmarks_runner run|sweep|search|import|diagnose ...``.

Exit codes: 0 the run completed (some requests may have failed, at most
``--max-failed-share`` of them); 130 cancelled by SIGINT, 143 by SIGTERM (run files written,
status ``cancelled``); 2 bad configuration; 3 endpoint unusable before the run (unreachable,
model not served, probe failed, auth); 4 the run failed: the endpoint was lost mid-run, no
request succeeded, more than ``--max-failed-share`` of them failed, or the error rate went
above ``--max-error-rate`` (run files written with every row collected, status ``failed`` and
the reason). Every non-zero exit prints one line ``error: <reason>`` on stderr, never a
traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import shutil
import signal
import ssl
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks_runner.config import RunConfig, check_metrics_path, make_run_config
from benchmarks_runner.errors import BenchmarkError, ConfigError
from benchmarks_runner.http_client import TlsOptions, one_line
from benchmarks_runner.runner import (
    ProgressSnapshot,
    RunResult,
    check_endpoint,
    record_cancelled_run,
    run_benchmark,
)
from benchmarks_runner.workload import (
    TRACE_FORMATS,
    RequestSpec,
    arrival_times,
    build_synthetic_specs,
    load_trace,
    with_arrivals,
    workload_record,
)
from planner.commands.args import (
    ArgumentError,
    OneLineParser,
    fraction,
    number,
    positive_int,
    print_error,
)
from planner.credentials import parse_endpoint_url
from planner.errors import InvalidInputError, PlannerError
from planner.input_checks import MAX_REQUEST_TOKENS, finite_number
from planner.plan import Plan
from planner.workload import LengthDistribution

EXIT_CANCELLED = 130
EXIT_TERMINATED = 143
EXIT_ABORTED = 4
EXIT_BUG = 1
TOKENS = positive_int(MAX_REQUEST_TOKENS)


def _add_endpoint_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("endpoint")
    g.add_argument("--base-url", required=True, help="server root, e.g. http://127.0.0.1:8000")
    g.add_argument("--model", required=True)
    g.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    g.add_argument(
        "--api-key-env", default=None, help="name of the environment variable holding the API key"
    )
    g.add_argument("--header", action="append", default=[], metavar="KEY=VALUE")
    g.add_argument("--insecure", action="store_true", help="do not verify TLS certificates")
    g.add_argument("--ca-file", default=None)
    g.add_argument("--client-cert", default=None)
    g.add_argument("--client-key", default=None)
    g.add_argument("--connect-timeout-s", type=float, default=10.0)
    g.add_argument("--read-timeout-s", type=float, default=300.0)
    g.add_argument("--request-timeout-s", type=float, default=3600.0)


def _add_workload_args(p: argparse.ArgumentParser, *, load: bool) -> None:
    g = p.add_argument_group("workload")
    g.add_argument("--input-len", type=TOKENS, default=None)
    g.add_argument(
        "--input-dist", choices=["fixed", "uniform", "normal", "lognormal"], default="fixed"
    )
    spread_help = (
        "half-width of a uniform, standard deviation in tokens of a normal or lognormal "
        "(as the dashboard's sidebar)"
    )
    g.add_argument("--input-spread", type=float, default=0.0, help=spread_help)
    g.add_argument("--output-len", type=TOKENS, default=None)
    g.add_argument(
        "--output-dist", choices=["fixed", "uniform", "normal", "lognormal"], default="fixed"
    )
    g.add_argument("--output-spread", type=float, default=0.0, help=spread_help)
    g.add_argument(
        "--prefix-share",
        type=float,
        default=0.0,
        help="fraction of each prompt shared with its prefix group",
    )
    g.add_argument("--prefix-groups", type=positive_int(10_000_000), default=1)
    g.add_argument("--num-requests", type=positive_int(10_000_000), default=None)
    g.add_argument("--trace", type=Path, default=None)
    g.add_argument("--trace-format", choices=list(TRACE_FORMATS), default=None)
    g.add_argument(
        "--time-scale", type=float, default=1.0, help="trace replay speed-up (2 = twice as fast)"
    )
    lg = p.add_argument_group("load")
    if load:
        x = lg.add_mutually_exclusive_group()
        x.add_argument("--concurrency", type=int, default=None, help="closed loop")
        x.add_argument("--request-rate", type=float, default=None, help="Poisson/gamma rate")
    lg.add_argument("--burstiness", type=float, default=1.0)
    lg.add_argument(
        "--max-concurrency",
        type=int,
        default=None,
        help="concurrency cap for --request-rate and --trace",
    )
    lg.add_argument("--warmup", type=int, default=0)
    lg.add_argument("--duration-s", type=float, default=None)
    lg.add_argument(
        "--max-error-rate",
        type=float,
        default=None,
        help="abort the run once more than this share of requests failed (after 20)",
    )
    lg.add_argument(
        "--max-failed-share",
        type=float,
        default=0.5,
        help="a run that went to its end with more than this share of failed requests is "
        "'failed' (exit 4); default 0.5",
    )
    lg.add_argument(
        "--seed",
        type=int,
        default=None,
        help="draws lengths, arrivals and prompt text (default: lengths and arrivals from 0, "
        "prompts fresh each run)",
    )
    o = p.add_argument_group("request and output")
    o.add_argument("--no-ignore-eos", action="store_true")
    o.add_argument("--no-min-tokens", action="store_true")
    o.add_argument("--temperature", type=float, default=None)
    o.add_argument("--extra-body", default=None, help="JSON merged into every request body")
    o.add_argument(
        "--goodput",
        nargs="+",
        default=[],
        metavar="KEY:MS",
        help="SLOs for goodput, e.g. ttft:500 tpot:50 e2el:10000",
    )
    o.add_argument("--percentiles", default="50,90,95,99")
    o.add_argument("--no-server-metrics", action="store_true")
    o.add_argument("--metrics-path", default="/metrics")
    o.add_argument("--label", default=None)
    o.add_argument(
        "--plan",
        default=None,
        metavar="FILE[#RANK]",
        help="the plan verified: a JSON plan file, or FILE#N, the recommendation ranked N in a "
        "saved 'python -m planner recommend --json'",
    )
    o.add_argument(
        "--runs-dir",
        type=Path,
        default=None,
        help="where run files go (default: the dashboard's, <SERVEWISE_USER_DATA_DIR>/runs)",
    )
    o.add_argument("--no-progress", action="store_true")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m benchmarks_runner",
        description="Drive an OpenAI-compatible endpoint and store what it measures.",
    )
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    run = sub.add_parser("run", help="one benchmark run")
    _add_endpoint_args(run)
    _add_workload_args(run, load=True)
    run.add_argument(
        "--result-json",
        type=Path,
        default=None,
        help="also copy the vllm-bench-style result.json here",
    )
    sw = sub.add_parser("sweep", help="one run per concurrency or rate value")
    _add_endpoint_args(sw)
    _add_workload_args(sw, load=False)
    x = sw.add_mutually_exclusive_group(required=True)
    x.add_argument("--sweep-concurrency", default=None, help="e.g. 1,4,16,64")
    x.add_argument("--sweep-rate", default=None, help="e.g. 1,2,4,8")
    se = sub.add_parser("search", help="highest request rate that meets the --goodput SLOs")
    _add_endpoint_args(se)
    _add_workload_args(se, load=False)
    rate = number(low=0, high=1_000_000, low_open=True)
    se.add_argument("--attainment", type=fraction(), default=0.9)
    se.add_argument("--start-rate", type=rate, default=1.0)
    se.add_argument("--max-rate", type=rate, default=1000.0)
    se.add_argument("--max-runs", type=positive_int(1_000), default=8)
    dg = sub.add_parser(
        "diagnose",
        help="a run, a result file or a live endpoint against the ten ways a cluster wastes money",
    )
    dg.add_argument(
        "source",
        nargs="?",
        type=Path,
        default=None,
        help="a run directory, or a vllm bench serve / GuideLLM / AIPerf result",
    )
    dg.add_argument("--base-url", default=None, help="watch this live endpoint's /metrics instead")
    dg.add_argument(
        "--duration",
        type=number(low=0, high=7 * 86_400, low_open=True),
        default=60.0,
        help="seconds to watch the endpoint (--base-url)",
    )
    dg.add_argument(
        "--interval-s",
        type=number(low=0, high=3_600, low_open=True),
        default=1.0,
        help="seconds between scrapes",
    )
    dg.add_argument("--metrics-path", type=metrics_path, default="/metrics")
    dg.add_argument(
        "--api-key-env", default=None, help="name of the environment variable holding the API key"
    )
    dg.add_argument("--region", default=None, help="price region (default: the cheapest listed)")
    dg.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    dg.add_argument(
        "--no-predict",
        action="store_true",
        help="skip the performance model (no what-ifs; saves its ~10 s fit)",
    )
    _add_plan_args(
        dg,
        "the deployment the run (or the endpoint) measured, when the run does not name it: "
        "the what-if of each fix predicts it",
    )
    im = sub.add_parser("import", help="import another tool's result into run files")
    im.add_argument("--format", required=True, choices=["vllm", "guidellm", "aiperf"])
    im.add_argument("file", type=Path)
    im.add_argument(
        "--runs-dir",
        type=Path,
        default=None,
        help="where run files go (default: the dashboard's, <SERVEWISE_USER_DATA_DIR>/runs)",
    )
    _add_plan_args(
        im,
        "what the tool measured, so the run calibrates the model: --plan FILE[#RANK], or --gpu "
        "with the layout and engine flags",
    )
    return p


def _add_plan_args(p: argparse.ArgumentParser, description: str) -> None:
    """``--plan FILE[#RANK]``, or ``--gpu`` with the layout and engine flags: the plan a run
    measured (import, diagnose)."""
    ip = p.add_argument_group("plan", description)
    ip.add_argument(
        "--plan",
        default=None,
        metavar="FILE[#RANK]",
        help="a JSON plan file, or FILE#N: the recommendation ranked N in a saved "
        "'python -m planner recommend --json'",
    )
    ip.add_argument("--gpu", default=None, help="catalog GPU id, e.g. H100-SXM")
    ip.add_argument("--tp", type=positive_int(1024), default=1)
    ip.add_argument("--pp", type=positive_int(1024), default=1)
    ip.add_argument("--precision", default="bf16")
    ip.add_argument("--engine", default="vllm")
    ip.add_argument("--engine-version", default=None)
    ip.add_argument("--instance", default=None, help="catalog instance (its GPU links)")
    ip.add_argument("--max-num-seqs", type=positive_int(1_000_000), default=None)
    ip.add_argument("--max-num-batched-tokens", type=positive_int(100_000_000), default=None)
    ip.add_argument("--kv-cache-dtype", default=None)
    ip.add_argument(
        "--plan-model", default=None, help="Hugging Face id (default: the model the tool names)"
    )


def _plan_from_args(args: argparse.Namespace, catalog: Any, model: str | None) -> Plan | None:
    """The plan ``--plan`` or ``--gpu ...`` names (its model ``model`` when it names none),
    checked against the catalog; None when neither is given."""
    from benchmarks_runner.plans import checked_plan, plan_from_flags

    if args.plan is not None and args.gpu is not None:
        raise ConfigError("--plan and --gpu: give the plan one way, not both")
    plan = _load_plan(args.plan, args.plan_model or model)
    if plan is None and args.gpu is not None:
        plan = plan_from_flags(
            model=args.plan_model or "",
            gpu=args.gpu,
            tp=args.tp,
            pp=args.pp,
            precision=args.precision,
            engine=args.engine,
            engine_version=args.engine_version,
            instance=args.instance,
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            kv_cache_dtype=args.kv_cache_dtype,
        )
    if plan is None:
        return None
    if args.plan_model:
        plan = plan.model_copy(update={"model": args.plan_model})
    return checked_plan(plan, catalog, model=model)


def _parse_kv(items: list[str], what: str, sep: str) -> dict[str, str]:
    out = {}
    for item in items:
        if sep not in item:
            raise ConfigError(f"{what} {item!r}: expected KEY{sep}VALUE")
        k, v = item.split(sep, 1)
        out[k.strip()] = v.strip()
    return out


def _parse_goodput(items: list[str]) -> dict[str, float]:
    """``ttft:500 tpot:50`` as milliseconds by SLO name; ConfigError naming a bad item."""
    out = {}
    for key, text in _parse_kv(items, "--goodput", ":").items():
        allowed = "KEY:MS with KEY one of ttft, tpot, e2el and MS a number of ms > 0"
        if key not in ("ttft", "tpot", "e2el"):
            raise ConfigError(f"--goodput={key}:{text} is not allowed: {allowed}")
        try:
            out[key] = finite_number("--goodput", text, low=0, low_open=True)
        except InvalidInputError:
            raise ConfigError(f"--goodput={key}:{text} is not allowed: {allowed}") from None
    return out


def _option_error(exc: ConfigError) -> ConfigError:
    """A configuration error in the words of the command line: ``read_timeout_s=-1: ...``
    becomes ``--read-timeout-s=-1: ...``."""
    text = str(exc)
    match = re.match(r"([a-z][a-z_]*)(\.[A-Za-z0-9_.-]+)?=", text)
    if match is None:
        return exc
    field = match.group(1)
    option = _OPTION_OF_FIELD.get(field, "--" + field.replace("_", "-"))
    return ConfigError(option + text[len(field) :])


_OPTION_OF_FIELD = {
    "goodput_slos_ms": "--goodput",
    "headers": "--header",
    "extra_body": "--extra-body",
    "metrics_url": "--metrics-path",
    "api": "--endpoint",
    "base_url": "--base-url",
    "prompt_seed": "--seed",
}


def metrics_path(text: str) -> str:
    """``--metrics-path``: a path on the endpoint's server (argparse type)."""
    try:
        return check_metrics_path(text, "--metrics-path")
    except ValueError as exc:
        raise ArgumentError(str(exc)) from None


#: the TLS files of a run and their options
_TLS_OPTIONS = (
    ("ca_file", "--ca-file"),
    ("client_cert", "--client-cert"),
    ("client_key", "--client-key"),
)


def check_tls_files(args: argparse.Namespace) -> None:
    """Each TLS file given is a regular file that loads as what it is (a CA bundle, a client
    certificate and key), checked before the run starts: named by its option, never an
    ``ssl`` error without a file name once the run's files are written."""
    for attr, option in _TLS_OPTIONS:
        path = getattr(args, attr, None)
        if path is None:
            continue
        try:
            regular = Path(path).is_file()
        except OSError:
            regular = False
        if not regular:
            what = "not a regular file" if Path(path).exists() else "no such file"
            raise ConfigError(f"{option}={path!r}: {what}")
    if args.insecure:
        return
    tls = TlsOptions(True, args.ca_file, args.client_cert, args.client_key)
    try:
        tls.context()
    except (ssl.SSLError, OSError, ValueError) as exc:
        given = "/".join(
            f"{option}={getattr(args, attr)!r}"
            for attr, option in _TLS_OPTIONS
            if getattr(args, attr, None) is not None
        )
        raise ConfigError(
            f"{given}: cannot be loaded ({one_line(str(exc), 160)}); PEM files are expected "
            "(a CA bundle; a client certificate and its key)"
        ) from None


def config_from_args(args: argparse.Namespace, **override: Any) -> RunConfig:
    trace = getattr(args, "trace", None)
    conc = getattr(args, "concurrency", None)
    rate = getattr(args, "request_rate", None)
    load = "trace" if trace else ("rate" if rate is not None else "concurrency")
    slos = _parse_goodput(args.goodput)
    check_tls_files(args)
    try:
        percentiles = [float(x) for x in args.percentiles.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            f"--percentiles {args.percentiles!r}: expected numbers like 50,99"
        ) from None
    extra = {}
    if args.extra_body:
        try:
            extra = json.loads(args.extra_body)
        except ValueError as exc:
            raise ConfigError(f"--extra-body: not JSON ({exc})") from None
    workload: dict[str, Any] = {}
    if args.input_len is not None and args.output_len is not None:
        input_len, output_len = length_distributions(args)
        workload = workload_record(
            input_len,
            output_len,
            prefix_share=args.prefix_share,
            prefix_groups=args.prefix_groups,
        )
    if trace:
        workload = {
            "trace": str(trace),
            "trace_format": args.trace_format,
            "time_scale": args.time_scale,
        }
    fields: dict[str, Any] = dict(
        base_url=args.base_url,
        model=args.model,
        api=args.endpoint,
        api_key_env=args.api_key_env,
        headers=_parse_kv(args.header, "--header", "="),
        tls_verify=not args.insecure,
        tls_ca_file=args.ca_file,
        tls_client_cert=args.client_cert,
        tls_client_key=args.client_key,
        connect_timeout_s=args.connect_timeout_s,
        read_timeout_s=args.read_timeout_s,
        request_timeout_s=args.request_timeout_s,
        load=load,
        concurrency=conc if conc is not None else args.max_concurrency,
        request_rate=rate,
        burstiness=args.burstiness,
        time_scale=args.time_scale,
        warmup=args.warmup,
        duration_s=args.duration_s,
        max_error_rate=args.max_error_rate,
        max_failed_share=args.max_failed_share,
        seed=args.seed or 0,
        prompt_seed=args.seed,
        ignore_eos=not args.no_ignore_eos,
        use_min_tokens=not args.no_min_tokens,
        temperature=args.temperature,
        extra_body=extra,
        goodput_slos_ms=slos,
        percentiles=percentiles,
        scrape_metrics=not args.no_server_metrics,
        metrics_url=args.metrics_path,
        label=args.label,
        workload=workload,
    )
    fields.update(override)
    try:
        return make_run_config(**fields)
    except ConfigError as exc:
        raise _option_error(exc) from None


def length_distributions(
    args: argparse.Namespace,
) -> tuple[LengthDistribution, LengthDistribution]:
    """``--input-len/--input-dist/--input-spread`` and the output ones as the planner's
    distributions; raises ConfigError naming the flag."""
    out: list[LengthDistribution] = []
    for side in ("input", "output"):
        mean = getattr(args, f"{side}_len")
        if not 1 <= mean <= MAX_REQUEST_TOKENS:
            raise ConfigError(
                f"--{side}-len={mean}: a token count from 1 to {MAX_REQUEST_TOKENS:,}"
            )
        spread = getattr(args, f"{side}_spread")
        if not 0 <= spread <= MAX_REQUEST_TOKENS:  # far past any request, and NaN
            raise ConfigError(
                f"--{side}-spread={spread}: a number of tokens from 0 to {MAX_REQUEST_TOKENS:,}"
            )
        try:
            out.append(
                LengthDistribution.from_mean_spread(
                    getattr(args, f"{side}_dist"), mean, getattr(args, f"{side}_spread")
                )
            )
        except InvalidInputError as exc:
            raise ConfigError(f"--{side}-dist/--{side}-spread: {exc}") from None
    return out[0], out[1]


def specs_from_args(args: argparse.Namespace, config: RunConfig) -> list[RequestSpec]:
    if args.trace is not None:
        if args.trace_format is None:
            raise ConfigError(f"--trace-format is required with --trace; one of {TRACE_FORMATS}")
        specs = load_trace(
            args.trace,
            args.trace_format,
            time_scale=args.time_scale,
            max_requests=args.num_requests,
        )
        if not specs:
            raise ConfigError(f"--trace {args.trace}: no usable request in the trace")
        return specs
    missing = [n for n in ("input_len", "output_len", "num_requests") if getattr(args, n) is None]
    if missing:
        raise ConfigError(
            "missing "
            + ", ".join("--" + m.replace("_", "-") for m in missing)
            + " (or give --trace)"
        )
    if args.num_requests < 1:
        raise ConfigError(f"--num-requests={args.num_requests}: must be >= 1")
    in_d, out_d = length_distributions(args)
    try:
        specs = build_synthetic_specs(
            args.num_requests,
            in_d,
            out_d,
            prefix_share=args.prefix_share,
            num_prefix_groups=args.prefix_groups,
            seed=args.seed or 0,
        )
    except ValueError as exc:
        raise ConfigError(f"workload: {str(exc).splitlines()[0]}") from None
    if config.load == "rate" and config.request_rate is not None:
        specs = with_arrivals(
            specs, arrival_times(len(specs), config.request_rate, config.burstiness, config.seed)
        )
    return specs


class ProgressBar:
    """Plain-text progress on stderr: redrawn in place on a terminal, a line every 2 s else."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self._last = 0.0

    def __call__(self, s: ProgressSnapshot) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        final = s.phase == "done"
        if not self.tty and not final and now - self._last < 2.0:
            return
        self._last = now
        total = max(1, s.requests_total)
        width = 30
        filled = int(width * min(1.0, s.requests_done / total))
        ttft = (
            f" ttft p50 {s.ttft_ms_p50:.0f} p99 {s.ttft_ms_p99:.0f} ms"
            if s.ttft_ms_p50 is not None and s.ttft_ms_p99 is not None
            else ""
        )
        kv = f" kv {s.kv_cache_usage:.2f}" if s.kv_cache_usage is not None else ""
        line = (
            f"[{'#' * filled}{'.' * (width - filled)}] {s.requests_done}/{s.requests_total}"
            f" failed {s.requests_failed} {s.elapsed_s:6.1f}s"
            f" {s.output_tok_per_s:8.1f} tok/s{ttft}{kv} ({s.phase})"
        )
        if self.tty:
            sys.stderr.write("\r" + line + ("\n" if final else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def print_summary(result: RunResult) -> None:
    s = result.summary or {}
    print("=" * 18 + " Serving Benchmark Result " + "=" * 18)
    rows = [
        ("Run", result.run_id),
        ("Status", result.status if result.error is None else f"{result.status}: {result.error}"),
        ("Successful requests", s.get("completed")),
        ("Failed requests", s.get("failed")),
        ("Benchmark duration (s)", s.get("duration")),
        ("Total input tokens", s.get("total_input_tokens")),
        ("Total generated tokens", s.get("total_output_tokens")),
        ("Request throughput (req/s)", s.get("request_throughput")),
        ("Request goodput (req/s)", s.get("request_goodput")),
        ("Output token throughput (tok/s)", s.get("output_throughput")),
        ("Total token throughput (tok/s)", s.get("total_token_throughput")),
        ("Mean TTFT (ms)", s.get("mean_ttft_ms")),
        ("P99 TTFT (ms)", s.get("p99_ttft_ms")),
        ("Mean TPOT (ms)", s.get("mean_tpot_ms")),
        ("P99 TPOT (ms)", s.get("p99_tpot_ms")),
        ("Mean accepted tokens/step (server)", s.get("server_spec_accept_len")),
        ("Median ITL (ms)", s.get("median_itl_ms")),
        ("P99 ITL (ms)", s.get("p99_itl_ms")),
        ("Mean E2EL (ms)", s.get("mean_e2el_ms")),
    ]
    for k, v in rows:
        if v is None:
            continue
        print(f"{k + ':':<40} {v:.2f}" if isinstance(v, float) else f"{k + ':':<40} {v}")
    for c in result.self_checks:
        print(f"check {c['name']:<28} {'ok ' if c['ok'] else 'BAD'} {c['message']}")
    print(f"run files: {result.run_dir}")


#: The signal that cancelled the last run (SIGINT or SIGTERM), None when none did.
_cancelled_by: list[signal.Signals] = []
#: Signals ``python -m benchmarks_runner`` received before this module was imported whole
#: (its ``__main__`` records them): a run then ends ``cancelled`` as soon as it can.
_early_signals: list[signal.Signals] = []


async def _with_sigint(coro_factory: Any) -> Any:
    """Run with SIGINT and SIGTERM cancelling the run (its rows are kept, its files written)."""
    loop = asyncio.get_running_loop()
    cancel = asyncio.Event()
    installed: list[signal.Signals] = []

    def on_signal(sig: signal.Signals) -> None:
        if not _cancelled_by:
            _cancelled_by.append(sig)
        cancel.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, on_signal, sig)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    try:
        return await coro_factory(cancel)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def _load_plan(reference: str | None, model: str | None = None) -> Plan | None:
    """``--plan FILE[#RANK]`` typed (its model ``model`` when it names none)."""
    from benchmarks_runner.plans import load_plan

    return None if reference is None else load_plan(reference, model)


def _stored(plan: Plan | None) -> dict[str, Any] | None:
    """A plan as run.json keeps it."""
    return None if plan is None else plan.model_dump(mode="json")


class _Signalled(BaseException):
    """SIGINT or SIGTERM before a run's event loop takes them over (while ``run`` checks its
    arguments or the endpoint, reads a trace or a plan): the run ends ``cancelled``."""

    def __init__(self, sig: signal.Signals) -> None:
        super().__init__(sig.name)
        self.sig = sig


def _raise_signalled(signum: int, frame: Any) -> None:
    sig = signal.Signals(signum)
    if not _cancelled_by:
        _cancelled_by.append(sig)
    raise _Signalled(sig)


def _signals_raise() -> None:
    """From here on SIGINT and SIGTERM raise :class:`_Signalled` (an event loop's handlers,
    once removed, leave the default action behind: set again after each loop). Only the main
    thread may set handlers; elsewhere (a caller's thread) they are left as they are."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _raise_signalled)
    if _early_signals:  # received while the command's modules were imported
        raise _Signalled(_early_signals[0])


async def _preflight(config: RunConfig) -> None:
    """The preflight alone, ended at once by SIGINT or SIGTERM (raised as :class:`_Signalled`)."""

    async def check(cancel: asyncio.Event) -> None:
        task = asyncio.ensure_future(check_endpoint(config))
        waiter = asyncio.ensure_future(cancel.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            raise _Signalled(_cancelled_by[0] if _cancelled_by else signal.SIGINT)
        task.result()

    await _with_sigint(check)


def _cancelled_exit(sig: signal.Signals) -> int:
    print(f"error: cancelled by {sig.name}; rows collected so far are kept", file=sys.stderr)
    return EXIT_TERMINATED if sig == signal.SIGTERM else EXIT_CANCELLED


def _cmd_run(args: argparse.Namespace) -> int:
    """A run; SIGINT or SIGTERM at any point, also before its first request is built (while
    the endpoint is checked, a trace or a plan read), ends it ``cancelled`` with its run files
    and exit code 130 or 143; the caller's handlers are restored after it."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _run_command(args)
    finally:
        if threading.current_thread() is threading.main_thread():
            for sig, handler in handlers.items():
                signal.signal(sig, handler)


def _run_command(args: argparse.Namespace) -> int:
    config: RunConfig | None = None
    phase = "checking its arguments"
    try:
        _signals_raise()
        config = config_from_args(args)
        if args.trace is not None and config.preflight:
            phase = "checking the endpoint"
            asyncio.run(_preflight(config))  # before reading a trace that may be large
            _signals_raise()
        phase = "reading the trace" if args.trace is not None else "building its requests"
        specs = specs_from_args(args, config)
        phase = "reading the plan"
        plan = _stored(_load_plan(args.plan, config.model))
        phase = "starting"
        bar = ProgressBar(not args.no_progress)
        result: RunResult = asyncio.run(
            _with_sigint(
                lambda cancel: run_benchmark(
                    config, specs, args.runs_dir, plan=plan, progress=bar, cancel=cancel
                )
            )
        )
    except _Signalled as signalled:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the files are written whatever comes
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        cancelled = record_cancelled_run(
            args.runs_dir,
            config,
            f"cancelled by {signalled.sig.name} before the first request "
            f"(while {phase}); nothing measured",
            model=args.model,
        )
        print(f"run files: {cancelled.run_dir}")
        return _cancelled_exit(signalled.sig)
    if args.result_json is not None and result.result_json_path.is_file():
        args.result_json.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(result.result_json_path, args.result_json)
    print_summary(result)
    if result.status == "cancelled":
        return _cancelled_exit(_cancelled_by[0] if _cancelled_by else signal.SIGINT)
    if result.status == "failed":
        print(f"error: {result.error}", file=sys.stderr)
        return EXIT_ABORTED
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from benchmarks_runner.sweep import run_sweep

    kind = "concurrency" if args.sweep_concurrency else "rate"
    raw = args.sweep_concurrency or args.sweep_rate
    try:
        values = [float(v) for v in raw.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"--sweep-{kind} {raw!r}: expected numbers like 1,4,16") from None
    base = config_from_args(
        args,
        load=kind,
        concurrency=int(values[0]) if kind == "concurrency" else args.max_concurrency,
        request_rate=values[0] if kind == "rate" else None,
    )
    plan = _stored(_load_plan(args.plan, base.model))
    results = asyncio.run(
        run_sweep(base, kind, values, lambda c: specs_from_args(args, c), args.runs_dir, plan=plan)
    )
    print(f"{kind:>12} {'req/s':>10} {'out tok/s':>10} {'p99 ttft ms':>12} {'failed':>7} run")
    for v, r in zip(values, results, strict=True):
        s = r.summary or {}
        print(
            f"{v:>12g} {s.get('request_throughput') or 0:>10.2f} "
            f"{s.get('output_throughput') or 0:>10.1f} {s.get('p99_ttft_ms') or 0:>12.1f} "
            f"{s.get('failed') or 0:>7} {r.run_id}"
        )
    return 0


def _cmd_search(args: argparse.Namespace) -> int:
    from benchmarks_runner.sweep import search_max_rate

    slos = _parse_goodput(args.goodput)
    if not slos:
        raise ConfigError("--goodput is required for search, e.g. --goodput ttft:500 tpot:50")
    base = config_from_args(
        args, load="rate", request_rate=args.start_rate, concurrency=args.max_concurrency
    )
    out = asyncio.run(
        search_max_rate(
            base,
            lambda c: specs_from_args(args, c),
            args.runs_dir,
            slos_ms=slos,
            attainment=args.attainment,
            start_rate=args.start_rate,
            max_rate=args.max_rate,
            max_runs=args.max_runs,
            plan=_stored(_load_plan(args.plan, base.model)),
        )
    )
    for rate, att, run_id in out.points:
        print(f"rate {rate:g} req/s: SLO attainment {att:.3f} ({run_id})")
    print(f"highest rate meeting the SLOs: {out.best_rate}")
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    from benchmarks_runner.importers import read_file, write_run
    from planner.catalog import load_catalog
    from planner.run_files import read_run_dir
    from planner.runs import calibration_problem
    from planner.settings import get_settings

    if args.plan is not None and args.gpu is not None:
        raise ConfigError("--plan and --gpu: give the plan one way, not both")
    runs = read_file(args.format, args.file)  # every run checked before one is written
    plan = None
    if args.plan is not None or args.gpu is not None:
        catalog = load_catalog(user_dir=get_settings().user_data_dir / "catalog")
        plan = _plan_from_args(args, catalog, runs[0].model)
    for run in runs:
        run_dir = write_run(args.runs_dir, run, _stored(plan))
        print(run_dir)
        problem = calibration_problem(read_run_dir(run_dir))
        status = "a calibration point" if problem is None else f"not a calibration point: {problem}"
        print(f"{run_dir.name}: {status}", file=sys.stderr)
    return 0


def _cmd_diagnose(args: argparse.Namespace) -> int:
    import os

    from benchmarks_runner.diagnose import load_runs, scratch_dir, watch_endpoint
    from planner.catalog import load_catalog
    from planner.diagnosis import Diagnosis, diagnose, evidence_from_run, evidence_from_scrape
    from planner.diagnosis.report import text_report, to_json
    from planner.errors import PlannerError
    from planner.perf.model import PerformanceModel, get_performance_model
    from planner.settings import get_settings

    if (args.source is None) == (args.base_url is None):
        raise ConfigError("diagnose needs a run directory or result file, or --base-url URL")
    endpoint = None
    if args.base_url is not None:  # checked before the model is fitted; its user info leaves
        try:
            endpoint = parse_endpoint_url(args.base_url, "--base-url")
        except InvalidInputError as exc:
            raise ConfigError(str(exc)) from None
    try:
        catalog = load_catalog(user_dir=get_settings().user_data_dir / "catalog")
        model: PerformanceModel | None = None
        if not args.no_predict:
            print("fitting the performance model for the what-ifs ...", file=sys.stderr)
            model = get_performance_model(catalog)
        results: list[Diagnosis] = []
        if endpoint is not None:
            api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
            print(f"watching {endpoint.url}{args.metrics_path} for {args.duration:g} s ...",
                  file=sys.stderr)  # fmt: skip
            samples, watched = asyncio.run(
                watch_endpoint(
                    endpoint.url,
                    args.duration,
                    interval_s=args.interval_s,
                    metrics_path=args.metrics_path,
                    api_key=api_key,
                    basic_auth=endpoint.basic_auth,
                )
            )
            plan = _stored(_plan_from_args(args, catalog, None))
            ev = evidence_from_scrape(samples, duration_s=watched, base_url=endpoint.url, plan=plan)
            results.append(diagnose(ev, model=model, catalog=catalog, region=args.region))
        else:
            with scratch_dir() as scratch:
                runs = load_runs(args.source, Path(scratch))
                named = next((str(r.meta["model"]) for r in runs if r.meta.get("model")), None)
                plan = _stored(_plan_from_args(args, catalog, named))
                for run in runs:
                    if plan is not None:
                        run.meta["plan"] = plan
                    ev = evidence_from_run(run)
                    results.append(diagnose(ev, model=model, catalog=catalog, region=args.region))
    except PlannerError as exc:
        raise ConfigError(str(exc)) from None
    if args.json:
        payload: Any = [to_json(d) for d in results]
        print(json.dumps(payload[0] if len(payload) == 1 else payload, indent=1))
    else:
        print("\n".join(text_report(d) for d in results), end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if getattr(args, "runs_dir", "unset") is None:
            # The same place the dashboard's store ingests runs from.
            from planner.settings import get_settings

            args.runs_dir = get_settings().runs_directory
        handler = {
            "run": _cmd_run,
            "sweep": _cmd_sweep,
            "search": _cmd_search,
            "import": _cmd_import,
            "diagnose": _cmd_diagnose,
        }[args.command]
        return handler(args)
    except (ArgumentError, PlannerError) as exc:
        print_error(str(exc))
        return 2
    except BenchmarkError as exc:
        print_error(str(exc) or type(exc).__name__)
        return exc.exit_code
    except KeyboardInterrupt:
        print_error("interrupted")
        return EXIT_CANCELLED
    except OSError as exc:  # a file named on the command line cannot be read or written
        print_error(f"{exc.filename or 'file'}: {exc.strerror or exc}")
        return 2
    except Exception as exc:  # a bug: still one line, never a traceback
        print_error(f"unexpected {type(exc).__name__}: {exc} (please report this)")
        return EXIT_BUG
