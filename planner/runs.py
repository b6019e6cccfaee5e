"""Read benchmark run directories and turn a finished run into a measured result.

The run-directory format is written by ``benchmarks_runner.run_files`` (its docstring is the
specification): ``run.json`` (metadata, rewritten atomically), ``requests.jsonl`` (one line
per finished request, appended and flushed), ``server_metrics.jsonl`` (one line per scraped
sample). A torn last line (the writer was killed mid-write) is skipped; every earlier line is
kept.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any

from pydantic import ValidationError

from planner.catalog import MeasuredResult

log = logging.getLogger(__name__)

RUN_META = "run.json"
RUN_REQUESTS = "requests.jsonl"
RUN_SERVER_METRICS = "server_metrics.jsonl"

#: A run with more failed requests than this share is not a measurement of the plan.
MAX_FAILED_SHARE = 0.05


@dataclass
class RunFiles:
    run_id: str
    path: Path
    meta: dict[str, Any]
    requests: list[dict[str, Any]] = field(default_factory=list)
    server_metrics: list[dict[str, Any]] = field(default_factory=list)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                log.warning("%s line %d is not JSON (torn write?); skipped", path, line_no)
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def run_signature(run_dir: Path) -> str | None:
    """Sizes and modification times of the run's files: changes whenever the run grows."""
    meta = run_dir / RUN_META
    if not meta.exists():
        return None
    parts = []
    for name in (RUN_META, RUN_REQUESTS, RUN_SERVER_METRICS):
        path = run_dir / name
        if path.exists():
            stat = path.stat()
            parts.append(f"{name}:{stat.st_size}:{stat.st_mtime_ns}")
    return "|".join(parts)


def read_run_dir(run_dir: Path) -> RunFiles | None:
    """Load one run directory; None (with a warning) when its run.json is unreadable."""
    try:
        meta = json.loads((run_dir / RUN_META).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        log.warning("run %s skipped: %s unreadable (%s)", run_dir, RUN_META, exc)
        return None
    if not isinstance(meta, dict):
        return None
    return RunFiles(
        run_id=str(meta.get("run_id") or run_dir.name),
        path=run_dir,
        meta=meta,
        requests=_read_jsonl(run_dir / RUN_REQUESTS),
        server_metrics=_read_jsonl(run_dir / RUN_SERVER_METRICS),
    )


def calibration_problem(run: RunFiles) -> str | None:
    """Why a run cannot be a calibration point, in words; None when it can."""
    meta = run.meta
    if meta.get("status") != "completed":
        return f"the run did not complete (status {meta.get('status')!r})"
    if not meta.get("plan"):
        return "the run names no plan (GPU, layout, precision) to calibrate"
    if not meta.get("summary"):
        return "the run has no summary of its measurements"
    counted = [r for r in run.requests if not r.get("warmup")]
    succeeded = sum(1 for r in counted if r.get("status") == "ok")
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
    plan = meta.get("plan") or {}
    summary = meta.get("summary") or {}
    config = meta.get("config") or {}
    measured = [r for r in run.requests if r.get("status") == "ok" and not r.get("warmup")]

    def _target(key: str, config_key: str) -> int:
        if config.get(config_key):
            return int(config[config_key])
        return round(mean(float(r.get(key) or 0) for r in measured)) or 1

    load = "rate" if config.get("request_rate") else "concurrency"
    tp = int(plan.get("tp") or 1)
    pp = int(plan.get("pp") or 1)
    values: dict[str, Any] = {
        "source": "user benchmark run" + (" (simulated endpoint)" if meta.get("simulated") else ""),
        "source_ref": f"run {run.run_id} against {(meta.get('endpoint') or {}).get('base_url')}",
        "engine": plan.get("engine") or "vllm",
        "engine_version": plan.get("engine_version"),
        "model": plan.get("model") or meta.get("model"),
        "precision": plan.get("precision") or "bf16",
        "gpu": plan.get("gpu"),
        "num_gpus": int(plan.get("num_gpus") or tp * pp * int(plan.get("dp") or 1)),
        "tp": tp,
        "pp": pp,
        "input_len": _target("input_len_target", "input_len"),
        "output_len": _target("output_len_target", "output_len"),
        "load": load,
        "concurrency": config.get("concurrency") if load == "concurrency" else None,
        "request_rate": config.get("request_rate") if load == "rate" else None,
        "num_requests": len(measured),
        "instance": plan.get("instance"),
        "nodes": plan.get("nodes"),
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
