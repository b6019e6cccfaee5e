"""What a prediction is asked about (:class:`Scenario`) and what it answers (:class:`Prediction`).

A scenario has the columns of ``data/measured_results.csv`` (engine, model, precision, GPU,
layout, lengths, load) plus the engine knobs that move throughput. Checks that need no catalog
(positive lengths, a load with its parameter) run on construction; checks against the model and
the hardware (TP divides the attention heads, the instance holds the TP group) run when the
scenario is resolved (:func:`planner.perf.deployment.resolve_deployment`).
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from planner.engine import EngineConfig, Entrypoint, KvCacheDtype, SpecMethod, engine_family
from planner.errors import InvalidInputError
from planner.input_checks import MAX_LOAD, MAX_REQUEST_TOKENS
from planner.loads import LoadKind
from planner.workload import LengthDistribution

Confidence = Literal["measured nearby", "interpolated", "extrapolated"]

#: Scenario fields that are engine settings (:class:`planner.engine.EngineConfig` names, but
#: ``engine_version`` for its ``version``); None: the engine's default.
ENGINE_FIELDS: tuple[str, ...] = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "max_model_len",
    "kv_cache_dtype",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "enforce_eager",
    "enable_expert_parallel",
    "data_parallel_size",
    "entrypoint",
    "block_size",
    "async_scheduling",
    "spec_method",
    "num_spec_tokens",
)


#: Coefficient of variation assumed for the per-request lengths of vLLM bench's ShareGPT
#: sample (the sources publish only the means): lognormal, capped by its filter at 1,024
#: prompt and 2,048 total tokens (vllm/benchmarks/datasets.py, ShareGPTDataset). An assumption
#: about the workload, documented in data/README.md, not fitted.
SHAREGPT_LENGTH_CV = 1.0
SHAREGPT_MAX_PROMPT = 1024
SHAREGPT_MAX_TOTAL = 2048
#: the assumed ShareGPT length distribution is simulated as a few lengths (its quantiles at
#: the midpoints of these probability bins, rescaled to the stated mean): requests of equal
#: lengths move through the simulator together, so a 1,000-request run costs a few dozen
#: cohorts. The bins thin out towards the top so the longest requests, which set an offline
#: run's end, keep their length. The ``uniform`` dataset is not binned (:func:`dataset_lengths`).
LENGTH_BIN_EDGES = (0.0, 0.15, 0.3, 0.45, 0.6, 0.75, 0.9, 0.99, 0.999, 1.0)
#: the benchmark datasets a measured row (or a predict row) may name (planner.catalog's
#: MeasuredResult.dataset): "random" has the stated lengths, "sharegpt" and "uniform" vary
DATASETS = ("random", "sharegpt", "uniform")
#: ``random_range_ratio`` r of a random-dataset row: vLLM bench's ``--random-range-ratio``,
#: lengths drawn uniformly from [L (1 - r), L (1 + r)] around the stated L, prompt and answer
#: alike (vllm/benchmarks/datasets.py, RandomDataset: "a symmetric sampling range"; r in
#: [0, 1), default 0). SGLang's bench_serving reads its own flag differently ([L r, L]): state
#: such a run's mean lengths and r' = (1 - r) / (1 + r) instead.
MAX_RANGE_RATIO = 1.0
#: Requests one prediction simulates, at most: 100 x vLLM bench's default of 1,000 and more
#: than any published run; the simulator takes ~4 s for 100,000 (an 8B model at concurrency
#: 256 on two busy cores), so a typo of 1e12 is refused instead of simulated for hours.
MAX_SIMULATED_REQUESTS = 100_000
#: GPUs (or nodes) of one scenario, at most: ~3x the largest public training cluster
#: (100,000 H100s, xAI Colossus as reported in 2024); a serving deployment is far smaller.
MAX_SCENARIO_GPUS = 327_680


def _binned(dist: LengthDistribution, mean: float) -> LengthDistribution:
    """``dist`` as a weighted handful of lengths (LENGTH_BIN_EDGES) with mean ``mean``."""
    edges = LENGTH_BIN_EDGES
    weights = [hi - lo for lo, hi in itertools.pairwise(edges)]
    points = [dist.quantile((lo + hi) / 2) for lo, hi in itertools.pairwise(edges)]
    scale = mean / sum(w * v for w, v in zip(weights, points, strict=True))
    return LengthDistribution.empirical([max(1, round(v * scale)) for v in points], weights)


def dataset_lengths(
    dataset: str | None, input_len: int, output_len: int, range_ratio: float | None = None
) -> dict[str, Any]:
    """Scenario length fields of a benchmark run on ``dataset`` with these mean lengths.

    ``random`` (or None): every request has the stated lengths, or, with a ``range_ratio`` r
    above 0, lengths drawn uniformly from [L (1 - r), L (1 + r)] (vLLM bench's
    ``--random-range-ratio``, :data:`MAX_RANGE_RATIO`); ``uniform``: drawn uniformly
    from 1 to twice the mean (SGLang bench_serving's random dataset at --random-range-ratio 0);
    ``sharegpt``: lognormal around the means (SHAREGPT_LENGTH_CV), capped as vLLM bench's
    ShareGPT filter caps them, as a few lengths (LENGTH_BIN_EDGES).

    The uniform lengths are drawn as the benchmark draws them, every integer in the range, not
    binned: in a closed loop, requests of one binned answer length finish in the same step, so
    their successors arrive together and queue for one prefill batch after another. Binned in
    nine lengths, a run of 301 requests at 64 in flight (sgl-project/sglang's DeepSeek-R1 on 8 x
    B200, 3,981 / 530 tokens on average) arrived in bursts of 9-13 after its first wave and its
    TTFT came out 1.4x the measured mean (held out by source); no real run of uniform draws
    synchronises so. Unbinned, leave-one-source-out TTFT of the two SGLang sources that run this
    dataset went 25 -> 15% (the SGLang docs) and 46 -> 36% (the SGLang cookbook) median, and
    the simulations cost the same. The ShareGPT shape stays binned: it is an assumption
    (SHAREGPT_LENGTH_CV), and drawn finer it fitted GPUStack's all-at-once ShareGPT runs' TPOT
    worse (21 -> 24% median in sample), so the binning is not what limits them.

    The spread decides a closed loop's TTFT more than any engine term: with every answer of
    one length, the requests that started together finish together, and their successors queue
    for one prefill after another, wave after wave. DeepSeek-R1-0528 FP8 on 8 x H200 under
    SGLang, 1,024 / 1,024 tokens at 64 in flight (the shipped fit, session 43): mean TTFT 3.2 s
    with fixed lengths, 0.5 s with lengths drawn within 5% of them (p99 5.7 s either way: the
    first wave). State the ratio the benchmark ran with.
    """
    if range_ratio is not None and not 0.0 <= range_ratio < MAX_RANGE_RATIO:
        raise _bad_range_ratio(range_ratio)
    if range_ratio and dataset not in (None, "random"):
        raise InvalidInputError(
            "random_range_ratio",
            range_ratio,
            f"blank or 0 for the {dataset} dataset (it applies to the random dataset only)",
        )
    if range_ratio:
        return {
            "input_dist": LengthDistribution.from_mean_spread(
                "uniform", input_len, input_len * range_ratio
            ),
            "output_dist": LengthDistribution.from_mean_spread(
                "uniform", output_len, output_len * range_ratio
            ),
        }
    if dataset == "uniform":
        return {
            "input_dist": LengthDistribution.uniform(1, max(1, 2 * input_len - 1)),
            "output_dist": LengthDistribution.uniform(1, max(1, 2 * output_len - 1)),
        }
    if dataset == "sharegpt":
        prompt_cap = max(input_len, SHAREGPT_MAX_PROMPT)
        output_cap = max(output_len, SHAREGPT_MAX_TOTAL - input_len)
        return {
            "input_dist": _binned(
                LengthDistribution.lognormal(
                    input_len, SHAREGPT_LENGTH_CV * input_len, max_tokens=prompt_cap
                ),
                input_len,
            ),
            "output_dist": _binned(
                LengthDistribution.lognormal(
                    output_len, SHAREGPT_LENGTH_CV * output_len, max_tokens=output_cap
                ),
                output_len,
            ),
        }
    return {"input_len": input_len, "output_len": output_len}


class TraceRequest(BaseModel):
    """One request of a replayed trace: when it arrives and how long it is."""

    model_config = ConfigDict(frozen=True)

    arrival_s: float = Field(ge=0)
    input_len: int = Field(gt=0)
    output_len: int = Field(gt=0)


class Scenario(BaseModel):
    """A serving configuration and a load to predict.

    Lengths are fixed (``input_len``/``output_len``) or drawn from ``input_dist``/``output_dist``
    (:class:`planner.workload.LengthDistribution`). ``num_gpus`` defaults to ``tp x pp`` (one
    replica); a multiple of it means data-parallel replicas that share the load evenly.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    engine: str = "vllm"
    engine_version: str | None = None
    model: str
    precision: str = "bf16"
    gpu: str
    num_gpus: int | None = Field(default=None, gt=0, le=MAX_SCENARIO_GPUS)
    tp: int = Field(default=1, gt=0, le=MAX_SCENARIO_GPUS)
    pp: int = Field(default=1, gt=0, le=MAX_SCENARIO_GPUS)
    input_len: int | None = Field(default=None, gt=0, le=MAX_REQUEST_TOKENS)
    output_len: int | None = Field(default=None, gt=0, le=MAX_REQUEST_TOKENS)
    load: LoadKind = "concurrency"
    concurrency: float | None = Field(default=None, gt=0, le=MAX_LOAD)
    request_rate: float | None = Field(default=None, gt=0, le=MAX_LOAD)
    num_requests: int | None = Field(default=None, gt=0, le=MAX_SIMULATED_REQUESTS)
    instance: str | None = None
    nodes: int | None = Field(default=None, gt=0, le=MAX_SCENARIO_GPUS)
    # engine settings (vLLM names; the TensorRT-LLM family reads max_num_seqs as
    # max_batch_size and max_num_batched_tokens as max_num_tokens). None: the engine's default
    # (planner.engine); max_model_len None: the scenario's longest request.
    max_num_seqs: int | None = Field(default=None, gt=0, le=MAX_LOAD)
    max_num_batched_tokens: int | None = Field(default=None, gt=0, le=MAX_REQUEST_TOKENS)
    gpu_memory_utilization: float | None = Field(default=None, gt=0.0, le=1.0)
    max_model_len: int | None = Field(default=None, gt=0, le=MAX_REQUEST_TOKENS)
    kv_cache_dtype: KvCacheDtype | None = None
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    enforce_eager: bool | None = None
    enable_expert_parallel: bool | None = None
    data_parallel_size: int | None = Field(default=None, gt=0, le=MAX_SCENARIO_GPUS)
    entrypoint: Entrypoint | None = None
    block_size: int | None = Field(default=None, gt=0, le=MAX_REQUEST_TOKENS)
    # vLLM's --async-scheduling / --no-async-scheduling (None: the release's default, on from
    # 0.14: planner.engine.vllm_schedules_async)
    async_scheduling: bool | None = None
    # speculative decoding (planner.perf.speculative): method (None: none), draft tokens a step
    # (None: the engine's default for the method) and the workload's mean accepted tokens a
    # step, the bonus token included (None: the method's published default for the model)
    spec_method: SpecMethod | None = None
    num_spec_tokens: int | None = Field(default=None, gt=0, le=64)
    spec_accept_len: float | None = Field(default=None, ge=1.0, le=65.0, allow_inf_nan=False)
    prefix_share: float = Field(default=0.0, ge=0.0, le=1.0)
    # the first warm_prompts requests (in the order sent) repeat prompts an earlier benchmark run
    # sent to the same server: a benchmark's synthetic dataset drawn with the same seed (vLLM
    # bench serve's --seed 0, SGLang bench_serving's --seed 1) sends the same prompts again, and
    # a server with its prefix cache on still holds them when they fit its KV cache
    # (planner.perf.simulator: warm_prompts_held). A measured row's artefact: plans are cold.
    # warm_prompt_tokens: how much of each such prompt the earlier run sent, when it drew
    # shorter prompts from the same seed (vLLM bench's random prompt i is a run of token ids from
    # one offset, so a shorter draw is the longer one's prefix); None: the whole prompt
    warm_prompts: int = Field(default=0, ge=0, le=MAX_SIMULATED_REQUESTS)
    warm_prompt_tokens: int | None = Field(default=None, gt=0, le=MAX_REQUEST_TOKENS)
    # arrivals for load='rate': gamma-distributed gaps with this coefficient of variation
    # (1.0 = Poisson); for load='trace', the requests themselves
    burstiness_cv: float = Field(default=1.0, gt=0.0)
    trace: tuple[TraceRequest, ...] | None = None
    input_dist: LengthDistribution | None = None
    output_dist: LengthDistribution | None = None
    seed: int = 0

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        if self.input_len is None and self.input_dist is None and self.load != "trace":
            raise ValueError("input_len is required (or input_dist)")
        if self.output_len is None and self.output_dist is None and self.load != "trace":
            raise ValueError("output_len is required (or output_dist)")
        if self.load == "concurrency" and self.concurrency is None:
            raise ValueError("concurrency is required for load='concurrency'")
        if self.load == "rate" and self.request_rate is None:
            raise ValueError("request_rate is required for load='rate'")
        if self.load == "trace" and not self.trace:
            raise ValueError("trace is required for load='trace'")
        if self.warm_prompt_tokens is not None and not self.warm_prompts:
            raise ValueError("warm_prompt_tokens needs warm_prompts (the requests it applies to)")
        if self.num_requests is None and self.effective_num_requests() > MAX_SIMULATED_REQUESTS:
            raise InvalidInputError(
                "concurrency",
                self.concurrency,
                f"a load whose default of {self.effective_num_requests():,} requests is at most "
                f"{MAX_SIMULATED_REQUESTS:,}, or give num_requests",
            )
        group = self.tp * self.pp * (self.data_parallel_size or 1)
        if self.num_gpus is not None and self.num_gpus % group:
            raise ValueError(
                f"num_gpus={self.num_gpus} must be a multiple of tp x pp x data_parallel_size "
                f"= {group}"
            )
        return self

    # ----- derived --------------------------------------------------------------------------
    @property
    def engine_family(self) -> str:
        return engine_family(self.engine)

    def engine_config(self) -> EngineConfig:
        """The engine settings the scenario states; the rest are the engine's defaults."""
        stated = {name: getattr(self, name) for name in ENGINE_FIELDS}
        return EngineConfig(
            engine=self.engine,
            version=self.engine_version,
            **{name: value for name, value in stated.items() if value is not None},
        )

    @property
    def gpus_per_replica(self) -> int:
        """TP x PP x attention-DP ranks: the GPUs of one engine."""
        return self.tp * self.pp * (self.data_parallel_size or 1)

    @property
    def gpus(self) -> int:
        return self.num_gpus or self.gpus_per_replica

    @property
    def replicas(self) -> int:
        """Independent engines behind a load balancer."""
        return max(1, self.gpus // self.gpus_per_replica)

    @property
    def mean_input_len(self) -> float:
        if self.input_len is not None:
            return float(self.input_len)
        if self.trace:
            return sum(r.input_len for r in self.trace) / len(self.trace)
        assert self.input_dist is not None
        return float(self.input_dist.mean())

    @property
    def mean_output_len(self) -> float:
        if self.output_len is not None:
            return float(self.output_len)
        if self.trace:
            return sum(r.output_len for r in self.trace) / len(self.trace)
        assert self.output_dist is not None
        return float(self.output_dist.mean())

    def effective_num_requests(self) -> int:
        """Requests the run issues: given, or what the source's benchmark used by default."""
        if self.load == "trace" and self.trace:
            return len(self.trace)
        if self.num_requests is not None:
            return int(self.num_requests)
        if self.load == "concurrency" and self.concurrency is not None:
            return max(math.ceil(self.concurrency) * 4, 100)
        if self.load == "offline_batch" and self.concurrency is not None:
            return math.ceil(self.concurrency)
        if self.load == "max_throughput" and self.engine_family == "trtllm":
            return trtllm_bench_num_requests(self.input_len or 0, self.output_len or 0)
        return 1000

    def describe(self) -> str:
        lengths = f"{self.input_len or '~'}/{self.output_len or '~'}"
        load = {
            "concurrency": f"concurrency {self.concurrency:g}" if self.concurrency else "",
            "rate": f"{self.request_rate:g} req/s" if self.request_rate else "",
        }.get(self.load, self.load)
        layout = f"TP{self.tp}xPP{self.pp}"
        if (self.data_parallel_size or 1) > 1:
            layout += f" DP-attention {self.data_parallel_size}"
        if self.enable_expert_parallel:
            layout += " EP"
        if self.spec_method and self.spec_method != "none":
            layout += f" {self.spec_method}" + (
                f" k={self.num_spec_tokens}" if self.num_spec_tokens else ""
            )
        return (
            f"{self.engine} {self.model} {self.precision} on {self.gpus}x{self.gpu} "
            f"{layout}, {lengths} tokens, {load}"
        )

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Scenario:
        """Build from a CSV row (blank cells are absent); bad values raise InvalidInputError.

        A ``dataset`` column (as in ``data/measured_results.csv``) says how the lengths vary:
        ``sharegpt`` and ``uniform`` rows have the stated lengths as means
        (:func:`dataset_lengths`), so a measured row is predicted as the workload it describes.
        """
        fields = cls.model_fields
        values: dict[str, Any] = {}
        for key, raw in row.items():
            if key not in fields or raw is None:
                continue
            text = str(raw).strip()
            if text == "":
                continue
            values[key] = text
        integers = ("num_gpus", "tp", "pp", "input_len", "output_len", "num_requests", "nodes")
        for key in (*integers, "max_num_seqs", "max_num_batched_tokens", "max_model_len",
                    "data_parallel_size", "num_spec_tokens"):  # fmt: skip
            if key in values:
                values[key] = _integer(key, values[key])
        if "spec_method" in values:
            values["spec_method"] = str(values["spec_method"]).lower()
        dataset = str(row.get("dataset") or "").strip().lower() or None
        if dataset is not None and dataset not in DATASETS:
            raise InvalidInputError("dataset", row.get("dataset"), f"one of {', '.join(DATASETS)}")
        ratio = _range_ratio(row.get("random_range_ratio"))
        mean_in, mean_out = values.get("input_len"), values.get("output_len")
        if (
            (dataset not in (None, "random") or ratio)
            and isinstance(mean_in, int)
            and isinstance(mean_out, int)
            and min(mean_in, mean_out) > 0
        ):
            # the workload a measured row describes: its lengths vary around the stated means
            del values["input_len"], values["output_len"]
            values.update(dataset_lengths(dataset, mean_in, mean_out, ratio))
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise _as_input_error(exc, values) from None


def engine_fields(config: EngineConfig) -> dict[str, Any]:
    """``config`` as :class:`Scenario` keyword arguments (``Scenario(**engine_fields(c), ...)``)."""
    values = {name: getattr(config, name) for name in ENGINE_FIELDS}
    return {"engine": config.engine, "engine_version": config.version, **values}


def _range_ratio(raw: Any) -> float | None:
    """A row's ``random_range_ratio`` cell as a number in [0, MAX_RANGE_RATIO) (blank: None);
    anything else is an error naming the column."""
    text = "" if raw is None else str(raw).strip()
    if text == "":
        return None
    try:
        ratio = float(text)
    except ValueError:
        raise _bad_range_ratio(raw) from None
    if not 0.0 <= ratio < MAX_RANGE_RATIO:
        raise _bad_range_ratio(raw)
    return ratio


def _bad_range_ratio(value: Any) -> InvalidInputError:
    return InvalidInputError(
        "random_range_ratio", value, f"a number from 0 up to (not including) {MAX_RANGE_RATIO:g}"
    )


def _integer(field: str, text: Any) -> Any:
    try:
        number = float(text)
    except (TypeError, ValueError):
        return text  # pydantic names the field
    if not number.is_integer():
        raise InvalidInputError(field, text, "a whole number")
    return int(number)


def _as_input_error(exc: ValidationError, values: dict[str, Any]) -> InvalidInputError:
    first = exc.errors()[0]
    raised = (first.get("ctx") or {}).get("error")
    if isinstance(raised, InvalidInputError):  # a check that names its own field
        return raised
    loc = ".".join(str(p) for p in first["loc"]) or "scenario"
    message = str(first["msg"]).removeprefix("Value error, ")
    return InvalidInputError(loc, values.get(loc), message)


#: trtllm-bench perf-overview: requests per (input, output) length pair, from
#: NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md ("$num_requests" table).
TRTLLM_BENCH_REQUESTS: dict[tuple[int, int], int] = {
    (128, 128): 30000,
    (128, 2048): 3000,
    (128, 4096): 1500,
    (1000, 2000): 1500,
    (2048, 128): 3000,
    (2048, 2048): 1500,
    (5000, 500): 1500,
    (1000, 1000): 3000,
    (500, 2000): 3000,
    (20000, 2000): 1000,
}


def trtllm_bench_num_requests(input_len: int, output_len: int) -> int:
    """Requests per perf-overview table; other lengths get the table's rule of thumb."""
    known = TRTLLM_BENCH_REQUESTS.get((input_len, output_len))
    if known is not None:
        return known
    return 3000 if input_len + output_len <= 2200 else 1500


class Prediction(BaseModel):
    """What a serving run of the scenario would report (vLLM ``bench serve`` definitions).

    Throughputs are for the whole deployment (all replicas); latencies in milliseconds.
    ``*_low``/``*_high`` bound the 80% prediction interval.
    """

    model_config = ConfigDict(frozen=True)

    output_tok_per_s: float
    output_tok_per_s_low: float
    output_tok_per_s_high: float
    total_tok_per_s: float
    total_tok_per_s_low: float
    total_tok_per_s_high: float
    request_per_s: float
    ttft_ms_mean: float
    ttft_ms_mean_low: float
    ttft_ms_mean_high: float
    ttft_ms_p50: float
    ttft_ms_p50_low: float
    ttft_ms_p50_high: float
    ttft_ms_p90: float
    ttft_ms_p99: float
    ttft_ms_p99_low: float
    ttft_ms_p99_high: float
    tpot_ms_mean: float
    tpot_ms_mean_low: float
    tpot_ms_mean_high: float
    tpot_ms_p50: float
    tpot_ms_p50_low: float
    tpot_ms_p50_high: float
    tpot_ms_p90: float
    tpot_ms_p99: float
    tpot_ms_p99_low: float
    tpot_ms_p99_high: float
    itl_ms_mean: float
    itl_ms_p50: float
    itl_ms_p99: float
    e2e_ms_mean: float
    e2e_ms_p50: float
    e2e_ms_p99: float
    duration_s: float
    mean_running_batch: float
    kv_occupancy_mean: float
    kv_occupancy_max: float
    kv_capacity_tokens: int
    preemptions: int
    far_from_data: bool
    confidence: Confidence
    nearest_measured: str
    distance: float
    #: what about the scenario the measured data do not cover, in words ("no measured MoE
    #: result on SGLang with H200"); each one widens the intervals
    uncertain_because: tuple[str, ...] = ()
    #: how the engine release entered the prediction ("fitted on measured vLLM 0.11 results",
    #: "no vLLM release given: its measured releases (0.10, 0.11) pooled"); None when the data
    #: hold no release of the engine. An unmeasured release is an uncertainty reason instead.
    release_note: str | None = None
    #: speculative decoding: the mean accepted tokens a step (bonus token included) the
    #: prediction used; None without speculation
    spec_accept_len: float | None = None
    #: a rate's offered load over the deployment's predicted saturation rate; near 1 its
    #: latency intervals widen (:func:`planner.perf.uncertainty.saturation_spread`); None for
    #: a closed loop or a burst, which offer no rate
    utilisation: float | None = None
    notes: tuple[str, ...] = ()


def entrypoint_of(scenario: Scenario) -> str:
    """The scenario's own entrypoint when it says (a measured offline-batch row says
    ``offline``: vLLM's offline class); else ``offline`` for TensorRT-LLM's max-throughput tables
    (trtllm-bench) and ``serve`` otherwise: an offline batch of N sent to a server is a closed
    loop of N with N requests, and predicts the same."""
    if scenario.entrypoint is not None:
        return scenario.entrypoint
    if scenario.load == "max_throughput" and scenario.engine_family == "trtllm":
        return "offline"
    return "serve"


def has_request_path(scenario: Scenario) -> bool:
    """Whether the scenario's requests pay the fitted fixed path (:mod:`planner.perf.step_time`'s
    ``request_path``) to their first streamed token: the engine's own Python server (every
    family has one: ``vllm serve``, ``sglang.launch_server``, ``trtllm-serve``; tokenisation,
    the hand-off to the engine's process, detokenisation and the SSE chunk), not an offline
    benchmark nor Triton's C++ front end (entrypoint ``triton``: NVIDIA's perf-overview "Online
    Serving Measurements" ran the Triton TensorRT-LLM backend, v0.14, with mean TTFTs of 17-24
    ms for Llama-3.1-8B at 202-467 tokens, nothing beyond the prefill). Before the two front
    ends were told apart, a path fitted on both was lent to each (leave-one-source-out
    TensorRT-LLM TTFT 22% -> 63%), so TensorRT-LLM had none and its ``trtllm-serve`` TTFTs at a
    few requests in flight came out the whole path short."""
    return entrypoint_of(scenario) == "serve"
