"""What the ranking says beyond its order: Pareto frontiers (throughput per GPU against speed
per user, cost against latency) and the sensitivity of the best choice to +-N% on its inputs
(tornado data)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from planner.catalog import Catalog
from planner.errors import InvalidInputError
from planner.layouts import LayoutCandidate
from planner.recommend.request import (
    Predictor,
    Recommendation,
    RecommendationResult,
    RecommendRequest,
    grid_value,
)
from planner.recommend.search import recommend


def pareto_front(
    points: Sequence[tuple[float, float]], *, maximise: tuple[bool, bool]
) -> list[int]:
    """Indices of the points no other point beats on both axes (ties kept)."""
    signs = [1.0 if m else -1.0 for m in maximise]
    front = []
    for i, (x, y) in enumerate(points):
        xi, yi = x * signs[0], y * signs[1]
        dominated = any(
            (ox * signs[0] >= xi and oy * signs[1] >= yi)
            and (ox * signs[0] > xi or oy * signs[1] > yi)
            for j, (ox, oy) in enumerate(points)
            if j != i
        )
        if not dominated:
            front.append(i)
    return front


def pareto_throughput_vs_interactivity(result: RecommendationResult) -> list[Recommendation]:
    """Output tok/s per GPU against tok/s per user (1000 / p99 TPOT): both to maximise."""
    points = [
        (
            r.pred_output_tok_per_s_per_replica / max(r.tp * r.pp * r.attention_dp, 1),
            1000.0 / r.pred_tpot_ms_p99 if r.pred_tpot_ms_p99 > 0 else 0.0,
        )
        for r in result.ranked
    ]
    return [result.ranked[i] for i in pareto_front(points, maximise=(True, True))]


def pareto_cost_vs_latency(result: RecommendationResult) -> list[Recommendation]:
    """$/M output tokens against p99 TTFT: both to minimise."""
    points = [(r.usd_per_million_output_tokens, r.pred_ttft_ms_p99) for r in result.ranked]
    return [result.ranked[i] for i in pareto_front(points, maximise=(False, False))]


class SensitivityRow(BaseModel):
    factor: str
    change_pct: float
    best: str | None
    usd_per_million_output_tokens: float | None
    delta_pct: float | None = Field(description="change of the best $/M output vs the base case")
    best_changed: bool


SENSITIVITY_CONTENDERS = 3

SENSITIVITY_FACTORS = ("price", "input_len", "output_len", "prefix_share", "utilisation")


def _scaled_prices(catalog: Catalog, factor: float) -> Catalog:
    scaled = [
        p.model_copy(update={"usd_per_hour": p.usd_per_hour * factor}) for p in catalog.prices
    ]
    return Catalog(
        gpus=catalog.gpus,
        instances=catalog.instances,
        prices=scaled,
        models=catalog.models,
        measured=catalog.measured,
        owned=catalog.owned,
    )


def sensitivity(
    catalog: Catalog,
    request: RecommendRequest,
    predictor: Predictor,
    *,
    change_pct: float = 20.0,
    base: RecommendationResult | None = None,
    layouts: Sequence[LayoutCandidate] | None = None,
) -> list[SensitivityRow]:
    """How the best choice and its $/M output tokens move when one input moves by +-change_pct.

    Data for a tornado chart: one row per factor and direction.
    """
    if not 0 < change_pct < 100:
        raise InvalidInputError("change_pct", change_pct, "between 0 and 100 (exclusive)")
    base = base or recommend(catalog, request, predictor, layouts=layouts)
    base_best = base.best
    if base_best is not None:
        # Re-search only the leading instance types with the winning engine settings: the
        # question is how the choice among the contenders moves, and it stays interactive.
        contenders = tuple(dict.fromkeys(r.instance for r in base.ranked[:SENSITIVITY_CONTENDERS]))
        settings = base_best.engine_settings
        narrowed = request.search.model_copy(
            update={
                "instances": contenders,
                "max_num_seqs": (grid_value(settings.max_num_seqs, "max_num_seqs"),),
                "max_num_batched_tokens": (
                    grid_value(settings.max_num_batched_tokens, "max_num_batched_tokens"),
                ),
                "chunked_prefill": (settings.enable_chunked_prefill,),
            }
        )
        request = request.model_copy(update={"search": narrowed})
    rows = []
    for factor in SENSITIVITY_FACTORS:
        for sign in (-1.0, 1.0):
            scale = 1.0 + sign * change_pct / 100
            varied_catalog = catalog
            varied = request
            if factor == "price":
                varied_catalog = _scaled_prices(catalog, scale)
            elif factor == "input_len":
                varied = request.model_copy(
                    update={
                        "input_len": max(1, round(request.input_len * scale)),
                        "input_dist": None,
                    }
                )
            elif factor == "output_len":
                varied = request.model_copy(
                    update={
                        "output_len": max(1, round(request.output_len * scale)),
                        "output_dist": None,
                    }
                )
            elif factor == "prefix_share":
                share = min(
                    0.95,
                    max(
                        0.0,
                        request.prefix_share * scale if request.prefix_share else 0.1 * (sign > 0),
                    ),
                )
                varied = request.model_copy(update={"prefix_share": share})
            else:
                current = base_best.utilisation if base_best else 0.5
                demand = request.demand.model_copy(
                    update={"utilisation": min(1.0, current * scale)}
                )
                varied = request.model_copy(update={"demand": demand})
            result = recommend(
                varied_catalog,
                varied,
                predictor,
                layouts=layouts if factor in ("price", "utilisation") else None,
            )
            best = result.best
            delta = None
            if best and base_best:
                delta = 100 * (
                    best.usd_per_million_output_tokens / base_best.usd_per_million_output_tokens - 1
                )
            rows.append(
                SensitivityRow(
                    factor=factor,
                    change_pct=sign * change_pct,
                    best=best.label if best else None,
                    usd_per_million_output_tokens=best.usd_per_million_output_tokens
                    if best
                    else None,
                    delta_pct=delta,
                    best_changed=(best.label if best else None)
                    != (base_best.label if base_best else None),
                )
            )
    return rows


# ----- where disaggregation starts to pay --------------------------------------------------------
#: peak rates the curve is drawn at, as multiples of the request's own peak
DISAGGREGATION_LOAD_FACTORS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0)


class DisaggregationPoint(BaseModel):
    """The best aggregated and the best disaggregated plan at one peak rate (None: no plan of
    that kind meets the SLO there)."""

    peak_rate_rps: float
    aggregated_usd_per_million_output_tokens: float | None = None
    aggregated_label: str | None = None
    disaggregated_usd_per_million_output_tokens: float | None = None
    disaggregated_label: str | None = None


def disaggregation_curve(
    catalog: Catalog,
    request: RecommendRequest,
    predictor: Predictor,
    *,
    factors: Sequence[float] = DISAGGREGATION_LOAD_FACTORS,
    layouts: Sequence[LayoutCandidate] | None = None,
) -> list[DisaggregationPoint]:
    """$/M output tokens of the best aggregated and the best disaggregated plan at the
    request's peak rate times each of ``factors`` (the average rate scaled with it): one
    search with ``disaggregation="auto"`` a load, the same SLO, workload and prices. Where the
    disaggregated line drops below the aggregated one, the split starts to pay. The aggregated
    capacities are memoised across loads (:mod:`planner.recommend.capacity`), so each further
    load mostly re-costs."""
    peak, average = request.demand.peak, request.demand.avg_rate_rps
    if peak is None or average is None:
        raise InvalidInputError(
            "demand", "concurrency", "a request rate (the pools split a rate, not a closed loop)"
        )
    points = []
    for factor in factors:
        if factor <= 0:
            raise InvalidInputError("factors", factor, "multiples of the peak rate above 0")
        demand = request.demand.model_copy(
            update={"avg_rate_rps": average * factor, "peak_rate_rps": peak * factor}
        )
        varied = request.model_copy(update={"demand": demand, "disaggregation": "auto"})
        result = recommend(catalog, varied, predictor, layouts=layouts)
        agg = next((r for r in result.ranked if not r.disaggregated), None)
        dis = next((r for r in result.ranked if r.disaggregated), None)
        points.append(
            DisaggregationPoint(
                peak_rate_rps=peak * factor,
                aggregated_usd_per_million_output_tokens=(
                    agg.usd_per_million_output_tokens if agg else None
                ),
                aggregated_label=agg.label if agg else None,
                disaggregated_usd_per_million_output_tokens=(
                    dis.usd_per_million_output_tokens if dis else None
                ),
                disaggregated_label=dis.label if dis else None,
            )
        )
    return points


def unmet_slos(result: RecommendationResult) -> list[str]:
    """When nothing is ranked: each latency SLO that no candidate meets even at the lowest load
    searched, with the best p99 any candidate achieves there (the figure the SLO would have to
    allow). Empty when something is ranked, or when the candidates failed for other reasons
    (memory, filters) or each SLO alone is met by some candidate."""
    if result.ranked:
        return []
    slo = result.request.slo
    out = []
    for name, target, field, digits in (
        ("p99 TTFT", slo.ttft_p99_ms, "lowest_ttft_ms_p99", 0),
        ("p99 TPOT", slo.tpot_p99_ms, "lowest_tpot_ms_p99", 1),
        ("p99 E2E", slo.e2e_p99_ms, "lowest_e2e_ms_p99", 0),
    ):
        achieved = [
            (getattr(r, field), r) for r in result.rejected if getattr(r, field) is not None
        ]
        if target is None or not achieved:
            continue
        best_ms, best = min(achieved, key=lambda pair: pair[0])
        if best_ms > target:
            out.append(
                f"{name} <= {target:,.{digits}f} ms cannot be met: the best of "
                f"{len(achieved)} candidates ({best.instance} TP{best.tp} PP{best.pp} "
                f"{best.precision}) predicts {best_ms:,.{digits}f} ms even at the lowest load"
            )
    return out


def _plan_words(rec: Recommendation) -> str:
    return (
        f"${rec.usd_per_million_output_tokens:,.2f}/M output tokens on {rec.instances_total} x "
        f"{rec.instance} TP{rec.tp}, p99 TPOT {rec.pred_tpot_ms_p99:,.1f} ms"
    )


def speculation_comparison(result: RecommendationResult) -> str | None:
    """The best plan with and without speculative decoding and what speculation gains, in
    words (None when the search tried no speculation)."""
    if result.request.search.speculative == "off":
        return None
    spec = next((r for r in result.ranked if r.spec_method != "none"), None)
    plain = next((r for r in result.ranked if r.spec_method == "none"), None)
    if spec is None:
        return (
            "No speculative plan meets the SLOs"
            + (f"; without speculation: {_plan_words(plain)}." if plain else ".")
            + " The rejected candidates say why (no MTP layers, no published draft, or a "
            "loss at this load)."
        )
    method = spec.engine_settings.label.split(", ")[-1]
    accepted = spec.pred_spec_accept_len or 1.0
    with_words = f"With {method} ({accepted:.2f} tokens accepted a step): {_plan_words(spec)}"
    why = f" Why: {spec.spec_reason}." if spec.spec_reason else ""
    if plain is None:
        return f"{with_words}. Without speculation no configuration meets the SLOs.{why}"
    saving = 1.0 - spec.usd_per_million_output_tokens / plain.usd_per_million_output_tokens
    if saving > 0.005:
        gain = f"speculation is {saving:.0%} cheaper per output token"
    elif saving < -0.005:
        gain = f"speculation costs {-saving:.0%} more per output token here"
    else:
        gain = "the same cost per output token"
    faster = plain.pred_tpot_ms_p99 - spec.pred_tpot_ms_p99
    return (
        f"{with_words}. Without: {_plan_words(plain)}. At the same SLOs {gain}"
        + (f", and {faster:,.1f} ms faster per token at p99." if faster > 0 else ".")
        + why
    )
