"""Self-checks written into run.json: is this measurement trustworthy, and is the plan valid?

Each check returns ``{"name", "ok", "message"}``. A failed check does not fail the run; it
tells the reader what to distrust (a saturated client, a rate that was not offered) or what
the measurement says about the plan (KV sizing invalid).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks_runner.server_metrics import ScrapeStats
from planner.run_files import RequestRecord

KV_USAGE_LIMIT = 0.95
CPU_SATURATION = 0.90
LOOP_LAG_LIMIT_S = 0.020
DISPATCH_LAG_LIMIT_S = 0.010
RATE_TOLERANCE = 0.05
LITTLE_TOLERANCE = 0.15
OUTPUT_MISMATCH_LIMIT = 0.05
TOKEN_RECONCILE_TOLERANCE = 0.05


@dataclass
class RunObservations:
    """What the runner measured about itself during the measured phase."""

    load: str
    duration_s: float
    rows: Sequence[RequestRecord]  # measured only
    all_rows: Sequence[RequestRecord]  # warmup included
    offered_rate: float | None = None
    dispatched: int = 0
    dispatch_window_s: float = 0.0
    dispatch_lags_s: list[float] = field(default_factory=list)
    cpu_fraction: float | None = None
    loop_lag_p99_s: float | None = None
    inflight_mean: float | None = None
    concurrency: int | None = None
    scrape: ScrapeStats | None = None
    features: Mapping[str, bool] = field(default_factory=dict)


def check(name: str, ok: bool, message: str) -> dict[str, Any]:
    return {"name": name, "ok": bool(ok), "message": message}


def offered_vs_achieved(obs: RunObservations) -> dict[str, Any] | None:
    if obs.offered_rate is None or obs.dispatched < 2:
        return None
    achieved = obs.dispatched / obs.dispatch_window_s if obs.dispatch_window_s > 0 else 0.0
    ok = achieved >= obs.offered_rate * (1 - RATE_TOLERANCE)
    msg = f"offered {obs.offered_rate:.3g} req/s, achieved {achieved:.3g} req/s"
    if not ok:
        msg += " (the client or its concurrency cap could not keep the schedule)"
    return check("offered_vs_achieved_rate", ok, msg)


def schedule_lag(obs: RunObservations) -> dict[str, Any] | None:
    if not obs.dispatch_lags_s:
        return None
    lags = np.asarray(obs.dispatch_lags_s)
    p99 = float(np.percentile(lags, 99))
    ok = p99 <= DISPATCH_LAG_LIMIT_S
    msg = f"dispatch lag mean {lags.mean() * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms"
    if not ok:
        msg += f" > {DISPATCH_LAG_LIMIT_S * 1000:.0f} ms: requests left later than scheduled"
    return check("schedule_lag", ok, msg)


def client_cpu(obs: RunObservations) -> dict[str, Any] | None:
    if obs.cpu_fraction is None:
        return None
    lag = obs.loop_lag_p99_s or 0.0
    saturated = obs.cpu_fraction >= CPU_SATURATION or lag > LOOP_LAG_LIMIT_S
    msg = (
        f"client CPU {obs.cpu_fraction * 100:.0f}% of one core, "
        f"event-loop lag p99 {lag * 1000:.1f} ms"
    )
    if saturated and obs.cpu_fraction < CPU_SATURATION:
        msg += (
            ": the event loop ran late while this process used little CPU, so other "
            "processes starved the client; latencies and throughput understate the server"
        )
    elif saturated:
        msg += ": the client is the bottleneck; latencies and throughput understate the server"
    return check("client_cpu_saturation", not saturated, msg)


def littles_law(obs: RunObservations) -> dict[str, Any] | None:
    """L = lambda * W: time-averaged in-flight requests vs arrival rate x mean time in system."""
    if obs.inflight_mean is None or obs.duration_s <= 0 or not obs.rows:
        return None
    spans = [r.end_s - r.start_s for r in obs.rows if r.end_s is not None]
    if not spans:
        return None
    lam = len(obs.rows) / obs.duration_s
    w = float(np.mean(spans))
    lw = lam * w
    ref = max(obs.inflight_mean, 1e-9)
    err = abs(lw - obs.inflight_mean) / ref
    ok = err <= LITTLE_TOLERANCE or abs(lw - obs.inflight_mean) < 0.5
    msg = (
        f"lambda*W = {lam:.3g}/s x {w:.3g} s = {lw:.3g}; sampled in-flight mean "
        f"{obs.inflight_mean:.3g}"
    )
    if obs.concurrency is not None and obs.load == "concurrency":
        msg += f"; configured concurrency {obs.concurrency}"
    if obs.scrape is not None:
        run = obs.scrape.mean("vllm:num_requests_running")
        wait = obs.scrape.mean("vllm:num_requests_waiting")
        if run is not None:
            msg += f"; server running+waiting mean {run + (wait or 0):.3g}"
    return check("littles_law", ok, msg)


def output_length_mismatch(obs: RunObservations) -> dict[str, Any] | None:
    rows = [r for r in obs.rows if r.ok and r.output_tokens and r.output_len_target]
    if not rows:
        return None
    bad = [r for r in rows if r.output_tokens != r.output_len_target]
    frac = len(bad) / len(rows)
    ok = frac <= OUTPUT_MISMATCH_LIMIT
    msg = f"{len(bad)}/{len(rows)} successful requests returned a different output length"
    if bad:
        got = float(np.mean([r.output_tokens or 0 for r in bad]))
        want = float(np.mean([r.output_len_target or 0 for r in bad]))
        msg += f" (mean {got:.1f} tokens vs {want:.1f} planned)"
    if not ok:
        accepted = [k for k in ("ignore_eos", "min_tokens") if obs.features.get(k)]
        msg += f"; server accepted {accepted or 'neither ignore_eos nor min_tokens'}"
    return check("output_length_mismatch", ok, msg)


def token_reconciliation(obs: RunObservations) -> dict[str, Any]:
    """Client usage vs server counters, and chunk-counted vs usage-reported tokens."""
    client_out = sum(r.output_tokens or 0 for r in obs.all_rows)
    client_in = sum(r.prompt_tokens or 0 for r in obs.all_rows)
    ok_rows = [r for r in obs.rows if r.ok and r.output_tokens]
    chunk_sum = sum(sum(r.chunk_tokens or []) for r in ok_rows)
    usage_sum = sum(r.output_tokens or 0 for r in ok_rows)
    parts = [f"client chunk-counted {chunk_sum} vs usage {usage_sum} output tokens"]
    ok = True
    gen = obs.scrape.delta("vllm:generation_tokens_total") if obs.scrape else None
    prm = obs.scrape.delta("vllm:prompt_tokens_total") if obs.scrape else None
    if gen is not None:
        parts.append(f"server generated {gen:.0f} vs client usage {client_out}")
        if client_out and abs(gen - client_out) / client_out > TOKEN_RECONCILE_TOLERANCE:
            ok = False
    if prm is not None:
        parts.append(f"server prompt {prm:.0f} vs client usage {client_in}")
    if gen is None and prm is None:
        parts.append("server token counters not available")
    msg = "; ".join(parts)
    if not ok:
        msg += " (failed or dropped requests, or traffic from other clients, explain a gap)"
    return check("token_reconciliation", ok, msg)


def kv_sizing(obs: RunObservations) -> dict[str, Any]:
    s = obs.scrape
    if s is None or s.scrapes_ok == 0:
        return check("kv_sizing", True, "no server metrics scraped; KV sizing not verified")
    pre = s.delta("vllm:num_preemptions_total")
    kv = s.kv_usage_max()
    problems = []
    if pre is not None and pre > 0:
        problems.append(f"{pre:.0f} preemptions")
    if kv is not None and kv >= KV_USAGE_LIMIT:
        problems.append(f"KV cache usage reached {kv:.2f}")
    if problems:
        return check("kv_sizing", False, "KV sizing of the plan is invalid: " + ", ".join(problems))
    bits = []
    if pre is not None:
        bits.append("0 preemptions")
    if kv is not None:
        bits.append(f"max KV usage {kv:.2f}")
    return check("kv_sizing", True, ", ".join(bits) or "server exposes no KV metrics")


def prompt_calibration(
    rows: Sequence[RequestRecord],
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Deviation of server-reported prompt tokens from their targets (tokenizer metadata)."""
    pairs = [
        (r.prompt_tokens, r.input_len_target)
        for r in rows
        if r.prompt_tokens is not None and r.input_len_target
    ]
    if not pairs:
        return None, None
    dev = np.asarray([(got - want) / want for got, want in pairs])
    stats = {
        "requests": len(pairs),
        "mean_deviation": float(dev.mean()),
        "mean_abs_deviation": float(np.abs(dev).mean()),
        "max_abs_deviation": float(np.abs(dev).max()),
    }
    ok = stats["mean_abs_deviation"] <= 0.05
    msg = (
        f"server prompt tokens deviate from targets by {stats['mean_abs_deviation'] * 100:.1f}%"
        f" on average (max {stats['max_abs_deviation'] * 100:.1f}%)"
    )
    return stats, check("prompt_length_calibration", ok, msg)


def run_all(obs: RunObservations) -> list[dict[str, Any]]:
    checks = [
        offered_vs_achieved(obs),
        schedule_lag(obs),
        client_cpu(obs),
        littles_law(obs),
        output_length_mismatch(obs),
        token_reconciliation(obs),
        kv_sizing(obs),
    ]
    return [c for c in checks if c is not None]
