"""Fixtures for the runner's tests: a simulated server as a real subprocess on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.patience import PATIENT_S

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: Files written by the released tools (vLLM 0.33, GuideLLM 0.8.1, AIPerf 0.13): see its README.
REAL = FIXTURES / "real-tools"


@dataclass
class SimServer:
    proc: subprocess.Popen[str]
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def env_with_root() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("HTTP_PROXY", None)
    env.pop("http_proxy", None)
    return env


def start_server_process(
    argv: list[str], ready_path: str, what: str, timeout_s: float = PATIENT_S
) -> SimServer:
    """Start a server process that prints ``LISTENING <port>``; wait until ``ready_path``
    answers 200 on 127.0.0.1 (the server is killed and RuntimeError raised otherwise)."""
    proc = subprocess.Popen(
        [sys.executable, *argv],
        cwd=ROOT,
        env=env_with_root(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until the server printed its port (or died)
    if not line.startswith("LISTENING"):
        proc.kill()
        err = proc.stderr.read() if proc.stderr else ""
        raise RuntimeError(f"{what} did not start: {line!r} {err[-2000:]}")
    server = SimServer(proc, int(line.split()[1]))
    for _ in range(200):  # bounded by count and time
        if time.monotonic() > deadline:
            break
        try:
            with urllib.request.urlopen(f"{server.base_url}{ready_path}", timeout=2) as r:
                if r.status == 200:
                    return server
        except OSError:
            time.sleep(0.05)
    server.kill()
    raise RuntimeError(f"{what} never answered {ready_path}")


def start_sim_server(*flags: str, timeout_s: float = PATIENT_S) -> SimServer:
    """Start the simulated server on 127.0.0.1 port 0, wait for LISTENING and /health."""
    argv = ["-m", "benchmarks_runner.simulated", "--host", "127.0.0.1", "--port", "0", *flags]
    return start_server_process(argv, "/health", "simulated server", timeout_s)


@pytest.fixture
def sim_server() -> Iterator[Callable[..., SimServer]]:
    """Factory: ``sim_server('--token-delay-ms', '10')``; every server is killed at teardown."""
    started: list[SimServer] = []

    def factory(*flags: str) -> SimServer:
        s = start_sim_server(*flags)
        started.append(s)
        return s

    yield factory
    for s in started:
        s.kill()


@pytest.fixture(scope="module")
def fast_server() -> Iterator[SimServer]:
    """A shared quick server (ttft 5 ms, 1 ms per token) for tests that need any endpoint."""
    s = start_sim_server("--ttft-ms", "5", "--token-delay-ms", "1")
    yield s
    s.kill()
