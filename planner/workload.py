"""Workloads: request length distributions, arrival processes, shared prefixes and traces.

A :class:`Workload` says what a deployment is asked to serve: how long prompts and answers are
(:class:`LengthDistribution`), when requests arrive (:class:`ArrivalProcess`), which share of the
prompt tokens sit in a prefix common to many requests (what prefix caching can reuse), and the
average and peak request rate a cost plan provisions for.

Public traces load with :func:`load_trace` (formats and columns as ``docs/domain.md`` lists
them): Mooncake JSONL (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids`` of
512-token prefix blocks), BurstGPT CSV (``Timestamp`` s, ``Request tokens``, ``Response tokens``),
Azure LLM inference CSV (``TIMESTAMP``, ``ContextTokens``, ``GeneratedTokens``) and a plain CSV
``timestamp,input_tokens,output_tokens`` (seconds). A trace replays its own requests in order, so
the pairing of prompt and answer lengths and the shared prefixes stay as recorded.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from statistics import NormalDist
from typing import Any, Literal, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from planner.errors import InvalidInputError
from planner.input_checks import MAX_REQUEST_TOKENS, check_file_size
from planner.memo import memoised

LengthKind = Literal["fixed", "uniform", "normal", "lognormal", "empirical"]
ArrivalKind = Literal["closed_loop", "poisson", "gamma", "trace"]
TraceFormat = Literal["mooncake", "burstgpt", "azure", "csv", "auto"]

#: Tokens per ``hash_ids`` block in Mooncake traces (Alibaba Bailian traces use 16).
MOONCAKE_BLOCK_TOKENS = 512
#: Requests of a trace a Workload keeps to replay in order (the file's first ones); lengths,
#: contexts, rates and the shared prefix are counted over every request of the trace.
TRACE_REPLAY_REQUESTS = 100_000
#: Tokens of one request a trace may record.
MAX_TRACE_TOKENS = MAX_REQUEST_TOKENS
#: Window over which :attr:`Workload.peak_rate` of a trace is measured, seconds.
PEAK_WINDOW_S = 60.0
#: Points of the quantile grid used to integrate the mean of clipped continuous distributions.
_MEAN_GRID = 20_000


def planner_error(exc: ValidationError) -> InvalidInputError:
    """The typed error behind a pydantic ValidationError (or one built from its first entry)."""
    for error in exc.errors():
        original = (error.get("ctx") or {}).get("error")
        if isinstance(original, InvalidInputError):
            return original
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or exc.title
    return InvalidInputError(field, first.get("input"), first["msg"])


class _Validated(BaseModel):
    """A model whose invalid input raises :class:`InvalidInputError`, not ValidationError."""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise planner_error(exc) from None

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as exc:
            raise planner_error(exc) from None

    @classmethod
    def model_validate_json(cls, json_data: Any, *args: Any, **kwargs: Any) -> Self:
        try:
            return super().model_validate_json(json_data, *args, **kwargs)
        except ValidationError as exc:
            raise planner_error(exc) from None


def _check_positive(field: str, value: float | None) -> None:
    if value is not None and not value > 0:
        raise InvalidInputError(field, value, "a number > 0")


class LengthDistribution(_Validated):
    """A distribution of token counts (prompt or answer length), always >= ``min_tokens`` >= 1.

    Kinds and their parameters:

    - ``fixed``: ``value``.
    - ``uniform``: integers ``low``..``high`` inclusive, each equally likely.
    - ``normal``: ``mean``, ``std`` of a normal, rounded and clipped to [min_tokens, max_tokens].
    - ``lognormal``: ``mean``, ``std`` of the lengths themselves (not of their logarithm):
      sigma^2 = ln(1 + std^2 / mean^2), mu = ln(mean) - sigma^2 / 2; rounded and clipped.
    - ``empirical``: a histogram, ``values`` with ``weights`` (counts or probabilities; equal
      weights when omitted).

    ``mean()`` and ``quantile()`` describe the rounded, clipped distribution that ``sample()``
    draws from (for normal and lognormal the mean is integrated over a 20,000-point quantile grid).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    kind: LengthKind
    value: int | None = None
    low: int | None = None
    high: int | None = None
    mean_tokens: float | None = Field(default=None, alias="mean")
    std: float | None = None
    values: tuple[int, ...] | None = None
    weights: tuple[float, ...] | None = None
    min_tokens: int = 1
    max_tokens: int | None = None

    # ----- construction ---------------------------------------------------------------------
    @classmethod
    def fixed(cls, value: int) -> LengthDistribution:
        return cls(kind="fixed", value=value)

    @classmethod
    def uniform(cls, low: int, high: int) -> LengthDistribution:
        return cls(kind="uniform", low=low, high=high)

    @classmethod
    def normal(
        cls, mean: float, std: float, *, max_tokens: int | None = None
    ) -> LengthDistribution:
        return cls(kind="normal", mean_tokens=mean, std=std, max_tokens=max_tokens)

    @classmethod
    def lognormal(
        cls, mean: float, std: float, *, max_tokens: int | None = None
    ) -> LengthDistribution:
        return cls(kind="lognormal", mean_tokens=mean, std=std, max_tokens=max_tokens)

    @classmethod
    def from_mean_spread(cls, shape: str, mean: int, spread: float) -> LengthDistribution:
        """A shape, a mean and a spread as the sidebar and ``--input-dist/--input-spread`` give
        them: ``spread`` is the half-width of a uniform (integers ``mean - spread`` ..
        ``mean + spread``, at least 1) and the standard deviation in tokens of a normal or a
        lognormal; a spread of 0 is a fixed length."""
        if shape not in ("fixed", "uniform", "normal", "lognormal"):
            raise InvalidInputError("shape", shape, "one of fixed, uniform, normal, lognormal")
        if not spread >= 0:
            raise InvalidInputError("spread", spread, "a number of tokens >= 0")
        if shape == "fixed" or spread == 0:
            return cls.fixed(mean)
        if shape == "uniform":
            half = round(spread)
            return cls.uniform(max(1, mean - half), mean + half)
        if shape == "normal":
            return cls.normal(mean, spread)
        return cls.lognormal(mean, spread)

    @classmethod
    def empirical(
        cls, values: Iterable[int], weights: Iterable[float] | None = None
    ) -> LengthDistribution:
        return cls(
            kind="empirical",
            values=tuple(int(v) for v in values),
            weights=None if weights is None else tuple(float(w) for w in weights),
        )

    @model_validator(mode="after")
    def _check(self) -> LengthDistribution:
        if self.min_tokens < 1:
            raise InvalidInputError("min_tokens", self.min_tokens, "an integer >= 1")
        if self.max_tokens is not None and self.max_tokens < self.min_tokens:
            raise InvalidInputError(
                "max_tokens", self.max_tokens, f"an integer >= min_tokens ({self.min_tokens})"
            )
        if self.kind == "fixed":
            if self.value is None or self.value < 1:
                raise InvalidInputError("value", self.value, "a token count >= 1")
        elif self.kind == "uniform":
            if self.low is None or self.low < 1:
                raise InvalidInputError("low", self.low, "a token count >= 1")
            if self.high is None or self.high < self.low:
                raise InvalidInputError("high", self.high, f"a token count >= low ({self.low})")
        elif self.kind in ("normal", "lognormal"):
            if self.mean_tokens is None or not self.mean_tokens > 0:
                raise InvalidInputError("mean", self.mean_tokens, "a token count > 0")
            if self.std is None or self.std < 0:
                raise InvalidInputError("std", self.std, "a number >= 0")
        else:
            if not self.values:
                raise InvalidInputError("values", self.values, "a non-empty list of token counts")
            if min(self.values) < 1:
                raise InvalidInputError("values", min(self.values), "token counts >= 1")
            if self.weights is not None:
                if len(self.weights) != len(self.values):
                    raise InvalidInputError(
                        "weights", len(self.weights), f"{len(self.values)} weights, one a value"
                    )
                if min(self.weights) < 0 or sum(self.weights) <= 0:
                    raise InvalidInputError("weights", self.weights, "weights >= 0, not all 0")
        return self

    # ----- helpers --------------------------------------------------------------------------
    def _clip(self, x: np.ndarray) -> np.ndarray:
        upper = self.max_tokens if self.max_tokens is not None else np.iinfo(np.int64).max
        return np.clip(np.rint(x), self.min_tokens, upper).astype(np.int64)

    def _clipped_fixed(self) -> int:
        """The fixed count as :meth:`_clip` leaves it, in plain Python (a search asks for it
        per candidate)."""
        upper = self.max_tokens if self.max_tokens is not None else np.iinfo(np.int64).max
        return int(min(max(round(float(self.value or 0)), self.min_tokens), upper))

    def _lognormal_params(self) -> tuple[float, float]:
        assert self.mean_tokens is not None and self.std is not None
        sigma2 = math.log1p((self.std / self.mean_tokens) ** 2)
        return math.log(self.mean_tokens) - sigma2 / 2, math.sqrt(sigma2)

    def _empirical(self) -> tuple[np.ndarray, np.ndarray]:
        """The sorted, clipped values and their probabilities (memoised, read-only: a search
        asks a trace's distributions for their quantiles per candidate)."""
        return memoised(self, "empirical", self._sorted_probabilities)

    def _sorted_probabilities(self) -> tuple[np.ndarray, np.ndarray]:
        assert self.values is not None
        values = np.asarray(self.values, dtype=np.int64)
        weights = np.ones(len(values)) if self.weights is None else np.asarray(self.weights)
        order = np.argsort(values, kind="stable")
        values, weights = self._clip(values[order]), weights[order].astype(float)
        probabilities = weights / weights.sum()
        values.setflags(write=False)
        probabilities.setflags(write=False)
        return values, probabilities

    def _empirical_cdf(self) -> np.ndarray:
        def cdf() -> np.ndarray:
            cumulative = np.cumsum(self._empirical()[1])
            cumulative.setflags(write=False)
            return cumulative

        return memoised(self, "cdf", cdf)

    def key(self) -> str:
        """A short digest of the distribution (memoised): what a cache key holds instead of a
        trace's thousands of lengths."""
        return memoised(
            self, "key", lambda: hashlib.sha256(self.model_dump_json().encode()).hexdigest()
        )

    def _continuous_quantile(self, q: np.ndarray) -> np.ndarray:
        assert self.mean_tokens is not None and self.std is not None
        z = np.array([NormalDist().inv_cdf(float(p)) for p in np.clip(q, 1e-12, 1 - 1e-12)])
        if self.kind == "normal":
            return self.mean_tokens + self.std * z
        mu, sigma = self._lognormal_params()
        return np.exp(mu + sigma * z)

    # ----- the distribution -----------------------------------------------------------------
    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` token counts (int64, each >= ``min_tokens``)."""
        if n < 0:
            raise InvalidInputError("n", n, "an integer >= 0")
        if self.kind == "fixed":
            assert self.value is not None
            return self._clip(np.full(n, self.value, dtype=float))
        if self.kind == "uniform":
            assert self.low is not None and self.high is not None
            return self._clip(rng.integers(self.low, self.high + 1, size=n).astype(float))
        if self.kind == "normal":
            assert self.mean_tokens is not None and self.std is not None
            return self._clip(rng.normal(self.mean_tokens, self.std, size=n))
        if self.kind == "lognormal":
            mu, sigma = self._lognormal_params()
            return self._clip(rng.lognormal(mu, sigma, size=n))
        values, probs = self._empirical()
        return values[rng.choice(len(values), size=n, p=probs)]

    def mean(self) -> float:
        """Expected token count of what :meth:`sample` draws."""
        if self.kind == "fixed":
            return float(self._clipped_fixed())
        if self.kind == "uniform":
            assert self.low is not None and self.high is not None
            return float(self._clip(np.arange(self.low, self.high + 1, dtype=float)).mean())
        if self.kind == "empirical":
            values, probs = self._empirical()
            return float((values * probs).sum())
        grid = (np.arange(_MEAN_GRID) + 0.5) / _MEAN_GRID
        return float(self._clip(self._continuous_quantile(grid)).mean())

    def quantile(self, q: float) -> int:
        """Smallest token count ``x`` with P(length <= x) >= ``q`` (``q`` in [0, 1])."""
        if not 0 <= q <= 1:
            raise InvalidInputError("quantile", q, "a probability in [0, 1]")
        if self.kind == "fixed":
            return self._clipped_fixed()
        if self.kind == "uniform":
            assert self.low is not None and self.high is not None
            count = self.high - self.low + 1
            index = min(count - 1, max(0, math.ceil(q * count) - 1))
            return int(self._clip(np.array([float(self.low + index)]))[0])
        if self.kind == "empirical":
            values = self._empirical()[0]
            cdf = self._empirical_cdf()
            index = int(np.searchsorted(cdf, q - 1e-12, side="left"))
            return int(values[min(index, len(values) - 1)])
        # sample() rounds to the nearest integer: P(rint(X) <= x) >= q  <=>  x >= Q(q) - 0.5.
        return int(self._clip(np.ceil(self._continuous_quantile(np.array([q])) - 0.5))[0])

    def max(self) -> int:
        """Largest count :meth:`sample` can return (the 0.9999 quantile for unbounded kinds)."""
        if self.kind in ("normal", "lognormal") and self.max_tokens is None:
            return self.quantile(0.9999)
        return self.quantile(1.0)


def draw_lengths(
    input_len: LengthDistribution, output_len: LengthDistribution, n: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and answer lengths of ``n`` requests: the prompts drawn first, then the answers,
    from one generator seeded with ``seed``. The simulator predicts this draw and the benchmark
    runner sends it, so a verification run measures exactly the requests that were predicted."""
    rng = np.random.default_rng(seed)
    return input_len.sample(n, rng), output_len.sample(n, rng)


class ArrivalProcess(_Validated):
    """When requests arrive.

    - ``closed_loop``: ``concurrency`` clients, each sending its next request when the previous
      one finished (no timestamps).
    - ``poisson``: exponential gaps at ``rate`` requests/s.
    - ``gamma``: gamma gaps with mean 1/``rate`` and shape ``burstiness`` (scale
      1/(rate x burstiness)); burstiness 1 is Poisson, < 1 burstier, > 1 more regular. This is
      vLLM ``bench serve``'s ``--burstiness`` definition (vllm/benchmarks/serve.py).
    - ``trace``: recorded ``timestamps`` in seconds (replayed relative to the first).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ArrivalKind
    concurrency: int | None = None
    rate: float | None = None
    burstiness: float = 1.0
    timestamps: tuple[float, ...] | None = None

    @classmethod
    def closed_loop(cls, concurrency: int) -> ArrivalProcess:
        return cls(kind="closed_loop", concurrency=concurrency)

    @classmethod
    def poisson(cls, rate: float) -> ArrivalProcess:
        return cls(kind="poisson", rate=rate)

    @classmethod
    def gamma(cls, rate: float, burstiness: float) -> ArrivalProcess:
        return cls(kind="gamma", rate=rate, burstiness=burstiness)

    @classmethod
    def trace(cls, timestamps: Sequence[float]) -> ArrivalProcess:
        return cls(kind="trace", timestamps=tuple(float(t) for t in timestamps))

    @model_validator(mode="after")
    def _check(self) -> ArrivalProcess:
        if self.kind == "closed_loop":
            if self.concurrency is None or self.concurrency < 1:
                raise InvalidInputError("concurrency", self.concurrency, "an integer >= 1")
        elif self.kind in ("poisson", "gamma"):
            if self.rate is None or not self.rate > 0:
                raise InvalidInputError("rate", self.rate, "requests per second > 0")
            if not self.burstiness > 0:
                raise InvalidInputError("burstiness", self.burstiness, "a number > 0")
        else:
            if not self.timestamps:
                raise InvalidInputError("timestamps", self.timestamps, "a non-empty list")
            if any(b < a for a, b in zip(self.timestamps, self.timestamps[1:], strict=False)):
                raise InvalidInputError("timestamps", "unsorted", "non-decreasing seconds")
        return self

    def sample_arrivals_s(self, n: int, rng: np.random.Generator) -> np.ndarray | None:
        """Arrival times (s, first at 0) of ``n`` requests; None for a closed loop."""
        if self.kind == "closed_loop":
            return None
        if self.kind == "trace":
            assert self.timestamps is not None
            ts = np.asarray(self.timestamps, dtype=float)
            ts = ts - ts[0]
            if n <= len(ts):
                return ts[:n]
            # Replay the trace again after its end, one mean gap later.
            period = ts[-1] + (ts[-1] / max(len(ts) - 1, 1) if len(ts) > 1 else 1.0)
            reps = math.ceil(n / len(ts))
            tiled = np.concatenate([ts + i * period for i in range(reps)])
            return tiled[:n]
        assert self.rate is not None
        if self.kind == "poisson":
            gaps = rng.exponential(1.0 / self.rate, size=n)
        else:
            gaps = rng.gamma(self.burstiness, 1.0 / (self.rate * self.burstiness), size=n)
        times = np.cumsum(gaps)
        return times - times[0] if n else times

    def mean_rate(self) -> float | None:
        """Requests per second on average (None for a closed loop)."""
        if self.kind == "closed_loop":
            return None
        if self.kind == "trace":
            assert self.timestamps is not None
            duration = self.timestamps[-1] - self.timestamps[0]
            return None if duration <= 0 else (len(self.timestamps) - 1) / duration
        return self.rate


class SampledRequest(BaseModel):
    """One request drawn from a workload."""

    model_config = ConfigDict(frozen=True)

    input_len: int = Field(ge=1)
    output_len: int = Field(ge=1)
    arrival_s: float | None = None
    prefix_group: int | None = None
    prefix_len: int = Field(default=0, ge=0)

    @property
    def context_len(self) -> int:
        """Tokens the request holds in the KV cache at its last step."""
        return self.input_len + self.output_len


class TraceRequest(BaseModel):
    """A request as a trace recorded it."""

    model_config = ConfigDict(frozen=True)

    timestamp_s: float
    input_len: int = Field(ge=1)
    output_len: int = Field(ge=1)
    prefix_group: int | None = None
    prefix_len: int = Field(default=0, ge=0)


class Workload(_Validated):
    """What a deployment serves: lengths, arrivals, shared prefixes, average and peak load."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_len: LengthDistribution
    output_len: LengthDistribution
    arrival: ArrivalProcess = Field(default_factory=lambda: ArrivalProcess.closed_loop(1))
    prefix_share: float = 0.0
    num_requests: int = 1000
    avg_rate: float | None = None
    peak_rate: float | None = None
    source: str | None = None
    trace: tuple[TraceRequest, ...] | None = None
    #: A trace's input + output tokens per request, over all of its requests (``trace`` may
    #: hold only the first ones): what the KV cache must hold.
    context_len: LengthDistribution | None = None

    @model_validator(mode="after")
    def _check(self) -> Workload:
        if not 0 <= self.prefix_share < 1:
            raise InvalidInputError("prefix_share", self.prefix_share, "a fraction in [0, 1)")
        if self.num_requests < 1:
            raise InvalidInputError("num_requests", self.num_requests, "an integer >= 1")
        _check_positive("avg_rate", self.avg_rate)
        _check_positive("peak_rate", self.peak_rate)
        if (
            self.avg_rate is not None
            and self.peak_rate is not None
            and self.peak_rate < self.avg_rate
        ):
            raise InvalidInputError(
                "peak_rate", self.peak_rate, f"a rate >= avg_rate ({self.avg_rate})"
            )
        return self

    @classmethod
    def fixed(
        cls,
        input_len: int,
        output_len: int,
        *,
        concurrency: int = 1,
        prefix_share: float = 0.0,
        num_requests: int = 1000,
    ) -> Workload:
        """Every request ``input_len`` in, ``output_len`` out, under a closed loop."""
        if input_len < 1:
            raise InvalidInputError("input_len", input_len, "a token count >= 1")
        if output_len < 1:
            raise InvalidInputError("output_len", output_len, "a token count >= 1")
        return cls(
            input_len=LengthDistribution.fixed(input_len),
            output_len=LengthDistribution.fixed(output_len),
            arrival=ArrivalProcess.closed_loop(concurrency),
            prefix_share=prefix_share,
            num_requests=num_requests,
        )

    @property
    def shared_prefix_len(self) -> int:
        """Tokens of the common prefix of a synthetic workload: prefix_share x mean prompt."""
        return int(self.prefix_share * self.input_len.mean())

    def mean_rate(self) -> float | None:
        """Average requests/s: ``avg_rate`` if given, else the arrival process's own."""
        return self.avg_rate if self.avg_rate is not None else self.arrival.mean_rate()

    def sample_requests(self, n: int, seed: int = 0) -> list[SampledRequest]:
        """``n`` requests. A trace replays its own requests in order (cycling past its end);
        otherwise lengths are drawn independently and every request shares the common prefix
        (group 0) of :attr:`shared_prefix_len` tokens, capped one token below its prompt."""
        if n < 0:
            raise InvalidInputError("n", n, "an integer >= 0")
        if self.trace:
            records = [self.trace[i % len(self.trace)] for i in range(n)]
            period = self.trace[-1].timestamp_s - self.trace[0].timestamp_s
            gap = period / max(len(self.trace) - 1, 1) if len(self.trace) > 1 else 1.0
            start = self.trace[0].timestamp_s
            return [
                SampledRequest(
                    input_len=r.input_len,
                    output_len=r.output_len,
                    arrival_s=r.timestamp_s - start + (i // len(self.trace)) * (period + gap),
                    prefix_group=r.prefix_group,
                    prefix_len=r.prefix_len,
                )
                for i, r in enumerate(records)
            ]
        rng = np.random.default_rng(seed)
        inputs = self.input_len.sample(n, rng)
        outputs = self.output_len.sample(n, rng)
        arrivals = self.arrival.sample_arrivals_s(n, rng)
        prefix = self.shared_prefix_len
        requests = []
        for i in range(n):
            plen = min(prefix, int(inputs[i]) - 1)
            requests.append(
                SampledRequest(
                    input_len=int(inputs[i]),
                    output_len=int(outputs[i]),
                    arrival_s=None if arrivals is None else float(arrivals[i]),
                    prefix_group=0 if plen > 0 else None,
                    prefix_len=max(plen, 0),
                )
            )
        return requests

    def context_quantile(self, q: float, *, samples: int = 20_000, seed: int = 0) -> int:
        """Quantile of input + output tokens per request (its KV footprint at the last step).

        Exact for fixed lengths and traces; Monte Carlo over ``samples`` draws otherwise.
        """
        if not 0 <= q <= 1:
            raise InvalidInputError("quantile", q, "a probability in [0, 1]")
        if self.context_len is not None:
            return self.context_len.quantile(q)
        if self.trace:
            totals = np.array([r.input_len + r.output_len for r in self.trace])
        elif self.input_len.kind == "fixed" and self.output_len.kind == "fixed":
            return self.input_len.quantile(1) + self.output_len.quantile(1)
        else:
            rng = np.random.default_rng(seed)
            totals = self.input_len.sample(samples, rng) + self.output_len.sample(samples, rng)
        return int(np.quantile(totals, q, method="inverted_cdf"))

    def max_context(self) -> int:
        """Longest input + output the workload produces (what max_model_len must cover)."""
        if self.context_len is not None:
            return self.context_len.max()
        if self.trace:
            return max(r.input_len + r.output_len for r in self.trace)
        return self.input_len.max() + self.output_len.max()


# ----- traces ---------------------------------------------------------------------------------


def _fail(name: str, field: str, value: Any, allowed: str) -> InvalidInputError:
    return InvalidInputError(f"{name}: {field}", value, allowed)


def _positive_int(name: str, where: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > MAX_TRACE_TOKENS:
            raise _fail(name, where, value, f"a token count <= {MAX_TRACE_TOKENS:,}")
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise _fail(name, where, value, "an integer token count") from None
    if not math.isfinite(number) or number != int(number):
        raise _fail(name, where, value, "an integer token count")
    if abs(number) > MAX_TRACE_TOKENS:
        raise _fail(name, where, value, f"a token count <= {MAX_TRACE_TOKENS:,}")
    return int(number)


def _seconds(name: str, where: str, value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    else:
        text = str(value).strip()
        try:
            number = float(text)
        except ValueError:
            # Azure traces write "2023-11-16 18:15:46.6805900": 7 fractional digits.
            head, _, frac = text.partition(".")
            frac = "".join(ch for ch in frac if ch.isdigit())[:6]
            try:
                stamp = datetime.fromisoformat(head + (f".{frac.ljust(6, '0')}" if frac else ""))
            except ValueError:
                raise _fail(name, where, value, "seconds or an ISO date-time") from None
            return stamp.timestamp()
    if not math.isfinite(number):
        raise _fail(name, where, value, "a finite time")
    return number


class _TraceTally:
    """What a trace's requests add up to, counted as they stream by: length and context
    histograms, every arrival time (8 bytes a request), prompt and shared-prefix tokens, and
    the first :data:`TRACE_REPLAY_REQUESTS` requests themselves (what a Workload replays)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.inputs: Counter[int] = Counter()
        self.outputs: Counter[int] = Counter()
        self.contexts: Counter[int] = Counter()
        self.timestamps = array("d")
        self.kept: list[TraceRequest] = []
        self.prompt_tokens = 0
        self.shared_tokens = 0
        self.skipped = 0

    def add(
        self,
        timestamp_s: float,
        input_len: int,
        output_len: int,
        prefix_group: int | None = None,
        prefix_len: int = 0,
    ) -> None:
        self.inputs[input_len] += 1
        self.outputs[output_len] += 1
        self.contexts[input_len + output_len] += 1
        self.timestamps.append(timestamp_s)
        self.prompt_tokens += input_len
        self.shared_tokens += prefix_len
        if len(self.kept) < self.keep:
            self.kept.append(
                TraceRequest(
                    timestamp_s=timestamp_s,
                    input_len=input_len,
                    output_len=output_len,
                    prefix_group=prefix_group,
                    prefix_len=prefix_len,
                )
            )

    @property
    def count(self) -> int:
        return len(self.timestamps)


def _histogram(counts: Counter[int]) -> LengthDistribution:
    values = sorted(counts)
    return LengthDistribution.empirical(values, [float(counts[v]) for v in values])


def _finish(name: str, fmt: str, tally: _TraceTally) -> Workload:
    if not tally.count:
        detail = f" ({tally.skipped} rows had a zero or negative length)" if tally.skipped else ""
        raise _fail(name, "rows", 0, f"at least one request with input and output >= 1{detail}")
    timestamps = np.frombuffer(tally.timestamps, dtype=float)
    if np.any(np.diff(timestamps) < 0):
        timestamps = np.sort(timestamps)
    duration = float(timestamps[-1] - timestamps[0])
    count = tally.count
    avg_rate = (count - 1) / duration if duration > 0 and count > 1 else None
    peak_rate = _peak_rate(timestamps) if avg_rate is not None else None
    if peak_rate is not None and avg_rate is not None:
        peak_rate = max(peak_rate, avg_rate)
    kept = sorted(tally.kept, key=lambda r: r.timestamp_s)
    replayed = "" if len(kept) == count else f", the first {len(kept):,} of {count:,} replayed"
    return Workload(
        input_len=_histogram(tally.inputs),
        output_len=_histogram(tally.outputs),
        context_len=_histogram(tally.contexts),
        arrival=ArrivalProcess.trace([r.timestamp_s for r in kept]),
        prefix_share=(
            min(tally.shared_tokens / tally.prompt_tokens, 0.999) if tally.prompt_tokens else 0.0
        ),
        num_requests=count,
        avg_rate=avg_rate,
        peak_rate=peak_rate,
        source=f"{fmt} trace {name}{replayed}",
        trace=tuple(kept),
    )


def _peak_rate(timestamps: np.ndarray) -> float:
    """Most requests in any window of :data:`PEAK_WINDOW_S` (or the whole trace if shorter)."""
    ts = timestamps
    window = min(PEAK_WINDOW_S, ts[-1] - ts[0])
    ends = np.searchsorted(ts, ts + window, side="right")
    best = int((ends - np.arange(len(ts))).max())
    return best / window


class _SeenBlocks:
    """Mooncake ``hash_ids`` already sent: a bitmap for the small non-negative ids real traces
    use (one bit each, grown as ids grow, at most 32 MiB), a capped set for any other id."""

    BITMAP_IDS = 1 << 28
    SET_CAP = 1_000_000

    def __init__(self) -> None:
        self.bits = bytearray()
        self.others: set[int] = set()

    def __contains__(self, block: int) -> bool:
        if 0 <= block < self.BITMAP_IDS:
            byte = block >> 3
            return byte < len(self.bits) and bool(self.bits[byte] & (1 << (block & 7)))
        return block in self.others

    def add(self, block: int) -> None:
        if 0 <= block < self.BITMAP_IDS:
            byte = block >> 3
            if byte >= len(self.bits):
                self.bits.extend(bytes(max(byte + 1 - len(self.bits), len(self.bits))))
            self.bits[byte] |= 1 << (block & 7)
        elif len(self.others) < self.SET_CAP:
            self.others.add(block)


def _read_mooncake(lines: Iterable[str], name: str, tally: _TraceTally) -> None:
    seen = _SeenBlocks()
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise _fail(name, f"line {line_no}", line.strip()[:40], "a JSON object") from None
        if not isinstance(record, dict):
            raise _fail(name, f"line {line_no}", record, "a JSON object")
        for key in ("timestamp", "input_length", "output_length"):
            if key not in record:
                raise _fail(name, f"line {line_no} '{key}'", None, "a number (Mooncake format)")
        input_len = _positive_int(name, f"line {line_no} 'input_length'", record["input_length"])
        output_len = _positive_int(name, f"line {line_no} 'output_length'", record["output_length"])
        if input_len < 1 or output_len < 1:
            tally.skipped += 1
            continue
        hash_ids = record.get("hash_ids") or []
        if not isinstance(hash_ids, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in hash_ids
        ):
            raise _fail(name, f"line {line_no} 'hash_ids'", hash_ids, "a list of integers")
        # The leading blocks an earlier request already sent form a cached prefix.
        shared_blocks = 0
        for block in hash_ids:
            if block not in seen:
                break
            shared_blocks += 1
        for block in hash_ids[shared_blocks:]:
            seen.add(block)
        prefix_len = min(shared_blocks * MOONCAKE_BLOCK_TOKENS, input_len - 1)
        timestamp = _seconds(name, f"line {line_no} 'timestamp'", record["timestamp"])
        tally.add(
            timestamp / 1000.0,
            input_len,
            output_len,
            int(hash_ids[0]) if prefix_len > 0 else None,
            max(prefix_len, 0),
        )


_CSV_COLUMNS: dict[str, tuple[str, str, str]] = {
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "csv": ("timestamp", "input_tokens", "output_tokens"),
}


def _read_csv(lines: Iterable[str], name: str, fmt: str, tally: _TraceTally) -> None:
    ts_col, in_col, out_col = _CSV_COLUMNS[fmt]
    reader = csv.reader(lines)
    header = [h.strip() for h in next(reader, [])]
    for column in (ts_col, in_col, out_col):
        if column not in header:
            raise _fail(name, f"column '{column}'", None, f"present in a {fmt} trace header")
    ts_at, in_at, out_at = header.index(ts_col), header.index(in_col), header.index(out_col)
    width = max(ts_at, in_at, out_at) + 1
    for line_no, row in enumerate(reader, start=2):
        if len(row) < width:
            if not row:
                continue
            raise _fail(name, f"row {line_no}", ",".join(row)[:40], f"{len(header)} columns")
        try:  # the fast path of well-formed rows: plain integers and seconds
            input_len, output_len = int(row[in_at]), int(row[out_at])
            timestamp = float(row[ts_at])
            plain = (
                abs(input_len) <= MAX_TRACE_TOKENS
                and abs(output_len) <= MAX_TRACE_TOKENS
                and timestamp - timestamp == 0.0  # finite
            )
        except ValueError:
            plain = False
        if not plain:  # the slow path names what is wrong, or accepts 12.0 and ISO times
            input_len = _positive_int(name, f"row {line_no} '{in_col}'", row[in_at])
            output_len = _positive_int(name, f"row {line_no} '{out_col}'", row[out_at])
            timestamp = _seconds(name, f"row {line_no} '{ts_col}'", row[ts_at])
        if input_len < 1 or output_len < 1:
            tally.skipped += 1  # BurstGPT logs failed requests with 0 response tokens
            continue
        tally.add(timestamp, input_len, output_len)


def _detect_format(path: Path, name: str) -> str:
    if path.suffix.lower() in (".jsonl", ".json") or name.lower().endswith((".jsonl", ".json")):
        return "mooncake"
    with path.open(newline="", encoding="utf-8") as handle:
        header = {h.strip() for h in next(csv.reader(handle), [])}
    for fmt, columns in _CSV_COLUMNS.items():
        if all(c in header for c in columns):
            return fmt
    known = "; ".join(f"{f}: {', '.join(c)}" for f, c in _CSV_COLUMNS.items())
    raise _fail(name, "header", sorted(header)[:12], f"the columns of a known trace ({known})")


def load_trace(
    path: str | Path,
    format: TraceFormat = "auto",
    *,
    name: str | None = None,
    max_mb: float | None = None,
) -> Workload:
    """Read a request trace into a :class:`Workload` that replays it.

    The file is streamed: lengths become empirical histograms (and so does input + output, the
    context each request holds), timestamps a ``trace`` arrival process, ``avg_rate`` the
    requests/s over the trace and ``peak_rate`` the busiest 60-s window, all counted over every
    request; the Workload keeps the first :data:`TRACE_REPLAY_REQUESTS` requests to replay.
    Mooncake ``hash_ids`` that an earlier request already sent count as a shared prefix (512
    tokens a block). Rows with a zero length (BurstGPT's failed requests) are skipped.

    ``name`` is the file name errors and the workload's ``source`` show (an upload's own name,
    not where it was saved); ``max_mb`` the largest file read, by default the setting
    ``SERVEWISE_MAX_TRACE_MB``. An empty, malformed or too large trace raises
    :class:`InvalidInputError` naming the file, the row and the field (or the setting).
    """
    path = Path(path)
    shown = name or path.name
    if format not in ("mooncake", "burstgpt", "azure", "csv", "auto"):
        raise InvalidInputError("format", format, "one of mooncake, burstgpt, azure, csv, auto")
    if not path.is_file():
        raise InvalidInputError("trace", str(name or path), "an existing trace file")
    size = path.stat().st_size
    if size == 0:
        raise _fail(shown, "rows", 0, "at least one request (the file is empty)")
    if max_mb is None:
        from planner.settings import get_settings

        max_mb = get_settings().max_trace_mb
    check_file_size(shown, size, max_mb, "SERVEWISE_MAX_TRACE_MB")
    try:
        fmt = _detect_format(path, shown) if format == "auto" else format
        tally = _TraceTally(TRACE_REPLAY_REQUESTS)
        with path.open(newline="", encoding="utf-8") as handle:
            if fmt == "mooncake":
                _read_mooncake(handle, shown, tally)
            else:
                _read_csv(handle, shown, fmt, tally)
    except UnicodeDecodeError:
        raise _fail(shown, "encoding", "not UTF-8", "a UTF-8 text file") from None
    except csv.Error as exc:
        raise _fail(shown, "CSV", str(exc), "a well-formed CSV trace") from None
    return _finish(shown, fmt, tally)


__all__ = [
    "ArrivalProcess",
    "LengthDistribution",
    "SampledRequest",
    "TraceRequest",
    "Workload",
    "draw_lengths",
    "load_trace",
]
