"""``python -m planner recommend``: the cheapest configurations that meet the SLOs.

    python -m planner recommend --model meta-llama/Llama-3.1-70B-Instruct \\
        --input-len 2048 --output-len 512 --rate 2 --peak-rate 4 \\
        --slo-ttft-p99-ms 3000 --slo-tpot-p99-ms 100 --provider aws --json

prints the ranked configurations (cheapest $/M output tokens first) and every rejected
candidate with its reason. ``--csv`` and ``--html`` export the same result; ``--emit
k8s|skypilot|docker DIR`` writes the deployment files of the best configuration into DIR.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from planner.catalog import PRICING_MODES, Catalog, load_catalog
from planner.commands.args import fraction, number, output_file, positive_int
from planner.engine import SPEC_LABELS, SPECULATIVE_CHOICES, EngineConfig
from planner.errors import InvalidInputError
from planner.input_checks import MAX_LOAD, MAX_REQUEST_TOKENS, MAX_SLO_MS, check_search_names
from planner.recommend import (
    DISAGGREGATION_MODES,
    Demand,
    RecommendationResult,
    RecommendRequest,
    SearchSpace,
    Slo,
    empty_search_reason,
    filtered_instances,
    perf_predictor,
    ranking_rows,
    recommend,
    rejected_rows,
    unmet_slos,
)
from planner.settings import get_settings

TOKENS = positive_int(MAX_REQUEST_TOKENS)
RATE = number(low=0, high=MAX_LOAD, low_open=True)
SLO = number(low=0, high=MAX_SLO_MS, low_open=True)
#: What the pydantic fields are called on the command line.
OPTION_OF_FIELD = {
    "avg_rate_rps": "--rate",
    "peak_rate_rps": "--peak-rate",
    "ttft_p99_ms": "--slo-ttft-p99-ms",
    "tpot_p99_ms": "--slo-tpot-p99-ms",
    "e2e_p99_ms": "--slo-e2e-p99-ms",
    "providers": "--provider",
    "regions": "--region",
    "gpus": "--gpu",
    "instances": "--instance",
    "precisions": "--precision",
}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "recommend", help="rank the cheapest configurations meeting the SLOs"
    )
    parser.add_argument("--model", required=True, help="Hugging Face id")
    parser.add_argument("--input-len", type=TOKENS, required=True, help="prompt tokens")
    parser.add_argument("--output-len", type=TOKENS, required=True, help="answer tokens")
    load = parser.add_mutually_exclusive_group(required=True)
    load.add_argument("--rate", type=RATE, help="average requests per second")
    load.add_argument(
        "--concurrency", type=positive_int(MAX_LOAD), help="requests in flight (closed loop)"
    )
    parser.add_argument("--peak-rate", type=RATE, help="peak requests per second")
    parser.add_argument("--slo-ttft-p99-ms", type=SLO, help="p99 time to first token, ms")
    parser.add_argument("--slo-tpot-p99-ms", type=SLO, help="p99 time per output token, ms")
    parser.add_argument("--slo-e2e-p99-ms", type=SLO, help="p99 end-to-end latency, ms")
    parser.add_argument("--provider", action="append", help="aws, gcp, azure, ... (repeatable)")
    parser.add_argument("--region", action="append", help="e.g. us-east-1 (repeatable)")
    parser.add_argument("--gpu", action="append", help="GPU id, e.g. L40S (repeatable)")
    parser.add_argument("--instance", action="append", help="only this instance type (repeatable)")
    parser.add_argument("--pricing", default="on_demand", choices=PRICING_MODES)
    parser.add_argument(
        "--max-nodes", type=positive_int(16), default=2, help="instances per replica"
    )
    parser.add_argument("--precision", action="append", help="bf16, fp8, ... (repeatable)")
    parser.add_argument(
        "--engine",
        default="vllm",
        help="serving engine: vllm, sglang or tensorrt-llm (default vllm)",
    )
    parser.add_argument(
        "--attention-dp",
        type=positive_int(1024),
        default=1,
        help="attention data-parallel ranks a replica (MoE models; default 1)",
    )
    parser.add_argument(
        "--expert-parallel",
        action="store_true",
        help="shard whole experts over a replica's GPUs (MoE models)",
    )
    parser.add_argument(
        "--speculative",
        default="auto",
        choices=SPECULATIVE_CHOICES,
        help="speculative decoding searched: auto (default: MTP where the model has the "
        "layers, EAGLE-3 where a draft is published, n-gram for a model with neither), off, "
        "or one method",
    )
    parser.add_argument(
        "--spec-accept-len",
        type=number(low=1, high=17),
        help="the workload's mean accepted tokens a speculative step, bonus token included "
        "(default: each method's published figure)",
    )
    parser.add_argument(
        "--spare-replicas",
        type=number(low=0, high=1_000, integer=True),
        default=1,
        help="N+spare (default 1)",
    )
    parser.add_argument("--utilisation", type=fraction(), help="observed average utilisation (0-1]")
    parser.add_argument(
        "--prefix-share",
        type=fraction(zero=True, one=False),
        default=0.0,
        help="shared prompt share",
    )
    parser.add_argument(
        "--top", type=positive_int(100_000), default=20, help="ranked rows to print"
    )
    parser.add_argument(
        "--disaggregation",
        default="off",
        choices=DISAGGREGATION_MODES,
        help="prefill/decode pools as a search dimension: off (aggregated replicas only, the "
        "default), auto (both kinds ranked together), on (disaggregated plans only)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--csv", type=output_file, help="write the ranking to this CSV file")
    parser.add_argument("--html", type=output_file, help="write a self-contained HTML report")
    parser.add_argument(
        "--emit",
        nargs=2,
        metavar=("TARGET", "DIR"),
        help="write the best configuration's deployment files (k8s, skypilot or docker) to DIR "
        "(a new or empty folder unless --force)",
    )
    parser.add_argument(
        "--force", action="store_true", help="--emit into a folder that already holds files"
    )
    parser.set_defaults(func=run)


def build_request(args: argparse.Namespace) -> RecommendRequest:
    try:
        return RecommendRequest(
            model=args.model,
            input_len=args.input_len,
            output_len=args.output_len,
            prefix_share=args.prefix_share,
            spec_accept_len=args.spec_accept_len,
            demand=Demand(
                avg_rate_rps=args.rate,
                peak_rate_rps=args.peak_rate,
                concurrency=args.concurrency,
                spare_replicas=args.spare_replicas,
                utilisation=args.utilisation,
            ),
            slo=Slo(
                ttft_p99_ms=args.slo_ttft_p99_ms,
                tpot_p99_ms=args.slo_tpot_p99_ms,
                e2e_p99_ms=args.slo_e2e_p99_ms,
            ),
            search=SearchSpace(
                providers=tuple(args.provider) if args.provider else None,
                regions=tuple(args.region) if args.region else None,
                gpus=tuple(args.gpu) if args.gpu else None,
                instances=tuple(args.instance) if args.instance else None,
                pricing=args.pricing,
                max_nodes=args.max_nodes,
                speculative=args.speculative,
                **({"precisions": tuple(args.precision)} if args.precision else {}),
            ),
            engine=_engine(args),
            disaggregation=args.disaggregation,
        )
    except ValidationError as exc:
        raise invalid_input(exc) from None


def canonical_request(request: RecommendRequest, catalog: Catalog) -> RecommendRequest:
    """The request with the catalog's ids for the model and the ``--gpu`` names it was given
    as people write them (:mod:`planner.catalog.names`); an unknown model or GPU is one clear
    line naming the option, before any work."""
    model = catalog.model(request.model).hf_id
    search = request.search
    if search.gpus:
        gpus: list[str] = []
        for name in search.gpus:
            try:
                gpus.append(catalog.gpu(name).gpu_id)
            except InvalidInputError as exc:
                raise InvalidInputError("--gpu", name, exc.allowed) from None
        search = search.model_copy(update={"gpus": tuple(dict.fromkeys(gpus))})
    return request.model_copy(update={"model": model, "search": search})


def _engine(args: argparse.Namespace) -> EngineConfig:
    """The engine settings every candidate starts from (the options' names on error)."""
    try:
        return EngineConfig.of(
            engine=args.engine,
            data_parallel_size=args.attention_dp,
            enable_expert_parallel=args.expert_parallel,
        )
    except InvalidInputError as exc:
        option = {"engine": "--engine", "data_parallel_size": "--attention-dp"}
        raise InvalidInputError(option.get(exc.field, exc.field), exc.value, exc.allowed) from None


def invalid_input(exc: ValidationError) -> InvalidInputError:
    first = exc.errors()[0]
    name = str(first["loc"][-1]) if first["loc"] else ""
    field = OPTION_OF_FIELD.get(name, "--" + name.replace("_", "-")) if name else "input"
    return InvalidInputError(field, first.get("input"), first["msg"].removeprefix("Value error, "))


def emit(
    target: str,
    directory: Path,
    result: RecommendationResult,
    catalog: Catalog,
    *,
    force: bool = False,
) -> None:
    """Write the deployment files of the best configuration (``--emit TARGET DIR``)."""
    from planner.deploy import ALL_TARGETS, render, spec_from_plan, targets_of, write_bundle

    if target not in ALL_TARGETS:
        raise InvalidInputError("--emit TARGET", target, f"one of {', '.join(ALL_TARGETS)}")
    if result.best is None:
        raise InvalidInputError(
            "--emit", target, "a scenario with a configuration that meets the SLOs"
        )
    spec = spec_from_plan(result.best.plan, catalog)
    if target not in targets_of(spec):  # an aggregated plan has no pools, and the reverse
        kind = "a disaggregated" if spec.plan.disaggregated else "an aggregated"
        raise InvalidInputError(
            "--emit TARGET", target, f"one of {', '.join(targets_of(spec))} ({kind} plan)"
        )
    paths = write_bundle(render(spec, target), directory, force=force)
    print(f"Wrote {directory}: {', '.join(p.name for p in paths)}")
    print(f"Cold start: {spec.cold_start().describe()}")


def run(args: argparse.Namespace) -> int:
    request = build_request(args)
    if args.emit:
        from planner.deploy import ALL_TARGETS, check_target_folder

        if args.emit[0] not in ALL_TARGETS:  # before the search, not after
            raise InvalidInputError(
                "--emit TARGET", args.emit[0], f"one of {', '.join(ALL_TARGETS)}"
            )
        check_target_folder(Path(args.emit[1]), force=args.force)
    catalog = load_catalog(user_dir=get_settings().user_data_dir / "catalog")
    request = canonical_request(request, catalog)
    search = request.search
    try:
        check_search_names(
            catalog,
            providers=search.providers,
            regions=search.regions,
            gpus=search.gpus,
            instances=search.instances,
            precisions=search.precisions,
        )
    except InvalidInputError as exc:  # the option's name, as typed
        field = OPTION_OF_FIELD.get(exc.field, exc.field)
        raise InvalidInputError(field, exc.value, exc.allowed) from None
    print("searching configurations...", file=sys.stderr)
    result = recommend(catalog, request, perf_predictor(catalog, request))
    ranked = ranking_rows(result)
    rejected = rejected_rows(result)
    if args.csv:
        from planner.recommend_export import write_csv

        write_csv(result, args.csv)
    if args.html:
        from planner.recommend_export import write_html

        write_html(result, catalog, args.html)
    if args.emit:
        emit(args.emit[0], Path(args.emit[1]), result, catalog, force=args.force)
    if args.json:
        # each row with its typed plan: `benchmarks_runner import --plan FILE#RANK` reads it
        typed = [
            {**row, "plan": rec.plan.model_dump(mode="json")}
            for row, rec in zip(ranked[: args.top], result.ranked, strict=False)
        ]
        print(json.dumps({"ranked": typed, "rejected": rejected}, indent=2, default=str))
        return 0
    unmet = unmet_slos(result)
    if unmet:  # the SLO is the reason, not each candidate
        print("No configuration meets the SLOs:")
        for line in unmet:
            print(f"  {line}")
        print(f"({len(rejected)} candidates rejected; --json lists each with its reason)")
        return 0
    if not ranked:
        print("No configuration meets the SLOs. Why each candidate was ruled out:")
    spec_said: set[str] = set()
    for row in ranked[: args.top]:
        layout = f"TP{row['tp']} PP{row['pp']}"
        if row.get("disaggregated"):
            layout = f"disaggregated: {row['pools']}"
        print(
            f"{row['rank']:>3}. {row['instance']} x{row['instances_total']} "
            f"{layout} {row['precision']:<5}{_spec(row)} {row['region']:<14} "
            f"${row['usd_per_hour']:,.2f}/h  "
            f"${row['usd_per_million_output_tokens']:,.2f}/M out  "
            f"p99 TTFT {row['pred_ttft_ms_p99']:,.0f} ms  "
            f"p99 TPOT {row['pred_tpot_ms_p99']:,.1f} ms  [{row['confidence']}]"
        )
        if row["slo_straddle"]:
            print(f"     SLO at risk: {row['slo_straddle']}")
        if row.get("memory_raised"):  # the whole note once, its first clause on each row
            note = row["memory_note"]
            print(f"     memory: {note.split(':')[0] if note in spec_said else note}")
            spec_said.add(note)
        if row.get("spec_reason") and row["spec_method"] not in spec_said:  # once a method
            print(f"     speculation: {row['spec_reason']}")
            spec_said.add(row["spec_method"])
    if ranked:
        print(f"\n{len(rejected)} candidates rejected; the best command:")
        print(f"  {ranked[0]['launch_command']}")
    else:
        for row in rejected[:40]:
            layout = f"{row['instance']} TP{row['tp']} PP{row['pp']} {row['precision']}"
            print(f"  {layout}: {row['reason']}")
        if not rejected:
            print(f"  {no_layout_reason(catalog, request)}")
    return 0


def _spec(row: dict[str, Any]) -> str:
    """`` EAGLE-3 k=3`` for a speculative row, empty otherwise."""
    method = row.get("spec_method") or "none"
    if method == "none":
        return ""
    return f" {SPEC_LABELS[method]} k={row.get('num_spec_tokens')}"


def no_layout_reason(catalog: Catalog, request: RecommendRequest) -> str:
    """Why a search judged no layout at all (every shape was left out before judging)."""
    empty = empty_search_reason(catalog, request.search)
    if empty is not None:
        return empty
    searched = filtered_instances(catalog, request.search)
    counts = sorted({catalog.instances[name].gpus for name in searched})
    offered = ", ".join(str(c) for c in counts) or "none"
    dp = request.engine.data_parallel_size
    if dp > 1:
        return (
            f"no layout to judge: --attention-dp={dp} must divide the GPUs of an instance "
            f"(the instances searched have {offered} GPUs each)"
        )
    return f"no layout to judge on the instances searched ({offered} GPUs each)"
