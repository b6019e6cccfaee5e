"""Verification: a plan as a run, its measurement against the prediction, and what a refit moved.

Pure functions (no I/O, no UI): the Verify page and the Plan page call them.

- A *plan* is the JSON object a verification run stores in its ``run.json`` (``plan``) and the
  store turns into a measured result (:func:`planner.runs.run_to_measured_result`): engine,
  model, precision, gpu, num_gpus, tp, pp, instance, nodes, plus the engine knobs the plan was
  ranked with. A verification run measures *one replica* (one endpoint), so ``num_gpus`` is
  ``tp x pp``. :func:`plan_from_recommendation` builds one from a ranked recommendation.
- :func:`compare` sets a run's summary (``vllm bench serve`` keys) against a
  :class:`~planner.perf.scenario.Prediction` of the same scenario, metric by metric, with the
  signed error ``(predicted - measured) / measured`` and whether the measurement fell inside
  the 80% interval.
- :func:`prediction_moves` predicts scenarios with the model before and after a refit and says
  which predictions moved and by how much (and, where the measurement is known, whether
  toward it). For the Plan page::

      user = [r for r in store.measured_results() if r.origin == "user"]
      run_id = newest_run_id(user)
      old = get_performance_model(catalog, without_run(user, run_id))   # cached
      new = get_performance_model(catalog, user)                        # the refit
      scenarios = recommendation_scenarios(result.ranked[:10], model_id,
                                           input_len=..., output_len=...)
      moves = prediction_moves(old, new, scenarios, min_change_pct=1.0)
      table = move_rows(moves)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from planner.catalog import MeasuredResult
from planner.engine import EngineConfig
from planner.errors import InvalidInputError, PlannerError
from planner.perf.scenario import Prediction, Scenario
from planner.run_files import RequestRecord
from planner.vllm_command import VllmServeConfig
from planner.workload import LengthDistribution

#: Keys of a plan that describe the deployment (the store reads these).
PLAN_KEYS = ("engine", "model", "precision", "gpu", "num_gpus", "tp", "pp", "instance", "nodes")
#: Engine knobs a plan may carry (vLLM names).
KNOB_KEYS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "kv_cache_dtype",
    "gpu_memory_utilization",
)


class MetricSpec(BaseModel):
    """One compared metric: where the prediction and the run summary keep it."""

    model_config = ConfigDict(frozen=True)

    name: str  # Prediction attribute; also ``<name>_low``/``<name>_high`` when it has them
    label: str
    unit: str
    summary_key: str  # key of the run summary (vLLM ``bench serve`` names)
    higher_is_better: bool


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        name="output_tok_per_s",
        label="Output tokens/s",
        unit="tok/s",
        summary_key="output_throughput",
        higher_is_better=True,
    ),
    MetricSpec(
        name="total_tok_per_s",
        label="Total tokens/s",
        unit="tok/s",
        summary_key="total_token_throughput",
        higher_is_better=True,
    ),
    MetricSpec(
        name="request_per_s",
        label="Requests/s",
        unit="req/s",
        summary_key="request_throughput",
        higher_is_better=True,
    ),
    MetricSpec(
        name="ttft_ms_p50",
        label="Median TTFT",
        unit="ms",
        summary_key="median_ttft_ms",
        higher_is_better=False,
    ),
    MetricSpec(
        name="ttft_ms_p99",
        label="p99 TTFT",
        unit="ms",
        summary_key="p99_ttft_ms",
        higher_is_better=False,
    ),
    MetricSpec(
        name="tpot_ms_p50",
        label="Median TPOT",
        unit="ms",
        summary_key="median_tpot_ms",
        higher_is_better=False,
    ),
    MetricSpec(
        name="tpot_ms_p99",
        label="p99 TPOT",
        unit="ms",
        summary_key="p99_tpot_ms",
        higher_is_better=False,
    ),
    MetricSpec(
        name="itl_ms_p50",
        label="Median ITL",
        unit="ms",
        summary_key="median_itl_ms",
        higher_is_better=False,
    ),
    MetricSpec(
        name="e2e_ms_p50",
        label="Median E2E latency",
        unit="ms",
        summary_key="median_e2el_ms",
        higher_is_better=False,
    ),
    MetricSpec(
        name="e2e_ms_p99",
        label="p99 E2E latency",
        unit="ms",
        summary_key="p99_e2el_ms",
        higher_is_better=False,
    ),
)
METRICS_BY_NAME = {m.name: m for m in METRICS}


# ----- plans -------------------------------------------------------------------------------------
def plan_from_recommendation(rec: Any, model_id: str, *, engine: str = "vllm") -> dict[str, Any]:
    """One replica of a :class:`planner.recommend.Recommendation` as a plan.

    ``nodes`` is per replica (the recommendation's ``nodes`` counts a replica group's
    instances, so it is divided by the data-parallel degree).
    """
    settings = rec.engine_settings
    dp = max(1, int(getattr(rec, "dp", 1) or 1))
    return {
        "engine": engine,
        "model": model_id,
        "precision": rec.precision,
        "gpu": rec.gpu,
        "num_gpus": rec.tp * rec.pp,
        "tp": rec.tp,
        "pp": rec.pp,
        "instance": rec.instance,
        "nodes": max(1, math.ceil(int(rec.nodes) / dp)),
        "max_num_seqs": settings.max_num_seqs,
        "max_num_batched_tokens": settings.max_num_batched_tokens,
        "enable_chunked_prefill": settings.enable_chunked_prefill,
        "enable_prefix_caching": settings.enable_prefix_caching,
        "kv_cache_dtype": rec.kv_cache_dtype,
        "label": rec.label,
    }


def custom_plan(
    model_id: str,
    gpu: str,
    *,
    tp: int = 1,
    pp: int = 1,
    precision: str = "bf16",
    instance: str | None = None,
    engine: str = "vllm",
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    kv_cache_dtype: str = "auto",
) -> dict[str, Any]:
    """A plan typed in by hand (one replica)."""
    plan: dict[str, Any] = {
        "engine": engine,
        "model": model_id,
        "precision": precision,
        "gpu": gpu,
        "num_gpus": tp * pp,
        "tp": tp,
        "pp": pp,
        "instance": instance,
        "nodes": 1,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "kv_cache_dtype": kv_cache_dtype,
    }
    plan["label"] = plan_label(plan)
    return plan


def plan_label(plan: dict[str, Any]) -> str:
    """``g6e.12xlarge L40S TP4 PP1 bf16`` (the instance only when the plan names one)."""
    where = f"{plan['instance']} " if plan.get("instance") else ""
    return (
        f"{where}{plan.get('gpu')} TP{plan.get('tp', 1)} PP{plan.get('pp', 1)} "
        f"{plan.get('precision', 'bf16')}"
    )


def vllm_config_for_plan(
    plan: dict[str, Any], *, max_model_len: int | None = None
) -> VllmServeConfig:
    """The ``vllm serve`` configuration of one replica of ``plan``."""
    stated = {key: plan.get(key) for key in KNOB_KEYS if plan.get(key) is not None}
    engine = EngineConfig.of(max_model_len=max_model_len, **stated)
    return VllmServeConfig(
        model=str(plan["model"]),
        tensor_parallel_size=int(plan.get("tp") or 1),
        pipeline_parallel_size=int(plan.get("pp") or 1),
        precision=str(plan.get("precision") or "bf16"),
        engine=engine,
    )


def verification_scenario(
    plan: dict[str, Any],
    *,
    input_len: int | LengthDistribution,
    output_len: int | LengthDistribution,
    num_requests: int,
    concurrency: float | None = None,
    request_rate: float | None = None,
    seed: int = 0,
) -> Scenario:
    """The scenario a verification run of ``plan`` measures: one replica, lengths fixed or
    drawn from a distribution (with ``seed``: the draw the run sends), a closed-loop
    ``concurrency`` or a Poisson ``request_rate``, ``num_requests`` requests."""
    kv_dtype = str(plan.get("kv_cache_dtype") or "auto")
    tp, pp = int(plan.get("tp") or 1), int(plan.get("pp") or 1)
    knobs = {k: plan[k] for k in ("max_num_seqs", "max_num_batched_tokens") if plan.get(k)}
    for key in ("enable_chunked_prefill", "enable_prefix_caching"):
        if plan.get(key) is not None:
            knobs[key] = bool(plan[key])
    return Scenario(
        engine=str(plan.get("engine") or "vllm"),
        engine_version=plan.get("engine_version"),
        model=str(plan["model"]),
        precision=str(plan.get("precision") or "bf16"),
        gpu=str(plan["gpu"]),
        num_gpus=tp * pp,
        tp=tp,
        pp=pp,
        instance=plan.get("instance") or None,
        nodes=plan.get("nodes") or None,
        **_lengths("input", input_len),
        **_lengths("output", output_len),
        load="rate" if request_rate else "concurrency",
        concurrency=None if request_rate else concurrency,
        request_rate=request_rate or None,
        num_requests=num_requests,
        kv_cache_dtype="fp8" if kv_dtype.startswith("fp8") else "auto",
        seed=seed,
        **knobs,
    )


def _lengths(side: str, length: int | LengthDistribution) -> dict[str, Any]:
    """A fixed length as ``<side>_len``, any other distribution as ``<side>_dist``."""
    if isinstance(length, LengthDistribution):
        if length.kind != "fixed":
            return {f"{side}_dist": length}
        length = length.quantile(1.0)
    return {f"{side}_len": int(length)}


def _planned_length(config: dict[str, Any], side: str) -> int | LengthDistribution | None:
    """The run's planned ``<side>`` lengths: the distribution in ``config.workload`` when the
    run recorded one, else the mean ``config.<side>_len``."""
    recorded = (config.get("workload") or {}).get(f"{side}_len")
    if isinstance(recorded, dict) and "kind" in recorded:
        try:
            return LengthDistribution.model_validate(recorded)
        except InvalidInputError:
            pass
    value = config.get(f"{side}_len")
    return int(value) if value else None


def scenario_of_run(meta: dict[str, Any]) -> Scenario | None:
    """The scenario a run verified, from its ``run.json`` (None without a plan or a load).

    Lengths, request count and seed are the run's planned ones (the distributions in
    ``config.workload``, else the means ``config.input_len``, ``output_len``; ``num_requests``,
    ``seed``).
    """
    plan = meta.get("plan") or {}
    config = meta.get("config") or {}
    if not plan.get("model") or not plan.get("gpu"):
        return None
    input_len, output_len = _planned_length(config, "input"), _planned_length(config, "output")
    if input_len is None or output_len is None:
        return None
    rate = config.get("request_rate") if config.get("load") == "rate" else None
    concurrency = config.get("concurrency")
    if not rate and not concurrency:
        return None
    return verification_scenario(
        plan,
        input_len=input_len,
        output_len=output_len,
        num_requests=int(config.get("num_requests") or 1),
        concurrency=float(concurrency) if not rate and concurrency else None,
        request_rate=float(rate) if rate else None,
        seed=int(config.get("seed") or 0),
    )


# ----- measured against predicted ----------------------------------------------------------------
class MetricComparison(BaseModel):
    """One metric of a run against its prediction.

    ``error_pct = (predicted - measured) / measured x 100``: positive when the model promised
    more than was measured (throughput) or a longer time than was measured (latency).
    ``within_interval``: the measurement lies in the prediction's 80% interval (None when the
    prediction has no interval for the metric).
    """

    model_config = ConfigDict(frozen=True)

    metric: str
    label: str
    unit: str
    predicted: float | None
    predicted_low: float | None
    predicted_high: float | None
    measured: float | None
    error_pct: float | None
    within_interval: bool | None
    higher_is_better: bool


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def relative_error_pct(predicted: float | None, measured: float | None) -> float | None:
    """``(predicted - measured) / measured x 100``; None when either is missing or measured 0."""
    if predicted is None or measured is None or measured == 0:
        return None
    return (predicted - measured) / measured * 100.0


def compare(
    prediction: Prediction | None,
    summary: dict[str, Any] | None,
    metrics: Sequence[MetricSpec] = METRICS,
) -> list[MetricComparison]:
    """Each metric of ``metrics``: predicted (with its interval), measured, signed error."""
    summary = summary or {}
    rows = []
    for spec in metrics:
        predicted = _number(getattr(prediction, spec.name, None)) if prediction else None
        low = _number(getattr(prediction, f"{spec.name}_low", None)) if prediction else None
        high = _number(getattr(prediction, f"{spec.name}_high", None)) if prediction else None
        measured = _number(summary.get(spec.summary_key))
        inside = None
        if measured is not None and low is not None and high is not None:
            inside = low <= measured <= high
        rows.append(
            MetricComparison(
                metric=spec.name,
                label=spec.label,
                unit=spec.unit,
                predicted=predicted,
                predicted_low=low,
                predicted_high=high,
                measured=measured,
                error_pct=relative_error_pct(predicted, measured),
                within_interval=inside,
                higher_is_better=spec.higher_is_better,
            )
        )
    return rows


def comparison_rows(comparisons: Iterable[MetricComparison]) -> list[dict[str, Any]]:
    """Rows for a table: metric, predicted, 80% interval, measured, error, inside interval."""
    rows = []
    for c in comparisons:
        interval = None
        if c.predicted_low is not None and c.predicted_high is not None:
            interval = f"{c.predicted_low:,.1f} to {c.predicted_high:,.1f}"
        rows.append(
            {
                "metric": f"{c.label} ({c.unit})",
                "predicted": c.predicted,
                "80% interval": interval,
                "measured": c.measured,
                "error %": c.error_pct,
                "in interval": (
                    None if c.within_interval is None else ("yes" if c.within_interval else "no")
                ),
            }
        )
    return rows


def failure_counts(requests: Iterable[RequestRecord]) -> list[tuple[str, int]]:
    """Failed measured requests grouped by error message (HTTP status first), most common
    first: what fault injection or a real endpoint's trouble looked like from the client."""
    counts: dict[str, int] = {}
    for record in requests:
        if record.warmup or record.ok:
            continue
        status = record.http_status
        error = str(record.error or "failed")
        prefix = f"HTTP {status}"
        key = f"{prefix}: {error}" if status and status != 200 and prefix not in error else error
        counts[key] = counts.get(key, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def default_load(
    load_mode: str, peak: float, replicas: int, max_num_seqs: int | None = None
) -> float:
    """What one replica of a plan sees at the scenario's peak: concurrency (whole requests,
    at most ``max_num_seqs``) or requests/s, split evenly over ``replicas``."""
    share = peak / max(1, replicas)
    if load_mode == "rate":
        return max(0.01, round(share, 2))
    cap = max_num_seqs or 256
    return float(min(cap, max(1, math.ceil(share))))


def default_num_requests(load_mode: str, load: float) -> int:
    """Enough requests for a steady state (4 x concurrency, ~60 s of arrivals), 16 to 400."""
    wanted = 4 * load if load_mode == "concurrency" else 60 * load
    return int(min(400, max(16, math.ceil(wanted))))


def median_abs_error_pct(comparisons: Iterable[MetricComparison]) -> float | None:
    """Median of |error| over the metrics that have one (a one-number summary of a run)."""
    errors = sorted(abs(c.error_pct) for c in comparisons if c.error_pct is not None)
    if not errors:
        return None
    mid = len(errors) // 2
    return errors[mid] if len(errors) % 2 else (errors[mid - 1] + errors[mid]) / 2


# ----- recalibration: what a refit moved ---------------------------------------------------------
class Predicts(Protocol):
    def predict(self, scenario: Scenario) -> Prediction: ...


#: Metrics :func:`prediction_moves` reports by default.
MOVE_METRICS: tuple[str, ...] = ("output_tok_per_s", "ttft_ms_p50", "tpot_ms_p50")


class PredictionMove(BaseModel):
    """How one predicted metric of one scenario changed from the old model to the new one.

    ``change_pct = (after - before) / before x 100``. ``toward_measurement`` (when the
    measurement is known): the new prediction is closer to it than the old one was.
    """

    model_config = ConfigDict(frozen=True)

    scenario: str
    metric: str
    label: str
    unit: str
    before: float
    after: float
    change: float
    change_pct: float
    measured: float | None = None
    error_before_pct: float | None = None
    error_after_pct: float | None = None
    toward_measurement: bool | None = None


def measured_values(result: MeasuredResult) -> dict[str, float]:
    """A measured result's figures under the Prediction's metric names (those it has)."""
    out: dict[str, float] = {}
    if result.output_tok_per_s:
        out["output_tok_per_s"] = float(result.output_tok_per_s)
    if result.total_tok_per_s:
        out["total_tok_per_s"] = float(result.total_tok_per_s)
    if result.ttft_ms is not None and result.ttft_stat in ("p50", "median"):
        out["ttft_ms_p50"] = float(result.ttft_ms)
    if result.itl_ms is not None and result.itl_stat in ("p50_tpot", "median_tpot"):
        out["tpot_ms_p50"] = float(result.itl_ms)
    return out


def measured_scenario(result: MeasuredResult) -> Scenario:
    """The scenario a measured result describes, as the fit reads it."""
    from planner.perf.calibration import scenario_from_measured

    return scenario_from_measured(result)


def prediction_moves(
    old_model: Predicts,
    new_model: Predicts,
    scenarios: Sequence[Scenario],
    *,
    metrics: Sequence[str] = MOVE_METRICS,
    measured: Sequence[dict[str, float] | None] | None = None,
    min_change_pct: float = 0.0,
) -> list[PredictionMove]:
    """Predict every scenario with both models; one row per (scenario, metric) whose
    prediction changed by at least ``min_change_pct`` percent, largest change first.

    ``measured`` (aligned with ``scenarios``): known measurements by metric name, e.g.
    :func:`measured_values` of the run that caused the refit; they fill the error columns and
    ``toward_measurement``. A scenario either model cannot predict is left out.
    """
    if measured is not None and len(measured) != len(scenarios):
        raise ValueError(
            f"measured has {len(measured)} entries for {len(scenarios)} scenarios: align them"
        )
    moves: list[PredictionMove] = []
    for index, scenario in enumerate(scenarios):
        try:
            before_p = old_model.predict(scenario)
            after_p = new_model.predict(scenario)
        except (PlannerError, RuntimeError, ValueError):
            continue
        known = (measured[index] if measured is not None else None) or {}
        for name in metrics:
            spec = METRICS_BY_NAME.get(name)
            before = _number(getattr(before_p, name, None))
            after = _number(getattr(after_p, name, None))
            if before is None or after is None or before == 0:
                continue
            change_pct = (after - before) / before * 100.0
            if abs(change_pct) < min_change_pct:
                continue
            truth = known.get(name)
            err_before = relative_error_pct(before, truth)
            err_after = relative_error_pct(after, truth)
            toward = None
            if truth is not None and after != before:
                toward = abs(after - truth) < abs(before - truth)
            moves.append(
                PredictionMove(
                    scenario=scenario.describe(),
                    metric=name,
                    label=spec.label if spec else name,
                    unit=spec.unit if spec else "",
                    before=before,
                    after=after,
                    change=after - before,
                    change_pct=change_pct,
                    measured=truth,
                    error_before_pct=err_before,
                    error_after_pct=err_after,
                    toward_measurement=toward,
                )
            )
    moves.sort(key=lambda m: abs(m.change_pct), reverse=True)
    return moves


def move_rows(moves: Iterable[PredictionMove]) -> list[dict[str, Any]]:
    """Rows for a table of moved predictions."""
    return [
        {
            "metric": f"{m.label} ({m.unit})",
            "before": m.before,
            "after": m.after,
            "change %": m.change_pct,
            "measured": m.measured,
            "error before %": m.error_before_pct,
            "error after %": m.error_after_pct,
            "toward the measurement": (
                None if m.toward_measurement is None else ("yes" if m.toward_measurement else "no")
            ),
        }
        for m in moves
    ]


def moves_for_result(
    old_model: Predicts, new_model: Predicts, result: MeasuredResult
) -> list[PredictionMove]:
    """What the refit on ``result`` did to the prediction of ``result``'s own configuration."""
    values = measured_values(result)
    return prediction_moves(
        old_model,
        new_model,
        [measured_scenario(result)],
        metrics=[m for m in ("output_tok_per_s", "ttft_ms_p50", "tpot_ms_p50") if m in values]
        or MOVE_METRICS,
        measured=[values],
    )


def newest_run_id(results: Iterable[MeasuredResult]) -> str | None:
    """The most recent run among the user's results (run ids start with a UTC timestamp)."""
    ids = [r.run_id for r in results if r.origin == "user" and r.run_id]
    return max(ids) if ids else None


def recommendation_scenarios(
    recommendations: Iterable[Any],
    model_id: str,
    *,
    input_len: int,
    output_len: int,
    num_requests: int = 160,
) -> list[Scenario]:
    """Each recommendation's replica at the rate it was sized for (``max_rps_per_replica``),
    as the recommender predicts it: what the Plan page re-predicts after a refit."""
    scenarios = []
    for rec in recommendations:
        rate = float(getattr(rec, "max_rps_per_replica", 0.0) or 0.0)
        scenarios.append(
            verification_scenario(
                plan_from_recommendation(rec, model_id),
                input_len=input_len,
                output_len=output_len,
                num_requests=num_requests,
                request_rate=rate if rate > 0 else None,
                concurrency=None if rate > 0 else 1,
            )
        )
    return scenarios


def without_run(results: Iterable[MeasuredResult], run_id: str) -> list[MeasuredResult]:
    """``results`` less the measured result of run ``run_id`` (the model before that run)."""
    return [r for r in results if r.run_id != run_id]
