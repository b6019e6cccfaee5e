"""``python -m planner predict --scenarios IN.csv --out OUT.csv``: predict every scenario row.

IN has the scenario columns of ``data/measured_results.csv`` (engine, engine_version, model,
precision, gpu, num_gpus, tp, pp, input_len, output_len, load, concurrency, request_rate,
num_requests, instance, nodes; blank optional cells take the engine's defaults; engine
settings as in the Scenario: max_num_seqs, max_num_batched_tokens, data_parallel_size (attention
data-parallel ranks), enable_expert_parallel, entrypoint, ...; ``dataset`` sharegpt or uniform:
the lengths are means that vary per request, as when the same row is fitted;
``random_range_ratio`` r: a random run's lengths uniform on [L (1 - r), L (1 + r)] (vLLM bench's
``--random-range-ratio``; blank or 0: fixed, and a closed loop of fixed lengths queues in waves,
:func:`planner.perf.scenario.dataset_lengths`); speculative
decoding: ``spec_method`` none, mtp, eagle3 or ngram (blank: none), ``num_spec_tokens`` (blank:
the engine's default for the method) and ``spec_accept_len``, the workload's mean accepted tokens
a step (blank: the method's published default for the model); ``warm_prompts`` and
``warm_prompt_tokens``: requests that repeat an earlier run's prompts, found in the prefix cache,
as a measured row states them (:func:`planner.perf.simulator.warm_prompts_held`)) and any other
columns, which pass through. ``pred_spec_accept_len`` is the mean accepted length a speculative
row was predicted with. OUT is IN plus the prediction columns: throughput, TTFT and TPOT (mean,
p50, p99), each with the low and high ends of its 80% interval (``pred_ttft_ms_p99_low``,
``pred_ttft_ms_p99_high``, ...; calibrated on leave-one-source-out held-out rows, see
:mod:`planner.perf.uncertainty`); ``pred_uncertain_because``
says in words what about a row the measured data do not cover (each reason widens its interval:
"no measured MoE result on SGLang with H200"), ``pred_release`` which engine release's
measurements the prediction used ("fitted on measured vLLM 0.11 results"). A row that cannot be
predicted gets a message in ``pred_error`` and the others are still predicted. The model is
fitted on every stored measured result (the public set and the user's runs).

A disaggregated deployment (prefill and decode pools) is stated by the columns
``prefill_replicas, prefill_tp, prefill_ep, prefill_attention_dp, decode_replicas, decode_tp,
decode_ep, decode_attention_dp`` and ``kv_link`` (nvlink, infiniband, roce, efa; blank:
infiniband); all blank: aggregated, as the scenario's own tp/num_gpus say. Such a row is
predicted by :mod:`planner.perf.disaggregated` and also gets ``pred_prefill_utilization``,
``pred_decode_utilization`` and ``pred_kv_transfer_ms``; every row gets
``pred_output_tok_per_s_per_gpu``. A request-rate row gets ``pred_utilisation``, its rate over
the deployment's predicted saturation rate: near 1 its latencies are ill-conditioned and their
intervals are widened for it (:func:`planner.perf.uncertainty.saturation_spread`).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import Any

from planner.catalog import Catalog, MeasuredResult, load_catalog
from planner.commands.args import output_file
from planner.csv_export import write_rows_csv
from planner.engine import canonical_engine
from planner.errors import InvalidInputError, PlannerError
from planner.perf.disaggregated import (
    DisaggregatedPrediction,
    layout_from_row,
    predict_disaggregated,
)
from planner.perf.model import PerformanceModel, get_performance_model
from planner.perf.scenario import Prediction, Scenario
from planner.runs import calibration_results
from planner.settings import get_settings

#: the low and high ends of the 80% intervals of TTFT and TPOT (mean, p50, p99)
LATENCY_INTERVAL_COLUMNS = tuple(
    f"pred_{metric}_ms_{stat}_{end}"
    for metric in ("ttft", "tpot")
    for stat in ("mean", "p50", "p99")
    for end in ("low", "high")
)
PREDICTION_COLUMNS = (
    "pred_output_tok_per_s",
    "pred_total_tok_per_s",
    "pred_ttft_ms_p50",
    "pred_ttft_ms_mean",
    "pred_tpot_ms_p50",
    "pred_itl_ms_mean",
    "pred_spec_accept_len",
    "pred_output_tok_per_s_low",
    "pred_output_tok_per_s_high",
    "pred_ttft_ms_p99",
    "pred_tpot_ms_mean",
    "pred_tpot_ms_p99",
    *LATENCY_INTERVAL_COLUMNS,
    "pred_output_tok_per_s_per_gpu",
    "pred_prefill_utilization",
    "pred_decode_utilization",
    "pred_kv_transfer_ms",
    "pred_utilisation",
    "pred_far_from_data",
    "pred_uncertain_because",
    "pred_release",
    "pred_error",
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "predict", help="predict throughput and latency of the scenarios in a CSV file"
    )
    parser.add_argument("--scenarios", required=True, type=Path, help="input CSV of scenarios")
    parser.add_argument(
        "--out", required=True, type=output_file, help="output CSV (input + predictions)"
    )
    parser.add_argument(
        "--public-only",
        action="store_true",
        help="fit on the public measured results only (not the user's runs)",
    )
    parser.set_defaults(func=run)


def user_measured_results(catalog: Catalog) -> list[MeasuredResult]:
    """The user's own measured runs from the store (none when the store cannot be opened)."""
    try:
        from planner.store import open_store

        store = open_store(catalog=catalog)
        return calibration_results(r for r in store.measured_results() if r.origin == "user")
    except (PlannerError, ImportError, OSError) as exc:
        print(f"note: the store could not be read ({exc}); public results only", file=sys.stderr)
        return []


def _fmt(value: float) -> str:
    return f"{value:.6g}"


#: one row's answer: an aggregated prediction with the row's GPUs, a disaggregated one, or
#: the error that stopped it
RowResult = tuple[Prediction, int] | DisaggregatedPrediction | PlannerError


def prediction_cells(row_result: RowResult) -> dict[str, str]:
    if isinstance(row_result, PlannerError):
        cells = dict.fromkeys(PREDICTION_COLUMNS, "")
        cells["pred_error"] = str(row_result)
        return cells
    pools = {
        "pred_prefill_utilization": "",
        "pred_decode_utilization": "",
        "pred_kv_transfer_ms": "",
    }
    if isinstance(row_result, DisaggregatedPrediction):
        result, gpus = row_result.prediction, row_result.gpus
        pools = {
            "pred_prefill_utilization": _fmt(row_result.prefill_utilization),
            "pred_decode_utilization": _fmt(row_result.decode_utilization),
            "pred_kv_transfer_ms": _fmt(row_result.kv_transfer_ms),
        }
    else:
        result, gpus = row_result
    return {
        "pred_output_tok_per_s": _fmt(result.output_tok_per_s),
        "pred_total_tok_per_s": _fmt(result.total_tok_per_s),
        "pred_ttft_ms_p50": _fmt(result.ttft_ms_p50),
        "pred_ttft_ms_mean": _fmt(result.ttft_ms_mean),
        "pred_tpot_ms_p50": _fmt(result.tpot_ms_p50),
        "pred_itl_ms_mean": _fmt(result.itl_ms_mean),
        # mean accepted tokens a step (bonus token included); blank without speculation
        "pred_spec_accept_len": (
            _fmt(result.spec_accept_len) if result.spec_accept_len is not None else ""
        ),
        "pred_output_tok_per_s_low": _fmt(result.output_tok_per_s_low),
        "pred_output_tok_per_s_high": _fmt(result.output_tok_per_s_high),
        "pred_ttft_ms_p99": _fmt(result.ttft_ms_p99),
        "pred_tpot_ms_mean": _fmt(result.tpot_ms_mean),
        "pred_tpot_ms_p99": _fmt(result.tpot_ms_p99),
        **{c: _fmt(getattr(result, c.removeprefix("pred_"))) for c in LATENCY_INTERVAL_COLUMNS},
        "pred_output_tok_per_s_per_gpu": _fmt(result.output_tok_per_s / gpus),
        **pools,
        "pred_utilisation": _fmt(result.utilisation) if result.utilisation is not None else "",
        "pred_far_from_data": "true" if result.far_from_data else "false",
        "pred_uncertain_because": "; ".join(result.uncertain_because),
        "pred_release": result.release_note or "",
        "pred_error": "",
    }


def canonical_names(scenario: Scenario, catalog: Catalog) -> Scenario:
    """The scenario with the catalog's own GPU and model ids and the planner's engine name for
    the names its row gave ("NVIDIA H100 80GB HBM3" -> H100-SXM, "DeepSeek-R1-0528" ->
    deepseek-ai/DeepSeek-R1-0528, "TRT-LLM" -> tensorrt-llm: :mod:`planner.catalog.names`,
    :func:`planner.engine.canonical_engine`), so every lookup after it, the release level and
    the distance to the measured data included, sees one name; a GPU or model name that means
    none or several raises UnknownEntityError with the likely ones."""
    names = {
        "engine": canonical_engine(scenario.engine),
        "gpu": catalog.gpu(scenario.gpu).gpu_id,
        "model": catalog.model(scenario.model).hf_id,
    }
    if all(getattr(scenario, field) == name for field, name in names.items()):
        return scenario
    return scenario.model_copy(update=names)


def predict_rows(model: PerformanceModel, rows: list[dict[str, str]]) -> list[RowResult]:
    """One prediction (or the error that stopped it) per CSV row."""
    out: list[RowResult] = []
    for line_no, row in enumerate(rows, start=2):
        try:
            scenario = canonical_names(Scenario.from_row(row), model.catalog)
            layout = layout_from_row(row)
        except PlannerError as exc:
            out.append(exc)
            continue
        except ValueError as exc:
            out.append(InvalidInputError("row", line_no, str(exc)))
            continue
        if layout is not None:
            try:
                out.append(predict_disaggregated(model, scenario, layout))
            except PlannerError as exc:
                out.append(exc)
            continue
        result = model.predict_many([scenario])[0]
        out.append(result if isinstance(result, PlannerError) else (result, scenario.gpus))
    return out


def run(args: argparse.Namespace) -> int:
    source: Path = args.scenarios
    if not source.is_file():
        raise InvalidInputError("--scenarios", str(source), "an existing CSV file")
    # utf-8-sig: Excel's "CSV UTF-8" starts with a byte-order mark, which would otherwise
    # become part of the first column's name (and that column would be ignored)
    with source.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        header = list(reader.fieldnames or [])
        rows = [{k: (v or "") for k, v in row.items() if k is not None} for row in reader]
    if not header:
        raise InvalidInputError("--scenarios", str(source), "a CSV file with a header row")
    catalog = load_catalog(user_dir=get_settings().user_data_dir / "catalog")
    user = [] if args.public_only else user_measured_results(catalog)
    model = get_performance_model(catalog, user)
    results = predict_rows(model, rows)
    columns = header + [c for c in PREDICTION_COLUMNS if c not in header]
    out = ({**row, **prediction_cells(result)} for row, result in zip(rows, results, strict=True))
    write_rows_csv(args.out, columns, out)
    failed = sum(1 for r in results if isinstance(r, PlannerError))
    print(
        f"predicted {len(rows) - failed} of {len(rows)} scenarios -> {args.out}"
        + (f" ({failed} with pred_error)" if failed else "")
    )
    return 0
