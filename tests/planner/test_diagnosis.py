"""planner.diagnosis on runs built by hand: the arithmetic of the evidence, each check's verdict
and fix, the ranking and the triage tree (no server: the end-to-end runs against the simulated
endpoint are in tests/benchmarks_runner/test_diagnose_pathologies.py)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from planner.catalog import Catalog
from planner.diagnosis import diagnose, evidence_from_run, metric_table, request_table
from planner.diagnosis.checks.latency import _overlapping
from planner.diagnosis.checks.parallelism import GROUPS, step_breakdown
from planner.diagnosis.whatif import DiagnosisContext
from planner.perf.model import PerformanceModel
from planner.perf.scenario import Scenario
from planner.perf.step_time import FEATURES, StepBatch
from planner.run_files import MetricSample, RequestRecord, RunFiles

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
PLAN = {"engine": "vllm", "model": MODEL, "gpu": "H100-SXM", "tp": 1, "pp": 1}


@pytest.fixture(scope="module")
def prior(catalog: Catalog) -> PerformanceModel:
    """An unfitted model (spec-sheet prior coefficients): the what-ifs without a 10 s fit."""
    return PerformanceModel(catalog)


def record(
    i: int,
    start: float,
    ttft: float,
    gaps: list[float],
    prompt: int = 512,
    *,
    ok: bool = True,
) -> RequestRecord:
    chunks = list(start + ttft + np.concatenate([[0.0], np.cumsum(gaps)]))
    if not ok:
        return RequestRecord(
            request_id=f"r{i}", request_index=i, start_s=start, end_s=start + ttft,
            status="error", http_status=500, error="boom",
        )  # fmt: skip
    return RequestRecord(
        request_id=f"r{i}",
        request_index=i,
        scheduled_s=start,
        start_s=start,
        first_chunk_s=chunks[0],
        first_content_s=chunks[0],
        end_s=chunks[-1],
        chunk_times_s=chunks,
        chunk_tokens=[1] * len(chunks),
        prompt_tokens=prompt,
        output_tokens=len(chunks),
        input_len_target=prompt,
        output_len_target=len(chunks),
        status="ok",
        http_status=200,
    )


def samples(
    name: str, times: list[float], values: list[float], **labels: str
) -> list[MetricSample]:
    return [
        MetricSample(t_s=t, name=name, labels=labels, value=v)
        for t, v in zip(times, values, strict=True)
    ]


def run_files(
    requests: list[RequestRecord],
    metrics: list[MetricSample] = (),  # type: ignore[assignment]
    *,
    plan: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    summary: dict[str, Any] | None = None,
    imported_from: str | None = None,
) -> RunFiles:
    cfg = dict(config or {"load": "concurrency", "concurrency": 8})
    if imported_from:
        cfg["imported_from"] = {"tool": imported_from}
    return RunFiles(
        run_id="20261201T000000Z-abcdef",
        path=Path("."),
        meta={
            "run_id": "20261201T000000Z-abcdef",
            "status": "completed",
            "plan": plan,
            "config": cfg,
            "summary": summary or {},
            "self_checks": [],
            "endpoint": {"base_url": "http://127.0.0.1:1", "server_flags": {}},
        },
        requests=requests,
        server_metrics=list(metrics),
    )


def steady_requests(
    n: int = 64, concurrency: int = 8, gap: float = 0.01, out: int = 64, prompt: int = 512
) -> list[RequestRecord]:
    """A closed loop: ``concurrency`` streams, each request ``out`` tokens ``gap`` apart."""
    rng = np.random.default_rng(0)
    rows = []
    length = gap * (out - 1) + 0.05
    for i in range(n):
        slot, turn = i % concurrency, i // concurrency
        start = turn * length + slot * 0.001
        p = int(prompt * rng.uniform(0.5, 1.5))
        rows.append(record(i, start, 0.05, [gap] * (out - 1), p))
    return rows


# ----- evidence arithmetic ----------------------------------------------------------------------
def test_request_table_follows_vllm_definitions() -> None:
    table = request_table([record(0, 1.0, 0.2, [0.01, 0.03]), record(1, 2.0, 0.1, [], ok=False)])
    assert table.count == 2 and table.succeeded == 1
    assert table.ttft_s.tolist() == pytest.approx([0.2])
    # ITL: the gaps between chunks; TPOT = (E2E - TTFT) / (output tokens - 1)
    assert table.itl_s.tolist() == pytest.approx([0.01, 0.03])
    assert table.tpot_s.tolist() == pytest.approx([0.02])
    assert table.e2e_s.tolist() == pytest.approx([0.24])
    assert table.in_flight(np.array([0.5, 1.1, 1.3])).tolist() == [0, 1, 0]


def test_counters_sum_label_sets_and_skip_resets() -> None:
    rows = samples("vllm:num_preemptions_total", [0, 1, 2, 3], [5, 7, 1, 4], engine="0")
    rows += samples("vllm:num_preemptions_total", [0, 1, 2, 3], [0, 0, 0, 1], engine="1")
    table = metric_table(rows)
    # engine 0: +2, reset, +3; engine 1: +1
    assert table.delta("vllm:num_preemptions_total") == pytest.approx(6.0)
    assert table.get("vllm:num_preemptions_total").value.tolist() == [5, 7, 1, 5]  # type: ignore[union-attr]


def test_histogram_quantile_interpolates_inside_a_bucket() -> None:
    name = "vllm:request_queue_time_seconds"
    rows: list[MetricSample] = []
    # between the two scrapes: 10 observations <= 0.1 s, 10 more <= 1 s, none above
    for le, first, last in (("0.1", 5, 15), ("1.0", 5, 25), ("+Inf", 5, 25)):
        rows += samples(f"{name}_bucket", [0.0, 10.0], [first, last], le=le)
    rows += samples(f"{name}_sum", [0.0, 10.0], [1.0, 6.0])
    rows += samples(f"{name}_count", [0.0, 10.0], [5, 25])
    table = metric_table(rows)
    assert table.histogram_quantile(name, 0.5) == pytest.approx(0.1)  # rank 10 of 20
    assert table.histogram_quantile(name, 0.75) == pytest.approx(0.1 + 0.9 * 0.5)
    assert table.histogram_mean(name) == pytest.approx(5.0 / 20)


def test_gaps_overlapping_windows() -> None:
    g0, g1 = np.array([0.0, 1.0, 2.5, 4.0]), np.array([0.5, 2.0, 3.0, 4.5])
    w0, w1 = np.array([1.5, 2.8]), np.array([2.6, 3.5])
    assert _overlapping(g0, g1, w0, w1).tolist() == [False, True, True, False]


# ----- the checks ----------------------------------------------------------------------------
def predicted_gap_s(model: PerformanceModel, concurrency: int) -> float:
    scenario = Scenario(
        model=MODEL, gpu="H100-SXM", input_len=512, output_len=64, load="concurrency",
        concurrency=concurrency, num_requests=64,
    )  # fmt: skip
    return model.predict(scenario).itl_ms_p50 / 1e3


def test_a_healthy_run_lights_no_branch(prior: PerformanceModel) -> None:
    rows = steady_requests(concurrency=32, n=128, gap=predicted_gap_s(prior, 32))
    d = diagnose(
        evidence_from_run(run_files(rows, plan=PLAN, config={"concurrency": 32})),
        model=prior,
    )
    lit = [b.question for b in d.branches if b.lit]
    assert lit == [], [(f.key, f.headline) for f in d.found]


def test_preemptions_are_a_kv_finding_with_flag_fixes_and_what_ifs(
    prior: PerformanceModel,
) -> None:
    t = [0.0, 1.0, 2.0, 3.0, 4.0]
    metrics = (
        samples("vllm:num_preemptions_total", t, [0, 4, 9, 15, 20])
        + samples("vllm:kv_cache_usage_perc", t, [0.5, 1.0, 1.0, 1.0, 0.7])
        + samples("vllm:num_requests_waiting", t, [0, 12, 20, 15, 0])
        + samples("vllm:num_requests_running", t, [8, 20, 20, 20, 4])
    )
    plan = PLAN | {"gpu_memory_utilization": 0.3}
    reqs = steady_requests(n=128, concurrency=32, prompt=1024)
    ev = evidence_from_run(run_files(reqs, metrics, plan=plan, config={"concurrency": 32}))
    d = diagnose(ev, model=prior)
    kv = d.finding("kv_sizing")
    assert kv.status == "found" and kv.severity == "high"
    assert kv.branch == "preemptions" and d.branches[1].lit
    assert {e.name: e.value for e in kv.evidence}["preemptions during the run"] == 20
    fixes = [kv.fix, *kv.alternatives]
    settings = {c.setting for f in fixes if f for c in f.changes}
    assert {"gpu_memory_utilization", "kv_cache_dtype", "max_num_seqs", "tp"} <= settings
    assert kv.fix is not None and kv.fix.what_if is not None
    w = kv.fix.what_if
    # the fix frees KV: the same load gets more tokens/s per GPU and a shorter TTFT tail
    assert w.after.output_tok_per_s / w.after.gpus > w.before.output_tok_per_s / w.before.gpus
    assert w.after.ttft_ms_p99 < w.before.ttft_ms_p99
    assert "--gpu-memory-utilization 0.9" in kv.fix.vllm_args or kv.fix.vllm_args
    assert kv.usd_per_hour_at_stake is not None and kv.usd_per_hour_at_stake > 0
    assert kv.chart is not None and {s.name for s in kv.chart.series} >= {"KV cache usage"}


def test_an_imported_result_without_server_metrics_says_what_it_lacks(
    prior: PerformanceModel,
) -> None:
    ev = evidence_from_run(run_files(steady_requests(), imported_from="vllm"))
    d = diagnose(ev, model=prior)
    kv = d.finding("kv_sizing")
    assert kv.status == "cannot_judge"
    assert "server metrics" in kv.missing[0] and "vllm bench serve" in kv.missing[0]
    assert d.finding("parallelism_links").status == "cannot_judge"
    assert any("names no plan" in m for m in d.cannot_judge)
    assert d.source == "vllm bench serve result"


def stalled_run() -> tuple[list[RequestRecord], float, float]:
    """Eight streams decoding at 10 ms a token; one 16,000-token prompt arrives at 1.0 s and is
    prefilled in one 400 ms step that every other stream's next token waits for."""
    rows = []
    w0, w1 = 1.0, 1.45
    for i in range(8):
        times = [0.05]
        t = 0.05
        while t < 3.0:
            step = 0.4 if t < w1 <= t + 0.4 and t >= w0 - 0.01 else 0.01
            t += step
            times.append(t)
        gaps = list(np.diff(times))
        rows.append(record(i, 0.0, 0.05, gaps, 300))
    rows.append(record(8, w0, w1 - w0, [0.01] * 50, 16000))
    return rows, w0, w1


def test_long_prompts_that_stall_decodes_are_found_and_chunked_prefill_fixes_them(
    prior: PerformanceModel,
) -> None:
    rows, _, _ = stalled_run()
    plan = PLAN | {"enable_chunked_prefill": False}
    d = diagnose(evidence_from_run(run_files(rows, plan=plan)), model=prior)
    stall = d.finding("prefill_stalls")
    assert stall.status == "found", stall.headline
    assert stall.fix is not None
    assert "--enable-chunked-prefill" in stall.fix.vllm_args
    assert "--max-num-batched-tokens 2048" in stall.fix.vllm_args
    assert stall.fix.sglang_args == "--chunked-prefill-size 2048"
    w = stall.fix.what_if
    assert w is not None and w.after.itl_ms_max < w.before.itl_ms_max
    # without the long prompt there is nothing to stall on
    calm = diagnose(evidence_from_run(run_files(rows[:8], plan=plan)), model=prior)
    assert calm.finding("prefill_stalls").status == "clear"


def test_guidellm_results_have_no_chunk_times_to_judge_stalls(prior: PerformanceModel) -> None:
    rows, _, _ = stalled_run()
    files = run_files(rows, plan=PLAN)
    files.meta["config"]["imported_from"] = {"tool": "guidellm", "chunk_times_interpolated": True}
    d = diagnose(evidence_from_run(files), model=prior)
    stall = d.finding("prefill_stalls")
    assert stall.status == "cannot_judge" and "GuideLLM" in stall.missing[0]


def test_a_growing_queue_is_found_with_replicas_as_the_fix(prior: PerformanceModel) -> None:
    rng = np.random.default_rng(1)
    rows = []
    for i in range(120):
        start = i * 0.05
        rows.append(record(i, start, 0.05 + i * 0.04 + rng.uniform(0, 0.01), [0.01] * 31, 400))
    t = list(np.arange(0.0, 7.0, 0.5))
    metrics = samples("vllm:num_requests_waiting", t, [float(2 * i) for i in range(len(t))])
    metrics += samples("vllm:num_requests_running", t, [16.0] * len(t))
    metrics += samples("vllm:kv_cache_usage_perc", t, [0.2] * len(t))
    config = {"load": "rate", "request_rate": 20.0}
    d = diagnose(evidence_from_run(run_files(rows, metrics, plan=PLAN, config=config)), model=prior)
    q = d.finding("queueing")
    assert q.status == "found" and q.severity == "high", q.headline
    assert q.fix is not None and q.fix.what_if is not None
    assert q.fix.what_if.after.ttft_ms_p99 < q.fix.what_if.before.ttft_ms_p99
    assert any("queue depth" in a for a in q.fix.actions)


def test_fixed_lengths_at_concurrency_one_say_little(prior: PerformanceModel) -> None:
    rows = [record(i, i * 0.7, 0.05, [0.01] * 63, 512) for i in range(30)]
    d = diagnose(
        evidence_from_run(run_files(rows, plan=PLAN, config={"load": "concurrency",
                                                             "concurrency": 1})),
        model=prior,
    )  # fmt: skip
    realism = d.finding("workload_realism")
    assert realism.status == "found" and realism.severity == "medium"
    assert "one request at a time" in realism.headline and "too few" in realism.headline
    assert any("--trace" in a for a in realism.fix.actions)  # type: ignore[union-attr]
    # at concurrency 1 the batch cannot use an H100
    assert d.finding("small_batch").status == "found"


def test_idle_time_is_an_accounting_finding_priced_by_the_hour(prior: PerformanceModel) -> None:
    # one request every 2 s, each busy for 0.7 s: idle 65% of the time
    rows = [record(i, i * 2.0, 0.05, [0.01] * 63, 512) for i in range(20)]
    plan = PLAN | {"usd_per_hour": 4.0}
    d = diagnose(
        evidence_from_run(run_files(rows, plan=plan, config={"load": "rate",
                                                             "request_rate": 0.5})),
        model=prior,
    )  # fmt: skip
    acc = d.finding("accounting")
    assert acc.status == "found" and acc.severity == "high"
    idle = {e.name: e.value for e in acc.evidence}["idle share of the run"]
    assert idle == pytest.approx(0.65, abs=0.03)
    assert acc.usd_per_hour_at_stake == pytest.approx(4.0 * idle)
    assert d.usd_per_hour == 4.0 and d.price_source == "the plan's own price"


def test_tensor_parallelism_over_host_staged_pcie_is_found(prior: PerformanceModel) -> None:
    plan = PLAN | {"gpu": "L40S", "tp": 4, "instance": "g6e.12xlarge"}
    rows = steady_requests(n=128, concurrency=32, gap=0.03)
    d = diagnose(
        evidence_from_run(run_files(rows, plan=plan, config={"concurrency": 32})), model=prior
    )
    links = d.finding("parallelism_links")
    assert links.status == "found", links.headline
    assert "host" in links.headline
    assert links.fix is not None and links.fix.scenario_changes["tp"] < 4
    w = links.fix.what_if
    assert w is not None and w.after.gpus == w.before.gpus == 4
    assert w.after.output_tok_per_s > w.before.output_tok_per_s
    assert links.chart is not None and links.chart.series[0].kind == "bar"
    one = diagnose(evidence_from_run(run_files(steady_requests(), plan=PLAN)), model=prior)
    assert one.finding("parallelism_links").status == "clear"


def test_the_step_breakdown_holds_every_step_term_of_an_moe_step(prior: PerformanceModel) -> None:
    # every step term is in one group: the routed experts' GEMMs and the MoE layers' launches
    # had none, so an MoE step's collectives read as a larger share of it than they are
    not_step_terms = ["request_path", "request_path_ranks", "idle"]  # once a request; no work
    grouped = [t for names in GROUPS.values() for t in names] + not_step_terms
    assert sorted(grouped) == sorted(FEATURES)
    scenario = Scenario(
        model="Qwen/Qwen3-30B-A3B", gpu="H100-SXM", tp=2, input_len=2048, output_len=256,
        load="concurrency", concurrency=32, num_requests=64,
    )  # fmt: skip
    parts = step_breakdown(DiagnosisContext(model=prior), scenario, 32.0, 2048.0, 256.0)
    step = StepBatch()
    step.add_decode(32.0 - 32.0 / 256.0, 2048.0 + 128.0, None)
    step.add_prefill(32.0 / 256.0, 2048.0, 0.0, None)
    assert sum(parts.values()) == pytest.approx(prior.step_time_s(scenario, step), rel=1e-9)
    assert parts["GPU work (weights, KV, FLOPs)"] > parts["all-reduce"]


def test_quality_is_never_judged_but_fp8_is_shown(prior: PerformanceModel) -> None:
    d = diagnose(evidence_from_run(run_files(steady_requests(), plan=PLAN)), model=prior)
    size = d.finding("model_size")
    assert size.status == "cannot_judge" and "quality" in size.missing[0]
    assert size.fix is not None and size.fix.vllm_args == "--quantization fp8"
    assert size.fix.what_if is not None
    assert size.fix.what_if.after.output_tok_per_s > size.fix.what_if.before.output_tok_per_s


def test_eager_mode_is_found_when_its_prediction_explains_the_run(
    prior: PerformanceModel,
) -> None:
    scenario = Scenario(
        model=MODEL, gpu="H100-SXM", input_len=512, output_len=64, load="concurrency",
        concurrency=8, num_requests=64,
    )  # fmt: skip
    eager = prior.predict(scenario.model_copy(update={"enforce_eager": True}))
    graphs = prior.predict(scenario)
    assert eager.tpot_ms_p50 > 1.2 * graphs.tpot_ms_p50  # the premise
    # a run that ran at the eager step time, with the plan's fixed lengths
    rows = []
    step = eager.itl_ms_p50 / 1e3
    for i in range(64):
        rows.append(record(i, i // 8 * (step * 63 + 0.05), 0.05, [step] * 63, 512))
    d = diagnose(evidence_from_run(run_files(rows, plan=PLAN)), model=prior)
    host = d.finding("host_overhead")
    assert host.status == "found", host.headline
    assert "eager" in host.headline
    assert host.fix is not None and host.fix.vllm_args == "(drop --enforce-eager)"
    assert host.fix.what_if is not None
    assert host.fix.what_if.after.tpot_ms_p50 < host.fix.what_if.before.tpot_ms_p50


def test_findings_rank_by_money_then_severity(prior: PerformanceModel) -> None:
    rows = [record(i, i * 2.0, 0.05, [0.01] * 63, 512) for i in range(20)]
    plan = PLAN | {"usd_per_hour": 4.0}
    d = diagnose(
        evidence_from_run(run_files(rows, plan=plan, config={"load": "rate",
                                                             "request_rate": 0.5})),
        model=prior,
    )  # fmt: skip
    found = d.found
    assert len(found) >= 2
    money = [f.usd_per_hour_at_stake or 0.0 for f in found]
    assert money == sorted(money, reverse=True)
    statuses = [f.status for f in d.findings]
    assert statuses == sorted(statuses, key=["found", "cannot_judge", "clear"].index)


def test_live_evidence_has_no_requests_and_says_so(prior: PerformanceModel) -> None:
    from planner.diagnosis import evidence_from_scrape

    t = [float(i) for i in range(61)]
    metrics = (
        samples("vllm:num_requests_running", t, [6.0] * 61)
        + samples("vllm:num_requests_waiting", t, [0.0] * 61)
        + samples("vllm:kv_cache_usage_perc", t, [0.3] * 61)
        + samples("vllm:num_preemptions_total", t, [3.0] * 61)
        + samples("vllm:request_success_total", t, [10.0 * i for i in range(61)])
        + samples("vllm:prompt_tokens_total", t, [5000.0 * i for i in range(61)])
        + samples("vllm:generation_tokens_total", t, [1000.0 * i for i in range(61)])
    )
    ev = evidence_from_scrape(metrics, duration_s=60.0, plan=PLAN)
    d = diagnose(ev, model=prior)
    assert d.source == "live endpoint"
    assert d.finding("kv_sizing").status == "clear"
    assert d.finding("prefill_stalls").status == "cannot_judge"
    assert d.finding("workload_realism").status == "clear"
    assert d.summary["request_throughput"] == pytest.approx(10.0)
    assert not math.isnan(d.summary["output_throughput"] or math.nan)


def test_the_fix_becomes_a_plan_for_verify_and_the_report_spells_it_out(
    prior: PerformanceModel,
) -> None:
    from planner.diagnosis.report import finding_rows, fixed_plan, text_report, to_json

    t = [0.0, 1.0, 2.0, 3.0]
    metrics = (
        samples("vllm:num_preemptions_total", t, [0, 10, 20, 30])
        + samples("vllm:kv_cache_usage_perc", t, [1.0, 1.0, 1.0, 1.0])
        + samples("vllm:num_requests_waiting", t, [10, 10, 10, 10])
    )
    plan = PLAN | {"gpu_memory_utilization": 0.3, "label": "H100-SXM TP1 PP1 bf16"}
    reqs = steady_requests(n=128, concurrency=32, prompt=1024)
    d = diagnose(
        evidence_from_run(run_files(reqs, metrics, plan=plan, config={"concurrency": 32})),
        model=prior,
    )
    kv = d.finding("kv_sizing")
    assert kv.fix is not None
    new_plan = fixed_plan(d.plan, kv.fix)
    assert new_plan is not None and new_plan["model"] == MODEL
    changed = {k for k in new_plan if new_plan.get(k) != plan.get(k)}
    assert changed <= {"gpu_memory_utilization", "kv_cache_dtype", "max_num_seqs", "tp",
                       "num_gpus", "nodes", "label", "derived_from"}  # fmt: skip
    assert new_plan["derived_from"]["diagnosis_fix"] == kv.fix.summary
    # a fix that changes nothing of the deployment has no plan
    realism = d.finding("workload_realism")
    assert fixed_plan(d.plan, realism.fix) is None
    text = text_report(d)
    assert "[x] Lots of preemptions?" in text and kv.fix.vllm_args in text
    assert "predicted: output tok/s" in text
    raw = to_json(d)
    kv_raw = next(f for f in raw["findings"] if f["key"] == "kv_sizing")
    assert kv_raw["fix"]["vllm_args"] == kv.fix.vllm_args and kv_raw["fix"]["plan"] == new_plan
    rows = finding_rows(d)
    assert (
        rows[0]["title"] == d.findings[0].title and len(rows) == 12
    )  # the ten, speculation, the P:D pools
