"""How long the simulated server takes: the timing models it is given.

A :class:`TimingModel` returns, for a request admitted with ``running`` requests in the batch,
its TTFT and per-token delay (:class:`TokenTiming`). :class:`FixedTiming` ignores load;
:class:`SlowedTiming` slows another model down; the performance model's own timing is
:class:`benchmarks_runner.simulated.perf_timing.PerfTiming`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class TokenTiming:
    ttft_s: float
    token_delay_s: float
    tokens_per_chunk: int = 1


class TimingModel(Protocol):
    """Timing of one request given the load when it is admitted.

    A model may also define ``live_token_delay_s(running, input_len, output_len) -> float``:
    then every chunk after the first is paced at the delay for the batch running at that
    moment (continuous batching), not at the one seen on admission.
    """

    def timing(self, running: int, input_len: int, output_len: int) -> TokenTiming: ...


@dataclass(frozen=True, slots=True)
class FixedTiming:
    """Same TTFT and per-token delay whatever the load."""

    ttft_ms: float = 20.0
    token_delay_ms: float = 10.0
    tokens_per_chunk: int = 1

    def timing(self, running: int, input_len: int, output_len: int) -> TokenTiming:
        return TokenTiming(
            self.ttft_ms / 1000.0, self.token_delay_ms / 1000.0, max(1, self.tokens_per_chunk)
        )


@dataclass(frozen=True, slots=True)
class SlowedTiming:
    """Another timing model, ``factor`` times slower."""

    inner: TimingModel
    factor: float

    def timing(self, running: int, input_len: int, output_len: int) -> TokenTiming:
        tm = self.inner.timing(running, input_len, output_len)
        return TokenTiming(
            tm.ttft_s * self.factor, tm.token_delay_s * self.factor, tm.tokens_per_chunk
        )
