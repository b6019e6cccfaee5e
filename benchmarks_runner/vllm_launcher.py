"""Start a real vLLM server for a recommended plan, wait until it is healthy, stop it.

vLLM is an optional extra (multi-GB CUDA wheels): nothing here imports it. Whether it can run
is decided by looking for the ``vllm`` package and for NVIDIA GPUs; when either is missing,
:func:`launch_readiness` says what to install, and the dashboard shows that sentence.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from planner.vllm_command import VllmServeConfig, vllm_serve_args

INSTALL_HINT = (
    "pip install -r requirements-vllm.txt  (the optional vLLM extra, from the repository root)"
)


@dataclass(frozen=True)
class Readiness:
    ok: bool
    message: str


def launch_readiness() -> Readiness:
    """Can this machine start vLLM? Checks the package and the GPUs, imports nothing."""
    if importlib.util.find_spec("vllm") is None:
        return Readiness(
            False, f"vLLM is not installed here. Install the optional extra: {INSTALL_HINT}"
        )
    if shutil.which("nvidia-smi") is None and not Path("/dev/nvidia0").exists():
        return Readiness(
            False, "No NVIDIA GPU is visible on this machine (no nvidia-smi, no /dev/nvidia0)."
        )
    return Readiness(True, "vLLM and a GPU are available.")


class VllmServer:
    """A ``vllm serve`` child process on 127.0.0.1, logging to a file in the run directory."""

    def __init__(self, config: VllmServeConfig, *, log_path: Path, port: int = 8000) -> None:
        self.config = config.model_copy(update={"host": "127.0.0.1", "port": port})
        self.port = port
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def argv(self) -> list[str]:
        executable = shutil.which("vllm")
        head = [executable] if executable else [sys.executable, "-m", "vllm.entrypoints.cli.main"]
        return [*head, *vllm_serve_args(self.config)]

    def start(self) -> None:
        readiness = launch_readiness()
        if not readiness.ok:
            raise RuntimeError(readiness.message)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ},
        )

    async def wait_healthy(self, timeout_s: float = 1800.0) -> None:
        """Poll ``/health`` until it answers 200; fail early if the process died."""
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if self.process is not None and self.process.poll() is not None:
                    code = self.process.returncode
                    raise RuntimeError(f"vllm serve exited with code {code}; see {self.log_path}")
                try:
                    async with session.get(
                        f"{self.base_url}/health", timeout=aiohttp.ClientTimeout(total=5)
                    ) as resp:
                        if resp.status == 200:
                            return
                except (aiohttp.ClientError, TimeoutError):
                    pass
                await _sleep(2.0)
        raise TimeoutError(f"vllm serve not healthy after {timeout_s:.0f} s; see {self.log_path}")

    def stop(self, grace_s: float = 30.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)
