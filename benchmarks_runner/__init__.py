"""Servewise benchmark runner: drive an OpenAI-compatible endpoint and store what it measures.

Public API (no streamlit here; the dashboard calls these from a background thread):

- :func:`run_benchmark` / :func:`run_benchmark_sync` with :class:`RunConfig`, a list of
  :class:`RequestSpec`, a runs directory, an optional plan, progress callback and cancel event.
- Workload builders: :func:`build_synthetic_specs`, :func:`arrival_times`,
  :func:`with_arrivals`, :func:`load_trace`.
- Run files are read with :func:`planner.run_files.read_run_dir` (the one reader; format there).
- Importers: :func:`import_file` for vllm bench serve, GuideLLM and AIPerf results.
"""

from importlib import import_module
from typing import Any

#: public name -> module defining it. Imported on first use (PEP 562), so a process that needs
#: one part (the simulated server: no HTTP client, no importers) does not pay for all of them.
_EXPORTS = {
    "RunConfig": "config",
    "make_run_config": "config",
    "AuthenticationFailed": "errors",
    "BenchmarkError": "errors",
    "ConfigError": "errors",
    "EndpointError": "errors",
    "EndpointUnreachable": "errors",
    "ImportFormatError": "errors",
    "ModelNotServed": "errors",
    "ProbeFailed": "errors",
    "TraceFormatError": "errors",
    "import_file": "importers",
    "ProgressSnapshot": "runner",
    "RunResult": "runner",
    "run_benchmark": "runner",
    "run_benchmark_sync": "runner",
    "SearchResult": "sweep",
    "run_sweep": "sweep",
    "search_max_rate": "sweep",
    "RequestSpec": "workload",
    "arrival_times": "workload",
    "build_synthetic_specs": "workload",
    "load_trace": "workload",
    "with_arrivals": "workload",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'benchmarks_runner' has no attribute {name!r}")
    value = getattr(import_module(f"benchmarks_runner.{module}"), name)
    globals()[name] = value
    return value


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
