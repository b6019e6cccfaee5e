"""Endpoint faults against the runner's command line: each fault ends with the status and exit
code it deserves, and every request row collected is stored (0 lost).

Each case runs ``python -m benchmarks_runner run`` against the fault server (a real process on
127.0.0.1), then ingests the run into a real DuckDB file and compares the rows: the ids the
runner wrote to requests.jsonl are exactly the ids the store holds.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from planner.run_files import read_run_dir
from planner.store import Store
from tests.patience import PATIENT_S
from tests.reliability.conftest import (
    FaultServer,
    no_traceback,
    run_cli,
    runner_args,
    start_cli,
)

EXIT_OK, EXIT_FAILED_RUN = 0, 4


def collected_vs_stored(runs: Path, tmp_path: Path) -> tuple[dict[str, object], set[str]]:
    """The one run's metadata and its request ids, after checking the store holds them all."""
    (run_dir,) = [p for p in runs.iterdir() if (p / "run.json").is_file()]
    run = read_run_dir(run_dir)
    collected = {r.request_id for r in run.requests}
    assert not run.problems, run.problems
    store = Store(tmp_path / "store.duckdb")
    try:
        store.ingest_runs(runs)
        stored = set(store.run_requests(run.run_id)["request_id"])
        stored_status = store.runs().set_index("run_id").loc[run.run_id, "status"]
    finally:
        store.close()
    assert stored == collected, f"lost in the store: {sorted(collected - stored)[:5]}"
    return run.meta | {"stored_status": stored_status}, collected


#: case: fault, its flags, expected exit code, status, and words the run's error must hold
CASES: dict[str, tuple[str, tuple[str, ...], int, str, str | None]] = {
    "no fault": ("none", (), EXIT_OK, "completed", None),
    "stall every request": ("stall", (), EXIT_FAILED_RUN, "failed", "no request succeeded"),
    "stall one in four": ("stall", ("--every", "4"), EXIT_OK, "completed", None),
    "drop every stream": ("drop", (), EXIT_FAILED_RUN, "failed", "no request succeeded"),
    "drop one in three": ("drop", ("--every", "3"), EXIT_OK, "completed", None),
    "5xx every request": ("5xx", (), EXIT_FAILED_RUN, "failed", "HTTP 503"),
    "5xx one in two": ("5xx", ("--every", "2"), EXIT_OK, "completed", None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_fault_ends_with_its_status_and_every_row_stored(
    case: str, fault_server: Callable[..., FaultServer], tmp_path: Path
) -> None:
    fault, flags, exit_code, status, words = CASES[case]
    server = fault_server(fault, *flags, "--stall-s", "5")
    requests = 8 if "stall" in case else 24
    runs = tmp_path / "runs"
    proc = run_cli("benchmarks_runner", *runner_args(server.base_url, runs, requests=requests))
    no_traceback(proc)
    assert proc.returncode == exit_code, proc.stdout + proc.stderr
    meta, rows = collected_vs_stored(runs, tmp_path)
    assert meta["status"] == status
    assert len(rows) == requests  # every request sent was recorded, success or not
    if words is not None:
        assert words in str(meta["error"]) and words in proc.stderr


def test_a_server_killed_mid_run_is_endpoint_lost_with_every_row_kept(
    fault_server: Callable[..., FaultServer], tmp_path: Path
) -> None:
    server = fault_server("die", "--die-after", "6", "--token-delay-s", "0.01")
    runs = tmp_path / "runs"
    proc = run_cli("benchmarks_runner", *runner_args(server.base_url, runs, requests=60))
    no_traceback(proc)
    assert proc.returncode == EXIT_FAILED_RUN, proc.stdout + proc.stderr
    meta, _ = collected_vs_stored(runs, tmp_path)
    run = read_run_dir(next(p for p in runs.iterdir() if p.is_dir()))
    ok = sum(r.ok for r in run.requests)  # the requests in flight when it died fail with it
    assert 1 <= ok <= 6 and len(run.requests) > ok
    assert meta["status"] == "failed"
    assert f"endpoint lost after {ok} successful requests" in str(meta["error"])
    assert "error: endpoint lost" in proc.stderr and "Status:" in proc.stdout
    assert len(run.requests) < 60  # nothing more is sent to a lost endpoint
    assert run.result is not None  # result.json is written for a lost endpoint too


def _wait_rows(runs: Path, n: int, timeout_s: float = PATIENT_S) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for run_dir in runs.glob("*/"):
            lines = (
                (run_dir / "requests.jsonl").read_bytes().count(b"\n")
                if (run_dir / "requests.jsonl").exists()
                else 0
            )
            if lines >= n:
                return run_dir
        time.sleep(0.05)
    raise AssertionError(f"no run reached {n} rows")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_a_runner_stopped_by_a_signal_loses_no_row(
    sig: signal.Signals, fault_server: Callable[..., FaultServer], tmp_path: Path
) -> None:
    server = fault_server("none", "--tokens", "20", "--token-delay-s", "0.02")
    runs = tmp_path / "runs"
    args = runner_args(server.base_url, runs, "--output-len", "20", requests=200)
    proc = start_cli("benchmarks_runner", *args)
    try:
        run_dir = _wait_rows(runs, 8)
        os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    meta, rows = collected_vs_stored(runs, tmp_path)
    assert len(rows) >= 8
    if sig == signal.SIGKILL:  # nothing runs in the runner: the rows on disk are all there is,
        assert meta["status"] == "running"  # and the store marks the run interrupted
        assert meta["stored_status"] == "interrupted"
        return
    assert "Traceback" not in err
    assert proc.returncode == (143 if sig == signal.SIGTERM else 130), err
    assert meta["status"] == "cancelled" and (run_dir / "result.json").is_file()
    cancelled = [r for r in read_run_dir(run_dir).requests if not r.ok]
    assert all(r.error == "cancelled before completion" for r in cancelled)


def test_the_verify_page_shows_a_lost_endpoint_as_the_command_line_does(
    app: Callable[..., AppTest], fault_server: Callable[..., FaultServer]
) -> None:
    server = fault_server("die", "--die-after", "4", "--token-delay-s", "0.01")
    link = {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "vf_source": "Custom",
        "vf_gpu": "H100-SXM",
        "vf_in": "64",
        "vf_out": "8",
        "vf_c": "2",
        "vf_n": "40",
        "vf_endpoint": "URL",
        "vf_url": server.base_url,
    }
    at = app("pages/verify.py", **link)
    at.text_input(key="vf_served").set_value("fault-model").run()
    at.button(key="vf_run").click().run()
    deadline = time.monotonic() + PATIENT_S
    while not any("**failed**" in m.value for m in at.markdown) and time.monotonic() < deadline:
        time.sleep(0.5)
        at.run()
    assert not at.exception and not at.error
    (line,) = [m.value for m in at.markdown if "**failed**" in m.value]
    assert "Stopped: endpoint lost after" in line and "successful requests" in line
    assert any("does not refit on it: the run did not complete" in i.value for i in at.info)
