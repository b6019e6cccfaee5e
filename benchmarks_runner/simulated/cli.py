"""``python -m benchmarks_runner.simulated``: start the simulated server from the command line.

Prints ``LISTENING <port>`` on stdout once it accepts connections (``--port 0`` picks a free
port). ``--gpu ID --tp N [--pp N]`` with ``--model HF_ID`` times it by the performance model
for that plan; otherwise ``--ttft-ms`` and ``--token-delay-ms`` fix its timing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

from benchmarks_runner.simulated.server import PreciseEpollSelector, ServerOptions, serve
from benchmarks_runner.simulated.timing import FixedTiming, SlowedTiming, TimingModel


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks_runner.simulated",
        description="Simulated OpenAI-compatible streaming server (marked as simulated).",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument(
        "--model",
        action="append",
        dest="models",
        help="served model name (repeatable; default sim-model)",
    )
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--token-delay-ms", type=float, default=10.0)
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    p.add_argument(
        "--error-rate", type=float, default=0.0, help="fraction answered with --error-status"
    )
    p.add_argument("--error-status", type=int, default=500, help="HTTP status of those (5xx)")
    p.add_argument(
        "--drop-rate",
        type=float,
        default=0.0,
        help="fraction whose connection is closed mid-stream",
    )
    p.add_argument(
        "--malformed-rate", type=float, default=0.0, help="fraction that get a garbage SSE chunk"
    )
    p.add_argument("--stall-rate", type=float, default=0.0)
    p.add_argument("--stall-s", type=float, default=1.0)
    p.add_argument(
        "--max-concurrency",
        type=int,
        default=None,
        help="requests beyond it queue (vllm:num_requests_waiting)",
    )
    p.add_argument("--kv-capacity-tokens", type=int, default=None)
    p.add_argument("--tokens-per-word", type=float, default=1.0)
    p.add_argument(
        "--reasoning-tokens",
        type=int,
        default=0,
        help="chat: first N tokens stream as reasoning_content",
    )
    p.add_argument(
        "--eos-after",
        type=int,
        default=None,
        help="stop after N tokens unless ignore_eos/min_tokens say otherwise",
    )
    p.add_argument(
        "--reject-extensions",
        action="store_true",
        help="answer 400 to ignore_eos, min_tokens, continuous_usage_stats",
    )
    p.add_argument("--api-key", default=None, help="require this bearer key")
    p.add_argument("--seed", type=int, default=0)
    perf = p.add_argument_group(
        "performance-model timing",
        "--gpu selects it: the first --model is the Hugging Face id of the plan's model",
    )
    perf.add_argument(
        "--timing",
        choices=("auto", "fixed", "perf"),
        default="auto",
        help="auto: perf when --gpu is given, else fixed (--ttft-ms, --token-delay-ms)",
    )
    perf.add_argument("--gpu", default=None, help="catalog GPU id, e.g. H100-SXM")
    perf.add_argument("--tp", type=int, default=1)
    perf.add_argument("--pp", type=int, default=1)
    perf.add_argument("--precision", default="bf16")
    perf.add_argument("--instance", default=None, help="catalog instance (its GPU links)")
    perf.add_argument("--engine-version", default=None)
    perf.add_argument("--max-num-seqs", type=int, default=None)
    perf.add_argument("--max-num-batched-tokens", type=int, default=None)
    perf.add_argument("--kv-cache-dtype", default=None, help="default: the engine's")
    perf.add_argument(
        "--gpu-memory-utilization", type=float, default=None, help="default: the engine's"
    )
    perf.add_argument(
        "--coefficients",
        default=None,
        help="step-time coefficients (JSON list or object, or a file): skips the model fit",
    )
    p.add_argument(
        "--slowdown", type=float, default=1.0, help="every delay times this factor (> 0)"
    )
    return p


def _timing_from_args(
    args: argparse.Namespace, options: ServerOptions
) -> tuple[TimingModel, ServerOptions]:
    """The timing model the flags ask for; perf timing also sets the plan's max_num_seqs and
    KV capacity on the options unless given. Raises SystemExit with a one-line reason."""
    mode = args.timing
    if mode == "auto":
        mode = "perf" if args.gpu else "fixed"
    if not args.slowdown > 0:
        raise SystemExit(f"--slowdown {args.slowdown}: must be > 0")
    if mode == "fixed":
        fixed = FixedTiming(args.ttft_ms, args.token_delay_ms, args.tokens_per_chunk)
        return (fixed if args.slowdown == 1.0 else SlowedTiming(fixed, args.slowdown)), options
    if not args.gpu:
        raise SystemExit("--timing perf needs --gpu ID (and --model HF_ID, --tp N)")
    # The planner (~0.6 s to import) only when the plan's timing is asked for: a fixed-timing
    # server starts at once.
    from benchmarks_runner.simulated.perf_timing import (
        PlanSpec,
        parse_coefficients,
        perf_timing_for_plan,
    )
    from planner.catalog import load_catalog
    from planner.errors import PlannerError
    from planner.perf.model import fit_is_cached
    from planner.settings import get_settings

    spec = PlanSpec(
        model=options.models[0],
        gpu=args.gpu,
        tp=args.tp,
        pp=args.pp,
        precision=args.precision,
        engine_version=args.engine_version,
        instance=args.instance,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        kv_cache_dtype=args.kv_cache_dtype,
        gpu_memory_utilization=args.gpu_memory_utilization,
    )
    try:
        coefficients = parse_coefficients(args.coefficients) if args.coefficients else None
        catalog = load_catalog(user_dir=get_settings().user_data_dir / "catalog")
        if coefficients is None and not fit_is_cached(catalog):
            why = (
                "no cached fit yet (once, ~10-15 s; later starts read it from the cache)"
                if get_settings().fit_cache
                else "the fit cache is off (SERVEWISE_FIT_CACHE=0)"
            )
            print(f"fitting the performance model before listening: {why}", file=sys.stderr)
        timing = perf_timing_for_plan(
            spec,
            catalog=catalog,
            coefficients=coefficients,
            slowdown=args.slowdown,
            tokens_per_chunk=args.tokens_per_chunk,
        )
    except (PlannerError, ValueError) as exc:
        raise SystemExit(f"cannot time the plan: {exc}") from None
    if options.max_concurrency is None:
        options.max_concurrency = timing.max_num_seqs
    if options.kv_capacity_tokens is None:
        options.kv_capacity_tokens = timing.kv_capacity_tokens
    return timing, options


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
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
        eos_after=args.eos_after,
        reject_extensions=args.reject_extensions,
        api_key=args.api_key,
        seed=args.seed,
    )
    timing, options = _timing_from_args(args, options)
    with (
        contextlib.suppress(KeyboardInterrupt),
        asyncio.Runner(
            loop_factory=lambda: asyncio.SelectorEventLoop(PreciseEpollSelector())
        ) as runner,
    ):
        runner.run(serve(options, timing, args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
