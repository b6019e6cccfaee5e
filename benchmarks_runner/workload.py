"""Request specifications: what to send and when, independent of prompt text and HTTP.

A run is a list of :class:`RequestSpec`. The builders here are small pure functions (same
inputs and seed, same output) so that ``planner.workload`` can produce the same specs later.

Trace formats read by :func:`load_trace` (prompt text is never in a public trace; it is
synthesised, and shared ``hash_ids`` become shared prefixes):

- ``mooncake``: JSONL, one object a line: ``timestamp`` (ms), ``input_length``,
  ``output_length``, ``hash_ids`` (ids of 512-token prefix blocks).
- ``burstgpt``: CSV with ``Timestamp`` (s), ``Request tokens``, ``Response tokens``.
- ``azure``: Azure LLM inference CSV with ``TIMESTAMP`` (date-time), ``ContextTokens``,
  ``GeneratedTokens``.
- ``csv``: plain CSV ``timestamp,input_tokens,output_tokens`` (timestamp in seconds).
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np

from benchmarks_runner.errors import TraceFormatError
from planner.input_checks import MAX_REQUEST_TOKENS
from planner.workload import LengthDistribution, draw_lengths

TraceFormat = Literal["mooncake", "burstgpt", "azure", "csv"]
TRACE_FORMATS: tuple[str, ...] = ("mooncake", "burstgpt", "azure", "csv")
MOONCAKE_BLOCK_TOKENS = 512
#: Tokens one request of a trace may ask for (the planner's limit of a request's length).
MAX_TRACE_TOKENS = MAX_REQUEST_TOKENS
BLOCK_GROUP_PREFIX = "blocks:"


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request to send.

    ``arrival_s`` is the offset from the start of the measured phase (None: closed loop, sent
    as soon as a concurrency slot frees). ``prefix_group`` names a shared prefix of
    ``prefix_len`` tokens that every request of the group starts with, byte for byte.
    Groups named ``blocks:<size>:<id>,<id>,...`` are chains of trace blocks: two such groups
    share exactly their common leading blocks.
    """

    request_index: int
    input_len: int
    output_len: int
    arrival_s: float | None = None
    prefix_group: str | None = None
    prefix_len: int = 0

    def __post_init__(self) -> None:
        if self.input_len < 1 or self.output_len < 1:
            raise ValueError(
                f"request {self.request_index}: input_len={self.input_len} and "
                f"output_len={self.output_len} must be >= 1"
            )
        if not 0 <= self.prefix_len <= self.input_len:
            raise ValueError(
                f"request {self.request_index}: prefix_len={self.prefix_len} must be in "
                f"[0, input_len={self.input_len}]"
            )


def build_synthetic_specs(
    num_requests: int,
    input_len: LengthDistribution,
    output_len: LengthDistribution,
    *,
    prefix_share: float = 0.0,
    num_prefix_groups: int = 1,
    seed: int = 0,
) -> list[RequestSpec]:
    """Closed-loop specs with planned length distributions and a shared-prefix share.

    Lengths are :func:`planner.workload.draw_lengths` of the two distributions with ``seed``:
    the very requests the simulator predicts for a scenario with the same distributions and
    seed.

    ``prefix_share`` is the fraction of each prompt's tokens that is a prefix shared with the
    other requests of its group (``round(input_len * prefix_share)`` tokens); requests are
    spread round-robin over ``num_prefix_groups`` groups. Groups get the planned share of the
    group's shortest prompt, so every member can hold the whole prefix.
    """
    if num_requests < 0:
        raise ValueError(f"num_requests={num_requests}: must be >= 0")
    if not 0.0 <= prefix_share < 1.0:
        raise ValueError(f"prefix_share={prefix_share}: allowed range [0, 1)")
    if num_prefix_groups < 1:
        raise ValueError(f"num_prefix_groups={num_prefix_groups}: must be >= 1")
    drawn_in, drawn_out = draw_lengths(input_len, output_len, num_requests, seed)
    ins, outs = [int(v) for v in drawn_in], [int(v) for v in drawn_out]
    specs: list[RequestSpec] = []
    group_len: dict[int, int] = {}
    if prefix_share > 0:
        for i, n_in in enumerate(ins):
            g = i % num_prefix_groups
            want = round(n_in * prefix_share)
            group_len[g] = min(group_len.get(g, want), want)
    for i, (n_in, n_out) in enumerate(zip(ins, outs, strict=True)):
        group: str | None = None
        plen = 0
        if prefix_share > 0:
            g = i % num_prefix_groups
            plen = min(group_len[g], n_in - 1) if n_in > 1 else 0
            if plen > 0:
                group = f"shared-{seed}-{g}"
        specs.append(RequestSpec(i, n_in, n_out, None, group, plen if group else 0))
    return specs


def workload_record(
    input_len: LengthDistribution, output_len: LengthDistribution, **extra: Any
) -> dict[str, Any]:
    """How run.json's ``config.workload`` keeps the planned lengths: each distribution as
    :class:`planner.workload.LengthDistribution` dumps it (``kind``, ``mean``, ``std``, ...),
    so the scenario of a run reads back the very distributions it was predicted with."""
    return {
        "input_len": input_len.model_dump(mode="json", by_alias=True, exclude_none=True),
        "output_len": output_len.model_dump(mode="json", by_alias=True, exclude_none=True),
        **extra,
    }


def arrival_times(
    n: int, request_rate: float, burstiness: float = 1.0, seed: int = 0
) -> list[float]:
    """Arrival offsets for a Poisson (burstiness 1) or gamma process at ``request_rate``.

    As ``vllm bench serve``: inter-arrival gaps are gamma(shape=burstiness,
    scale=1/(rate*burstiness)); the cumulative times are rescaled so that the last arrival is
    at exactly n/rate, which keeps the offered rate equal to the configured one for any seed.
    The first request is sent at its first gap (not at 0), as vLLM does.
    """
    if n <= 0:
        return []
    if request_rate == float("inf"):
        return [0.0] * n
    rng = np.random.default_rng(seed)
    if burstiness == float("inf"):
        gaps = np.full(n, 1.0 / request_rate)
    else:
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (request_rate * burstiness), size=n)
    times = np.cumsum(gaps)
    if times[-1] > 0:
        times = times * ((n / request_rate) / times[-1])
    return [float(t) for t in times]


def with_arrivals(specs: Sequence[RequestSpec], arrivals: Sequence[float]) -> list[RequestSpec]:
    """Copy of ``specs`` with the given arrival offsets (same length)."""
    if len(specs) != len(arrivals):
        raise ValueError(f"{len(specs)} specs but {len(arrivals)} arrival times")
    return [replace(s, arrival_s=float(a)) for s, a in zip(specs, arrivals, strict=True)]


def closed_loop(specs: Iterable[RequestSpec]) -> list[RequestSpec]:
    """Copy of ``specs`` without arrival times."""
    return [replace(s, arrival_s=None) for s in specs]


# ---------------------------------------------------------------------------------- traces


@dataclass(frozen=True, slots=True)
class TraceRow:
    timestamp_s: float
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] = ()


def _finite(value: float, what: str) -> float:
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{what}={value}: a finite number is required")
    return value


def _length(value: Any, what: str) -> int:
    number = int(value)
    if number != float(value) or abs(number) > MAX_TRACE_TOKENS:
        raise ValueError(f"{what}={value}: a whole token count up to {MAX_TRACE_TOKENS:,}")
    return number


def _read_mooncake(path: Path, max_rows: int | None) -> list[TraceRow]:
    rows: list[TraceRow] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if max_rows is not None and len(rows) >= max_rows:
                break
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                row = TraceRow(
                    _finite(float(obj["timestamp"]), "timestamp") / 1000.0,
                    _length(obj["input_length"], "input_length"),
                    _length(obj["output_length"], "output_length"),
                    tuple(int(h) for h in obj.get("hash_ids") or ()),
                )
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
                raise TraceFormatError(
                    f"{path}:{lineno}: not a Mooncake record (needs timestamp ms, "
                    f"input_length, output_length, hash_ids): {exc}"
                ) from None
            if row.input_len >= 1 and row.output_len >= 1:
                rows.append(row)
    return rows


def _read_csv(
    path: Path,
    ts_col: str,
    in_col: str,
    out_col: str,
    fmt: str,
    *,
    datetime_ts: bool = False,
    max_rows: int | None = None,
) -> list[TraceRow]:
    rows: list[TraceRow] = []
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        fields = [f.strip() for f in reader.fieldnames or []]
        missing = [c for c in (ts_col, in_col, out_col) if c not in fields]
        if missing:
            raise TraceFormatError(
                f"{path}: not a {fmt} trace: missing column(s) {missing}; found {fields[:12]}"
            )
        first_dt: datetime | None = None
        for lineno, raw in enumerate(reader, 2):
            if max_rows is not None and len(rows) >= max_rows:
                break
            rec = {k.strip(): (v or "").strip() for k, v in raw.items() if isinstance(k, str)}
            try:
                if datetime_ts:
                    dt = _parse_datetime(rec[ts_col])
                    first_dt = first_dt or dt
                    ts = (dt - first_dt).total_seconds()
                else:
                    ts = _finite(float(rec[ts_col]), ts_col)
                row = TraceRow(
                    ts, _length(float(rec[in_col]), in_col), _length(float(rec[out_col]), out_col)
                )
            except (KeyError, ValueError, OverflowError) as exc:
                raise TraceFormatError(f"{path}:{lineno}: bad {fmt} row: {exc}") from None
            if row.input_len >= 1 and row.output_len >= 1:
                rows.append(row)
    return rows


def _parse_datetime(text: str) -> datetime:
    # Azure traces carry 7 fractional digits, which datetime.fromisoformat (3.11) rejects.
    head, _, frac = text.partition(".")
    if frac:
        frac = "".join(ch for ch in frac if ch.isdigit())[:6]
        text = f"{head}.{frac}"
    return datetime.fromisoformat(text)


def read_trace(path: Path, fmt: TraceFormat, *, max_rows: int | None = None) -> list[TraceRow]:
    """Parse a trace file into rows with timestamps in seconds (unsorted, unshifted).

    The file is streamed: with ``max_rows``, reading stops after that many usable rows (those
    with input and output >= 1), the first of the file, whatever its size. Without it the whole
    file is read, and a file larger than the setting ``SERVEWISE_MAX_TRACE_MB`` is refused.
    """
    if not path.is_file():
        raise TraceFormatError(f"trace file {path} does not exist")
    if max_rows is None:
        from planner.settings import get_settings

        limit_mb = get_settings().max_trace_mb
        if path.stat().st_size > limit_mb * 1e6:
            raise TraceFormatError(
                f"trace file {path} is {path.stat().st_size / 1e6:,.1f} MB: at most "
                f"{limit_mb:g} MB are read whole (the setting SERVEWISE_MAX_TRACE_MB raises the "
                "limit; --num-requests reads only the first requests of any size of file)"
            )
    try:
        if fmt == "mooncake":
            return _read_mooncake(path, max_rows)
        if fmt == "burstgpt":
            return _read_csv(
                path, "Timestamp", "Request tokens", "Response tokens", fmt, max_rows=max_rows
            )
        if fmt == "azure":
            return _read_csv(
                path,
                "TIMESTAMP",
                "ContextTokens",
                "GeneratedTokens",
                fmt,
                datetime_ts=True,
                max_rows=max_rows,
            )
        if fmt == "csv":
            return _read_csv(
                path, "timestamp", "input_tokens", "output_tokens", fmt, max_rows=max_rows
            )
    except UnicodeDecodeError:
        raise TraceFormatError(f"trace file {path}: not UTF-8 text") from None
    except csv.Error as exc:
        raise TraceFormatError(f"trace file {path}: not a well-formed CSV ({exc})") from None
    raise TraceFormatError(f"trace format {fmt!r} is not known; available: {TRACE_FORMATS}")


def _block_group(chain: Sequence[int], block_tokens: int) -> str:
    return f"{BLOCK_GROUP_PREFIX}{block_tokens}:" + ",".join(str(h) for h in chain)


def specs_from_trace_rows(
    rows: Sequence[TraceRow],
    *,
    time_scale: float = 1.0,
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
    max_requests: int | None = None,
    start_offset_s: float = 0.0,
) -> list[RequestSpec]:
    """Turn trace rows into timed specs.

    Timestamps are shifted so the first request arrives at ``start_offset_s`` and divided by
    ``time_scale`` (2.0 replays twice as fast). Rows with a zero length are dropped (a request
    needs at least one token in and out). For ``hash_ids``, a request's shared prefix is its
    longest leading block chain that another request of the trace also starts with.
    """
    if time_scale <= 0:
        raise ValueError(f"time_scale={time_scale}: must be > 0")
    usable = sorted(
        (r for r in rows if r.input_len >= 1 and r.output_len >= 1), key=lambda r: r.timestamp_s
    )
    if max_requests is not None:
        usable = usable[:max_requests]
    if not usable:
        return []
    chain_count: dict[str, int] = {}
    for r in usable:
        digest = hashlib.blake2b(digest_size=8)
        for h in r.hash_ids:
            digest.update(h.to_bytes(8, "little", signed=True))
            key = digest.hexdigest()
            chain_count[key] = chain_count.get(key, 0) + 1
    t0 = usable[0].timestamp_s
    specs: list[RequestSpec] = []
    for i, r in enumerate(usable):
        shared_blocks = 0
        digest = hashlib.blake2b(digest_size=8)
        for k, h in enumerate(r.hash_ids):
            digest.update(h.to_bytes(8, "little", signed=True))
            if chain_count[digest.hexdigest()] >= 2:
                shared_blocks = k + 1
            else:
                break
        plen = min(shared_blocks * block_tokens, r.input_len - 1)
        group = _block_group(r.hash_ids[:shared_blocks], block_tokens) if plen > 0 else None
        arrival = start_offset_s + (r.timestamp_s - t0) / time_scale
        specs.append(
            RequestSpec(i, r.input_len, r.output_len, arrival, group, plen if group else 0)
        )
    return specs


def load_trace(
    path: Path,
    fmt: TraceFormat,
    *,
    time_scale: float = 1.0,
    max_requests: int | None = None,
) -> list[RequestSpec]:
    """Read a trace file and build timed specs (see :func:`specs_from_trace_rows`): the
    first ``max_requests`` usable requests of the file (streamed), or all of them."""
    return specs_from_trace_rows(
        read_trace(path, fmt, max_rows=max_requests),
        time_scale=time_scale,
        max_requests=max_requests,
    )
