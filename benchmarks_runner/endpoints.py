"""Endpoints a run brings along: started before the run, stopped after it, however it ends.

- :class:`SimulatedEndpoint`: ``python -m benchmarks_runner.simulated`` as a child process on
  127.0.0.1 and a free port, timed by the performance model for a plan
  (:meth:`SimulatedEndpoint.for_plan`), with optional :class:`Faults`;
- :class:`LaunchedVllm`: ``vllm serve`` for a plan, healthy before the run.

Each is an :class:`Endpoint`: ``start(cancel)`` returns the base URL (or raises
:class:`~benchmarks_runner.errors.EndpointStartError` with the reason) and ``stop()`` ends the
child's whole process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from benchmarks_runner.errors import EndpointStartError
from benchmarks_runner.vllm_launcher import VllmServer
from planner.perf.scenario import Scenario

if TYPE_CHECKING:
    from planner.plan import Plan


class Endpoint(Protocol):
    """Something to start before a run and stop after it."""

    @property
    def description(self) -> str: ...

    def start(self, cancel: threading.Event) -> str:
        """Start and return the base URL (``http://127.0.0.1:PORT``); raise
        :class:`EndpointStartError` with a reason, or return early when ``cancel`` is set."""
        ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class Faults:
    """Fault injection of the simulated server (fractions of requests, 0..1)."""

    error_rate: float = 0.0  # answered HTTP error_status
    drop_rate: float = 0.0  # connection closed mid-stream
    malformed_rate: float = 0.0  # a garbage SSE chunk
    stall_rate: float = 0.0  # a pause of stall_s mid-stream
    stall_s: float = 1.0
    error_status: int = 500

    def args(self) -> list[str]:
        out: list[str] = []
        for flag, value in (
            ("--error-rate", self.error_rate),
            ("--drop-rate", self.drop_rate),
            ("--malformed-rate", self.malformed_rate),
            ("--stall-rate", self.stall_rate),
        ):
            if value:
                out += [flag, f"{value:g}"]
        if self.stall_rate:
            out += ["--stall-s", f"{self.stall_s:g}"]
        if self.error_rate and self.error_status != 500:
            out += ["--error-status", str(self.error_status)]
        return out

    def recorded(self) -> dict[str, float]:
        """The rates in use (and the stall length and error status when they matter)."""
        out = {k: v for k, v in self.__dict__.items() if k.endswith("_rate") and v}
        if self.stall_rate:
            out["stall_s"] = self.stall_s
        if self.error_rate and self.error_status != 500:
            out["error_status"] = self.error_status
        return out

    @property
    def any(self) -> bool:
        return any((self.error_rate, self.drop_rate, self.malformed_rate, self.stall_rate))


def _stop_process(process: subprocess.Popen[Any], grace_s: float, sig: int) -> None:
    """Signal a child's process group, wait ``grace_s``, then kill it."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


class SimulatedEndpoint:
    """``python -m benchmarks_runner.simulated`` on 127.0.0.1, a free port.

    ``args`` are the server's flags (``--model``, ``--gpu``, ``--tp``, ``--slowdown``, fault
    rates, ...; see :meth:`for_plan`). Its stderr goes to ``log_path`` when given.
    """

    def __init__(
        self,
        args: Sequence[str],
        *,
        log_path: Path | None = None,
        start_timeout_s: float = 90.0,
    ) -> None:
        self.args = list(args)
        self.log_path = log_path
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self.base_url: str | None = None
        self._own_log = False

    @classmethod
    def for_plan(
        cls,
        plan: Plan,
        *,
        coefficients: Sequence[float] | Mapping[str, Sequence[float]] | None = None,
        slowdown: float = 1.0,
        faults: Faults | None = None,
        log_path: Path | None = None,
        extra_args: Sequence[str] = (),
        scenario: Scenario | None = None,
    ) -> SimulatedEndpoint:
        """A simulated server timed by the performance model's engine for one replica of
        ``plan``; with ``scenario``, for the very deployment the prediction of that scenario
        resolved (every engine setting travels in it). A disaggregated plan is served whole:
        its prefill and decode pools behind a router (``coefficients`` by pool, ``{"prefill":
        [...], "decode": [...]}``)."""
        if scenario is None:
            from benchmarks_runner.simulated.perf_timing import timing_scenario

            scenario = timing_scenario(plan)
        args = ["--model", plan.model]
        args += ["--scenario", scenario.model_dump_json(exclude_defaults=True)]
        if plan.disaggregated:  # two pools behind a router (benchmarks_runner.simulated)
            args += ["--plan", plan.model_dump_json(exclude_defaults=True)]
        if isinstance(coefficients, Mapping):  # a disaggregated plan's, pool by pool
            for role in ("prefill", "decode"):
                if coefficients.get(role) is not None:
                    vector = [float(c) for c in coefficients[role]]
                    args += [f"--{role}-coefficients", json.dumps(vector)]
        elif coefficients is not None:
            args += ["--coefficients", json.dumps([float(c) for c in coefficients])]
        if slowdown != 1.0:
            args += ["--slowdown", f"{slowdown:g}"]
        fault_args = faults.args() if faults is not None else []
        return cls([*args, *fault_args, *extra_args], log_path=log_path)

    @property
    def description(self) -> str:
        return "simulated endpoint"

    @property
    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "benchmarks_runner.simulated",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            *self.args,
        ]

    def start(self, cancel: threading.Event) -> str:
        if self.log_path is None:  # a file, not a pipe nobody drains
            handle, name = tempfile.mkstemp(prefix="servewise-simulated-", suffix=".log")
            os.close(handle)
            self.log_path, self._own_log = Path(name), True
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as stderr:
            self.process = subprocess.Popen(
                self.argv,
                stdout=subprocess.PIPE,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        port = self._read_port(cancel)
        self.base_url = f"http://127.0.0.1:{port}" if port else None
        return self.base_url or ""

    def _read_port(self, cancel: threading.Event) -> int | None:
        process = self.process
        assert process is not None and process.stdout is not None
        deadline = time.monotonic() + self.start_timeout_s
        buffer = b""
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if cancel.is_set():
                    return None
                if selector.select(timeout=0.1):
                    chunk = os.read(process.stdout.fileno(), 4096)
                    if not chunk:  # EOF: the server is exiting
                        with contextlib.suppress(subprocess.TimeoutExpired):
                            process.wait(timeout=10)
                        break
                    buffer += chunk
                    for line in buffer.decode(errors="replace").splitlines():
                        if line.startswith("LISTENING "):
                            return int(line.split()[1])
                elif process.poll() is not None:
                    break
        reason = self._exit_reason()
        self.stop()
        raise EndpointStartError(f"the simulated endpoint did not start: {reason}")

    def _exit_reason(self) -> str:
        process = self.process
        if process is None:
            return "not started"
        if process.poll() is None:
            return f"no LISTENING line within {self.start_timeout_s:.0f} s"
        text = ""
        if self.log_path is not None and self.log_path.exists():
            text = self.log_path.read_text(errors="replace")
        last = [line for line in text.strip().splitlines() if line.strip()][-1:] or [""]
        return f"exited with code {process.returncode}" + (f": {last[0]}" if last[0] else "")

    def stop(self) -> None:
        if self.process is not None:
            _stop_process(self.process, 5.0, signal.SIGTERM)
            if self.process.stdout is not None:
                with contextlib.suppress(OSError):
                    self.process.stdout.close()
        if self._own_log and self.log_path is not None:
            with contextlib.suppress(OSError):
                self.log_path.unlink()


class LaunchedVllm:
    """``vllm serve`` for a plan (:class:`~benchmarks_runner.vllm_launcher.VllmServer`),
    healthy before the run and stopped after it."""

    def __init__(
        self,
        config: Any,  # planner.vllm_command.VllmServeConfig
        *,
        log_path: Path,
        port: int | None = None,
        health_timeout_s: float = 1800.0,
    ) -> None:
        self.server = VllmServer(config, log_path=log_path, port=port or _free_port())
        self.health_timeout_s = health_timeout_s

    @property
    def description(self) -> str:
        return f"vllm serve on port {self.server.port}"

    def start(self, cancel: threading.Event) -> str:
        try:
            self.server.start()
        except RuntimeError as exc:  # vLLM or a GPU missing: launch_readiness's sentence
            raise EndpointStartError(str(exc)) from None
        deadline = time.monotonic() + self.health_timeout_s
        process = self.server.process
        while time.monotonic() < deadline and not cancel.is_set():
            if process is not None and process.poll() is not None:
                raise EndpointStartError(
                    f"vllm serve exited with code {process.returncode}; see {self.server.log_path}"
                )
            try:
                with urllib.request.urlopen(f"{self.server.base_url}/health", timeout=5) as resp:
                    if resp.status == 200:
                        return self.server.base_url
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            cancel.wait(2.0)
        if cancel.is_set():
            return self.server.base_url
        raise EndpointStartError(
            f"vllm serve not healthy after {self.health_timeout_s:.0f} s; see "
            f"{self.server.log_path}"
        )

    def stop(self) -> None:
        self.server.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
