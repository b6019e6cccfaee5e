"""Add the published p99 TTFT / TPOT to the measured rows, and the rows with percentiles the
reference table had not converted (issue 26, item 4). Run once, by hand, from the repository
root with local clones of the three source repositories at the commits named below:

    .venv/bin/python scripts/convert_percentiles.py GPUSTACK_REPO TANDEMN_REPO DSTACK_REPO

It rewrites ``data/measured_gpustack.csv``, ``data/measured_speculative.csv`` and
``data/measured_results.csv`` with two more columns (``ttft_p99_ms``, ``tpot_p99_ms``) and writes
``data/measured_vllm_tandemn.csv`` and ``data/measured_vllm_dstack.csv``; the planner never
reads the repositories.

- GPUStack (gpustack/gpustack ``docs/performance-lab/``): every "Serving Benchmark Result" block
  of a page is read; a row is the block whose output tokens/s and mean TTFT both equal the row's
  (to the 0.01 the page prints), and gets its "P99 TTFT (ms)" and "P99 TPOT (ms)".
- Tandemn (``roofline/vllm/perfdb_all.csv``): a row is the successful experiment with its model,
  TP, PP, lengths and output tokens/s; it gets ``ttft_ms_p99`` and ``tpot_ms_p99``. Successful
  experiments with a TTFT that no row has become rows of ``measured_vllm_tandemn.csv``, converted
  as the existing rows are (p50 TTFT and TPOT, concurrency, requests, instance, nodes).
- dstack (dstackai/benchmarks): vLLM's ``benchmark_serving.py`` tables of Llama-3.1-405B,
  ``nvidia/8xh100/charts/qps_output.csv`` (8 x H100 SXM, FP8, ShareGPT at 16, 32 and 1000 req/s;
  only the runs with the default single-step scheduler and chunked prefill, see
  data/README.md) and ``amd/tgi_vs_vllm/vllm/data/result_vllm_{short,long,single_prompt}.csv``
  (8 x MI300X, BF16, sonnet prompts all released at once).
"""

from __future__ import annotations

import csv
import io
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

GPUSTACK_COMMIT = "47277d79f4a5bae12a2d25e9ecbed2a2177a5f2d"
TANDEMN_COMMIT = "67cede8ec3240fbb5c90e194bf4e8d524489fdf7"
DSTACK_COMMIT = "06c957ab51572ca18db9c1f4bb254a9eb86df4d7"
DATA = Path(__file__).resolve().parents[1] / "data"
P99_COLUMNS = ["ttft_p99_ms", "tpot_p99_ms"]
BLOCK_FIELDS = {
    "Output token throughput (tok/s)": "output_tps",
    "Mean TTFT (ms)": "mean_ttft",
    "P99 TTFT (ms)": "p99_ttft",
    "P99 TPOT (ms)": "p99_tpot",
}


def show(repo: Path, commit: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "show", f"{commit}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def write(path: Path, header: list[str], rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def with_p99_columns(header: list[str]) -> list[str]:
    if "ttft_p99_ms" in header:
        return header
    at = header.index("notes") if "notes" in header else len(header)
    return header[:at] + P99_COLUMNS + header[at:]


def gpustack_blocks(repo: Path, page: str) -> list[dict[str, float]]:
    text = show(repo, GPUSTACK_COMMIT, page)
    blocks = []
    for match in re.finditer(r"=+ Serving Benchmark Result =+(.*?)={20,}", text, re.S):
        block: dict[str, float] = {}
        for line in match.group(1).splitlines():
            key, _, value = line.strip().partition(":")
            if key.strip() in BLOCK_FIELDS and value.strip():
                block[BLOCK_FIELDS[key.strip()]] = float(value)
        blocks.append(block)
    return blocks


def add_gpustack_p99(repo: Path) -> None:
    for name in ("measured_gpustack.csv", "measured_speculative.csv"):
        header, rows = read(DATA / name)
        pages: dict[str, list[dict[str, float]]] = {}
        for row in rows:
            page = row["source"].split()[1]
            blocks = pages.setdefault(page, gpustack_blocks(repo, page))
            found = [
                b
                for b in blocks
                if abs(b.get("output_tps", -1) - float(row["output_tok_per_s"])) < 0.006
                and abs(b.get("mean_ttft", -1) - float(row["ttft_ms"])) < 0.006
            ]
            if len({(b["p99_ttft"], b["p99_tpot"]) for b in found}) != 1:
                raise SystemExit(f"{name}: {row['source_ref']}: {len(found)} matching blocks")
            row["ttft_p99_ms"] = f"{found[0]['p99_ttft']:.2f}"
            row["tpot_p99_ms"] = f"{found[0]['p99_tpot']:.2f}"
        write(DATA / name, with_p99_columns(header), rows)


def same_run(source: dict[str, str], row: dict[str, str]) -> bool:
    return (
        source["model"] == row["model"]
        and int(source["tp"]) == int(row["tp"])
        and int(source["pp"]) == int(row["pp"])
        and int(source["max_input_length"]) == int(row["input_len"])
        and int(source["max_output_length"]) == int(row["output_len"])
        and abs(float(source["output_tokens_per_sec"] or -1) - float(row["output_tok_per_s"]))
        < 0.02
    )


def add_tandemn(repo: Path) -> None:
    text = show(repo, TANDEMN_COMMIT, "roofline/vllm/perfdb_all.csv")
    runs = [r for r in csv.DictReader(io.StringIO(text)) if r["status"] == "success"]
    header, rows = read(DATA / "measured_results.csv")
    header = with_p99_columns(header)
    used: set[int] = set()
    tandemn = [r for r in rows if r["source"].startswith("Tandemn-Labs/")]
    for row in tandemn:
        for i, run in enumerate(runs):
            if same_run(run, row):
                used.add(i)
                if row["ttft_ms"] and run["ttft_ms_p99"]:
                    row["ttft_p99_ms"] = run["ttft_ms_p99"]
                    row["tpot_p99_ms"] = run["tpot_ms_p99"]
    write(DATA / "measured_results.csv", header, rows)
    template = tandemn[0]
    added = []
    for i, run in enumerate(runs):
        if i in used or not run["ttft_ms_p50"] or not run["output_tokens_per_sec"]:
            continue
        instance = run["instance_type"].split("x ")[-1]
        added.append(
            {
                **template,
                "source_ref": f"{template['source_ref']} (exp_id {run['exp_id']}, "
                "added 2026-12-02)",
                "model": run["model"],
                "precision": run["precision"] or "bf16",
                "gpu": run["gpu_model"],
                "num_gpus": str(int(float(run["total_gpus"]))),
                "tp": run["tp"],
                "pp": run["pp"],
                "input_len": run["max_input_length"],
                "output_len": run["max_output_length"],
                "load": "concurrency",
                "concurrency": run["benchmark_target_concurrency"],
                "request_rate": "",
                "num_requests": run["benchmark_num_requests"],
                "instance": instance,
                "nodes": str(float(run["num_nodes"] or 1)),
                "output_tok_per_s": run["output_tokens_per_sec"],
                "total_tok_per_s": run["total_tokens_per_sec"],
                "ttft_ms": run["ttft_ms_p50"],
                "ttft_stat": "p50",
                "itl_ms": run["tpot_ms_p50"],
                "itl_stat": "p50_tpot",
                "ttft_p99_ms": run["ttft_ms_p99"],
                "tpot_p99_ms": run["tpot_ms_p99"],
            }
        )
    write(DATA / "measured_vllm_tandemn.csv", header, added)


def dstack_rows(repo: Path) -> list[dict[str, str]]:
    out = []
    path = "nvidia/8xh100/charts/qps_output.csv"
    for line, r in enumerate(csv.DictReader(io.StringIO(show(repo, DSTACK_COMMIT, path))), 2):
        if r["num-scheduler-step"] != "1" or r["enable-chunked-prefill"] != "TRUE":
            continue  # multi-step scheduling or prefill-first batches: see data/README.md
        n = int(r["completed"])
        day = r["filename"].split("-")[-2]
        out.append(
            {
                "source": f"dstackai/benchmarks {path}",
                "source_ref": f"dstackai/benchmarks@{DSTACK_COMMIT}:{path} (line {line}, run "
                f"{r['filename']}; measured {day[:4]}-{day[4:6]}-{day[6:]})",
                "engine": "vllm",
                "engine_version": "0.6.3.post2.dev308+gb489fc3c",
                "precision": "fp8",
                "gpu": "H100-SXM",
                "input_len": str(round(int(r["total_input_tokens"]) / n)),
                "output_len": str(round(int(r["total_output_tokens"]) / n)),
                "dataset": "sharegpt",
                "load": "rate",
                "request_rate": f"{float(r['request_rate']):.1f}",
                "num_requests": str(n),
                "max_num_seqs": r["max-num-seqs"],
                "max_num_batched_tokens": r["max-num-batched-tokens"],
                "output_tok_per_s": f"{float(r['output_throughput']):.2f}",
                "total_tok_per_s": f"{float(r['total_token_throughput']):.2f}",
                "ttft_ms": f"{float(r['mean_ttft_ms']):.2f}",
                "itl_ms": f"{float(r['mean_tpot_ms']):.2f}",
                "ttft_p99_ms": f"{float(r['p99_ttft_ms']):.2f}",
                "tpot_p99_ms": f"{float(r['p99_tpot_ms']):.2f}",
                "notes": "vllm serve meta-llama/Llama-3.1-405B-FP8 --tensor-parallel-size 8 "
                f"--enable-chunked-prefill --max-num-batched-tokens {r['max-num-batched-tokens']} "
                f"--max-num-seqs {r['max-num-seqs']} --max-seq-len-to-capture "
                f"{r['max-seq-len-to-capture']} (--num-scheduler-steps 1); client: vLLM "
                f"benchmark_serving.py --dataset-name sharegpt --request-rate "
                f"{r['request_rate']} ({n} prompts); median TTFT "
                f"{float(r['median_ttft_ms']):.2f} ms, median TPOT "
                f"{float(r['median_tpot_ms']):.2f} ms; the base FP8 checkpoint "
                "(meta-llama/Llama-3.1-405B-FP8) has the Instruct model's shapes",
            }
        )
    prompts = {
        "short": "80-token prompts",
        "long": "10,000-token prompts",
        "single_prompt": "one long prompt",
    }
    for name, label in prompts.items():
        path = f"amd/tgi_vs_vllm/vllm/data/result_vllm_{name}.csv"
        for line, r in enumerate(csv.DictReader(io.StringIO(show(repo, DSTACK_COMMIT, path))), 2):
            n = int(r["Successful requests"])
            out.append(
                {
                    "source": f"dstackai/benchmarks {path}",
                    "source_ref": f"dstackai/benchmarks@{DSTACK_COMMIT}:{path} (line {line}; "
                    "README amd/tgi_vs_vllm/README.md, published 2024-10)",
                    "engine": "vllm",
                    "engine_version": "0.6.3.dev116+g151ef4ef (ROCm 6.1)",
                    "precision": "bf16",
                    "gpu": "MI300X",
                    "input_len": str(round(int(r["Total input tokens"]) / n)),
                    "output_len": str(max(1, round(int(r["Total generated tokens"]) / n))),
                    "dataset": "random",
                    "load": "max_throughput",
                    "num_requests": str(n),
                    "output_tok_per_s": r["Output token throughput (tok/s)"],
                    "total_tok_per_s": r["Total Token throughput (tok/s)"],
                    "ttft_ms": r["Mean TTFT (ms)"],
                    "itl_ms": r["Mean TPOT (ms)"],
                    "ttft_p99_ms": r["P99 TTFT (ms)"],
                    "tpot_p99_ms": r["P99 TPOT (ms)"],
                    "notes": "vllm serve meta-llama/Llama-3.1-405B-Instruct "
                    "--tensor-parallel-size=8 --disable-log-requests "
                    "--disable-frontend-multiprocessing; client: dstack's modified "
                    f"benchmark_serving.py --dataset-name sonnet ({label}, {n} released at "
                    "once; output up to 150 tokens without --ignore-eos, the mean given is the "
                    f"measured one); median TTFT {r['Median TTFT (ms)']} ms, median TPOT "
                    f"{r['Median TPOT (ms)']} ms",
                }
            )
    common = {
        "model": "meta-llama/Llama-3.1-405B-Instruct",
        "num_gpus": "8",
        "tp": "8",
        "pp": "1",
        "entrypoint": "serve",
        "ttft_stat": "mean",
        "itl_stat": "mean_tpot",
    }
    return [{**common, **row} for row in out]


def main() -> None:
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    gpustack, tandemn, dstack = (Path(p) for p in sys.argv[1:])
    add_gpustack_p99(gpustack)
    add_tandemn(tandemn)
    header, _ = read(DATA / "measured_gpustack.csv")
    write(DATA / "measured_vllm_dstack.csv", with_p99_columns(header), dstack_rows(dstack))


if __name__ == "__main__":
    main()
