"""``python -m benchmarks_runner.simulated``: start the simulated server from the command line.

Prints ``LISTENING <port>`` on stdout once it accepts connections (``--port 0`` picks a free
port). ``--scenario JSON`` (the planner's Scenario, as a prediction was made for it) or
``--gpu ID --tp N [--pp N]`` with ``--model HF_ID`` times it by the performance model's engine
for that plan; otherwise ``--ttft-ms`` and ``--token-delay-ms`` fix its timing.

A bad flag or a value out of range is one line ``error: --flag=value is not allowed: ...``
on stderr and exit code 2, as for the other command lines; so is an address it cannot listen on.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from benchmarks_runner.simulated.server import PreciseEpollSelector, ServerOptions, serve
from benchmarks_runner.simulated.timing import FixedTiming, TimingModel
from planner.commands.args import (
    ArgumentError,
    OneLineParser,
    fraction,
    number,
    positive_int,
    print_error,
)

#: The catalog's weight precisions (planner.catalog.schema.PRECISIONS, without importing the
#: catalog: a fixed-timing server starts at once).
PRECISIONS = ("bf16", "fp16", "fp8", "int8", "int4", "fp4")


MS = number(low=0, high=3_600_000)  # a delay in ms: up to an hour
SHARE = fraction(zero=True)
COUNT = positive_int(10_000_000)


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m benchmarks_runner.simulated",
        description="Simulated OpenAI-compatible streaming server (marked as simulated).",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument(
        "--port", type=number(low=0, high=65_535, integer=True), default=0, help="0: a free port"
    )
    p.add_argument(
        "--model",
        action="append",
        dest="models",
        help="served model name (repeatable; default sim-model)",
    )
    p.add_argument("--ttft-ms", type=MS, default=20.0)
    p.add_argument("--token-delay-ms", type=MS, default=10.0)
    p.add_argument("--tokens-per-chunk", type=positive_int(10_000), default=1)
    p.add_argument(
        "--error-rate", type=SHARE, default=0.0, help="fraction answered with --error-status"
    )
    p.add_argument(
        "--error-status",
        type=number(low=400, high=599, integer=True),
        default=500,
        help="HTTP status of those (4xx or 5xx)",
    )
    p.add_argument(
        "--drop-rate",
        type=SHARE,
        default=0.0,
        help="fraction whose connection is closed mid-stream",
    )
    p.add_argument(
        "--malformed-rate", type=SHARE, default=0.0, help="fraction that get a garbage SSE chunk"
    )
    p.add_argument("--stall-rate", type=SHARE, default=0.0)
    p.add_argument("--stall-s", type=number(low=0, high=3_600), default=1.0)
    p.add_argument(
        "--max-concurrency",
        type=COUNT,
        default=None,
        help="requests beyond it queue (vllm:num_requests_waiting)",
    )
    p.add_argument("--kv-capacity-tokens", type=COUNT, default=None)
    p.add_argument("--tokens-per-word", type=number(low=0, high=100, low_open=True), default=1.0)
    p.add_argument(
        "--reasoning-tokens",
        type=number(low=0, high=10_000_000, integer=True),
        default=0,
        help="chat: the first N tokens stream as delta.reasoning (as vLLM 0.33)",
    )
    p.add_argument(
        "--eos-after",
        type=COUNT,
        default=None,
        help="stop after N tokens unless ignore_eos/min_tokens say otherwise",
    )
    p.add_argument(
        "--reject-extensions",
        action="store_true",
        help="answer 400 to ignore_eos, min_tokens, continuous_usage_stats",
    )
    p.add_argument("--api-key", default=None, help="require this bearer key")
    p.add_argument("--seed", type=number(low=0, integer=True), default=0)
    perf = p.add_argument_group(
        "performance-model timing",
        "--gpu selects it: the first --model is the Hugging Face id of the plan's model",
    )
    perf.add_argument(
        "--timing",
        choices=("auto", "fixed", "perf"),
        default="auto",
        help="auto: perf when --gpu or --scenario is given, else fixed (--ttft-ms, "
        "--token-delay-ms)",
    )
    perf.add_argument(
        "--scenario",
        default=None,
        help="the planner's Scenario (JSON, or a file) the server serves one replica of: the "
        "deployment the prediction of that scenario used (instead of --gpu, --tp, ...)",
    )
    perf.add_argument("--gpu", default=None, help="catalog GPU id, e.g. H100-SXM")
    perf.add_argument("--tp", type=positive_int(1_024), default=1)
    perf.add_argument("--pp", type=positive_int(1_024), default=1)
    perf.add_argument("--precision", default="bf16", choices=PRECISIONS)
    perf.add_argument("--instance", default=None, help="catalog instance (its GPU links)")
    perf.add_argument("--engine-version", default=None)
    perf.add_argument("--max-num-seqs", type=COUNT, default=None)
    perf.add_argument("--max-num-batched-tokens", type=COUNT, default=None)
    perf.add_argument("--kv-cache-dtype", default=None, help="default: the engine's")
    perf.add_argument(
        "--gpu-memory-utilization", type=fraction(), default=None, help="default: the engine's"
    )
    perf.add_argument(
        "--coefficients",
        default=None,
        help="step-time coefficients (JSON list or object, or a file): skips the model fit",
    )
    pools = p.add_argument_group(
        "a plan",
        "--plan: a plan file (recommend's --out, the Plan page's download); a disaggregated "
        "plan starts its prefill and decode pools as two processes behind this one, a router",
    )
    pools.add_argument(
        "--plan",
        default=None,
        help="a plan (JSON, a file, or FILE#RANK of a saved `planner recommend --json`)",
    )
    pools.add_argument(
        "--pool",
        choices=("prefill", "decode"),
        default=None,
        help="serve only this pool of the disaggregated --plan (the router starts them)",
    )
    for role in ("prefill", "decode"):
        pools.add_argument(
            f"--{role}-coefficients",
            default=None,
            help=f"step-time coefficients of the {role} pool (as --coefficients)",
        )
    p.add_argument(
        "--slowdown",
        type=number(low=0, high=1_000, low_open=True),
        default=1.0,
        help="every delay times this factor (> 0)",
    )
    return p


def _timing_from_args(
    args: argparse.Namespace, options: ServerOptions
) -> tuple[TimingModel, ServerOptions]:
    """The timing model the flags ask for. Raises SystemExit with a one-line reason."""
    mode = args.timing
    if mode == "auto":
        mode = "perf" if args.gpu or args.scenario or args.plan else "fixed"
    if not args.slowdown > 0:
        raise SystemExit(f"--slowdown {args.slowdown}: must be > 0")
    if mode == "fixed":
        slow = args.slowdown
        return FixedTiming(args.ttft_ms * slow, args.token_delay_ms * slow), options
    if not args.gpu and not args.scenario and not args.plan:
        raise SystemExit(
            "--timing perf needs --plan, --scenario, or --gpu ID (with --model HF_ID, --tp N)"
        )
    # The planner (~0.6 s to import) only when the plan's timing is asked for: a fixed-timing
    # server starts at once.
    from benchmarks_runner.simulated.perf_timing import engine_timing, parse_coefficients
    from planner.catalog import load_catalog
    from planner.engine import EngineConfig
    from planner.errors import PlannerError
    from planner.perf.model import fit_is_cached
    from planner.perf.scenario import Scenario
    from planner.plan import Plan
    from planner.settings import get_settings

    try:
        plan: Plan | Scenario
        if args.scenario:
            plan = _scenario(args.scenario, Scenario)
        elif args.plan:
            plan = _scenario(args.plan, Plan, "--plan")
        else:  # a plan of the flags; the engine settings left out are the engine's own
            stated = {
                "version": args.engine_version,
                "max_num_seqs": args.max_num_seqs,
                "max_num_batched_tokens": args.max_num_batched_tokens,
                "kv_cache_dtype": args.kv_cache_dtype,
                "gpu_memory_utilization": args.gpu_memory_utilization,
            }
            plan = Plan(
                model=options.models[0],
                gpu=args.gpu,
                tp=args.tp,
                pp=args.pp,
                precision=args.precision,
                instance=args.instance,
                engine=EngineConfig.of(**{k: v for k, v in stated.items() if v is not None}),
            )
        coefficients = parse_coefficients(args.coefficients) if args.coefficients else None
        catalog = load_catalog(user_dir=get_settings().user_data_dir / "catalog")
        if isinstance(plan, Plan):  # unknown names: said at once, before any fit
            catalog.model(plan.model)
            catalog.gpu(plan.gpu)
        if coefficients is None and not fit_is_cached(catalog):
            why = (
                "no cached fit yet (once, ~10-15 s; later starts read it from the cache)"
                if get_settings().fit_cache
                else "the fit cache is off (SERVEWISE_FIT_CACHE=0)"
            )
            print(f"fitting the performance model before listening: {why}", file=sys.stderr)
        timing = engine_timing(
            plan, catalog=catalog, coefficients=coefficients, slowdown=args.slowdown
        )
    except (PlannerError, ValueError) as exc:
        raise SystemExit(f"cannot time the plan: {exc}") from None
    # the engine queues beyond max_num_seqs and holds the KV: no server-side cap of its own
    options.max_concurrency = None
    return timing, options


def _scenario(text: str, scenario_type: type[Any], flag: str = "--scenario") -> Any:
    """``--scenario`` (``--plan``): JSON of a Scenario (Plan), or the path of a file holding it."""
    source = text.strip()
    if not source.startswith("{"):
        try:
            source = Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"{flag} {text!r}: not JSON and not a readable file") from exc
    try:
        return scenario_type.model_validate_json(source)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or flag.lstrip("-")
        raise ValueError(f"{flag}: {where}: {first['msg']}") from None


def main(argv: list[str] | None = None) -> int:
    """Serve until interrupted; 2 with one ``error:`` line for what cannot be served."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
    except ArgumentError as exc:
        print_error(str(exc))
        return 2
    args.argv = argv
    try:
        return _serve(args)
    except SystemExit as exc:  # the reasons _timing_from_args gives, in one line
        if isinstance(exc.code, str):
            print_error(exc.code)
            return 2
        raise
    except OSError as exc:  # the address: in use, not local, not a host
        where = f"--host {args.host} --port {args.port}"
        print_error(f"cannot listen on {where}: {exc.strerror or exc}")
        return 2


def _serve(args: argparse.Namespace) -> int:
    options = ServerOptions(
        models=args.models or ["sim-model"],
        error_rate=args.error_rate,
        error_status=args.error_status,
        drop_rate=args.drop_rate,
        malformed_rate=args.malformed_rate,
        stall_rate=args.stall_rate,
        stall_s=args.stall_s,
        max_concurrency=args.max_concurrency,
        kv_capacity_tokens=args.kv_capacity_tokens,
        tokens_per_word=args.tokens_per_word,
        reasoning_tokens=args.reasoning_tokens,
        tokens_per_chunk=max(1, args.tokens_per_chunk),
        eos_after=args.eos_after,
        reject_extensions=args.reject_extensions,
        api_key=args.api_key,
        seed=args.seed,
    )
    if args.plan and args.timing != "fixed":
        plan = _read_plan(args.plan)
        if plan.disaggregated:
            options.models = args.models or [plan.model]
            if args.pool is None:
                return _serve_router(args, plan)
            timing: TimingModel = _pool_timing(args, plan, args.pool)
            options.max_concurrency = None
            return _run(serve(options, timing, args.host, args.port))
        options.models = args.models or [plan.model]
    elif args.pool is not None:
        raise SystemExit("--pool serves one pool of a disaggregated --plan")
    timing, options = _timing_from_args(args, options)
    return _run(serve(options, timing, args.host, args.port))


def _run(main: Any) -> int:
    with (
        contextlib.suppress(KeyboardInterrupt),
        asyncio.Runner(
            loop_factory=lambda: asyncio.SelectorEventLoop(PreciseEpollSelector())
        ) as runner,
    ):
        runner.run(main)
    return 0


def _read_plan(text: str) -> Any:
    """``--plan``: JSON of a plan, a plan file or ``FILE#RANK`` of a saved ``python -m planner
    recommend --json`` (:func:`benchmarks_runner.plans.load_plan`); SystemExit naming what is
    wrong."""
    from benchmarks_runner.errors import ConfigError
    from benchmarks_runner.plans import load_plan
    from planner.plan import Plan

    try:
        if text.strip().startswith("{"):
            return _scenario(text, Plan, "--plan")
        return load_plan(text)
    except (ValueError, ConfigError) as exc:
        raise SystemExit(str(exc)) from None


def _plan_scenario(args: argparse.Namespace, plan: Any) -> Any:
    """The scenario a disaggregated plan's pools are timed for: ``--scenario`` (the run's
    lengths, load and engine settings), else the plan's own."""
    from benchmarks_runner.simulated.perf_timing import timing_scenario
    from planner.perf.scenario import Scenario

    return _scenario(args.scenario, Scenario) if args.scenario else timing_scenario(plan)


def _pool_timing(args: argparse.Namespace, plan: Any, role: str) -> TimingModel:
    from benchmarks_runner.simulated.disaggregated import pool_timing
    from benchmarks_runner.simulated.perf_timing import parse_coefficients
    from planner.catalog import load_catalog
    from planner.errors import PlannerError
    from planner.settings import get_settings

    text = getattr(args, f"{role}_coefficients") or args.coefficients
    try:
        coefficients = parse_coefficients(text) if text else None
        catalog = load_catalog(user_dir=get_settings().user_data_dir / "catalog")
        return pool_timing(
            plan,
            _plan_scenario(args, plan),
            role,  # type: ignore[arg-type]
            catalog,
            coefficients=coefficients,
            slowdown=args.slowdown,
            seed=args.seed + (1 if role == "decode" else 0),
        )
    except (PlannerError, ValueError) as exc:
        raise SystemExit(f"cannot time the {role} pool: {exc}") from None


def _serve_router(args: argparse.Namespace, plan: Any) -> int:
    """Start both pools as child processes, then route to them until interrupted."""
    import signal

    from benchmarks_runner.simulated.disaggregated import (
        PoolAddress,
        PoolProcesses,
        Router,
        kv_transfer_of,
        serve_router,
    )
    from planner.catalog import load_catalog
    from planner.errors import PlannerError
    from planner.settings import get_settings

    try:
        catalog = load_catalog(user_dir=get_settings().user_data_dir / "catalog")
        scenario = _plan_scenario(args, plan)
        transfer = kv_transfer_of(plan, scenario, catalog)
    except (PlannerError, ValueError) as exc:
        raise SystemExit(f"cannot route the plan: {exc}") from None
    layout = plan.disaggregated_layout()
    own = _without_values(args.argv, ("--host", "--port"))
    children = PoolProcesses()

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        addresses = []
        for role, pool in (("prefill", layout.prefill), ("decode", layout.decode)):
            try:
                port = children.start(role, [*own, "--host", "127.0.0.1", "--port", "0"])  # type: ignore[arg-type]
            except RuntimeError as exc:
                raise SystemExit(str(exc)) from None
            ranks = pool.replicas * pool.attention_dp
            addresses.append(PoolAddress(role, f"http://127.0.0.1:{port}", ranks))  # type: ignore[arg-type]
        router = Router(
            addresses[0], addresses[1], transfer, slowdown=args.slowdown, link_name=layout.kv_link
        )
        return _run(serve_router(router, args.host, args.port))
    finally:
        children.stop()


def _without_values(argv: list[str], flags: tuple[str, ...]) -> list[str]:
    """``argv`` without ``flags`` and their values (``--flag V`` or ``--flag=V``)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in flags:
            skip = True
            continue
        if any(arg.startswith(f"{f}=") for f in flags):
            continue
        out.append(arg)
    return out


if __name__ == "__main__":
    sys.exit(main())
