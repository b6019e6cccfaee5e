"""The simulated OpenAI-compatible endpoint and its timing.

- :mod:`~benchmarks_runner.simulated.server`: the aiohttp server (completions, chat, models,
  version, health, Prometheus metrics), marked as simulated;
- :mod:`~benchmarks_runner.simulated.timing`: the timing-model protocol and the fixed and slowed
  models;
- :mod:`~benchmarks_runner.simulated.perf_timing`: timing by the performance model for a plan;
- :mod:`~benchmarks_runner.simulated.cli`: ``python -m benchmarks_runner.simulated``.
"""
