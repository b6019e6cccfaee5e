"""How long the simulated server takes: the timing models it streams by.

A :class:`TimingModel` turns one admitted request (prompt tokens, output tokens, prompt tokens
found in the prefix cache) into its output tokens over time: :meth:`TimingModel.tokens` is an
async iterator of the request's cumulative token count, each value yielded when that many
tokens are ready (1 at the first token, ``output_tokens`` at the last). Closing the iterator
early (the client went away) releases the request.

- :class:`FixedTiming`: the same TTFT and per-token delay whatever the load (tests, client
  benchmarks);
- :class:`~benchmarks_runner.simulated.perf_timing.EngineTiming`: the performance model's own
  engine, stepped in real time (the plan's continuous batching, queueing and KV capacity).

A model that also has :class:`EngineState` reports the server's running and waiting requests,
KV usage and preemptions from its engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


class TimingModel(Protocol):
    def tokens(
        self, prompt_tokens: int, output_tokens: int, cached_tokens: int = 0
    ) -> AsyncGenerator[int, None]:
        """The request's cumulative output tokens, each yielded when ready."""
        ...


@runtime_checkable
class EngineState(Protocol):
    """What a timing model with its own engine knows about the batch."""

    @property
    def running(self) -> int: ...

    @property
    def waiting(self) -> int: ...

    @property
    def kv_usage(self) -> float: ...

    @property
    def preemptions(self) -> int: ...

    @property
    def kv_capacity_tokens(self) -> int: ...


@dataclass(frozen=True, slots=True)
class FixedTiming:
    """Token *i* (0-based) is ready ``ttft_ms + i * token_delay_ms`` after admission, on
    absolute deadlines so delays do not accumulate; load and cached prefixes change nothing."""

    ttft_ms: float = 20.0
    token_delay_ms: float = 10.0

    async def tokens(
        self, prompt_tokens: int, output_tokens: int, cached_tokens: int = 0
    ) -> AsyncGenerator[int, None]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        ttft, delay = self.ttft_ms / 1000.0, self.token_delay_ms / 1000.0
        for i in range(max(1, output_tokens)):
            wait = start + ttft + i * delay - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            yield i + 1
