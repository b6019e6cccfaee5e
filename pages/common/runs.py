"""Benchmark runs from the store, shaped for the Benchmarks page (no streamlit here).

Per-request values use ``benchmarks_runner.metrics.request_times``: the ``vllm bench serve``
definitions of TTFT, TPOT and E2E latency.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from benchmarks_runner.metrics import request_times
from planner.run_files import RequestRecord
from planner.store import Store

#: Rows of the side-by-side table: (label, where the value comes from, key).
SIDE_BY_SIDE: tuple[tuple[str, str, str], ...] = (
    ("model", "run", "model"),
    ("status", "run", "status"),
    ("simulated endpoint", "run", "simulated"),
    ("endpoint", "run", "base_url"),
    ("GPU (plan)", "plan", "gpu"),
    ("instance (plan)", "plan", "instance"),
    ("TP x PP (plan)", "plan", "layout"),
    ("load", "config", "load"),
    ("completed requests", "summary", "completed"),
    ("failed requests", "summary", "failed"),
    ("requests/s", "summary", "request_throughput"),
    ("output tokens/s", "summary", "output_throughput"),
    ("total tokens/s", "summary", "total_token_throughput"),
    ("median TTFT (ms)", "summary", "median_ttft_ms"),
    ("p99 TTFT (ms)", "summary", "p99_ttft_ms"),
    ("median TPOT (ms)", "summary", "median_tpot_ms"),
    ("p99 TPOT (ms)", "summary", "p99_tpot_ms"),
    ("median ITL (ms)", "summary", "median_itl_ms"),
    ("p99 E2E latency (ms)", "summary", "p99_e2el_ms"),
)


def _json(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if not value or not isinstance(value, str):
        return {}
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def run_labels(runs: pd.DataFrame) -> dict[str, str]:
    """run_id -> "run_id: model (status[, simulated])", newest first."""
    labels = {}
    for row in runs.itertuples(index=False):
        extra = ", simulated" if bool(row.simulated) else ""
        model = str(row.model or "?")
        labels[str(row.run_id)] = f"{row.run_id!s}: {model} ({row.status!s}{extra})"
    return labels


def _load(config: dict[str, Any]) -> str:
    if config.get("request_rate"):
        return f"{config['request_rate']:g} req/s"
    if config.get("concurrency"):
        return f"{config['concurrency']:g} in flight"
    return str(config.get("load_pattern") or "")


def runs_side_by_side(runs: pd.DataFrame, run_ids: Sequence[str]) -> pd.DataFrame:
    """One column a run, one row a metric of :data:`SIDE_BY_SIDE` (as text, for display)."""
    if runs.empty or not run_ids:
        return pd.DataFrame()
    by_id = {str(row["run_id"]): row for row in runs.to_dict(orient="records")}
    columns: dict[str, list[str]] = {}
    for run_id in run_ids:
        row = by_id.get(run_id)
        if row is None:
            continue
        parts: dict[str, dict[str, Any]] = {
            "run": {str(k): v for k, v in row.items()},
            "summary": _json(row.get("summary")),
            "config": _json(row.get("config")),
            "plan": _json(row.get("plan")),
        }
        plan = parts["plan"]
        if plan:
            plan = {**plan, "layout": f"{plan.get('tp', 1)} x {plan.get('pp', 1)}"}
            parts["plan"] = plan
        parts["config"] = {**parts["config"], "load": _load(parts["config"])}
        values = []
        for _, source, key in SIDE_BY_SIDE:
            value = parts[source].get(key)
            if isinstance(value, float):
                values.append(f"{value:,.2f}")
            else:
                values.append("" if value is None else str(value))
        columns[run_id] = values
    return pd.DataFrame(columns, index=[label for label, _, _ in SIDE_BY_SIDE])


def _plain(value: Any) -> Any:
    """A DuckDB/pandas cell as the run files wrote it: lists, not arrays; None, not NaN."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, float) and np.isnan(value):
        return None
    return value


def run_request_latencies(store: Store, runs: pd.DataFrame, run_ids: Sequence[str]) -> pd.DataFrame:
    """Per successful, non-warm-up request of each run: TTFT, TPOT, E2E latency in ms."""
    plans = {str(row["run_id"]): _json(row.get("plan")) for row in runs.to_dict(orient="records")}
    rows = []
    for run_id in run_ids:
        gpu = str(plans.get(run_id, {}).get("gpu") or "")
        for stored in store.run_requests(run_id).to_dict(orient="records"):
            request = RequestRecord.model_validate(
                {key: _plain(value) for key, value in stored.items() if key != "run_id"}
            )
            if request.warmup:
                continue
            times = request_times(request)
            if times is None:
                continue
            rows.append(
                {
                    "run": run_id,
                    "gpu": gpu,
                    "ttft_ms": times.ttft * 1000,
                    "tpot_ms": None if times.tpot is None else times.tpot * 1000,
                    "e2e_ms": times.e2el * 1000,
                }
            )
    return pd.DataFrame(rows, columns=["run", "gpu", "ttft_ms", "tpot_ms", "e2e_ms"])
