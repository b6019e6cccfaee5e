"""A finished benchmark run as a measured result: when it can calibrate the model, and how.

Run directories are read by :func:`planner.run_files.read_run_dir` (the format and the one
reader live in :mod:`planner.run_files`).
"""

from __future__ import annotations

import logging
from statistics import mean
from typing import Any

from pydantic import ValidationError

from planner.catalog import MeasuredResult
from planner.errors import InvalidInputError
from planner.plan import read_plan
from planner.run_files import RunFiles

log = logging.getLogger(__name__)

#: A run with more failed requests than this share is not a measurement of the plan.
MAX_FAILED_SHARE = 0.05


def calibration_problem(run: RunFiles) -> str | None:
    """Why a run cannot be a calibration point, in words; None when it can."""
    meta = run.meta
    if meta.get("status") != "completed":
        return f"the run did not complete (status {meta.get('status')!r})"
    if not meta.get("plan"):
        return "the run names no plan (GPU, layout, precision) to calibrate"
    if not meta.get("summary"):
        return "the run has no summary of its measurements"
    counted = run.measured
    succeeded = sum(1 for r in counted if r.ok)
    if not succeeded:
        return "no request succeeded"
    failed_share = 1 - succeeded / len(counted)
    if failed_share > MAX_FAILED_SHARE:
        # Failed requests free their slots early: the run measured a lighter load than the
        # plan's, and its throughput counts only the successes.
        return (
            f"{failed_share:.0%} of its requests failed (more than {MAX_FAILED_SHARE:.0%}): "
            "it measured a lighter load than the plan's"
        )
    return None


def run_to_measured_result(run: RunFiles) -> MeasuredResult | None:
    """A completed run whose plan names the deployment becomes a measured result.

    The plan (what was being verified) gives engine, model, precision, GPU and layout; the
    run's summary (vLLM ``bench serve`` keys) gives throughput and median TTFT/TPOT. Runs
    without a plan, not completed, or with more than ``MAX_FAILED_SHARE`` of their requests
    failed stay runs only: nothing to calibrate against.
    """
    problem = calibration_problem(run)
    if problem is not None:
        log.info("run %s not used for calibration: %s", run.run_id, problem)
        return None
    meta = run.meta
    try:
        plan = read_plan(meta.get("plan"))
    except InvalidInputError as exc:
        log.warning("run %s not usable for calibration: %s", run.run_id, exc)
        return None
    if plan is None:
        return None
    # older flat plans may state the GPUs of a replica group; a typed plan is one replica
    stated_gpus = (meta.get("plan") or {}).get("num_gpus")
    summary = meta.get("summary") or {}
    config = meta.get("config") or {}
    measured = [r for r in run.measured if r.ok]

    def _target(config_key: str, planned: list[int | None]) -> int:
        if config.get(config_key):
            return int(config[config_key])
        return round(mean(float(v or 0) for v in planned)) or 1

    load = "rate" if config.get("request_rate") else "concurrency"
    values: dict[str, Any] = {
        "source": "user benchmark run" + (" (simulated endpoint)" if meta.get("simulated") else ""),
        "source_ref": f"run {run.run_id} against {(meta.get('endpoint') or {}).get('base_url')}",
        "engine": plan.engine.engine,
        "engine_version": plan.engine.version,
        "model": plan.model,
        "precision": plan.precision,
        "gpu": plan.gpu,
        "num_gpus": int(stated_gpus or plan.gpus_per_replica),
        "tp": plan.tp,
        "pp": plan.pp,
        "input_len": _target("input_len", [r.input_len_target for r in measured]),
        "output_len": _target("output_len", [r.output_len_target for r in measured]),
        "load": load,
        "concurrency": config.get("concurrency") if load == "concurrency" else None,
        "request_rate": config.get("request_rate") if load == "rate" else None,
        "num_requests": len(measured),
        "instance": plan.instance,
        "nodes": plan.nodes,
        "output_tok_per_s": summary.get("output_throughput"),
        "total_tok_per_s": summary.get("total_token_throughput"),
        "ttft_ms": summary.get("median_ttft_ms"),
        "ttft_stat": "p50",
        "itl_ms": summary.get("median_tpot_ms"),
        "itl_stat": "p50_tpot",
        "origin": "user",
        "run_id": run.run_id,
        "simulated": bool(meta.get("simulated", False)),
    }
    try:
        return MeasuredResult.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        log.warning("run %s not usable for calibration: %s", run.run_id, exc.errors()[0]["msg"])
        return None
