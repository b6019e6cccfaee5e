"""Continuous batching in steady state: capacity and latency without a simulation.

The recommendation search asks, for hundreds of candidates, "what is the highest request rate
this replica serves inside the SLO?". The discrete-event simulator answers one rate in tens of
milliseconds and a bisection needs ten of them. This module answers a rate with a handful of
step evaluations, priced by the simulator's own step time
(:func:`planner.perf.step_time.step_features` on the same
:class:`~planner.perf.deployment.Deployment` and coefficients): the two differ only in how they
treat the queue, never in what a step costs.

Steady state of vLLM's scheduler, per replica, parametrised by ``u``, the requests arriving per
engine step (at rate ``lambda``, ``u = lambda x T``):

- **the batch**: arrivals equal completions, so a step holds ``d = u (O - 1)`` decoding
  sequences (each decodes ``O - 1`` tokens, one a step) attending to ``I + O/2`` tokens on
  average, and prompts are prefilled in chunks of what the decodes leave of the token budget
  (``R = max_num_batched_tokens - d``; ``k = ceil(I / R)`` chunks a prompt; vLLM with
  pipeline parallelism ``p`` schedules ``p`` budgets a step, at most one of a prompt:
  :func:`planner.perf.step_time.macro_step_token_budget`);
- **the step**: a step with no prompt in it is a decode step, ``T_d = c . x(d decodes)``; a
  step with a chunk costs ``T_p = c . x(d decodes + the chunk)`` (a prefill turns a
  memory-bound step compute-bound, so the two are priced apart, not averaged); a share ``f`` of
  the steps hold a chunk (the prompts' work over the budget, at least the chance that one
  arrived), and the mean step is ``T = (1 - f) T_d + f T_p``. Then ``lambda = u / T``:
  everything follows from ``u``, no fixed point to iterate. What the prompts in one step add
  is ``F`` once and ``w`` each (:func:`_prompt_costs`: an MoE prefill run without CUDA graphs
  is bound by its launches, which the prompts batched together pay once), and the queues
  below price it so;
- **capacity**: the rate grows with ``u`` until the prompts fill the budget (``f -> 1``), the
  batch reaches ``max_num_seqs``, or the KV cache is full (the mean of the running contexts,
  rounded to blocks); :func:`SteadyStateModel.saturated` is that rate;
- **TTFT** = waiting for a seat (when the batch is bounded by ``max_num_seqs`` or the KV cache:
  an Erlang-C queue of ``c`` seats, each held for a request's residence) + queueing behind
  earlier prompts for the budget (an M/D/1 queue, service ``s = (I / R) T_full`` seconds; its
  tail from the Cramer-Lundberg approximation ``P(W > t) ~ C exp(-theta t)``) + the rest of the
  step in flight when the budget is idle + its own ``k`` prefill steps + for a served engine
  the request's fixed path to its first streamed token (the fitted ``request_path`` term,
  :func:`planner.perf.step_time.request_path_s`, as the simulator adds it);
- **TPOT** of a request = the mean of its ``O - 1`` decode steps: ``T_d`` plus, for each step
  that held a chunk, ``T_p - T_d``; the number of such steps is binomial (``n``, ``f``), and
  the neighbours decoding beside it vary around ``d``. Its quantile is taken over the request
  mix (the scenario's length distributions, drawn as the simulator draws them).

A closed loop of ``N`` requests in flight has ``d + u k = N`` (no arrival queue: a request
arrives as one finishes). A finite run starts with all ``N`` at once: that first wave queues
for the prefill; with SGLang and answers of one length every later wave does too (they were
prefilled before any of them decoded, so they finish, and are replaced, together). A served
engine's replacement reaches it the request path ``tau`` after its predecessor's last token
(the simulator's ``closed_loop_turnaround_s``): a seat stands empty ``tau`` of each cycle of
``R + tau`` (``R`` the request's residence), so the rate is ``R / (R + tau)`` of the full
loop's; and with answers of one length on vLLM or TensorRT-LLM, the groups that finish within
``tau`` of each other (``1 + floor(tau / (k T_d))`` of them, ``k T_d`` apart; a wave of one
group finishes together) send their replacements together. Those reach the engine one after
another, the simulator's ``FRONT_END_SPACING x tau`` apart: the first is prefilled alone and
the rest, arrived meanwhile, queue behind it in groups as the first wave's did (SGLang's
later waves the same).

SGLang (prefill first, as :mod:`planner.perf.simulator` schedules it: scheduler.py
``get_next_batch_to_run`` runs a prefill batch *instead of* the decode step, never mixed by
default): a "step" is one decode step and the prefill batches run before it. The step that
holds a chunk costs ``T_p = T_d + c . x(the chunks alone)`` (the decodes wait through the
batch, then take their step), the chunk budget is ``chunked_prefill_size`` whole (the decodes
do not share it: ``R = B``), and a prompt's own time to its first token is its batches alone,
``k (T_p - T_d)`` (the extend batch samples the first token; no decode step follows it). In a
closed loop the batches of a group are extra steps in every running request's life: with
``u`` arrivals a decode step, ``s = u k / g`` batches of ``g`` prompts a decode step and
``T_a`` one such batch alone, ``N = u d_n + u k T_a / (T_d + s T_a)`` (Little's law over
``k`` batches and ``d_n`` decode steps a request), solved for ``u`` by fixed-point iteration;
with answers of one length the loop runs in waves instead: the wave's batches one after
another (``W``), then ``d_n`` decode steps of all ``N``: ``rate = N / (W + d_n T_d(N))``.
Without chunked prefill a batch takes prompts up to ``max_prefill_tokens`` (16,384; the first
always). Agreement with the simulator is printed by
``benchmarks/recommend_bench.py`` and pinned by ``tests/planner/perf/test_steady_state.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Literal

import numpy as np

from planner.engine import SGLANG_MAX_PREFILL_TOKENS
from planner.perf.deployment import Deployment
from planner.perf.edge_search import EdgeHint, bracket_from, hint_of, last_inside, margin_of
from planner.perf.simulator import FRONT_END_SPACING
from planner.perf.step_time import (
    IDX,
    StepBatch,
    deployment_request_path_s,
    macro_step_token_budget,
    step_features,
)
from planner.workload import LengthDistribution, draw_lengths

Bound = Literal["token_budget", "max_num_seqs", "kv_cache", "none"]
_LAYER_FLOOR = IDX["layer_floor"]
#: requests drawn from the length distributions to take quantiles over the request mix
LENGTH_SAMPLES = 512


class Workload:
    """The request mix of a scenario (drawn as the simulator draws it), with the figures the
    steady state reads over and over computed once."""

    def __init__(self, input_len: np.ndarray, output_len: np.ndarray) -> None:
        self.input_len = np.asarray(input_len, dtype=float)
        self.output_len = np.asarray(output_len, dtype=float)
        self.mean_input = float(self.input_len.mean())
        self.mean_output = float(self.output_len.mean())
        steps = np.maximum(self.output_len - 1, 0)
        #: mean tokens a decoding sequence attends to (weighted by its decode steps)
        self.decode_context = (
            float((steps * (self.input_len + self.output_len / 2.0)).sum() / steps.sum())
            if steps.sum() > 0
            else self.mean_input
        )
        decoding = steps[steps > 0]
        #: typical decode lengths of the mix (8 bins; one value for fixed lengths)
        self.decode_bins = (
            np.quantile(decoding, np.linspace(1 / 16, 15 / 16, 8))
            if decoding.size and np.ptp(decoding)
            else decoding[:1]
        )
        self._output_quantiles: dict[float, float] = {}
        #: every request asks for the same answer length (a closed loop stays in waves)
        self.fixed_output = bool(np.ptp(self.output_len) == 0) if self.output_len.size else True

    def output_quantile(self, q: float) -> float:
        held = self._output_quantiles.get(q)
        if held is None:
            held = self._output_quantiles[q] = float(np.quantile(self.output_len, q))
        return held


def workload_of(dep: Deployment) -> Workload:
    """The scenario's lengths as the simulator draws them (a trace: its own requests)."""
    sc = dep.scenario
    if sc.load == "trace" and sc.trace:
        ins = np.array([r.input_len for r in sc.trace], dtype=float)
        outs = np.array([r.output_len for r in sc.trace], dtype=float)
        return Workload(ins, outs)
    ins_dist = sc.input_dist or LengthDistribution.fixed(int(sc.input_len or 1))
    outs_dist = sc.output_dist or LengthDistribution.fixed(int(sc.output_len or 1))
    return _drawn(ins_dist, outs_dist, sc.seed)


@lru_cache(maxsize=64)
def _drawn(ins: LengthDistribution, outs: LengthDistribution, seed: int) -> Workload:
    """One draw per workload, shared by every deployment searched for it."""
    drawn_in, drawn_out = draw_lengths(ins, outs, LENGTH_SAMPLES, seed)
    return Workload(np.asarray(drawn_in, dtype=float), np.asarray(drawn_out, dtype=float))


@dataclass(frozen=True)
class SteadyState:
    """One replica in steady state at ``rate`` requests/s (times in seconds)."""

    rate: float  # requests/s (per replica)
    arrivals_per_step: float  # u
    step_s: float  # mean step, T
    decode_step_s: float  # T_d
    prefill_step_s: float  # T_p: a step holding one chunk
    prefill_step_share: float  # f
    decode_seqs: float
    running: float
    chunks: int
    kv_occupancy: float
    ttft_mean_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_mean_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    e2e_p99_s: float
    output_tok_per_s: float
    stable: bool  # below capacity: the queues drain
    bound: Bound  # what caps the rate (at saturation), else "none"
    step_terms: np.ndarray  # x of the mean step (shares of the terms, for intervals)


@dataclass(frozen=True)
class _Step:
    u: float
    decode: float
    room: float
    chunks: int
    share: float  # f
    decode_s: float
    prefill_s: float  # one chunk beside the decodes
    mean_s: float
    terms: np.ndarray
    second_s: float  # what a second chunk adds to a step holding one (its marginal cost)


def _prompt_costs(st: _Step) -> tuple[float, float]:
    """(``F``, ``w``): what the prompts in a step add to it, ``F`` once and ``w`` each
    (``F + w A`` for ``A >= 1`` prompts). ``w`` is a second prompt's cost, ``F`` what the first
    costs beyond it: an MoE prefill run without CUDA graphs is bound by its launches
    (:mod:`planner.perf.step_time`'s ``eager_floor``), which the prompts batched in one step
    pay once. 0 and the whole prompt's cost where that is linear."""
    delta = max(st.prefill_s - st.decode_s, 0.0)
    w = min(max(st.second_s, 0.0), delta)
    return delta - w, w


class SteadyStateModel:
    """Steady-state questions for one deployment and coefficient vector."""

    def __init__(self, dep: Deployment, c: np.ndarray, workload: Workload | None = None):
        self.dep = dep
        self.c = np.asarray(c, dtype=float)
        self.work = workload or workload_of(dep)
        # the resolved engine's (None in a scenario: the engine's default, on for vLLM and
        # SGLang, off for TensorRT-LLM's server), as the simulator reads it
        self.chunked = dep.engine.enable_chunked_prefill
        # a macro-step's tokens (vLLM with PP: one budget a micro-batch in flight), and the
        # most of one prompt in it (:func:`planner.perf.step_time.macro_step_token_budget`)
        self.budget = float(macro_step_token_budget(dep))
        self.chunk_cap = float(dep.max_num_batched_tokens)
        #: SGLang: prefill batches run alone, before the decode step (see the module docstring)
        self.prefill_first = dep.family == "sglang"
        if not self.chunked:
            # a whole prompt is scheduled in one step (vLLM raises the budget to fit it;
            # SGLang's batch takes prompts up to max_prefill_tokens, the first always)
            fit = SGLANG_MAX_PREFILL_TOKENS if self.prefill_first else dep.max_num_batched_tokens
            self.budget = float(max(fit, dep.engine.max_model_len or 0))
            self.chunk_cap = self.budget
        #: a served request's fixed path to its first token (``request_path``), seconds
        self.path_s = deployment_request_path_s(self.c, dep)
        self.seats = self._seats()
        self._steps: dict[float, _Step] = {}
        self._saturation: tuple[float, Bound] | None = None
        self._closed: dict[tuple[float, float, int | None], SteadyState] = {}
        self._wave_steps: dict[tuple[float, int], float] = {}
        self.evaluations = 0  # latency states computed (for the benchmarks)

    def _seats(self) -> float:
        """Requests the batch holds at once: max_num_seqs, or what the KV cache holds of
        running contexts (each at its mean, rounded up to a block)."""
        per_seq = self.work.decode_context + self.dep.block_size / 2.0
        return float(min(self.dep.max_num_seqs, self.dep.kv_capacity_tokens / max(per_seq, 1.0)))

    # ----- steps ---------------------------------------------------------------------------
    def _terms(self, decode: float, chunks: float, chunk: float, done: float) -> np.ndarray:
        w, window = self.work, self.dep.sliding_window
        if self.prefill_first and decode > 0 and chunks > 0:
            # SGLang: the prefill batch alone, then the decode step
            alone = self._terms(0.0, chunks, chunk, done)
            return alone + self._terms(decode, 0.0, 0.0, 0.0)
        batch = StepBatch()
        if decode > 0:
            batch.add_decode(decode, w.decode_context, window)
        if chunks > 0:
            batch.add_prefill(chunks, chunk, done, window)
        if decode <= 0 and chunks <= 0:
            batch.add_decode(1.0, w.decode_context, window)  # an idle engine's next step
        return step_features(batch, self.dep)

    def _poisson_terms(self, decode: float, chunks: float, chunk: float, done: float) -> np.ndarray:
        """:meth:`_terms` with the layer floor averaged over the running batch's spread.

        The floor, max(0, layers x unit - roofline) (:mod:`planner.perf.step_time`), is convex
        in the batch, so the floor of the mean batch is less than the mean floor. Under Poisson
        arrivals with continuous batching the number of running requests is Poisson (an
        M/G/infinity count, mean = arrival rate x time in service); its mean floor is taken by
        the three-point Gauss-Hermite rule over the normal approximation (variance = mean):
        mean -/+ sqrt(3 x mean) with weights 1/6, 4/6, 1/6 (exact up to degree-5 polynomials).
        Only the floor moves: every other term is linear in the batch (or nearly), where the
        mean batch prices the mean step."""
        terms = self._terms(decode, chunks, chunk, done)
        if decode <= 0.0 or self.c[_LAYER_FLOOR] == 0.0:
            return terms
        half = math.sqrt(3.0 * decode)
        low = self._terms(max(decode - half, 0.0), chunks, chunk, done)[_LAYER_FLOOR]
        high = self._terms(decode + half, chunks, chunk, done)[_LAYER_FLOOR]
        out = terms.copy()
        out[_LAYER_FLOOR] = (low + 4.0 * terms[_LAYER_FLOOR] + high) / 6.0
        return out

    def step(self, u: float) -> _Step:
        held = self._steps.get(u)
        if held is not None:
            return held
        mean_in = self.work.mean_input
        decode, room, chunks = self._shape(u)
        chunk = mean_in / chunks
        done = chunk * (chunks - 1) / 2.0  # mean tokens before a chunk
        # share of steps holding a chunk: the prompts' share of the budget, and at least the
        # chance that a step sees one of the u k chunks it is due
        work_share = u * mean_in / room
        share = min(1.0, max(work_share, 1.0 - math.exp(-u * chunks)))
        per_prefill_step = u * chunks / share if share > 0 else 0.0  # chunks in such a step
        decode_terms = self._poisson_terms(decode, 0.0, 0.0, 0.0)
        prefill_terms = self._poisson_terms(decode, per_prefill_step, chunk, done)
        one_chunk = self._poisson_terms(decode, 1.0, chunk, done)
        two_chunks = self._poisson_terms(decode, 2.0, chunk, done)
        terms = (1.0 - share) * decode_terms + share * prefill_terms
        held = _Step(
            u=u,
            decode=decode,
            room=room,
            chunks=chunks,
            share=share,
            decode_s=float(self.c @ decode_terms),
            prefill_s=float(self.c @ one_chunk),
            mean_s=float(self.c @ terms),
            terms=terms,
            second_s=float(self.c @ (two_chunks - one_chunk)),
        )
        if len(self._steps) < 4096:
            self._steps[u] = held
        return held

    def _shape(self, u: float) -> tuple[float, float, int]:
        """(decoding sequences, budget room, chunks a prompt) at ``u``: no step pricing."""
        w = self.work
        decode = u * max(w.mean_output - 1.0, 0.0)
        # SGLang's prefill batches do not hold the decodes: the whole chunk budget is theirs
        room = self.budget if self.prefill_first else max(self.budget - decode, 1.0)
        per_step = min(room, self.chunk_cap)
        chunks = max(1, math.ceil(w.mean_input / per_step)) if self.chunked else 1
        return decode, room, chunks

    def bound_at(self, u: float) -> Bound:
        decode, room, chunks = self._shape(u)
        if u * self.work.mean_input >= room * 0.999:
            return "token_budget"
        if decode + u * chunks >= self.seats:
            return "max_num_seqs" if self.seats >= self.dep.max_num_seqs else "kv_cache"
        return "none"

    def rate_at(self, u: float) -> float:
        st = self.step(u)
        return u / st.mean_s if st.mean_s > 0 else 0.0

    def saturation(self) -> tuple[float, Bound]:
        """The most arrivals per step the replica absorbs, and what bounds them."""
        if self._saturation is None:
            hi = 1e-3
            while self.bound_at(hi) == "none" and hi < 1e6:
                hi *= 2.0
            lo = 0.0
            for _ in range(40):
                mid = (lo + hi) / 2.0
                if self.bound_at(mid) == "none":
                    lo = mid
                else:
                    hi = mid
            self._saturation = (lo, self.bound_at(hi))
        return self._saturation

    def saturation_rate(self) -> float:
        return self.rate_at(self.saturation()[0])

    def utilisation(self, rate: float) -> float | None:
        """``rate`` (requests/s offered to this scheduler) over :meth:`saturation_rate`; None
        where the deployment absorbs nothing."""
        saturation = self.saturation_rate()
        return rate / saturation if saturation > 0.0 else None

    def u_for_rate(self, rate: float) -> float | None:
        """Arrivals per step at ``rate`` requests/s; None at or beyond capacity."""
        u_max, _ = self.saturation()
        if rate >= self.rate_at(u_max):
            return None
        lo, hi = 0.0, u_max
        for _ in range(50):
            mid = (lo + hi) / 2.0
            if self.rate_at(mid) < rate:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2.0

    # ----- states --------------------------------------------------------------------------
    def at_rate(self, rate: float, quantile: float = 0.99) -> SteadyState:
        """The steady state at ``rate`` requests/s (Poisson arrivals); beyond capacity the
        state at capacity with infinite TTFT (``stable`` False)."""
        u = self.u_for_rate(rate)
        if u is None:
            u_max, bound = self.saturation()
            return self._open_loop(u_max, quantile, stable=False, bound=bound)
        return self._open_loop(u, quantile, stable=True, bound="none")

    def at_concurrency(
        self, in_flight: float, quantile: float = 0.99, run_requests: int | None = None
    ) -> SteadyState:
        """A closed loop of ``in_flight`` requests (a new one as one finishes).

        The prompts that arrive together share a prefill step: a group of as many as the
        budget holds, and groups stay staggered. Beyond the seats of the batch the rest wait,
        a residence each round. ``run_requests``: a finite run that starts with all
        ``in_flight`` at once (as the simulator and ``vllm bench serve`` do): its first wave
        queues for the prefill, and that wave's share of the run sets the TTFT tail.

        Memoised: a capacity search for another SLO or another concurrency ceiling asks the
        same loads again (a closed loop's loads are whole requests)."""
        key = (in_flight, quantile, run_requests)
        held_state = self._closed.get(key)
        if held_state is None:
            held_state = self._at_concurrency(in_flight, quantile, run_requests)
            if len(self._closed) < 4096:
                self._closed[key] = held_state
        return held_state

    def _at_concurrency(
        self, in_flight: float, quantile: float, run_requests: int | None
    ) -> SteadyState:
        self.evaluations += 1
        w, dep = self.work, self.dep
        mean_in, n_dec = w.mean_input, max(w.mean_output - 1.0, 0.0)
        held = max(min(in_flight, self.seats), 1.0)
        per_step = max(1.0, math.floor(self.budget / max(mean_in, 1.0)))
        group = min(held, per_step)
        group_steps = self._group_steps(group)
        u = held / (group_steps + n_dec)
        decode = u * n_dec
        share = min(1.0, u / group * group_steps)
        chunk = mean_in / group_steps  # of each prompt of the group, a step
        decode_terms = self._terms(decode, 0.0, 0.0, 0.0)
        prefill_terms = self._terms(decode, group, chunk, chunk * (group_steps - 1) / 2.0)
        if self.prefill_first and w.fixed_output and n_dec > 0:
            # SGLang, answers of one length: the loop runs in waves (module docstring): the
            # wave's batches one after another, then n_d decode steps of all N together
            alone = self._terms(0.0, group, chunk, chunk * (group_steps - 1) / 2.0)
            groups = math.ceil(held / group)
            sizes = [group] * (groups - 1) + [held - group * (groups - 1)]
            wave_s = sum(group_steps * self._wave_step_s(size, group_steps) for size in sizes)
            u = held / n_dec  # arrivals a decode step
            decode = held
            decode_terms = self._terms(decode, 0.0, 0.0, 0.0)
            cycle = wave_s + n_dec * float(self.c @ decode_terms)
            prefill_terms = decode_terms + alone
            share = groups * group_steps / n_dec
            # the mean step of the cycle (its terms: the full groups' batches, for intervals)
            terms = decode_terms + share * alone
            terms = terms * (cycle / n_dec / float(self.c @ terms))
        elif self.prefill_first:
            # SGLang: u from N = u d_n + u k T_a / T (module docstring), T = T_d + s T_a
            alone = self._terms(0.0, group, chunk, chunk * (group_steps - 1) / 2.0)
            t_a = float(self.c @ alone)
            for _ in range(30):
                decode = u * n_dec
                decode_terms = self._terms(decode, 0.0, 0.0, 0.0)
                mean = float(self.c @ decode_terms) + u / group * group_steps * t_a
                u_next = held / (n_dec + group_steps * t_a / mean) if mean > 0 else u
                if abs(u_next - u) <= 1e-9 * max(u, 1e-12):
                    u = u_next
                    break
                u = u_next
            decode = u * n_dec
            decode_terms = self._terms(decode, 0.0, 0.0, 0.0)
            prefill_terms = decode_terms + alone
            share = u / group * group_steps  # batches a decode step: may exceed one
        t_d, t_p = float(self.c @ decode_terms), float(self.c @ prefill_terms)
        if self.prefill_first and w.fixed_output and n_dec > 0:
            pass  # the wave's cycle, above
        elif self.prefill_first:
            terms = decode_terms + share * (prefill_terms - decode_terms)
        else:
            terms = (1.0 - share) * decode_terms + share * prefill_terms
        step = float(self.c @ terms)
        rate = u / step if step > 0 else 0.0
        # its own steps to the first token (SGLang's: the batches alone)
        own = group_steps * (t_p - t_d if self.prefill_first else t_p)
        residence = own + n_dec * step
        # a served loop's replacement reaches the engine the request path after its
        # predecessor's last token (the simulator's closed_loop_turnaround_s): each seat
        # stands empty that long a cycle (Little's law), and with answers of one length
        # the replacements of the groups that finish within it arrive together and queue
        # as the first wave did (below)
        turnaround = self.path_s
        if turnaround > 0 and residence > 0:
            rate *= residence / (residence + turnaround)
        waiting = max(in_flight - held, 0.0) / held * residence
        ttft_q, ttft_mean = own, own
        # the decode steps a request lives through: a share of them hold a group's prefill
        held_share = min(share, 1.0)
        spread = (t_p - t_d) * math.sqrt(held_share * (1.0 - held_share) / max(n_dec, 1.0))
        tpot_q = step + NormalDist().inv_cdf(quantile) * spread
        tpot_mean = step
        if run_requests:
            # the first wave: groups one after another from an empty engine, the j-th prompt
            # done when its group's steps end; the rest of the run at its own prefill
            groups = math.ceil(held / group)
            sizes = [group] * (groups - 1) + [held - group * (groups - 1)]
            ends = np.cumsum([group_steps * self._wave_step_s(size, group_steps) for size in sizes])
            wave = np.repeat(ends, [max(1, round(size)) for size in sizes])
            n_rest = max(run_requests - wave.size, 0)
            # how many groups' replacements arrive together, and the share of the run's rounds
            # that clump so
            regimes: list[tuple[int, float]] = [(0, 1.0)]
            if self.prefill_first and w.fixed_output:
                # SGLang: every prompt of a wave is prefilled before any of them decodes, so
                # answers of one length finish together and the next wave arrives together:
                # each queues for the prefill batches as the first did
                regimes = [(groups, 1.0)]
            elif w.fixed_output and n_dec > 0 and turnaround > 0 and t_d > 0:
                # vLLM, TensorRT-LLM: the groups finish their group_steps decode steps apart;
                # the replacements of those that finish within the turnaround arrive together
                # and queue behind each other's prefills, as the first wave's groups did. A
                # turnaround of x spacings clumps 1 + floor(x) groups; the rounds are split
                # between that and one group more by the fraction of x, as the steps' jitter
                # splits them, so that the tail does not flip with one request more when x
                # crosses a whole number (with the floor alone, Llama-3.1-70B at PP 2 on two
                # H100 nodes: p99 TTFT 2.42 s at 16 in flight, 2.26 s at 17)
                x = turnaround / (group_steps * t_d)
                k = math.floor(x)
                regimes = [(min(groups, 1 + k), 1.0 - (x - k)), (min(groups, 2 + k), x - k)]
            parts: list[np.ndarray] = []
            left, queued_share = n_rest, 0.0
            for i, (clump, weight) in enumerate(regimes):
                m = left if i == len(regimes) - 1 else min(left, round(weight * n_rest))
                left -= m
                queued = clump > 1 or (self.prefill_first and w.fixed_output)
                # a whole wave of one group, finished before its first replacement came back,
                # returns together too
                queued = queued or (clump >= groups and turnaround > 0)
                if not queued or m == 0:
                    parts.append(np.full(m, own))
                    continue
                counts = [max(1, round(size)) for size in sizes[:clump]]
                returning = wave[: sum(counts)]
                if turnaround > 0:
                    # through a server's front end, one after another (_returning_wave)
                    returning = self._returning_wave(sum(counts), group, group_steps, turnaround)
                parts.append(np.resize(returning, m))
                queued_share += m / max(n_rest, 1)
            ttfts = np.concatenate([wave, *parts])
            ordered = np.sort(ttfts)
            ttft_q = max(own, _linear_quantile(ordered, quantile))
            ttft_mean = float(ttfts.sum()) / ttfts.size
            if queued_share > 0:  # the p50 below, as far as the rounds queue
                p50 = _linear_quantile(ordered, 0.5)
                own = (1.0 - queued_share) * own + queued_share * p50
            if w.fixed_output:
                # it stays a wave: a request decodes beside the later groups' prefills only
                later = (groups - 1) * group_steps * (t_p - t_d) / max(n_dec, 1.0)
                tpot_q = t_d + later
                tpot_mean = t_d + later / 2.0
        ttft_q, ttft_mean = ttft_q + waiting + self.path_s, ttft_mean + waiting + self.path_s
        kv = decode * w.decode_context + (held - decode) * mean_in / 2.0
        kv += held * dep.block_size / 2.0
        return SteadyState(
            rate=rate,
            arrivals_per_step=u,
            step_s=step,
            decode_step_s=t_d,
            prefill_step_s=t_p,
            prefill_step_share=share,
            decode_seqs=decode,
            running=held,
            chunks=group_steps,
            kv_occupancy=min(kv / max(dep.kv_capacity_tokens, 1), 1.0),
            ttft_mean_s=ttft_mean,
            ttft_p50_s=own + waiting + self.path_s,
            ttft_p99_s=ttft_q,
            tpot_mean_s=tpot_mean,
            tpot_p50_s=tpot_mean,
            tpot_p99_s=tpot_q,
            e2e_p99_s=ttft_q + (w.output_quantile(quantile) - 1.0) * tpot_q,
            output_tok_per_s=rate * w.mean_output,
            stable=True,
            bound="none" if in_flight < self.seats else self.bound_at(self.saturation()[0]),
            step_terms=terms,
        )

    def _open_loop(self, u: float, quantile: float, *, stable: bool, bound: Bound) -> SteadyState:
        """The state at ``u`` (a capacity search compares only its limits with an SLO:
        :meth:`_margin_at`)."""
        self.evaluations += 1
        dep, w = self.dep, self.work
        st = self.step(u)
        rate = u / st.mean_s if st.mean_s > 0 else 0.0
        mean_in = w.mean_input
        parts, own, queues_drain = self._ttft_parts(st, rate)
        stable = stable and queues_drain
        if stable:
            ttft_q = _sum_quantile(parts, quantile) + own
            ttft_p50 = _sum_quantile(parts, 0.5) + own
            ttft_mean = sum(p.mean for p in parts) + own
        else:
            ttft_q = ttft_p50 = ttft_mean = math.inf
        tpot_mean, tpot_q, tpot_p50 = self._tpot(st, rate, quantile)
        e2e_q = ttft_q + (w.output_quantile(quantile) - 1.0) * tpot_q
        kv = st.decode * w.decode_context + u * st.chunks * mean_in / 2.0
        kv += (st.decode + u * st.chunks) * dep.block_size / 2.0
        return SteadyState(
            rate=rate,
            arrivals_per_step=u,
            step_s=st.mean_s,
            decode_step_s=st.decode_s,
            prefill_step_s=st.prefill_s,
            prefill_step_share=st.share,
            decode_seqs=st.decode,
            running=st.decode + u * st.chunks,
            chunks=st.chunks,
            kv_occupancy=min(kv / max(dep.kv_capacity_tokens, 1), 1.0),
            ttft_mean_s=ttft_mean,
            ttft_p50_s=ttft_p50,
            ttft_p99_s=ttft_q,
            tpot_mean_s=tpot_mean,
            tpot_p50_s=tpot_p50,
            tpot_p99_s=tpot_q,
            e2e_p99_s=e2e_q,
            output_tok_per_s=rate * w.mean_output,
            stable=stable,
            bound=bound,
            step_terms=st.terms,
        )

    def _ttft_parts(
        self, st: _Step, rate: float
    ) -> tuple[list[_Wait | _Uniform | _Gamma], float, bool]:
        """The waits a prompt's TTFT sums at ``rate`` (seconds), its fixed part (its own
        prefill steps) and whether the queues drain."""
        mean_in = self.work.mean_input
        residence = st.chunks * st.prefill_s + (self.work.mean_output - 1.0) * st.mean_s
        seat = _erlang_wait(self.seats, rate, residence)
        if self.chunked and mean_in > st.room:
            # a prompt fills the budget for I / R steps: prompts are served one after another
            service = (mean_in / st.room) * st.prefill_s
            rho = rate * service
            # SGLang: the batches alone (the first token is sampled by the last one)
            own_step = st.prefill_s - st.decode_s if self.prefill_first else st.prefill_s
            own = st.chunks * own_step + self.path_s
            parts: list[_Wait | _Uniform | _Gamma] = [
                _MD1(rate, service),
                seat,
                _Uniform(st.decode_s, 1.0 - rho),
            ]
            return parts, own, rho < 1.0 and seat.stable
        # prompts that fit the budget are served together: those that arrived during the
        # step in flight share the next step (its length grows with them)
        bulk = self._bulk(st, rate)
        return [bulk, seat], bulk.fixed_s + self.path_s, bulk.load < 1.0 and seat.stable

    def _margin_at(
        self, u: float, quantile: float, limits: tuple[float | None, ...]
    ) -> tuple[str | None, float]:
        """(the first limit the state at ``u`` breaks, as :func:`_broken` says, or None; how
        far beyond the limits it is, :func:`~planner.perf.edge_search.margin_of` of the worst:
        > 0 exactly when one is broken), without computing the state's quantiles: a latency
        meets its limit when its tail at the limit is at most ``1 - quantile``
        (``P(TTFT > limit) <= 1 - q`` is ``TTFT_q <= limit``), one evaluation of the summed
        survival instead of a bisection for the quantile; the margin of a tail is its ratio
        to ``1 - q``."""
        self.evaluations += 1
        ttft_limit, tpot_limit, e2e_limit = limits
        st = self.step(u)
        rate = u / st.mean_s if st.mean_s > 0 else 0.0
        parts, own, stable = self._ttft_parts(st, rate)
        if not stable:
            return ("ttft" if ttft_limit is not None else "saturation"), math.inf
        tail = 1.0 - quantile
        broken: str | None = None
        worst = -math.inf
        if ttft_limit is not None:
            worst = margin_of(_sum_survival(parts, ttft_limit - own), tail)
            if worst > 0.0:
                broken = "ttft"
        if tpot_limit is None and e2e_limit is None:
            return broken, worst
        _, tpot_q, _ = self._tpot(st, rate, quantile)
        if tpot_limit is not None:
            found = margin_of(tpot_q, tpot_limit)
            if found > 0.0 and broken is None:
                broken = "tpot"
            worst = max(worst, found)
        if e2e_limit is not None:
            decoding = (self.work.output_quantile(quantile) - 1.0) * tpot_q
            found = margin_of(_sum_survival(parts, e2e_limit - decoding - own), tail)
            if found > 0.0 and broken is None:
                broken = "e2e"
            worst = max(worst, found)
        return broken, worst

    def _bulk(self, st: _Step, rate: float) -> _Gamma:
        """TTFT beyond the fixed part (``T_d + F + w``, one step with the prompt alone) when
        the prompts waiting at a step boundary are all served in the next step.

        What prompts add to a step is ``F + w A`` for ``A >= 1`` prompts: ``w`` each (a second
        prompt's cost, :attr:`_Step.second_s`) and ``F`` once, what the first costs beyond
        ``w`` (an eager MoE prefill step's launches, :mod:`planner.perf.step_time`'s
        ``eager_floor``, which the prompts batched in one step pay once; 0 where a prompt's
        cost is linear). Step lengths follow ``X' = T_d + F 1{A > 0} + w A``,
        ``A ~ Poisson(rate X)`` the prompts that arrived during the step before. A prompt
        arrives in a step chosen by its length (length-biased, ``X*``), waits for the rest of
        it (``U X*``), then its own step holds the ``A*`` others that came during ``X*``:
        TTFT = ``U X* + T_d + F + w (1 + A*)``. The variable part is matched by its first two
        moments to a gamma distribution; ``X``'s are taken with ``P(A > 0)`` at its mean
        (fixed point) and its variance by the law of total variance, linearised in ``X``."""
        t_d = st.decode_s
        delta = max(st.prefill_s - t_d, 0.0)
        fixed, w = _prompt_costs(st)
        if rate * w >= 1.0:
            return _Gamma(0.0, 0.0, math.inf, load=rate * w)
        mean_x = (t_d + fixed) / (1.0 - rate * w)
        for _ in range(50):  # P(A > 0) at the mean step
            busy = 1.0 - math.exp(-rate * mean_x)
            updated = (t_d + fixed * busy) / (1.0 - rate * w)
            if abs(updated - mean_x) <= 1e-12 * mean_x:
                break
            mean_x = updated
        load = 1.0 - t_d / mean_x  # share of time prompts add to the steps
        lam = rate * mean_x
        idle = math.exp(-lam)
        # Var(F 1{A>0} + w A | X = mean) and the slope of its mean in X
        cond_var = fixed**2 * idle * (1.0 - idle) + w**2 * lam + 2.0 * fixed * w * lam * idle
        slope = rate * (fixed * idle + w)
        if slope >= 1.0:
            return _Gamma(0.0, 0.0, math.inf, load=max(load, 1.0))
        var_x = cond_var / (1.0 - slope**2)
        m2 = var_x + mean_x**2
        # third moment of X from a gamma with that mean and variance
        shape = mean_x**2 / var_x if var_x > 0 else math.inf
        m3 = m2 * mean_x * (1.0 + 2.0 / shape) if math.isfinite(shape) else mean_x**3
        biased_mean = m2 / mean_x  # E[X*]
        biased_m2 = m3 / mean_x  # E[X*^2]
        # V = U X* + w A*, A* ~ Poisson(rate X*)
        mean_v = biased_mean / 2.0 + w * rate * biased_mean
        e_v2 = (
            biased_m2 / 3.0
            + 2.0 * w * rate * biased_m2 / 2.0
            + w**2 * (rate * biased_mean + rate**2 * biased_m2)
        )
        var_v = max(e_v2 - mean_v**2, 1e-18)
        # SGLang's prompt is done when its prefill batch is, before the decode step runs
        own = delta if self.prefill_first else t_d + delta
        return _Gamma(own, mean_v, var_v, load=load)

    def _returning_wave(
        self, n: int, group: float, group_steps: int, turnaround: float
    ) -> np.ndarray:
        """Seconds from arrival to first token (less the request path) of a closed loop's
        ``n`` replacements that finished together and reach the engine one after another,
        :data:`~planner.perf.simulator.FRONT_END_SPACING` x ``turnaround`` apart, as the
        simulator sends them: the first is prefilled alone (the engine steps as soon as one
        request reaches it), the others, arrived meanwhile, in groups of ``group`` after it
        (each step priced as on an idle engine, as the first wave's groups are)."""
        n = max(1, n)
        steps_one = self._group_steps(1.0)
        first = steps_one * self._wave_step_s(1.0, steps_one)
        if n == 1:
            return np.array([first])
        others = n - 1
        groups = math.ceil(others / group)
        sizes = [group] * (groups - 1) + [others - group * (groups - 1)]
        ends = first + np.cumsum(
            [group_steps * self._wave_step_s(size, group_steps) for size in sizes]
        )
        done = np.repeat(ends, [max(1, round(size)) for size in sizes])[:others]
        arrived = FRONT_END_SPACING * turnaround * np.arange(1, done.size + 1)
        return np.concatenate([[first], np.maximum(done - arrived, first)])

    def _group_steps(self, prompts: float) -> int:
        """Steps a group of ``prompts`` prompts arriving together takes to prefill: one, or
        with chunked prefill as many budgets as they fill and at least one prompt's chunks."""
        if not self.chunked:
            return 1
        mean_in = self.work.mean_input
        own_steps = math.ceil(mean_in / self.chunk_cap)
        return max(1, math.ceil(prompts * mean_in / self.budget), own_steps)

    def _wave_step_s(self, prompts: float, steps: int) -> float:
        """One of the ``steps`` prefill steps of ``prompts`` prompts on an idle engine."""
        held = self._wave_steps.get((prompts, steps))
        if held is None:
            chunk = self.work.mean_input / steps
            terms = self._terms(0.0, prompts, chunk, chunk * (steps - 1) / 2.0)
            held = self._wave_steps[prompts, steps] = float(self.c @ terms)
        return held

    def _full_step_s(self, st: _Step) -> float:
        """A step whose budget is full of prompt tokens beside the decodes."""
        mean_in = self.work.mean_input
        if mean_in >= st.room:
            return st.prefill_s
        per_step = st.room / mean_in  # whole prompts that fit
        return float(self.c @ self._terms(st.decode, per_step, mean_in, 0.0))

    def _tpot(self, st: _Step, rate: float, quantile: float) -> tuple[float, float, float]:
        """Mean, ``quantile`` and median TPOT over the request mix.

        A request decoding ``n`` tokens shares its steps with the prompts that arrive
        meanwhile: each adds its prefill time (``delta``, spread over the request's ``n``
        steps) and then decodes beside it for about half its remaining life (``slope / 2``):
        ``TPOT = a + b N``, ``a`` the decode step with the neighbours it started with,
        ``b = delta / n + slope / 2``. The arrivals ``N`` lengthen its life, during which
        more arrive: ``N`` is a Poisson branching count (immigrants ``rate n a``, offspring
        ``rate n b`` each), the generalised Poisson distribution. What the prompts batched in
        one step pay once (``F``, :func:`_prompt_costs`: an eager MoE prefill's launches) is
        paid by the ``f`` share of steps that hold prompts, whose count over a request's ``n``
        steps is Binomial (``n``, ``f``), less spread than its arrivals' Poisson count once
        prompts share steps: the part of ``F f`` whose spread the arrivals would overstate
        goes to every step (``a``), the rest stays with the arrivals (``delta``)."""
        ns = self.work.decode_bins
        if ns.size == 0:
            return st.mean_s, st.mean_s, st.mean_s
        slope = self._per_decode_seq_s(st.decode)
        # the steps holding prompts among a request's n are Binomial(n, f), not the Poisson
        # count of its arrivals: of their F, the part whose variance the arrivals would
        # overstate (by f / (u (1 - f)): none while prompts seldom share a step) is every step's
        kept = math.sqrt(min(1.0, st.u * (1.0 - st.share) / st.share)) if st.share > 0 else 1.0
        once = (1.0 - kept) * _prompt_costs(st)[0] * st.share
        per_prompt = max(st.mean_s - st.decode_s - once, 0.0) / st.u if st.u > 0 else 0.0
        base = max(st.decode_s - slope * (st.decode / 2.0 - 1.0), st.decode_s * 0.5) + once
        # one distribution per typical answer length (the request mix in bins), all at once
        b = per_prompt / ns + slope / 2.0
        if ns.size == 1:
            # one answer length (fixed lengths): one row, its values already in order
            counts, row = _generalised_poisson(rate * ns[0] * base, rate * ns[0] * b[0])
            means = np.array([base + b[0] * (row * counts).sum()])
            v, cum = base + b[0] * counts, np.cumsum(row)
        else:
            counts, pmf, support = _generalised_poisson_rows(rate * ns * base, rate * ns * b)
            means = base + b * (pmf * counts).sum(axis=1)
            v = (base + b[:, None] * counts)[support]
            p = (pmf / ns.size)[support]
            order = np.argsort(v)
            v, cum = v[order], np.cumsum(p[order])
        return (
            float(np.mean(means)),
            float(np.interp(quantile, cum, v)),
            float(np.interp(0.5, cum, v)),
        )

    def _per_decode_seq_s(self, decode: float) -> float:
        """What one more decoding sequence adds to a decode step of ``decode`` of them."""
        lo = max(decode, 1.0)
        more = float(self.c @ self._terms(lo + 1.0, 0.0, 0.0, 0.0))
        return max(more - float(self.c @ self._terms(lo, 0.0, 0.0, 0.0)), 0.0)

    # ----- capacity inside an SLO ---------------------------------------------------------------
    def max_rate(
        self,
        ttft_p99_s: float | None,
        tpot_p99_s: float | None,
        e2e_p99_s: float | None = None,
        *,
        quantile: float = 0.99,
        rel_tol: float = 0.01,
        hint: EdgeHint | None = None,
    ) -> Capacity:
        """The highest Poisson rate whose steady-state ``quantile`` latencies meet the limits:
        the edge on a grid of arrivals per step, geometric from 1% of saturation to it, fine
        enough that the rate is within ``rel_tol`` (the grid bisection would halve down to;
        :func:`~planner.perf.edge_search.last_inside` finds the same cell in fewer steps:
        latency grows with load). ``hint``: where the search of a similar question (another
        workload or SLO of the same deployment) found its edge, to start from
        (:func:`~planner.perf.edge_search.bracket_from`); it changes how many states are
        evaluated, not the edge."""
        limits = (ttft_p99_s, tpot_p99_s, e2e_p99_s)
        u_max, bound = self.saturation()
        u_top = u_max * (1 - 1e-6)
        lowest = u_max * 0.01
        span = math.log(u_max / lowest)
        halvings = 0
        while -math.expm1(-span / 2**halvings) > rel_tol:
            halvings += 1
        cells = 2**halvings
        labels: dict[int, str] = {}
        margins: dict[int, float] = {}

        def u_at(index: int) -> float:
            if index == cells:
                return u_top
            return lowest if index == 0 else lowest * math.exp(span * index / cells)

        def margin(index: int) -> float:
            found, how_far = self._margin_at(u_at(index), quantile, limits)
            if found is not None:
                labels[index] = found
            margins[index] = how_far
            return how_far

        good, good_margin, bad, bad_margin = _bracket(margin, hint, 0, cells)
        if good == bad and good_margin <= 0.0:  # inside up to saturation
            top = self._open_loop(u_top, quantile, stable=True, bound=bound)
            return Capacity(top.rate, top, "saturation", self.evaluations, EdgeHint(cells, None))
        if good == bad:  # beyond even at 1% of it
            low = self._open_loop(lowest, quantile, stable=True, bound="none")
            return Capacity(0.0, low, labels[0], self.evaluations, EdgeHint(0, None))
        good, bad = last_inside(margin, good, bad, good_margin, bad_margin)
        best = self._open_loop(u_at(good), quantile, stable=True, bound="none")
        edge = hint_of(good, margins[good], bad, margins[bad])
        return Capacity(best.rate, best, labels[bad], self.evaluations, edge)

    def max_concurrency(
        self,
        ttft_p99_s: float | None,
        tpot_p99_s: float | None,
        e2e_p99_s: float | None = None,
        *,
        highest: int,
        quantile: float = 0.99,
        run_requests: Callable[[int], int] | None = None,
        hint: EdgeHint | None = None,
    ) -> Capacity:
        """The most requests in flight (closed loop, at most ``highest``) inside the limits;
        ``run_requests(n)``: the length of the finite run each is judged by (its first wave
        is in the TTFT tail), None for a loop that runs for ever. ``hint``: as for
        :meth:`max_rate`."""
        limits = (ttft_p99_s, tpot_p99_s, e2e_p99_s)
        states: dict[int, SteadyState] = {}

        def margin(n: int) -> float:
            runs = run_requests(n) if run_requests else None
            states[n] = self.at_concurrency(float(n), quantile, runs)
            return _margin(states[n], limits)

        good, good_margin, bad, bad_margin = _bracket(margin, hint, 1, highest)
        if good == bad and good_margin <= 0.0:  # inside at the most searched
            return Capacity(float(highest), states[highest], "saturation", self.evaluations,
                            EdgeHint(highest, None))  # fmt: skip
        if good == bad:  # beyond even with one request in flight
            low = states[1]
            return Capacity(0.0, low, _broken(low, limits) or "saturation", self.evaluations,
                            EdgeHint(1, None))  # fmt: skip
        good, bad = last_inside(margin, good, bad, good_margin, bad_margin)
        edge = hint_of(good, _margin(states[good], limits), bad, _margin(states[bad], limits))
        return Capacity(
            float(good), states[good], _broken(states[bad], limits) or "saturation",
            self.evaluations, edge,
        )  # fmt: skip


def _bracket(
    margin: Callable[[int], float], hint: EdgeHint | None, lowest: int, highest: int
) -> tuple[int, float, int, float]:
    """The edge's first bracket as :func:`~planner.perf.edge_search.bracket_from` returns it:
    from ``hint``, or (none given) the whole range, its top first (a search that meets the
    limits at full load needs no other state), then its bottom."""
    if hint is not None:
        return bracket_from(margin, hint, lowest, highest)
    top = margin(highest)
    if top <= 0.0:
        return highest, top, highest, top
    low = margin(lowest)
    if not low <= 0.0:
        return lowest, low, lowest, low
    return lowest, low, highest, top


@dataclass(frozen=True)
class Capacity:
    """The highest load inside the limits (req/s, or requests in flight for a closed loop),
    the state there, what binds above it (``ttft``, ``tpot``, ``e2e`` or ``saturation``)."""

    max_load: float
    state: SteadyState
    limited_by: str
    evaluations: int
    #: where the edge was found, for a later search of a similar question to start from
    edge: EdgeHint | None = None


def _margin(state: SteadyState, limits: tuple[float | None, ...]) -> float:
    """How far beyond ``limits`` the state is (> 0 exactly when :func:`_broken` says one is
    broken; :func:`~planner.perf.edge_search.margin_of`)."""
    if not state.stable:
        return math.inf
    worst = -math.inf
    for value, limit in zip(
        (state.ttft_p99_s, state.tpot_p99_s, state.e2e_p99_s), limits, strict=True
    ):
        if limit is not None:
            worst = max(worst, margin_of(value, limit))
    return worst


def _broken(state: SteadyState, limits: tuple[float | None, ...]) -> str | None:
    ttft, tpot, e2e = limits
    if not state.stable:
        return "ttft" if ttft is not None else "saturation"
    if ttft is not None and not state.ttft_p99_s <= ttft:
        return "ttft"
    if tpot is not None and not state.tpot_p99_s <= tpot:
        return "tpot"
    if e2e is not None and not state.e2e_p99_s <= e2e:
        return "e2e"
    return None


# ----- queues --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Wait:
    """A waiting time: P(W > 0) = ``busy``, then ``P(W > t) ~ tail exp(-decay t)``."""

    busy: float
    tail: float
    decay: float
    mean: float
    stable: bool = True

    def survival(self, t: float) -> float:
        if t < 0:
            return 1.0
        if self.busy <= 0:
            return 0.0
        if not math.isfinite(self.decay) or self.decay <= 0:
            return self.busy if self.decay <= 0 else 0.0
        return min(self.busy, self.tail * math.exp(-self.decay * t))


def _MD1(rate: float, service: float) -> _Wait:
    """M/D/1 waiting time (Poisson arrivals, deterministic service ``service`` seconds)."""
    rho = rate * service
    if rho <= 0:
        return _Wait(0.0, 0.0, math.inf, 0.0)
    if rho >= 1:
        return _Wait(1.0, 1.0, 0.0, math.inf, stable=False)
    # theta: the positive root of rate (exp(theta s) - 1) = theta
    lo, hi = 1e-12, 1.0 / service
    while rate * math.expm1(hi * service) < hi:
        hi *= 2.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if rate * math.expm1(mid * service) < mid:
            lo = mid
        else:
            hi = mid
    theta = (lo + hi) / 2.0
    denominator = rate * service * math.exp(theta * service) - 1.0
    tail = (1.0 - rho) / denominator if denominator > 0 else rho
    mean = rho * service / (2.0 * (1.0 - rho))
    return _Wait(rho, min(tail, rho), theta, mean)


def _erlang_wait(seats: float, rate: float, residence: float) -> _Wait:
    """M/M/c waiting time for one of ``seats`` seats, each held ``residence`` seconds."""
    c = max(math.floor(seats), 1)
    a = rate * residence  # offered load in seats
    if a <= 0:
        return _Wait(0.0, 0.0, math.inf, 0.0)
    if a >= c:
        return _Wait(1.0, 1.0, 0.0, math.inf, stable=False)
    # Erlang C from Poisson(a): P(X = c) / (P(X = c) + (1 - a / c) P(X < c))
    at_c = math.exp(c * math.log(a) - a - math.lgamma(c + 1))
    below = upper_gamma_q(c, a)  # P(X <= c - 1)
    busy = at_c / (at_c + (1.0 - a / c) * below)
    decay = (c - a) / residence
    return _Wait(busy, busy, decay, busy / decay)


@dataclass(frozen=True)
class _Uniform:
    """The rest of the step in flight, uniform on (0, ``step_s``), with probability ``p``."""

    step_s: float
    p: float

    @property
    def mean(self) -> float:
        return self.p * self.step_s / 2.0

    def survival(self, t: float) -> float:
        if t < 0:
            return 1.0
        return self.p * max(0.0, 1.0 - t / self.step_s) if self.step_s > 0 else 0.0


@dataclass(frozen=True)
class _Gamma:
    """``fixed_s`` plus a gamma-distributed part with mean ``mean`` and variance ``var``."""

    fixed_s: float
    mean: float
    var: float
    load: float = 0.0

    def survival(self, t: float) -> float:
        if t < 0:
            return 1.0
        if self.mean <= 0:
            return 0.0
        if not math.isfinite(self.var):
            return 1.0
        shape = self.mean**2 / self.var
        scale = self.var / self.mean
        return upper_gamma_q(shape, t / scale)


def _sum_survival(parts: list[_Wait | _Uniform | _Gamma], t: float) -> float:
    """The summed survival of independent waits at ``t``, at most 1 (a union bound)."""
    return min(1.0, sum(p.survival(t) for p in parts))


def _sum_quantile(parts: list[_Wait | _Uniform | _Gamma], q: float) -> float:
    """The ``q`` quantile of the sum of independent waits, bounded by their summed survival
    (a union bound: conservative where they overlap), by bisection."""
    tail = 1.0 - q

    def survival(t: float) -> float:
        return _sum_survival(parts, t)

    hi = max(max((p.mean for p in parts), default=0.0) * 4.0, 1e-3)
    while survival(hi) > tail and hi < 1e7:
        hi *= 2.0
    lo = 0.0
    while hi - lo > 1e-3 * hi:  # to 0.1%: 10-20 evaluations
        mid = (lo + hi) / 2.0
        if survival(mid) > tail:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def _linear_quantile(ordered: np.ndarray, q: float) -> float:
    """``numpy.quantile(values, q)`` (its default, linear method) of the sorted ``ordered``,
    without numpy's general machinery (a closed-loop search asks it thousands of times)."""
    n = ordered.size
    h = q * (n - 1)
    below = min(max(math.floor(h), 0), n - 1)
    above = min(below + 1, n - 1)
    t = h - below
    a, b = float(ordered[below]), float(ordered[above])
    # numpy's lerp: from the nearer end, so the result is exact at t = 0 and t = 1
    return a + (b - a) * t if t < 0.5 else b - (b - a) * (1.0 - t)


def _generalised_poisson(theta: float, m: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_generalised_poisson_rows` of one (``theta``, ``m``) pair: the counts and their
    probabilities over the row's support (the same numbers, without the rows' masking)."""
    m = min(max(m, 0.0), 0.98)
    if not theta > 0:
        return np.zeros(1), np.ones(1)
    size = int(theta / (1.0 - m) + 12.0 * math.sqrt(theta / (1.0 - m) ** 3) + 10)
    k = np.arange(0, size)
    log_pmf = math.log(theta) + (k - 1) * np.log(theta + k * m) - theta - k * m
    log_pmf -= _log_factorials(size)
    pmf = np.exp(log_pmf - log_pmf.max())
    return k.astype(float), pmf / pmf.sum()


_LOG_FACTORIALS = np.zeros(1)


def _log_factorials(size: int) -> np.ndarray:
    """``log(k!)`` for ``k < size`` (a cumulative sum: each prefix is the same numbers)."""
    global _LOG_FACTORIALS
    if _LOG_FACTORIALS.size < size:
        grown = max(size, 2 * _LOG_FACTORIALS.size)
        _LOG_FACTORIALS = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, grown)))])
    return _LOG_FACTORIALS[:size]


def _generalised_poisson_rows(
    theta: np.ndarray, m: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The total progeny of a Poisson branching process for each (``theta``, ``m``) pair:
    ``theta`` Poisson immigrants, each with Poisson(``m``) offspring (Consul's generalised
    Poisson, mean ``theta / (1 - m)``, variance ``theta / (1 - m)^3``; m >= 1 explodes, so it
    is held below 0.98). Returns the counts ``0..K-1``, each row's probabilities over them and
    the mask of each row's own support (its mean + 12 sd; zero beyond it)."""
    m = np.clip(m, 0.0, 0.98)
    positive = theta > 0
    safe = np.where(positive, theta, 1.0)
    mean = safe / (1.0 - m)
    sd = np.sqrt(safe / (1.0 - m) ** 3)
    sizes = np.where(positive, (mean + 12.0 * sd + 10).astype(int), 1)
    k = np.arange(0, int(sizes.max()))
    support = k[None, :] < sizes[:, None]
    log_factorial = _log_factorials(k.size)
    t, mm = safe[:, None], m[:, None]
    log_pmf = np.log(t) + (k - 1) * np.log(t + k * mm) - t - k * mm - log_factorial
    log_pmf = np.where(support, log_pmf, -np.inf)
    pmf = np.exp(log_pmf - log_pmf.max(axis=1, keepdims=True))
    return k.astype(float), pmf / pmf.sum(axis=1, keepdims=True), support


def upper_gamma_q(a: float, x: float) -> float:
    """The regularised upper incomplete gamma function Q(a, x) = Gamma(a, x) / Gamma(a): the
    series below ``a + 1``, Lentz's continued fraction above (Numerical Recipes, ch. 6.2)."""
    if x <= 0:
        return 1.0
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        ap = a
        for _ in range(1000):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-14:
                break
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return min(1.0, math.exp(log_front) * h)
