"""Verification: plans, measured against predicted, and what a refit moved (incl. the whole loop
against a simulated endpoint slower than the model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from planner.catalog import Catalog
from planner.engine import EngineConfig
from planner.errors import InvalidInputError
from planner.perf.scenario import Prediction, Scenario
from planner.plan import Load, Plan, PlanWorkload
from planner.run_files import RequestRecord, RunFiles
from planner.runs import run_to_measured_result
from planner.verification import (
    METRICS,
    OPTIONAL_METRICS,
    compare,
    comparison_rows,
    custom_plan,
    default_load,
    default_num_requests,
    failure_counts,
    measured_values,
    median_abs_error_pct,
    move_rows,
    moves_for_result,
    newest_run_id,
    prediction_moves,
    recommendation_scenarios,
    scenario_of_run,
    without_run,
)
from planner.vllm_command import vllm_serve_args
from planner.workload import LengthDistribution

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def prediction(**values: float) -> Prediction:
    """A Prediction whose every number is 100 (interval 80..125) unless given."""
    fields: dict[str, Any] = {}
    for name, info in Prediction.model_fields.items():
        if info.annotation in (float, int):
            fields[name] = 100.0 if info.annotation is float else 100
    for name in list(fields):
        if name.endswith("_low"):
            fields[name] = 80.0
        elif name.endswith("_high"):
            fields[name] = 125.0
    fields |= {"far_from_data": False, "confidence": "interpolated", "nearest_measured": "x"}
    fields |= {"distance": 0.1}
    return Prediction(**(fields | values))


def test_compare_gives_the_signed_error_and_the_interval() -> None:
    summary = {"output_throughput": 50.0, "median_ttft_ms": 100.0, "p99_ttft_ms": 200.0}
    rows = {c.metric: c for c in compare(prediction(), summary)}
    assert [c.metric for c in compare(prediction(), summary)] == [
        m.name
        for m in METRICS
        if m.name not in OPTIONAL_METRICS  # no speculation here
    ]
    # predicted 100 tok/s, measured 50: the model promised twice what was measured
    assert rows["output_tok_per_s"].error_pct == pytest.approx(100.0)
    assert rows["output_tok_per_s"].within_interval is False
    assert rows["ttft_ms_p50"].error_pct == pytest.approx(0.0)
    assert rows["ttft_ms_p50"].within_interval is True
    assert rows["ttft_ms_p99"].error_pct == pytest.approx(-50.0)
    assert rows["request_per_s"].measured is None and rows["request_per_s"].error_pct is None
    assert rows["itl_ms_p50"].within_interval is None  # the prediction has no interval for it
    table = {r["metric"]: r for r in comparison_rows(rows.values())}
    assert table["Output tokens/s (tok/s)"]["80% interval"] == "80.0 to 125.0"
    assert table["Output tokens/s (tok/s)"]["in interval"] == "no"
    assert median_abs_error_pct(rows.values()) == pytest.approx(50.0)
    assert compare(None, summary)[0].predicted is None


#: One replica of a recommended plan: 3 replicas of TP4 on g6e.12xlarge, sized at 2 req/s.
RECOMMENDED = Plan(
    model=MODEL,
    gpu="L40S",
    instance="g6e.12xlarge",
    tp=4,
    replicas=3,
    engine=EngineConfig(
        max_num_seqs=64, max_num_batched_tokens=8192, block_size=16, kv_cache_dtype="fp8",
        max_model_len=2560,
    ),
    workload=PlanWorkload.of(2048, 512),
    load=Load.rate(2.0, 160),
)  # fmt: skip


def test_a_plan_is_one_replica_at_the_load_it_was_sized_for() -> None:
    (scenario,) = recommendation_scenarios([RECOMMENDED])
    assert (scenario.load, scenario.request_rate, scenario.num_requests) == ("rate", 2.0, 160)
    assert (scenario.gpus, scenario.instance, scenario.max_num_seqs) == (4, "g6e.12xlarge", 64)
    assert (scenario.kv_cache_dtype, scenario.max_model_len) == ("fp8", 2560)
    assert RECOMMENDED.label == "g6e.12xlarge TP4 PP1 bf16"
    args = vllm_serve_args(RECOMMENDED.vllm_config())
    for flag, value in (("--tensor-parallel-size", "4"), ("--max-num-seqs", "64"),
                        ("--kv-cache-dtype", "fp8"), ("--max-model-len", "2560")):  # fmt: skip
        assert args[args.index(flag) + 1] == value
    assert recommendation_scenarios([Plan(model=MODEL, gpu="L4")]) == []  # nothing sized


def test_the_run_of_a_plan_round_trips_to_its_scenario_and_measured_result(
    catalog: Catalog,
) -> None:
    plan = custom_plan(MODEL, catalog.gpu("H100-SXM"), tp=2, engine=EngineConfig(max_num_seqs=128))
    assert plan.label == "H100-SXM TP2 PP1 bf16" and plan.engine.max_num_batched_tokens == 8192
    scenario = plan.scenario(workload=PlanWorkload.of(256, 32), load=Load.closed_loop(4, 24))
    assert (scenario.gpus, scenario.load, scenario.concurrency) == (2, "concurrency", 4)
    assert scenario.max_num_seqs == 128
    config = {"load": "concurrency", "concurrency": 4, "input_len": 256, "output_len": 32,
              "num_requests": 24}  # fmt: skip
    meta = {"run_id": "r1", "status": "completed", "plan": plan.model_dump(mode="json"),
            "config": config, "simulated": True,
            "summary": {"output_throughput": 10.0, "median_ttft_ms": 5.0,
                        "median_tpot_ms": 2.0}}  # fmt: skip
    assert scenario_of_run(meta) == scenario
    assert scenario_of_run({"plan": None, "config": config}) is None
    rate = scenario_of_run(meta | {"config": config | {"load": "rate", "request_rate": 1.5}})
    assert rate is not None and (rate.load, rate.request_rate) == ("rate", 1.5)
    # a run file written before plans were typed holds a flat plan
    flat = {"engine": "vllm", "model": MODEL, "gpu": "H100-SXM", "tp": 2, "num_gpus": 2,
            "max_num_seqs": 128, "label": "H100-SXM TP2 PP1 bf16"}  # fmt: skip
    legacy = scenario_of_run(meta | {"plan": flat})
    assert legacy is not None and (legacy.tp, legacy.max_num_seqs, legacy.concurrency) == (
        2, 128, 4,
    )  # fmt: skip
    requests = [
        RequestRecord(request_id=f"r{i}", request_index=i, start_s=0.0, first_chunk_s=0.1,
                      input_len_target=256, output_len_target=32, status="ok")
        for i in range(3)
    ]  # fmt: skip
    result = run_to_measured_result(RunFiles("r1", Path("."), meta, requests))
    assert result is not None and result.simulated and result.num_gpus == 2
    assert run_to_measured_result(RunFiles("r1", Path("."), meta | {"plan": flat}, requests))
    assert measured_values(result) == {
        "output_tok_per_s": 10.0,
        "ttft_ms_p50": 5.0,
        "tpot_ms_p50": 2.0,
    }
    assert without_run([result], "r1") == [] and without_run([result], "r2") == [result]
    later = result.model_copy(update={"run_id": "20261130T000000Z-bbbbbb"})
    earlier = result.model_copy(update={"run_id": "20261129T000000Z-aaaaaa"})
    assert newest_run_id([earlier, later]) == later.run_id and newest_run_id([]) is None


#: a small closed-loop run's config and summary, for the runs that become measured rows
RUN_CONFIG = {"load": "concurrency", "concurrency": 4, "input_len": 256, "output_len": 32}
RUN_SUMMARY = {"output_throughput": 10.0, "median_ttft_ms": 5.0, "median_tpot_ms": 2.0}


def _three_requests() -> list[RequestRecord]:
    return [
        RequestRecord(request_id=f"r{i}", request_index=i, start_s=0.0, first_chunk_s=0.1,
                      input_len_target=256, output_len_target=32, status="ok")
        for i in range(3)
    ]  # fmt: skip


def test_a_run_is_fitted_with_the_engine_settings_its_plan_launched(catalog: Catalog) -> None:
    """A plan's max_num_seqs, token budget, memory share and FP8 KV cache travel into the run's
    measured row, so the fit simulates the engine that ran, not the engine's defaults; an
    SGLang plan that states no memory share keeps SGLang's own default."""
    from planner.perf.calibration import scenario_from_measured

    settings = ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization",
                "kv_cache_dtype", "data_parallel_size", "enable_expert_parallel")  # fmt: skip
    config, summary, requests = RUN_CONFIG, RUN_SUMMARY, _three_requests()
    engines = {
        "vllm": EngineConfig(max_num_seqs=96, max_num_batched_tokens=4096,
                             gpu_memory_utilization=0.95, kv_cache_dtype="fp8"),
        "sglang": EngineConfig(engine="sglang", max_num_seqs=64),
    }  # fmt: skip
    for name, engine in engines.items():
        plan = custom_plan(MODEL, catalog.gpu("H100-SXM"), tp=2, engine=engine)
        meta = {"run_id": "r1", "status": "completed", "plan": plan.model_dump(mode="json"),
                "config": config, "summary": summary}  # fmt: skip
        result = run_to_measured_result(RunFiles("r1", Path("."), meta, requests))
        ran = scenario_of_run(meta)
        assert result is not None and ran is not None
        fitted = scenario_from_measured(result)
        assert [getattr(fitted, s) for s in settings] == [getattr(ran, s) for s in settings], name
    assert (result.max_num_seqs, result.gpu_memory_utilization) == (64, None)  # SGLang's own
    vllm_plan = custom_plan(MODEL, catalog.gpu("H100-SXM"), tp=2, engine=engines["vllm"])
    meta = {"run_id": "r1", "status": "completed", "plan": vllm_plan.model_dump(mode="json"),
            "config": config, "summary": summary}  # fmt: skip
    vllm_result = run_to_measured_result(RunFiles("r1", Path("."), meta, requests))
    assert vllm_result is not None
    assert (vllm_result.max_num_seqs, vllm_result.max_num_batched_tokens) == (96, 4096)
    assert (vllm_result.gpu_memory_utilization, vllm_result.kv_cache_dtype) == (0.95, "fp8")


def test_a_run_is_fitted_with_the_release_its_server_reported(catalog: Catalog) -> None:
    """A plan without a release is predicted as the pinned one; its run is fitted as the release
    the server's /version reported when it reads as one (vLLM 0.14+ schedules one step ahead,
    earlier releases do not), as the pinned one when the server reported none, and never as
    the simulated endpoint's placeholder."""
    from planner.perf.calibration import scenario_from_measured
    from planner.perf.deployment import resolve_deployment

    plan = custom_plan(MODEL, catalog.gpu("H100-SXM"), tp=2, engine=EngineConfig())
    config, summary, requests = RUN_CONFIG, RUN_SUMMARY, _three_requests()

    def fitted(reported: str | None, simulated: bool = False) -> tuple[str | None, bool]:
        endpoint = {"base_url": "http://127.0.0.1:8000", "server_version": reported}
        meta = {"run_id": "r1", "status": "completed", "plan": plan.model_dump(mode="json"),
                "config": config, "summary": summary, "simulated": simulated,
                "endpoint": endpoint}  # fmt: skip
        result = run_to_measured_result(RunFiles("r1", Path("."), meta, requests))
        assert result is not None and result.origin == "user"
        dep = resolve_deployment(scenario_from_measured(result), catalog)
        return result.engine_version, dep.async_scheduling

    assert fitted("0.19.0") == ("0.19.0", True)
    assert fitted("0.11.0") == ("0.11.0", False)
    assert fitted(None) == (None, True)  # the plan's pinned release
    assert fitted("unknown") == (None, True)
    assert fitted("0.0.0-servewise-simulated", simulated=True) == (None, True)


def test_a_run_whose_server_found_its_prompts_cached_is_fitted_warm(catalog: Catalog) -> None:
    """A run that shared no prefix by design but whose server reported finding 75% of its prompt
    tokens in the prefix cache (a stated prompt seed sent again to a server that kept its cache)
    is fitted with every request finding that much of its prompt cached, the whole prompt at
    100%; a few percent of hits (a chat template's common opening), no counters, or a workload
    that shares a prefix by design leave it cold."""
    plan = custom_plan(MODEL, catalog.gpu("H100-SXM"), tp=2, engine=EngineConfig())
    requests = _three_requests()

    def warm(rate: float | None, config: dict[str, Any] = RUN_CONFIG) -> tuple[Any, Any]:
        summary = {**RUN_SUMMARY, "server_prefix_cache_hit_rate": rate}
        meta = {"run_id": "r1", "status": "completed", "plan": plan.model_dump(mode="json"),
                "config": config, "summary": summary}  # fmt: skip
        result = run_to_measured_result(RunFiles("r1", Path("."), meta, requests))
        assert result is not None
        return result.warm_prompts, result.warm_prompt_tokens

    assert warm(0.75) == (3, 192)  # of the 256-token prompts
    assert warm(1.0) == (3, None)
    assert warm(0.05) == warm(None) == (None, None)
    shared = {**RUN_CONFIG, "workload": {"prefix_share": 0.5}}
    assert warm(0.75, shared) == (None, None)


def test_failures_defaults_and_loads() -> None:
    shapes: list[dict[str, Any]] = [
        {"status": "ok", "first_chunk_s": 0.1},
        {"status": "error", "http_status": 500, "error": "HTTP 500: boom"},
        {"status": "error", "http_status": 500, "error": "HTTP 500: boom"},
        {"status": "error", "http_status": 200, "error": "connection dropped"},
        {"status": "error", "http_status": 503, "error": "busy", "warmup": True},
    ]
    rows = [
        RequestRecord.model_validate({"request_id": f"r{i}", "request_index": i, "start_s": 0.0}
                                     | shape)
        for i, shape in enumerate(shapes)
    ]  # fmt: skip
    assert failure_counts(rows) == [("HTTP 500: boom", 2), ("connection dropped", 1)]
    assert default_load(RECOMMENDED, "concurrency", 32) == 11.0
    assert default_load(RECOMMENDED, "concurrency", 500) == 64.0  # max_num_seqs
    assert default_load(RECOMMENDED, "rate", 7.5) == 2.5
    assert default_num_requests("concurrency", 16) == 64
    assert default_num_requests("concurrency", 1) == 16
    assert default_num_requests("rate", 100) == 400


class Fixed:
    """A model that predicts the same numbers for every scenario (or fails)."""

    def __init__(self, fail: bool = False, **values: float) -> None:
        self.values, self.fail = values, fail

    def predict(self, scenario: Scenario) -> Prediction:
        if self.fail:
            raise InvalidInputError("gpu", scenario.gpu, "a catalog GPU")
        return prediction(**self.values)


SCENARIO = Scenario(model=MODEL, gpu="L4", input_len=256, output_len=32, concurrency=4)


def test_prediction_moves_reports_change_and_direction() -> None:
    old = Fixed(output_tok_per_s=100.0, ttft_ms_p50=50.0, tpot_ms_p50=10.0)
    new = Fixed(output_tok_per_s=80.0, ttft_ms_p50=50.0, tpot_ms_p50=12.5)
    moves = prediction_moves(
        old, new, [SCENARIO], measured=[{"output_tok_per_s": 50.0, "tpot_ms_p50": 8.0}]
    )
    assert [m.metric for m in moves] == ["tpot_ms_p50", "output_tok_per_s", "ttft_ms_p50"]
    tpot, out, ttft = moves
    assert tpot.change_pct == pytest.approx(25.0) and tpot.toward_measurement is False
    assert out.change == pytest.approx(-20.0) and out.toward_measurement is True
    assert out.error_before_pct == pytest.approx(100.0) and out.error_after_pct == pytest.approx(
        60.0
    )
    assert ttft.change_pct == 0.0 and ttft.toward_measurement is None
    assert [m.metric for m in prediction_moves(old, new, [SCENARIO], min_change_pct=1.0)] == [
        "tpot_ms_p50",
        "output_tok_per_s",
    ]
    assert prediction_moves(old, Fixed(fail=True), [SCENARIO]) == []
    assert move_rows(moves)[1]["toward the measurement"] == "yes"
    with pytest.raises(ValueError, match="align"):
        prediction_moves(old, new, [SCENARIO], measured=[])


# ----- the whole loop --------------------------------------------------------------------------
@pytest.mark.slow
def test_a_run_slower_than_predicted_pulls_the_refit_toward_it(
    catalog: Catalog, tmp_path: Path
) -> None:
    """Verify 8B on H100 against a simulated endpoint twice as slow as the model: the run is
    ingested as a user result, and the refitted prediction of that configuration moves toward
    the measurement."""
    from benchmarks_runner.run_manager import RunManager, VerificationRequest
    from benchmarks_runner.simulated.perf_timing import coefficients_for_plan
    from planner.perf.model import get_performance_model
    from planner.store import Store

    model = get_performance_model(catalog)
    plan = custom_plan(MODEL, catalog.gpu("H100-SXM"))
    request = VerificationRequest(
        plan=plan,
        input_len=LengthDistribution.fixed(256),
        output_len=LengthDistribution.fixed(48),
        num_requests=24,
        concurrency=4,
        slowdown=2.0,
        coefficients=coefficients_for_plan(model, plan),
    )
    manager = RunManager(tmp_path / "runs")
    run = manager.start_verification(request)
    assert run.wait(60) and run.state == "completed", run.error
    store = Store(tmp_path / "db.duckdb")
    try:
        store.ingest_runs(manager.runs_dir)
        user = [r for r in store.measured_results() if r.origin == "user"]
    finally:
        store.close()
    (measured,) = [r for r in user if r.run_id == run.run_id]
    before = model.predict(request.scenario())
    assert measured.output_tok_per_s is not None
    # the endpoint at slowdown 2 is about half as fast as predicted
    # at most about half as fast as predicted (a loaded machine only makes it slower)
    assert measured.output_tok_per_s / before.output_tok_per_s < 0.7
    refit = get_performance_model(catalog, user)
    moves = {m.metric: m for m in moves_for_result(model, refit, measured)}
    for metric in ("output_tok_per_s", "tpot_ms_p50"):
        assert moves[metric].toward_measurement, moves[metric]
    assert moves["output_tok_per_s"].after < moves["output_tok_per_s"].before


def test_simulated_runs_stay_out_of_the_fit_unless_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run against the simulated endpoint was timed by the model itself: the model learning
    from it learns its own predictions. It stays a run; the fit takes it only when asked
    (``fit_simulated_runs``, SERVEWISE_FIT_SIMULATED_RUNS, the Verify page's switch)."""
    from planner.runs import calibration_results
    from planner.settings import get_settings

    real = _user_result(run_id="20261201T000000Z-aaaaaa", simulated=False)
    simulated = _user_result(run_id="20261201T000001Z-bbbbbb", simulated=True)
    assert calibration_results([real, simulated]) == [real]
    assert calibration_results([real, simulated], include_simulated=True) == [real, simulated]
    monkeypatch.setenv("SERVEWISE_FIT_SIMULATED_RUNS", "1")
    get_settings.cache_clear()
    try:
        assert get_settings().fit_simulated_runs is True
        assert calibration_results([real, simulated]) == [real, simulated]
    finally:
        monkeypatch.delenv("SERVEWISE_FIT_SIMULATED_RUNS")
        get_settings.cache_clear()


def _user_result(*, run_id: str, simulated: bool) -> Any:
    from planner.catalog import MeasuredResult

    return MeasuredResult(
        source="user benchmark run", engine="vllm", model=MODEL, precision="bf16",
        gpu="H100-SXM", num_gpus=1, tp=1, pp=1, input_len=256, output_len=32,
        load="concurrency", concurrency=4, output_tok_per_s=100.0, origin="user",
        run_id=run_id, simulated=simulated,
    )  # fmt: skip


def test_a_speculative_runs_acceptance_is_compared_only_where_there_is_one() -> None:
    from types import SimpleNamespace

    from planner.verification import compare

    spec: Any = SimpleNamespace(spec_accept_len=2.5, output_tok_per_s=100.0)
    rows = {c.metric: c for c in compare(spec, {"server_spec_accept_len": 2.45})}
    assert rows["spec_accept_len"].error_pct == pytest.approx((2.5 - 2.45) / 2.45 * 100)
    plain: Any = SimpleNamespace(spec_accept_len=None, output_tok_per_s=100.0)
    assert "spec_accept_len" not in {c.metric for c in compare(plain, {"output_throughput": 90})}


def test_a_speculative_run_calibrates_with_the_acceptance_its_server_measured() -> None:
    from planner.perf.calibration import scenario_from_measured

    plan = Plan(
        model=MODEL,
        gpu="H100-SXM",
        tp=1,
        engine=EngineConfig(spec_method="eagle3", num_spec_tokens=3),
        workload=PlanWorkload.of(256, 32, spec_accept_len=2.0),
    )
    config = {"load": "concurrency", "concurrency": 4, "input_len": 256, "output_len": 32}
    summary = {"output_throughput": 10.0, "median_ttft_ms": 5.0, "median_tpot_ms": 2.0}
    meta = {"run_id": "r1", "status": "completed", "plan": plan.model_dump(mode="json"),
            "config": config, "summary": summary | {"server_spec_accept_len": 2.4}}  # fmt: skip
    requests = [
        RequestRecord(request_id=f"r{i}", request_index=i, start_s=0.0, first_chunk_s=0.1,
                      input_len_target=256, output_len_target=32, status="ok")
        for i in range(3)
    ]  # fmt: skip
    result = run_to_measured_result(RunFiles("r1", Path("."), meta, requests))
    assert result is not None
    assert (result.spec_method, result.num_spec_tokens, result.spec_accept_len) == (
        "eagle3", 3, 2.4,
    )  # fmt: skip
    scenario = scenario_from_measured(result)
    assert (scenario.spec_method, scenario.spec_accept_len) == ("eagle3", 2.4)
    # a server that reported none: the plan's stated acceptance
    stated = run_to_measured_result(
        RunFiles("r1", Path("."), meta | {"summary": summary}, requests)
    )
    assert stated is not None and stated.spec_accept_len == 2.0
