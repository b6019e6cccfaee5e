"""Time of one engine iteration as non-negative coefficients over physical terms.

``step_time_s = sum_k c_k * x_k(batch)`` where every term ``x_k`` is a time in seconds at the
spec-sheet rate (or a count times a nominal unit), so a coefficient is a dimensionless
"how many times slower than the spec" factor (BLIS-style physics-informed regression, see
docs/domain.md). The terms, per GPU, for one macro-step in which every running sequence advances:

=====================  ==========================================================================
term                   x (seconds)
=====================  ==========================================================================
roofline               max(streamed bytes / memory BW, FLOPs / peak): the plain roofline (bytes:
                       weights, experts touched, MoE activations, KV)
weight_read            non-expert weight bytes / memory BW (streamed once per chain)
expert_read            routed-expert bytes touched / memory BW; with T tokens reaching a layer
                       (all attention-DP ranks' tokens), each of its E experts is touched with
                       probability 1 - (1 - k/E)^T (top-k routing), so at decode batches of a few
                       dozen every expert's weights are read (domain.md, MoE section). A skewed
                       routing (Zipf popularity, exponent 0.5 or 1) in its place was no better
                       held out by source (session 46; exponent 1: TTFT 36.3 -> 34.8% median,
                       output tok/s 23.0 -> 24.5%, p99 TTFT 28.3 -> 30.0%)
expert_activation      activation bytes the fused-MoE kernels move for the T x k routed rows
                       (gather, intermediate caches, combine; 2 B x (3 hidden + 6 I / group) a
                       row when the experts are sliced over the group, whole rows over the
                       group with expert parallelism: :func:`planner.perf.deployment.
                       expert_activation_bytes_per_row`) / memory BW. It does not shrink with
                       TP, so fine-grained MoE at TP 4-8 is bound by it at prefill
kv_read                KV bytes read by attention / memory BW, of a 16-bit KV cache
kv_read_fp8            the same of an FP8 KV cache (``kv_cache_dtype`` fp8, or TensorRT-LLM's
                       FP8 checkpoints: :func:`planner.perf.deployment.kv_dtype_bytes`): half
                       the bytes, read by other attention kernels than a 16-bit cache's (they
                       convert the cache as they read it), whose achieved bandwidth is fitted on
                       its own rather than assumed to be the 16-bit kernels'. Prior the same as
                       ``kv_read``'s. Held out by source it moved throughput 24.9 -> 24.5% and
                       TPOT 22.8 -> 22.5% (1,174 rows, session 39)
gemm                   2 x non-routed active params x tokens (+ lm_head per sampled sequence)
                       / peak: attention projections, dense and shared-expert MLPs, router
expert_gemm            routed-expert GEMM FLOPs at the rows the grouped GEMM really computes
                       / peak. Expert e receives n_e ~ Poisson(lambda = T k / E) tokens
                       (lambda = 2 for DeepSeek at 64 decode sequences: 64 x 8 / 256); the fused
                       MoE kernels tile each expert's rows by M = 16 (vLLM fused_moe's smallest
                       BLOCK_SIZE_M, also SGLang's Triton MoE), so an expert costs
                       M x E[ceil(n_e / M)] rows (:func:`padded_rows_per_expert`): at few tokens
                       per expert the grouped GEMM runs far below peak. With expert parallelism
                       over R ranks the busiest rank sets the layer's time: its share of the
                       assignments is that of R Poisson loads, mean mu = lambda E / R, so the
                       rows scale by 1 + sqrt(2 ln R) / sqrt(mu) (expected maximum of R normals),
                       capped at R (:func:`ep_imbalance`). The FLOPs are scaled by the tile
                       overhead of narrow expert GEMMs, 1 + K0 (2 / (3 hidden) + 1 / (3 I_gpu))
                       (:func:`planner.perf.deployment.expert_tile_factor`, from published
                       Triton fused-MoE kernel measurements); none where SGLang runs the
                       experts in FlashInfer's TensorRT-LLM kernels (data-center Blackwell,
                       by model and precision: :func:`planner.engine.sglang_trtllm_moe`)
attention              score + value FLOPs over (query, key) pairs, prefill's quadratic part
                       included / 16-bit (or FP8) peak. MLA decodes with the absorbed form
                       (2 x heads x (2 kv_lora_rank + rope) FLOPs per pair: the latent is both
                       key and value) and prefills in the expanded one (2 x heads x (qk + v));
                       DeepSeek Sparse Attention attends over index_topk keys, its lightning
                       indexer (2 x index_heads x index_head_dim per pair) over all
allreduce_<link>       ring all-reduce bytes, 2 (tp-1)/tp x tokens x hidden x 2 B, twice per
                       layer, / link BW per direction; host-staged PCIe (no P2P) moves
                       2 (tp-1) x the volume through the shared host path. With attention data
                       parallelism over d ranks each MoE layer all-gathers the ranks' tokens
                       and reduce-scatters the result over the TP x d GPUs: 2 x (d-1)/d x T x
                       hidden x 2 B more per GPU (vLLM's default allgather_reducescatter
                       all2all backend; SGLang's DP-attention gather/scatter)
ar_calls_<link>        collective calls x 10 us (launch and synchronisation latency); with a
                       query/key norm across every head (MiniMax-M2's) split over the TP ranks,
                       one more call a layer (two on SGLang before 0.5.8) for its sums of
                       squares (:func:`planner.engine.qk_norm_allreduces`)
ar_calls_fused         the same calls where the engine fuses each with the residual add and
                       RMSNorm after it into one FlashInfer kernel (vLLM 0.17+ on Hopper and
                       data-center Blackwell; SGLang for gpt-oss, DeepSeek-V3-style, GLM-4 MoE,
                       Qwen3 MoE and Kimi-K2.5 models, each from its release; TP 2-8 over
                       NVLink, in steps whose tensor fits the kernel: each release's rules in
                       :func:`planner.engine.fused_allreduce_tokens`).
                       Fitted, prior a plain call's: SGLang's profile of Qwen3-MoE (pull
                       request 9973, 2025-09-03) had the fused kernel at 12.98% of the step
                       where the all-reduce took 13.26% and the norm 6.45%, so a fused call
                       costs about an all-reduce and saves the norm. The shipped fit puts it
                       at 0.6 of a plain call
pp_hops                intra-node pipeline boundaries x 100 us
net_hops               inter-node pipeline boundaries x 1 ms
net_transfer           activation bytes crossing nodes / network BW
layers                 layers executed x 10 us (per-layer launch overhead)
moe_layers             MoE layers executed x 10 us (router, top-k, token sort / permute and
                       un-permute kernels an MoE layer adds to a dense one)
layer_floor            max(0, layers executed x 150 us - roofline): the time a step's chain of
                       kernels takes however little it computes, beyond the roofline work the other
                       terms price. Each kernel takes the longer of its work and a floor (launch
                       gap, ramp-up and tail; GEMM tiles not tuned for the GPU and shape), so the
                       floor shows at small batches and fades once the step's work exceeds it
                       (DeepSeek-V3 at TP 8: ~16-24 in flight on MI300X and H200). Unit 150 us a
                       layer: an early release's floor is several of it. SGLang 0.4.1.post2
                       decoded DeepSeek-V3 (TP 8, CUDA graphs on, FP8 GEMMs tuned) at 30.3 tok/s
                       at batch 1 and 25.8 a sequence at batch 8, 33 and 39 ms a step
                       (sgl-project/sglang pull request 2643, 2024-12-29; 540 us a layer) where
                       its roofline is ~1-4 ms; the AMD team's SGLang 0.4.10.post1 on MI300X
                       34-39 ms at 1-8 in flight (lmsys.org, 2025-09-02); dstack's SGLang 0.4.2 on
                       MI300X 35 ms at 4, 47 ms at 16. One block-FP8 GEMM at one token takes
                       28-690 us with a generic tile configuration and 4-91 us with a tuned one
                       (sglang pull request 39306, H20, 2026); later releases fuse a layer's
                       small kernels (RoPE, the q/k concatenation and the KV-cache write in one
                       launch: sglang pull request 18242, 2026-02-04). Prior coefficient 0.1;
                       its deviation is fitted globally, per engine release and model kind, per
                       GPU vendor (:data:`planner.perf.calibration.TERM_LEVELS`) and per MoE
                       model's weights and GPU vendor (since session 70), each
                       with a wide prior (:data:`planner.perf.calibration.TERM_LEVEL_SIGMA`):
                       the floor is a release's kernels for a kind of model, launched on one
                       vendor's platform, and a model's layer is its own chain of them
                       (gpt-oss-120b 64 us a layer, DeepSeek-R1 150 at one in flight on 8 x
                       B200, SGLang 0.5.6). SGLang 0.5.7 decoded DeepSeek-V3.1 on 8 x MI300X at
                       24 ms a step at one in flight (sgl-project/sgl-cookbook DeepSeek-V3_1.md,
                       2026-01-20), where 0.5.6 took 9 ms on 8 x B200 (the SGLang cookbook's
                       DeepSeek-R1-0528): 390 against 150 us a layer, at rooflines of ~1 ms.
                       The vendor, not the GPU generation: fitted per generation, NVIDIA's four
                       (Ampere to Blackwell) came out within 0.25 of each other in log and
                       CDNA 3 1.4 above them, so an AMD generation the data has not decoded
                       with (the MI355X) takes ROCm's floor, not CUDA's
forward_passes         forward passes in the chain x 1 ms (per-step scheduling, sampling)
draft_passes           draft passes a speculating engine launches one by one x 1 ms (vLLM's
                       EAGLE/MTP proposer: each draft token's own input and attention-metadata
                       update, graph replay and argmax, :mod:`planner.perf.speculative`); 0
                       where the draft loop is one captured graph (SGLang, TensorRT-LLM)
sequences              sequences in the step x 100 us (per-request CPU work)
host_overlapped        forward_passes' and sequences' units, in their place, of a vLLM engine
                       that schedules asynchronously (on by default from 0.14, :func:`planner.
                       engine.vllm_schedules_async`): the engine core schedules step n + 1 and
                       its inputs are prepared while the GPU runs step n (vLLM pull request
                       19970, after NanoFlow), so that CPU work no longer sits between the
                       steps; what is left of it on the step's path is this term's coefficient.
                       Prior 0.1 (a tenth of it left), fitted globally only: only vLLM's async
                       releases run it. SGLang's overlap scheduler (on unless it speculates)
                       and TensorRT-LLM's (its PyTorch backend's, the default from 1.0) are
                       left to their families' fitted per-step terms: TensorRT-LLM 1.x as this
                       term held out a point worse on every fold but one (README).
                       Held out by source, the per-step terms of vLLM's sync releases took
                       vLLM 0.19's TPOT to 1.46x the measured (Scicom's dense H100 rows,
                       4.4 ms measured at ten in flight on Qwen3-14B over TP 8, 6.9 ms
                       predicted, 1.5 ms of it the two host terms)
eager_layers           layers x 10 us when the step runs without CUDA graphs: enforce_eager, or
                       more tokens than the engine captures graphs for (vLLM V1 captures up to
                       512 tokens, SGLang's decode graphs stop at cuda_graph_max_bs), and
                       SGLang's extend (prefill) steps: its decode graphs capture decode steps
                       only, and SGLang runs prefill and decode as separate steps unless mixed
                       chunks are enabled. Graphs for prefill (piecewise CUDA graphs) were opt-in
                       through 0.5.9 (``--enable-piecewise-cuda-graph``) and are on by default
                       from 0.5.10 on NVIDIA GPUs for most models, up to the chunked-prefill
                       size (2,048 tokens for MLA models); a prefill step within that limit is
                       not eager (:func:`planner.engine.sglang_prefill_graph_tokens`)
eager_floor            max(0, MoE layers x 4 ms - roofline) in a prefill step that runs without
                       CUDA graphs (the eager_layers steps): each MoE layer launches its router,
                       top-k, token sort and padding, activation quantisation, two grouped GEMMs
                       and the combine one by one from Python, so an eager step lasts about the
                       longer of the host's launches and the GPU's work, not their sum. SGLang
                       0.5.6 prefilled DeepSeek-R1-0528 on 8 x B200 in about the same time at 610
                       and at 4,194 prompt tokens (TTFT 153 and 166 ms at one in flight),
                       MiniMax-M2.5 in 131 and 132 ms (sgl-project/sglang cookbook and
                       sgl-project/sgl-cookbook, rows in data/measured_sglang_cookbook.csv), where
                       the roofline grows 2-3x; gpt-oss-120b (36 layers, MXFP4 experts) on the same
                       GPUs took 34 ms, so those ~130 ms are the model's launches, not the server's
                       path. The term is that max's linear form: a fixed cost (the coefficient x 4
                       ms a MoE layer) less the coefficient x the step's roofline, so while the
                       host bounds the step a longer prompt adds less than its work's full price.
                       It fades where the spec-sheet roofline reaches 4 ms a MoE layer (DeepSeek-V3
                       on 8 x H200: a prefill of about 19,000 tokens), not 1 ms (until session 53):
                       the GPU's real time is 0.8-2.6x its roofline (the roofline coefficients
                       fitted), and at 1 ms the floor faded while the host still bound the step, so
                       the fit held it at 0.15 (150 us a MoE layer) and the request path took the
                       rest (SGLang 52 ms on 8 GPUs). Held out by source (1,232 rows both runs
                       scored), 4 ms with prior 0.4 moved the TTFT 30.8 -> 26.9% median, output
                       tok/s 23.8 -> 22.8%, TPOT 24.1 -> 23.5%, p99 TTFT 31.7 -> 30.3%; vLLM's too
                       (its prefill steps past 512 tokens run without graphs), TTFT 31.1 -> 26.9%,
                       while SGLang's TPOT went 28.5 -> 31.0% and TensorRT-LLM's TTFT 20.1 ->
                       21.8%. TTFT median by (unit, prior): (1 ms, 0.1) 30.8%, (0.33, 0.3) 31.0,
                       (0.33, 0.6) 31.0, (0.67, 0.3) 30.3, (1.33, 0.3) 28.7, (2.67, 0.3) 28.3, (4,
                       0.1) 28.8, (4, 0.2) 28.0, (4, 0.8) 27.6, (8, 0.4) 27.6; a fixed cost that
                       never fades, 30.3. Its slope never exceeds the roofline's (shipped fit:
                       0.20-0.26, the roofline's at least 0.45 more on every GPU and family), so a
                       longer eager prefill still takes longer
                       (tests/planner/perf/test_eager_floor.py). MoE layers only: a dense layer is
                       a handful of kernels (eager_layers holds them), and a floor over every layer
                       cost the dense rows' TTFT (leave-one-source-out SGLang mean 58 -> 75%; a
                       fixed cost on every MoE layer and 0.3 of it on every dense one: TTFT 30.9%).
                       Prefill steps only, unless the engine runs without any CUDA graph
                       (``enforce_eager``): a decode batch past the graph limit (a disaggregated
                       decode pool's hundreds of sequences) is the GPU's work, and a floor there
                       cost the disaggregated slice's held-out TPOT 7 -> 20% median; an eager
                       engine's decode step launches the same kernels one by one as its prefill.
                       TensorRT-LLM's PyTorch backend before 1.0 captured no graphs unless asked
                       (pull request 5480, "Enable cuda graph by default", merged 2025-07-14):
                       dstack's trtllm-serve 0.17 run (``--backend pytorch``, no extra options)
                       decoded DeepSeek-V3 on 8 x H200 at 55.1, 55.9 and 57.5 ms a token at 4, 8
                       and 16 in flight, flat, where the same publisher's vLLM 0.7.4 run rose from
                       25.7 to 49.6 ms over those loads. Those nine rows marked so
                       (``enforce_eager``, data/README.md), held out by source (1,362 rows,
                       session 63): output tok/s 20.8 -> 19.9% median, TPOT 22.6 -> 22.4%, TTFT
                       22.8 -> 23.3%; the 2025-07+ closed loops' TPOT 22.3 -> 20.4%; the rows'
                       own throughput 111 -> 30% (their TPOT 24 -> 50%: held out, no other
                       TensorRT-LLM run is eager, and the global floor is SGLang's and vLLM's
                       prefills'). Prior
                       coefficient 0.4 (1.6 ms a MoE layer at no work); fitted globally and per
                       engine family only (:data:`planner.perf.calibration.TERM_LEVELS`): SGLang
                       0.18, vLLM 0.21 (0.20 and 0.22 before session 54's closed-loop waves)
request_path           not a step term: 10 ms once per request of a vLLM or SGLang server (an HTTP
                       server and a streaming client: :func:`planner.perf.scenario.
                       has_request_path`), added to its first token and its finish, never
                       to a step (:func:`add_request_path`). What a request's first streamed
                       token takes beyond the engine steps that compute it: the API server's
                       tokenisation and hand-off to the engine process, the first token's
                       detokenisation, the SSE chunk and the client's parse (vLLM V1 runs the
                       API server and the engine core as two processes over ZMQ:
                       vllm/v1/engine/async_llm.py and core_client.py, 0.10; SGLang's
                       TokenizerManager, Scheduler and DetokenizerManager are three:
                       python/sglang/srt/managers/, 0.5). An offline benchmark (trtllm-bench,
                       vLLM's ``LLM`` class) has none of it: the term is zero there, so an
                       offline row never lends its figure to a served one; nor has TensorRT-LLM
                       (its served rows mix Triton's C++ front end and trtllm-serve). Fitted
                       on measured TTFTs with parameters for the engine family only (no GPU,
                       release or model-kind deviation: the path is CPU and protocol work),
                       prior 30 ms; issue 26 saw ~100 ms missing at one to four in flight
request_path_ranks     the request path's share that grows with the GPU processes one engine
                       runs a request on (:func:`engine_ranks`: TP x PP x attention-DP ranks):
                       10 ms x log2(ranks) once per served request, beside ``request_path``.
                       Each rank's scheduler receives every new request before the batch that
                       prefills it (SGLang's scheduler broadcasts the received requests from TP
                       rank 0 to the others each step, python/sglang/srt/managers/scheduler.py,
                       0.5; vLLM V1 ships the scheduler's output to every worker process), and
                       the first token's step waits on the slowest rank. Held out by source,
                       SGLang's TTFT at one to four in flight was 49 ms short on 8 GPUs and 6 ms
                       long on fewer (median predicted - measured) before it. Prior 0.5 (5 ms a
                       doubling); fitted globally and per engine family (shipped fit: SGLang 30 ms
                       and 5.0 a doubling, 45 ms on 8 GPUs; vLLM 30 and 4.7, 44 ms; SGLang 38 and
                       vLLM 28 ms on 8 GPUs before a closed loop's waves reached the engine apart
                       in the simulator, :data:`planner.perf.simulator.FRONT_END_SPACING` and
                       :func:`planner.perf.simulator.spreads_first_wave`; before the eager
                       floor's 4 ms unit took the MoE models' launches, SGLang 52 ms)
idle                   seconds the engine waits for work (coefficient fixed at 1)
=====================  ==========================================================================

Pipeline parallelism (PP = p): the running batch is split into m = min(p, sequences)
micro-batches that circulate through the p stages; one macro-step, in which every sequence gets
a token, lasts one micro-batch's trip through all stages. Per GPU that is: the whole model's
weights / tp streamed once, 1/m of the batch's KV, FLOPs and all-reduce volume, all 2L all-reduce
calls, and p forward passes. With fewer sequences than stages (m < p) the bubbles show up as the
same weight time for fewer tokens.

vLLM V1 forms those micro-batches by its scheduler, not by splitting the batch evenly: its
engine core keeps up to ``p`` scheduled batches in flight (``EngineCore.step_with_batch_queue``,
vllm/v1/engine/core.py), each ``Scheduler.schedule`` call has the whole
``max_num_batched_tokens`` budget ``B``, and a request already in a batch in flight is skipped
("PP>1 and we have already scheduled all prompt tokens but they are not finished yet",
vllm/v1/core/sched/scheduler.py, 0.10). So a macro-step schedules up to ``p B`` tokens
(:func:`macro_step_token_budget`), at most ``B`` of one request. Each call fills its budget
before the next one is made, so the fullest micro-batch carries ``min(P, B)`` of the step's
``P`` prompt tokens, not the even split's ``P / m``: the chain that carries it, and sets the
step, holds ``Q / m + P / k`` tokens with ``k = min(m, max(1, P / B))`` (``Q`` the decode
tokens; the same split for the KV, attention pairs and sampled sequences). A closed loop of
14 prompts of 128 tokens on PP 3 (1,792 tokens, one budget) is one micro-batch through all
three stages: three times the chain the even split priced. ``k`` is not rounded up to whole
micro-batches: a step of ``B + 1`` prompt tokens still has a full budget in one micro-batch,
and pricing its chain at ``(B + 1) / 2`` made it faster than a step of ``B`` (a closed loop's
TTFT then fell as it grew, 1.74 -> 1.10 s from 4 to 5 prompts of 2,048 tokens on Llama 70B
TP1 x PP2 with an 8,192 budget, and the capacity search, which assumes latency grows with
the load, found edges that depended on where it started). Without PP, or when the prompts
fill ``m`` budgets, nothing changes.

Speculative decoding (``Deployment.speculation``, :mod:`planner.perf.speculative`): a step
is one accepted token a decoding sequence; its terms are those of the verification (k + 1
query tokens a sequence, ``StepBatch.decode_query_tokens``) plus k draft passes, over the mean
accepted length, plus a sharing prefill chunk's own terms for the rest of the accepted tokens.

Attention data parallelism (d ranks, ``Deployment.data_parallel_size``): the simulator runs one
rank's scheduler; the ranks step together, so a step's attention and KV terms are that rank's
and its MoE layers see d times its tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.perf.deployment import Deployment
from planner.perf.scenario import has_request_path
from planner.perf.speculative import fill_speculative_features

FEATURES: tuple[str, ...] = (
    "roofline",
    "weight_read",
    "expert_read",
    "expert_activation",
    "kv_read",
    "kv_read_fp8",
    "gemm",
    "expert_gemm",
    "attention",
    "allreduce_nvlink",
    "allreduce_pcie_p2p",
    "allreduce_pcie_host",
    "ar_calls_nvlink",
    "ar_calls_pcie_p2p",
    "ar_calls_pcie_host",
    "ar_calls_fused",
    "pp_hops",
    "net_hops",
    "net_transfer",
    "layers",
    "moe_layers",
    "layer_floor",
    "forward_passes",
    "draft_passes",
    "sequences",
    "host_overlapped",
    "eager_layers",
    "eager_floor",
    "request_path",
    "request_path_ranks",
    "idle",
)
N_FEATURES = len(FEATURES)
IDX = {name: i for i, name in enumerate(FEATURES)}
#: terms whose coefficient is fixed, not fitted: idle time is time; launches without CUDA
#: graphs cost 10 x 10 us = 100 us a layer (~15 kernel launches at ~6 us each): left free, the
#: fit would use the term for whatever else large steps cost.
FIXED_COEFFICIENTS: dict[str, float] = {"idle": 1.0, "eager_layers": 10.0}
FITTED: tuple[str, ...] = tuple(f for f in FEATURES if f not in FIXED_COEFFICIENTS)
FITTED_IDX = np.array([IDX[f] for f in FITTED])

AR_CALL_UNIT_S = 10e-6
PP_HOP_UNIT_S = 100e-6
NET_HOP_UNIT_S = 1e-3
LAYER_UNIT_S = 10e-6
FORWARD_UNIT_S = 1e-3
SEQUENCE_UNIT_S = 100e-6
MOE_LAYER_UNIT_S = 10e-6
LAYER_FLOOR_UNIT_S = 150e-6
EAGER_FLOOR_UNIT_S = 4e-3
REQUEST_PATH_UNIT_S = 10e-3
#: the hierarchy levels that get a parameter of the request path (the rest share the family's)
REQUEST_PATH_LEVELS = frozenset({"family"})
#: rows a fused-MoE tile covers (vLLM fused_moe's smallest BLOCK_SIZE_M)
MOE_TILE_ROWS = 16

_ROOFLINE, _WEIGHT, _EXPERT, _KV = (
    IDX["roofline"],
    IDX["weight_read"],
    IDX["expert_read"],
    IDX["kv_read"],
)
_EXPERT_ACT = IDX["expert_activation"]
_KV_FP8 = IDX["kv_read_fp8"]
_GEMM, _EXPERT_GEMM, _ATTENTION = IDX["gemm"], IDX["expert_gemm"], IDX["attention"]
_PP_HOPS, _NET_HOPS, _NET_TRANSFER = IDX["pp_hops"], IDX["net_hops"], IDX["net_transfer"]
_LAYERS, _MOE_LAYERS, _FORWARD = IDX["layers"], IDX["moe_layers"], IDX["forward_passes"]
_SEQUENCES, _EAGER = IDX["sequences"], IDX["eager_layers"]
_HOST_OVERLAPPED = IDX["host_overlapped"]
_EAGER_FLOOR = IDX["eager_floor"]
_LAYER_FLOOR = IDX["layer_floor"]
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
_AR_FUSED = IDX["ar_calls_fused"]


@dataclass
class StepBatch:
    """What one engine iteration computes.

    ``decode_context`` is the sum over decoding sequences of the tokens each attends to;
    ``prefill_pairs`` the (query, key) pairs of the prefill chunks (a chunk of ``n`` tokens
    after ``c`` cached ones has ``n x (c + (n + 1) / 2)``); ``prefill_kv_tokens`` the KV
    tokens those chunks read (``c + n`` each). ``*_window`` are the same with every context
    capped at the sliding window (equal to the others for models without one).
    ``decode_query_tokens``: tokens each decoding sequence feeds the forward pass (1; k + 1
    when a speculating engine verifies k drafts, :mod:`planner.perf.speculative`).
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
    decode_query_tokens: float = 1.0

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


def _padded_rows_table(tile: int) -> tuple[np.ndarray, np.ndarray]:
    """log(lambda) grid and tile x E[ceil(n / tile)] for n ~ Poisson(lambda), exact sums."""
    lams = np.geomspace(1e-4, 1e6, 400)
    rows = np.empty_like(lams)
    for i, lam in enumerate(lams):
        if lam > 2000:  # normal regime: E[ceil(n/M)] M = lambda + (M - 1) / 2 to 1e-6
            rows[i] = lam + (tile - 1) / 2.0
            continue
        top = int(lam + 12 * math.sqrt(lam) + 30)
        n = np.arange(top + 1)
        log_pmf = n * math.log(lam) - lam - np.array([math.lgamma(k + 1) for k in n])
        rows[i] = float((np.exp(log_pmf) * np.ceil(n / tile) * tile).sum())
    return np.log(lams), rows


_LOG_LAMBDA, _PADDED_ROWS = _padded_rows_table(MOE_TILE_ROWS)
_PADDING = _PADDED_ROWS - np.exp(_LOG_LAMBDA)


def padded_rows_per_expert(lam: float) -> float:
    """Rows a grouped GEMM computes for one expert that receives Poisson(``lam``) tokens,
    each expert's rows rounded up to whole ``MOE_TILE_ROWS`` tiles: ``lam`` when it is large,
    ``MOE_TILE_ROWS x P(n >= 1)`` when it is small."""
    if lam <= 1e-4:
        return MOE_TILE_ROWS * lam
    # the padding (rows - lambda) varies smoothly with log(lambda): interpolate that
    return lam + float(np.interp(math.log(lam), _LOG_LAMBDA, _PADDING))


def ep_imbalance(lam: float, num_experts: int, ranks: int) -> float:
    """Rows of the busiest of ``ranks`` expert-parallel ranks over the mean rank's.

    A rank holding E / R experts receives Poisson(mu = lam x E / R) assignments; the largest of
    R such loads is about mu + sqrt(2 ln R) x sqrt(mu), so the factor is
    1 + sqrt(2 ln R / mu), at most R (every assignment on one rank).
    """
    if ranks <= 1:
        return 1.0
    mu = lam * num_experts / ranks
    if mu <= 0:
        return 1.0
    return min(float(ranks), 1.0 + math.sqrt(2.0 * math.log(ranks) / mu))


def fill_step_features(out: np.ndarray, batch: StepBatch, dep: Deployment) -> None:
    if dep.speculation is not None and batch.decode_seqs > 0:
        # one accepted token a decoding sequence: verification, draft and yield
        fill_speculative_features(out, batch, dep, _fill_plain)
        return
    _fill_plain(out, batch, dep)


def _fill_plain(out: np.ndarray, batch: StepBatch, dep: Deployment) -> None:
    seqs = batch.decode_seqs + batch.prefill_seqs
    if seqs <= 0:
        return
    query = batch.decode_seqs * batch.decode_query_tokens  # k + 1 a sequence when verifying
    pp = dep.pp
    micro = float(min(pp, seqs))
    # the prompt tokens' share of the fullest micro-batch, min(P, B) (module docstring: vLLM's
    # batch queue fills one budget before the next): P / min(P, B) micro-batches' worth
    prompt_micro = micro
    if pp > 1 and dep.family == "vllm" and batch.prefill_tokens > 0:
        budget = float(max(dep.max_num_batched_tokens, 1))
        prompt_micro = min(micro, max(1.0, batch.prefill_tokens / budget))
    micro_tokens = query / micro + batch.prefill_tokens / prompt_micro
    # memory traffic of one chain
    weight_bytes = dep.dense_weight_bytes
    expert_bytes = 0.0
    expert_flops = 0.0
    activation_bytes = 0.0
    n_moe = dep.num_moe_layers
    if dep.num_experts:
        e, k = dep.num_experts, dep.experts_per_token
        moe_tokens = micro_tokens * dep.data_parallel_size  # every DP rank's tokens
        touched = e * (1.0 - (1.0 - k / e) ** moe_tokens)
        expert_bytes = touched * n_moe * dep.expert_bytes_per_expert_layer
        lam = moe_tokens * k / e
        rows = e * padded_rows_per_expert(lam)
        routed = moe_tokens * k
        if dep.expert_parallel:
            imbalance = ep_imbalance(lam, e, dep.moe_group)
            rows *= imbalance
            routed *= imbalance
        expert_flops = n_moe * rows * dep.expert_flops_per_row
        activation_bytes = n_moe * routed * dep.expert_activation_bytes_per_row
    kv_full = batch.decode_context / micro + batch.prefill_kv_tokens / prompt_micro
    kv_win = batch.decode_context_window / micro + batch.prefill_kv_tokens_window / prompt_micro
    kv_bytes = kv_full * dep.kv_bytes_per_token_full + kv_win * dep.kv_bytes_per_token_window
    # the lm_head runs once a sequence, on its last token (on every verified token)
    sampled = query / micro + batch.prefill_seqs / prompt_micro
    gemm_flops = micro_tokens * dep.gemm_flops_per_token + sampled * dep.lm_head_flops_per_seq
    q = batch.decode_query_tokens
    attn_flops = (
        q * batch.decode_context * dep.attn_flops_per_pair_full_decode
        + q * batch.decode_context_window * dep.attn_flops_per_pair_window_decode
    ) / micro + (
        batch.prefill_pairs * dep.attn_flops_per_pair_full
        + batch.prefill_pairs_window * dep.attn_flops_per_pair_window
    ) / prompt_micro
    bw = dep.memory_bw
    t_weight = weight_bytes / bw
    t_expert = expert_bytes / bw
    t_activation = activation_bytes / bw
    t_kv = kv_bytes / bw
    t_gemm = gemm_flops / dep.peak_flops
    t_expert_gemm = expert_flops / dep.peak_flops_experts
    t_attn = attn_flops / dep.peak_flops_16bit
    out[_ROOFLINE] = max(t_weight + t_expert + t_activation + t_kv, t_gemm + t_expert_gemm + t_attn)
    out[_WEIGHT] = t_weight
    out[_EXPERT] = t_expert
    out[_EXPERT_ACT] = t_activation
    out[_KV_FP8 if dep.kv_dtype_bytes < 2.0 else _KV] = t_kv
    out[_GEMM] = t_gemm
    out[_EXPERT_GEMM] = t_expert_gemm * dep.expert_tile_factor
    out[_ATTENTION] = t_attn
    layers = dep.num_layers
    tp = dep.tp
    link = dep.link_class
    if link in _AR_BYTES:
        activation = micro_tokens * dep.hidden_size * 2.0
        calls = 0.0
        moved = 0.0
        if tp > 1:
            share = 2.0 * (tp - 1) if link == "pcie_host" else 2.0 * (tp - 1) / tp
            # attention output in every layer; MLP output in the dense layers, and in the MoE
            # layers too unless attention-DP ranks gather and scatter them
            reduced = 2 * layers if dep.data_parallel_size == 1 else 2 * layers - n_moe
            moved += reduced * share * activation
            fused = dep.fused_allreduce_tokens
            if fused is not None and micro_tokens <= fused:
                out[_AR_FUSED] = reduced * AR_CALL_UNIT_S  # with their RMSNorm (docstring)
            else:
                calls += reduced
            # a query/key norm across every head reduces its sums of squares: a few bytes a
            # token, latency-bound, never fused (:func:`planner.engine.qk_norm_allreduces`)
            calls += dep.qk_norm_allreduce_calls
        d = dep.data_parallel_size
        if d > 1 and n_moe:
            calls += 2 * n_moe
            moved += 2 * n_moe * (d - 1) / d * activation * d  # gather + scatter
        out[_AR_BYTES[link]] = moved / dep.link_bw
        out[_AR_CALLS[link]] = calls * AR_CALL_UNIT_S
    if pp > 1:
        net = dep.net_boundaries
        out[_PP_HOPS] = (pp - 1 - net) * PP_HOP_UNIT_S
        if net:
            out[_NET_HOPS] = net * NET_HOP_UNIT_S
            out[_NET_TRANSFER] = net * micro_tokens * dep.hidden_size * 2.0 / dep.network_bw
    out[_LAYERS] = layers * LAYER_UNIT_S
    out[_MOE_LAYERS] = n_moe * MOE_LAYER_UNIT_S
    # the floor's excess over the step's roofline work: it fades as the batch's work grows
    out[_LAYER_FLOOR] = max(0.0, layers * LAYER_FLOOR_UNIT_S - out[_ROOFLINE])
    if dep.async_scheduling:  # the host's work runs beside the GPU's (docstring)
        out[_HOST_OVERLAPPED] = pp * FORWARD_UNIT_S + seqs * SEQUENCE_UNIT_S
    else:
        out[_FORWARD] = pp * FORWARD_UNIT_S
        out[_SEQUENCES] = seqs * SEQUENCE_UNIT_S
    graphs = dep.cuda_graph_max_tokens
    prefill = batch.prefill_tokens > 0
    if dep.family == "sglang" and prefill:
        # SGLang's decode graphs do not run extend (prefill) steps: those run eagerly, or
        # (0.5.10+) under piecewise graphs up to their own limit (module docstring)
        limit = dep.prefill_graph_tokens
        eager = limit is None or micro_tokens > limit
    else:
        eager = graphs is not None and micro_tokens > graphs
    if dep.enforce_eager or eager:
        out[_EAGER] = layers * LAYER_UNIT_S
        if prefill or dep.enforce_eager:  # launch-bound steps (docstring: eager_floor)
            out[_EAGER_FLOOR] = max(0.0, n_moe * EAGER_FLOOR_UNIT_S - out[_ROOFLINE])


def macro_step_token_budget(dep: Deployment) -> int:
    """Tokens one macro-step (every running sequence one token) schedules: ``p B`` for vLLM
    with pipeline parallelism ``p`` (``p`` batches in flight, each scheduled with the whole
    ``max_num_batched_tokens`` ``B``: module docstring), else ``B``."""
    if dep.pp > 1 and dep.family == "vllm":
        return dep.max_num_batched_tokens * dep.pp
    return dep.max_num_batched_tokens


def full_coefficients(fitted: np.ndarray) -> np.ndarray:
    """Insert the fixed coefficients into a vector of fitted ones (order of FITTED)."""
    full = np.zeros(N_FEATURES)
    full[FITTED_IDX] = fitted
    for name, value in FIXED_COEFFICIENTS.items():
        full[IDX[name]] = value
    return full


_REQUEST_PATH = IDX["request_path"]
_REQUEST_PATH_RANKS = IDX["request_path_ranks"]


def engine_ranks(dep: Deployment) -> int:
    """The GPU processes one engine runs a request on: TP x PP x its attention-DP ranks."""
    return dep.tp * dep.pp * dep.data_parallel_size


def request_path_s(coefficients: np.ndarray, served: bool = True, ranks: int = 1) -> float:
    """Seconds a served request's first token takes beyond its engine steps (the
    ``request_path`` and ``request_path_ranks`` terms): ``c_request_path x REQUEST_PATH_UNIT_S
    + c_request_path_ranks x REQUEST_PATH_UNIT_S x log2(ranks)``; 0 for an offline benchmark
    (``served`` False)."""
    if not served:
        return 0.0
    return (
        float(coefficients[_REQUEST_PATH])
        + float(coefficients[_REQUEST_PATH_RANKS]) * math.log2(max(ranks, 1))
    ) * REQUEST_PATH_UNIT_S


def deployment_request_path_s(coefficients: np.ndarray, dep: Deployment) -> float:
    """:func:`request_path_s` of a request ``dep`` serves: its engine's ranks, 0 offline
    (:func:`planner.perf.scenario.has_request_path`)."""
    return request_path_s(coefficients, has_request_path(dep.scenario), engine_ranks(dep))


def add_request_path(first: np.ndarray, finish: np.ndarray, ranks: int = 1) -> None:
    """Add one ``request_path`` unit (and ``log2(ranks)`` of ``request_path_ranks``) to
    per-request first-token and finish term vectors (rows over :data:`FEATURES`, in place):
    TTFT and E2E carry them, TPOT (finish - first) does not."""
    spread = math.log2(max(ranks, 1)) * REQUEST_PATH_UNIT_S
    first[..., _REQUEST_PATH_RANKS] += spread
    finish[..., _REQUEST_PATH_RANKS] += spread
    first[..., _REQUEST_PATH] += REQUEST_PATH_UNIT_S
    finish[..., _REQUEST_PATH] += REQUEST_PATH_UNIT_S


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
