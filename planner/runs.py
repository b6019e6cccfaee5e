"""A finished benchmark run as a measured result: when it can calibrate the model, and how.

Run directories are read by :func:`planner.run_files.read_run_dir` (the format and the one
reader live in :mod:`planner.run_files`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import mean
from typing import Any

from pydantic import ValidationError

from planner.catalog import MEASURED_ENGINE_SETTINGS, MeasuredResult
from planner.engine import release_number
from planner.errors import InvalidInputError
from planner.plan import read_plan
from planner.run_files import RequestRecord, RunFiles

log = logging.getLogger(__name__)

#: A run with more failed requests than this share is not a measurement of the plan.
MAX_FAILED_SHARE = 0.05
#: the share of prompt tokens a run's server must report finding in its prefix cache before the
#: run is fitted as warm (:func:`_warm_prompt_tokens`): a chat template's common opening makes
#: a few percent of unrelated prompts' tokens hits
MIN_WARM_HIT_RATE = 0.1


@dataclass(frozen=True)
class RequestCounts:
    """What calibration needs of a run's request rows (the store computes it in SQL).

    ``measured``: requests outside the warm-up; ``succeeded``: those of them with status ok;
    ``*_len_target_mean``: the mean planned length over the succeeded ones (a missing target
    counts as 0), None when none succeeded.
    """

    measured: int
    succeeded: int
    input_len_target_mean: float | None = None
    output_len_target_mean: float | None = None

    @classmethod
    def of(cls, requests: Iterable[RequestRecord]) -> RequestCounts:
        counted = [r for r in requests if not r.warmup]
        ok = [r for r in counted if r.ok]
        return cls(
            measured=len(counted),
            succeeded=len(ok),
            input_len_target_mean=mean(float(r.input_len_target or 0) for r in ok) if ok else None,
            output_len_target_mean=(
                mean(float(r.output_len_target or 0) for r in ok) if ok else None
            ),
        )


def calibration_results(
    results: Iterable[MeasuredResult], *, include_simulated: bool | None = None
) -> list[MeasuredResult]:
    """The measured results the performance model fits on: all of ``results`` but the runs
    against the simulated endpoint (timed by the model itself, they would teach it its own
    predictions), unless ``include_simulated`` (default: the ``fit_simulated_runs`` setting,
    ``SERVEWISE_FIT_SIMULATED_RUNS``)."""
    if include_simulated is None:
        from planner.settings import get_settings

        include_simulated = get_settings().fit_simulated_runs
    return [r for r in results if include_simulated or not r.simulated]


def calibration_problem(run: RunFiles) -> str | None:
    """Why a run cannot be a calibration point, in words; None when it can."""
    return calibration_problem_of(run.meta, RequestCounts.of(run.requests))


def calibration_problem_of(meta: dict[str, Any], counts: RequestCounts) -> str | None:
    """:func:`calibration_problem` from a run's metadata and request counts."""
    if meta.get("status") != "completed":
        return f"the run did not complete (status {meta.get('status')!r})"
    if not meta.get("plan"):
        return "the run names no plan (GPU, layout, precision) to calibrate"
    if not meta.get("summary"):
        return "the run has no summary of its measurements"
    if not counts.succeeded:
        return "no request succeeded"
    failed_share = 1 - counts.succeeded / counts.measured
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
    return measured_result_of(run.run_id, run.meta, RequestCounts.of(run.requests))


def _served_release(meta: dict[str, Any]) -> str | None:
    """The release the server reported (``/version``, as the runner's preflight reads it) when
    it reads as one (``0.19.0``) and the server was a real one: the engine's own release
    decides defaults the fit must simulate (vLLM's async scheduling from 0.14,
    :func:`planner.engine.vllm_schedules_async`). None otherwise: then the plan's pinned
    release stands, as it does for the prediction."""
    if meta.get("simulated"):
        return None
    reported = str((meta.get("endpoint") or {}).get("server_version") or "").strip()
    return reported if release_number(reported) is not None else None


def _warm_prompt_tokens(meta: dict[str, Any], input_len: int) -> int | None:
    """Tokens of each prompt the run's server found in its prefix cache, when the run shared
    no prefix by design: the server's reported hit share (vLLM's prefix-cache counters over the
    run, ``server_prefix_cache_hit_rate``) of the prompt, from :data:`MIN_WARM_HIT_RATE` on.
    Such hits come from an earlier run's prompts sent again (a stated prompt seed repeated
    against a server that kept its cache); fitted cold, the run would teach the model a
    prefill it never ran. None below it, without the counters, or when the workload shared a
    prefix (its hits are the workload's own, which the measured row does not describe)."""
    config = meta.get("config") or {}
    if float((config.get("workload") or {}).get("prefix_share") or 0.0) > 0:
        return None
    rate = (meta.get("summary") or {}).get("server_prefix_cache_hit_rate")
    if not isinstance(rate, int | float) or not MIN_WARM_HIT_RATE <= rate <= 1:
        return None
    return max(1, round(rate * input_len))


def measured_result_of(
    run_id: str, meta: dict[str, Any], counts: RequestCounts
) -> MeasuredResult | None:
    """:func:`run_to_measured_result` from a run's metadata and request counts."""
    problem = calibration_problem_of(meta, counts)
    if problem is not None:
        log.info("run %s not used for calibration: %s", run_id, problem)
        return None
    try:
        plan = read_plan(meta.get("plan"))
    except InvalidInputError as exc:
        log.warning("run %s not usable for calibration: %s", run_id, exc)
        return None
    if plan is None:
        return None
    # older flat plans may state the GPUs of a replica group; a typed plan is one replica
    stated_gpus = (meta.get("plan") or {}).get("num_gpus")
    summary = meta.get("summary") or {}
    config = meta.get("config") or {}

    def _target(config_key: str, planned_mean: float | None) -> int:
        if config.get(config_key):
            return int(config[config_key])
        return round(planned_mean or 0.0) or 1

    load = "rate" if config.get("request_rate") else "concurrency"
    values: dict[str, Any] = {
        "source": "user benchmark run" + (" (simulated endpoint)" if meta.get("simulated") else ""),
        "source_ref": f"run {run_id} against {(meta.get('endpoint') or {}).get('base_url')}",
        "engine": plan.engine.engine,
        "engine_version": plan.engine.version or _served_release(meta),
        "model": plan.model,
        "precision": plan.precision,
        "gpu": plan.gpu,
        "num_gpus": int(stated_gpus or plan.gpus_per_replica),
        "tp": plan.tp,
        "pp": plan.pp,
        "input_len": _target("input_len", counts.input_len_target_mean),
        "output_len": _target("output_len", counts.output_len_target_mean),
        "load": load,
        "concurrency": config.get("concurrency") if load == "concurrency" else None,
        "request_rate": config.get("request_rate") if load == "rate" else None,
        "num_requests": counts.succeeded,
        "instance": plan.instance,
        "nodes": plan.nodes,
        "output_tok_per_s": summary.get("output_throughput"),
        "total_tok_per_s": summary.get("total_token_throughput"),
        "ttft_ms": summary.get("median_ttft_ms"),
        "ttft_stat": "p50",
        "itl_ms": summary.get("median_tpot_ms"),
        "itl_stat": "p50_tpot",
        "origin": "user",
        "run_id": run_id,
        "simulated": bool(meta.get("simulated", False)),
    }
    # the engine settings the run was launched with (the plan's command states them), so
    # that the fit simulates the run as it ran: a plan's max_num_seqs, token budget, memory
    # share, FP8 KV cache or attention-DP / expert-parallel layout left out would be
    # re-simulated at the engine's defaults, and recalibrate the model against another engine
    settings = plan.engine_scenario_fields()
    for name in MEASURED_ENGINE_SETTINGS:
        values[name] = settings.get(name)
    warm_tokens = _warm_prompt_tokens(meta, values["input_len"])
    if warm_tokens is not None:
        # every request found that much of its prompt cached (planner.perf.simulator:
        # warm_prompts_held), the whole prompt when the server reported all of it
        values["warm_prompts"] = counts.succeeded
        values["warm_prompt_tokens"] = warm_tokens if warm_tokens < values["input_len"] else None
    if plan.engine.spec_method != "none":
        # speculative decoding: the run calibrates the acceptance with what the server
        # measured (vLLM's spec_decode counters), else the plan's stated figure
        measured = summary.get("server_spec_accept_len")
        values["spec_method"] = plan.engine.spec_method
        values["num_spec_tokens"] = plan.engine.num_spec_tokens
        values["spec_accept_len"] = (
            measured if measured else (plan.workload.spec_accept_len if plan.workload else None)
        )
    try:
        return MeasuredResult.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        log.warning("run %s not usable for calibration: %s", run_id, exc.errors()[0]["msg"])
        return None
