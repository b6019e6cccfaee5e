"""Fit the step-time coefficients to measured end-to-end results.

Every measured row is simulated once (:mod:`planner.perf.simulator`), which turns each of its
metrics into a function of the coefficients: throughput's duration is ``c . X_end``, a mean TTFT
``c . mean(X_first - X_arrival)``, a median TTFT the median over requests of such dot products,
and likewise for TPOT/ITL; a figure read off vLLM's Prometheus histogram (Tandemn) is the
histogram's estimate over the same dot products (:mod:`planner.perf.latency_stats`), whose
derivative is taken as the true median's (the estimate moves with the values only in jumps as
they cross bucket bounds). The fit minimises a robust soft-L1 loss (scale 0.15 in log units) of
log(predicted / measured) over every metric of every row (weights: throughput 1, TTFT 1,
ITL/TPOT 0.5: :data:`METRIC_WEIGHTS`), plus Gaussian priors on a hierarchy of log-coefficients:

    log c[family, release, gpu] = theta0 + d_family + d_release + d_generation + d_gpu
                                  + d_family/gpu + d_entrypoint + d_family/kind
                                  + d_release/kind + d_model@generation (MoE kernel terms,
                                  roofline) + d_vendor + d_model@vendor (layer floor only)
                                  + b_kind x age (release age, below)
    theta0 ~ N(log spec prior, 1.5^2), d_family ~ N(0, 1), every other d ~ N(0, 0.5^2)

The model level (:data:`MODEL_TERMS`) holds what an MoE model's expert shape does on a GPU: its
fused-MoE GEMMs run on kernel configurations tuned per expert shape and GPU (vLLM's Triton fused
MoE loads one file per expert count, slice width and GPU, such as
``vllm/model_executor/layers/fused_moe/configs/E=128,N=192,device_name=NVIDIA_B200.json``:
Qwen3-235B-A22B's 128 experts at TP 8, read 2026-12-03; a shape without one runs a default
tile), so one MoE model runs its experts faster or slower than its FLOPs and bytes say on one
GPU, under every engine that shares those kernels. Held out by source, on 8 x B200 under SGLang
0.5.6 the cookbook's Qwen3-235B-A22B decoded one request in 0.7x the step time the shared
coefficients gave it while GLM-4.6 (also 1,536-wide experts, 160 of them) and MiniMax-M2.5 took
1.3-1.4x; without a level of their own those shape effects went into the SGLang/B200 level that
every model on it shares. Keyed by the weights (total and active parameters: a re-release of the
architecture shares its kernels), their format (FP8, NVFP4 and 16-bit experts run different
kernels: :func:`moe_weights_key`) and the GPU's generation (:func:`gpu_generation`), fitted on
the routed-expert terms (and, since session 42, the roofline: :data:`MODEL_TERMS`). Held out by
source, with the other levels' prior (0.5), on the expert terms: output tok/s 29.2 -> 28.0%
median, TTFT 37.4 -> 36.4% (mean 63.9 -> 60.8%), TPOT 26.9 -> 24.9%; the 2025-07+ closed loops'
TPOT 20 -> 18%, tok/s 15 -> 14%. Keyed by the model alone it moved DeepSeek everywhere by its
early-2025 rows (a DeepSeek-wide expert GEMM 1.4x the shared one); keyed by model, GPU and
engine it shared nothing across engines and gained a quarter as much. Its prior is wider than
the other levels' (SIGMA_MODEL): a model's kernels on a GPU are a measured fact, not a small
deviation from the GPU's. Once the TensorRT-LLM tables' attention-DP rows had their layouts
(session 38), held out by source, prior 0.5 / 0.8 / 1.2 gave output tok/s 26.5 / 25.5 / 24.9%,
TPOT 25.0 / 24.0 / 23.4%, p99 TTFT 33.3 / 32.4 / 30.7%, TTFT 36.7 / 36.7 / 37.6%, and GPUStack
and the two SGLang sources held out together 29.4 / 26.8 / 24.8%.
Since session 70 the same weights have a layer floor of their own on each GPU vendor's platform
(the ``model_vendor`` level, :data:`SIGMA_FLOOR_MODEL`): how long a layer's chain of kernels
takes at a small batch is the model's layer as much as the release's kernels. At one in flight
on 8 x B200 under SGLang 0.5.6 the measured TPOT over the layers is 64 us a layer for
gpt-oss-120b, 108 for Qwen3-235B-A22B, 150 for DeepSeek-R1-0528 and 161 for GLM-4.6 (the SGLang
documentation's and cookbook's rows), where one floor a release and model kind had served them
all. Keyed by the vendor, not the generation, as the vendor floor is (:data:`SIGMA_FLOOR_VENDOR`):
the floor follows the software platform, and keyed by the generation DeepSeek's MI300X floor
(the model level's +1.0) did not reach the MI355X, which took 0.36x the MI300X's floor. And by
the weights in any format: a layer is the same chain of kernels in FP8 or FP4 (the format's work
is the roofline's and the expert terms'), and keyed with the format DeepSeek-R1 in FP4 on the
MI355X, never measured, decoded at 12 ms a token at four in flight against FP8's 23.
The generation, not the GPU, since session 59: GPUs of one generation run one instruction set
and so the same kernels (H100 and H200 are one Hopper die, the H200 with more and faster
memory; MI300X and MI325X one CDNA 3 die; B200 and B300 both Blackwell), and an MoE model
measured on one of them is the best guide to its sibling. Keyed by the GPU, the MI325X (never
measured) got none of DeepSeek's MI300X deviation: SGLang 0.5.7 decoding DeepSeek-V3.1 at 64 in
flight was predicted at 41 ms a token on it against 72 ms on the MI300X (measured 53), for 13%
more memory bandwidth (session 59's data, before this and the layer floor's generation level;
now 57 and 67 ms). Leave-one-GPU-out (MI300X, H200, H100 and B200, 923 rows) output tok/s went
17 -> 15% median (H100 16 -> 13%, H200 14 -> 12%, B200 21 -> 18%; MI300X 97% either way, no
other GPU of its generation being measured), TTFT 28 -> 28%, TPOT 24 -> 24%; held out by source
(1,362 rows) 21.0 -> 21.4%, TTFT 23.0 -> 23.0% (mean 56.2 -> 53.6%), TPOT 23.8 -> 23.5%; the
2025-07+ closed loops' tok/s 18.4 -> 18.0%, TPOT 24.4 -> 23.4%.
Tried in session 46 and not kept (held out by source, 1,218 rows: output tok/s, TTFT median
(mean), TPOT and p99 TTFT, from 23.0, 36.3 (59.1), 22.6 and 28.3%). At this level: keyed per
engine family instead of shared (24.1, 36.5 (62.3), 22.4, 32.2%); a per-engine level under the
shared one, prior 0.5 (23.4, 36.0 (61.0), 22.2, 28.7%); DeepSeek Sparse Attention models keyed
apart from the dense-attention releases of the same weights (23.7, 36.3 (58.3), 23.3, 29.3%).
Elsewhere in the fit: the roofline's memory- and compute-bound sides as two terms (23.6, 36.1
(62.3), 22.7, 29.0%); TTFT of the all-at-once rows (``max_throughput``) weighted 0.3x (23.0, 36.2
(57.7), 22.1, 29.5%); a publisher level (every term, the request path included, one key a
source: a held-out source takes 0), prior 0.3 (23.1, 36.7 (57.5), 23.1, 28.7%) or 0.6 (23.7,
36.5 (55.8), 23.2, 29.3%). Each moved the figures by what one fold's noise moves them.

``kind`` is dense or MoE. The release/kind level exists because an engine's MoE kernels mature
on their own clock: vLLM 0.7 and SGLang 0.4.3 served Llama at today's speed but DeepSeek-R1 at
half of it (dstack's early-2025 runs). With one release level shared by both kinds, those MoE
rows pulled the MoE level of the whole engine down, and every current MoE release was predicted
slow (leave-one-source-out, GPUStack's vLLM MoE rows at 0.37-0.6x measured throughput). With
it, an old release's MoE slowness stays with that release: held out by source, throughput error
32.8 -> 32.0% median, TTFT 46 -> 44% median and 78 -> 72% mean, TPOT p90 129 -> 112%.

Release age: a release the data never saw gets 0 at the release levels, i.e. its family/kind
level, and the old releases dominated that (held out by source, GPUStack's 2025 H2 MoE rows
on vLLM 0.10/0.11 and SGLang 0.5 took a routed-expert GEMM coefficient 2-3x their own, from
dstack's early-2025 DeepSeek runs). So the MoE kernels' terms (TREND_TERMS: expert_gemm,
expert_read, expert_activation) get a slope in the release's date on top:

    log c[...] += b_kind x age,   age = (release date - TREND_REFERENCE) / 365.25 days
    b_moe ~ N(0, SIGMA_TREND^2), SIGMA_TREND = 1 (log units a year)

with the release's date from :mod:`planner.perf.releases` (the series' first PyPI upload, SGLang
0.4's patch releases one by one). An unseen release is then predicted at its date's level, a
measured one keeps its own deviation around the line. One slope shared by the engine families,
not one each: a family has two to four dated MoE releases in the data, mixed with their GPUs and
sources (SGLang's straddle a single series boundary; TensorRT-LLM 1.2's rows are GPUStack's
only), which a slope per family would fit noise on; the shared one is set by vLLM 0.7 -> 0.13,
SGLang 0.4.2 -> 0.5.6 and TensorRT-LLM 0.17 -> 1.2 together. Until session 60 only MoE rows
got one: a dense layer-floor slope moved nothing held out but vLLM's dense TPOT (6.5 -> 10.4%
median; 8.6% with the MoE slope alone); the MoE layer floor's slope came out -0.17 +- 0.40 a
year and left the held-out medians within 0.1 point, so the floor keeps its release x kind
levels only. Dense rows get a slope of their own on the step's overheads (DENSE_TREND_TERMS:
launches per layer, collective calls, per-pass and per-sequence host work, attention and KV
reads), which releases shave: vLLM 0.11 made full CUDA graphs of decode steps the default (its
release notes, 2025-10). Held out by source, Scicom's vLLM 0.19 rows (2026-04, the latest
dense release in the data, 124 closed loops on H100) came out at 1.23x their TPOT without it.
Fitted on the shipped rows: -0.18 a year on collective calls, -0.11 on forward passes, -0.08
on layers, -0.04 on attention, -0.01 on KV reads, each +- 0.8-1.0 (the prior's width: a weak
trend); the per-sequence term's rose and is dropped. Held out by source (session 60, 1,362
rows): output tok/s 21.2 -> 20.8%, TTFT 23.2 -> 22.8% (mean 53.8 -> 53.6%), TPOT 23.3 ->
23.0%; Scicom's fold tok/s 17.8 -> 16.5%, TPOT 23.7 -> 22.1%; the 2025-07+ closed loops'
tok/s 17.9 -> 16.9%, TPOT 23.0 -> 22.4%. The same overhead slope given to MoE rows too, beside
their expert terms', came out at -0.08 a year and less and held out the same (20.8, 23.0
(53.6), 22.9%). A release without a date (Tandemn's unversioned ``vllm``, TensorRT-LLM's per-GPU
tables until session 66 dated them 1.1, NIM, a series outside the table) has age 0, i.e. no
trend: its family/kind level at the reference date, as before. Fitted on the shipped rows the
MoE slope is -0.56 +- 0.42 a year on the expert GEMM (the two expert streaming terms' stay at
their prior, -0.05 and -0.01 +- 0.9).
Held out by source: output tok/s 31.2 -> 30.4% median error, TTFT 43.7 -> 38.2%, TPOT 27.5 ->
28.0%; GPUStack's vLLM MoE rows tok/s 45 -> 37%, TTFT 56 -> 37%, TPOT 81 -> 51%; closed loops
and rates of 2025-07+ releases tok/s 15.2 -> 14.4%, TTFT 34.5 -> 34.7%.

A slope that comes out positive (a later release's MoE kernels slower, which no engine's
release notes describe) is dropped and the fit redone without it (:func:`fit_coefficients`,
until none is: b_moe,term <= 0). The slope is set by the few sources that ran early-2025
releases: without dstack's (vLLM 0.7, SGLang 0.4.2/0.4.3, TensorRT-LLM 0.17 on DeepSeek) the
expert GEMM's came out +0.32 a year, so those very releases were predicted faster than the
family's level, the wrong way (their TPOT was already 0.65x measured). Held out by source that
slope was the slope's whole cost on dstack's rows (MoE TPOT 34.7 -> 31.9% median, tok/s 109
-> 97%); no other fold's slope is positive on the expert GEMM, and the shipped fit's is
unchanged. (The rest of the closed-loop TPOT that the slope cost, 14.1 -> 18.0% median, is
not the MoE rows: it is the dense rows' shared coefficients moving by 2-6% in log (roofline
down, per-sequence and attention terms up), which flips Tandemn's vLLM histogram estimates of
the median ITL on L4 across a bucket bound (87.5 vs 125 ms, the buckets' midpoints); a
tighter prior on the slope won it back only with its TTFT gain: SIGMA_TREND 0.4 TPOT 14.8%,
TTFT 42.4%; 0.7: 16.3%, 40.7%.)

A level key gets a parameter only for the terms its rows exercise (no NVLink term for a PCIe-only
GPU). So a GPU with few measurements stays near its generation's coefficients (a Blackwell B300
near what B200 and GB200 rows taught, not near the Hopper-dominated shared ones:
:func:`gpu_generation`), a GPU with none gets its generation's outright (spec-sheet terms x the
fitted efficiencies), and a GPU measured under one engine lends its GPU effect to the other.
The served request's fixed path (``request_path``) gets parameters at the family level only:
a held-out release, GPU or entrypoint takes its family's path, and offline rows (no path) never
fit it. The layer floor (``layer_floor``, :mod:`planner.perf.step_time`) gets them at the global,
the release x kind and the GPU vendor levels only, the release x kind with a wide prior
(SIGMA_LAYER_FLOOR = 3): an early release's DeepSeek layers take a near-constant 0.5 ms each at
1-8 in flight, and that is its kernels', not its GPU's or its engine's; a release the data never
saw takes the global floor. The vendor level (SIGMA_FLOOR_VENDOR, wide too) is the platform's
share: ROCm's launch gaps and small-batch kernels against CUDA's.
The eager floor (``eager_floor``: an MoE step run without CUDA graphs, bound by its kernel
launches) gets them at the global and the family levels only, with a wide prior
(SIGMA_EAGER_FLOOR = 1.5): it is the engine's Python model code, not its GPU. The request
path's share that grows with the engine's GPU processes (``request_path_ranks``) is fitted like
the request path, globally and per family, with a wider prior (SIGMA_PATH_RANKS = 1: log2 of
the ranks is 0 on one GPU, so only multi-GPU served rows see it).
Bursts (``max_throughput`` rows: every request sent at once, many more than the engine holds)
fit their throughput only, not their TTFT or TPOT (:func:`targets_for`). A burst's per-request
latencies are set by how its scheduler handles the overload (how it admits, retracts and
re-admits requests, how many it keeps waiting), not by the step costs the coefficients price, and
the simulator's schedulers only approximate that. Fitted, they pulled the shared per-step
coefficients: GPUStack's SGLang bursts came out at 0.03-0.7x their measured TPOT in sample
(gpt-oss-20b on an A100 0.03x, GLM-4.6-FP8 on 8 x H100 0.24-0.33x), and with the robust loss
each such row pushed the SGLang levels up by a fixed amount: the per-sequence term's SGLang
family deviation was +0.19 (log) with them and is -0.03 without, the serve entrypoint's +0.15
and +0.04 (the shipped fits before and after, session 58). Their own latencies gained nothing
from being fitted: held out by source, GPUStack's TTFT and TPOT were 30.7% and 25.7% median
with them fitted, 30.4% and 26.0% without. Held out by source over all rows
(session 58, ``planner validate --scheme source``, 1,353 rows), without them: output tok/s 22.9
-> 22.0% median (MoE 34.5 -> 31.9%), TTFT 23.8 -> 23.3% (mean 61.0 -> 56.5%), p99 TTFT 27.0 ->
26.1%, TPOT 23.8 -> 24.3%; the 2025-07+ closed loops' and rates' TTFT mean 33 -> 31%, TPOT 24
-> 25% median. Session 46 had weighted only their TTFT 0.3x, a move within one fold's noise; at
0.3x for TTFT and TPOT both (session 58): 22.4%, 23.9% (58.4%), TPOT 24.5%.

Coefficients are exp() of the parameters, hence non-negative. The optimiser is an iteratively
reweighted Levenberg-Marquardt on the small normal equations. Rows whose arrivals follow the
clock (a Poisson rate; a served closed loop, whose replacements reach the engine the fitted
request path after their predecessors finish) are re-simulated with the fitted coefficients and
the fit repeated (fixed point, two rounds).

Uncertainty: a Laplace approximation (the inverse Gauss-Newton Hessian at the optimum, with the
robust weights and residual scale) gives each prediction's parameter spread; a level key absent
from the fit (an unmeasured GPU or release) adds the spread its level's fitted keys showed
(empirical Bayes), terms a key never exercised add their prior variance. Residual quantiles per
(engine family, metric) give the noise part (:mod:`planner.perf.uncertainty`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, NamedTuple

import numpy as np

from planner.catalog import (
    GPU,
    MEASURED_ENGINE_SETTINGS,
    Catalog,
    MeasuredResult,
    ModelArchitecture,
)
from planner.engine import canonical_engine, engine_family, release_number
from planner.perf.deployment import Deployment, resolve_deployment
from planner.perf.latency_stats import (
    HISTOGRAM_ITL,
    HISTOGRAM_TTFT,
    VLLM_ITL_BUCKETS_S,
    VLLM_TTFT_BUCKETS_S,
    histogram_quantile,
)
from planner.perf.releases import release_date
from planner.perf.scenario import Scenario, dataset_lengths, entrypoint_of
from planner.perf.simulator import SimTrace, needs_clock, simulate
from planner.perf.step_time import (
    FEATURES,
    FITTED,
    FITTED_IDX,
    FIXED_COEFFICIENTS,
    IDX,
    REQUEST_PATH_LEVELS,
)

N_FITTED = len(FITTED)
#: spec-sheet prior of each fitted coefficient (dimensionless: x times the term's nominal time)
PRIOR_COEFFICIENTS: dict[str, float] = {
    "roofline": 1.0,
    "weight_read": 0.2,
    "expert_read": 0.5,
    # gathered rows and scattered writes stream at about half the HBM rate, like expert_read
    "expert_activation": 0.5,
    "kv_read": 0.3,
    "kv_read_fp8": 0.3,
    "gemm": 0.3,
    # Triton fused-MoE at 22-29% of the H100 BF16 peak (planner.perf.deployment.
    # expert_tile_factor: VeOmni pull request #460): 1 / (1 + 0.5 x tile factor)
    "expert_gemm": 0.5,
    "attention": 0.5,
    "allreduce_nvlink": 1.0,
    "allreduce_pcie_p2p": 1.0,
    "allreduce_pcie_host": 1.0,
    "ar_calls_nvlink": 1.0,
    "ar_calls_pcie_p2p": 3.0,
    "ar_calls_pcie_host": 10.0,
    # a fused all-reduce + residual add + RMSNorm call (planner.perf.step_time): about an
    # all-reduce's time, so a plain call's prior; the fit moves it
    "ar_calls_fused": 1.0,
    "pp_hops": 1.0,
    "net_hops": 1.0,
    "net_transfer": 1.0,
    "layers": 1.0,
    "moe_layers": 1.0,
    # 15 us a layer beyond the roofline: a current release's layer is a few fused, tuned
    # kernels whose launches the `layers` term already holds; an early release's floor is its
    # release x kind deviation (TERM_LEVEL_SIGMA, planner.perf.step_time)
    "layer_floor": 0.1,
    # 1.6 ms a MoE layer of launches when a prefill step runs without CUDA graphs and computes
    # little (planner.perf.step_time); the fit moves it to what eager MoE prefill steps show
    "eager_floor": 0.4,
    "forward_passes": 1.0,
    # a vLLM draft iteration is a forward pass without the scheduler: half its unit
    # (planner.perf.speculative, "draft"); fitted where vLLM speculative rows measure it
    "draft_passes": 0.5,
    "sequences": 0.5,
    # a tenth of the host's per-step work left on the path when vLLM schedules asynchronously
    # (planner.perf.step_time)
    "host_overlapped": 0.1,
    # 3 x 10 ms: a served request's tokenisation, hand-off, first-token detokenisation and SSE
    # chunk on a local server (planner.perf.step_time); the fit moves it to what the measured
    # TTFTs at low load show beyond their prefill steps
    "request_path": 3.0,
    # 5 ms more a doubling of the engine's GPU processes (planner.perf.step_time)
    "request_path_ranks": 0.5,
}
#: position of the request path among the fitted terms
_PATH_FITTED = FITTED.index("request_path")
#: the request path's prior (log units, global and per family): a fixed path of tens of ms is
#: what low-load TTFTs show; left as free as the step terms in an earlier design, a fold
#: without low-load rows of an engine fitted it to whatever queueing its high-load rows missed
#: (seconds: leave-one-source-out vLLM TTFT at 1-4 in flight went to 1,433% median error; at
#: 1.0 it is 62%, below). At 0.3 (until session 44) it held the path at the
#: 30 ms prior (31 ms fitted) while current releases' TTFT at 1-4 in flight came out 0.88x the
#: measured held out by source, and issue 26's independent runs saw ~100 ms missing there on
#: every engine. At 1.0 the fit sets 35 ms (SGLang 41 ms with its family deviation), and held
#: out by source the 2025-07+ closed loops' TTFT went 29.5 -> 28.2% median (1-4 in flight 0.88
#: -> 0.93x), their p99 TTFT 33.9 -> 32.4%, all rows' p99 TTFT 28.6 -> 28.3%, with throughput
#: and TPOT within 0.2 points; what got worse: vLLM's TTFT at 1-4 in flight (mostly older
#: releases, already predicted 1.5x the measured), 58 -> 62%. 1.5 (no cap) gave 27.0% and 32.6%.
SIGMA_REQUEST_PATH = 1.0
SIGMA_GLOBAL = 1.5
SIGMA_FAMILY = 1.0
SIGMA_VERSION = 0.5
SIGMA_GPU = 0.5
SIGMA_GENERATION = 0.5
SIGMA_GROUP = 0.5
SIGMA_ENTRYPOINT = 0.5
SIGMA_KIND = 0.5
#: the model level's prior (log units): 0.3 held out worse than 0.5, 0.8 and 1.2 better
#: once every row had its layout (module docstring)
SIGMA_MODEL = 1.2
#: the layer floor's deviation at the release x kind level (log units): an early release's
#: DeepSeek layers sit at 2-4x the 150 us unit (33-39 ms a step over 61 layers, step_time's
#: docstring), log(3 / 0.1) = 3.4 from the prior, about 1 sigma here
SIGMA_LAYER_FLOOR = 3.0
_FLOOR_FITTED = FITTED.index("layer_floor")
#: the eager floor's deviation per engine family (log units): with the 1 ms unit, fitted alone,
#: SGLang's MoE extend steps came out at ~3x the 100 us prior a layer (0.28 ms), log(3) = 1.1,
#: under 1 sigma; with the 4 ms unit (planner.perf.step_time) the shipped fit sets SGLang 0.18
#: and vLLM 0.21 against the 0.4 prior
SIGMA_EAGER_FLOOR = 1.5
#: the rank-scaled request path's prior (log units, global and per family): the ranks' share
#: is as uncertain as the path's, but only multi-GPU served rows see it
SIGMA_PATH_RANKS = 1.0
_PATH_RANKS_FITTED = FITTED.index("request_path_ranks")
#: the layer floor's deviation per GPU vendor (log units): a platform's launch gaps and
#: untuned small-batch kernels (ROCm's against CUDA's) are not the release's alone. SGLang 0.5.7
#: decoded DeepSeek-V3.1 on 8 x MI300X at 24 ms a step at one in flight, 0.5.6 DeepSeek-R1-0528
#: on 8 x B200 at 9 ms (the SGLang cookbooks): with the floor the release's only, the shipped fit
#: gave the MI300X 11.4 ms. Session 59, the cookbook's MI300X rows in the fit (1,362 rows), as a
#: GPU generation level: prior 1.0 gave it 15.0 ms, 2.0 21.2 ms; held out by source, output
#: tok/s / TTFT median (mean) / TPOT median 20.9 / 23.5 (56.1) / 23.5% without the level, 20.9 /
#: 23.1 (56.1) / 23.6% at 1.0, 21.0 / 23.0 (56.2) / 23.8% at 2.0, and the lmsys.org fold (SGLang
#: 0.4.10's DeepSeek throughput on MI300X, all 10 rows at 1-8 in flight) 24.5 -> 11.2% at 2.0.
#: Keyed by the vendor since session 60: per generation, NVIDIA's four that floor rows reach came
#: out 0.04 to 0.25 (Ampere 0.04, Blackwell 0.11, Hopper 0.22, workstation Blackwell 0.25; Ada's
#: rows never reach the floor) and CDNA 3 1.42, so the floor follows the software platform;
#: keyed by the generation the MI355X (CDNA 4: no row that decodes at low load) took CUDA's
#: floor, SGLang 0.5.7 decoding DeepSeek at one in flight in 8.6 ms a token against the
#: MI300X's measured 24 (19.1 ms keyed by the vendor). Held out by source (1,362 rows) output
#: tok/s / TTFT median (mean) / TPOT median 21.4 / 23.0 (53.6) / 23.5% -> 21.2 / 23.2 (53.8) /
#: 23.3%; leave-one-GPU-out (MI300X, H200, H100, B200) 15 / 28 / 24% -> 15 / 29 / 23%. A vendor
#: level under the generation one (both 2.0) moved the MI355X half as far (10.8 ms) and held out
#: worse (21.8 / 23.5 (54.1) / 24.4%: the H100 dense rows' floor moved with the split)
SIGMA_FLOOR_VENDOR = 2.0
#: the layer floor's deviation per MoE model's weights (in any format) and GPU vendor (the
#: ``model_vendor`` level, log units): a model's layers launch their own kernels (module
#: docstring). Held out by source (session 70, ``benchmarks/latency_errors_bench.py``, 1,362
#: rows), output tok/s / TTFT / TPOT median from 19.2 / 23.3 / 18.3% without it: 18.2 / 23.5 /
#: 18.1%, the 2025-07+ closed loops and rates 13.2 / 19.9 / 14.4 -> 11.5 / 19.7 / 12.2%, SGLang's
#: rows' TPOT 27.4 -> 23.0%. Keyed with the format too: 18.4 / 22.8 / 18.3%, the loops 12.6 /
#: 19.7 / 13.6%. On the model level (by generation) instead, prior 0.5 / 1.2 / 2.0: 19.0 / 23.0 /
#: 18.4%, 18.7 / 22.8 / 18.3%, 18.6 / 23.1 / 17.9% (the loops 13.0 / 19.8 / 14.5%, 13.0 / 19.6 /
#: 14.3%, 12.8 / 19.8 / 14.1%), and the MI355X lost DeepSeek's ROCm floor (module docstring)
SIGMA_FLOOR_MODEL = 2.0
#: a term's prior at a level this wide (log units) is there to let the data move the fit (the
#: layer floor's at release x kind, vendor and MoE weights x vendor), not to say how far keys
#: differ: a key the data barely taught would keep about the prior's variance in its intervals.
#: The covariance takes the spread of the well-measured keys' deviations as that term's prior
#: instead (empirical Bayes, :func:`_taught_spread`); the fitted values keep the wide prior's.
#: Session 71: the 80% interval of Llama-4-Maverick FP8's TPOT at one in flight on 8 x B200
#: (SGLang 0.5.6), a floor no row measures, was 2.4-17.7 ms around 6.5 with the prior's variance,
#: 4.7-9.6 ms with the spread's (0.47 for the model floors, 0.53 for the release floors)
WIDE_PRIOR_SD = 2.0
#: where the fit starts the layer floor's release x kind deviations: log(10), the unit itself
FLOOR_START = math.log(10.0)
#: the levels that get a parameter of a term, for the terms not fitted at every level (the
#: request path is the engine family's; the layer floor an engine release's for a model kind, a
#: GPU vendor's and an MoE model's weights' on a vendor;
#: the eager floor the engine family's: how its Python model code launches an MoE layer's
#: kernels, with a wide prior, SIGMA_EAGER_FLOOR; the host's work under vLLM's async
#: scheduling is fitted globally only: one engine's releases run it, planner.perf.step_time)
TERM_LEVELS: dict[str, frozenset[str]] = {
    "request_path": REQUEST_PATH_LEVELS,
    "layer_floor": frozenset({"release_kind", "vendor", "model_vendor"}),
    "eager_floor": frozenset({"family"}),
    "request_path_ranks": REQUEST_PATH_LEVELS,
    "host_overlapped": frozenset(),
}
#: the levels that fit only the terms naming them in TERM_LEVELS (the GPU vendor and an MoE
#: model's weights on it: the layer floor's platform and model shares; every other term's
#: platform differences are the generation's)
TERM_ONLY_LEVELS: frozenset[str] = frozenset({"vendor", "model_vendor"})
#: prior standard deviation of a term's deviation at a level, where it is not the level's own
#: (the request path's is capped at SIGMA_REQUEST_PATH by :func:`level_prior_sd`)
TERM_LEVEL_SIGMA: dict[str, dict[str, float]] = {
    "layer_floor": {"release_kind": SIGMA_LAYER_FLOOR},
    "eager_floor": {"family": SIGMA_EAGER_FLOOR},
    "request_path_ranks": {"family": SIGMA_PATH_RANKS},
}
ROBUST_SCALE = 0.15  # log units where the soft-L1 loss turns linear
#: each metric's weight in the loss. TTFT weighs as much as throughput since session 58: once
#: the bursts' latencies left the fit (module docstring, "Bursts"), the TTFTs fitted are closed
#: loops' and rates', the ones an SLO reads. Held out by source (session 58,
#: ``benchmarks/latency_errors_bench.py``, 1,353 rows), by TTFT weight: output tok/s / TTFT
#: median (mean) / TPOT median 0.35: 22.0 / 23.3 (56.5) / 24.3%; 0.5: 21.8 / 23.1 (56.8) /
#: 24.3%; 0.7: 21.1 / 23.4 (56.9) / 24.1%; 1.0: 21.1 / 23.6 (57.2) / 23.7%; 1.5: 20.4 / 24.1
#: (56.1) / 23.4%; 1.0 with TPOT's at 1.0 too: 20.6 / 24.0 (55.9) / 23.9%. 0.35 -> 1.0 with
#: ``planner validate --scheme source``: p99 TTFT 26.1 -> 26.0%, p99 TPOT 27.0 -> 25.1%; on the
#: 2025-07+ closed loops and rates (the independent checks' shape) throughput 21 -> 18%, TTFT 23
#: -> 21% (mean 31 -> 30%), TPOT 25 -> 24%, p99 TTFT 24 -> 19%, p99 TPOT 23 -> 20%
METRIC_WEIGHTS = {"output_tok_per_s": 1.0, "ttft": 1.0, "itl": 0.5}
METRICS = ("output_tok_per_s", "ttft", "itl")
#: the terms whose release deviations follow the release's date in an MoE model (the MoE
#: kernels': module docstring, "Release age")
TREND_TERMS: tuple[str, ...] = ("expert_gemm", "expert_read", "expert_activation")
#: the same in a dense model: the step's per-layer, per-collective, per-pass and per-sequence
#: overheads and its attention kernels, which releases shave (vLLM 0.11 made full CUDA graphs of
#: decode steps, attention included, the default: its release notes, 2025-10; module docstring,
#: "Release age")
DENSE_TREND_TERMS: tuple[str, ...] = (
    "layers",
    "forward_passes",
    "sequences",
    "ar_calls_nvlink",
    "kv_read",
    "attention",
)
#: the terms each model kind's slope spans; the kinds not named get none
TREND_TERMS_BY_KIND: dict[str, tuple[str, ...]] = {"moe": TREND_TERMS, "dense": DENSE_TREND_TERMS}
TREND_KINDS: tuple[str, ...] = tuple(TREND_TERMS_BY_KIND)
#: the date the trend is measured from: a release of this date gets none of it (mid-2025, the
#: middle of the dated releases the shipped rows ran: vLLM 0.6 2024-09 to 0.13 2025-12)
TREND_REFERENCE = date(2025, 6, 1)
#: prior standard deviation of a kind's slope (log units a year): DeepSeek on vLLM 0.7 and
#: SGLang 0.4.3 (early 2025) at half of late 2025's speed is log(2) a year, under 1 sigma
SIGMA_TREND = 1.0
#: the pseudo-level of FittedCoefficients.levels that holds the slopes, by model kind
TREND_LEVEL = "trend"
_TREND_MASKS = {
    kind: np.array([f in terms for f in FITTED]) for kind, terms in TREND_TERMS_BY_KIND.items()
}
#: the terms the model level fits: the same MoE kernel terms as the release slope's, the
#: routed experts' GEMMs and streams, whose kernels are tuned per expert shape and GPU
#: (module docstring), and the plain roofline, which an MoE decode step's routed-expert bytes
#: dominate (DeepSeek-R1 on 8 x B200 at 64 sequences: ~70 of ~83 GB a GPU). With the expert
#: terms alone the level could only trim a small additive share: a model whose experts stream
#: faster than the engine's other models on the GPU stayed at the shared roofline coefficient
#: (SGLang on B200: 2.0x spec, its DeepSeek-R1 decode step at 64 sequences 40 ms held out where
#: the SGLang docs measured ~26). With the roofline, held out by source (session 42, 1,218
#: rows): throughput 24.4 -> 24.0%, TTFT 36.4 -> 37.3% median but 61.0 -> 59.5% mean, TPOT
#: 23.5 -> 22.7%, p99 TTFT 29.2 -> 28.5%; the 2025-07+ closed loops' TTFT 29.5 -> 28.6% and
#: TPOT 24.6 -> 22.8%
MODEL_TERMS: tuple[str, ...] = (*TREND_TERMS, "roofline")
_MODEL_MASK = np.array([f in MODEL_TERMS for f in FITTED])


def level_fits(level: str) -> np.ndarray:
    """Which fitted terms get a parameter at ``level`` (:data:`TERM_LEVELS`; the model level
    :data:`MODEL_TERMS` only), over FITTED."""
    if level == "model":
        return _MODEL_MASK.copy()
    if level in TERM_ONLY_LEVELS:
        return np.array([level in TERM_LEVELS.get(term, ()) for term in FITTED])
    fits = np.ones(N_FITTED, dtype=bool)
    for term, levels in TERM_LEVELS.items():
        if level not in levels:
            fits[FITTED.index(term)] = False
    return fits


def level_prior_sd(level: str, sigma: float) -> np.ndarray:
    """Prior standard deviation of each fitted term's deviation at ``level`` (whose own is
    ``sigma``): the request path's capped at SIGMA_REQUEST_PATH, :data:`TERM_LEVEL_SIGMA`'s
    where it names one, 0 where the level fits no parameter of the term (:func:`level_fits`):
    :func:`unseen_term_sd` with the request path's cap."""
    sd = unseen_term_sd(level, sigma)
    sd[_PATH_FITTED] = min(sd[_PATH_FITTED], SIGMA_REQUEST_PATH)
    return sd


def unseen_term_sd(level: str, sigma: float) -> np.ndarray:
    """The spread of a level's deviations that a prediction's variance counts where the data
    taught none: the level's ``sigma`` (the request path's too, as before it had a cap), a
    wider :data:`TERM_LEVEL_SIGMA`, 0 for a term the level never fits."""
    sd = np.full(N_FITTED, sigma)
    for term, by_level in TERM_LEVEL_SIGMA.items():
        if level in by_level:
            sd[FITTED.index(term)] = by_level[level]
    return np.where(level_fits(level), sd, 0.0)


def prior_theta() -> np.ndarray:
    return np.log(np.array([PRIOR_COEFFICIENTS[f] for f in FITTED]))


def full_from_theta(theta: np.ndarray) -> np.ndarray:
    full = np.zeros(len(FEATURES))
    full[FITTED_IDX] = np.exp(theta)
    for name, value in FIXED_COEFFICIENTS.items():
        full[IDX[name]] = value
    return full


# ----- measured rows as simulated samples ---------------------------------------------------
def version_key(scenario: Scenario) -> str | None:
    """The engine-release level of the hierarchy: ``family:major.minor`` (``trtllm:0.17``), the
    engine name for a packaged variant (``trtllm:nim-tensorrt-llm``), None when unknown."""
    family = scenario.engine_family
    engine = canonical_engine(scenario.engine)
    if engine not in ("tensorrt-llm", "vllm", "sglang"):
        return f"{family}:{engine}"
    release = release_number(scenario.engine_version)
    return f"{family}:{release[0]}.{release[1]}" if release is not None else None


def measurement_problem(result: MeasuredResult) -> str | None:
    """Why a measured row cannot be used as stated (None when it can).

    Output and total throughput together fix the output share of the tokens; when that share
    contradicts the stated lengths by more than 25% the requests did not produce the stated
    lengths (truncated answers, failed requests) and the row describes another workload.

    A closed loop holds each of its C slots for a request's whole latency, TTFT + (output - 1)
    x TPOT, so it cannot produce more than C x output / that latency tokens a second (Little's
    law: every other slot-second is a request waiting for its first token or between tokens).
    A row whose output tokens/s exceeds that by more than 30%, with a mean TTFT and a mean TPOT
    or ITL (a median or a histogram bucket does not add up this way), states a concurrency,
    a throughput or a latency that its run did not have. Of the 301 such closed loops shipped
    on 2026-12-05 one does (the SGLang cookbook's Kimi-K2 on MI300X at one in flight: 42.5
    tok/s where its 40.4 ms mean TPOT allows at most 24.6); every other is within 5% of the bound
    or below it (a run's ramp-up and tail leave slots idle).

    A row that states an ``unmodelled_setting`` ran kernels its deployment does not describe:
    fitted, it would move the coefficients its engine, GPU and model share with every other
    row. CloudRift's SGLang 0.5.9 runs of Kimi-K2.5 NVFP4 on B200 pass ``--quantization
    modelopt``; ``ServerArgs._handle_model_specific_adjustments`` (python/sglang/srt/
    server_args.py, read in the 0.5.9 wheel, 2026-12-07) hands a DeepSeek-style model's experts
    to ``flashinfer_trtllm`` only for the quantisations ``fp8``, ``modelopt_fp8`` and
    ``modelopt_fp4`` (it resolves the checkpoint's own only when none is given), so the runner
    stays at auto and ``ModelOptNvFp4FusedMoEMethod.apply`` runs SGLang's own
    ``cutlass_moe_fp4``. Those runs decoded at 1.2-2.0x (median 1.8x) the TPOT of vLLM
    0.17.0's on the same GPUs and lengths, and fitted they set SGLang's B200 coefficients: held
    out by source, SGLang's other 2025-07+ closed loops went 18.1 -> 14.2% median TPOT without
    them (session 69).
    """
    if result.unmodelled_setting:
        return f"runs {result.unmodelled_setting}: a setting the planner does not model"
    loop = closed_loop_excess(result)
    if loop is not None:
        return loop
    out, total = result.output_tok_per_s, result.total_tok_per_s
    if out and total:
        implied = total / out
        stated = (result.input_len + result.output_len) / result.output_len
        if abs(math.log(implied / stated)) > math.log(1.25):
            effective = result.input_len * out / max(total - out, 1e-9)
            return (
                f"total/output throughput {implied:.1f} contradicts the stated "
                f"{result.input_len}/{result.output_len} lengths ({stated:.1f}): about "
                f"{effective:.0f} output tokens per request were produced"
            )
    return None


#: how far a closed loop's output tokens/s may exceed what its slots allow (measurement_problem)
CLOSED_LOOP_SLACK = 1.3


def closed_loop_excess(result: MeasuredResult) -> str | None:
    """The reason a closed-loop row's throughput exceeds what its concurrency and mean
    latencies allow by more than CLOSED_LOOP_SLACK (:func:`measurement_problem`); None when it
    does not, or when the row is no closed loop with a mean TTFT and a mean TPOT or ITL."""
    if result.load != "concurrency" or not result.concurrency or not result.output_tok_per_s:
        return None
    if result.ttft_stat != "mean" or result.itl_stat not in ("mean_tpot", "mean_itl"):
        return None
    if not result.ttft_ms or not result.itl_ms:
        return None
    slots = min(result.concurrency, result.num_requests or result.concurrency)
    latency_s = (result.ttft_ms + max(result.output_len - 1, 0) * result.itl_ms) / 1000.0
    most = slots * result.output_len / latency_s
    if result.output_tok_per_s <= CLOSED_LOOP_SLACK * most:
        return None
    return (
        f"output throughput {result.output_tok_per_s:g} tok/s exceeds the {most:.1f} tok/s "
        f"that a closed loop of {slots:g} allows at its mean TTFT {result.ttft_ms:g} ms and "
        f"{result.itl_stat} {result.itl_ms:g} ms over {result.output_len} output tokens: the "
        "concurrency, the throughput or a latency is not the run's"
    )


def scenario_from_measured(result: MeasuredResult) -> Scenario:
    """The scenario a measured row describes (engine defaults for everything it omits).

    An offline-batch row was run with vLLM's offline ``LLM`` class (``vllm bench
    throughput``), whose batch budget defaults differ from ``vllm serve``'s; a row that names
    its entrypoint, engine knobs, attention data parallelism or expert parallelism keeps them;
    a ShareGPT or uniform-random row is simulated with varying lengths of its stated means.
    """
    lengths = dataset_lengths(
        result.dataset, result.input_len, result.output_len, result.random_range_ratio
    )
    knobs = {
        name: getattr(result, name)
        for name in (
            *MEASURED_ENGINE_SETTINGS,
            "spec_method",
            "num_spec_tokens",
            "spec_accept_len",
            "warm_prompts",
            "warm_prompt_tokens",
        )
        if getattr(result, name) is not None
    }
    if result.load == "offline_batch" and "entrypoint" not in knobs:
        knobs["entrypoint"] = "offline"
    if (
        result.engine_version is None
        and result.origin == "public"
        and engine_family(result.engine) == "vllm"
    ):
        # a scenario without a release is the pinned one, which schedules asynchronously; a
        # public row that names none ran some release of its own, older than the pinned one
        # (vLLM issue 20780's of 2025-07 were such rows until dated 0.9.2), so it is not taken
        # to. A user's run without one ran the plan's pinned release (or the release its server
        # reported, planner.runs)
        knobs["async_scheduling"] = False
    return Scenario(
        engine=result.engine,
        engine_version=result.engine_version,
        model=result.model,
        precision=result.precision,
        gpu=result.gpu,
        num_gpus=result.num_gpus,
        tp=result.tp,
        pp=result.pp,
        load=result.load,
        concurrency=result.concurrency,
        request_rate=result.request_rate,
        num_requests=int(result.num_requests) if result.num_requests else None,
        instance=result.instance,
        nodes=result.nodes,
        **lengths,
        **knobs,
    )


@dataclass
class Target:
    """One measured metric as a function of the coefficients.

    quantity(c) = stat over rows of (V @ c - offset), weights ``w`` (``stat`` 'mean' has one row;
    'p50' the weighted median; 'histogram' Prometheus' histogram_quantile(0.5) with bucket upper
    bounds ``bounds``, :func:`planner.perf.latency_stats.histogram_quantile`);
    ``log_measured`` is the log of the measured quantity in seconds.
    """

    metric: str
    stat: str
    V: np.ndarray
    offset: np.ndarray
    w: np.ndarray
    log_measured: float
    weight: float
    bounds: tuple[float, ...] | None = None


@dataclass
class FitSample:
    result: MeasuredResult
    scenario: Scenario
    dep: Deployment
    trace: SimTrace
    targets: list[Target]

    @property
    def family(self) -> str:
        return self.dep.family

    @property
    def gpu(self) -> str:
        return self.dep.gpu.gpu_id

    @property
    def version(self) -> str | None:
        return version_key(self.scenario)

    @property
    def key(self) -> CoefficientKey:
        return coefficient_key(self.scenario, self.dep)

    @property
    def time_driven(self) -> bool:
        return self.trace.time_driven


def targets_for(result: MeasuredResult, trace: SimTrace, replicas: int) -> list[Target]:
    targets: list[Target] = []
    out_tps = result.output_tok_per_s
    if out_tps is None and result.total_tok_per_s:
        share = result.output_len / (result.input_len + result.output_len)
        out_tps = result.total_tok_per_s * share
    if out_tps:
        duration = replicas * trace.output_tokens / out_tps
        targets.append(
            Target(
                "output_tok_per_s",
                "mean",
                trace.end[None, :],
                np.array([trace.start_time]),
                np.ones(1),
                math.log(duration),
                METRIC_WEIGHTS["output_tok_per_s"],
            )
        )
    if result.load == "max_throughput":
        # a burst's latencies are its scheduler's under overload, not its steps' (docstring)
        return targets
    count = trace.count
    if result.ttft_ms and result.ttft_ms > 0:
        rel = trace.first - trace.arrival
        if (result.ttft_stat or "mean") == "mean":
            V = (count[:, None] * rel).sum(0, keepdims=True) / count.sum()
            off = np.array([(count * trace.arrival_time).sum() / count.sum()])
            targets.append(
                Target(
                    "ttft",
                    "mean",
                    V,
                    off,
                    np.ones(1),
                    math.log(result.ttft_ms / 1e3),
                    METRIC_WEIGHTS["ttft"],
                )
            )
        else:
            histogram = result.ttft_stat == HISTOGRAM_TTFT
            targets.append(
                Target(
                    "ttft",
                    "histogram" if histogram else "p50",
                    rel,
                    trace.arrival_time.copy(),
                    count.copy(),
                    math.log(result.ttft_ms / 1e3),
                    METRIC_WEIGHTS["ttft"],
                    VLLM_TTFT_BUCKETS_S if histogram else None,
                )
            )
    if result.itl_ms and result.itl_ms > 0:
        gaps = np.maximum(trace.output_len - 1, 0)
        ok = gaps > 0
        if ok.any():
            span = trace.finish - trace.first
            stat = result.itl_stat or "mean_itl"
            if stat == HISTOGRAM_ITL and trace.gap_terms.size:
                # one observation a token gap (planner.perf.latency_stats): the pooled gaps
                targets.append(
                    Target(
                        "itl",
                        "histogram",
                        trace.gap_terms,
                        np.zeros(len(trace.gap_terms)),
                        trace.gap_weight * 1.0,
                        math.log(result.itl_ms / 1e3),
                        METRIC_WEIGHTS["itl"],
                        VLLM_ITL_BUCKETS_S,
                    )
                )
            elif stat == "mean_tpot":
                # mean over requests of (E2E - TTFT) / (output - 1): linear in c
                weights = count[ok] / count[ok].sum()
                V = (weights[:, None] * span[ok] / gaps[ok, None]).sum(0, keepdims=True)
                targets.append(
                    Target(
                        "itl",
                        "mean",
                        V,
                        np.zeros(1),
                        np.ones(1),
                        math.log(result.itl_ms / 1e3),
                        METRIC_WEIGHTS["itl"],
                    )
                )
            elif stat.startswith("mean"):
                total_gaps = (count[ok] * gaps[ok]).sum()
                V = (count[ok, None] * span[ok]).sum(0, keepdims=True) / total_gaps
                targets.append(
                    Target(
                        "itl",
                        "mean",
                        V,
                        np.zeros(1),
                        np.ones(1),
                        math.log(result.itl_ms / 1e3),
                        METRIC_WEIGHTS["itl"],
                    )
                )
            else:
                V = span[ok] / gaps[ok, None]
                targets.append(
                    Target(
                        "itl",
                        "p50",
                        V,
                        np.zeros(int(ok.sum())),
                        count[ok].copy(),
                        math.log(result.itl_ms / 1e3),
                        METRIC_WEIGHTS["itl"],
                    )
                )
    return targets


def build_sample(
    result: MeasuredResult,
    catalog: Catalog,
    coefficients: Callable[[CoefficientKey], np.ndarray] | None = None,
    *,
    simulated: SimTrace | None = None,
) -> FitSample:
    """The row simulated as it ran (a clock-driven row with ``coefficients``, default the
    prior); ``simulated``: its trace from an earlier simulation with the prior
    (:mod:`planner.perf.sample_cache`), reused instead of simulating again."""
    scenario = scenario_from_measured(result)
    dep = resolve_deployment(scenario, catalog)
    if simulated is not None and coefficients is None:
        trace = simulated
    else:
        c = coefficients(coefficient_key(scenario, dep)) if coefficients is not None else None
        clock = needs_clock(dep)
        if clock and c is None:
            c = full_from_theta(prior_theta())
        trace = simulate(dep, c if clock else None, timeline=False)
    return FitSample(result, scenario, dep, trace, targets_for(result, trace, dep.loaded_replicas))


# ----- the fit -------------------------------------------------------------------------------
#: levels of the hierarchy, their prior standard deviation (log units) and the key of a sample
LEVELS: tuple[tuple[str, float], ...] = (
    ("family", SIGMA_FAMILY),
    ("version", SIGMA_VERSION),
    ("vendor", SIGMA_FLOOR_VENDOR),
    ("generation", SIGMA_GENERATION),
    ("gpu", SIGMA_GPU),
    ("group", SIGMA_GROUP),
    ("entrypoint", SIGMA_ENTRYPOINT),
    ("kind", SIGMA_KIND),
    ("release_kind", SIGMA_KIND),
    ("model", SIGMA_MODEL),
    ("model_vendor", SIGMA_FLOOR_MODEL),
)


class CoefficientKey(NamedTuple):
    """What picks a coefficient vector: engine family, GPU, engine release (``family:x.y``),
    how the engine is driven (``offline``: an engine-only benchmark such as trtllm-bench or
    vLLM's LLM class; ``serve``: an HTTP server with a streaming client) and the model kind
    (``dense`` or ``moe``: an engine's MoE kernels are its own)."""

    family: str
    gpu: str
    version: str | None = None
    entrypoint: str | None = None
    kind: str | None = None
    generation: str | None = None
    #: the release's date (:func:`planner.perf.releases.release_date`, patch-level for SGLang
    #: 0.4 and 0.5); None: the series' date from ``version`` when the table has it
    #: (:func:`release_age`)
    released: date | None = None
    #: an MoE model's weights and their format, ``<total>/<active>:<precision>`` (re-releases
    #: of an architecture share it); None for a dense model: with the generation, the key of
    #: the model level (MODEL_TERMS); less the format, with the vendor, of the model_vendor level
    #: (the layer floor)
    model: str | None = None


def release_age(key: CoefficientKey) -> float:
    """Years from TREND_REFERENCE to the key's release: its ``released`` date, else its
    ``version`` series' first upload (:mod:`planner.perf.releases`); 0 (no trend) for a release
    without a date: an unversioned row (Tandemn's ``vllm``, a series named without its minor), a
    packaged variant (NIM) or a series the tables skip (a release after them takes their newest
    date: :func:`planner.perf.releases.release_date`)."""
    released = key.released
    if released is None and key.version is not None:
        family, _, series = key.version.partition(":")
        released = release_date(family, series)
    if released is None:
        return 0.0
    return (released - TREND_REFERENCE).days / 365.25


def gpu_generation(gpu: GPU) -> str:
    """The GPU's tensor-core generation as the catalog's own fields tell it: vendor, the
    narrowest format its tensor cores multiply natively and its memory class.

    ``nvidia:fp4:hbm`` is data-center Blackwell (B200, GB200, B300, GB300: FP4 tensor cores
    exist only on Blackwell, docs/domain.md), ``nvidia:fp4:gddr`` workstation Blackwell (RTX
    PRO 6000), ``nvidia:fp8:hbm`` Hopper, ``nvidia:fp8:gddr`` Ada, ``nvidia:16bit:*`` Ampere,
    ``amd:fp4:hbm`` CDNA4 (MI355X), ``amd:fp8:hbm`` CDNA3. A generation shares its kernels
    (Blackwell's tcgen05 MMAs with tensor memory and hardware block scales, FlashInfer's and
    TensorRT-LLM's trtllm-gen SM100 kernels; Hopper's WGMMA, FlashAttention-3, DeepGEMM SM90),
    hence their efficiency against the spec sheet; a user's own GPU gets a key too (a row
    without `memory_type` one of its own, which no row has taught).
    """
    if gpu.fp4_dense_tflops is not None:
        native = "fp4"
    elif gpu.fp8_dense_tflops is not None:
        native = "fp8"
    else:
        native = "16bit"
    if gpu.memory_type is None:
        memory = "unknown"  # a user's GPU row without it: a generation no row has taught
    else:
        memory = "hbm" if gpu.memory_type.upper().startswith("HBM") else "gddr"
    return f"{gpu.vendor}:{native}:{memory}"


def moe_weights_key(arch: ModelArchitecture, precision: str) -> str:
    """The model level's name for an MoE model's weights: its total and active parameters
    and the format they are stored in. The format picks the expert kernels as much as the shape
    does: TensorRT-LLM runs DeepSeek-R1's experts on B200 with DeepGEMM for the FP8 checkpoint
    and CUTLASS or its TRTLLM kernels for NVFP4, and Hopper's FP8 through CUTLASS only (the MoE
    backend support matrix of docs/source/deployment-guide/quick-start-recipe-for-deepseek-r1-
    on-trtllm.md, NVIDIA/TensorRT-LLM@0d2a785, read 2026-12-04); vLLM's and SGLang's Triton
    fused MoE run FP8 block-scaled weights with a per-group activation quantisation a 16-bit
    model has not. Keyed without it, DeepSeek-R1 on 8 x B200 took one deviation for the
    TensorRT-LLM tables' NVFP4 rows, which ran 1.2x slower than the shared coefficients gave
    them, and the SGLang documentation's FP8 rows, which ran faster: the FP8 rows' TPOT at 64 in
    flight came out 1.27-1.31x the measured in sample (1.22-1.25x keyed by the format)."""
    return f"{arch.total_params}/{arch.active_params}:{precision.strip().lower()}"


def coefficient_key(scenario: Scenario, dep: Deployment) -> CoefficientKey:
    version = version_key(scenario)
    family = dep.family
    arch = dep.card.architecture
    # dated only where the key is the engine's own major.minor (not a packaged variant's name)
    series = version.partition(":")[2] if version is not None else ""
    dated = series[:1].isdigit()
    return CoefficientKey(
        family=family,
        gpu=dep.gpu.gpu_id,
        version=version,
        entrypoint=entrypoint_of(scenario),
        kind="moe" if arch.is_moe else "dense",
        generation=gpu_generation(dep.gpu),
        released=release_date(family, scenario.engine_version) if dated else None,
        model=moe_weights_key(arch, scenario.precision) if arch.is_moe else None,
    )


def level_keys(key: CoefficientKey) -> dict[str, str | None]:
    family = key.family
    vendor = key.generation.partition(":")[0] if key.generation else None
    return {
        "family": family,
        "version": key.version,
        "vendor": vendor,
        "generation": key.generation,
        "gpu": key.gpu,
        "group": f"{family}/{key.gpu}",
        "entrypoint": key.entrypoint,
        "kind": f"{family}:{key.kind}" if key.kind else None,
        "release_kind": f"{key.version}:{key.kind}" if key.kind and key.version else None,
        "model": f"{key.model}@{key.generation}" if key.model else None,
        # the layer floor of the same weights, in any format (moe_weights_key less its
        # ":<precision>"), on a vendor's platform (SIGMA_FLOOR_MODEL)
        "model_vendor": f"{key.model.partition(':')[0]}@{vendor}" if key.model and vendor else None,
    }


@dataclass
class FittedCoefficients:
    """Log-coefficients by level; ``theta_for`` composes them for any (family, GPU, version)."""

    theta0: np.ndarray
    levels: dict[str, dict[str, np.ndarray]]
    covariance: np.ndarray  # over the packed parameter vector
    columns: dict[str, np.ndarray]  # "level:key" -> parameter column per term (-1: not fitted)
    residual_scale: float
    residuals: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)  # (family, metric)
    n_rows: int = 0
    #: :meth:`log_variance`'s quadratic form per key (derived from the fields above, never saved)
    _variance_forms: dict[CoefficientKey, np.ndarray] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    #: :func:`planner.perf.uncertainty.residual_quantiles` per (family, metric), derived
    residual_quantile_memo: dict[tuple[str, str], tuple[float, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    #: :meth:`full_for` per key (read-only arrays, derived, never saved)
    _full: dict[CoefficientKey, np.ndarray] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def theta_for(self, key: CoefficientKey) -> np.ndarray:
        theta = self.theta0.copy()
        for level, name in level_keys(key).items():
            if name is not None and name in self.levels.get(level, {}):
                theta += self.levels[level][name]
        slope = self.levels.get(TREND_LEVEL, {}).get(key.kind or "")
        if slope is not None:
            theta += slope * release_age(key)
        return theta

    def full_for(self, key: CoefficientKey) -> np.ndarray:
        """The full coefficient vector of ``key`` (read-only: one array per key is shared by
        every prediction asking it, a search's hundreds of candidates)."""
        held = self._full.get(key)
        if held is None:
            held = full_from_theta(self.theta_for(key))
            held.flags.writeable = False
            self._full[key] = held
        return held

    def known(self, level: str, key: str | None) -> bool:
        return key is not None and key in self.levels.get(level, {})

    def log_variance(self, key: CoefficientKey, shares: np.ndarray) -> float:
        """Variance of log(prediction) from the coefficients, for term shares of the prediction.

        ``shares[k] = c_k x_k / sum c x`` over the fitted terms. Levels absent from the fit
        contribute their prior variance. Every part is a quadratic form in ``shares``, so the
        variance is ``shares' Q shares`` with ``Q`` built once per key (:meth:`_variance_form`).
        """
        form = self._variance_forms.get(key)
        if form is None:
            form = self._variance_forms[key] = self._variance_form(key)
        return float(shares @ form @ shares)

    def _variance_form(self, key: CoefficientKey) -> np.ndarray:
        """``Q`` of :meth:`log_variance`: ``M' C M`` (``M`` scatters the shares onto the packed
        parameters of the key's levels, ``C`` their covariance), plus the prior variance of the
        terms a level never saw (diagonal), plus, for a key the data never saw, the spread of
        the fitted deviations of that level's keys."""
        n_params = self.covariance.shape[0]
        scatter = np.zeros((n_params, N_FITTED))
        scatter[np.arange(N_FITTED), np.arange(N_FITTED)] += 1.0
        form = np.zeros((N_FITTED, N_FITTED))
        sigma = dict(LEVELS)
        for level, name in level_keys(key).items():
            if name is None:
                continue
            found = self.columns.get(f"{level}:{name}")
            if found is None:
                # a key the data never saw (a GPU, a release): its deviation is as unknown as
                # the deviations of the keys it did see were spread (empirical Bayes)
                form += self._level_spread_form(level)
                continue
            # terms this key never saw in the data carry their prior variance (not a term the
            # level never fits: the request path is the family's, the layer floor the release
            # x kind's)
            unseen = np.where(found < 0, unseen_term_sd(level, sigma[level]) ** 2, 0.0)
            form += np.diag(unseen)
            ok = found >= 0
            np.add.at(scatter, (found[ok], np.arange(N_FITTED)[ok]), 1.0)
        # the kind's slope, times the release's age
        slope_cols = self.columns.get(f"{TREND_LEVEL}:{key.kind}")
        if slope_cols is not None:
            ok = slope_cols >= 0
            np.add.at(scatter, (slope_cols[ok], np.arange(N_FITTED)[ok]), release_age(key))
        return form + scatter.T @ self.covariance @ scatter

    def _level_spread_form(self, level: str) -> np.ndarray:
        """Mean square effect on log(prediction) of the fitted deviations of a level's keys, as
        a quadratic form: ``mean_k (shares . delta_k)^2`` (the prior variance with fewer than
        three keys)."""
        deltas = list(self.levels.get(level, {}).values())
        if len(deltas) < 3:
            return np.diag(unseen_term_sd(level, dict(LEVELS)[level]) ** 2)
        stacked = np.stack(deltas)
        return stacked.T @ stacked / len(deltas)


_MedianTarget = tuple[
    np.ndarray, np.ndarray, np.ndarray, float, float, int, tuple[float, ...] | None
]


@dataclass
class _Packed:
    n_data: int
    lin_V: np.ndarray
    lin_off: np.ndarray
    lin_logy: np.ndarray
    lin_sw: np.ndarray
    lin_rows: np.ndarray  # row (parameter combination) of each linear target
    #: (V, offset, weights, log measured, sqrt weight, row, histogram bounds or None)
    med: list[_MedianTarget]
    row_index: np.ndarray  # (n_rows, n_levels): key index per level, -1 when absent
    row_age: np.ndarray  # (n_rows,): release age in years (release_age), 0 when undated
    row_kind: list[str | None]  # model kind per row
    level_keys: list[list[str]]
    keys: list[tuple[int, str]]  # (sample index, metric) per data residual, lin first then med


def _pack(samples: Sequence[FitSample]) -> _Packed:
    level_keys_: list[list[str]] = [[] for _ in LEVELS]
    combos: dict[tuple[object, ...], int] = {}
    combo_rows: list[tuple[int, ...]] = []
    combo_age: list[float] = []
    combo_kind: list[str | None] = []
    lin_V, lin_off, lin_logy, lin_sw, lin_rows = [], [], [], [], []
    med = []
    keys_lin: list[tuple[int, str]] = []
    keys_med: list[tuple[int, str]] = []
    for si, s in enumerate(samples):
        keys = level_keys(s.key)
        idx = []
        for li, (level, _) in enumerate(LEVELS):
            key = keys[level]
            if key is None:
                idx.append(-1)
                continue
            if key not in level_keys_[li]:
                level_keys_[li].append(key)
            idx.append(level_keys_[li].index(key))
        # SGLang 0.4's patch releases share a version key but not a date: the age splits rows
        age = release_age(s.key)
        combo = (*idx, age)
        if combo not in combos:
            combos[combo] = len(combo_rows)
            combo_rows.append(tuple(idx))
            combo_age.append(age)
            combo_kind.append(s.key.kind)
        row = combos[combo]
        for t in s.targets:
            if t.stat == "mean":
                lin_V.append(t.V[0])
                lin_off.append(float(t.offset[0]))
                lin_logy.append(t.log_measured)
                lin_sw.append(math.sqrt(t.weight))
                lin_rows.append(row)
                keys_lin.append((si, t.metric))
            else:
                bounds = t.bounds if t.stat == "histogram" else None
                med.append((t.V, t.offset, t.w, t.log_measured, math.sqrt(t.weight), row, bounds))
                keys_med.append((si, t.metric))
    return _Packed(
        n_data=len(lin_V) + len(med),
        lin_V=np.array(lin_V).reshape(len(lin_V), len(FEATURES)),
        lin_off=np.array(lin_off),
        lin_logy=np.array(lin_logy),
        lin_sw=np.array(lin_sw),
        lin_rows=np.array(lin_rows, dtype=int),
        med=med,
        row_index=np.array(combo_rows, dtype=int).reshape(len(combo_rows), len(LEVELS)),
        row_age=np.array(combo_age, dtype=float),
        row_kind=combo_kind,
        level_keys=level_keys_,
        keys=keys_lin + keys_med,
    )


def _median_pick(V: np.ndarray, off: np.ndarray, w: np.ndarray, c: np.ndarray) -> tuple[float, int]:
    values = V @ c - off
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(w[order])
    half = 0.5 * (cum[-1] - 1)
    lo = int(order[np.searchsorted(cum, math.floor(half) + 1)])
    hi = int(order[np.searchsorted(cum, min(math.floor(half) + 1, cum[-1] - 1) + 1)])
    frac = half - math.floor(half)
    if frac > 0 and hi != lo:
        return float(values[lo] * (1 - frac) + values[hi] * frac), lo
    return float(values[lo]), lo


def _robust_cost(r: np.ndarray, n_data: int) -> float:
    """Soft-L1 on the data residuals (scale ROBUST_SCALE), squares on the prior residuals."""
    f2 = ROBUST_SCALE**2
    data = 2.0 * f2 * (np.sqrt(1.0 + r[:n_data] ** 2 / f2) - 1.0)
    return float(data.sum() + (r[n_data:] ** 2).sum())


def _levenberg_marquardt(
    residuals: Callable[[np.ndarray], np.ndarray],
    jacobian: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    n_data: int,
    *,
    max_iter: int = 100,
    tol: float = 1e-6,
) -> np.ndarray:
    """Iteratively reweighted Levenberg-Marquardt for the soft-L1 loss.

    Each step solves (J'WJ + lambda diag(J'WJ)) dx = -J'Wr with the soft-L1 weights
    w = 1/sqrt(1 + (r/f)^2) on the data rows (the normal equations are small: one row and one
    column a parameter), accepting it only if the robust cost falls.
    """
    x = x0.copy()
    r = residuals(x)
    cost = _robust_cost(r, n_data)
    lam = 1e-3
    # imported here: a fit needs scipy, a prediction from the fit cache does not (0.4 s a start)
    from scipy.sparse import csc_matrix
    from scipy.sparse.linalg import spsolve

    f2 = ROBUST_SCALE**2
    for _ in range(max_iter):
        J = jacobian(x)
        w = 1.0 / np.sqrt(1.0 + r[:n_data] ** 2 / f2)
        A, Jw = _weighted_normal(J[:n_data], w)
        g = Jw.T @ r[:n_data]
        # the prior rows are diagonal (one a parameter): added without a dense product
        prior = J[n_data:]
        if prior.shape[0] == prior.shape[1]:
            d = np.diag(prior)
            A[np.diag_indices_from(A)] += d * d
            g += d * r[n_data:]
        else:
            A += prior.T @ prior
            g += prior.T @ r[n_data:]
        diag = np.maximum(np.diag(A), 1e-12)
        improved = False
        for _ in range(12):
            damped = A.copy()
            damped[np.diag_indices_from(damped)] += lam * diag
            # the normal matrix is ~70% zeros (parameters of keys that never share a row):
            # a sparse LU is faster than a dense solve and needs no BLAS threads
            step = spsolve(csc_matrix(damped), -g)
            if not np.all(np.isfinite(step)):
                lam *= 10
                continue
            x_new = x + step
            r_new = residuals(x_new)
            cost_new = _robust_cost(r_new, n_data)
            if cost_new < cost:
                improved = True
                lam = max(lam / 3.0, 1e-9)
                break
            lam *= 4.0
        if not improved:
            break
        rel = (cost - cost_new) / max(cost, 1e-12)
        x, r, cost = x_new, r_new, cost_new
        if rel < tol or float(np.abs(step).max()) < 1e-7:
            break
    return x


def _weighted_normal(J: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, Any]:
    """J'WJ (dense) and WJ (sparse) of the data rows ``J`` with row weights ``w``. A data row
    sees only its own keys' columns (~4% of J's entries are not zero), so the products are
    sparse ones, ~3x faster than dense (session 57); both the Levenberg-Marquardt steps and
    the covariance take them."""
    from scipy.sparse import csr_matrix, diags

    Jd = csr_matrix(J)
    Jw = diags(w) @ Jd
    return (Jw.T @ Jd).toarray(), Jw


def fit_coefficients(
    samples: Sequence[FitSample],
    *,
    initial: FittedCoefficients | None = None,
    max_iter: int = 100,
) -> FittedCoefficients:
    """Robust hierarchical fit of the log-coefficients to the samples' targets.

    A release-age slope that comes out positive (a later release's MoE kernels slower) is
    dropped and the fit redone without it, until none is (module docstring, "Release age")."""
    dropped: frozenset[tuple[str, str]] = frozenset()
    start = initial
    while True:
        fitted = _fit_coefficients(samples, start, max_iter, dropped)
        rising = rising_slopes(fitted)
        if not rising:
            return fitted
        dropped |= rising
        start = fitted  # the refit starts where this one ended, less the dropped slopes


def rising_slopes(fitted: FittedCoefficients) -> frozenset[tuple[str, str]]:
    """(model kind, term) of the release-age slopes that came out positive."""
    return frozenset(
        (kind, FITTED[k])
        for kind, slope in fitted.levels.get(TREND_LEVEL, {}).items()
        for k in np.flatnonzero(slope > 0.0)
    )


def _fit_coefficients(
    samples: Sequence[FitSample],
    initial: FittedCoefficients | None,
    max_iter: int,
    dropped: frozenset[tuple[str, str]],
) -> FittedCoefficients:
    """:func:`fit_coefficients` without the slopes ``dropped`` ((model kind, term) pairs)."""
    pk = _pack(samples)
    P = N_FITTED
    n_rows = len(pk.row_index)
    n_levels = len(LEVELS)
    # which terms each row's data can see: a level key gets a parameter only for those
    seen = np.zeros((n_rows, P), dtype=bool)
    if len(pk.lin_rows):
        np.logical_or.at(seen, pk.lin_rows, pk.lin_V[:, FITTED_IDX] > 0)
    for V, _, _, _, _, r, _ in pk.med:
        seen[r] |= (V[:, FITTED_IDX] > 0).any(0)
    colmap = np.full((n_rows, n_levels, P), -1, dtype=int)
    global_sd = np.full(P, SIGMA_GLOBAL)
    global_sd[_PATH_FITTED] = SIGMA_REQUEST_PATH
    global_sd[_PATH_RANKS_FITTED] = SIGMA_PATH_RANKS
    prior_sd_list = [global_sd]
    column_names: dict[str, np.ndarray] = {}
    next_col = P
    for li, (level, sigma) in enumerate(LEVELS):
        for ki, key in enumerate(pk.level_keys[li]):
            members = pk.row_index[:, li] == ki
            # the path is the family's, the layer floor the release x kind's (step_time)
            active = seen[members].any(0) & level_fits(level)
            cols = np.full(P, -1, dtype=int)
            cols[active] = next_col + np.arange(int(active.sum()))
            next_col += int(active.sum())
            prior_sd_list.append(level_prior_sd(level, sigma)[active])
            colmap[members, li, :] = cols
            column_names[f"{level}:{key}"] = cols
    # the release-age slopes, one per model kind and trend term its dated rows exercise
    trend_cols = np.full((n_rows, P), -1, dtype=int)
    for kind in sorted({k for k in pk.row_kind if k in TREND_KINDS}):
        members = np.array([k == kind for k in pk.row_kind])
        active = seen[members & (pk.row_age != 0.0)].any(0) & _TREND_MASKS[kind]
        active &= np.array([(kind, term) not in dropped for term in FITTED])
        cols = np.full(P, -1, dtype=int)
        cols[active] = next_col + np.arange(int(active.sum()))
        next_col += int(active.sum())
        prior_sd_list.append(np.full(int(active.sum()), SIGMA_TREND))
        trend_cols[members, :] = cols
        column_names[f"{TREND_LEVEL}:{kind}"] = cols
    n_params = next_col
    prior_sd = np.concatenate(prior_sd_list)
    fixed = np.zeros(len(FEATURES))
    for name, value in FIXED_COEFFICIENTS.items():
        fixed[IDX[name]] = value
    prior_mean = np.zeros(n_params)
    prior_mean[:P] = prior_theta()
    gather = np.where(colmap >= 0, colmap, n_params)  # n_params -> an appended zero
    trend_gather = np.where(trend_cols >= 0, trend_cols, n_params)
    age = pk.row_age

    def row_theta(x: np.ndarray) -> np.ndarray:
        xx = np.append(x, 0.0)
        return x[:P][None, :] + xx[gather].sum(axis=1) + age[:, None] * xx[trend_gather]

    def data_parts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        C = np.tile(fixed, (n_rows, 1))
        C[:, FITTED_IDX] = np.exp(row_theta(x))
        n_lin = len(pk.lin_logy)
        res = np.empty(pk.n_data)
        S = np.empty((pk.n_data, P))  # d(log q)/d(theta_k) of the target's row
        rows = np.empty(pk.n_data, dtype=int)
        if n_lin:
            Cr = C[pk.lin_rows]
            raw = (pk.lin_V * Cr).sum(1) - pk.lin_off
            q = np.maximum(raw, 1e-6)
            res[:n_lin] = pk.lin_sw * (np.log(q) - pk.lin_logy)
            S[:n_lin] = (
                (pk.lin_sw * (raw > 1e-6))[:, None]
                * pk.lin_V[:, FITTED_IDX]
                * Cr[:, FITTED_IDX]
                / q[:, None]
            )
            rows[:n_lin] = pk.lin_rows
        for j, (V, off, w, logy, sw, r, bounds) in enumerate(pk.med):
            c = C[r]
            raw_m, pick = _median_pick(V, off, w, c)
            q_m = max(raw_m, 1e-6)
            if bounds is None:
                res[n_lin + j] = sw * (math.log(q_m) - logy)
            else:
                # the histogram's estimate; d log(estimate) taken as d log(median) below
                estimate = histogram_quantile(V @ c - off, w, bounds, 0.5)
                res[n_lin + j] = sw * (math.log(max(estimate, 1e-6)) - logy)
            S[n_lin + j] = (sw if raw_m > 1e-6 else 0.0) * V[pick, FITTED_IDX] * c[FITTED_IDX] / q_m
            rows[n_lin + j] = r
        return res, S, rows

    n_data = pk.n_data
    prior_diag = np.diag(1.0 / prior_sd)

    def residuals(x: np.ndarray) -> np.ndarray:
        res, _, _ = data_parts(x)
        return np.concatenate([res, (x - prior_mean) / prior_sd])

    def jacobian(x: np.ndarray) -> np.ndarray:
        _, S, rows = data_parts(x)
        J = np.zeros((n_data + n_params, n_params))
        J[:n_data, :P] = S
        for li in range(n_levels):
            cols = colmap[rows, li, :]
            mask = cols >= 0
            r_idx, k_idx = np.nonzero(mask)
            J[r_idx, cols[mask]] = S[r_idx, k_idx]
        cols = trend_cols[rows]
        mask = cols >= 0
        r_idx, k_idx = np.nonzero(mask)
        J[r_idx, cols[mask]] = S[r_idx, k_idx] * age[rows[r_idx]]
        J[n_data:, :] = prior_diag
        return J

    x0 = prior_mean.copy()
    # the layer floor's release x kind deviations start where the data can pull them either
    # way (FLOOR_START): near the prior the floor is a small share of a step, the data's
    # gradient on it as small, and the damped steps leave it hardly (a floor fixed at 1 us a
    # layer, started there, moved no release's deviation past 0.04)
    for name, cols in column_names.items():
        if name.startswith("release_kind:") and cols[_FLOOR_FITTED] >= 0:
            x0[cols[_FLOOR_FITTED]] = FLOOR_START
    if initial is not None:
        x0[:P] = initial.theta0
        for name, cols in column_names.items():
            level, key = name.split(":", 1)
            if key in initial.levels.get(level, {}):
                ok = cols >= 0
                x0[cols[ok]] = initial.levels[level][key][ok]
    x = _levenberg_marquardt(residuals, jacobian, x0, n_data, max_iter=max_iter)
    res, _, _ = data_parts(x)
    J = jacobian(x)
    # robust scale of the data residuals and the Gauss-Newton covariance of the parameters
    scale = max(float(np.median(np.abs(res))) * 1.4826 if n_data else 1.0, 0.05)
    weights = 1.0 / np.sqrt(1.0 + (res / ROBUST_SCALE) ** 2) / scale**2
    hess, _ = _weighted_normal(J[:n_data], weights)
    hess[np.diag_indices_from(hess)] += np.diag(J[n_data:]) ** 2
    cov = _inverse(hess)
    spread = _taught_spread(column_names, x, cov, prior_sd)
    if spread:
        # the added prior precision is diagonal on a few columns: the new inverse by Woodbury's
        # identity, (H + U D U')^-1 = C - C U (D^-1 + U' C U)^-1 U' C, not a second inversion
        cols = np.concatenate([c for c, _ in spread])
        added = np.concatenate([1.0 / tau**2 - 1.0 / prior_sd[c] ** 2 for c, tau in spread])
        side = cov[:, cols]
        inner = np.diag(1.0 / added) + side[cols, :]
        cov = cov - side @ np.linalg.solve(inner, side.T)
    # exactly symmetric (an inverse is so only to ~1e-13), so that its triangle is all of it
    # (planner.perf.fit_cache stores half the matrix)
    cov = (cov + cov.T) / 2.0
    levels: dict[str, dict[str, np.ndarray]] = {level: {} for level, _ in LEVELS}
    levels[TREND_LEVEL] = {}
    for name, cols in column_names.items():
        level, key = name.split(":", 1)
        values = np.zeros(P)
        ok = cols >= 0
        values[ok] = x[cols[ok]]
        levels[level][key] = values
    # unweighted log residuals by (family, metric), for the noise part of intervals
    by_key: dict[tuple[str, str], list[float]] = {}
    sw_all = np.concatenate([pk.lin_sw, np.array([m[4] for m in pk.med])])
    for (si, metric), r, sw in zip(pk.keys, res, sw_all, strict=True):
        by_key.setdefault((samples[si].family, metric), []).append(r / sw)
    return FittedCoefficients(
        theta0=x[:P].copy(),
        levels=levels,
        covariance=cov,
        columns=column_names,
        residual_scale=scale,
        residuals={k: np.array(v) for k, v in by_key.items()},
        n_rows=len(samples),
    )


def _inverse(hess: np.ndarray) -> np.ndarray:
    try:
        return np.linalg.inv(hess)
    except np.linalg.LinAlgError:
        return np.linalg.pinv(hess)


def _taught_spread(
    column_names: dict[str, np.ndarray], x: np.ndarray, cov: np.ndarray, prior_sd: np.ndarray
) -> list[tuple[np.ndarray, float]]:
    """The wide priors' empirical-Bayes replacements (:data:`WIDE_PRIOR_SD`): per level and
    term fitted with a prior at least that wide, the columns of its keys and the root mean
    square deviation of its well-measured keys (posterior sd under half the prior's, at least
    three), where that is narrower than the prior."""
    by_term: dict[tuple[str, int], list[int]] = {}
    for name, cols in column_names.items():
        level = name.split(":", 1)[0]
        for term in np.flatnonzero(cols >= 0):
            if prior_sd[cols[term]] >= WIDE_PRIOR_SD:
                by_term.setdefault((level, int(term)), []).append(int(cols[term]))
    out = []
    for columns in by_term.values():
        cols = np.array(columns)
        taught = cols[np.diag(cov)[cols] < (prior_sd[cols] / 2.0) ** 2]
        if len(taught) < 3:
            continue
        tau = float(np.sqrt(np.mean(x[taught] ** 2)))
        if 0.0 < tau < float(prior_sd[cols].min()):
            out.append((cols, tau))
    return out


#: re-simulates ``samples[i]`` with the coefficient vector ``clocks[i]`` where it is not None
Resimulator = Callable[[Sequence[FitSample], Sequence[np.ndarray | None]], list[FitSample]]


def calibrate(
    samples: Sequence[FitSample],
    catalog: Catalog,
    *,
    rounds: int = 2,
    resimulator: Resimulator | None = None,
) -> tuple[FittedCoefficients, list[FitSample], list[np.ndarray | None]]:
    """Fit; re-simulate the clock-driven rows with the fit; fit again (``rounds`` fits).

    Returns the fit, the rows as last simulated, and the coefficient vector each row was last
    simulated with (None: the first simulation's, which depends on no fit): with these a
    process that reads the fit from disk rebuilds the rows without fitting
    (:meth:`planner.perf.model.PerformanceModel.samples`). ``resimulator`` (default
    :func:`resimulate_all`) may take the re-simulations from a cache."""
    again = resimulator or resimulate_all
    fitted = fit_coefficients(samples)
    current = list(samples)
    clocks: list[np.ndarray | None] = [None] * len(current)
    for _ in range(rounds - 1):
        if not any(s.time_driven for s in current):
            break
        clocks = [fitted.full_for(s.key) if s.time_driven else None for s in current]
        current = again(current, clocks)
        fitted = fit_coefficients(current, initial=fitted)
    return fitted, current, clocks


def resimulate_all(
    samples: Sequence[FitSample], clocks: Sequence[np.ndarray | None]
) -> list[FitSample]:
    """``samples`` with each row whose entry of ``clocks`` is not None simulated again with it."""
    return [s if c is None else resimulate(s, c) for s, c in zip(samples, clocks, strict=True)]


def resimulate(sample: FitSample, c: np.ndarray) -> FitSample:
    trace = simulate(sample.dep, c, timeline=False)
    return FitSample(
        sample.result,
        sample.scenario,
        sample.dep,
        trace,
        targets_for(sample.result, trace, sample.dep.loaded_replicas),
    )
