"""Discrete-event simulation of continuous batching, driven by the step-time terms.

Schedulers
- ``vllm`` (vLLM V1): every step first serves the running requests in order (a decode takes one
  token, an unfinished prefill a chunk of what is left of the ``max_num_batched_tokens`` budget),
  allocating 16-token KV blocks as tokens are computed; when blocks run out the most recently
  admitted request is preempted (its blocks freed, recomputed from scratch later). Only when
  nothing was preempted does it admit waiting requests first-come-first-served, while
  ``max_num_seqs``, the token budget (chunked prefill) and free blocks allow. With prefix
  caching the shared prefix's full blocks are computed once and reused, and the prompts a
  benchmark repeats from an earlier run (the scenario's ``warm_prompts``,
  :func:`warm_prompts_held`) are found cached. With pipeline
  parallelism ``p`` a step is ``p`` batches in flight, each scheduled with the whole budget
  ``B``: ``p B`` tokens a step, at most ``B`` of one request (a request is in one batch at a
  time), the fullest micro-batch a whole budget
  (:func:`planner.perf.step_time.macro_step_token_budget` and the module's PP note).
- ``sglang`` (SGLang's scheduler, 0.5.x defaults; python/sglang/srt/managers/scheduler.py
  ``get_next_batch_to_run`` / ``get_new_batch_prefill``, schedule_policy.py ``PrefillAdder``):
  a prefill (extend) batch runs whenever a request can be admitted or a chunked prompt is under
  way, *instead of* the decode step (prefill first; the decoding requests wait; mixing them,
  ``--enable-mixed-chunk``, is off by default). One batch holds, in this order, the chunked
  prompt under way (``add_chunked_req``), then waiting requests first come first served
  (``add_one_req``), until the chunk budget ``chunked_prefill_size`` is spent: a prompt that
  fits what is left goes in whole, the first that does not gets a chunk of what is left and
  becomes the one chunked request; the batch also stops once its new prompt tokens reach
  ``max_prefill_tokens`` (16,384; without chunked prefill a later prompt must fit what is left
  of it, the first always goes in). A request is admitted only if its prompt plus its whole
  output (clipped at 4,096 tokens) fit the free KV less ``new_token_ratio`` x the remaining
  output of every running request (each clipped too): ``total_tokens >= rem_total_tokens``
  is ``NO_TOKEN``. ``NO_TOKEN`` (or ``max_running_requests``) sets ``batch_is_full``, and no
  prefill batch runs again until a running request finishes (``update_running_batch`` clears
  it when the batch shrinks). With the radix cache off and answers of fixed length (the
  benchmarks' ``ignore_eos``), ``add_one_req_ignore_eos`` admits only if the running requests,
  taken shortest remaining output first, can all finish in the free KV with their whole
  remaining outputs (nothing is ever retracted). The ratio starts at 0.7 (0.21 with DP
  attention), decays to 0.14 x that over 600 decode steps, and returns to its start when a
  request has to be retracted (preempted and recomputed, as vLLM does).
- ``trtllm`` (TensorRT-LLM in-flight batching; tensorrt_llm/_torch/pyexecutor/scheduler/
  scheduler.py, the C++ ``CapacityScheduler`` and ``MicroBatchScheduler`` it binds): the
  capacity scheduler (GUARANTEED_NO_EVICT) admits a request only if the blocks for its whole
  prompt and output can be reserved beside what the running ones still need, so nothing is ever
  preempted; the micro-batch scheduler then walks the active requests in arrival order (the
  generations before the newer contexts), each generation one token and each context its whole
  prompt, and stops at the first that does not fit ``max_num_tokens`` (8,192); with chunked
  context (``trtllm-bench``) the contexts share what the generations leave, first come first
  served. One step mixes both; up to ``max_batch_size`` (2,048) requests.

TTFT of a request = its wait for admission + the steps that compute its prompt (each as long
as everything batched with it: decode-first chunks in vLLM, whole prefill batches that stall
the decodes in SGLang, contexts behind the generations in TensorRT-LLM) + for a served engine
the fixed path from request to first streamed token (the fitted ``request_path`` term of
:mod:`planner.perf.step_time`; none for an offline benchmark). p90/p99 TTFT are quantiles over
the simulated requests, so the queueing of a closed loop's first wave (every request sent at
t=0, as ``vllm bench serve --max-concurrency`` and SGLang's ``bench_serving`` start) and of a
rate's bursts sets the tail.

Loads: closed-loop ``concurrency`` over ``num_requests`` (ramp-up and drain included; a served
engine's replacement reaches it the request path after its predecessor's last token:
:func:`closed_loop_turnaround_s`), offline batch and max-throughput (all requests queued at
t=0), Poisson or gamma ``rate``, trace replay.

What makes it fast and fittable: the simulation accumulates the *terms* of each step
(:mod:`planner.perf.step_time`), not seconds. When arrivals do not depend on the clock (an offline
closed loop, offline, max-throughput, or any load simulated without coefficients) the sequence of
batches does not depend on the coefficients either, so every reported time is a dot product
``c . X`` of the coefficients with an accumulated term vector: one simulation serves every
coefficient vector (fitting, cross-validation, prediction intervals). Identical requests admitted
together move as one cohort, and runs of pure-decode steps between events are advanced in one go
(contexts grow linearly, so the run's linear terms are exact: those of its middle step times its
length; the roofline's max and the MoE expert count are taken at the middle step).

Simplifications, kept on purpose: decodes take their token before prefill chunks in a step
(vLLM V1 serves the running list in admission order, which is the same unless an older request
is still prefilling when a younger one decodes); a prefix-cache hit needs the shared prefix to
have been computed once (no eviction); with data parallelism each replica gets an equal share of
the requests and of the concurrency, and one replica is simulated for all (a served vLLM closed
loop's waves coming apart over its replicas is that replica's: :func:`spreads_first_wave`).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from planner.engine import SGLANG_MAX_PREFILL_TOKENS
from planner.perf.deployment import Deployment
from planner.perf.scenario import Scenario, has_request_path
from planner.perf.step_time import (
    IDX,
    N_FEATURES,
    StepBatch,
    add_request_path,
    deployment_request_path_s,
    engine_ranks,
    fill_step_features,
    macro_step_token_budget,
)
from planner.workload import LengthDistribution, draw_lengths

_IDLE = IDX["idle"]
#: fills a step's terms (``out``, zeroed) for a batch on a deployment: the step-time model's
#: :func:`~planner.perf.step_time.fill_step_features`, or a disaggregated pool's with its
#: all-to-all (:meth:`planner.perf.disaggregated.PoolContext.fill_step_terms`)
StepTerms = Callable[[np.ndarray, StepBatch, Deployment], None]
TIMELINE_POINTS = 2000
#: SGLang's new-token-ratio schedule (python/sglang/srt/managers/scheduler.py, global config):
#: it decays from its initial value to 0.14 x that value over 600 decode steps
SGLANG_MIN_RATIO_FACTOR = 0.14
SGLANG_RATIO_DECAY_STEPS = 600
#: SGLang clips a request's remaining output at this many tokens when it reserves memory
SGLANG_CLIP_NEW_TOKENS = 4096
#: ``IGNORE_EOS_RESERVE_TOKENS`` of schedule_policy.py: free tokens kept a running request
SGLANG_IGNORE_EOS_RESERVE = 1


class _Cohort:
    """Requests that are identical and move together (``count`` of them).

    A cohort in the decode pool is advanced lazily: its state is ``base_*`` at step
    ``base_step`` plus one token per step since (see :meth:`_Engine.materialize`).
    """

    __slots__ = (
        "arrival_time",
        "arrival_vec",
        "base_step",
        "blocks",
        "cached_prompt",
        "computed",
        "count",
        "first_vec",
        "generated",
        "in_pool",
        "order",
        "output",
        "phase",
        "prompt",
        "reserved",
        "shared",
        "waits",
    )

    def __init__(
        self,
        count: int,
        prompt: int,
        output: int,
        order: int,
        arrival_vec: np.ndarray | None,
        arrival_time: float,
    ) -> None:
        self.count = count
        self.prompt = prompt
        self.output = output
        self.order = order
        self.computed = 0
        self.generated = 0
        self.blocks = 0
        self.reserved = 0
        self.shared = 0  # prefix-cache blocks it reads but does not own
        self.cached_prompt = 0  # prompt tokens found in the prefix cache on arrival (live runs)
        self.arrival_vec = arrival_vec
        self.arrival_time = arrival_time
        self.first_vec: np.ndarray | None = None
        self.in_pool = False
        self.base_step = 0
        self.phase = 0
        #: each member's ``arrival_time``, first arrived first, where they differ (a closed
        #: loop's replacements that reached the engine between two step boundaries); None
        #: when all have ``arrival_time``
        self.waits: list[float] | None = None

    def split(self, n: int, head: bool = False) -> _Cohort:
        """Detach ``n`` members into a new cohort (same state); not for pooled cohorts. The
        detached are the last to arrive, or the first with ``head`` (those that start
        running while the rest wait)."""
        other = _Cohort(
            n, self.prompt, self.output, self.order, self.arrival_vec, self.arrival_time
        )
        if self.waits is not None:
            cut = n if head else len(self.waits) - n
            first, last = self.waits[:cut], self.waits[cut:]
            other.waits, self.waits = (first, last) if head else (last, first)
        other.computed = self.computed
        other.generated = self.generated
        other.blocks = self.blocks
        other.reserved = self.reserved
        other.shared = self.shared
        other.cached_prompt = self.cached_prompt
        other.first_vec = self.first_vec
        self.count -= n
        return other

    @property
    def need(self) -> int:
        return self.prompt + self.generated - self.computed


@dataclass
class SimTrace:
    """Accumulated step terms of one simulated run of one replica.

    Times are ``c . vector`` (seconds) for a full coefficient vector ``c``; per-request rows:
    TTFT = c . (first - arrival) - arrival_time, E2E = c . (finish - arrival) - arrival_time;
    a served engine's ``first`` and ``finish`` carry the request's fixed path (the
    ``request_path`` term, :func:`planner.perf.step_time.add_request_path`) besides the steps.
    """

    end: np.ndarray
    count: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    arrival: np.ndarray
    arrival_time: np.ndarray
    first: np.ndarray
    finish: np.ndarray
    gap_terms: np.ndarray  # per recorded step (or run of steps): one step's terms
    gap_weight: np.ndarray  # decode gaps it produced
    running_integral: np.ndarray
    kv_integral: np.ndarray
    kv_max: float
    preemptions: int
    kv_capacity_tokens: int
    steps: int
    time_driven: bool
    start_time: float = 0.0
    timeline_terms: np.ndarray = field(default_factory=lambda: np.zeros((0, N_FEATURES)))
    timeline_kv: np.ndarray = field(default_factory=lambda: np.zeros(0))
    timeline_running: np.ndarray = field(default_factory=lambda: np.zeros(0))
    timeline_waiting: np.ndarray = field(default_factory=lambda: np.zeros(0))
    notes: list[str] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return int(self.count.sum())

    @property
    def output_tokens(self) -> float:
        return float((self.count * self.output_len).sum())

    @property
    def input_tokens(self) -> float:
        return float((self.count * self.input_len).sum())


@dataclass
class _Arrivals:
    times: np.ndarray
    inputs: np.ndarray
    outputs: np.ndarray


def _request_lengths(scenario: Scenario, n: int) -> tuple[np.ndarray, np.ndarray]:
    ins = scenario.input_dist or LengthDistribution.fixed(int(scenario.input_len or 1))
    outs = scenario.output_dist or LengthDistribution.fixed(int(scenario.output_len or 1))
    return draw_lengths(ins, outs, n, scenario.seed)


def _arrival_times(scenario: Scenario, n: int, rate: float) -> np.ndarray:
    """Arrival offsets (s, the first at 0) of ``n`` requests at ``rate``: gamma gaps of the
    scenario's coefficient of variation, seeded by the scenario. The benchmark runner sends
    these (:func:`request_arrivals`) when it verifies a rate scenario."""
    rng = np.random.default_rng(scenario.seed + 7919)
    cv = scenario.burstiness_cv
    shape = 1.0 / (cv * cv)
    gaps = rng.gamma(shape, 1.0 / (rate * shape), size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def request_arrivals(scenario: Scenario) -> np.ndarray | None:
    """When the requests of a ``rate`` scenario arrive at one replica, as :func:`simulate`
    draws them (None for the other loads)."""
    if scenario.load != "rate" or not scenario.request_rate:
        return None
    n = max(1, math.ceil(scenario.effective_num_requests() / scenario.replicas))
    return _arrival_times(scenario, n, scenario.request_rate / scenario.replicas)


class _Engine:
    """Scheduler state of one replica.

    Decoding cohorts live in a pool advanced lazily (aggregate context, KV blocks due by
    block-boundary phase, finish steps in a heap), so a step costs O(prefilling cohorts), not
    O(running cohorts). Anything unusual (preemption, a token budget smaller than the decodes)
    materialises the pool and takes the general path.
    """

    def __init__(
        self,
        dep: Deployment,
        coefficients: np.ndarray | None,
        *,
        timeline: bool = True,
        step_terms: StepTerms = fill_step_features,
    ) -> None:
        self.dep = dep
        self.step_terms = step_terms
        self.c = coefficients
        self.bs = dep.block_size
        self.total_blocks = dep.kv_capacity_blocks
        self.free = self.total_blocks
        # a macro-step's tokens, and one request's most in it (vLLM with PP: one micro-batch's)
        self.budget = macro_step_token_budget(dep)
        self.chunk_cap = dep.max_num_batched_tokens
        self.max_seqs = dep.max_num_seqs
        self.reserve = dep.family == "trtllm"
        self.chunked = dep.engine.enable_chunked_prefill
        self.window = dep.sliding_window
        self.running: list[_Cohort] = []  # admission order (preemption takes the last)
        self.prefilling: list[_Cohort] = []  # running cohorts not in the pool, in order
        self.waiting: deque[_Cohort] = deque()
        self.running_seqs = 0
        self.step_no = 0
        # steps in which the decode pool advanced (all of them but SGLang's prefill-only ones)
        self.dstep = 0
        # SGLang: prefill batches before decode ones, admission reserving a share of the
        # running requests' remaining output (see the module docstring)
        self.sglang = dep.family == "sglang"
        self.ratio_init = dep.new_token_ratio
        self.ratio_min = dep.new_token_ratio * SGLANG_MIN_RATIO_FACTOR
        self.ratio = dep.new_token_ratio
        #: SGLang's ``running_batch.batch_is_full``: set when admission ran out of KV (or of
        #: running seats), cleared when a running request finishes or is retracted
        self.batch_full = False
        #: SGLang admits by ``add_one_req_ignore_eos`` (every remaining output in full) when
        #: its radix cache is off: the simulated requests always run to their output length
        self.ignore_eos = self.sglang and not dep.engine.enable_prefix_caching
        # decode pool
        self.pool_n = 0
        self.pool_ctx = 0.0  # sum over pooled sequences of their computed tokens
        self.bucket = [0] * self.bs  # pooled sequences by block-boundary phase
        self.finishing: dict[int, list[_Cohort]] = {}
        self.finish_heap: list[int] = []
        # SGLang's reservation (_reserved_blocks) of the pooled sequences, kept as they come and
        # go: their finish steps summed (each sequence's remaining output is its finish step
        # less the pool's step), and those whose remaining output is clipped on entry
        self.pool_finish_sum = 0  # of the pooled sequences not clipped
        self.pool_long: dict[_Cohort, int] = {}  # clipped cohorts: their finish step
        # accounting
        self.cum = np.zeros(N_FEATURES)
        self.buf = np.zeros(N_FEATURES)
        self.preemptions = 0
        self.kv_max = 0.0
        self.running_integral = np.zeros(N_FEATURES)
        self.kv_integral = np.zeros(N_FEATURES)
        self.gap_terms: list[np.ndarray] = []
        self.gap_weight: list[float] = []
        # (terms so far, KV occupancy, running, waiting) after each step or run of steps
        self.timeline: list[tuple[np.ndarray, float, int, int]] = []
        self.keep_timeline = timeline
        self.done: list[tuple[int, int, int, np.ndarray | None, float, np.ndarray, np.ndarray]] = []
        sc = dep.scenario
        self.prefix_tokens = 0
        if dep.engine.enable_prefix_caching and sc.prefix_share > 0:
            self.prefix_tokens = int(sc.prefix_share * sc.mean_input_len) // self.bs * self.bs
        self.prefix_ready = False

    # ----- clock -----------------------------------------------------------------------------
    def now(self) -> float:
        assert self.c is not None
        return float(np.dot(self.c, self.cum))

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.bs)

    # ----- the decode pool -------------------------------------------------------------------
    def pool_add(self, co: _Cohort) -> None:
        co.in_pool = True
        co.base_step = self.dstep
        co.phase = (co.computed - self.dstep) % self.bs
        self.bucket[co.phase] += co.count
        self.pool_n += co.count
        self.pool_ctx += co.count * co.computed
        at = self.dstep + co.output - co.generated
        if at not in self.finishing:
            self.finishing[at] = []
            heapq.heappush(self.finish_heap, at)
        self.finishing[at].append(co)
        if co.output - co.generated > SGLANG_CLIP_NEW_TOKENS:
            self.pool_long[co] = at
        else:
            self.pool_finish_sum += co.count * at

    def materialize(self, co: _Cohort) -> None:
        """Bring a pooled cohort's state up to date and take it out of the pool."""
        steps = self.dstep - co.base_step
        co.computed += steps
        co.generated += steps
        if not self.reserve:
            co.blocks = self._blocks_for(co.computed) - co.shared
        co.in_pool = False
        self.bucket[co.phase] -= co.count
        self.pool_n -= co.count
        self.pool_ctx -= co.count * co.computed
        at = co.base_step + co.output - (co.generated - steps)
        members = self.finishing.get(at)
        if members is not None:
            members.remove(co)
        if self.pool_long.pop(co, None) is None:
            self.pool_finish_sum -= co.count * at

    def unpool_all(self) -> None:
        for co in self.running:
            if co.in_pool:
                self.materialize(co)
        self.finishing.clear()
        self.finish_heap.clear()
        self.pool_ctx = 0.0

    def repool(self) -> None:
        self.prefilling = []
        for co in self.running:
            if co.need == 1 and co.generated > 0:
                self.pool_add(co)
            else:
                self.prefilling.append(co)

    def pool_block_demand(self, steps: int) -> int:
        """Blocks the pool allocates over the next ``steps`` steps."""
        if self.reserve or not self.pool_n:
            return 0
        bs = self.bs
        s0 = self.dstep
        full, rest = divmod(steps, bs)
        total = sum(self.bucket) * full if full else 0
        for i in range(rest):
            total += self.bucket[(-(s0 + i)) % bs]
        return total

    def pool_steps_within(self, free: int, k_max: int) -> int:
        """Most steps (up to ``k_max``) whose pool block demand fits in ``free``."""
        if self.reserve or not self.pool_n:
            return k_max
        bs = self.bs
        s0 = self.dstep
        per_period = sum(self.bucket)
        if per_period == 0:
            return k_max
        # each pooled sequence takes at most one new block every bs steps: when that bound
        # fits, all k_max steps do (the common case, without the walk over the phases below)
        if -(-k_max // bs) * per_period <= free:
            return k_max
        best = 0
        partial = 0
        for r in range(bs):
            if partial > free:
                break
            periods = (free - partial) // per_period
            best = max(best, min(k_max, periods * bs + r))
            partial += self.bucket[(-(s0 + r)) % bs]
        return best

    # ----- preemption (general path) ---------------------------------------------------------
    def _preempt(self, cohort: _Cohort, n: int, listed: bool = True) -> None:
        self.ratio = self.ratio_init  # SGLang retracts and becomes conservative again
        self.batch_full = False  # the running batch shrank
        if listed:
            self.running.remove(cohort)
        self.free += cohort.blocks * n
        self.running_seqs -= n
        cohort.computed = 0
        cohort.blocks = 0
        cohort.shared = 0
        self.preemptions += n
        self.waiting.appendleft(cohort)

    def _make_room(self, co: _Cohort, new_blocks: int) -> bool:
        """Preempt from the end of the running list until ``co`` gets its blocks.

        vLLM V1 preempts the most recently admitted request, one at a time; when that is the
        request being scheduled, it is preempted itself. Returns False when nothing of ``co``
        is left to schedule.
        """
        needed = new_blocks * co.count
        while self.free < needed and self.running[-1] is not co:
            victim = self.running[-1]
            per_seq = max(victim.blocks, 1)
            n = min(victim.count, -(-(needed - self.free) // per_seq))
            if n < victim.count:
                self._preempt(victim.split(n), n, listed=False)
            else:
                self._preempt(victim, n)
        if self.free >= needed:
            return True
        # the cohort's own members, last first: each preempted frees its blocks for those
        # kept, m of them while m x new <= free + (count - m) x its blocks
        n_ok = (self.free + co.count * co.blocks) // (new_blocks + co.blocks)
        if n_ok <= 0:
            self._preempt(co, co.count)
            return False
        extra = co.count - n_ok  # before the split shrinks co
        self._preempt(co.split(extra), extra, listed=False)
        return True

    # ----- one step --------------------------------------------------------------------------
    def step(self) -> list[_Cohort] | None:
        """Schedule and execute one step; None when nothing could be scheduled."""
        if self.sglang and (self.prefilling or self._sglang_admissible()):
            prefill = self._step_prefill_only()
            if prefill is not None:
                return prefill
        fast = self._step_fast()
        if fast is not None:
            return fast
        return self._step_general()

    # ----- SGLang ----------------------------------------------------------------------------
    def _decay_ratio(self, steps: int) -> None:
        if self.sglang:
            decay = (self.ratio_init - self.ratio_min) / SGLANG_RATIO_DECAY_STEPS
            self.ratio = max(self.ratio_min, self.ratio - decay * steps)

    def _reserved_blocks(self) -> float:
        """Blocks SGLang holds back for the running requests' future tokens: ratio x their
        remaining output (each clipped at 4,096 tokens, SGLang's CLIP_MAX_NEW_TOKENS;
        ``PrefillAdder``'s ``rem_total_token_offset`` at the start of a batch)."""
        dstep, clip = self.dstep, SGLANG_CLIP_NEW_TOKENS  # hot: once per step and admission
        # the pooled sequences from the pool's sums (each decodes until its finish step), the
        # rest one by one: the prefilling ones, or all when the pool is empty
        short = self.pool_n  # pooled sequences not clipped
        remaining = 0
        for co, at in self.pool_long.items():
            remaining += co.count * min(at - dstep, clip)
            short -= co.count
        if self.pool_n:
            remaining += self.pool_finish_sum - dstep * short
        for co in self.prefilling if self.pool_n else self.running:
            left = co.output - co.generated
            if left > clip:
                left = clip
            if left > 0:
                remaining += co.count * left
        return self.ratio * remaining / self.bs

    def _cached_prefix(self, co: _Cohort) -> int:
        """Prompt tokens of the waiting cohort ``co`` already in the KV cache: the shared prefix
        once it is cached, or what the server found on arrival, in whole blocks and never the
        prompt's last token (both engines' admissions count it so)."""
        cached = 0
        if self.prefix_tokens and self.prefix_ready:
            cached = min(self.prefix_tokens, (co.prompt - 1) // self.bs * self.bs)
        if co.cached_prompt:
            cached = max(cached, min(co.cached_prompt, co.prompt - 1) // self.bs * self.bs)
        return cached

    def _take_waiting(self, co: _Cohort, n: int, cached: int, t: int) -> _Cohort:
        """``n`` requests of the waiting head ``co`` start running with ``cached`` prompt
        tokens found in the cache and ``t`` computed in this step (blocks beyond the shared
        ones held as their own); the caller charges the free blocks."""
        part = co.split(n, head=True) if n < co.count else self.waiting.popleft()
        part.computed = cached
        part.shared = cached // self.bs
        part.blocks = self._blocks_for(cached + t) - part.shared
        self.running.append(part)
        self.running_seqs += n
        return part

    def _sglang_need(self, co: _Cohort) -> float:
        """Blocks one request of ``co`` needs to be admitted: its prompt and its whole output,
        clipped at 4,096 tokens (``add_one_req``: ``total_tokens = extend_input_len +
        min(max_new_tokens - len(output_ids), CLIP_MAX_NEW_TOKENS)``; only the *running*
        requests' outputs are scaled by the new-token ratio)."""
        output = min(co.output - co.generated, SGLANG_CLIP_NEW_TOKENS)
        return self._blocks_for(co.prompt + co.generated) + max(output, 0) / self.bs

    def _sglang_admissible(self) -> bool:
        """Would ``get_new_batch_prefill`` admit the head of the queue now? A failed memory
        check is SGLang's ``NO_TOKEN``: it sets ``batch_is_full`` (no prefill batch until a
        running request finishes)."""
        if self.running_seqs == 0:
            self.batch_full = False  # an empty running batch is never full
        if not self.waiting or self.batch_full:
            return False
        if self.running_seqs >= self.max_seqs:
            self.batch_full = True
            return False
        if self._sglang_fits(self.waiting[0], 1, self.free, []):
            return True
        self.batch_full = True
        return False

    def _sglang_fits(
        self, co: _Cohort, n: int, free: int, batch: list[tuple[_Cohort, int]]
    ) -> bool:
        """Whether ``n`` more requests of ``co`` pass SGLang's memory check with ``free``
        blocks left, beside the requests already in this prefill ``batch`` ((cohort, count)).

        Radix cache on (``add_one_req``): ``n`` x (prompt + whole clipped output) must stay
        below what is free less the running requests' ratio-scaled remaining outputs and the
        batch's own prompts and outputs. Radix cache off (``add_one_req_ignore_eos``): the
        running, batched and new requests sorted by remaining output ``L_i`` (their whole
        outputs: ``ignore_eos`` takes the ratio as 1); the ``b`` of them not yet finished
        when the ``i``-th does must find ``free_tokens - prompts + freed_i - L_i b > b``,
        ``freed_i`` the tokens (prompt + output so far) of those finished before it.

        An empty engine takes one request whose prompt fits (a layout predicted with room
        for one request only, where either check would hold it back for ever)."""
        if n == 1 and not batch and self.running_seqs == 0:
            return self._blocks_for(co.prompt + co.generated) <= free
        if not self.ignore_eos:
            room = free - self._reserved_blocks()
            for other, k in batch:  # running already, at the ratio: their whole output
                left = min(max(other.output - other.generated, 0), SGLANG_CLIP_NEW_TOKENS)
                room -= k * (1.0 - self.ratio) * left / self.bs
            return n * self._sglang_need(co) < room
        states: list[tuple[int, int, int]] = []  # (remaining output, occupied tokens, count)
        for run in self.running:
            generated = run.generated + (self.dstep - run.base_step if run.in_pool else 0)
            left = run.output - generated
            if left > 0:
                states.append((left, run.prompt + generated, run.count))
        left_new = co.output - co.generated
        if left_new > 0:
            states.append((left_new, co.prompt + co.generated, n))
        cur = (free - n * self._blocks_for(co.prompt + co.generated)) * self.bs
        if cur < 0:
            return False
        states.sort()
        alive = sum(k for _, _, k in states)
        freed = 0
        for left, occupied, k in states:
            # the tightest of a group of equal requests is its first
            if cur + freed - left * alive <= SGLANG_IGNORE_EOS_RESERVE * alive:
                return False
            freed += occupied * k
            alive -= k
        return True

    def _sglang_admit(self, sched: list[tuple[_Cohort, int]], chunk_left: float) -> None:
        """``PrefillAdder.add_one_req`` over the waiting queue, first come first served, into
        the prefill batch ``sched`` (the chunked prompt under way already in it).

        A prompt of ``P`` tokens (less its cached prefix) goes in whole while ``P <=`` what is
        left of the chunk budget; the first that does not fit gets a chunk of what is left
        (whole blocks) and the batch is full. The batch's new prompt tokens stop at
        ``max_prefill_tokens`` (``budget_state``: ``rem_input_tokens <= 0``); without chunked
        prefill a prompt after the first must be below what is left of it. Each admission
        passes :meth:`_sglang_fits` first; failing it is ``NO_TOKEN`` (``batch_is_full``)."""
        input_left = SGLANG_MAX_PREFILL_TOKENS - sum(t * co.count for co, t in sched)
        batch: list[tuple[_Cohort, int]] = [(co, co.count) for co, t in sched]
        while self.waiting:
            if chunk_left <= 0 or input_left <= 0:
                return
            if self.running_seqs >= self.max_seqs:
                self.batch_full = True
                return
            co = self.waiting[0]
            cached = self._cached_prefix(co)
            need = co.prompt + co.generated - cached
            if not self.chunked and sched and need >= input_left:
                return
            if need <= chunk_left:
                t = need
                n = min(co.count, self.max_seqs - self.running_seqs)
                if self.chunked:
                    # admitted while tokens are left of the cap: the one crossing it goes in
                    n = min(n, int(chunk_left // need), -(-input_left // need))
                else:
                    # the k-th more must be below what the k before it leave of the cap
                    fit = -(-(input_left - need) // need) if input_left > need else 0
                    n = min(n, fit if sched else max(1, fit))
            else:
                t = int(chunk_left) // self.bs * self.bs
                if t <= 0:
                    return
                n = 1
            per_seq = self._blocks_for(cached + t) - cached // self.bs
            if per_seq > 0:
                n = min(n, self.free // per_seq)
            # the largest n that passes the memory check (it only gets harder with n)
            lo, hi = 0, n
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self._sglang_fits(co, mid, self.free, batch):
                    lo = mid
                else:
                    hi = mid - 1
            if lo <= 0:
                self.batch_full = True  # NO_TOKEN
                return
            n = lo
            part = self._take_waiting(co, n, cached, t)
            self.free -= per_seq * n
            self.prefilling.append(part)
            sched.append((part, t))
            batch.append((part, n))
            chunk_left -= t * n
            input_left -= t * n
            if t < need:
                return  # the new chunked request fills the batch

    def _step_prefill_only(self) -> list[_Cohort] | None:
        """One SGLang prefill (extend) batch: the chunked request in progress, then new ones
        (:meth:`_sglang_admit`), up to the chunked-prefill budget; the decoding requests
        wait."""
        budget = self.budget
        free = self.free
        sched: list[tuple[_Cohort, int]] = []
        plist = self.prefilling
        i = 0
        while i < len(plist) and budget > 0:
            co = plist[i]
            t = min(co.need, budget)
            if t * co.count > budget:
                rest = co.split(co.count - max(budget // t, 1))
                plist.insert(i + 1, rest)
                self.running.insert(self.running.index(co) + 1, rest)
            new_blocks = max(self._blocks_for(co.computed + t) - co.blocks - co.shared, 0)
            if new_blocks * co.count > free:
                break
            free -= new_blocks * co.count
            co.blocks += new_blocks
            sched.append((co, t))
            budget -= t * co.count
            i += 1
        self.free = free
        self._sglang_admit(sched, budget if self.chunked else math.inf)
        if not sched:
            return None
        return self._execute_fast(sched, 0, 0)

    def _step_fast(self) -> list[_Cohort] | None:
        dec = self.pool_n
        if dec > self.budget:
            return None
        demand = 0 if self.reserve else self.bucket[(-self.dstep) % self.bs]
        free = self.free - demand
        if free < 0:
            return None
        budget = self.budget - dec
        plist = self.prefilling
        # plan the prefill chunks first; fall back to the general path if blocks run short
        plan: list[tuple[_Cohort, int, int]] = []
        i = 0
        while i < len(plist) and budget > 0:
            co = plist[i]
            need = co.need
            t = min(need, budget, self.chunk_cap)
            if t < need and not self.chunked:
                i += 1
                continue
            if t * co.count > budget:
                rest = co.split(co.count - budget // t)
                plist.insert(i + 1, rest)
                self.running.insert(self.running.index(co) + 1, rest)
            new_blocks = max(self._blocks_for(co.computed + t) - co.blocks - co.shared, 0)
            if not self.reserve:
                free -= new_blocks * co.count
                if free < 0:
                    return None
            plan.append((co, t, new_blocks))
            budget -= t * co.count
            i += 1
        sched: list[tuple[_Cohort, int]] = []
        for co, t, new_blocks in plan:
            co.blocks += new_blocks
            sched.append((co, t))
        self.free = free
        if dec == 0 and not sched and not self.waiting:
            return None
        self._admit(sched, budget, into=plist)
        if dec == 0 and not sched:
            return None
        return self._execute_fast(sched, dec, demand)

    def _execute_fast(
        self, sched: list[tuple[_Cohort, int]], dec: int, demand: int
    ) -> list[_Cohort]:
        batch = StepBatch()
        w = self.window
        if dec:
            ctx = self.pool_ctx + dec  # each decode attends to its cache and itself
            batch.decode_seqs = dec
            batch.decode_context = ctx
            batch.decode_context_window = min(ctx, dec * w) if w else ctx
        for co, t in sched:
            if t == 1 and co.generated > 0:
                batch.add_decode(co.count, co.computed + 1, w)
            else:
                batch.add_prefill(co.count, t, co.computed, w)
        buf = self.buf
        buf[:] = 0.0
        self.step_terms(buf, batch, self.dep)
        self._account(buf, 1, float(dec + sum(c.count for c, t in sched if c.generated > 0)))
        self.step_no += 1
        if dec or not self.sglang:
            self.dstep += 1
            self._decay_ratio(1)
        self.pool_ctx += dec
        finished = self._pool_finished()
        for co, t in sched:
            co.computed += t
            if co.computed >= co.prompt + co.generated:
                self._sampled(co)
                if co.generated >= co.output:
                    finished.append(co)
                    self.prefilling.remove(co)
                else:
                    self.prefilling.remove(co)
                    self.pool_add(co)
        return finished

    def _pool_finished(self) -> list[_Cohort]:
        finished: list[_Cohort] = []
        while self.finish_heap and self.finish_heap[0] <= self.dstep:
            at = heapq.heappop(self.finish_heap)
            for co in self.finishing.pop(at, []):
                self.materialize(co)
                finished.append(co)
        return finished

    def _sampled(self, co: _Cohort) -> None:
        co.generated += 1
        if co.generated == 1:
            co.first_vec = self.cum.copy()
        if self.prefix_tokens and co.computed >= self.prefix_tokens:
            self.prefix_ready = True

    def _step_general(self) -> list[_Cohort] | None:
        self.unpool_all()
        budget = self.budget
        sched: list[tuple[_Cohort, int]] = []
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            co = self.running[i]
            need = co.need
            t = min(need, budget, self.chunk_cap)
            if t < need and not self.chunked:
                i += 1
                continue
            if t * co.count > budget:
                rest = co.split(co.count - budget // t)
                self.running.insert(i + 1, rest)
            new_blocks = self._blocks_for(co.computed + t) - co.blocks - co.shared
            if new_blocks > 0 and not self.reserve:
                if new_blocks * co.count > self.free:
                    preempted = True
                    if not self._make_room(co, new_blocks):
                        break
                self.free -= new_blocks * co.count
            if new_blocks > 0:
                co.blocks += new_blocks
            sched.append((co, t))
            budget -= t * co.count
            i += 1
        if not preempted or not sched:
            # vLLM admits no waiting request in a step that preempted; a step that preempted
            # all it was scheduling runs nothing, and the next one, at once, admits the queue
            # (the preempted first): that step is this one. Without it a cohort whose members
            # filled the cache to its last block, and then each needed one more, ended the run
            # ("cannot make progress"): Llama-3.1-70B fp8 on 2 x A100-40GB at PP 2, 4,096
            # tokens of KV, two 2,048-token prompts admitted together (session 55)
            self._admit(sched, budget, into=None)
        if not sched:
            self.repool()
            return None
        batch = StepBatch()
        w = self.window
        gaps = 0.0
        for co, t in sched:
            if t == 1 and co.generated > 0:
                batch.add_decode(co.count, co.computed + 1, w)
            else:
                batch.add_prefill(co.count, t, co.computed, w)
            if co.generated > 0:
                gaps += co.count
        buf = self.buf
        buf[:] = 0.0
        self.step_terms(buf, batch, self.dep)
        self._account(buf, 1, gaps)
        self.step_no += 1
        self.dstep += 1
        self._decay_ratio(1)
        finished: list[_Cohort] = []
        for co, t in sched:
            co.computed += t
            if co.computed >= co.prompt + co.generated:
                self._sampled(co)
                if co.generated >= co.output:
                    finished.append(co)
        done = set(map(id, finished))
        keep = [co for co in self.running if id(co) not in done]
        self.running = keep
        self.repool()
        self.running = keep + finished  # finish() removes them
        return finished

    def _admit(
        self, sched: list[tuple[_Cohort, int]], budget: int, into: list[_Cohort] | None
    ) -> int:
        if self.sglang:
            return budget  # SGLang admits in its prefill batches only (_sglang_admit)
        while self.waiting and budget > 0 and self.running_seqs < self.max_seqs:
            co = self.waiting[0]
            cached = self._cached_prefix(co)
            need = co.prompt + co.generated - cached
            t = min(need, budget, self.chunk_cap)
            if t < need and not self.chunked:
                break
            n = min(co.count, self.max_seqs - self.running_seqs, budget // t)
            if self.reserve:
                per_seq = self._blocks_for(co.prompt + co.output)
            else:
                per_seq = self._blocks_for(cached + t) - cached // self.bs
            if per_seq > 0:
                n = min(n, self.free // per_seq)
            if n <= 0:
                break
            part = self._take_waiting(co, n, cached, t)
            if self.reserve:
                part.reserved = per_seq
            self.free -= per_seq * n
            if into is not None:
                into.append(part)
            sched.append((part, t))
            budget -= t * n
        return budget

    def _account(self, terms: np.ndarray, steps: int, decode_gaps: float) -> None:
        self.cum += terms * steps
        used = self.total_blocks - self.free
        occupancy = used / self.total_blocks if self.total_blocks else 0.0
        self.kv_max = max(self.kv_max, occupancy)
        self.running_integral += terms * (steps * self.running_seqs)
        self.kv_integral += terms * (steps * occupancy)
        if decode_gaps > 0:
            self.gap_terms.append(terms.copy())
            self.gap_weight.append(decode_gaps * steps)
        if not self.keep_timeline:
            return
        self.timeline.append(
            (self.cum.copy(), occupancy, self.running_seqs, sum(w.count for w in self.waiting))
        )
        if len(self.timeline) >= 2 * TIMELINE_POINTS:
            self.timeline = self.timeline[1::2]  # keep it bounded: every other sample

    def finish(self, cohorts: list[_Cohort]) -> int:
        n_done = 0
        if cohorts:
            self.batch_full = False  # SGLang: the running batch shrank
        for co in cohorts:
            self.running.remove(co)
            self.running_seqs -= co.count
            self.free += co.reserved * co.count if self.reserve else co.blocks * co.count
            assert co.first_vec is not None
            end = self.cum.copy()
            if co.waits is None:
                self.done.append(
                    (
                        co.count,
                        co.prompt,
                        co.output,
                        co.arrival_vec,
                        co.arrival_time,
                        co.first_vec,
                        end,
                    )
                )
            else:  # a row a member: each waited its own time
                for wait in co.waits:
                    self.done.append(
                        (1, co.prompt, co.output, co.arrival_vec, wait, co.first_vec, end)
                    )
            n_done += co.count
        return n_done

    # ----- runs of pure decode ---------------------------------------------------------------
    def decode_run_bound(self) -> int:
        """Steps a run of pure decode could last before a request in it finishes; 0 when none
        can start now (a prompt is being prefilled, a waiting one can join, nothing decodes)."""
        if self.prefilling or not self.pool_n or self.pool_n > self.budget:
            return 0
        if self.waiting and self.running_seqs < self.max_seqs and self._head_admissible():
            return 0
        return self.finish_heap[0] - self.dstep if self.finish_heap else 1 << 30

    def decode_run_length(self, horizon: int, bound: int | None = None) -> int:
        """Steps that can be advanced at once: everything running decodes, nothing can join,
        at most ``horizon`` (``bound``: :meth:`decode_run_bound`, when already known)."""
        k = min(horizon, self.decode_run_bound() if bound is None else bound)
        if k <= 1:
            return 0
        return self.pool_steps_within(self.free, k)

    def _head_admissible(self) -> bool:
        if self.sglang:
            return self._sglang_admissible()
        co = self.waiting[0]
        room = self.budget - self.pool_n
        if room <= 0:
            return False
        if self.reserve:
            return self.free >= self._blocks_for(co.prompt + co.output)
        t = min(co.prompt + co.generated, room)
        return self.free >= self._blocks_for(t)

    def advance_decode_run(self, k: int) -> list[_Cohort]:
        dec = self.pool_n
        mid = (k - 1) / 2.0
        ctx = self.pool_ctx + dec * (1.0 + mid)
        batch = StepBatch()
        w = self.window
        batch.decode_seqs = dec
        batch.decode_context = ctx
        batch.decode_context_window = min(ctx, dec * w) if w else ctx
        buf = self.buf
        buf[:] = 0.0
        self.step_terms(buf, batch, self.dep)
        demand = self.pool_block_demand(k)
        self.free -= demand // 2  # occupancy recorded at the run's middle
        self._account(buf, k, float(dec))
        self.free -= demand - demand // 2
        self.step_no += k
        self.dstep += k
        self._decay_ratio(k)
        self.pool_ctx += dec * k
        return self._pool_finished()


class LiveEngine:
    """One replica's scheduler stepped in real time, request by request: the simulated server's
    clock.

    Requests join the waiting queue as they arrive (:meth:`submit`); :meth:`step` schedules the
    next step exactly as :func:`simulate` does (the same scheduler, preemption, chunked prefill
    and step terms) and returns how long it takes (``c . terms`` seconds); after it the tokens
    each request has (:meth:`generated`) are what the engine produced by the step's end. A
    server that sleeps each step's time, and streams each step's tokens
    :attr:`request_path_s` after it, therefore serves a load as its prediction does.

    ``cached_tokens`` of :meth:`submit` is the prompt prefix found in the server's prefix cache:
    its whole blocks are not prefilled. :meth:`cancel` drops a request (a client that went away)
    and frees its KV blocks. ``step_terms``: how a step's terms are filled (a disaggregated
    pool adds its all-to-all, as its prediction does).
    """

    def __init__(
        self,
        dep: Deployment,
        coefficients: np.ndarray,
        step_terms: StepTerms = fill_step_features,
    ) -> None:
        self._eng = _Engine(dep, np.asarray(coefficients, dtype=float), step_terms=step_terms)
        self._live: dict[int, _Cohort] = {}
        self._finished: dict[int, int] = {}  # id -> output tokens, until forgotten
        self._next_id = 0
        #: requests the last step finished
        self.finished_last_step = 0
        #: seconds each token of a served request reaches its client after the step that
        #: made it (the ``request_path`` term; 0 offline): a server delays its stream by it
        self.request_path_s = deployment_request_path_s(np.asarray(coefficients, dtype=float), dep)

    @property
    def max_num_seqs(self) -> int:
        return int(self._eng.max_seqs)

    @property
    def kv_capacity_tokens(self) -> int:
        return int(self._eng.dep.kv_capacity_tokens)

    def submit(self, prompt_tokens: int, output_tokens: int, cached_tokens: int = 0) -> int:
        """Queue a request; returns its id."""
        rid = self._next_id
        self._next_id += 1
        eng = self._eng
        co = _Cohort(1, max(1, prompt_tokens), max(1, output_tokens), rid, eng.cum.copy(), 0.0)
        co.cached_prompt = max(0, cached_tokens)
        eng.waiting.append(co)
        self._live[rid] = co
        return rid

    def step(self) -> float | None:
        """Schedule and run one step: its seconds, or None when nothing can be scheduled."""
        eng = self._eng
        assert eng.c is not None
        before = eng.now()
        finished = eng.step()
        if finished is None:
            return None
        self.finished_last_step = len(finished)
        if finished:
            eng.finish(finished)
            for co in finished:
                self._finished[co.order] = co.output
                self._live.pop(co.order, None)
        # a server runs for days: keep none of the per-request and per-step records
        eng.done.clear()
        eng.gap_terms.clear()
        eng.gap_weight.clear()
        return eng.now() - before

    def generated(self, rid: int) -> int:
        """Output tokens request ``rid`` has so far (its output length once it finished)."""
        co = self._live.get(rid)
        if co is None:
            return self._finished.get(rid, 0)
        if co.in_pool:
            return co.generated + self._eng.step_no - co.base_step
        return co.generated

    def finished(self, rid: int) -> bool:
        return rid in self._finished

    def forget(self, rid: int) -> None:
        """The caller read a finished request's last token: stop tracking it."""
        self._finished.pop(rid, None)

    def cancel(self, rid: int) -> None:
        """Drop a queued or running request; its KV blocks are freed."""
        co = self._live.pop(rid, None)
        if co is None:
            self._finished.pop(rid, None)
            return
        eng = self._eng
        if co in eng.waiting:
            eng.waiting.remove(co)
            return
        eng.unpool_all()
        eng.running.remove(co)
        eng.running_seqs -= co.count
        eng.batch_full = False  # SGLang: the running batch shrank
        eng.free += co.reserved * co.count if eng.reserve else co.blocks * co.count
        eng.repool()

    @property
    def idle(self) -> bool:
        return not self._eng.running and not self._eng.waiting

    @property
    def running(self) -> int:
        return self._eng.running_seqs

    @property
    def waiting(self) -> int:
        return sum(co.count for co in self._eng.waiting)

    @property
    def kv_usage(self) -> float:
        """Share of the KV blocks in use (vLLM's ``kv_cache_usage_perc``, 0-1)."""
        eng = self._eng
        return (eng.total_blocks - eng.free) / eng.total_blocks if eng.total_blocks else 0.0

    @property
    def preemptions(self) -> int:
        return self._eng.preemptions


def simulate(
    dep: Deployment,
    coefficients: np.ndarray | None = None,
    *,
    max_steps: int = 200_000_000,
    timeline: bool = True,
) -> SimTrace:
    """Simulate one replica of ``dep.scenario`` (its share of the load when there are several).

    ``coefficients`` (full vector over the step terms) is needed only when arrivals follow the
    clock (``rate``, ``trace``); closed-loop and offline runs are simulated in terms alone.
    ``timeline`` False: without the KV, running and waiting timeline (a prediction's figures
    do not read it; a seventh of a search's simulation time was recording it).
    """
    sc = dep.scenario
    replicas = dep.loaded_replicas
    n_total = sc.effective_num_requests()
    n = max(1, math.ceil(n_total / replicas))
    clocked = sc.load in ("rate", "trace")  # arrivals at set times
    if clocked and coefficients is None:
        raise ValueError("a rate or trace load needs coefficients to run its clock")
    turnaround = closed_loop_turnaround_s(dep, coefficients)
    time_driven = clocked or turnaround > 0
    eng = _Engine(dep, coefficients, timeline=timeline)
    order = 0
    if sc.load == "trace" and sc.trace:
        reqs = sorted(sc.trace, key=lambda r: r.arrival_s)[replicas - 1 :: replicas] or list(
            sc.trace
        )
        arrivals = _Arrivals(
            np.array([r.arrival_s for r in reqs]),
            np.array([r.input_len for r in reqs]),
            np.array([r.output_len for r in reqs]),
        )
        n = len(reqs)
    else:
        ins, outs = _request_lengths(sc, n)
        rate = (sc.request_rate or 1.0) / replicas
        times = _arrival_times(sc, n, rate) if sc.load == "rate" else np.zeros(n)
        arrivals = _Arrivals(times, ins, outs)
    fixed_lengths = bool(np.all(arrivals.inputs == arrivals.inputs[0])) and bool(
        np.all(arrivals.outputs == arrivals.outputs[0])
    )
    issued = 0
    warm = warm_prompts_held(dep, n)
    warm_tokens = sc.warm_prompt_tokens

    def issue(
        count: int, at_vec: np.ndarray | None, at_time: float, waits: list[float] | None = None
    ) -> None:
        """Queue the next ``count`` requests, arrived at ``at_vec`` plus ``at_time`` (or each
        at its own of ``waits``, first arrived first)."""
        nonlocal issued, order
        if count <= 0:
            return
        if issued < warm < issued + count:
            # the repeated prompts and the new ones after them go in as two cohorts
            first = warm - issued
            issue(first, at_vec, at_time, waits[:first] if waits else None)
            issue(count - first, at_vec, at_time, waits[first:] if waits else None)
            return
        cached = issued < warm  # these requests repeat prompts the server still holds
        groups: dict[tuple[int, int], list[int]] = {}
        if fixed_lengths:
            groups[int(arrivals.inputs[issued]), int(arrivals.outputs[issued])] = list(range(count))
        else:
            # requests issued at the same instant with the same lengths move as one cohort
            # (their order among themselves is arbitrary); the others keep their order
            for j in range(count):
                pair = (int(arrivals.inputs[issued + j]), int(arrivals.outputs[issued + j]))
                groups.setdefault(pair, []).append(j)
        for (prompt, output), members in groups.items():
            co = _Cohort(len(members), prompt, output, order, at_vec, at_time)
            if waits is not None:
                co.waits = [waits[j] for j in members]
            if cached:
                co.cached_prompt = min(prompt, warm_tokens or prompt)
            eng.waiting.append(co)
            order += 1
        issued += count

    if sc.load == "concurrency":
        conc = max(1, round((sc.concurrency or 1) / replicas))
        issue(min(conc, n), eng.cum.copy(), 0.0)
    elif not clocked:
        issue(n, eng.cum.copy(), 0.0)

    completed = 0
    next_arrival = 0
    #: a closed loop's replacements on their way to the engine: (arrival time, how many), in
    #: arrival order
    replacements: deque[tuple[float, int]] = deque()
    spread = spreads_first_wave(dep, turnaround)
    while completed < n:
        if eng.step_no > max_steps:
            eng_note = f"stopped after {max_steps} steps"
            raise RuntimeError(eng_note)
        if replacements:
            now = eng.now()
            waits = []
            while replacements and replacements[0][0] <= now + 1e-12:
                t_arr, count = replacements.popleft()
                # waiting since t_arr for this step boundary (as a rate's arrivals do)
                waits += [-(now - t_arr)] * count
            # those that arrived since the last boundary are scheduled together: one cohort
            # (each keeps its own wait), not one a request (the simulator's cost is per cohort)
            if waits:
                issue(len(waits), eng.cum.copy(), waits[0], waits)
            if not eng.running and not eng.waiting and replacements:
                eng.cum[_IDLE] += replacements[0][0] - now
                continue
        if clocked:
            now = eng.now()
            while next_arrival < n and arrivals.times[next_arrival] <= now + 1e-12:
                t_arr = float(arrivals.times[next_arrival])
                start = next_arrival
                while next_arrival < n and arrivals.times[next_arrival] == t_arr:
                    next_arrival += 1
                issued = start
                # arrival = this step boundary minus how long it has waited for it (a fixed
                # offset), so TTFT = c . (first - boundary) + wait stays positive for any c
                boundary = eng.cum.copy()
                for _ in range(start, next_arrival):
                    issue(1, boundary, -(now - t_arr))
            if not eng.running and not eng.waiting:
                if next_arrival >= n:
                    break
                eng.cum[_IDLE] += float(arrivals.times[next_arrival]) - now
                continue
        # a run of pure decode steps? (until the next arrival, when arrivals follow the clock)
        bound = eng.decode_run_bound()
        k = 0
        if bound > 1:
            horizon = 1 << 30
            due = (
                replacements[0][0]
                if replacements
                else float(arrivals.times[next_arrival])
                if clocked and next_arrival < n
                else None
            )
            if due is not None:
                assert coefficients is not None
                batch = StepBatch()
                batch.add_decode(eng.pool_n, eng.pool_ctx / max(eng.pool_n, 1) + 1, eng.window)
                probe = np.zeros(N_FEATURES)
                fill_step_features(probe, batch, dep)
                dt = float(np.dot(coefficients, probe))
                gap = due - eng.now()
                horizon = max(1, math.ceil(gap / dt)) if dt > 0 else 1
            k = eng.decode_run_length(horizon, bound)
        if k > 1:
            finished = eng.advance_decode_run(k)
        else:
            stepped = eng.step()
            if stepped is None:
                if clocked and next_arrival < n:
                    now = eng.now()
                    eng.cum[_IDLE] += max(0.0, float(arrivals.times[next_arrival]) - now)
                    continue
                raise RuntimeError(
                    "the scheduler cannot make progress: a request does not fit the KV cache"
                )
            finished = stepped
        if finished:
            done = eng.finish(finished)
            completed += done
            if sc.load == "concurrency":
                owed = n - issued - sum(count for _, count in replacements)
                if turnaround > 0 and owed > 0:
                    give = min(done, owed)
                    due = eng.now() + turnaround
                    if spread:  # one phase a request from now on (spreads_first_wave)
                        spread = False
                        assert coefficients is not None
                        # the wave's lifetime over its requests
                        span = max(_lifetime_s(co, eng.cum, coefficients) for co in finished)
                        parts = give
                    else:  # one after another (FRONT_END_SPACING)
                        span, parts = FRONT_END_SPACING * turnaround, 1
                    for j in range(give):
                        _queue_replacement(replacements, due + j * span / parts)
                elif owed > 0:
                    issue(min(done, owed), eng.cum.copy(), 0.0)
    return _trace(eng, dep, time_driven, arrivals)


def warm_prompts_held(dep: Deployment, n: int) -> int:
    """How many of a replica's ``n`` requests, from the first, find their prompt in the prefix
    cache: the scenario's ``warm_prompts`` (prompts an earlier run on the same server sent, a
    synthetic dataset drawn again with the same seed), this replica's share of them, when the
    earlier run's requests fit the KV cache and the scenario does not turn prefix caching off.
    Each finds its whole prompt there, or the first ``warm_prompt_tokens`` of it where the
    earlier run drew shorter prompts. vLLM V1 and SGLang cache prefixes by default, so a
    scenario that leaves it unstated finds them (the model's vLLM engine otherwise keeps it off
    unless a plan with a shared prefix states it, :mod:`planner.recommend.search`).

    Both engines evict the least recently used cached blocks first (vLLM's free block queue,
    SGLang's radix cache). An earlier run that sent the prompts in the same order and filled
    more than the cache has evicted its first prompts by its end, and each new request then
    evicts the oldest of the rest before the run reaches them, so such a repeat finds nothing
    (vLLM issue 54227, 2026-08-28: the cells of a sweep whose prompts exceeded the cache gained
    the least). A cached prompt is computed from its last block on
    (:meth:`_Engine._cached_prefix`); vLLM issue 54227 measured a 16K-token cell with a warm
    cache at a 49x shorter TTFT and a 2.3x higher throughput than cold."""
    sc = dep.scenario
    if not sc.warm_prompts or sc.enable_prefix_caching is False:
        return 0
    warm = min(n, math.ceil(sc.warm_prompts / dep.loaded_replicas))
    sent = min(sc.mean_input_len, sc.warm_prompt_tokens or sc.mean_input_len)
    footprint = warm * (sent + sc.mean_output_len)
    return warm if footprint <= dep.kv_capacity_tokens else 0


#: how far apart, as a share of the served request's fitted path (the closed loop's turnaround),
#: the replacements of requests that finished in one step reach the engine. The server's front
#: end streams the finished requests' last tokens and takes in their replacements one at a time
#: (vLLM's API server and its output handler, SGLang's tokenizer manager, each one Python
#: process), and an idle engine starts a step with the first request that reaches it: vLLM's
#: ``EngineCoreProc._process_input_queue`` (vllm/v1/engine/core.py, read 2026-12-05) blocks
#: for one request when there is no work and steps as soon as it has one; the rest join the
#: steps after. So a wave's prompts are not all prefilled in one step. Scicom's vLLM 0.19 on
#: TP 8 x 1 (``data/measured_benchmaq.csv``, 127-token prompts) measured a mean TTFT of 61, 83
#: and 165 ms at 10, 25 and 50 in flight; prefilling 25 such prompts together takes 57 ms at the
#: 8 H100s' dense BF16 peak, beside a ~40 ms path, so the wave did not reach the engine at once.
#: In sample (shipped fit, refitted with it) those rows went 1.75, 2.27, 1.97x -> 1.33, 1.54,
#: 1.24x their TTFT, and their p99 TPOT 0.93, 0.89, 0.90 -> 0.95, 0.96, 1.03x. The share was
#: chosen held out by source among 0.03, 0.1 and 0.2 (TTFT median 24.7, 23.8, 24.2%; p99 TPOT
#: 27.7, 27.5, 28.2%; 25.6% and 26.5% without it); the first wave, sent at once by the client,
#: reaches the engine together (spaced too: TTFT 25.4%).
FRONT_END_SPACING = 0.1


def spreads_first_wave(dep: Deployment, turnaround: float) -> bool:
    """Whether the first wave of a served closed loop's replacements reaches the simulated
    replica spread over one lifetime, one request a phase, rather than all at once: a vLLM
    engine of several data-parallel replicas (``turnaround`` > 0: served, with a clock).

    Why: vLLM's front end deals each request to the replica with the lowest waiting x 4 +
    running, counts its data-parallel coordinator publishes every 100 ms, plus the requests
    the front end itself sent since (``DPLBAsyncMPClient.get_core_engine_for_request``,
    vllm/v1/engine/core_client.py, read 2026-12-05). A finished request leaves those counts only
    at the next update, so the replacements of a wave that ends on one replica are dealt
    alternately over all of them, and those sent to another join it in the middle of its own
    wave: the replicas' waves come apart, and a replica's arrivals spread over the lifetime of
    a request. One replica simulated alone keeps its wave together forever (replaced where
    it finished); it stands for the mixed state by giving each replacement of its first
    finished wave its own phase, after which every request is replaced where it finishes.

    Scicom's vLLM 0.19 runs (``data/measured_benchmaq.csv``) show it: Llama-3.1-70B on TP 4 x 2
    replicas at 10 in flight, 1,023 tokens in, measured a mean TTFT of 139 ms and TPOT of
    17.9 ms; the waves kept together gave 360 ms and 15.6 ms, spread 137 ms and 17.4 ms (the
    shipped fit, in sample); at 25 in flight 176 and 21.7 measured, 714 and 17.5 together, 297
    and 20.8 spread. On TP 8 x 1, one replica, the waves stay together (but for the front end's
    spacing, :data:`FRONT_END_SPACING`): 366 ms measured against 416 simulated. Not all of
    it: with 4,095-token prompts at 25 in flight the spread phases gather again behind the
    prefill budget (1,928 ms simulated, 592 measured).

    SGLang's data-parallel attention deals requests round robin (its default
    ``--load-balance-method``) over ranks that step together, so its waves stay together;
    TensorRT-LLM's attention data parallelism is left as it was (no shipped row runs it as a
    closed loop). The one-time delay costs the run at most half a lifetime of its first wave's
    seats, ``concurrency / (2 num_requests)`` of its work."""
    return turnaround > 0 and dep.loaded_replicas > 1 and dep.family == "vllm"


def _lifetime_s(co: _Cohort, cum: np.ndarray, coefficients: np.ndarray) -> float:
    """Seconds from the cohort's arrival to the step boundary ``cum`` (its E2E when it has
    just finished), as :func:`planner.perf.metrics.run_metrics` prices a request's E2E."""
    assert co.arrival_vec is not None
    first = co.waits[0] if co.waits else co.arrival_time  # the longest-lived member's
    return float(np.dot(coefficients, cum - co.arrival_vec)) - first


def _queue_replacement(queue: deque[tuple[float, int]], due: float) -> None:
    """Put one replacement due at ``due`` into ``queue`` in arrival order (a later one
    usually: scanned from the end)."""
    i = len(queue)
    while i > 0 and queue[i - 1][0] > due:
        i -= 1
    queue.insert(i, (due, 1))


def closed_loop_turnaround_s(dep: Deployment, coefficients: np.ndarray | None) -> float:
    """Seconds from a closed-loop request's last token leaving the engine to its replacement
    reaching the engine: the served request's fixed path again (:func:`planner.perf.step_time.
    deployment_request_path_s`: detokenising and streaming the last chunk, the client's next
    HTTP request, tokenising it and handing it to the engine's process); 0 for a load that is
    not a closed loop, an engine without that path (an offline benchmark, Triton's front end)
    or no coefficients to price it (a run simulated in terms alone).

    Why it matters: with answers of one length a closed loop's requests finish a few decode
    steps apart, so their replacements reach the engine within a few milliseconds of each
    other (:data:`FRONT_END_SPACING` apart) and queue behind each other's prefills, as vLLM
    serves them. Replaced at the very step boundary (no turnaround), each was prefilled at
    once, one step after the previous one, and the prefills landed in the decodes' time
    instead. Scicom's vLLM 0.19 runs on
    8 x H100 (4,096 tokens in, 10-50 in flight) measured TTFT 2-3x and TPOT 0.7-0.8x what the
    simulator gave without it; with it, in sample, the TTFTs' median error went 49% -> 24%
    and the TPOTs' 10% -> 5% before any refit (session script, 2026-12-04)."""
    if coefficients is None or not _served_closed_loop(dep.scenario):
        return 0.0
    return deployment_request_path_s(coefficients, dep)


def _served_closed_loop(scenario: Scenario) -> bool:
    return scenario.load == "concurrency" and has_request_path(scenario)


def needs_clock(dep: Deployment) -> bool:
    """Whether :func:`simulate` needs coefficients to run ``dep``'s load as it ran: arrivals
    at set times (a rate, a trace) or a served closed loop (its turnaround,
    :func:`closed_loop_turnaround_s`)."""
    return dep.scenario.load in ("rate", "trace") or _served_closed_loop(dep.scenario)


def _trace(eng: _Engine, dep: Deployment, time_driven: bool, arrivals: _Arrivals) -> SimTrace:
    rows = eng.done
    m = len(rows)
    count = np.array([r[0] for r in rows], dtype=float)
    zero = np.zeros(N_FEATURES)
    arrival = np.array([r[3] if r[3] is not None else zero for r in rows]).reshape(m, N_FEATURES)
    start_time = float(arrivals.times.min()) if time_driven and len(arrivals.times) else 0.0
    first = np.array([r[5] for r in rows]).reshape(m, N_FEATURES)
    finish = np.array([r[6] for r in rows]).reshape(m, N_FEATURES)
    if has_request_path(dep.scenario):
        add_request_path(first, finish, engine_ranks(dep))
    return SimTrace(
        end=eng.cum.copy(),
        count=count,
        input_len=np.array([r[1] for r in rows], dtype=float),
        output_len=np.array([r[2] for r in rows], dtype=float),
        arrival=arrival,
        arrival_time=np.array([r[4] for r in rows], dtype=float),
        first=first,
        finish=finish,
        gap_terms=np.array(eng.gap_terms).reshape(len(eng.gap_terms), N_FEATURES),
        gap_weight=np.array(eng.gap_weight, dtype=float),
        running_integral=eng.running_integral.copy(),
        kv_integral=eng.kv_integral.copy(),
        kv_max=eng.kv_max,
        preemptions=eng.preemptions,
        kv_capacity_tokens=dep.kv_capacity_tokens,
        steps=eng.step_no,
        time_driven=time_driven,
        start_time=start_time,
        timeline_terms=np.array([t[0] for t in eng.timeline]).reshape(
            len(eng.timeline), N_FEATURES
        ),
        timeline_kv=np.array([t[1] for t in eng.timeline], dtype=float),
        timeline_running=np.array([t[2] for t in eng.timeline], dtype=float),
        timeline_waiting=np.array([t[3] for t in eng.timeline], dtype=float),
    )
