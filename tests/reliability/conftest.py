"""Fixtures of the reliability tests: the fault server as a real process on 127.0.0.1, the
runner's command line as a real process, and a marker key that must never be written."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# The dashboard under AppTest, as the page tests run it (their fixtures, shared).
from tests.benchmarks_runner.conftest import SimServer as FaultServer
from tests.benchmarks_runner.conftest import start_server_process
from tests.pages.conftest import _navigation_mode, app  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
FAULT_SERVER = Path(__file__).resolve().parent / "fault_server.py"
#: The API key every secret test sends: it must appear in no artefact.
MARKER_KEY = "sk-servewise-MARKER-7f3a9c1e2b"
#: URL credentials the same tests put in the endpoint URL.
URL_USER, URL_PASSWORD = "marker-user", "MARKERpass-91d2"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def start_fault_server(fault: str, *flags: str) -> FaultServer:
    argv = [str(FAULT_SERVER), "--fault", fault, "--port", "0", *flags]
    return start_server_process(argv, "/v1/models", "fault server")


def runner_args(base_url: str, runs: Path, *extra: str, requests: int = 24) -> list[str]:
    """``benchmarks_runner run`` of ``requests`` small requests at concurrency 4 (a 1 s read
    timeout, so a stall shows fast) against the fault server's model."""
    return [
        "run", "--base-url", base_url, "--model", "fault-model", "--input-len", "8",
        "--output-len", "4", "--concurrency", "4", "--num-requests", str(requests),
        "--runs-dir", str(runs), "--no-progress", "--read-timeout-s", "1", *extra,
    ]  # fmt: skip


@pytest.fixture
def fault_server() -> Iterator[Callable[..., FaultServer]]:
    """Factory: ``fault_server("drop", "--every", "2")``; every server is killed at teardown."""
    started: list[FaultServer] = []

    def factory(fault: str, *flags: str) -> FaultServer:
        server = start_fault_server(fault, *flags)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.kill()


def run_cli(
    module: str, *args: str, env: dict[str, str] | None = None, timeout_s: float = 180
) -> subprocess.CompletedProcess[str]:
    """``python -m <module> <args>`` as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def start_cli(module: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env or clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    """A command's output a user reads: one ``error:`` line at most, never a traceback."""
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text, text[-3000:]
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        assert lines and lines[-1].startswith("error: "), proc.stderr[-2000:]
