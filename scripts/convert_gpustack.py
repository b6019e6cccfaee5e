"""Convert GPUStack's published ``vllm bench serve`` results into ``data/measured_gpustack.csv``.

    .venv/bin/python scripts/convert_gpustack.py SOURCE.csv data/measured_gpustack.csv

SOURCE is the reference table of GPUStack's performance-lab pages (gpustack/gpustack,
``docs/performance-lab/<model>/<gpu>.md``, commit named in each row): one row per run with the
serving command in ``notes``. This script is how the shipped file was made (run once, by hand);
the planner never reads SOURCE. Per row it

- parses the serving command (:func:`planner.serve_flags.parse_serve_command`) into the
  planner's layout convention (attention TP, attention data-parallel ranks, expert parallelism
  (in every row that sets it, the EP size is the TP x DP GPUs of a stage), replicas) and the
  scheduler knobs the command sets (max-num-seqs, max-num-batched-tokens / chunked prefill,
  max-model-len, memory fraction);
- maps GPU names to ``gpus.csv`` ids and precisions to the catalog's (``int4-awq`` -> int4,
  gpt-oss's native ``mxfp4`` -> fp4: its experts are MXFP4, the rest BF16 per its config);
- rounds the mean lengths (ShareGPT rows vary per request: ``dataset=sharegpt``; random rows
  were run without ``--ignore-eos``, so their mean output is what was measured);
- keeps mean TTFT, and mean TPOT as ``itl_stat=mean_tpot`` (vLLM bench's mean TPOT, first
  token excluded).
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.serve_flags import parse_serve_command

GPU_IDS = {"H200-SXM": "H200", "H100-SXM": "H100-SXM", "A100-SXM4-80GB": "A100-80GB-SXM"}
ENGINES = {"vLLM": "vllm", "SGLang": "sglang", "TensorRT-LLM": "tensorrt-llm"}
PRECISIONS = {"bf16": "bf16", "fp8": "fp8", "int4-awq": "int4", "mxfp4": "fp4"}
COLUMNS = [
    "source",
    "source_ref",
    "engine",
    "engine_version",
    "model",
    "precision",
    "gpu",
    "num_gpus",
    "tp",
    "pp",
    "data_parallel_size",
    "enable_expert_parallel",
    "input_len",
    "output_len",
    "dataset",
    "entrypoint",
    "load",
    "concurrency",
    "request_rate",
    "num_requests",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "gpu_memory_utilization",
    "output_tok_per_s",
    "total_tok_per_s",
    "ttft_ms",
    "ttft_stat",
    "itl_ms",
    "itl_stat",
    "notes",
]


def convert_row(row: dict[str, str]) -> dict[str, str]:
    notes = row["notes"]
    match = re.search(r"serve cmd: (.*?); hardware", notes)
    if match is None:
        raise ValueError(f"{row['id']}: no serve command in notes")
    command = match.group(1)
    flags = parse_serve_command(command)
    if flags.ep_size not in (1, flags.tp * flags.attention_dp):
        raise ValueError(f"{row['id']}: EP {flags.ep_size} is not the stage's TP x DP GPUs")
    repo, _, path = row["source"].partition(":")
    owner_repo = repo.partition("@")[0]
    sharegpt = "sharegpt" in notes.lower()
    num_gpus = int(float(row["num_gpus"]))
    if flags.gpus != num_gpus:
        raise ValueError(f"{row['id']}: command uses {flags.gpus} GPUs, row says {num_gpus}")
    load = "max_throughput" if row["load"] == "offline" else row["load"]
    return {
        "source": f"{owner_repo} {path}",
        "source_ref": f"{repo}:{path} (row {row['id']} of the reference table)",
        "engine": ENGINES[row["engine"]],
        "engine_version": row["engine_version"],
        "model": row["model"],
        "precision": PRECISIONS[row["precision"]],
        "gpu": GPU_IDS[row["gpu"]],
        "num_gpus": str(num_gpus),
        "tp": str(flags.tp),
        "pp": str(flags.pp),
        "data_parallel_size": str(flags.attention_dp) if flags.attention_dp > 1 else "",
        "enable_expert_parallel": "true" if flags.ep_size > 1 else "",
        "input_len": str(max(1, round(float(row["input_len"])))),
        "output_len": str(max(1, round(float(row["output_len"])))),
        "dataset": "sharegpt" if sharegpt else "random",
        "entrypoint": "serve",  # vllm bench serve against the engine's OpenAI server
        "load": load,
        "concurrency": row["concurrency"] if load == "concurrency" else "",
        "request_rate": "",
        "num_requests": str(int(float(row["num_requests"]))),
        "max_num_seqs": str(flags.max_num_seqs or ""),
        "max_num_batched_tokens": str(flags.max_num_batched_tokens or ""),
        "max_model_len": str(flags.max_model_len or ""),
        "gpu_memory_utilization": (
            f"{flags.gpu_memory_utilization:g}" if flags.gpu_memory_utilization else ""
        ),
        "output_tok_per_s": row["output_tok_per_s"],
        "total_tok_per_s": row["total_tok_per_s"],
        "ttft_ms": row["ttft_ms"],
        "ttft_stat": row["ttft_stat"] or "",
        "itl_ms": row["tpot_ms"],
        "itl_stat": "mean_tpot" if row["tpot_ms"] else "",
        "notes": f"serve: {command}",
    }


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    source, target = Path(argv[1]), Path(argv[2])
    with source.open(newline="", encoding="utf-8") as handle:
        rows = [convert_row(r) for r in csv.DictReader(handle)]
    with target.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} rows -> {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
