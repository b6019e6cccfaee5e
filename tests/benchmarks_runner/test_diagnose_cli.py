"""``python -m benchmarks_runner diagnose`` as a user runs it: real result files of vLLM bench
serve 0.33, GuideLLM 0.8.1 and AIPerf 0.13 (tests/benchmarks_runner/fixtures/real-tools, copied
from the files those tools wrote on 2026-12-01, see that folder's README), a Servewise run
directory, and a live endpoint (the simulated server as a subprocess on 127.0.0.1, with load
from another client while ``diagnose --base-url`` only watches its /metrics)."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks_runner import build_synthetic_specs, make_run_config, run_benchmark_sync
from benchmarks_runner.cli import main
from benchmarks_runner.diagnose import FIRST_SCRAPE_TIMEOUT_S, watch_endpoint
from planner.workload import LengthDistribution
from tests.patience import PATIENT_S

from .conftest import FIXTURES

REAL = FIXTURES / "real-tools"
pytestmark = pytest.mark.timeout(2 * PATIENT_S)  # a hang detector (tests/patience.py)


def diagnose_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The same command line through ``main()`` in this process (no interpreter start-up)."""
    code = main(["diagnose", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def findings(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["key"]: f for f in d["findings"]}


@pytest.mark.parametrize(
    ("path", "source"),
    [
        ("vllm-bench-0.33/vllm-sim-c8-r1.json", "vllm bench serve result"),
        ("vllm-bench-0.33/vllm-rate.json", "vllm bench serve result"),
        ("vllm-bench-0.33/vllm-plain.json", "vllm bench serve result"),
        ("aiperf-0.13/aiperf-warm", "AIPerf result"),
    ],
)
def test_real_tool_results_diagnose_and_say_what_they_cannot_judge(
    capsys: pytest.CaptureFixture[str], path: str, source: str
) -> None:
    code, out, err = diagnose_main(capsys, str(REAL / path), "--json", "--no-predict")
    assert code == 0, err
    d = json.loads(out)
    assert d["source"] == source
    by_key = findings(d)
    assert len(by_key) == 12  # the ten mistakes, speculative decoding and the P:D pools
    # no server metrics in these files: KV sizing cannot be judged, and says why
    kv = by_key["kv_sizing"]
    assert kv["status"] == "cannot_judge" and "server metrics" in kv["missing"][0]
    # no plan: the layout's links cannot be judged, and the report says how to give one
    links = by_key["parallelism_links"]
    assert links["status"] == "cannot_judge" and "--plan" in links["missing"][0]
    assert any("names no plan" in m for m in d["cannot_judge"])


def test_a_guidellm_file_of_two_benchmarks_is_two_diagnoses_without_chunk_times(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = str(REAL / "guidellm-0.8.1/guidellm-multi.json")
    code, out, err = diagnose_main(capsys, path, "--json", "--no-predict")
    assert code == 0, err
    diagnoses = json.loads(out)
    assert isinstance(diagnoses, list) and len(diagnoses) == 2
    for d in diagnoses:
        assert d["source"] == "GuideLLM result"
        stalls = findings(d)["prefill_stalls"]
        assert stalls["status"] == "cannot_judge"
        assert "GuideLLM keeps no per-chunk times" in stalls["missing"][0]
        # fixed 511/64-token prompts and answers: the benchmark says little about production
        assert findings(d)["workload_realism"]["status"] == "found"


@pytest.mark.parametrize("how", ["file", "flags"])
def test_a_plan_makes_the_what_ifs_and_the_text_report_names_the_fix(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, how: str
) -> None:
    deployment = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "L40S", "tp": 4}
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(deployment | {"instance": "g6e.12xlarge"}))
    named = (
        ["--plan", str(plan)]
        if how == "file"
        else ["--gpu", "L40S", "--tp", "4", "--instance", "g6e.12xlarge"]  # model: the file's
    )
    path = str(REAL / "vllm-bench-0.33/vllm-sim-c8-r1.json")
    code, text, err = diagnose_main(capsys, path, *named)
    assert code == 0, err
    assert "Triage" in text and "[x] Multi-GPU scaling poor?" in text
    assert "meta-llama/Llama-3.1-8B-Instruct on g6e.12xlarge TP4" in text
    assert "Parallelism that fights the interconnect" in text
    assert "vllm serve ... --tensor-parallel-size" in text
    assert "predicted: output tok/s" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "needs a run directory or result file, or --base-url"),
        (["README.md"], "not a readable JSON result"),
        (["does-not-exist.json"], "does not exist"),
        (["--base-url", "http://127.0.0.1:9", "--duration", "1"], "error:"),
    ],
)
def test_bad_input_is_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, _, err = diagnose_main(capsys, *args, "--no-predict")
    assert code in (2, 3)
    lines = err.strip().splitlines()
    assert lines[-1].startswith("error:") and message in lines[-1]
    assert "Traceback" not in err


def test_a_live_endpoint_is_diagnosed_from_its_metrics_while_others_load_it(
    capsys: pytest.CaptureFixture[str], sim_server: Any, tmp_path: Path
) -> None:
    # at most 4 requests run at once; a client with 16 in flight keeps 12 waiting (80 requests
    # at ~0.34 s each, 4 at a time: ~7 s of load, longer than the 3 s watched)
    server = sim_server("--ttft-ms", "20", "--token-delay-ms", "5", "--max-concurrency", "4")
    config = make_run_config(base_url=server.base_url, model="sim-model", concurrency=16)
    specs = build_synthetic_specs(
        80, LengthDistribution.fixed(64), LengthDistribution.fixed(64), seed=1
    )
    load = threading.Thread(target=run_benchmark_sync, args=(config, specs, tmp_path))
    load.start()
    try:
        code, out, err = diagnose_main(
            capsys, "--base-url", server.base_url, "--duration", "3", "--interval-s", "0.25",
            "--json", "--no-predict",
        )  # fmt: skip
    finally:
        load.join(timeout=120)
    assert code == 0, err
    d = json.loads(out)
    assert d["source"] == "live endpoint" and d["duration_s"] >= 3
    by_key = findings(d)
    assert by_key["queueing"]["status"] == "found", by_key["queueing"]["headline"]
    waiting = {e["name"]: e["value"] for e in by_key["queueing"]["evidence"]}
    assert waiting["requests waiting (mean)"] > 5
    assert by_key["workload_realism"]["status"] == "clear"  # live traffic is the workload
    assert by_key["prefill_stalls"]["status"] == "cannot_judge"
    assert d["summary"]["request_throughput"] > 0


class _SlowMetrics(http.server.BaseHTTPRequestHandler):
    """/metrics that takes 1.5 s to render its first page (a server busy with the traffic being
    diagnosed), then answers at once."""

    first = True

    def do_GET(self) -> None:
        if _SlowMetrics.first:
            _SlowMetrics.first = False
            time.sleep(1.5)
        body = b"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 3\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_first_scrape_slower_than_the_interval_is_waited_for() -> None:
    # the first scrape decides whether the endpoint can be watched at all: a later scrape that
    # slow is skipped, the first is waited for (up to FIRST_SCRAPE_TIMEOUT_S)
    assert FIRST_SCRAPE_TIMEOUT_S > 1.5 > 0.25
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowMetrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        samples, watched_s = asyncio.run(watch_endpoint(url, 0.5, interval_s=0.25))
    finally:
        server.shutdown()
        server.server_close()
    assert watched_s >= 0.5
    assert {s.name for s in samples} == {"vllm:num_requests_waiting"}
