"""A disaggregated plan on the simulated endpoint: two pool processes behind a router, verified
and diagnosed end to end over 127.0.0.1.

The plans are Llama-3.1-70B on H100 TP4 pools over InfiniBand, timed by the spec-sheet prior
coefficients (an unfitted model, no fit in these tests) for both the endpoint and the
prediction. 2,048-token prompts make a prefill step ~100 ms, so the loopback hops (a few ms)
stay small beside what is measured.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks_runner.endpoints import SimulatedEndpoint
from benchmarks_runner.run_manager import ManagedRun, RunManager, VerificationRequest
from benchmarks_runner.server_metrics import parse_prometheus
from benchmarks_runner.simulated.disaggregated import kv_transfer_of, pool_coefficients
from benchmarks_runner.simulated.perf_timing import timing_scenario
from planner.catalog import Catalog
from planner.diagnosis import diagnose_run
from planner.diagnosis.report import fixed_plan, what_if_text
from planner.engine import EngineConfig
from planner.perf.model import PerformanceModel
from planner.plan import Load, Plan, PlanPool, PlanWorkload, read_plan
from planner.run_files import read_run_dir
from planner.verification import predict_plan, prediction_of_run
from planner.workload import LengthDistribution
from tests.patience import PATIENT_S

MODEL = "meta-llama/Llama-3.1-70B-Instruct"
INPUT, OUTPUT = 2048, 32


def pools_plan(
    prefill: int,
    decode: int,
    rate: float,
    output: int = OUTPUT,
    decode_seqs: int | None = None,
) -> Plan:
    engine = EngineConfig.of(max_num_seqs=decode_seqs) if decode_seqs else EngineConfig()
    return Plan(
        model=MODEL,
        gpu="H100-SXM",
        tp=4,
        replicas=decode,
        prefill=PlanPool(replicas=prefill, tp=4, gpu="H100-SXM"),
        decode=PlanPool(replicas=decode, tp=4, gpu="H100-SXM", engine=engine),
        kv_link="infiniband",
        workload=PlanWorkload.of(INPUT, output),
        load=Load.rate(rate),
    )


@pytest.fixture(scope="module")
def prior(catalog: Catalog) -> PerformanceModel:
    """The unfitted model: its prior coefficients time the endpoint and make the prediction."""
    return PerformanceModel(catalog)


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[RunManager]:
    manager = RunManager(tmp_path / "runs")
    yield manager
    manager.shutdown(timeout_s=20)


def _get(url: str) -> tuple[int, str, dict[str, str]]:
    with urllib.request.urlopen(url, timeout=PATIENT_S) as resp:
        return resp.status, resp.read().decode(), dict(resp.headers)


def _values(text: str, name: str, **labels: str) -> list[float]:
    return [
        s.value
        for s in parse_prometheus(text)
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def test_the_router_prefills_transfers_and_streams_from_the_decode_pool(
    catalog: Catalog, prior: PerformanceModel
) -> None:
    """``--plan`` of a disaggregated plan: the router and its two pools. Each request is one
    token on the prefill pool, its KV transfer (the planner's formula, exactly) and its answer
    streamed from the decode pool; /pools says where they are, each pool's /metrics counts its
    side, the router's page carries both labelled by pool."""
    plan = pools_plan(1, 2, 4.0)
    coefficients = pool_coefficients(prior, plan, timing_scenario(plan))
    endpoint = SimulatedEndpoint(
        [
            "--plan",
            plan.model_dump_json(),
            "--prefill-coefficients",
            json.dumps(coefficients["prefill"]),
            "--decode-coefficients",
            json.dumps(coefficients["decode"]),
        ]
    )
    base = endpoint.start(threading.Event())
    try:
        _, text, _ = _get(f"{base}/pools")
        pools = json.loads(text)
        assert (pools["prefill"]["ranks"], pools["decode"]["ranks"]) == (1, 2)
        assert pools["kv_link"] == "infiniband"
        words, answers = 300, (5, 9, 17)
        for n in answers:
            body = {
                "model": MODEL,
                "prompt": " ".join(["word"] * words),
                "max_tokens": n,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            request = urllib.request.Request(
                f"{base}/v1/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=PATIENT_S) as resp:
                assert resp.headers["x-servewise-simulated"] == "1"
                events = [
                    line[6:] for line in resp.read().decode().splitlines() if line[:6] == "data: "
                ]
            assert events[-1] == "[DONE]"
            chunks = [json.loads(e) for e in events[:-1]]
            assert sum(1 for c in chunks if c["choices"]) == n
            assert chunks[-1]["usage"] == {
                "prompt_tokens": words,
                "completion_tokens": n,
                "total_tokens": words + n,
            }
        _, prefill_page, _ = _get(pools["prefill"]["metrics_url"])
        _, decode_page, _ = _get(pools["decode"]["metrics_url"])
        # the prefill pool answered one token a request; the decode pool the whole answers
        assert _values(prefill_page, "vllm:generation_tokens_total") == [3.0]
        assert _values(prefill_page, "vllm:prompt_tokens_total") == [3.0 * words]
        assert _values(decode_page, "vllm:generation_tokens_total") == [float(sum(answers))]
        assert _values(decode_page, "vllm:request_success_total") == [3.0]
        _, router_page, _ = _get(f"{base}/metrics")
        assert _values(router_page, "servewise:kv_transfers_total") == [3.0]
        transfer = kv_transfer_of(plan, timing_scenario(plan), catalog)
        # 80 layers x 2 x 8 KV heads x 128 x 2 B = 327,680 B a token, over 4 shards of 50 GB/s
        # at 0.86, plus 10 us: 300 tokens move in 0.5816 ms
        assert transfer.bytes_of(words) == words * 327_680
        assert transfer.seconds_of(words) == pytest.approx(10e-6 + words * 327_680 / 172e9)
        (seconds,) = _values(router_page, "servewise:kv_transfer_seconds_total")
        assert seconds == pytest.approx(3 * transfer.seconds_of(words), rel=1e-9)
        for pool in ("prefill", "decode"):
            assert _values(router_page, "vllm:request_success_total", pool=pool) == [3.0]
    finally:
        endpoint.stop()
    for pool in ("prefill", "decode"):  # the pools end with the router
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            _get(pools[pool]["url"] + "/health")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--plan", '{"model": "m"}'], "--plan: gpu: Field required"),
        (["--pool", "prefill", "--ttft-ms", "1"], "--pool serves one pool of a disaggregated"),
    ],
)
def test_a_bad_plan_is_one_line(argv: list[str], says: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks_runner.simulated", *argv],
        capture_output=True,
        text=True,
        timeout=PATIENT_S,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: {done.stderr.strip()[7:]}"]
    assert says in done.stderr


def _verify(
    manager: RunManager,
    prior: PerformanceModel,
    plan: Plan,
    rate: float,
    n: int,
    output: int,
    slowdown: float = 1.0,
) -> ManagedRun:
    request = VerificationRequest(
        plan=plan,
        input_len=LengthDistribution.fixed(INPUT),
        output_len=LengthDistribution.fixed(output),
        num_requests=n,
        request_rate=rate,
        slowdown=slowdown,
    )
    coefficients = pool_coefficients(prior, plan, request.scenario())
    request = VerificationRequest(**{**request.__dict__, "coefficients": coefficients})
    run = manager.start_verification(request)
    assert run.wait(PATIENT_S) and run.state == "completed", run.error
    return run


def test_a_verify_run_of_a_disaggregated_plan_meets_its_prediction(
    manager: RunManager, prior: PerformanceModel
) -> None:
    """The Verify page's path: one prefill and one decode engine at the 4 req/s the plan is
    sized for (the prefill pool ~46% busy), 30 requests. Mean and median TTFT and TPOT within
    10% of the plan's own prediction (:func:`planner.verification.predict_plan`).

    What made a short run drift from the steady state was its own arrivals: 40 seeded Poisson
    arrivals queue on the prefill engine as they happen to bunch (seed 1: TTFT +48% over the
    steady state; seeds 0 and 2: +7%). A run of stated requests is now predicted as those
    requests replayed through both pools' engines on a virtual clock
    (:func:`planner.perf.disaggregated.replay_pools`: the server's own schedule, the seeded
    arrivals and lengths the runner sends), as the aggregated simulator predicts a run.

    What is left is the host: three loopback HTTP hops and the event loops' lag of four
    processes, +4% to +7% of TTFT at load ~6 and +16% TTFT / +10% TPOT at load ~20. So the
    run is the plan's schedule stretched: the endpoint at ``slowdown`` 6 and a sixth of the
    rate (its seeded gaps and every step, request path and transfer six times as long: the
    same schedule), its times over 6 set against the prediction at 4 req/s, and the host's
    milliseconds weigh a sixth as much (stretched four times: TTFT +1.8%, TPOT 0.0% at load
    ~10, one failure in a busier full-directory run)."""
    stretch, rate, n = 6.0, 4.0, 30
    plan = pools_plan(1, 1, rate)
    run = _verify(manager, prior, plan, rate / stretch, n, OUTPUT, slowdown=stretch)
    assert run.run_dir is not None
    files = read_run_dir(run.run_dir)
    summary: dict[str, Any] = files.meta["summary"]
    assert summary["completed"] == n
    own = prediction_of_run(prior, files.meta)  # the Verify page's: the run's rate, unstretched
    assert own is not None and own.request_per_s == pytest.approx(rate / stretch)
    assert any("replayed through both pools" in note for note in own.notes)
    scenario = VerificationRequest(
        plan=plan,
        input_len=LengthDistribution.fixed(INPUT),
        output_len=LengthDistribution.fixed(OUTPUT),
        num_requests=n,
        request_rate=rate,
    ).scenario()
    predicted = predict_plan(prior, scenario, plan)
    measured = {k: summary[k] / stretch for k in ("mean_ttft_ms", "median_ttft_ms")}
    measured |= {k: summary[k] / stretch for k in ("mean_tpot_ms", "median_tpot_ms")}
    expected = {
        "mean_ttft_ms": predicted.ttft_ms_mean,
        "median_ttft_ms": predicted.ttft_ms_p50,
        "mean_tpot_ms": predicted.tpot_ms_mean,
        "median_tpot_ms": predicted.tpot_ms_p50,
    }
    errors = {k: round(measured[k] / v - 1, 4) for k, v in expected.items()}
    assert all(abs(e) <= 0.10 for e in errors.values()), errors
    # the server's counters: prompts counted on the prefill pool, answers on the decode pool
    deltas = summary["server_metrics"]["deltas"]
    assert deltas["vllm:prompt_tokens_total"] == n * INPUT
    assert deltas["vllm:generation_tokens_total"] == n * OUTPUT


def test_diagnose_names_the_prefill_pool_of_a_wrong_ratio_and_not_of_a_balanced_one(
    manager: RunManager, prior: PerformanceModel
) -> None:
    """16 GPUs at 12 req/s: 1 prefill engine beside 3 decode ones cannot prefill 12 prompts a
    second (its queue grows); the finding names it and moves a decode engine to prefill, which
    the what-if says carries the load. 2P:2D, the balanced pools, get no finding."""
    wrong = _verify(manager, prior, pools_plan(1, 3, 12.0, 64), 12.0, 60, 64)
    balanced = _verify(manager, prior, pools_plan(2, 2, 12.0, 64), 12.0, 60, 64)
    assert wrong.run_dir is not None and balanced.run_dir is not None
    diagnosis = diagnose_run(read_run_dir(wrong.run_dir), model=prior)
    # the other checks read each pool's own metrics: the queue is the prefill pool's (its
    # waiting prompts; the decode pool next to none), the batch the decode pool's, the KV cache
    # judged on each pool
    queue = diagnosis.finding("queueing")
    assert queue.status == "found" and queue.headline.startswith("prefill pool: "), queue.headline
    waited = {e.name: e.value for e in queue.evidence}
    assert (waited["prefill pool: requests waiting (mean)"] or 0) > 1
    assert (waited["decode pool: requests waiting (mean)"] or 0) < 0.5
    assert queue.fix is None or queue.fix.what_if is None
    batch = {e.name: e.value for e in diagnosis.finding("small_batch").evidence}
    assert "decode pool: mean running batch (vllm:num_requests_running)" in batch
    assert not any(name.startswith("prefill pool") for name in batch)
    kv = diagnosis.finding("kv_sizing")
    assert (
        kv.status == "clear" and "prefill pool: " in kv.headline and "decode pool: " in kv.headline
    )
    found = diagnosis.finding("pool_balance")
    assert found.status == "found", found.headline
    assert found.headline.startswith("prefill-bound TTFT")
    assert "1P:3D -> 2P:2D" in found.headline
    assert found.fix is not None and found.fix.what_if is not None
    changes = {c.setting: (c.before, c.after) for c in found.fix.changes}
    assert changes == {"prefill_replicas": (1, 2), "decode_replicas": (3, 2)}
    w = found.fix.what_if
    assert w.before.gpus == w.after.gpus == 16
    assert w.after.ttft_ms_p99 < w.before.ttft_ms_p99  # before: a queue without bound
    busy = re.match(r"after: prefill (\d+)% / decode (\d+)% busy", w.notes[1])
    assert busy is not None and 60 <= int(busy[1]) <= 75 and int(busy[2]) < 90  # 12 / (2 x 8.7)
    assert math.isfinite(w.after.ttft_ms_p99)
    assert "p99 TTFT unbounded -> " in what_if_text(w)
    # "Verify this fix": the plan it leads to has the new ratio, the same engines
    fixed = read_plan(fixed_plan(diagnosis.plan, found.fix))
    assert fixed is not None and fixed.prefill is not None and fixed.decode is not None
    assert (fixed.prefill.replicas, fixed.decode.replicas, fixed.replicas) == (2, 2, 2)
    assert (fixed.prefill.tp, fixed.decode.tp, fixed.kv_link) == (4, 4, "infiniband")
    balanced_diagnosis = diagnose_run(read_run_dir(balanced.run_dir), model=prior)
    clear = balanced_diagnosis.finding("pool_balance")
    assert clear.status == "clear", clear.headline
    assert balanced_diagnosis.finding("queueing").status == "clear"


def test_diagnose_names_a_decode_pool_whose_batch_is_at_its_cap(
    manager: RunManager, prior: PerformanceModel
) -> None:
    """Decode engines capped at 8 sequences: one of them, ~7.6 req/s of 64-token answers,
    beside three prefill engines at 12 req/s fills its batch and queues the rest; the finding
    is decode-bound TPOT and gives a prefill engine to the decode pool."""
    plan = pools_plan(3, 1, 12.0, 64, decode_seqs=8)
    run = _verify(manager, prior, plan, 12.0, 60, 64)
    assert run.run_dir is not None
    found = diagnose_run(read_run_dir(run.run_dir), model=prior).finding("pool_balance")
    assert found.status == "found", found.headline
    assert found.headline.startswith("decode-bound TPOT"), found.headline
    assert "3P:1D -> 2P:2D" in found.headline
    assert found.fix is not None and found.fix.what_if is not None
    assert "decode 100% busy" in found.fix.what_if.notes[0]
    busy = re.match(r"after: prefill (\d+)% / decode (\d+)% busy", found.fix.what_if.notes[1])
    assert busy is not None and int(busy[1]) < 90 and int(busy[2]) < 90
