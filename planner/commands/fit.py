"""``python -m planner fit``: which TP x PP x DP layouts of a model fit an instance type.

    python -m planner fit --model meta-llama/Llama-3.1-70B-Instruct --instance g6e.12xlarge \\
        --input-len 2048 --output-len 512 --concurrency 32 --json

prints every layout (feasible or not, with the reason) with its memory per GPU, KV capacity,
the concurrent sequences the KV pool holds at the workload's p99 context, and the KV occupancy
at ``--concurrency``. ``--max-model-len`` defaults to the workload's longest request (what a
deployment would pass to ``vllm serve --max-model-len``), else to the model's own maximum.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from planner.catalog import PRECISIONS, load_catalog, model_card_from_config
from planner.catalog.loader import Catalog
from planner.catalog.schema import ModelCard
from planner.commands.args import fraction, positive_int
from planner.engine import EngineConfig
from planner.errors import InvalidInputError
from planner.input_checks import MAX_LOAD, MAX_REQUEST_TOKENS, check_file_size
from planner.layouts import LayoutCandidate, enumerate_layouts, evaluate_layout
from planner.memory import KV_CACHE_DTYPES, kv_occupancy, max_concurrent_sequences
from planner.settings import get_settings
from planner.workload import Workload, load_trace

TOKENS = positive_int(MAX_REQUEST_TOKENS)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "fit", help="list the TP x PP x DP layouts of a model on an instance type"
    )
    parser.add_argument("--model", required=True, help="Hugging Face id, or a config.json path")
    parser.add_argument("--instance", required=True, help="instance type, e.g. g6e.12xlarge")
    parser.add_argument("--nodes", type=positive_int(64), default=1, help="instances (default 1)")
    parser.add_argument("--precision", default="bf16", choices=PRECISIONS)
    parser.add_argument("--kv-dtype", choices=KV_CACHE_DTYPES, help="default: the engine's")
    parser.add_argument("--input-len", type=TOKENS, help="prompt tokens of every request")
    parser.add_argument("--output-len", type=TOKENS, help="answer tokens of every request")
    parser.add_argument(
        "--workload",
        type=Path,
        help="a trace (Mooncake JSONL, BurstGPT/Azure/plain CSV) or a Workload JSON file",
    )
    parser.add_argument(
        "--concurrency", type=positive_int(MAX_LOAD), help="requests in flight per replica"
    )
    parser.add_argument("--max-model-len", type=TOKENS, help="vLLM --max-model-len")
    parser.add_argument("--gpu-memory-utilization", type=fraction(), help="default: the engine's")
    parser.add_argument(
        "--max-num-seqs", type=positive_int(MAX_LOAD), help="default: what vllm serve picks"
    )
    parser.add_argument("--max-num-batched-tokens", type=TOKENS, help="default: vllm serve's")
    parser.add_argument(
        "--tp", type=positive_int(1_024), help="evaluate only this tensor-parallel size"
    )
    parser.add_argument(
        "--pp", type=positive_int(1_024), help="evaluate only this pipeline-parallel size"
    )
    parser.add_argument("--quantile", type=fraction(), default=0.99, help="context quantile (0.99)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=run)


def _model(catalog: Catalog, ref: str) -> ModelCard:
    path = Path(ref)
    if path.suffix == ".json" and path.is_file():
        limit_mb = get_settings().max_upload_mb
        check_file_size(path.name, path.stat().st_size, limit_mb, "SERVEWISE_MAX_UPLOAD_MB")
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            raise InvalidInputError("--model", ref, "a UTF-8 config.json file") from None
        except json.JSONDecodeError as exc:
            raise InvalidInputError("--model", ref, f"a valid config.json ({exc.msg})") from None
        return model_card_from_config(config, file=path.name)
    return catalog.model(ref)


def _workload(args: argparse.Namespace) -> Workload | None:
    if args.workload is not None:
        if args.input_len is not None or args.output_len is not None:
            raise InvalidInputError(
                "--workload", str(args.workload), "either --workload or --input-len/--output-len"
            )
        path: Path = args.workload
        if path.suffix == ".json" and path.is_file():
            try:
                return Workload.model_validate_json(path.read_text(encoding="utf-8"))
            except ValueError as exc:
                raise InvalidInputError(
                    "--workload", str(path), f"a Workload JSON file ({str(exc).splitlines()[0]})"
                ) from None
        return load_trace(path)
    if args.input_len is None and args.output_len is None:
        return None
    if args.input_len is None or args.output_len is None:
        missing = "--input-len" if args.input_len is None else "--output-len"
        raise InvalidInputError(missing, None, "both --input-len and --output-len, or neither")
    return Workload.fixed(args.input_len, args.output_len)


def layout_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The layouts ``fit`` prints, as JSON-ready dicts."""
    if args.nodes < 1:
        raise InvalidInputError("--nodes", args.nodes, "an integer >= 1")
    if args.concurrency is not None and args.concurrency < 1:
        raise InvalidInputError("--concurrency", args.concurrency, "an integer >= 1")
    if args.max_model_len is not None and args.max_model_len < 1:
        raise InvalidInputError("--max-model-len", args.max_model_len, "a token count >= 1")
    if not 0 < args.quantile <= 1:
        raise InvalidInputError("--quantile", args.quantile, "a probability in (0, 1]")
    catalog = load_catalog(user_dir=get_settings().user_data_dir / "catalog")
    card = _model(catalog, args.model)
    instance = catalog.instance(args.instance)
    gpu = catalog.gpu(instance.gpu_id)
    workload = _workload(args)
    max_model_len = args.max_model_len or (workload.max_context() if workload else None)
    stated = {
        "kv_cache_dtype": args.kv_dtype,
        "max_model_len": max_model_len,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
    }
    engine = EngineConfig.of(**{k: v for k, v in stated.items() if v is not None})
    if args.tp is not None or args.pp is not None:
        candidates = [
            evaluate_layout(
                card,
                instance,
                gpu,
                nodes=args.nodes,
                tp=args.tp or 1,
                pp=args.pp or 1,
                precision=args.precision,
                engine=engine,
            )
        ]
    else:
        candidates = enumerate_layouts(
            catalog,
            card,
            instances=[instance.instance],
            nodes=[args.nodes],
            precisions=(args.precision,),
            engine=engine,
        )
    return [_row(c, card, workload, args) for c in candidates]


def _row(
    candidate: LayoutCandidate,
    card: ModelCard,
    workload: Workload | None,
    args: argparse.Namespace,
) -> dict[str, Any]:
    plan = candidate.memory
    row: dict[str, Any] = {
        "instance": candidate.instance,
        "gpu": candidate.gpu_id,
        "nodes": candidate.nodes,
        "gpus": candidate.gpus,
        "tp": candidate.tp,
        "pp": candidate.pp,
        "dp": candidate.dp,
        "precision": candidate.precision,
        "kv_cache_dtype": candidate.kv_cache_dtype,
        "feasible": candidate.feasible,
        "reason": candidate.reason,
        "notes": candidate.notes,
        "weights_bytes_per_gpu": plan.weights_bytes if plan else None,
        "kv_bytes_per_token": plan.kv_bytes_per_token if plan else None,
        "kv_capacity_tokens": plan.kv_capacity_tokens if plan else None,
        "max_concurrent_sequences": None,
        "kv_occupancy": None,
    }
    if plan is None:
        return row
    row.update(
        {
            "kv_bytes_per_token_per_gpu": plan.kv_bytes_per_token_per_gpu,
            "kv_capacity_blocks": plan.kv_capacity_blocks,
            "kv_bytes_per_gpu": plan.kv_bytes,
            "activation_bytes_per_gpu": plan.activation_bytes,
            "budget_bytes_per_gpu": plan.budget_bytes,
            "free_bytes_per_gpu": plan.free_bytes,
            "max_model_len": plan.max_model_len,
            "max_num_seqs": plan.max_num_seqs,
            "max_num_batched_tokens": plan.max_num_batched_tokens,
        }
    )
    if not candidate.feasible:
        return row
    context: Workload | int = workload if workload is not None else plan.max_model_len
    row["max_concurrent_sequences"] = max_concurrent_sequences(
        plan, context, args.quantile, model=card
    )
    if workload is not None and args.concurrency is not None:
        occupancy = kv_occupancy(plan, workload, args.concurrency, model=card)
        row["kv_occupancy"] = occupancy.model_dump(exclude={"per_gpu_breakdown"})
        row["kv_occupancy"]["per_gpu_breakdown"] = occupancy.per_gpu_breakdown.model_dump()
    return row


def _gib(value: Any) -> str:
    return "" if value is None else f"{value / 2**30:.2f}"


def run(args: argparse.Namespace) -> int:
    rows = layout_rows(args)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    header = ("tp", "pp", "dp", "fits", "weights/GPU GiB", "KV/GPU GiB", "KV tokens", "max seqs")
    print("  ".join(header) + "  reason / notes")
    for row in rows:
        cells = (
            str(row["tp"]),
            str(row["pp"]),
            str(row["dp"]),
            "yes" if row["feasible"] else "no",
            _gib(row["weights_bytes_per_gpu"]),
            _gib(row.get("kv_bytes_per_gpu")),
            "" if row["kv_capacity_tokens"] is None else f"{row['kv_capacity_tokens']:,}",
            "" if row["max_concurrent_sequences"] is None else str(row["max_concurrent_sequences"]),
        )
        detail = row["reason"] or "; ".join(row["notes"])
        occupancy = row["kv_occupancy"]
        if occupancy:
            detail = (
                f"KV at C={occupancy['concurrency']}: {occupancy['expected']:.0%} expected, "
                f"{occupancy['p99']:.0%} p99, P(wait/preempt)={occupancy['p_wait_or_preempt']:.2f}"
                + (f"; {detail}" if detail else "")
            )
        print(
            "  ".join(c.rjust(len(h)) for c, h in zip(cells, header, strict=True)) + "  " + detail
        )
    return 0
