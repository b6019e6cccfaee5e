"""The vLLM launcher without vLLM: it says how to install the extra and never imports vllm.

No GPU and no vLLM can run on this machine, so starting a real server is not exercised here;
the command it would start is checked against the documented flags in
tests/planner/test_vllm_command.py.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from benchmarks_runner.vllm_launcher import INSTALL_HINT, VllmServer, launch_readiness
from planner.engine import EngineConfig
from planner.vllm_command import VllmServeConfig


def test_without_vllm_the_launcher_explains_how_to_install_it() -> None:
    readiness = launch_readiness()
    assert not readiness.ok
    assert INSTALL_HINT in readiness.message
    assert "vllm" not in sys.modules


def test_server_argv_binds_loopback_and_carries_the_plan(tmp_path: Path) -> None:
    config = VllmServeConfig(
        model="Qwen/Qwen3-8B", tensor_parallel_size=2, engine=EngineConfig(max_num_seqs=64)
    )
    server = VllmServer(config, log_path=tmp_path / "vllm.log", port=8123)
    argv = server.argv
    assert argv[argv.index("serve") + 1] == "Qwen/Qwen3-8B"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == "8123"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--max-num-seqs") + 1] == "64"
    with pytest.raises(RuntimeError, match="not installed"):
        server.start()
    server.stop()  # nothing started: a no-op


def test_health_wait_reports_a_dead_process(tmp_path: Path) -> None:
    import subprocess

    server = VllmServer(VllmServeConfig(model="m"), log_path=tmp_path / "log", port=9)
    server.process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    server.process.wait(timeout=30)
    with pytest.raises(RuntimeError, match="exited with code 3"):
        asyncio.run(server.wait_healthy(timeout_s=10))
