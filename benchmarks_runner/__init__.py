"""Servewise benchmark runner: drive an OpenAI-compatible endpoint and store what it measures.

Public API (no streamlit here; the dashboard calls these from a background thread):

- :func:`run_benchmark` / :func:`run_benchmark_sync` with :class:`RunConfig`, a list of
  :class:`RequestSpec`, a runs directory, an optional plan, progress callback and cancel event.
- Workload builders: :func:`build_synthetic_specs`, :func:`arrival_times`,
  :func:`with_arrivals`, :func:`load_trace`.
- Run files are read with :func:`planner.run_files.read_run_dir` (the one reader; format there).
- Importers: :func:`import_file` for vllm bench serve, GuideLLM and AIPerf results.
"""

from benchmarks_runner.config import RunConfig, make_run_config
from benchmarks_runner.errors import (
    AuthenticationFailed,
    BenchmarkError,
    ConfigError,
    EndpointError,
    EndpointUnreachable,
    ImportFormatError,
    ModelNotServed,
    ProbeFailed,
    TraceFormatError,
)
from benchmarks_runner.importers import import_file
from benchmarks_runner.runner import (
    ProgressSnapshot,
    RunResult,
    run_benchmark,
    run_benchmark_sync,
)
from benchmarks_runner.sweep import SearchResult, run_sweep, search_max_rate
from benchmarks_runner.workload import (
    RequestSpec,
    arrival_times,
    build_synthetic_specs,
    load_trace,
    with_arrivals,
)

__all__ = [
    "AuthenticationFailed",
    "BenchmarkError",
    "ConfigError",
    "EndpointError",
    "EndpointUnreachable",
    "ImportFormatError",
    "ModelNotServed",
    "ProbeFailed",
    "ProgressSnapshot",
    "RequestSpec",
    "RunConfig",
    "RunResult",
    "SearchResult",
    "TraceFormatError",
    "arrival_times",
    "build_synthetic_specs",
    "import_file",
    "load_trace",
    "make_run_config",
    "run_benchmark",
    "run_benchmark_sync",
    "run_sweep",
    "search_max_rate",
    "with_arrivals",
]
