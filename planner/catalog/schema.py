"""Typed records of the catalog: GPUs, instances, prices, models and measured results.

Each record mirrors one row of a file in ``data/`` (see ``data/README.md``); every one carries
its ``source`` and ``as_of`` date.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from planner.catalog.architecture import ModelArchitecture
from planner.input_checks import MAX_LOAD, MAX_REQUEST_TOKENS
from planner.loads import MeasuredLoadKind
from planner.run_files import MAX_INDEX, MAX_RUN_S, MAX_TEXT_CHARS

Precision = Literal["bf16", "fp16", "fp8", "int8", "int4", "fp4"]
PRECISIONS: tuple[Precision, ...] = ("bf16", "fp16", "fp8", "int8", "int4", "fp4")
#: the KV cache's element type an engine is started with: ``auto`` keeps the model's 16-bit
#: dtype, the fp8 ones halve the cache (vLLM's ``--kv-cache-dtype`` values; SGLang's and
#: TensorRT-LLM's map onto them, planner.sglang_command / planner.trtllm_command)
KvCacheDtype = Literal["auto", "bf16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2"]
KV_CACHE_DTYPES: tuple[str, ...] = ("auto", "bf16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2")
#: "owned": the hourly cost of a server a team buys (``planner.owned``), beside the rented modes
PricingMode = Literal["on_demand", "spot", "reserved_1y", "reserved_3y", "owned"]
PRICING_MODES: tuple[PricingMode, ...] = (
    "on_demand",
    "spot",
    "reserved_1y",
    "reserved_3y",
    "owned",
)
GpuLink = Literal["nvlink", "infinity_fabric", "pcie_p2p", "pcie", "none"]

#: bytes per weight element for each precision (int4/fp4 pack two weights a byte).
BYTES_PER_PARAM: dict[str, float] = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "fp4": 0.5,
}


#: Bounds of the numbers of a catalog row: about 8-100x the largest value in data/ (2026-12:
#: $142.42/h for an 8-GPU instance, 16 GPUs an instance, 288 GB and 8 TB/s a GPU, 5 PFLOPS of
#: FP8), so any real row passes and a typo, an ``inf`` or a ``1e308`` from a price feed is
#: refused by name instead of making every plan cost infinity (or nothing).
MIN_USD_PER_HOUR = 0.001
MAX_USD_PER_HOUR = 10_000.0
MAX_INSTANCE_GPUS = 1_024
MAX_NAME_CHARS = 200


def printable_name(value: str) -> str:
    """``value``, when it holds no control character and is not too long (else ValueError)."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise ValueError("a name without control characters (NUL, tab, line breaks)")
    if len(value) > MAX_NAME_CHARS:
        raise ValueError(f"a name of at most {MAX_NAME_CHARS} characters")
    return value


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("text without NUL characters")
    return value


def printable_text(value: str) -> str:
    """``value``, when it holds no control character but tab and is at most
    :data:`~planner.run_files.MAX_TEXT_CHARS` long (a reference or a note; else ValueError)."""
    if any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in value):
        raise ValueError("text without control characters (NUL, line breaks, escapes)")
    if len(value) > MAX_TEXT_CHARS:
        raise ValueError(f"text of at most {MAX_TEXT_CHARS:,} characters")
    return value


#: bounds of a measured row's numbers (see MeasuredResult)
GpuCount = Annotated[int, Field(gt=0, le=MAX_INSTANCE_GPUS)]
TokenBudget = Annotated[int, Field(gt=0, le=MAX_REQUEST_TOKENS)]
#: a measured throughput: 10^9 tokens/s is ~15,000x the largest row of data/ (68,608 tok/s)
MAX_TOKENS_PER_S = 1e9
TokensPerSecond = Annotated[float, Field(ge=0, le=MAX_TOKENS_PER_S)]
Milliseconds = Annotated[float, Field(ge=0, le=MAX_RUN_S * 1e3)]

#: a provider, instance, region or GPU name: what a table, a command and a file name show
Name = Annotated[str, Field(min_length=1), AfterValidator(printable_name)]
#: a label of a measured row (engine, version, model, statistic): a name, possibly empty
Label = Annotated[str, AfterValidator(printable_name)]
#: a reference or a note of a measured row
Reference = Annotated[str, AfterValidator(printable_text)]
Text = Annotated[str, AfterValidator(_no_nul)]
Amount = Annotated[float, Field(gt=0, le=1e6)]  # a spec figure: GB, GB/s, TFLOPS, W


class _Record(BaseModel):
    # allow_inf_nan=False: no float of a row is infinite or NaN
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    source: Text = Field(min_length=1)
    as_of: date
    notes: Text = ""

    @field_validator("notes", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return "" if value is None else value

    @field_validator("as_of")
    @classmethod
    def _not_in_the_future(cls, value: date) -> date:
        # a figure dated after today would never be stale and would outrank every refresh
        # (a day of slack for time zones)
        if value > date.today() + timedelta(days=1):
            raise ValueError(f"a date not after today ({date.today().isoformat()})")
        return value


class GPU(_Record):
    gpu_id: Name
    name: Name
    vendor: Literal["nvidia", "amd"]
    memory_gb: Amount
    memory_reported_mib: Annotated[float, Field(gt=0, le=1e9)] | None = None
    memory_type: Name | None = None
    memory_bw_gbps: Amount
    fp16_dense_tflops: Amount
    bf16_dense_tflops: Amount | None = None
    fp8_dense_tflops: Amount | None = None
    int8_dense_tops: Amount | None = None
    fp4_dense_tflops: Amount | None = None
    form_factor: Literal["sxm", "pcie", "superchip", "oam"]
    interconnect: Literal["nvlink", "pcie", "infinity_fabric"]
    interconnect_bw_gbps: Amount | None = None
    pcie_gen: Annotated[int, Field(gt=0, le=64)] | None = None
    tdp_w: Amount | None = None

    @property
    def memory_bytes(self) -> float:
        """Memory the driver hands out (what vLLM's budget is a fraction of), in bytes."""
        if self.memory_reported_mib is not None:
            return self.memory_reported_mib * 2**20
        return self.memory_gb * 1e9

    def dense_tflops(self, precision: str) -> float | None:
        """Dense tensor-core peak for matmuls whose inputs are in ``precision`` (None: no unit)."""
        if precision == "bf16":
            return self.bf16_dense_tflops or self.fp16_dense_tflops
        if precision == "fp16":
            return self.fp16_dense_tflops
        if precision == "fp8":
            return self.fp8_dense_tflops
        if precision == "int8":
            return self.int8_dense_tops
        if precision == "fp4":
            return self.fp4_dense_tflops
        return None

    def compute_tflops(self, precision: str) -> float:
        """Peak a model stored in ``precision`` really computes at.

        Weight-only formats (int4 AWQ/GPTQ, fp8 or fp4 on chips without such units) dequantise
        to 16-bit before the matmul, so they compute at the 16-bit peak: FP4/MXFP4 tensor cores
        exist only on Blackwell; on Hopper and Ampere 4-bit weights (gpt-oss's MXFP4 experts,
        vLLM's Marlin / Triton kernels) move 4-bit bytes and multiply in 16-bit; A100 has no
        FP8 units, so FP8 checkpoints run weight-only there (domain.md, MoE section).
        """
        own = self.dense_tflops(precision)
        if own is not None and precision != "int4":
            return own
        return self.bf16_dense_tflops or self.fp16_dense_tflops

    def flops_per_byte(self, precision: str = "bf16") -> float:
        """Ridge point of the roofline: dense FLOPs per byte of memory bandwidth."""
        return self.compute_tflops(precision) * 1e12 / (self.memory_bw_gbps * 1e9)


class Instance(_Record):
    provider: Name
    instance: Name
    gpu_id: Name
    gpus: int = Field(gt=0, le=MAX_INSTANCE_GPUS)
    vcpus: Annotated[int, Field(gt=0, le=1_000_000)] | None = None
    ram_gib: Amount | None = None
    gpu_link: GpuLink
    gpu_link_bw_gbps: Amount | None = None
    network_gbps: Amount | None = None

    @property
    def key(self) -> str:
        return self.instance


class Price(_Record):
    provider: Name
    instance: Name
    region: Name
    pricing: PricingMode
    usd_per_hour: float = Field(ge=MIN_USD_PER_HOUR, le=MAX_USD_PER_HOUR)

    def age_days(self, today: date) -> int:
        """Days since the price's ``as_of`` date (0 when dated today or later)."""
        return max(0, (today - self.as_of).days)

    def is_stale(self, today: date, max_age_days: int) -> bool:
        """Older than ``max_age_days`` (the Data page's stale badge)."""
        return self.age_days(today) > max_age_days


class OwnedServer(_Record):
    """One server platform a team can buy and run in a colocation rack (``owned_costs.csv``):
    what it costs, how long it is written off over, and what it draws. ``planner.owned`` turns
    it into an hourly cost; a blank ``server_usd`` leaves the platform unpriced (listed, never
    planned). A blank ``power_idle_kw`` means no published idle draw: the server is costed at
    ``power_max_kw`` whatever its load."""

    platform: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9-]*$")
    gpu_id: str
    gpus: PositiveInt
    gpu_link: GpuLink
    gpu_link_bw_gbps: PositiveFloat | None = None
    network_gbps: PositiveFloat | None = None
    server_usd: PositiveFloat | None = None
    depreciation_years: float = Field(gt=0, le=15, allow_inf_nan=False)
    residual_value_pct: float = Field(default=0.0, ge=0, lt=100, allow_inf_nan=False)
    cost_of_capital_pct: float = Field(default=0.0, ge=0, le=50, allow_inf_nan=False)
    power_idle_kw: PositiveFloat | None = None
    power_max_kw: float = Field(gt=0, le=200, allow_inf_nan=False)
    pue: float = Field(ge=1, le=3, allow_inf_nan=False)
    usd_per_kwh: float = Field(ge=0, le=2, allow_inf_nan=False)
    colocation_usd_per_kw_month: float = Field(default=0.0, ge=0, le=5_000, allow_inf_nan=False)
    network_storage_pct: float = Field(default=0.0, ge=0, le=200, allow_inf_nan=False)
    ops_usd_per_server_month: float = Field(default=0.0, ge=0, le=1e6, allow_inf_nan=False)
    #: set by the loader, not a column: the embedded catalog's row or the user's own
    origin: Literal["embedded", "user"] = "embedded"

    @model_validator(mode="after")
    def _idle_below_max(self) -> OwnedServer:
        if self.power_idle_kw is not None and self.power_idle_kw > self.power_max_kw:
            raise ValueError(
                f"power_idle_kw ({self.power_idle_kw}) must be <= power_max_kw "
                f"({self.power_max_kw})"
            )
        return self

    @property
    def instance(self) -> str:
        """The catalog instance name the search sees for one server of this platform."""
        return f"owned-{self.platform}"


class PriceHistoryEntry(Price):
    """A price a catalog refresh replaced (``price_history.csv`` of the user's catalog)."""

    superseded_on: date
    refresh_id: str = Field(min_length=1)


class ModelCard(BaseModel):
    """A model: its published config.json and where it came from."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    hf_id: Name
    name: Name
    source: Text
    as_of: date
    config: dict[str, Any]
    architecture: ModelArchitecture
    published_total_params_b: float | None = None
    published_active_params_b: float | None = None
    params_source: str | None = None
    origin: Literal["embedded", "user"] = "embedded"


#: TTFT statistics a measured row may state (``ttft_stat``), each with what it is; how the model
#: turns its prediction into each: :mod:`planner.perf.latency_stats`
TTFT_STATS: dict[str, str] = {
    "mean": "mean over the requests",
    "p50": "median over the requests",
    "median": "median over the requests",
    "p50_vllm_histogram": "histogram_quantile(0.5) over vLLM's TTFT histogram buckets",
}
#: time-per-output-token statistics a measured row may state (``itl_stat``)
ITL_STATS: dict[str, str] = {
    "mean_itl": "pooled mean of the token gaps",
    "mean_tpot": "mean over the requests of (E2E - TTFT) / (output tokens - 1)",
    "p50_tpot": "median over the requests of (E2E - TTFT) / (output tokens - 1)",
    "median_tpot": "median over the requests of (E2E - TTFT) / (output tokens - 1)",
    "p50_itl_vllm_histogram": (
        "histogram_quantile(0.5) over vLLM's time_per_output_token histogram (one observation "
        "a token gap)"
    ),
}
HISTOGRAM_TTFT = "p50_vllm_histogram"
HISTOGRAM_ITL = "p50_itl_vllm_histogram"


#: the engine settings a measured row can state (blank: the engine's defaults); a run of a
#: plan states its plan's (:func:`planner.runs.measured_result_of`) and the fit simulates the
#: row with them (:func:`planner.perf.calibration.scenario_from_measured`)
MEASURED_ENGINE_SETTINGS: tuple[str, ...] = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "gpu_memory_utilization",
    "kv_cache_dtype",
    "enable_expert_parallel",
    "data_parallel_size",
    "entrypoint",
    "enforce_eager",
)


class MeasuredResult(BaseModel):
    """One measured serving result (public table row or a user's benchmark run).

    Every number is finite and within what the store and the model hold, the same bounds as
    a run's request record (:mod:`planner.run_files`) and a scenario
    (:mod:`planner.input_checks`): lengths and token budgets at most ``MAX_REQUEST_TOKENS``,
    loads at most ``MAX_LOAD``, a request count at most the store's ``MAX_INDEX``, times at
    most a run's ``MAX_RUN_S``, GPUs at most ``MAX_INSTANCE_GPUS``; text holds no control
    character. A user's row outside them is refused by the loader, naming file, line, field
    and value, and the rest of the file is kept."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    source: Label
    source_ref: Reference | None = None
    engine: Label
    engine_version: Label | None = None
    model: Label
    precision: Label
    gpu: Label
    num_gpus: GpuCount
    tp: GpuCount
    pp: GpuCount
    input_len: TokenBudget
    output_len: TokenBudget
    load: MeasuredLoadKind
    concurrency: float | None = Field(default=None, gt=0, le=MAX_LOAD)
    request_rate: float | None = Field(default=None, gt=0, le=MAX_LOAD)
    num_requests: float | None = Field(default=None, gt=0, le=MAX_INDEX)
    instance: Label | None = None
    nodes: GpuCount | None = None
    output_tok_per_s: TokensPerSecond | None = None
    total_tok_per_s: TokensPerSecond | None = None
    ttft_ms: Milliseconds | None = None
    ttft_stat: Label | None = None
    itl_ms: Milliseconds | None = None
    itl_stat: Label | None = None
    #: the 99th percentiles over the run's requests, where the source reports them (``vllm bench
    #: serve`` / ``benchmark_serving.py`` "P99 TTFT (ms)" and "P99 TPOT (ms)", SGLang
    #: ``bench_serving``'s ``p99_ttft_ms``): validation scores the predicted p99 against them
    ttft_p99_ms: Milliseconds | None = None
    tpot_p99_ms: Milliseconds | None = None
    origin: Literal["public", "user"] = "public"
    run_id: Label | None = None
    simulated: bool = False
    # layout beyond TP x PP (planner.engine / planner.serve_flags): attention data-parallel
    # ranks inside one engine (each with its own requests; they run the MoE layers together)
    # and whole experts sharded over the TP x DP GPUs of a stage instead of sliced; blank: off
    data_parallel_size: GpuCount | None = None
    enable_expert_parallel: bool | None = None
    # engine knobs the run set (blank: the engine's defaults); SGLang's --chunked-prefill-size
    # is max_num_batched_tokens, --max-running-requests max_num_seqs, --mem-fraction-static
    # gpu_memory_utilization
    max_num_seqs: Annotated[int, Field(gt=0, le=MAX_LOAD)] | None = None
    max_num_batched_tokens: TokenBudget | None = None
    max_model_len: TokenBudget | None = None
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    #: the KV cache's dtype when the run set one (``--kv-cache-dtype fp8``, or a checkpoint that
    #: carries FP8 KV scales and is served with them); blank: the model's own 16-bit cache
    kv_cache_dtype: KvCacheDtype | None = None
    #: "random": every request has the stated lengths; "sharegpt": lengths vary per request
    #: (vLLM bench's ShareGPT sample) and the stated ones are the means; "uniform": lengths
    #: drawn uniformly from 1 to twice the stated mean (SGLang bench_serving's random dataset
    #: at its default --random-range-ratio 0)
    dataset: Literal["random", "sharegpt", "uniform"] | None = None
    #: a random-dataset run's length spread, vLLM bench's ``--random-range-ratio`` r: lengths
    #: drawn uniformly from [L (1 - r), L (1 + r)] around the stated ones (blank or 0: fixed;
    #: :func:`planner.perf.scenario.dataset_lengths`)
    random_range_ratio: float | None = Field(default=None, ge=0, lt=1)
    #: True: the engine ran without CUDA graphs (vLLM ``--enforce-eager``, SGLang
    #: ``--disable-cuda-graph``, or a release whose default captured none, such as TensorRT-LLM's
    #: PyTorch backend before 1.0); blank: the engine's own default
    enforce_eager: bool | None = None
    #: "serve": the engine's own HTTP server and a streaming client (vllm bench serve, AIPerf,
    #: sglang bench_serving against vllm serve, sglang.launch_server, trtllm-serve); "offline":
    #: the engine driven directly (trtllm-bench, vLLM's LLM class); "triton": Triton Inference
    #: Server's C++ front end with the TensorRT-LLM backend (NVIDIA's v0.14 online tables).
    #: Blank: offline for load offline_batch and TensorRT-LLM max-throughput tables, else serve
    entrypoint: Literal["serve", "offline", "triton"] | None = None
    #: speculative decoding the run used (blank: none): the method, its draft tokens a step, the
    #: mean accepted tokens a step the server reported (blank: not reported), and the
    #: ``source_ref`` of the same configuration measured without it (the speed-up's baseline)
    spec_method: Literal["none", "mtp", "eagle3", "ngram"] | None = None
    num_spec_tokens: Annotated[int, Field(gt=0, le=MAX_REQUEST_TOKENS)] | None = None
    spec_accept_len: float | None = Field(default=None, ge=1, le=MAX_REQUEST_TOKENS)
    spec_baseline_ref: Reference | None = None
    #: how many of the run's first requests repeated prompts an earlier run on the same server
    #: had sent (a synthetic dataset drawn again with the same seed); blank: none, a cold cache
    #: (:attr:`planner.perf.scenario.Scenario.warm_prompts`)
    warm_prompts: Annotated[int, Field(ge=0, le=MAX_INDEX)] | None = None
    #: how many tokens of each of them the earlier run had sent, when it drew shorter prompts
    #: from the same seed; blank: the whole prompt
    warm_prompt_tokens: TokenBudget | None = None
    #: a server setting of the run that changes which kernels it runs in a way the planner's
    #: deployment cannot state (SGLang's ``--quantization modelopt``, which keeps its MoE runner
    #: at auto: :func:`planner.perf.calibration.measurement_problem`), with what it changes;
    #: blank: none. Such a row is scored in validation, never fitted
    unmodelled_setting: Reference | None = None
    notes: Reference | None = None

    @model_validator(mode="after")
    def _warm_tokens_of_warm_prompts(self) -> MeasuredResult:
        if self.warm_prompt_tokens is not None and not self.warm_prompts:
            raise ValueError("warm_prompt_tokens needs warm_prompts (the requests it applies to)")
        return self

    @model_validator(mode="after")
    def _range_ratio_of_a_random_run(self) -> MeasuredResult:
        if self.random_range_ratio and self.dataset not in (None, "random"):
            raise ValueError(
                f"random_range_ratio applies to the random dataset only, not {self.dataset}"
            )
        return self

    @field_validator("ttft_stat")
    @classmethod
    def _known_ttft_stat(cls, value: str | None) -> str | None:
        if value is not None and value not in TTFT_STATS:
            raise ValueError(f"a TTFT statistic is one of {', '.join(TTFT_STATS)}")
        return value

    @field_validator("itl_stat")
    @classmethod
    def _known_itl_stat(cls, value: str | None) -> str | None:
        if value is not None and value not in ITL_STATS:
            raise ValueError(f"a time-per-output-token statistic is one of {', '.join(ITL_STATS)}")
        return value

    @property
    def dp(self) -> int:
        """Independent replicas: GPUs / (TP x PP x attention-DP ranks)."""
        return max(1, self.num_gpus // (self.tp * self.pp * (self.data_parallel_size or 1)))
