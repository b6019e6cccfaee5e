"""The memory planner against the engines' own start-up logs of large MoE checkpoints (issue 26,
item 5: memory at the edge). A benchmark to read:

    .venv/bin/python benchmarks/memory_logs_bench.py

For every cited log it prints what the engine reported and what :mod:`planner.memory` (and, for
TensorRT-LLM, :func:`planner.perf.capacity.plan_capacity`) computes for the same model, GPU,
layout and flags: weights a GPU (GiB), KV bytes a token a GPU, and KV tokens the pool holds.
Engines print "GB" for GiB (SGLang divides by 2**30; vLLM and TensorRT-LLM say GiB).

Sources (no log here is from a benchmark suite reserved for evaluation):

- vLLM: the start-up lines "Model loading took", "Available KV cache memory" and "GPU KV cache
  size" of RedHat AI's serving dashboard runs, as parsed into ashishkamra/vllm-memory-estimator
  test_data/validation_db.json @8b0e21d1ec49357383758a164129515209b37e7f (committed
  2026-05-17, removed from the tree later): flags ``--tensor-parallel-size N
  --gpu-memory-utilization 0.92 --max-model-len 8192 --no-enable-prefix-caching``, KV cache
  auto, default max_num_seqs and max_num_batched_tokens.
- SGLang: sgl-project/sglang PR #9162 (2025-08-13, the main branch of that week): nvidia
  DeepSeek-R1-FP4 on 4 x B200 at TP 4, "Load weight begin. avail mem=175.34 GB", "Load weight
  end ... mem usage=94.50 GB";
  PR #11309 (2025-10-07, main): DeepSeek-V3.2-Exp on 8 x B200, ``--tp 8 --dp 8
  --enable-dp-attention``, "KV Cache is allocated. #tokens: 975424, KV size: 43.67 GB".

No TensorRT-LLM log with a repository and date to cite was found (a Kimi-K2.5-NVFP4 8 x B300
report whose repository is unknown was left out).

A second table prints what each engine does with its own defaults for DeepSeek-R1-0528 FP8 at
8k prompts and 1k answers, on 4 x B200 (TP 4) and 8 x H200 (TP 8), as a scenario without
engine flags resolves (:func:`planner.perf.deployment.resolve_deployment`): the share of the
GPU the engine is run at (raised above the default where the default does not start: see the
``memory:`` notes), weights a GPU, KV pool a GPU, KV bytes a token a GPU, KV tokens and how many
9,216-token requests fit at once. The engines' defaults behind it, from their sources:

- vLLM 0.11: gpu_memory_utilization 0.9 of what CUDA reports; KV dtype ``auto`` = the model's
  bf16 (MLA latent 576 values x 61 layers x 2 B = 70,272 B a token, replicated on every TP
  rank); the MTP layer (model.layers.61) is skipped unless MTP speculation is on.
- SGLang 0.5.4 (python/sglang/srt/server_args.py of Oct 2025, after PR #10975): on a GPU above
  160 GiB chunked prefill 16,384 and CUDA graphs to 512, so mem_fraction_static =
  (183,359 - 26,624) / 183,359 = 0.855 at TP 4, a share of the free memory it measures before
  loading (175.34 GiB on a B200 at TP 4, PR #9162's log); DeepSeek-V3 on SM100 runs trtllm_mla
  (page 64), whose KV dtype stays ``auto`` (bf16) unless asked; flashinfer_trtllm MoE.
- TensorRT-LLM 1.1: free_gpu_memory_fraction 0.9 of what is left after the weights; KV dtype
  ``auto`` follows the checkpoint's kv_cache_quant_algo, which deepseek-ai's block-scaled FP8
  does not state (bf16 by the source, tensorrt_llm/_torch/model_config.py); the planner still
  plans FP8 there (see planner.perf.deployment.kv_dtype_bytes), so both rows are printed.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog import Catalog, load_catalog
from planner.engine import EngineConfig
from planner.memory import kv_bytes_per_token_per_layer_per_gpu, plan_memory, stage_weight_bytes
from planner.perf.capacity import plan_capacity
from planner.perf.deployment import resolve_deployment
from planner.perf.scenario import Scenario

GIB = 2**30
VLLM_DASHBOARD = (
    "RedHat AI dashboard via ashishkamra/vllm-memory-estimator "
    "test_data/validation_db.json @8b0e21d"
)


@dataclass(frozen=True)
class EngineLog:
    """One engine start-up as its log states it (GiB; None: the log does not say)."""

    engine: str
    release: str
    model: str  # as the log names it
    catalog_model: str  # the catalog card with the same shapes
    precision: str
    gpu: str
    tp: int
    weights_gib: float | None
    kv_gib: float | None
    kv_tokens: int | None
    source: str
    dp: int = 1
    gpu_memory_utilization: float = 0.92
    kv_cache_dtype: str = "auto"
    max_model_len: int = 8192


LOGS: tuple[EngineLog, ...] = (
    EngineLog("vllm", "0.18.0", "deepseek-ai/DeepSeek-R1-0528", "deepseek-ai/DeepSeek-R1-0528",
              "fp8", "H200", 8, 79.74, 42.79, 653_808, VLLM_DASHBOARD),
    EngineLog("vllm", "0.18.0", "deepseek-ai/DeepSeek-R1-0528", "deepseek-ai/DeepSeek-R1-0528",
              "fp8", "B200", 8, 79.88, 79.81, 1_219_424, VLLM_DASHBOARD),
    EngineLog("vllm", "0.11.2", "deepseek-ai/DeepSeek-R1-0528", "deepseek-ai/DeepSeek-R1-0528",
              "fp8", "MI300X", 8, 81.31, 87.09, 1_324_304, VLLM_DASHBOARD),
    EngineLog("vllm", "0.18.0", "deepseek-ai/DeepSeek-V3.2", "deepseek-ai/DeepSeek-V3.2",
              "fp8", "H200", 8, 80.76, 41.76, 572_480, VLLM_DASHBOARD),
    EngineLog("vllm", "0.18.0", "deepseek-ai/DeepSeek-V3.2", "deepseek-ai/DeepSeek-V3.2",
              "fp8", "B200", 8, 80.77, 78.87, 1_081_216, VLLM_DASHBOARD),
    EngineLog("vllm", "0.11.2", "Qwen/Qwen3-235B-A22B-Instruct-2507",
              "Qwen/Qwen3-235B-A22B-Instruct-2507", "bf16", "H200", 4, 109.61, 12.73, 284_080,
              VLLM_DASHBOARD),
    EngineLog("vllm", "0.11.2", "RedHatAI/Qwen3-235B-A22B-FP8-dynamic", "Qwen/Qwen3-235B-A22B",
              "fp8", "H200", 4, 55.20, 66.13, 1_475_472, VLLM_DASHBOARD),
    EngineLog("vllm", "0.18.0", "moonshotai/Kimi-K2.5", "moonshotai/Kimi-K2.5", "int4", "H200",
              8, 72.02, 51.63, 788_928, VLLM_DASHBOARD),
    EngineLog("vllm", "0.18.0", "MiniMaxAI/MiniMax-M2.5", "MiniMaxAI/MiniMax-M2.5", "fp8",
              "H200", 8, 27.01, 96.57, 3_266_480, VLLM_DASHBOARD),
    EngineLog("vllm", "0.11.2", "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
              "meta-llama/Llama-4-Maverick-17B-128E-Instruct", "bf16", "H200", 8, 93.79, 26.13,
              1_141_712, VLLM_DASHBOARD),
    EngineLog("sglang", "main@Aug25", "nvidia/DeepSeek-R1-FP4", "nvidia/DeepSeek-V3.1-NVFP4", "fp4",
              "B200", 4, 94.50, None, None, "sgl-project/sglang PR #9162, 2025-08-13"),
    EngineLog("sglang", "main@Oct25", "deepseek-ai/DeepSeek-V3.2-Exp", "deepseek-ai/DeepSeek-V3.2",
              "fp8", "B200", 1, None, 43.67, 975_424, "sgl-project/sglang PR #11309, 2025-10-07",
              dp=8, kv_cache_dtype="fp8"),
)  # fmt: skip


@dataclass(frozen=True)
class Comparison:
    log: EngineLog
    weights_gib: float
    kv_bytes_per_token: float
    kv_tokens: int | None

    @staticmethod
    def error(predicted: float | None, logged: float | None) -> str:
        if predicted is None or not logged:
            return "     -"
        return f"{(predicted / logged - 1) * 100:+6.1f}%"


def compare(log: EngineLog, catalog: Catalog) -> Comparison:
    """What the planner computes for ``log``'s model, GPU, layout and flags."""
    card = catalog.model(log.catalog_model)
    gpu = catalog.gpu(log.gpu)
    shards = log.tp * log.dp if card.architecture.is_moe else log.tp
    weights = stage_weight_bytes(card, tp=log.tp, precision=log.precision, moe_shards=shards)
    per_layer = kv_bytes_per_token_per_layer_per_gpu(card, log.tp, log.kv_cache_dtype)
    per_token = per_layer * card.architecture.num_attention_layers
    tokens: int | None = None
    engine = EngineConfig.of(
        engine=log.engine,
        gpu_memory_utilization=log.gpu_memory_utilization,
        max_model_len=log.max_model_len,
        kv_cache_dtype=log.kv_cache_dtype,
        data_parallel_size=log.dp,
    ).resolved(gpu)
    if log.engine == "vllm":
        plan = plan_memory(card, gpu, tp=log.tp, precision=log.precision, engine=engine)
        tokens = plan.kv_capacity_tokens
    elif log.engine == "tensorrt-llm":
        engine = engine.model_copy(update={"gpu_memory_utilization": 0.9})
        tokens = plan_capacity(
            card, gpu, tp=log.tp, pp=1, precision=log.precision, engine=engine
        ).kv_capacity_tokens
    elif log.kv_gib is not None:  # SGLang: the logged pool over the planner's bytes a token
        tokens = int(log.kv_gib * GIB // per_token)
    return Comparison(log, weights / GIB, per_token, tokens)


def main() -> None:
    catalog = load_catalog()
    print(
        f"{'engine':12} {'release':9} {'model':38} {'GPU':6} {'TPxDP':5} | "
        f"{'weights GiB log / planner':>27} | {'KV B/token log / planner':>26} | "
        f"{'KV tokens log / planner':>31}"
    )
    for log in LOGS:
        row = compare(log, catalog)
        logged_per_token = (
            log.kv_gib * GIB / log.kv_tokens if log.kv_gib and log.kv_tokens else None
        )
        w_log = f"{log.weights_gib:7.2f}" if log.weights_gib else "      -"
        pt_log = f"{logged_per_token:7.0f}" if logged_per_token else "      -"
        tok_log = f"{log.kv_tokens:>10,}" if log.kv_tokens else "         -"
        tok_plan = f"{row.kv_tokens:>10,}" if row.kv_tokens is not None else "         -"
        print(
            f"{log.engine:12} {log.release:9} {log.model[:38]:38} {log.gpu:6} "
            f"{log.tp}x{log.dp:<3} | {w_log} / {row.weights_gib:7.2f} "
            f"{row.error(row.weights_gib, log.weights_gib)} | {pt_log} / "
            f"{row.kv_bytes_per_token:7.0f} {row.error(row.kv_bytes_per_token, logged_per_token)}"
            f" | {tok_log} / {tok_plan} {row.error(row.kv_tokens, log.kv_tokens)}"
        )
    print("\nSources:")
    for source in sorted({log.source for log in LOGS}):
        print(f"  - {source}")
    print_engine_defaults(catalog)


#: (GPU, GPUs = TP) of the issue's edge case and of the usual 8-GPU H200 server
DEFAULT_LAYOUTS = (("B200", 4), ("H200", 8))
DEFAULT_ENGINES: tuple[tuple[str, str, str | None], ...] = (
    ("vllm", "0.11.0", None),
    ("sglang", "0.5.4", None),
    ("trtllm", "1.1.0", None),
    ("trtllm", "1.1.0", "bf16"),
)
CONTEXT = 8192 + 1024


def engine_default_rows(catalog: Catalog) -> list[dict[str, object]]:
    """DeepSeek-R1-0528 FP8, 8k/1k at 32 in flight, each engine at its own defaults."""
    rows: list[dict[str, object]] = []
    for gpu, tp in DEFAULT_LAYOUTS:
        for engine, version, kv_cache_dtype in DEFAULT_ENGINES:
            scenario = Scenario(
                engine=engine,
                engine_version=version,
                model="deepseek-ai/DeepSeek-R1-0528",
                precision="fp8",
                gpu=gpu,
                num_gpus=tp,
                tp=tp,
                input_len=8192,
                output_len=1024,
                concurrency=32,
                num_requests=320,
                kv_cache_dtype=kv_cache_dtype,
            )
            dep = resolve_deployment(scenario, catalog)
            per_token = dep.kv_bytes_per_token_full + dep.kv_bytes_per_token_window
            rows.append(
                {
                    "engine": engine + (f" {kv_cache_dtype}" if kv_cache_dtype else ""),
                    "gpu": gpu,
                    "tp": tp,
                    "fraction": dep.engine.gpu_memory_utilization,
                    "weights_gib": dep.weights_bytes_per_gpu / GIB,
                    "kv_gib": dep.kv_capacity_tokens * per_token / GIB,
                    "kv_bytes_per_token": per_token,
                    "kv_tokens": dep.kv_capacity_tokens,
                    "sequences": dep.kv_capacity_tokens // CONTEXT,
                    "notes": [n for n in dep.notes if n.startswith("memory:")],
                }
            )
    return rows


def print_engine_defaults(catalog: Catalog) -> None:
    print(
        "\nDeepSeek-R1-0528 FP8, 8,192 + 1,024 tokens, each engine at its defaults "
        "(fraction: gpu_memory_utilization / mem_fraction_static / free_gpu_memory_fraction)"
    )
    print(
        f"{'engine':11} {'GPUs':8} | {'fraction':>8} | {'weights GiB':>11} | {'KV GiB':>7} | "
        f"{'KV B/token':>10} | {'KV tokens':>10} | {'9k requests':>11}"
    )
    for row in engine_default_rows(catalog):
        print(
            f"{row['engine']:11} {row['tp']}x{row['gpu']:6} | {row['fraction']:8.3f} | "
            f"{row['weights_gib']:11.2f} | {row['kv_gib']:7.2f} | "
            f"{row['kv_bytes_per_token']:10,.0f} | {row['kv_tokens']:10,} | "
            f"{row['sequences']:11}"
        )
        for note in row["notes"]:  # type: ignore[attr-defined]
            print(f"    {note}")


if __name__ == "__main__":
    main()
