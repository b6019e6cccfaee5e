"""``python -m benchmarks_runner diagnose``: a run, a result file or a live endpoint against the
ten ways a cluster wastes money (:mod:`planner.diagnosis`).

- ``diagnose RUN_DIR``: a Servewise run directory (``run.json`` and its request and metric
  files).
- ``diagnose RESULT_FILE``: a ``vllm bench serve`` JSON, a GuideLLM benchmarks JSON (one
  diagnosis per benchmark) or an AIPerf artifact folder / ``profile_export.jsonl``: the format
  is recognised (:func:`detect_format`) and the file imported into a scratch directory with
  the importers, then diagnosed like a run. What such a file lacks (server metrics, per-chunk
  times, the plan) is said in the report.
- ``diagnose --base-url URL --duration 60``: scrapes the endpoint's ``/metrics`` every
  ``--interval-s`` for the duration while it serves its own traffic (no load of ours) and
  diagnoses what the server reported.

``--plan FILE[#RANK]`` (a plan file, or a saved recommendation) or ``--gpu ID --tp N ...``
names the deployment when the run does not (the plan options of ``import``,
:mod:`benchmarks_runner.plans`); the what-if of each fix needs it.
``--json`` prints the diagnosis as JSON (a list when a file holds several runs).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks_runner.errors import (
    ConfigError,
    EndpointUnreachable,
    ImportFormatError,
    ResponseTooLarge,
)
from benchmarks_runner.http_client import EndpointClient
from benchmarks_runner.importers.common import MAX_IMPORT_BYTES
from benchmarks_runner.server_metrics import MAX_SAMPLES_PER_SCRAPE, parse_prometheus
from planner.errors import RunFilesError
from planner.run_files import (
    MetricSample,
    RunFiles,
    loads_json,
    open_regular,
    read_bounded,
    read_run_dir,
)

SOURCE_FORMATS = ("run", "vllm", "guidellm", "aiperf")
#: How long the first scrape of a live endpoint may take. It decides whether the endpoint is
#: watchable at all, and a server busy with the very traffic being diagnosed (or a loaded host)
#: can take seconds to render /metrics: a later scrape that slow is skipped, the first is not.
FIRST_SCRAPE_TIMEOUT_S = 10.0


def detect_format(path: Path) -> str:
    """Which of :data:`SOURCE_FORMATS` ``path`` is; ImportFormatError saying why when none."""
    path = Path(path)
    if not path.exists():
        raise ImportFormatError(f"{path} does not exist")
    if path.is_dir():
        if (path / "run.json").is_file():
            return "run"
        if (path / "profile_export.jsonl").is_file():
            return "aiperf"
        raise ImportFormatError(
            f"{path}: neither a Servewise run directory (run.json) nor an AIPerf artifact "
            "folder (profile_export.jsonl)"
        )
    if not path.is_file():  # a FIFO or a device: never read (a FIFO would block)
        raise ImportFormatError(f"{path}: not a regular file or a folder; not read")
    if path.suffix == ".jsonl":
        return "aiperf"
    try:
        with open_regular(path, MAX_IMPORT_BYTES, str(path)) as handle:
            data = loads_json(read_bounded(handle, MAX_IMPORT_BYTES, str(path)), "the JSON")
    except (OSError, ValueError, RunFilesError) as exc:
        raise ImportFormatError(f"{path}: not a readable JSON result ({exc})") from None
    if isinstance(data, Mapping):
        if isinstance(data.get("benchmarks"), list):
            return "guidellm"
        if any(k in data for k in ("request_throughput", "completed", "backend", "ttfts")):
            return "vllm"
        if "run_id" in data and "status" in data:
            return "run"  # a run.json given as a file: its directory is the run
    raise ImportFormatError(
        f"{path}: not a vllm bench serve, GuideLLM or AIPerf result, nor a Servewise run"
    )


def load_runs(path: Path, scratch: Path) -> list[RunFiles]:
    """The runs ``path`` holds, imported into ``scratch`` when it is another tool's result."""
    from benchmarks_runner.importers import import_file

    fmt = detect_format(path)
    if fmt == "run":
        run_dir = path if path.is_dir() else path.parent
        return [read_run_dir(run_dir)]
    return [read_run_dir(d) for d in import_file(fmt, path, scratch)]


async def watch_endpoint(
    base_url: str,
    duration_s: float,
    *,
    interval_s: float = 1.0,
    metrics_path: str = "/metrics",
    api_key: str | None = None,
    basic_auth: str | None = None,
    progress: Any = None,
) -> tuple[list[MetricSample], float]:
    """Every ``vllm:`` sample of ``metrics_path`` (histogram buckets included), scraped every
    ``interval_s`` for ``duration_s``; returns the samples and the seconds actually watched.

    Raises :class:`EndpointUnreachable` when the first scrape fails (a later failed scrape is
    skipped: the samples already taken are kept)."""
    if not duration_s > 0:
        raise ConfigError(f"--duration {duration_s}: must be > 0 seconds")
    if not interval_s > 0:
        raise ConfigError(f"--interval-s {interval_s}: must be > 0 seconds")
    samples: list[MetricSample] = []
    async with EndpointClient(
        base_url, api_key=api_key, basic_auth=basic_auth, connect_timeout_s=5.0
    ) as client:
        t0 = time.monotonic()
        next_t = t0
        scrapes = 0
        while True:
            now = time.monotonic() - t0
            try:
                timeout_s = FIRST_SCRAPE_TIMEOUT_S if scrapes == 0 else max(1.0, interval_s)
                status, _, body = await client.get(metrics_path, timeout_s=timeout_s)
            except (EndpointUnreachable, ResponseTooLarge):
                if scrapes == 0:
                    raise
                status, body = 0, b""
            if status == 200:
                scrapes += 1
                wanted = [
                    s
                    for s in parse_prometheus(body.decode(errors="replace"))
                    if s.name.startswith("vllm:")
                ]
                samples.extend(
                    MetricSample(t_s=round(now, 6), name=s.name, labels=s.labels, value=s.value)
                    for s in wanted[:MAX_SAMPLES_PER_SCRAPE]
                )
            elif scrapes == 0:
                raise EndpointUnreachable(
                    f"{base_url}{metrics_path} answered HTTP {status}: no Prometheus metrics to "
                    "watch (vLLM serves them at /metrics)"
                )
            if progress is not None:
                progress(now, duration_s)
            if now >= duration_s:
                return samples, now
            next_t += interval_s
            await asyncio.sleep(max(0.0, min(next_t, t0 + duration_s) - time.monotonic()))


def scratch_dir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="servewise-diagnose-")
