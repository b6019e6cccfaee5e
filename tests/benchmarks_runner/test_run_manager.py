"""RunManager: background runs with their own endpoints, two at once, cancel, failures."""

from __future__ import annotations

import gc
import json
import threading
import time
from pathlib import Path

import pytest

from benchmarks_runner import build_synthetic_specs, make_run_config
from benchmarks_runner.endpoints import Faults, SimulatedEndpoint
from benchmarks_runner.errors import ConfigError, EndpointStartError
from benchmarks_runner.run_manager import ManagedRun, RunManager, VerificationRequest
from benchmarks_runner.workload import RequestSpec
from planner.catalog import Catalog
from planner.perf.model import PerformanceModel
from planner.perf.scenario import Scenario
from planner.plan import Plan
from planner.run_files import read_run_dir
from planner.store import Store
from planner.workload import LengthDistribution
from tests.patience import PATIENT_S
from tests.run_view import read_run

EIGHT = LengthDistribution.fixed(8)
FAST = ["--ttft-ms", "5", "--token-delay-ms", "2"]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
PLAN = Plan(model=MODEL, gpu="H100-SXM")


def specs(n: int, out: int = 8) -> list[RequestSpec]:
    return build_synthetic_specs(n, LengthDistribution.fixed(64), LengthDistribution.fixed(out))


def config(model: str = "sim-model", concurrency: int = 4):  # type: ignore[no-untyped-def]
    return make_run_config(base_url="http://127.0.0.1:1", model=model, concurrency=concurrency)


@pytest.fixture
def manager(tmp_path: Path):  # type: ignore[no-untyped-def]
    manager = RunManager(tmp_path / "runs")
    yield manager
    manager.shutdown(timeout_s=20)


def wait_all(manager: RunManager, timeout_s: float = PATIENT_S) -> None:
    for run in manager.runs():
        assert run.wait(timeout_s), f"run {run.id} still {run.state}: {run.message}"


def test_two_runs_at_once_against_their_own_endpoints(manager: RunManager) -> None:
    thresholds = gc.get_threshold()
    first_endpoint = SimulatedEndpoint(FAST)
    second_endpoint = SimulatedEndpoint([*FAST, "--model", "other-model"])
    first = manager.start(config(), specs(24), endpoint=first_endpoint, label="first")
    second = manager.start(
        config("other-model", 2), specs(16), endpoint=second_endpoint, plan=PLAN, label="second"
    )
    assert {r.id for r in manager.active()} == {first.id, second.id}
    wait_all(manager)
    assert manager.active() == []
    assert [r.state for r in (first, second)] == ["completed", "completed"]
    assert first.run_dir != second.run_dir
    assert first.base_url != second.base_url
    for run, n, model in ((first, 24, "sim-model"), (second, 16, "other-model")):
        stored = read_run(run.run_dir)  # type: ignore[arg-type]
        assert stored["run"]["status"] == "completed" and stored["run"]["model"] == model
        assert stored["run"]["simulated"] is True
        assert run.progress is not None and run.progress.requests_done == n
    assert read_run(second.run_dir)["run"]["plan"]["gpu"] == "H100-SXM"  # type: ignore[arg-type]
    # each endpoint was stopped when its run ended; the collector is as it was
    for endpoint in (first_endpoint, second_endpoint):
        assert endpoint.process is not None and endpoint.process.poll() is not None
    assert gc.get_threshold() == thresholds
    assert manager.find(first.run_id or "") is first


def test_progress_and_run_directory_while_running(manager: RunManager) -> None:
    seen: list[int] = []
    run = manager.start(
        config(concurrency=2),
        specs(12, out=40),
        endpoint=SimulatedEndpoint(["--ttft-ms", "5", "--token-delay-ms", "5"]),
    )
    deadline = time.monotonic() + PATIENT_S
    while run.active and time.monotonic() < deadline:
        if run.progress is not None:
            seen.append(run.progress.requests_done)
        time.sleep(0.1)
    assert run.wait(PATIENT_S) and run.state == "completed"
    assert len(set(seen)) >= 2, seen  # progress moved while the run was going
    assert run.run_dir is not None and (run.run_dir / "run.json").is_file()


def test_cancel_stops_the_run_and_its_endpoint(manager: RunManager) -> None:
    finished: list[ManagedRun] = []
    endpoint = SimulatedEndpoint(["--ttft-ms", "5", "--token-delay-ms", "50"])
    run = manager.start(config(), specs(400, out=100), endpoint=endpoint, on_finish=finished.append)
    deadline = time.monotonic() + PATIENT_S
    while (
        run.progress is None or run.progress.requests_total == 0
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert manager.cancel(run.id)
    assert run.wait(30)
    assert run.state == "cancelled" and finished == [run]
    assert read_run(run.run_dir)["run"]["status"] == "cancelled"  # type: ignore[arg-type]
    assert endpoint.process is not None and endpoint.process.poll() is not None
    assert not manager.cancel(run.id)  # nothing left to cancel


class BlockingEndpoint:
    """An endpoint that never comes up until cancelled."""

    description = "blocking endpoint"

    def __init__(self) -> None:
        self.stopped = False

    def start(self, cancel: threading.Event) -> str:
        cancel.wait(30)
        return ""

    def stop(self) -> None:
        self.stopped = True


def test_cancel_while_the_endpoint_starts(manager: RunManager) -> None:
    endpoint = BlockingEndpoint()
    run = manager.start(config(), specs(4), endpoint=endpoint)
    assert run.state == "starting"
    manager.cancel(run.id)
    assert run.wait(10)
    assert run.state == "cancelled" and endpoint.stopped and run.run_dir is None


def test_an_endpoint_that_does_not_start_fails_the_run(manager: RunManager) -> None:
    endpoint = SimulatedEndpoint(["--no-such-flag"])
    run = manager.start(config(), specs(4), endpoint=endpoint)
    assert run.wait(30)
    assert run.state == "failed"
    assert (
        run.error is not None and "did not start" in run.error and "exited with code" in run.error
    )


def test_an_unreachable_url_fails_with_its_run_files(manager: RunManager) -> None:
    bad = make_run_config(base_url="http://127.0.0.1:9", model="m", concurrency=1)
    run = manager.start(bad, specs(2))
    assert run.wait(30)
    assert run.state == "failed" and run.error
    assert run.run_dir is not None  # found by its tagged label
    assert read_run(run.run_dir)["run"]["status"] == "failed"


def test_verification_request_builds_config_endpoint_and_plan(tmp_path: Path) -> None:
    request = VerificationRequest(
        plan=PLAN,
        input_len=LengthDistribution.fixed(256),
        output_len=LengthDistribution.fixed(32),
        num_requests=20,
        concurrency=4,
        slowdown=2.0,
        faults=Faults(error_rate=0.1),
        coefficients=[1.0, 2.0],
    )
    cfg = request.run_config()
    assert (cfg.load, cfg.concurrency, cfg.model) == ("concurrency", 4, MODEL)
    assert cfg.warmup == 0  # the simulated endpoint compiles nothing to warm up
    assert [s.input_len for s in request.specs()] == [256] * 20
    endpoint = request.make_endpoint()
    assert isinstance(endpoint, SimulatedEndpoint)
    argv = endpoint.argv
    for flag, value in (("--slowdown", "2"), ("--error-rate", "0.1")):
        assert argv[argv.index(flag) + 1] == value
    # the server serves the very scenario the run is predicted by
    served = Scenario.model_validate_json(argv[argv.index("--scenario") + 1])
    assert served == request.scenario() and served.gpu == "H100-SXM"
    assert json.loads(argv[argv.index("--coefficients") + 1]) == [1.0, 2.0]
    assert request.stored_plan().model_dump(mode="json")["verification"] == {
        "endpoint": "simulated",
        "slowdown": 2.0,
        "faults": {"error_rate": 0.1},
    }
    rate = VerificationRequest(
        plan=PLAN, input_len=EIGHT, output_len=EIGHT, num_requests=4, request_rate=2.5,
        endpoint="url", base_url="http://127.0.0.1:8000", served_model="served",
    )  # fmt: skip
    cfg = rate.run_config()
    assert (cfg.load, cfg.request_rate, cfg.concurrency, cfg.model) == ("rate", 2.5, None, "served")
    assert cfg.warmup == 4  # a wave of eight at a rate, at most the run's own four requests
    assert rate.make_endpoint() is None
    with pytest.raises(EndpointStartError, match="URL"):
        VerificationRequest(plan=PLAN, input_len=EIGHT, output_len=EIGHT, num_requests=1,
                            concurrency=1, endpoint="url").make_endpoint()  # fmt: skip
    with pytest.raises(ConfigError, match="concurrency"):
        VerificationRequest(
            plan=PLAN,
            input_len=LengthDistribution.fixed(8),
            output_len=LengthDistribution.fixed(8),
            num_requests=1,
        ).run_config()


def test_a_verification_run_against_a_url_warms_the_server_with_one_unmeasured_wave(
    manager: RunManager,
) -> None:
    """A real server (here the simulated one, reached by its URL as any endpoint is) gets one
    wave of the run's concurrency first: stored with ``warmup`` true, apart from the measured
    requests' prompts, and left out of the summary, so a kernel the server compiles for its
    first batch of several requests is not measured as TTFT."""
    server = SimulatedEndpoint([*FAST, "--model", "served"])
    url = server.start(threading.Event())
    try:
        request = VerificationRequest(
            plan=PLAN, input_len=LengthDistribution.fixed(64), output_len=EIGHT, num_requests=9,
            concurrency=3, endpoint="url", base_url=url, served_model="served",
        )  # fmt: skip
        assert request.run_config().warmup == 3
        run = manager.start_verification(request)
        assert run.wait(PATIENT_S) and run.state == "completed", run.error
    finally:
        server.stop()
    files = read_run_dir(run.run_dir)  # type: ignore[arg-type]
    warm = [r for r in files.requests if r.warmup]
    measured = [r for r in files.requests if not r.warmup]
    assert len(warm) == 3 and len(measured) == 9 and all(r.ok for r in files.requests)
    summary = run.result.summary if run.result else None
    assert summary is not None
    assert (summary["warmup_requests"], summary["completed"]) == (3, 9)


def test_a_verification_run_becomes_a_simulated_user_result(
    manager: RunManager, catalog: Catalog, tmp_path: Path
) -> None:
    prior = PerformanceModel(catalog).coefficients_for("vllm", "H100-SXM")
    request = VerificationRequest(
        plan=PLAN,
        input_len=LengthDistribution.fixed(128),
        output_len=LengthDistribution.fixed(16),
        num_requests=12,
        concurrency=4,
        coefficients=[float(c) for c in prior],
    )
    run = manager.start_verification(request)
    assert run.wait(60) and run.state == "completed", run.error
    store = Store(tmp_path / "db.duckdb")
    try:
        assert run.run_id in store.ingest_runs(manager.runs_dir)
        (result,) = [r for r in store.measured_results() if r.run_id == run.run_id]
        assert result.origin == "user" and result.simulated
        assert (result.gpu, result.tp, result.input_len, result.output_len) == (
            "H100-SXM",
            1,
            128,
            16,
        )
        assert "simulated" in result.source
    finally:
        store.close()


def test_fault_injection_fails_some_requests_and_keeps_the_rest(manager: RunManager) -> None:
    from planner.verification import failure_counts

    faults = Faults(error_rate=0.3, error_status=503, drop_rate=0.15, malformed_rate=0.1)
    assert faults.recorded() == {
        "error_rate": 0.3,
        "drop_rate": 0.15,
        "malformed_rate": 0.1,
        "error_status": 503,
    }
    run = manager.start(config(), specs(40), endpoint=SimulatedEndpoint([*FAST, *faults.args()]))
    assert run.wait(60) and run.state == "completed", run.error
    summary = run.result.summary if run.result else None
    assert summary is not None and summary["completed"] + summary["failed"] == 40
    assert 0 < summary["failed"] < 40 and summary["output_throughput"] > 0
    errors = dict(failure_counts(read_run_dir(run.run_dir).requests))  # type: ignore[arg-type]
    assert any(e.startswith("HTTP 503") for e in errors)
    assert sum(errors.values()) == summary["failed"]


def test_launching_vllm_where_it_is_missing_says_how_to_install(
    manager: RunManager, tmp_path: Path
) -> None:
    from benchmarks_runner.vllm_launcher import launch_readiness

    if launch_readiness().ok:
        pytest.skip("vLLM and a GPU are present here")
    request = VerificationRequest(
        plan=PLAN, input_len=EIGHT, output_len=EIGHT, num_requests=1, concurrency=1,
        endpoint="vllm", vllm_config=PLAN.vllm_config(), log_dir=tmp_path,
    )  # fmt: skip
    run = manager.start_verification(request)
    assert run.wait(PATIENT_S) and run.state == "failed"
    assert run.error is not None and "pip install" in run.error


def test_a_verification_run_sends_exactly_the_predicted_workload(
    manager: RunManager, catalog: Catalog
) -> None:
    """Lognormal prompts (std 128 tokens, the planner's meaning of a spread) and normal answers:
    the requests the run stored are, one for one, those the simulator predicted for the run's
    scenario read back from run.json."""
    from planner.perf.deployment import resolve_deployment
    from planner.perf.simulator import simulate
    from planner.verification import custom_plan, scenario_of_run

    plan = custom_plan(MODEL, catalog.gpu("H100-SXM"))
    request = VerificationRequest(
        plan=plan,
        input_len=LengthDistribution.lognormal(256, 128),
        output_len=LengthDistribution.normal(12, 4),
        num_requests=24,
        concurrency=4,
        seed=7,
        coefficients=PerformanceModel(catalog).coefficients_for("vllm", "H100-SXM"),
    )
    run = manager.start_verification(request)
    assert run.wait(90) and run.state == "completed", run.error
    files = read_run_dir(run.run_dir)  # type: ignore[arg-type]
    sent = sorted((r.input_len_target, r.output_len_target) for r in files.requests)
    scenario = scenario_of_run(files.meta)
    assert scenario == request.scenario()
    assert scenario is not None and scenario.input_dist == request.input_len
    trace = simulate(resolve_deployment(scenario, catalog))
    predicted = sorted(
        (int(i), int(o))
        for i, o, n in zip(trace.input_len, trace.output_len, trace.count, strict=True)
        for _ in range(int(n))
    )
    assert sent == predicted
    inputs = [i for i, _ in sent]
    assert len(set(inputs)) > 12 and 150 < sum(inputs) / len(inputs) < 400  # spread in tokens
