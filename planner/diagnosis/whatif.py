"""The deployment a run measured, as a performance-model scenario, and the same with a fix.

:func:`run_scenario` turns a run's plan (model, GPU, layout, engine settings) and its load (the
run's own request lengths; its concurrency, or its arrival times replayed as a trace) into a
:class:`~planner.perf.scenario.Scenario`; engine settings the server reported about itself
(``vllm:cache_config_info``: ``gpu_memory_utilization``, ``cache_dtype``,
``enable_prefix_caching``) win over the plan's. :func:`what_if` predicts that scenario and the
scenario with a fix's changes applied, and prices both:

    $/M output tokens = $/hour / (output tokens/s x 3600) x 1e6     (planner.cost)

A plan's $/hour is its own ``usd_per_hour`` when it carries one; otherwise the catalog's
on-demand price of its instance (the cheapest region unless one is given) for the share of
the instance's GPUs the replica uses, or, without an instance, the cheapest per-GPU price of
an instance with that GPU, times the replica's GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.catalog import Catalog
from planner.cost import usd_per_million_tokens
from planner.diagnosis.evidence import RunEvidence
from planner.diagnosis.findings import Fix, Outcome, WhatIf
from planner.errors import PlannerError
from planner.perf.metrics import run_metrics
from planner.perf.model import PerformanceModel
from planner.perf.scenario import Prediction, Scenario, TraceRequest
from planner.workload import LengthDistribution

#: the most requests a what-if replays (a long live run is thinned evenly)
MAX_REPLAYED = 600


@dataclass(frozen=True)
class Evaluated:
    prediction: Prediction
    itl_ms_max: float  # the longest predicted gap between two tokens (a stall)


@dataclass(frozen=True)
class Price:
    usd_per_hour: float  # one replica of the plan
    source: str


@dataclass
class DiagnosisContext:
    """What the checks may use besides the evidence: the model, the catalog, the plan's price."""

    model: PerformanceModel | None = None
    catalog: Catalog | None = None
    region: str | None = None
    scenario: Scenario | None = None  # the run's deployment and load, when the plan is known
    price: Price | None = None
    scenario_problem: str | None = None  # why there is no scenario
    _predictions: dict[str, Evaluated | None] = field(default_factory=dict)

    def evaluate(self, scenario: Scenario) -> Evaluated | None:
        """The model's prediction (memoised on the whole scenario); None when it cannot."""
        if self.model is None:
            return None
        key = scenario.model_dump_json()
        if key not in self._predictions:
            try:
                dep, trace, c = self.model.simulate(scenario)
                gaps = run_metrics(trace, c, dep.loaded_replicas)
                itl = gaps.itl_s[gaps.itl_weights > 0]
                self._predictions[key] = Evaluated(
                    self.model.predict(scenario), float(itl.max()) * 1e3 if itl.size else 0.0
                )
            except (PlannerError, RuntimeError, ValueError):
                self._predictions[key] = None
        return self._predictions[key]

    def predict(self, scenario: Scenario) -> Prediction | None:
        evaluated = self.evaluate(scenario)
        return evaluated.prediction if evaluated is not None else None

    def price_for_gpus(self, gpus: int) -> float | None:
        if self.price is None or self.scenario is None:
            return None
        per_replica = self.scenario.tp * self.scenario.pp
        return self.price.usd_per_hour * gpus / per_replica


def _bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if value is None:
        return None
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    return None


def engine_settings(ev: RunEvidence) -> dict[str, Any]:
    """Scenario engine knobs of the run: the plan's, overridden by what the server reported."""
    plan = ev.plan or {}
    knobs: dict[str, Any] = {}
    for key in ("max_num_seqs", "max_num_batched_tokens"):
        if plan.get(key):
            knobs[key] = int(plan[key])
    for key in ("enable_chunked_prefill", "enable_prefix_caching", "enforce_eager"):
        flag = _bool(plan.get(key))
        if flag is not None:
            knobs[key] = flag
    if plan.get("spec_method") not in (None, "", "none"):  # speculative decoding
        knobs["spec_method"] = str(plan["spec_method"])
        if plan.get("num_spec_tokens"):
            knobs["num_spec_tokens"] = int(plan["num_spec_tokens"])
        measured = ev.summary.get("server_spec_accept_len") or plan.get("spec_accept_len")
        if measured and float(measured) >= 1:
            knobs["spec_accept_len"] = float(measured)  # the run's own acceptance
    gmu = plan.get("gpu_memory_utilization")
    reported = ev.flag("gpu_memory_utilization")
    for value in (gmu, reported):
        try:
            if value is not None and 0 < float(value) <= 1:
                knobs["gpu_memory_utilization"] = float(value)
        except (TypeError, ValueError):
            pass
    dtype = str(ev.flag("cache_dtype", "kv_cache_dtype") or plan.get("kv_cache_dtype") or "auto")
    knobs["kv_cache_dtype"] = "fp8" if dtype.lower().startswith("fp8") else "auto"
    prefix = _bool(ev.flag("enable_prefix_caching"))
    if prefix is not None:
        knobs["enable_prefix_caching"] = prefix
    chunked = _bool(ev.flag("enable_chunked_prefill"))
    if chunked is not None:
        knobs["enable_chunked_prefill"] = chunked
    seqs = ev.flag("max_num_seqs")
    if seqs and seqs.isdigit():
        knobs["max_num_seqs"] = int(seqs)
    return knobs


def _lengths(values: np.ndarray) -> tuple[int | None, LengthDistribution | None]:
    v = np.rint(values[np.isfinite(values) & (values >= 1)]).astype(int)
    if v.size == 0:
        return None, None
    if int(v.min()) == int(v.max()):
        return int(v[0]), None
    uniq, counts = np.unique(v, return_counts=True)
    return None, LengthDistribution.empirical(uniq.tolist(), counts.tolist())


def workload_setting(ev: RunEvidence, name: str) -> Any:
    workload = ev.config.get("workload")
    if isinstance(workload, Mapping) and workload.get(name) is not None:
        return workload[name]
    return ev.config.get(name)


def shared_prefix_share(ev: RunEvidence) -> float | None:
    """The share of prompt tokens the workload shares with other requests: as the runner sent
    them (``config.shared_prefix_share``), else the planned ``prefix_share`` (under
    ``config.workload`` as the runner writes it)."""
    share = ev.config.get("shared_prefix_share")
    if share is None:
        share = workload_setting(ev, "prefix_share")
    workload = ev.config.get("workload")
    if share is None and isinstance(workload, Mapping) and "input_len" in workload:
        share = 0.0  # synthetic prompts of a Servewise run share nothing unless asked
    try:
        return None if share is None else max(0.0, min(1.0, float(share)))
    except (TypeError, ValueError):
        return None


def run_scenario(ev: RunEvidence) -> tuple[Scenario | None, str | None]:
    """The scenario the run measured (one replica), or None and why not."""
    plan = ev.plan or {}
    if not plan.get("model") or not plan.get("gpu"):
        return None, (
            "the run names no plan (model, GPU, layout): the what-if of each fix needs one "
            "(diagnose --plan FILE, or run with --plan)"
        )
    tp, pp = int(plan.get("tp") or 1), int(plan.get("pp") or 1)
    base: dict[str, Any] = {
        "engine": str(plan.get("engine") or "vllm"),
        "engine_version": plan.get("engine_version"),
        "model": str(plan["model"]),
        "precision": str(plan.get("precision") or "bf16"),
        "gpu": str(plan["gpu"]),
        "tp": tp,
        "pp": pp,
        "num_gpus": tp * pp,
        "instance": plan.get("instance") or None,
        "nodes": plan.get("nodes") or None,
        **engine_settings(ev),
    }
    share = shared_prefix_share(ev)
    if share:
        base["prefix_share"] = share
    load = _load(ev)
    if load is None:
        return None, "the run has neither requests nor a load to replay"
    try:
        return Scenario(**base, **load), None
    except (PlannerError, ValueError) as exc:
        return None, f"the plan does not make a scenario: {exc}"


def _load(ev: RunEvidence) -> dict[str, Any] | None:
    req = ev.requests
    config = ev.config
    if req is not None and req.succeeded:
        ok = req.ok
        fixed_in, dist_in = _lengths(req.prompt_tokens[ok])
        fixed_out, dist_out = _lengths(req.output_tokens[ok])
        if fixed_in is None and dist_in is None:
            return None
        lengths: dict[str, Any] = {
            "input_len": fixed_in,
            "input_dist": dist_in,
            "output_len": fixed_out or (None if dist_out else 1),
            "output_dist": dist_out,
        }
        concurrency = _num(config.get("concurrency") or config.get("max_concurrency"))
        if config.get("load", "concurrency") == "concurrency" and concurrency:
            return {
                **lengths,
                "load": "concurrency",
                "concurrency": concurrency,
                "num_requests": req.count,
            }
        return {"load": "trace", "trace": _replay(ev)}
    metrics = ev.metrics
    if metrics is None or not ev.duration_s:
        return None
    served = metrics.delta("vllm:request_success_total")
    prompt = metrics.delta("vllm:prompt_tokens_total")
    generated = metrics.delta("vllm:generation_tokens_total")
    if not served or not prompt or not generated:
        return None
    rate = served / ev.duration_s
    return {
        "input_len": max(1, round(prompt / served)),
        "output_len": max(1, round(generated / served)),
        "load": "rate",
        "request_rate": rate,
        "num_requests": int(min(MAX_REPLAYED, max(50, served))),
    }


def closed_loop_changes(ev: RunEvidence, concurrency: float) -> dict[str, Any]:
    """Scenario changes that replay the run's request lengths as a closed loop of
    ``concurrency`` requests in flight (for what-ifs at another batch)."""
    req = ev.requests
    changes: dict[str, Any] = {
        "load": "concurrency",
        "concurrency": float(concurrency),
        "request_rate": None,
        "trace": None,
    }
    if req is not None and req.succeeded:
        fixed_in, dist_in = _lengths(req.prompt_tokens[req.ok])
        fixed_out, dist_out = _lengths(req.output_tokens[req.ok])
        changes.update(
            input_len=fixed_in,
            input_dist=dist_in,
            output_len=fixed_out or (None if dist_out else 1),
            output_dist=dist_out,
            num_requests=max(int(4 * concurrency), req.count),
        )
    else:
        changes["num_requests"] = max(int(4 * concurrency), 100)
    return changes


def _replay(ev: RunEvidence) -> tuple[TraceRequest, ...]:
    req = ev.requests
    assert req is not None
    ok = req.ok
    arrival = np.where(np.isfinite(req.scheduled_s), req.scheduled_s, req.start_s)[ok]
    prompt = req.prompt_tokens[ok]
    output = req.output_tokens[ok]
    order = np.argsort(arrival, kind="stable")
    if order.size > MAX_REPLAYED:
        order = order[np.linspace(0, order.size - 1, MAX_REPLAYED).astype(int)]
    t0 = float(arrival[order[0]])
    return tuple(
        TraceRequest(
            arrival_s=max(0.0, float(arrival[i]) - t0),
            input_len=max(1, round(float(prompt[i]))),
            output_len=max(1, round(float(output[i])) if math.isfinite(output[i]) else 1),
        )
        for i in order
    )


def _num(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number > 0 else None


def plan_price(
    plan: Mapping[str, Any], catalog: Catalog | None, region: str | None = None
) -> Price | None:
    """$/hour of one replica of ``plan`` (see the module docstring), with where it came from."""
    gpus = int(plan.get("tp") or 1) * int(plan.get("pp") or 1)
    own = _num(plan.get("usd_per_hour"))
    if own:
        return Price(own, str(plan.get("price_source") or "the plan's own price"))
    if catalog is None or not plan.get("gpu"):
        return None
    instance = plan.get("instance")
    try:
        if instance:
            inst = catalog.instance(str(instance))
            price = catalog.price(inst.instance, region=region)
            share = max(gpus / inst.gpus, int(plan.get("nodes") or 1))
            return Price(
                price.usd_per_hour * share,
                f"{inst.instance} on-demand {price.region} (${price.usd_per_hour:,.2f}/h for "
                f"{inst.gpus} GPUs; {price.source}, {price.as_of})",
            )
    except PlannerError:
        pass
    best: tuple[float, str] | None = None
    gpu = str(plan["gpu"]).lower()
    for inst in catalog.instances.values():
        if inst.gpu_id.lower() != gpu:
            continue
        for p in catalog.prices_for(inst.instance, region=region, pricing="on_demand"):
            per_gpu = p.usd_per_hour / inst.gpus
            if best is None or per_gpu < best[0]:
                best = (
                    per_gpu,
                    f"cheapest on-demand {inst.gpu_id} in the catalog: {inst.instance} "
                    f"{p.region} (${p.usd_per_hour:,.2f}/h for {inst.gpus} GPUs; {p.source}, "
                    f"{p.as_of})",
                )
    if best is None:
        return None
    return Price(best[0] * gpus, best[1])


def outcome(evaluated: Evaluated, usd_per_hour: float | None, gpus: int) -> Outcome:
    prediction = evaluated.prediction
    cost = None
    if usd_per_hour and prediction.output_tok_per_s > 0:
        cost = usd_per_million_tokens(usd_per_hour, prediction.output_tok_per_s)
    return Outcome(
        output_tok_per_s=prediction.output_tok_per_s,
        total_tok_per_s=prediction.total_tok_per_s,
        ttft_ms_p99=prediction.ttft_ms_p99,
        itl_ms_p99=prediction.itl_ms_p99,
        itl_ms_max=evaluated.itl_ms_max,
        tpot_ms_p50=prediction.tpot_ms_p50,
        usd_per_hour=usd_per_hour,
        usd_per_million_output_tokens=cost,
        gpus=gpus,
    )


def apply_fix(scenario: Scenario, changes: Mapping[str, Any]) -> Scenario:
    """``scenario`` with a fix's changes; ``replicas`` multiplies the GPUs (data parallelism)."""
    values = scenario.model_dump()
    updates = dict(changes)
    replicas = int(updates.pop("replicas", 0) or 0)
    values.update(updates)
    per_replica = int(values["tp"]) * int(values["pp"])
    if replicas:
        values["num_gpus"] = per_replica * replicas
    elif "tp" in updates or "pp" in updates:
        values["num_gpus"] = per_replica * max(1, scenario.replicas)
    if replicas or "tp" in updates or "pp" in updates:
        values["nodes"] = None
    return Scenario.model_validate(values)


def what_if(
    ctx: DiagnosisContext,
    fix: Fix,
    *,
    observed: Mapping[str, Any] | None = None,
    description: str = "",
) -> WhatIf | None:
    """The run's deployment predicted before and after ``fix`` (None without a model or plan,
    or when either scenario cannot be predicted). ``observed``: settings the check inferred
    from the run that the plan did not state (eager mode, chunked prefill off): the "before"
    scenario has them, the "after" one has them changed by the fix."""
    if ctx.scenario is None or ctx.model is None:
        return None
    try:
        before_scenario = apply_fix(ctx.scenario, observed or {})
        after_scenario = apply_fix(before_scenario, fix.scenario_changes)
    except (PlannerError, ValueError):
        return None
    before = ctx.evaluate(before_scenario)
    after = ctx.evaluate(after_scenario)
    if before is None or after is None:
        return None
    notes = []
    b = before.prediction
    if b.far_from_data or after.prediction.far_from_data:
        notes.append(f"far from measured data ({b.confidence}; nearest: {b.nearest_measured})")
    return WhatIf(
        description=description or fix.summary,
        before=outcome(before, ctx.price_for_gpus(before_scenario.gpus), before_scenario.gpus),
        after=outcome(after, ctx.price_for_gpus(after_scenario.gpus), after_scenario.gpus),
        notes=notes,
    )


def with_what_if(
    ctx: DiagnosisContext, fix: Fix, *, observed: Mapping[str, Any] | None = None
) -> Fix:
    """``fix`` carrying its what-if (unchanged when there is none to compute)."""
    w = what_if(ctx, fix, observed=observed)
    return fix if w is None else fix.model_copy(update={"what_if": w})


def saved_usd_per_hour(ctx: DiagnosisContext, w: WhatIf | None) -> float | None:
    """Money a throughput fix frees: the deployment's $/h x (1 - before / after tokens/s per
    GPU), i.e. the GPUs the same traffic would no longer need. 0 when the fix gains nothing."""
    if w is None or w.before.usd_per_hour is None:
        return None
    before = w.before.output_tok_per_s / max(1, w.before.gpus)
    after = w.after.output_tok_per_s / max(1, w.after.gpus)
    if after <= 0 or before <= 0:
        return None
    return max(0.0, w.before.usd_per_hour * (1.0 - before / after))


def build_context(
    ev: RunEvidence,
    model: PerformanceModel | None,
    catalog: Catalog | None = None,
    region: str | None = None,
) -> DiagnosisContext:
    catalog = catalog or (model.catalog if model is not None else None)
    scenario, problem = run_scenario(ev)
    price = plan_price(ev.plan, catalog, region) if ev.plan else None
    return DiagnosisContext(
        model=model,
        catalog=catalog,
        region=region,
        scenario=scenario,
        price=price,
        scenario_problem=problem,
    )
