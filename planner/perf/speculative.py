"""Speculative decoding as a term of the step model: draft, verify k + 1 tokens, accept some.

A speculative engine step, for each decoding sequence, drafts ``k`` tokens, runs the target
model once over the last accepted token and the ``k`` drafts (``k + 1`` query tokens a sequence,
one forward pass: the verification), and keeps the longest prefix of drafts the target agrees
with plus the target's own next token. Its cost and its yield:

- **verification**: the target's forward pass with ``k + 1`` query tokens per decoding sequence
  (:attr:`planner.perf.step_time.StepBatch.decode_query_tokens`): GEMM, MoE, all-reduce and
  lm_head work grow ``k + 1``-fold, attention FLOPs too (every query token attends to the
  context), while weights and the KV cache are read once. At small batches a decode step is
  bound by the weight read, so verifying ``k + 1`` tokens costs about what one token does; at
  large batches it is compute-bound and costs ``k + 1`` times as much: the gain falls with the
  batch and turns into a loss (the tensor cores become the limit near ~300 / (k + 1) sequences
  on an H100 instead of ~300, domain.md).
- **draft**: ``k`` forward passes of the draft, one token a sequence each (vLLM's EAGLE and MTP
  proposers, ``vllm/v1/spec_decode/eagle.py``, and SGLang's chain drafting with
  ``--speculative-eagle-topk 1`` both draft autoregressively, one draft token a pass):

  - MTP: the model's own next-token-prediction layers (``num_nextn_predict_layers`` in
    DeepSeek-V3/R1 and GLM-4.5 config.json; one decoder layer of the model's own shape, with
    its MoE, plus the ``eh_proj`` 2 x hidden x hidden projection, reusing the model's
    embedding and lm_head). vLLM runs the one layer ``k`` times when ``k`` exceeds it.
  - EAGLE-3: a published draft checkpoint (:data:`EAGLE3_DRAFTS`): one Llama decoder layer of
    the target's hidden size whose attention reads 2 x hidden (the token embedding beside the
    fused target features), the fusion ``fc`` of 3 x hidden x hidden, and a 32,000-token draft
    vocabulary (``draft_vocab_size`` 32000 in yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's
    config.json); its attention keeps its own one-layer KV cache.
  - n-gram (prompt lookup): drafts by matching the context's last tokens against earlier ones
    on the CPU: no GPU cost (its CPU time is not modelled).

  The draft passes are priced by the same terms as the target's step (weights, KV, GEMM,
  lm_head, MoE, all-reduce, per-layer launches) on the draft's own constants, without the
  per-step scheduling and per-sequence terms, which the step already counts once. How the
  passes are launched differs: vLLM's proposer (``vllm/v1/spec_decode/eagle.py``,
  ``EagleProposer.propose``) runs the first draft forward and then a Python loop of k - 1
  more, each updating positions, slot mappings and attention metadata, replaying the
  draft's graph and taking an argmax: k passes of CPU work a step, the ``draft_passes`` term
  (k x 1 ms x its fitted coefficient, prior 0.5). SGLang captures the whole k-step draft
  loop (``EAGLEDraftCudaGraphRunner`` records ``draft_forward``) as one graph replayed once a
  step, and TensorRT-LLM runs MTP and one-model EAGLE-3 inside the target's forward: no
  per-pass term there. Measured: Llama-3.1-8B with EAGLE-3 on vLLM at one request in flight
  (vllm-project/vllm issue 20780) takes 10.2 ms a step at k = 2 and 15.2 ms at k = 7 (TPOT x
  mean accepted length), 1.0 ms more a draft token, where the draft's weights and launches
  alone are 0.35 ms.
- **bookkeeping**: one more forward pass's fixed cost (the ``forward_passes`` term: launch,
  scheduling, sampling) every speculative step, whatever ``k``: the engines replay the draft
  as graphs of their own beside the target's (SGLang's draft and draft-extend passes, vLLM's
  EAGLE proposer after the target's forward), run a rejection sampler, and SGLang switches its
  overlap scheduler off when it speculates (server_args.py), so the step's CPU work is no
  longer hidden. Measured: DeepSeek-R1 MTP k=3 on 8 x B200 at one request in flight (SGLang
  pull request 10281, 2.69 tokens a step reported) takes 5.66 ms more a step than without
  speculation (12.09 ms a token without; 6.60 ms x 2.69 with); the verification and draft
  terms alone gave 3.0 ms, with this pass 5.75 ms. Leave-one-source-out over the 10
  speculative rows of data/measured_speculative.csv (``planner validate --scheme source
  --public-only``, the speculative slice), without it / with it: median error of output tok/s
  24% / 18%, of mean TPOT 22% / 20%; of the speed-up over the same configuration without
  speculation 24% / 24% (tok/s) and 32% / 18% (TPOT). What was left of the speed-up error
  was the baseline's: DeepSeek-V3 on MI300X at 1-2 requests in flight was predicted 2-2.5x
  faster than measured without speculation too. The step's ``layer_floor`` term (a layer's
  kernels' floor beyond the roofline, fitted per engine release and model kind,
  :mod:`planner.perf.step_time`) prices that flat baseline, and a flat step makes the
  verification of k + 1 tokens cost what one token's step does: held out by source (16 rows,
  2026-12-02), speed-up error 29% -> 17% (tok/s) and 8% -> 11% (TPOT), output tok/s 24% ->
  19%, mean TPOT 9% -> 2%.
- **yield**: with a per-position acceptance rate ``alpha`` (each draft token accepted with
  probability alpha given the earlier ones were), the mean accepted length of a step, the bonus
  token included, is ``tau = 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)``
  (Leviathan et al., "Fast Inference from Transformers via Speculative Decoding", ICML 2023,
  eq. 1). It is what vLLM calls the mean acceptance length, ``1 + accepted / drafts`` of its
  ``vllm:spec_decode_num_accepted_tokens`` and ``vllm:spec_decode_num_drafts`` counters
  (vllm/v1/spec_decode/metrics.py), and SGLang's ``accept length``.

How it enters the simulator and the steady state without a second code path: a simulated step
is one *accepted token* per decoding sequence. A decode-only step costs
``(verify + k x draft + bookkeeping) / tau``; a step that also holds a prefill chunk costs
``F(verify + chunk) / tau + F(chunk alone) x (1 - 1 / tau)``, so over the ``tau`` simulated
steps in which a sequence advances ``tau`` tokens the engine is charged one verification and
draft and each chunk's own full time. TPOT, throughput and KV growth per token are exact for
this mean; what is approximated is the interleaving (a decode beside a prefill chunk waits one
chunk per token rather than per step) and the token budget (a verifying sequence takes
``k + 1`` of ``max_num_batched_tokens`` in vLLM, one here).

Engine limits, from each engine's source (pinned releases, planner.deploy.engines):

- SGLang (python/sglang/srt/server_args.py, ``_handle_speculative_decoding``, 0.5.x): with
  EAGLE, EAGLE3, NEXTN (MTP) or NGRAM it sets ``max_running_requests`` to 48 unless the user set
  it, disables the overlap scheduler and mixed chunked prefill; with ``--speculative-eagle-topk
  1`` the draft tokens are ``num_steps + 1``; its auto choice of (num_steps, topk, draft tokens)
  is (3, 1, 4) for DeepSeek-V3 and (5, 4, 8) for Llama; NGRAM does not run with DP attention.
- vLLM (vllm/config/speculative.py, V1): no batch size switches speculation off (the V0
  ``disable_by_batch_size`` is gone); ``num_speculative_tokens`` defaults to the MTP layers of
  the config (``n_predict`` = ``num_nextn_predict_layers``) and must be given for EAGLE-3 and
  n-gram (whose prompt lookup window defaults to 5).
- TensorRT-LLM 1.0 (LLM API ``speculative_config``): MTP for DeepSeek-V3 models
  (``decoding_type: MTP``, ``num_nextn_predict_layers``), EAGLE-3 one-model (``decoding_type:
  Eagle``, ``max_draft_len``, ``eagle3_one_model: true``) and n-gram (``decoding_type: NGram``);
  speculation stays on at every batch unless ``max_concurrency`` is set (it is not by default).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from planner.engine import EngineConfig, SpecMethod
from planner.errors import InvalidInputError

if TYPE_CHECKING:
    from planner.catalog import MeasuredResult, ModelArchitecture, ModelCard
    from planner.perf.deployment import Deployment
    from planner.perf.step_time import StepBatch

SPEC_METHODS: tuple[str, ...] = ("none", "mtp", "eagle3", "ngram")
#: the methods that speculate (what a search tries besides "none")
SPECULATIVE_METHODS: tuple[str, ...] = ("mtp", "eagle3", "ngram")
METHOD_LABELS: dict[str, str] = {
    "none": "no speculation",
    "mtp": "MTP",
    "eagle3": "EAGLE-3",
    "ngram": "n-gram",
}

#: SGLang's max_running_requests when speculating and the user set none (server_args.py)
SGLANG_SPEC_MAX_RUNNING_REQUESTS = 48
#: draft vocabulary of the published EAGLE-3 checkpoints (their config.json draft_vocab_size)
EAGLE3_DRAFT_VOCAB = 32000
#: the longest draft the planner considers (vLLM and SGLang accept more; past ~5 tokens the
#: geometric acceptance adds little and verification cost keeps growing)
MAX_SPEC_TOKENS = 8

#: Published EAGLE-3 draft checkpoints by target model (Hugging Face ids; each named in the
#: draft's model card and in the engines' speculative-decoding docs and examples, retrieved
#: 2026-12-01): the search offers EAGLE-3 only where one exists. Llama-3.3-70B-Instruct's is the
#: EAGLE authors' (SafeAILab/EAGLE README's EAGLE-3 weights table; run on 8 x H100 in SGLang
#: pull request 4716, 2025-03-24: 5.88 tokens a step with an 8 x 8 tree on MT-bench). None is
#: verified for Llama-3.1-70B-Instruct (searched again 2026-12-02): the EAGLE authors' table has
#: 3.1-8B and 3.3-70B only; vllm-project/speculators' README (its "Supported Models" table)
#: lists RedHatAI/Llama-3.3-70B-Instruct-speculator.eagle3 as its 70B-Instruct draft; Nebius's
#: 70B draft is for 3.3 too; for 3.1-70B there are EAGLE-1 heads (such as
#: leptonai/EAGLE-Llama-3.1-70B-Instruct: a config and weights, no card), which the step model
#: does not price; and the 3.1-70B EAGLE-3 ids seen
#: (RedHatAI/Llama-3.1-70B-Instruct-speculator.eagle3, nvidia/Llama-3.1-70B-Instruct-Eagle3,
#: yuhuili/EAGLE3-LLaMA3.1-Instruct-70B) occur only in third-party notes and configs, no model
#: card, engine doc or example naming them. A 3.3 draft
#: would load on 3.1 (same shapes and tokenizer) but was trained on 3.3's answers, its
#: acceptance there unmeasured: 3.1-70B gets n-gram (``auto``'s fallback, :func:`auto_methods`).
EAGLE3_DRAFTS: dict[str, str] = {
    "meta-llama/Llama-3.1-8B-Instruct": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    "meta-llama/Llama-3.3-70B-Instruct": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B",
    "Qwen/Qwen3-8B": "AngelSlim/Qwen3-8B_eagle3",
    # GPUStack's performance lab ran its FP8 release with this draft (data/measured_speculative)
    "Qwen/Qwen3-8B-FP8": "Tengyunw/qwen3_8b_eagle3",
    "Qwen/Qwen3-14B": "AngelSlim/Qwen3-14B_eagle3",
    "Qwen/Qwen3-32B": "AngelSlim/Qwen3-32B_eagle3",
    "Qwen/Qwen3-235B-A22B": "nvidia/Qwen3-235B-A22B-Eagle3",
    "openai/gpt-oss-120b": "nvidia/gpt-oss-120b-Eagle3-v2",
}


@dataclass(frozen=True)
class AcceptanceDefault:
    """A per-position acceptance rate and where it was measured."""

    alpha: float
    source: str


@dataclass(frozen=True)
class PublishedAcceptance:
    """One mean accepted length an engine reported for a model, method and draft length
    (the bonus token included: vLLM's ``1 + accepted / drafts``, SGLang's accept length), with
    the workload it was measured on. Its per-position rate is the alpha whose
    ``(1 - alpha^(k+1)) / (1 - alpha)`` is that length (:func:`acceptance_rate_for`)."""

    method: str
    #: the model's ``model_type`` prefix (:func:`_family`)
    family: str
    model: str
    engine: str
    #: the prompts and sampling it was measured on (acceptance is a workload property)
    dataset: str
    num_spec_tokens: int
    accept_len: float
    #: publication and date
    source: str

    @property
    def alpha(self) -> float:
        return acceptance_rate_for(self.accept_len, self.num_spec_tokens)

    @property
    def label(self) -> str:
        return f"{self.accept_len:g} at k={self.num_spec_tokens} ({self.source})"


_EIGEN_2025_07_17 = (
    "lmsys.org blog 2025-07-17, Accelerating SGLang with Multiple Token Prediction (Eigen AI), "
    "case study 1: DeepSeek-V3 decoding on 16 x H200"
)
_VLLM_20780 = (
    "vllm-project/vllm issue 20780 (2025-07-10): yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, one "
    "request in flight"
)

#: Mean accepted lengths the engines published (chain drafting, top-k 1; retrieved 2026-12-02).
#: DeepSeek MTP: 0.68-0.74 a position, against the 85-90% the DeepSeek-V3 Technical Report
#: (arXiv:2412.19437, section 5.4.3) gives for the second token alone, which the planner used
#: before: a chain of k drafts from one MTP layer loses acceptance with each further position.
PUBLISHED_ACCEPTANCE: tuple[PublishedAcceptance, ...] = (
    PublishedAcceptance(
        "mtp", "deepseek", "deepseek-ai/DeepSeek-V3", "sglang",
        "production chat, 65,536-token prompts", 2, 2.18,
        f"{_EIGEN_2025_07_17}, 3-token MTP window",
    ),
    PublishedAcceptance(
        "mtp", "deepseek", "deepseek-ai/DeepSeek-V3", "sglang",
        "production chat, 65,536-token prompts", 3, 2.44,
        f"{_EIGEN_2025_07_17}, 4-token MTP window",
    ),
    PublishedAcceptance(
        "mtp", "deepseek", "deepseek-ai/DeepSeek-R1", "sglang",
        "random 1024/1024 (sglang.bench_serving)", 3, 2.69,
        "sgl-project/sglang pull request 10281: 8 x B200, one request in flight",
    ),
    *(
        PublishedAcceptance(
            "eagle3", "llama", "meta-llama/Llama-3.1-8B-Instruct", "vllm",
            "MT-bench single turn (philschmid/mt-bench)", k, length, _VLLM_20780,
        )
        for k, length in ((2, 2.36), (3, 2.79), (4, 3.08), (5, 3.32), (6, 3.46), (7, 3.54))
    ),
    PublishedAcceptance(
        "eagle3", "minicpm3", "openbmb/MiniCPM3-4B", "vllm", "not named, temperature not named",
        5, 2.44,
        "vllm-project/vllm pull request 24243 (2025-09-04): one RTX 4090, one request in flight",
    ),
    # n-gram (prompt lookup 2-5 tokens) on Llama-3.1-8B-Instruct, the default model of vLLM's
    # examples/offline_inference/spec_decode.py that the PR's command runs: 163,128 output
    # tokens over 30,249 drafted steps (3.63 tokens each, 1 + accepted / drafts) and 53,327
    # steps with no match (one token each); the PR's "seq normalized acceptance length"
    # 163,128 / (30,249 + 53,327) = 1.95 is the tokens a step over all of them, the yield the
    # step model prices (it charges every step a verification)
    PublishedAcceptance(
        "ngram", "llama", "meta-llama/Llama-3.1-8B-Instruct", "vllm",
        "InstructCoder code edits (likaixin/InstructCoder, 1,000 prompts, temperature 0)", 5,
        1.95,
        "vllm-project/vllm pull request 24344, its description's n-gram run, 2025-09; "
        "retrieved 2026-12-02",
    ),
)  # fmt: skip

#: n-gram's assumption where no publication is at hand (:func:`acceptance_defaults` of a
#: ``published`` without n-gram entries)
NGRAM_ASSUMPTION = AcceptanceDefault(
    0.3,
    "assumption, no published measurement adopted: prompt lookup only accepts where the "
    "output repeats the context (code edits, summaries, RAG); calibrate it from a run",
)


def _ngram_default(entries: Sequence[PublishedAcceptance]) -> AcceptanceDefault:
    """n-gram's one default for every model: the median rate of its published lengths, each
    named with the workload it was measured on (prompt lookup's acceptance is the workload's
    own, the model's hardly at all), else :data:`NGRAM_ASSUMPTION`."""
    if not entries:
        return NGRAM_ASSUMPTION
    alpha = float(np.median([e.alpha for e in entries]))
    measured = "; ".join(f"{e.label} on {e.dataset}" for e in entries)
    return AcceptanceDefault(
        round(alpha, 3),
        f"the engine-published {measured}, median rate {alpha:.2f}; prompt lookup accepts "
        "only where the output repeats its context, so each workload's differs",
    )


def mean_accepted_length(alpha: float, k: int) -> float:
    """Mean tokens a step yields per sequence, the bonus token included:
    ``(1 - alpha^(k+1)) / (1 - alpha)`` (``k + 1`` at alpha = 1, 1 at alpha = 0)."""
    if k <= 0:
        return 1.0
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def acceptance_rate_for(accept_len: float, k: int) -> float:
    """The per-position rate alpha whose mean accepted length at ``k`` draft tokens is
    ``accept_len`` (the inverse of :func:`mean_accepted_length`, by bisection)."""
    if not 1.0 <= accept_len <= k + 1:
        raise InvalidInputError(
            "spec_accept_len", accept_len, f"a mean accepted length from 1 to k + 1 = {k + 1}"
        )
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if mean_accepted_length(mid, k) < accept_len:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _family(arch: ModelArchitecture) -> str:
    return arch.model_type.split("_")[0].lower()


def _median_default(entries: Sequence[PublishedAcceptance], what: str) -> AcceptanceDefault:
    alpha = float(np.median([e.alpha for e in entries]))
    lengths = "; ".join(e.label for e in entries)
    return AcceptanceDefault(
        round(alpha, 3),
        f"{what}: median per-position rate {alpha:.2f} of the engine-published mean accepted "
        f"lengths {lengths}",
    )


def acceptance_defaults(
    published: Sequence[PublishedAcceptance] = PUBLISHED_ACCEPTANCE,
) -> dict[tuple[str, str], AcceptanceDefault]:
    """Per-position acceptance rates by (method, model family), "*" for any other family: a
    family's is the median rate of its published lengths (:data:`PUBLISHED_ACCEPTANCE`), a
    method's "*" the median of its families' rates (one vote a family); n-gram's one default
    for every family (:func:`_ngram_default`: its published lengths with their workloads, else
    :data:`NGRAM_ASSUMPTION`). Benchmark prompts (chat, random): a workload's own is
    settable per scenario (``spec_accept_len``) and learnt from runs (:func:`learn_acceptance`).
    Each entry keeps its dataset; a scenario names none, so the defaults pool them."""
    out: dict[tuple[str, str], AcceptanceDefault] = {
        ("ngram", "*"): _ngram_default([e for e in published if e.method == "ngram"])
    }
    for method in ("mtp", "eagle3"):
        families = sorted({e.family for e in published if e.method == method})
        for family in families:
            entries = [e for e in published if e.method == method and e.family == family]
            out[(method, family)] = _median_default(entries, f"{METHOD_LABELS[method]} on {family}")
        if families:
            rates = [out[(method, f)].alpha for f in families]
            alpha = float(np.median(rates))
            named = ", ".join(f"{f} {out[(method, f)].alpha:.2f}" for f in families)
            out[(method, "*")] = AcceptanceDefault(
                round(alpha, 3),
                f"no {METHOD_LABELS[method]} measurement of this family: the median of the "
                f"families' engine-published rates ({named})",
            )
    return out


#: the defaults of :func:`acceptance_defaults`
ACCEPTANCE_DEFAULTS: dict[tuple[str, str], AcceptanceDefault] = acceptance_defaults()


def default_acceptance(method: str, arch: ModelArchitecture) -> AcceptanceDefault:
    """The published per-position acceptance rate of ``method`` on the model's family."""
    own = ACCEPTANCE_DEFAULTS.get((method, _family(arch)))
    return own or ACCEPTANCE_DEFAULTS[(method, "*")]


@dataclass(frozen=True)
class LearntAcceptance:
    """Per-position acceptance rates measured for (model, method, engine family): each measured
    row that reports its mean accepted tokens a step (a public row's figure, or a run's
    ``server_spec_accept_len`` scraped from the server's ``/metrics``) gives
    ``alpha = acceptance_rate_for(accept_len, k)`` at its own draft length; the learnt rate
    is their median, which then prices any draft length by ``(1 - alpha^(k+1)) / (1 - alpha)``.
    The user's runs come before public rows: a key with runs of the user's own takes only
    those (they measured the user's prompts)."""

    #: (model hf_id lower-cased, method, engine family) -> (alpha, source)
    rates: dict[tuple[str, str, str], tuple[float, str]]

    def lookup(self, model: str, method: str, family: str) -> tuple[float, str] | None:
        return self.rates.get((model.lower(), method, family))


def learn_acceptance(results: Sequence[MeasuredResult]) -> LearntAcceptance:
    """The acceptance each (model, method, engine family) was measured at (see
    :class:`LearntAcceptance`); rows without a reported acceptance or a draft length are
    skipped, as are lengths outside 1..k + 1."""
    from planner.engine import engine_family

    found: dict[tuple[str, str, str], list[tuple[float, MeasuredResult]]] = {}
    for r in results:
        k = r.num_spec_tokens
        if r.spec_method in (None, "none") or not r.spec_accept_len or not k:
            continue
        if not 1.0 <= r.spec_accept_len <= k + 1:
            continue
        try:
            family = engine_family(r.engine)
        except InvalidInputError:
            continue
        key = (r.model.lower(), str(r.spec_method), family)
        found.setdefault(key, []).append((acceptance_rate_for(r.spec_accept_len, k), r))
    rates: dict[tuple[str, str, str], tuple[float, str]] = {}
    for key, rows in found.items():
        own = [(a, r) for a, r in rows if r.origin == "user"]
        used = own or rows
        alpha = float(np.median([a for a, _ in used]))
        lens = ", ".join(
            f"{r.spec_accept_len:.2f} at k={r.num_spec_tokens}" for _, r in used[:4]
        ) + (", ..." if len(used) > 4 else "")
        who = "your measured run" if own else "measured public row"
        plural = "s" if len(used) > 1 else ""
        rates[key] = (
            alpha,
            f"learnt from {len(used)} {who}{plural} of {METHOD_LABELS[key[1]]} on "
            f"{key[2]} ({lens} tokens a step; median per-position rate {alpha:.2f})",
        )
    return LearntAcceptance(rates)


def default_num_spec_tokens(family: str, method: str, arch: ModelArchitecture) -> int:
    """Draft tokens an engine uses when none are given (module docstring): vLLM's MTP its
    ``num_nextn_predict_layers``; SGLang's auto choice (3 steps for DeepSeek-V3 and GLM-4.5 MTP,
    5 otherwise); where the engine requires the number (vLLM and TensorRT-LLM EAGLE-3 and
    n-gram, TensorRT-LLM MTP) the 3 of their documentation's examples."""
    if method == "mtp" and family == "vllm":
        return max(1, arch.num_mtp_layers)
    if family == "sglang":
        return 3 if method == "mtp" else 5
    return 3


#: draft tokens a search tries for each method (the request's own number instead when it
#: states one): MTP at vLLM's default of one MTP layer and at SGLang's 3 steps; EAGLE-3 and
#: n-gram at the 3 of the engines' examples
SEARCH_SPEC_TOKENS: dict[str, tuple[int, ...]] = {"mtp": (1, 3), "eagle3": (3,), "ngram": (3,)}
#: the methods "auto" searches for every model that runs them: those with a draft of their
#: own (the model's MTP layers, a published EAGLE-3 checkpoint)
AUTO_METHODS: tuple[str, ...] = ("mtp", "eagle3")
#: what "auto" searches where neither of :data:`AUTO_METHODS` runs for the model on the engine:
#: prompt lookup, which needs no draft and no GPU memory (its acceptance is the workload's)
AUTO_FALLBACK_METHOD = "ngram"


def auto_methods(model: ModelCard | ModelArchitecture, family: str) -> tuple[str, ...]:
    """What ``auto`` searches for ``model`` on engine ``family``: :data:`AUTO_METHODS`, plus
    n-gram where neither runs (no MTP layers, or none the engine runs, and no published EAGLE-3
    draft, judged on one stage without DP attention so that every layout of a search tries the
    same methods). A model with MTP or EAGLE-3 is not searched with n-gram as well: each
    method multiplies the layouts evaluated."""
    from planner.catalog import ModelCard

    if isinstance(model, ModelCard):
        runs = any(unsupported_reason(model, family, m) is None for m in AUTO_METHODS)
    else:  # an architecture without a card names no draft: MTP only
        runs = model.num_mtp_layers > 0
    return AUTO_METHODS if runs else (*AUTO_METHODS, AUTO_FALLBACK_METHOD)


def searched_methods(
    choice: str, model: ModelCard | ModelArchitecture | None = None, family: str = "vllm"
) -> tuple[str, ...]:
    """The speculative methods a search of ``choice`` (off, auto or one method) tries; for
    ``auto`` with the model at hand, :func:`auto_methods` (else :data:`AUTO_METHODS`)."""
    if choice == "off":
        return ()
    if choice == "auto":
        return AUTO_METHODS if model is None else auto_methods(model, family)
    if choice not in SPECULATIVE_METHODS:
        raise InvalidInputError("speculative", choice, "one of off, auto, mtp, eagle3, ngram")
    return (choice,)


def speculation_reason(card: ModelCard, family: str, method: str, acceptance: str | None) -> str:
    """Why a plan speculates with ``method`` and what its acceptance rests on, in words (the
    ranking's and the Plan page's); "" without speculation. ``acceptance`` is the prediction's
    account of it (a deployment note: stated, learnt from runs, or published)."""
    if method == "none":
        return ""
    label = METHOD_LABELS.get(method, method)
    source = f" ({acceptance})" if acceptance else ""
    if method == "mtp":
        return f"MTP: the model's own next-token layers; acceptance{source}"
    if method == "eagle3":
        return f"EAGLE-3: draft {EAGLE3_DRAFTS.get(card.hf_id, '?')}; acceptance{source}"
    why = (
        f", auto's method for {card.hf_id}: no MTP layers this engine runs, no published "
        "EAGLE-3 draft"
        if AUTO_FALLBACK_METHOD in auto_methods(card, family)
        else ""
    )
    return (
        f"{label} (prompt lookup: no draft model, no GPU memory){why}. Its acceptance is the "
        f"workload's own, assumed here{source}: calibrate it with a Verify run on your prompts"
    )


def unsupported_reason(
    card: ModelCard, family: str, method: str, pp: int = 1, attention_dp: int = 1
) -> str | None:
    """Why ``method`` cannot run for this model on this engine family; None when it can."""
    arch = card.architecture
    label = METHOD_LABELS.get(method, method)
    if method == "none":
        return None
    if method not in SPECULATIVE_METHODS:
        return f"unknown speculative method {method!r}"
    if method == "mtp":
        if arch.num_mtp_layers <= 0:
            return f"{card.hf_id} has no MTP layers (num_nextn_predict_layers is 0 or absent)"
        if family == "trtllm" and _family(arch) != "deepseek":
            return "TensorRT-LLM 1.0 runs MTP for DeepSeek-V3 models only"
    if method == "eagle3" and card.hf_id not in EAGLE3_DRAFTS:
        return f"no published EAGLE-3 draft for {card.hf_id}"
    if method == "ngram" and family == "sglang" and attention_dp > 1:
        return "SGLang's n-gram speculation does not run with DP attention (server_args.py)"
    if pp > 1:
        return f"{label} with pipeline parallelism is not modelled"
    return None


@dataclass(frozen=True)
class SpeculativeStep:
    """What speculation adds to one replica's step (per GPU), resolved from the scenario."""

    method: str
    num_spec_tokens: int
    #: per-position acceptance rate and the mean accepted length it gives
    acceptance_rate: float
    mean_accepted_length: float
    acceptance_source: str
    #: the draft checkpoint (EAGLE-3), the model itself (MTP) or None (n-gram)
    draft_model: str | None
    #: draft constants per GPU: one draft pass over one token a sequence
    draft_layers: int
    draft_moe_layers: int
    draft_dense_weight_bytes: float
    draft_gemm_flops_per_token: float
    draft_lm_head_flops_per_seq: float
    draft_kv_bytes_per_token: float
    draft_attn_flops_per_pair: float
    #: weights the draft keeps resident on each GPU (memory planning)
    draft_resident_bytes: float

    @property
    def label(self) -> str:
        return (
            f"{METHOD_LABELS[self.method]} k={self.num_spec_tokens}, "
            f"{self.mean_accepted_length:.2f} tokens/step"
        )


def _draft_constants(
    method: str,
    card: ModelCard,
    tp: int,
    moe_group: int,
    dense_bpp: float,
    expert_bpp: float,
    kv_bpe: float,
) -> dict[str, float]:
    """Per-GPU constants of one draft pass (see the module docstring for each method)."""
    arch = card.architecture
    h = arch.hidden_size
    if method == "ngram":
        keys = ("layers", "moe_layers", "dense", "gemm", "lm_head", "kv", "attn", "resident")
        return dict.fromkeys(keys, 0.0)
    kv_heads_gpu = max(1.0, arch.num_kv_heads / tp)
    if method == "mtp":
        layers = max(1, arch.num_mtp_layers)
        last = arch.num_layers - 1  # the MTP layer has the shape of the model's last layer
        active = arch.layer_params(last, active_only=True)
        whole = arch.layer_params(last, active_only=False)
        routed_active = (
            arch.experts_per_token * arch._expert_params() if last in arch.moe_layers else 0
        )
        routed_all = arch.num_experts * arch._expert_params() if last in arch.moe_layers else 0
        dense_layer = active - routed_active + 2 * h * h  # + eh_proj
        lm_head = arch.vocab_size * h
        if arch.is_mla:
            kv_layer = arch.kv_elements_per_token_per_layer() * kv_bpe
        else:
            kv_layer = 2 * kv_heads_gpu * arch.head_dim * kv_bpe
        from planner.perf.deployment import attention_constants

        attn = attention_constants(arch, tp, 1, 0).full_decode
        moe_layers = 1 if last in arch.moe_layers else 0
        resident = (
            layers * (whole - routed_all + 2 * h * h) * dense_bpp / tp
            + layers * routed_all * expert_bpp / moe_group
        )
    else:  # eagle3: one Llama layer reading 2 x hidden, fc 3h x h, a 32k draft vocabulary
        layers = 1
        q_out = arch.num_attention_heads * arch.head_dim
        kv_out = arch.num_kv_heads * arch.head_dim
        width = arch.intermediate_size or arch.moe_intermediate_size or 4 * h
        attention = 2 * h * q_out + 2 * (2 * h * kv_out) + q_out * h
        dense_layer = attention + 3 * h * width + 3 * h * h
        lm_head = EAGLE3_DRAFT_VOCAB * h
        kv_layer = 2 * kv_heads_gpu * arch.head_dim * kv_bpe
        attn = 2.0 * arch.num_attention_heads / tp * 2 * arch.head_dim
        moe_layers = 0
        resident = (dense_layer + lm_head) * 2.0 / tp  # drafts ship in BF16
        dense_bpp = 2.0
    return {
        "layers": float(layers),
        "moe_layers": float(moe_layers),
        "dense": (dense_layer + lm_head) * dense_bpp / tp,
        "gemm": 2.0 * dense_layer / tp,
        "lm_head": 2.0 * lm_head / tp,
        "kv": kv_layer * layers,
        "attn": attn * layers,
        "resident": resident,
    }


def resolve_speculation(
    *,
    method: str,
    num_spec_tokens: int | None,
    accept_len: float | None,
    card: ModelCard,
    family: str,
    tp: int,
    pp: int,
    moe_group: int,
    dense_bpp: float,
    expert_bpp: float,
    kv_bpe: float,
    learnt: LearntAcceptance | None = None,
) -> SpeculativeStep | None:
    """The scenario's speculation, or None without one (a workload's stated acceptance is then
    unused); a typed error when the model or the engine cannot run it
    (:func:`unsupported_reason`). The acceptance: the scenario's stated one, else the one
    learnt from measured runs of this model, method and engine (``learnt``), else the
    published default of the method and model family."""
    if method == "none":
        return None
    reason = unsupported_reason(card, family, method, pp, moe_group // tp)
    if reason is not None:
        raise InvalidInputError("spec_method", method, f"a method this layout runs: {reason}")
    arch = card.architecture
    k = num_spec_tokens or default_num_spec_tokens(family, method, arch)
    if not 1 <= k <= MAX_SPEC_TOKENS:
        raise InvalidInputError("num_spec_tokens", k, f"1 to {MAX_SPEC_TOKENS} draft tokens")
    if accept_len is not None:
        alpha = acceptance_rate_for(accept_len, k)
        source = f"stated: {accept_len:g} tokens a step"
    elif learnt is not None and (found := learnt.lookup(card.hf_id, method, family)):
        alpha, source = found
    else:
        default = default_acceptance(method, arch)
        alpha, source = default.alpha, default.source
    c = _draft_constants(method, card, tp, moe_group, dense_bpp, expert_bpp, kv_bpe)
    draft = {"mtp": card.hf_id, "eagle3": EAGLE3_DRAFTS.get(card.hf_id)}.get(method)
    return SpeculativeStep(
        method=method,
        num_spec_tokens=k,
        acceptance_rate=alpha,
        mean_accepted_length=accept_len or mean_accepted_length(alpha, k),
        acceptance_source=source,
        draft_model=draft,
        draft_layers=int(c["layers"]),
        draft_moe_layers=int(c["moe_layers"]),
        draft_dense_weight_bytes=c["dense"],
        draft_gemm_flops_per_token=c["gemm"],
        draft_lm_head_flops_per_seq=c["lm_head"],
        draft_kv_bytes_per_token=c["kv"],
        draft_attn_flops_per_pair=c["attn"],
        draft_resident_bytes=c["resident"],
    )


def kv_capacity_with_draft(
    capacity_tokens: int, kv_bytes_per_token: float, spec: SpeculativeStep | None
) -> int:
    """KV tokens left once the draft's weights and its own KV (per token) share the pool:
    ``(capacity x kv - draft weights) / (kv + draft kv)``, per GPU."""
    if spec is None or (not spec.draft_resident_bytes and not spec.draft_kv_bytes_per_token):
        return capacity_tokens
    pool = capacity_tokens * kv_bytes_per_token - spec.draft_resident_bytes
    per_token = kv_bytes_per_token + spec.draft_kv_bytes_per_token
    return max(0, int(pool / per_token)) if per_token > 0 else capacity_tokens


_DRAFT_CACHE: dict[int, tuple[Deployment, Deployment]] = {}


def draft_deployment(dep: Deployment) -> Deployment:
    """``dep`` with the draft's constants in place of the target's: one draft pass priced by
    the same step terms (one stage, its own layers, weights, FLOPs and KV)."""
    cached = _DRAFT_CACHE.get(id(dep))
    if cached is not None and cached[0] is dep:
        return cached[1]
    spec = dep.speculation
    assert spec is not None
    draft = replace(
        dep,
        pp=1,
        net_boundaries=0,
        num_layers=spec.draft_layers,
        num_moe_layers=spec.draft_moe_layers,
        dense_weight_bytes=spec.draft_dense_weight_bytes,
        gemm_flops_per_token=spec.draft_gemm_flops_per_token,
        lm_head_flops_per_seq=spec.draft_lm_head_flops_per_seq,
        kv_bytes_per_token_full=spec.draft_kv_bytes_per_token,
        kv_bytes_per_token_window=0.0,
        attn_flops_per_pair_full_decode=spec.draft_attn_flops_per_pair,
        attn_flops_per_pair_window_decode=0.0,
        speculation=None,
    )
    if len(_DRAFT_CACHE) > 256:
        _DRAFT_CACHE.clear()
    _DRAFT_CACHE[id(dep)] = (dep, draft)
    return draft


PlainFill = Callable[[np.ndarray, "StepBatch", "Deployment"], None]
#: engine families whose proposer launches each draft pass on its own, paying a pass's CPU
#: work k times a step (module docstring, "draft"): vLLM. SGLang replays its whole k-step
#: draft loop as one captured graph; TensorRT-LLM runs MTP and one-model EAGLE-3 inside the
#: target's forward
DRAFT_LOOP_LAUNCHED_PER_PASS: frozenset[str] = frozenset({"vllm"})
#: forward passes' fixed cost a speculative step adds to the verification's own (module
#: docstring, "bookkeeping")
SPEC_STEP_FORWARD_PASSES = 1.0
#: step terms a draft pass does not add: the step's scheduling and per-sequence work are
#: counted once per engine step, by the verification
_PER_STEP_TERMS = ("forward_passes", "sequences", "host_overlapped", "idle")


def fill_speculative_features(
    out: np.ndarray, batch: StepBatch, dep: Deployment, plain: PlainFill
) -> None:
    """The terms of one simulated step (one accepted token a decoding sequence) of a
    speculating engine (module docstring): ``(F(verify [+ chunk]) + k x F(draft)) / tau``,
    plus ``F(chunk alone) x (1 - 1 / tau)`` when a prefill chunk shares the step."""
    from planner.perf.step_time import FORWARD_UNIT_S, IDX

    spec = dep.speculation
    assert spec is not None
    k, tau = spec.num_spec_tokens, spec.mean_accepted_length
    verify = replace(batch, decode_query_tokens=float(k + 1))
    plain(out, verify, dep)
    if spec.draft_layers:
        draft_batch = replace(
            batch,
            prefill_tokens=0.0,
            prefill_seqs=0.0,
            prefill_pairs=0.0,
            prefill_kv_tokens=0.0,
            prefill_pairs_window=0.0,
            prefill_kv_tokens_window=0.0,
            decode_context_window=0.0,
        )
        draft_terms = np.zeros_like(out)
        plain(draft_terms, draft_batch, draft_deployment(dep))
        for name in _PER_STEP_TERMS:
            draft_terms[IDX[name]] = 0.0
        out += k * draft_terms
    # the speculation's own per-step pass: one more forward pass's fixed cost (scheduling,
    # launch, sampling) a step, whatever k (module docstring, "bookkeeping")
    host = "host_overlapped" if dep.async_scheduling else "forward_passes"
    out[IDX[host]] += SPEC_STEP_FORWARD_PASSES * FORWARD_UNIT_S
    if spec.draft_layers and dep.family in DRAFT_LOOP_LAUNCHED_PER_PASS:
        # each of the k draft passes launched on its own (module docstring, "draft")
        out[IDX["draft_passes"]] += k * FORWARD_UNIT_S
    out /= tau
    if batch.prefill_seqs > 0 and tau > 1.0:
        chunk = replace(batch, decode_seqs=0.0, decode_context=0.0, decode_context_window=0.0)
        chunk_terms = np.zeros_like(out)
        plain(chunk_terms, chunk, dep)
        out += chunk_terms * (1.0 - 1.0 / tau)


__all__ = [
    "ACCEPTANCE_DEFAULTS",
    "AUTO_FALLBACK_METHOD",
    "AUTO_METHODS",
    "DRAFT_LOOP_LAUNCHED_PER_PASS",
    "EAGLE3_DRAFTS",
    "NGRAM_ASSUMPTION",
    "PUBLISHED_ACCEPTANCE",
    "SPECULATIVE_METHODS",
    "SPEC_METHODS",
    "LearntAcceptance",
    "PublishedAcceptance",
    "SpecMethod",
    "SpeculativeStep",
    "acceptance_defaults",
    "acceptance_rate_for",
    "auto_methods",
    "default_acceptance",
    "default_num_spec_tokens",
    "draft_deployment",
    "fill_speculative_features",
    "kv_capacity_with_draft",
    "learn_acceptance",
    "mean_accepted_length",
    "resolve_speculation",
    "searched_methods",
    "speculation_reason",
    "unsupported_reason",
]


# ----- launch flags (planner.vllm_command, planner.sglang_command, planner.trtllm_command) ------
def command_spec_tokens(engine: EngineConfig) -> int:
    """The draft tokens a command states: the plan's, else the engine's default without the
    model at hand (vLLM's MTP default is the model's MTP layers: 1 in DeepSeek-V3/R1 and GLM)."""
    if engine.num_spec_tokens:
        return engine.num_spec_tokens
    if engine.spec_method == "mtp" and engine.family == "vllm":
        return 1
    return 3 if engine.spec_method == "mtp" or engine.family != "sglang" else 5


def _eagle3_draft(model: str) -> str:
    draft = EAGLE3_DRAFTS.get(model) or {k.lower(): v for k, v in EAGLE3_DRAFTS.items()}.get(
        model.lower()
    )
    if draft is None:
        raise InvalidInputError("spec_method", "eagle3", f"a model with a published draft: {model}")
    return draft


def vllm_speculative_config(model: str, engine: EngineConfig) -> dict[str, object] | None:
    """vLLM's ``--speculative-config`` (vllm/config/speculative.py ``SpeculativeConfig``):
    ``method`` mtp / eagle3 / ngram, ``num_speculative_tokens``, and the EAGLE-3 draft's
    ``model``; n-gram keeps vLLM's prompt lookup window (5)."""
    if engine.spec_method == "none":
        return None
    config: dict[str, object] = {"method": engine.spec_method}
    if engine.spec_method == "eagle3":
        config["model"] = _eagle3_draft(model)
    config["num_speculative_tokens"] = command_spec_tokens(engine)
    return config


def sglang_speculative_args(model: str, engine: EngineConfig) -> list[str]:
    """SGLang's ``--speculative-*`` flags (server_args.py): NEXTN (MTP, its alias of EAGLE on
    the model's own MTP layers), EAGLE3 with the draft's path, NGRAM; chain drafting
    (``--speculative-eagle-topk 1``) of k steps and k + 1 draft tokens, as the step model
    prices it."""
    method = engine.spec_method
    if method == "none":
        return []
    k = command_spec_tokens(engine)
    if method == "ngram":
        return ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", str(k + 1)]
    args = ["--speculative-algorithm", "NEXTN" if method == "mtp" else "EAGLE3"]
    if method == "eagle3":
        args += ["--speculative-draft-model-path", _eagle3_draft(model)]
    args += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1"]
    return [*args, "--speculative-num-draft-tokens", str(k + 1)]


def trtllm_speculative_config(model: str, engine: EngineConfig) -> dict[str, object] | None:
    """TensorRT-LLM's LLM API ``speculative_config`` (llmapi/llm_args.py of 1.0):
    ``MTPDecodingConfig`` (``num_nextn_predict_layers``), ``EagleDecodingConfig`` with
    ``eagle3_one_model`` and the draft's ``speculative_model_dir``, ``NGramDecodingConfig``
    (``max_matching_ngram_size`` 2)."""
    method = engine.spec_method
    if method == "none":
        return None
    k = command_spec_tokens(engine)
    if method == "mtp":
        return {"decoding_type": "MTP", "num_nextn_predict_layers": k}
    if method == "eagle3":
        return {
            "decoding_type": "Eagle",
            "max_draft_len": k,
            "speculative_model_dir": _eagle3_draft(model),
            "eagle3_one_model": True,
        }
    return {"decoding_type": "NGram", "max_draft_len": k, "max_matching_ngram_size": 2}
