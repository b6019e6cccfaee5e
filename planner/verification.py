"""Verification: a plan as a run, its measurement against the prediction, and what a refit moved.

Pure functions (no I/O, no UI): the Verify page and the Plan page call them.

- A *plan* is a :class:`planner.plan.Plan` (a ranked recommendation's ``plan``, or
  :func:`custom_plan`); a verification run stores it in its ``run.json`` and measures *one
  replica* of it (one endpoint). :func:`scenario_of_run` is the scenario the run is predicted
  by: the plan under the lengths, load and seed the run sent.
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
      scenarios = recommendation_scenarios(r.plan for r in result.ranked[:10])
      moves = prediction_moves(old, new, scenarios, min_change_pct=1.0)
      table = move_rows(moves)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from planner.catalog import GPU, Catalog, MeasuredResult
from planner.catalog.schema import HISTOGRAM_ITL, HISTOGRAM_TTFT
from planner.engine import EngineConfig
from planner.errors import InvalidInputError, PlannerError
from planner.loads import PlanLoadKind
from planner.perf.disaggregated import predict_disaggregated
from planner.perf.model import PerformanceModel
from planner.perf.scenario import Prediction, Scenario
from planner.plan import Load, Plan, PlanWorkload, read_plan
from planner.run_files import RequestRecord
from planner.workload import LengthDistribution


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
    # speculative decoding: the plan's acceptance against the server's (vLLM's spec_decode
    # counters); compared only where one of the two exists
    MetricSpec(
        name="spec_accept_len",
        label="Mean accepted tokens a step",
        unit="tokens",
        summary_key="server_spec_accept_len",
        higher_is_better=True,
    ),
)
#: metrics compared only when the prediction or the run has them
OPTIONAL_METRICS = frozenset({"spec_accept_len"})
METRICS_BY_NAME = {m.name: m for m in METRICS}


# ----- plans -------------------------------------------------------------------------------------
def custom_plan(
    model_id: str,
    gpu: GPU,
    *,
    tp: int = 1,
    pp: int = 1,
    precision: str = "bf16",
    instance: str | None = None,
    engine: EngineConfig | None = None,
) -> Plan:
    """A plan typed in by hand (one replica), with the engine's settings on ``gpu``."""
    return Plan(
        model=model_id,
        precision=precision,
        gpu=gpu.gpu_id,
        instance=instance,
        tp=tp,
        pp=pp,
        engine=(engine or EngineConfig()).resolved(gpu),
    )


def diagnosis_plan(flat: dict[str, Any], catalog: Catalog) -> Plan | None:
    """The plan a diagnosis's fix leads to (:func:`planner.diagnosis.report.fixed_plan`, flat),
    typed, with the engine's settings on its GPU and the replicas it asks for."""
    plan = read_plan(flat)
    if plan is None:
        return None
    engine = plan.engine.resolved(catalog.gpu(plan.gpu))
    return plan.model_copy(update={"engine": engine, "replicas": int(flat.get("replicas") or 1)})


def run_workload(config: dict[str, Any], prefix_share: float = 0.0) -> PlanWorkload | None:
    """The lengths a run sent, from its ``config``: the distributions in ``config.workload``
    when it recorded them, else the means ``config.input_len`` / ``output_len``."""
    lengths: list[int | LengthDistribution] = []
    for side in ("input", "output"):
        recorded = (config.get("workload") or {}).get(f"{side}_len")
        if isinstance(recorded, dict) and "kind" in recorded:
            try:
                lengths.append(LengthDistribution.model_validate(recorded))
                continue
            except InvalidInputError:
                pass
        value = config.get(f"{side}_len")
        if not value:
            return None
        lengths.append(int(value))
    return PlanWorkload.of(lengths[0], lengths[1], prefix_share)


def run_load(config: dict[str, Any]) -> Load | None:
    """The load a run drove, from its ``config`` (None when it names none)."""
    requests = int(config.get("num_requests") or 1)
    rate = config.get("request_rate") if config.get("load") == "rate" else None
    if rate:
        return Load.rate(float(rate), requests)
    concurrency = config.get("concurrency")
    return Load.closed_loop(float(concurrency), requests) if concurrency else None


def scenario_of_run(meta: dict[str, Any]) -> Scenario | None:
    """The scenario a run verified, from its ``run.json``: its plan (typed, or the flat object
    older runs hold) under the lengths, shared-prefix share, load, request count and seed the
    run sent. None without a plan, lengths or a load."""
    try:
        plan = read_plan(meta.get("plan"))
    except InvalidInputError:
        return None
    config = meta.get("config") or {}
    if plan is None:
        return None
    share = float((config.get("workload") or {}).get("prefix_share") or 0.0)
    workload, load = run_workload(config, share), run_load(config)
    if workload is None or load is None:
        return None
    return plan.scenario(workload=workload, load=load, seed=int(config.get("seed") or 0))


def predict_plan(model: PerformanceModel, scenario: Scenario, plan: Plan | None) -> Prediction:
    """The prediction a run of ``plan`` under ``scenario`` is compared with: the model's for an
    aggregated replica, :func:`planner.perf.disaggregated.predict_disaggregated` of both pools
    for a disaggregated plan (the whole deployment, as its simulated endpoint serves it)."""
    layout = plan.disaggregated_layout() if plan is not None else None
    if layout is None:
        return model.predict(scenario)
    return predict_disaggregated(model, scenario, layout).prediction


def prediction_of_run(model: PerformanceModel, meta: dict[str, Any]) -> Prediction | None:
    """:func:`predict_plan` of the scenario a run verified (:func:`scenario_of_run`)."""
    scenario = scenario_of_run(meta)
    if scenario is None:
        return None
    try:
        plan = read_plan(meta.get("plan"))
    except InvalidInputError:
        plan = None
    return predict_plan(model, scenario, plan)


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
        if spec.name in OPTIONAL_METRICS and predicted is None and measured is None:
            continue
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


def default_load(plan: Plan, load_mode: PlanLoadKind, peak: float) -> float:
    """What one replica of ``plan`` sees at the scenario's peak, split evenly over its
    replicas: requests/s, or whole requests in flight (at most the engine's max_num_seqs). A
    disaggregated plan is verified whole (both pools): the whole peak."""
    share = peak if plan.disaggregated else peak / plan.replicas
    if load_mode == "rate":
        return max(0.01, round(share, 2))
    cap = plan.engine.max_num_seqs or share
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
    # a median read off vLLM's histogram counts as the median (planner.perf.latency_stats)
    if result.ttft_ms is not None and result.ttft_stat in ("p50", "median", HISTOGRAM_TTFT):
        out["ttft_ms_p50"] = float(result.ttft_ms)
    if result.itl_ms is not None and result.itl_stat in ("p50_tpot", "median_tpot", HISTOGRAM_ITL):
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


def recommendation_scenarios(plans: Iterable[Plan]) -> list[Scenario]:
    """Each plan's replica at the load it was sized for, as the recommender predicted it:
    what the Plan page re-predicts after a refit."""
    return [plan.scenario() for plan in plans if plan.workload and plan.load]


def without_run(results: Iterable[MeasuredResult], run_id: str) -> list[MeasuredResult]:
    """``results`` less the measured result of run ``run_id`` (the model before that run)."""
    return [r for r in results if r.run_id != run_id]
