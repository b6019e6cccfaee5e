"""The command line as a user runs it: real subprocesses, real HTTP on 127.0.0.1, signals."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks_runner.metrics import VLLM_RESULT_KEYS
from planner.plan import read_plan
from tests.patience import PATIENT_S
from tests.run_view import read_run

from .conftest import REAL, ROOT, env_with_root

pytestmark = pytest.mark.timeout(2 * PATIENT_S)  # a hang detector (tests/patience.py)


def _cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks_runner", *args],
        cwd=ROOT,
        env=env_with_root(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks_runner", *args],
        cwd=ROOT,
        env=env_with_root(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _wait_rows(runs_dir: Path, n: int, timeout_s: float = PATIENT_S) -> Path:
    deadline = time.monotonic() + timeout_s
    for _ in range(3000):  # bounded by count and time
        for run_dir in runs_dir.glob("*"):
            req = run_dir / "requests.jsonl"
            if req.exists() and req.read_text().count("\n") >= n:
                return run_dir
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    raise AssertionError(f"fewer than {n} rows after {timeout_s} s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_cli_run_writes_result_json_with_vllm_keys(fast_server: Any, tmp_path: Path) -> None:
    out = tmp_path / "out" / "result.json"
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"gpu": "L40S", "tp": 4}))
    proc = _run_cli(
        "run",
        "--base-url",
        fast_server.base_url,
        "--model",
        "sim-model",
        "--input-len",
        "32",
        "--output-len",
        "8",
        "--request-rate",
        "50",
        "--num-requests",
        "20",
        "--result-json",
        str(out),
        "--runs-dir",
        str(tmp_path / "runs"),
        "--warmup",
        "2",
        "--goodput",
        "ttft:500",
        "--plan",
        str(plan),
        "--header",
        "X-Team=abc",
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert set(VLLM_RESULT_KEYS) <= set(result)
    assert result["completed"] == 20 and result["request_rate"] == 50.0
    assert result["request_goodput"] is not None
    assert "Serving Benchmark Result" in proc.stdout
    assert "20/20" in proc.stderr  # progress bar on stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    meta = read_run(run_dir)["run"]
    plan = read_plan(meta["plan"])  # the typed plan, the run's model where the file named none
    assert plan is not None and (plan.gpu, plan.tp, plan.model) == ("L40S", 4, "sim-model")
    assert meta["config"]["load"] == "rate" and meta["config"]["request_rate"] == 50.0
    assert meta["config"]["input_len"] == 32 and meta["config"]["output_len"] == 8
    assert meta["config"]["headers"] == {"X-Team": "<redacted>"}


def test_sigint_cancels_cleanly_and_keeps_rows(sim_server: Any, tmp_path: Path) -> None:
    server = sim_server("--ttft-ms", "5", "--token-delay-ms", "20")
    runs = tmp_path / "runs"
    proc = _cli(
        "run",
        "--base-url",
        server.base_url,
        "--model",
        "sim-model",
        "--input-len",
        "16",
        "--output-len",
        "10",
        "--concurrency",
        "4",
        "--num-requests",
        "500",
        "--runs-dir",
        str(runs),
        "--result-json",
        str(tmp_path / "r.json"),
    )
    try:
        run_dir = _wait_rows(runs, 8)
        before = (run_dir / "requests.jsonl").read_text().splitlines()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=PATIENT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("error: cancelled")
    data = read_run(run_dir)
    assert data["run"]["status"] == "cancelled" and data["run"]["summary"] is not None
    assert data["result"] is not None and (tmp_path / "r.json").exists()
    rows = data["requests"]
    assert [json.loads(x) for x in before] == rows[: len(before)]  # nothing lost or rewritten
    assert len(rows) < 500
    cancelled = [r for r in rows if r["status"] == "error"]
    assert all(r["error"] == "cancelled before completion" for r in cancelled)
    assert len(cancelled) <= 4


def test_server_killed_mid_run_keeps_rows(sim_server: Any, tmp_path: Path) -> None:
    server = sim_server("--ttft-ms", "5", "--token-delay-ms", "10")
    runs = tmp_path / "runs"
    proc = _cli(
        "run",
        "--base-url",
        server.base_url,
        "--model",
        "sim-model",
        "--input-len",
        "16",
        "--output-len",
        "10",
        "--concurrency",
        "4",
        "--num-requests",
        "60",
        "--runs-dir",
        str(runs),
        "--no-progress",
    )
    try:
        run_dir = _wait_rows(runs, 6)
        server.kill()
        _, err = proc.communicate(timeout=PATIENT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 4, err  # a lost endpoint is a failed run, not a completed one
    assert "error: endpoint lost after" in err
    data = read_run(run_dir)
    rows = data["requests"]
    assert data["run"]["status"] == "failed" and "endpoint lost" in data["run"]["error"]
    ok = [r for r in rows if r["status"] == "ok"]
    failed = [r for r in rows if r["status"] == "error"]
    assert len(ok) >= 6 and failed and all(r["error"] for r in failed)
    assert len(rows) <= 60 and data["result"] is not None  # no request is sent once it is lost
    assert all(r["output_tokens"] == 10 and len(r["chunk_times_s"]) == 10 for r in ok)


def test_one_line_error_when_endpoint_unreachable(tmp_path: Path) -> None:
    proc = _run_cli(
        "run",
        "--base-url",
        f"http://127.0.0.1:{_free_port()}",
        "--model",
        "m",
        "--input-len",
        "8",
        "--output-len",
        "8",
        "--concurrency",
        "1",
        "--num-requests",
        "1",
        "--runs-dir",
        str(tmp_path),
        "--connect-timeout-s",
        "3",
    )
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach http://127.0.0.1:")
    assert "Traceback" not in proc.stderr


def test_one_line_error_when_model_unknown(fast_server: Any, tmp_path: Path) -> None:
    proc = _run_cli(
        "run",
        "--base-url",
        fast_server.base_url,
        "--model",
        "llama-99b",
        "--input-len",
        "8",
        "--output-len",
        "8",
        "--concurrency",
        "1",
        "--num-requests",
        "1",
        "--runs-dir",
        str(tmp_path),
    )
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        f"error: model 'llama-99b' is not served by {fast_server.base_url}; "
        "/v1/models lists ['sim-model']"
    ]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--concurrency", "0"], "--concurrency=0"),
        (["--request-rate", "-3"], "--request-rate=-3.0"),
        (["--concurrency", "2", "--max-error-rate", "1.5"], "--max-error-rate=1.5"),
    ],
)
def test_one_line_error_on_bad_config(tmp_path: Path, args: list[str], needle: str) -> None:
    proc = _run_cli(
        "run",
        "--base-url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--input-len",
        "8",
        "--output-len",
        "8",
        "--num-requests",
        "1",
        "--runs-dir",
        str(tmp_path),
        *args,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


def test_cli_import_each_format(tmp_path: Path) -> None:
    for fmt, path in (
        ("vllm", REAL / "vllm-bench-0.33" / "vllm-sim-c8-r1.json"),
        ("guidellm", REAL / "guidellm-0.8.1" / "guidellm-sim-c8-r1.json"),
        ("aiperf", REAL / "aiperf-0.13" / "aiperf-sim-c8-r1"),
    ):
        proc = _run_cli("import", "--format", fmt, str(path), "--runs-dir", str(tmp_path / fmt))
        assert proc.returncode == 0, proc.stderr
        (line,) = proc.stdout.strip().splitlines()
        assert read_run(Path(line))["run"]["status"] == "completed"
        assert "not a calibration point: the run names no plan" in proc.stderr
    bad = _run_cli(
        "import", "--format", "guidellm", str(REAL / "vllm-bench-0.33" / "vllm-sim-c8-r1.json"),
        "--runs-dir", str(tmp_path / "bad"),
    )  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")
    assert "Traceback" not in bad.stderr and not (tmp_path / "bad").exists()


def test_an_import_with_a_plan_is_a_calibration_point(tmp_path: Path) -> None:
    """The AIPerf profile of the 8B on the simulated H100 server, imported with the plan it
    measured (flags, a plan file, a saved recommendation): a user result once ingested."""
    from planner.store import Store

    source = str(REAL / "aiperf-0.13" / "aiperf-sim-c8-r1")
    flags = _run_cli("import", "--format", "aiperf", source, "--runs-dir", str(tmp_path / "a"),
                     "--gpu", "H100-SXM", "--tp", "1")  # fmt: skip
    assert flags.returncode == 0, flags.stderr
    assert ": a calibration point" in flags.stderr
    (run_dir,) = [Path(line) for line in flags.stdout.split()]
    plan = read_plan(read_run(run_dir)["run"]["plan"])
    assert plan is not None and (plan.model, plan.gpu, plan.tp, plan.label) == (
        "meta-llama/Llama-3.1-8B-Instruct", "H100-SXM", 1, "H100-SXM TP1 PP1 bf16")  # fmt: skip
    assert plan.engine.max_num_seqs == 1024  # vllm serve's own on an H100, stated
    store = Store(None)
    store.ingest_runs(tmp_path / "a")
    (result,) = [r for r in store.measured_results() if r.origin == "user"]
    assert (result.gpu, result.concurrency, result.input_len, result.output_len) == (
        "H100-SXM", 8, 512, 128)  # fmt: skip
    assert result.output_tok_per_s == pytest.approx(854.57, abs=0.01)  # AIPerf's own figure
    store.close()

    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"model": "meta-llama/Llama-3.1-8B-Instruct",
                                     "gpu": "H100-SXM", "tp": 1}))  # fmt: skip
    by_file = _run_cli("import", "--format", "guidellm",
                       str(REAL / "guidellm-0.8.1" / "guidellm-multi.json"),
                       "--runs-dir", str(tmp_path / "g"), "--plan", str(plan_file))  # fmt: skip
    assert by_file.returncode == 0, by_file.stderr
    assert by_file.stderr.count(": a calibration point") == 2  # one run per benchmark

    saved = tmp_path / "recommend.json"
    saved.write_text(json.dumps({"ranked": [{
        "rank": 1, "gpu": "H100-SXM", "tp": 1, "pp": 1, "precision": "bf16",
        "kv_cache_dtype": "auto", "instance": "p5.48xlarge",
        "vllm_command": "vllm serve meta-llama/Llama-3.1-8B-Instruct "
        "--tensor-parallel-size 1 --max-num-seqs 64 --max-num-batched-tokens 4096"}]}))  # fmt: skip
    by_rank = _run_cli("import", "--format", "vllm",
                       str(REAL / "vllm-bench-0.33" / "vllm-sim-c8-r1.json"),
                       "--runs-dir", str(tmp_path / "r"), "--plan", f"{saved}#1")  # fmt: skip
    assert by_rank.returncode == 0, by_rank.stderr
    (ranked_dir,) = [Path(line) for line in by_rank.stdout.split()]
    ranked_plan = read_plan(read_run(ranked_dir)["run"]["plan"])
    assert ranked_plan is not None
    assert (ranked_plan.instance, ranked_plan.engine.max_num_seqs) == ("p5.48xlarge", 64)
    assert ranked_plan.engine.max_num_batched_tokens == 4096


def test_a_plan_that_does_not_resolve_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    source = str(REAL / "vllm-bench-0.33" / "vllm-sim-c8-r1.json")
    runs = tmp_path / "runs"
    for extra, says in (
        (["--gpu", "H900"], "H900"),
        (["--gpu", "H100-SXM", "--tp", "3"], "tp"),
        (["--plan", str(tmp_path / "missing.json")], "missing.json"),
        (["--plan", f"{tmp_path / 'missing.json'}#2"], "missing.json"),
    ):
        proc = _run_cli("import", "--format", "vllm", source, "--runs-dir", str(runs), *extra)
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and not runs.exists()


def test_runs_land_where_the_dashboard_reads_them_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --runs-dir the command line writes to the store's runs directory, so a run
    started from a terminal shows up on the dashboard's Benchmarks page."""
    user_dir = tmp_path / "user"
    monkeypatch.setenv("SERVEWISE_USER_DATA_DIR", str(user_dir))
    proc = _run_cli(
        "import", "--format", "vllm", str(REAL / "vllm-bench-0.33" / "vllm-sim-c8-r1.json")
    )
    assert proc.returncode == 0, proc.stderr
    from planner.store import Store

    store = Store(None)
    assert len(store.ingest_runs(user_dir / "runs")) == 1


def test_a_lognormal_spread_is_a_standard_deviation_in_tokens() -> None:
    """As the sidebar means it: --input-spread 512 of a lognormal of mean 1,024 draws lengths
    with a standard deviation near 512 tokens (not sigma = 512 of the log, which would clip
    almost every prompt to one token), and run.json keeps the distribution itself."""
    import numpy as np

    from benchmarks_runner.cli import build_parser, config_from_args, specs_from_args

    args = build_parser().parse_args(
        ["run", "--base-url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "4",
         "--num-requests", "4000", "--input-len", "1024", "--input-dist", "lognormal",
         "--input-spread", "512", "--output-len", "64", "--output-dist", "uniform",
         "--output-spread", "16"]
    )  # fmt: skip
    config = config_from_args(args)
    specs = specs_from_args(args, config)
    inputs = np.array([s.input_len for s in specs])
    outputs = np.array([s.output_len for s in specs])
    assert inputs.mean() == pytest.approx(1024, rel=0.05)
    assert inputs.std() == pytest.approx(512, rel=0.1)
    assert outputs.min() >= 48 and outputs.max() <= 80
    assert config.workload["input_len"] == {
        "kind": "lognormal", "mean": 1024.0, "std": 512.0, "min_tokens": 1
    }  # fmt: skip
    bad = _run_cli(
        "run", "--base-url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "1",
        "--num-requests", "1", "--input-len", "8", "--output-len", "8", "--input-dist",
        "normal", "--input-spread", "-3",
    )  # fmt: skip
    assert bad.returncode == 2 and "--input-spread" in bad.stderr and "-3" in bad.stderr
    assert "Traceback" not in bad.stderr
