"""Time of one engine iteration as non-negative coefficients over physical terms.

``step_time_s = sum_k c_k * x_k(batch)`` where every term ``x_k`` is a time in seconds at the
spec-sheet rate (or a count times a nominal unit), so a coefficient is a dimensionless
"how many times slower than the spec" factor (BLIS-style physics-informed regression, see
docs/domain.md). The terms, per GPU, for one macro-step in which every running sequence advances:

=====================  ==========================================================================
term                   x (seconds)
=====================  ==========================================================================
roofline               max(streamed bytes / memory BW, FLOPs / peak): the plain roofline
weight_read            non-expert weight bytes / memory BW (streamed once per chain)
expert_read            routed-expert bytes touched / memory BW; a layer touches
                       E x (1 - (1 - k/E)^tokens) of its E experts
kv_read                KV bytes read by attention / memory BW
gemm                   2 x active params x tokens (+ lm_head per sampled sequence) / peak
attention              score + value FLOPs over (query, key) pairs, prefill's quadratic part
                       included / 16-bit (or FP8) peak
allreduce_<link>       ring all-reduce bytes, 2 (tp-1)/tp x tokens x hidden x 2 B, twice per
                       layer, / link BW per direction; host-staged PCIe (no P2P) moves
                       2 (tp-1) x the volume through the shared host path
ar_calls_<link>        all-reduce calls x 10 us (launch and synchronisation latency)
pp_hops                intra-node pipeline boundaries x 100 us
net_hops               inter-node pipeline boundaries x 1 ms
net_transfer           activation bytes crossing nodes / network BW
layers                 layers executed x 10 us (per-layer launch overhead)
forward_passes         forward passes in the chain x 1 ms (per-step scheduling, sampling)
sequences              sequences in the step x 100 us (per-request CPU work)
eager_layers           layers x 10 us when CUDA graphs are off (prior only: no labelled data)
idle                   seconds the engine waits for work (coefficient fixed at 1)
=====================  ==========================================================================

Pipeline parallelism (PP = p): the running batch is split into m = min(p, sequences)
micro-batches that circulate through the p stages; one macro-step, in which every sequence gets
a token, lasts one micro-batch's trip through all stages. Per GPU that is: the whole model's
weights / tp streamed once, 1/m of the batch's KV, FLOPs and all-reduce volume, all 2L all-reduce
calls, and p forward passes. With fewer sequences than stages (m < p) the bubbles show up as the
same weight time for fewer tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.perf.deployment import Deployment

FEATURES: tuple[str, ...] = (
    "roofline",
    "weight_read",
    "expert_read",
    "kv_read",
    "gemm",
    "attention",
    "allreduce_nvlink",
    "allreduce_pcie_p2p",
    "allreduce_pcie_host",
    "ar_calls_nvlink",
    "ar_calls_pcie_p2p",
    "ar_calls_pcie_host",
    "pp_hops",
    "net_hops",
    "net_transfer",
    "layers",
    "forward_passes",
    "sequences",
    "eager_layers",
    "idle",
)
N_FEATURES = len(FEATURES)
IDX = {name: i for i, name in enumerate(FEATURES)}
#: terms whose coefficient is fixed, not fitted: idle time is time; eager overhead has no
#: labelled measurements (10 x 10 us = 100 us per layer: ~15 kernel launches at ~6 us each).
FIXED_COEFFICIENTS: dict[str, float] = {"idle": 1.0, "eager_layers": 10.0}
FITTED: tuple[str, ...] = tuple(f for f in FEATURES if f not in FIXED_COEFFICIENTS)
FITTED_IDX = np.array([IDX[f] for f in FITTED])

AR_CALL_UNIT_S = 10e-6
PP_HOP_UNIT_S = 100e-6
NET_HOP_UNIT_S = 1e-3
LAYER_UNIT_S = 10e-6
FORWARD_UNIT_S = 1e-3
SEQUENCE_UNIT_S = 100e-6

_AR_BYTES = {
    "nvlink": IDX["allreduce_nvlink"],
    "pcie_p2p": IDX["allreduce_pcie_p2p"],
    "pcie_host": IDX["allreduce_pcie_host"],
}
_AR_CALLS = {
    "nvlink": IDX["ar_calls_nvlink"],
    "pcie_p2p": IDX["ar_calls_pcie_p2p"],
    "pcie_host": IDX["ar_calls_pcie_host"],
}


@dataclass
class StepBatch:
    """What one engine iteration computes.

    ``decode_context`` is the sum over decoding sequences of the tokens each attends to;
    ``prefill_pairs`` the (query, key) pairs of the prefill chunks (a chunk of ``n`` tokens
    after ``c`` cached ones has ``n x (c + (n + 1) / 2)``); ``prefill_kv_tokens`` the KV
    tokens those chunks read (``c + n`` each). ``*_window`` are the same with every context
    capped at the sliding window (equal to the others for models without one).
    """

    decode_seqs: float = 0.0
    decode_context: float = 0.0
    prefill_tokens: float = 0.0
    prefill_seqs: float = 0.0
    prefill_pairs: float = 0.0
    prefill_kv_tokens: float = 0.0
    decode_context_window: float = 0.0
    prefill_pairs_window: float = 0.0
    prefill_kv_tokens_window: float = 0.0

    @classmethod
    def of(
        cls,
        decode_contexts: list[int] | tuple[int, ...] = (),
        prefill_chunks: list[tuple[int, int]] | tuple[tuple[int, int], ...] = (),
        window: int | None = None,
    ) -> StepBatch:
        """From per-sequence contexts and (chunk tokens, cached tokens before) prefill chunks."""
        batch = cls()
        for ctx in decode_contexts:
            batch.add_decode(1, float(ctx), window)
        for tokens, before in prefill_chunks:
            batch.add_prefill(1, tokens, before, window)
        return batch

    def add_decode(self, count: float, context: float, window: int | None) -> None:
        self.decode_seqs += count
        self.decode_context += count * context
        self.decode_context_window += count * (min(context, window) if window else context)

    def add_prefill(self, count: float, tokens: float, before: float, window: int | None) -> None:
        self.prefill_seqs += count
        self.prefill_tokens += count * tokens
        pairs = tokens * (before + (tokens + 1) / 2)
        self.prefill_pairs += count * pairs
        self.prefill_kv_tokens += count * (before + tokens)
        if window:
            # each query sees at most `window` keys
            full = min(tokens, max(0.0, window - before))
            capped = full * (before + (full + 1) / 2) + (tokens - full) * window
            self.prefill_pairs_window += count * capped
            self.prefill_kv_tokens_window += count * min(before + tokens, window + tokens)
        else:
            self.prefill_pairs_window += count * pairs
            self.prefill_kv_tokens_window += count * (before + tokens)

    @property
    def seqs(self) -> float:
        return self.decode_seqs + self.prefill_seqs

    @property
    def tokens(self) -> float:
        return self.decode_seqs + self.prefill_tokens


def step_features(batch: StepBatch, dep: Deployment) -> np.ndarray:
    """The terms x_k of one macro-step (see the module docstring), in seconds."""
    out = np.zeros(N_FEATURES)
    fill_step_features(out, batch, dep)
    return out


def fill_step_features(out: np.ndarray, batch: StepBatch, dep: Deployment) -> None:
    seqs = batch.decode_seqs + batch.prefill_seqs
    if seqs <= 0:
        return
    tokens = batch.decode_seqs + batch.prefill_tokens
    pp = dep.pp
    micro = float(min(pp, seqs))
    micro_tokens = tokens / micro
    # memory traffic of one chain
    weight_bytes = dep.dense_weight_bytes
    expert_bytes = 0.0
    if dep.num_experts:
        e, k = dep.num_experts, dep.experts_per_token
        touched = e * (1.0 - (1.0 - k / e) ** micro_tokens)
        expert_bytes = touched * dep.num_moe_layers * dep.expert_bytes_per_expert_layer
    kv_tokens_full = batch.decode_context + batch.prefill_kv_tokens
    kv_tokens_win = batch.decode_context_window + batch.prefill_kv_tokens_window
    kv_bytes = (
        kv_tokens_full * dep.kv_bytes_per_token_full + kv_tokens_win * dep.kv_bytes_per_token_window
    ) / micro
    pairs_full = batch.decode_context + batch.prefill_pairs
    pairs_win = batch.decode_context_window + batch.prefill_pairs_window
    sampled = seqs / micro  # the lm_head runs once a sequence, on its last token
    gemm_flops = micro_tokens * dep.gemm_flops_per_token + sampled * dep.lm_head_flops_per_seq
    attn_flops = (
        pairs_full * dep.attn_flops_per_pair_full + pairs_win * dep.attn_flops_per_pair_window
    ) / micro
    bw = dep.memory_bw
    t_weight = weight_bytes / bw
    t_expert = expert_bytes / bw
    t_kv = kv_bytes / bw
    t_gemm = gemm_flops / dep.peak_flops
    t_attn = attn_flops / dep.peak_flops_16bit
    out[0] = max(t_weight + t_expert + t_kv, t_gemm + t_attn)
    out[1] = t_weight
    out[2] = t_expert
    out[3] = t_kv
    out[4] = t_gemm
    out[5] = t_attn
    layers = dep.num_layers
    tp = dep.tp
    if tp > 1:
        calls = 2.0 * layers
        volume = micro_tokens * dep.hidden_size * 2.0
        if dep.link_class == "pcie_host":
            moved = 2.0 * (tp - 1) * volume
        else:
            moved = 2.0 * (tp - 1) / tp * volume
        out[_AR_BYTES[dep.link_class]] = calls * moved / dep.link_bw
        out[_AR_CALLS[dep.link_class]] = calls * AR_CALL_UNIT_S
    if pp > 1:
        net = dep.net_boundaries
        out[12] = (pp - 1 - net) * PP_HOP_UNIT_S
        if net:
            out[13] = net * NET_HOP_UNIT_S
            out[14] = net * micro_tokens * dep.hidden_size * 2.0 / dep.network_bw
    out[15] = layers * LAYER_UNIT_S
    out[16] = pp * FORWARD_UNIT_S
    out[17] = seqs * SEQUENCE_UNIT_S
    if dep.enforce_eager:
        out[IDX["eager_layers"]] = layers * LAYER_UNIT_S


def full_coefficients(fitted: np.ndarray) -> np.ndarray:
    """Insert the fixed coefficients into a vector of fitted ones (order of FITTED)."""
    full = np.zeros(N_FEATURES)
    full[FITTED_IDX] = fitted
    for name, value in FIXED_COEFFICIENTS.items():
        full[IDX[name]] = value
    return full


def roofline_coefficients() -> np.ndarray:
    """The plain roofline: only ``roofline`` and idle time, no overheads."""
    c = np.zeros(N_FEATURES)
    c[IDX["roofline"]] = 1.0
    c[IDX["idle"]] = 1.0
    return c


def step_time_s(batch: StepBatch, dep: Deployment, coefficients: np.ndarray) -> float:
    """Seconds one engine iteration takes: ``coefficients . step_features(batch, dep)``.

    ``coefficients`` is a full vector over :data:`FEATURES` (see
    :meth:`planner.perf.model.PerformanceModel.coefficients_for`).
    """
    return float(np.dot(coefficients, step_features(batch, dep)))
