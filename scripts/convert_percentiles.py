"""Add the published p99 TTFT / TPOT to the measured rows, and the rows with percentiles the
reference table had not converted (issue 26, item 4). Run once, by hand, from the repository
root with local clones of the three source repositories at the commits named below:

    .venv/bin/python scripts/convert_percentiles.py GPUSTACK_REPO TANDEMN_REPO DSTACK_REPO

It rewrites ``data/measured_gpustack.csv``, ``data/measured_speculative.csv`` and
``data/measured_results.csv`` with two more columns (``ttft_p99_ms``, ``tpot_p99_ms``) and writes
``data/measured_vllm_tandemn.csv``, ``data/measured_vllm_dstack.csv`` and
``data/measured_tuning_gpustack.csv``; the planner never reads the repositories.

- GPUStack (gpustack/gpustack ``docs/performance-lab/``): every "Serving Benchmark Result" block
  of a page is read; a row is the block whose output tokens/s and mean TTFT both equal the row's
  (to the 0.01 the page prints), and gets its "P99 TTFT (ms)" and "P99 TPOT (ms)".
- Tandemn (``roofline/vllm/perfdb_all.csv``): a row is the successful experiment with its model,
  TP, PP, lengths and output tokens/s; it gets ``ttft_ms_p99`` and ``tpot_ms_p99``. Successful
  experiments with a TTFT that no row has become rows of ``measured_vllm_tandemn.csv``, converted
  as the existing rows are (p50 TTFT and TPOT, concurrency, requests, instance, nodes). Every
  Tandemn latency is Prometheus' histogram_quantile over vLLM 0.10's server histograms
  (roofline/vllm/prometheus_parser.py extract_latency_percentiles): ``ttft_stat``
  ``p50_vllm_histogram``, ``itl_stat`` ``p50_itl_vllm_histogram`` (planner.perf.latency_stats).
- GPUStack again: the result blocks of :data:`GPUSTACK_EXTRA` become the rows of
  ``data/measured_tuning_gpustack.csv``.
- dstack (dstackai/benchmarks): vLLM's ``benchmark_serving.py`` table of Llama-3.1-405B FP8 on
  8 x H100 SXM, ``nvidia/8xh100/charts/qps_output.csv`` (ShareGPT at 16, 32 and 1000 req/s; only
  the runs with the default single-step scheduler and chunked prefill, see data/README.md).
"""

from __future__ import annotations

import csv
import io
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.perf.latency_stats import HISTOGRAM_ITL, HISTOGRAM_TTFT
from planner.serve_flags import parse_serve_command

GPUSTACK_COMMIT = "47277d79f4a5bae12a2d25e9ecbed2a2177a5f2d"
TANDEMN_COMMIT = "67cede8ec3240fbb5c90e194bf4e8d524489fdf7"
DSTACK_COMMIT = "06c957ab51572ca18db9c1f4bb254a9eb86df4d7"
DATA = Path(__file__).resolve().parents[1] / "data"
P99_COLUMNS = ["ttft_p99_ms", "tpot_p99_ms"]
BLOCK_FIELDS = {
    "Successful requests": "completed",
    "Maximum request concurrency": "max_concurrency",
    "Total input tokens": "in_tokens",
    "Total generated tokens": "out_tokens",
    "Output token throughput (tok/s)": "output_tps",
    "Total Token throughput (tok/s)": "total_tps",
    "Mean TTFT (ms)": "mean_ttft",
    "P99 TTFT (ms)": "p99_ttft",
    "Mean TPOT (ms)": "mean_tpot",
    "P99 TPOT (ms)": "p99_tpot",
}
#: GPUStack result blocks the reference table left out that describe a configuration the
#: planner can state (page, block index in the page): the tuning sweeps of vLLM's
#: --max-num-batched-tokens / TensorRT-LLM's --max_num_tokens (the value in the block's "# ..."
#: line), vLLM with --async-scheduling, a context-length cap, tool-call parsers (flags that change
#: no layout or scheduler knob). Left out: attention backends, DeepGEMM off, CUDA-graph sizes,
#: torch.compile, tree-drafting EAGLE-3, TensorRT-LLM chunked prefill, two blocks whose serving
#: script names another model than the page, and the GLM-4.5-Air H100 page's eight "other
#: benchmark cases" blocks (blocks 8-15): they repeat the A100 page's to the last digit (the
#: reference table's A100 rows), while the H100 page's own summary table gives 3x their total
#: throughput (Long Prompt 21,705.53 against 6,975.10 tok/s), so they are A100 runs copied there.
GPUSTACK_EXTRA = {
    "deepseek-v3.2/h200.md": (5, 6, 11, 12),
    "glm-4.x/a100.md": (2, 3, 4),
    "gpt-oss-120b/a100.md": (2, 4, 5),
    "gpt-oss-120b/h100.md": (3, 7),
    "gpt-oss-20b/a100.md": (2, 3, 4),
    "gpt-oss-20b/h100.md": (3,),
    "qwen3-14b/a100.md": (5, 6),
    "qwen3-235b-a22b/a100.md": (5, 6),
    "qwen3-235b-a22b/h100.md": (5,),
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


def gpustack_blocks(repo: Path, page: str) -> list[dict[str, Any]]:
    """Every result block of a page, in order, with the serving script before it (comment
    lines dropped, continuation lines joined) and the block's own "# ..." label line."""
    text = show(repo, GPUSTACK_COMMIT, page)
    pattern = re.compile(
        r'"[^"\n]*[Ss]erving script"\s*\n\s*```\w*\n(.*?)```'
        r"|=+ Serving Benchmark Result =+(.*?)={20,}",
        re.S,
    )
    blocks: list[dict[str, Any]] = []
    script = ""
    for match in pattern.finditer(text):
        if match.group(1) is not None:
            lines = (x.strip().rstrip("\\") for x in match.group(1).splitlines())
            script = " ".join(" ".join(x for x in lines if x and not x.startswith("#")).split())
            continue
        block: dict[str, Any] = {"script": script}
        for line in match.group(2).splitlines():
            key, _, value = line.strip().partition(":")
            if key.strip() in BLOCK_FIELDS and value.strip():
                block[BLOCK_FIELDS[key.strip()]] = float(value)
        before = text[: match.start()].rstrip().splitlines()
        last = before[-1].strip() if before else ""
        block["label"] = last if last.startswith("#") else ""
        blocks.append(block)
    return blocks


def add_gpustack_p99(repo: Path) -> None:
    for name in ("measured_gpustack.csv", "measured_speculative.csv"):
        header, rows = read(DATA / name)
        pages: dict[str, list[dict[str, float]]] = {}
        for row in rows:
            if not row["source"].startswith("gpustack/gpustack "):
                row.setdefault("ttft_p99_ms", "")  # another publisher's speculative rows
                row.setdefault("tpot_p99_ms", "")
                continue
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


#: serve_flags' engine names -> the measured files' (TensorRT-LLM rows say tensorrt-llm)
ENGINES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt-llm"}
ENGINES["tensorrt-llm"] = "tensorrt-llm"


def labelled_command(script: str, label: str) -> str:
    """The serving script with the block's "# --flag value" line applied (a sweep writes one
    script and labels each block with the value it ran)."""
    match = re.fullmatch(r"#\s*(--[\w-]+)[= ](\d+)", label)
    if match is None:
        return script
    flag, value = match.groups()
    replaced, n = re.subn(rf"{flag}[= ]\d+", f"{flag} {value}", script)
    return replaced if n else f"{script} {flag} {value}"


def gpustack_extra(repo: Path) -> list[dict[str, str]]:
    """Rows of :data:`GPUSTACK_EXTRA`, each converted as ``convert_gpustack.py`` converts a row
    (layout and knobs from the serving command), with the engine release and GPU of the same
    page's rows of that engine and the model id and precision of the page's rows of the served
    checkpoint."""
    _, rows = read(DATA / "measured_gpustack.csv")
    out = []
    for name, indices in GPUSTACK_EXTRA.items():
        page = f"docs/performance-lab/{name}"
        blocks = gpustack_blocks(repo, page)
        for index in indices:
            block = blocks[index]
            command = labelled_command(block["script"], block["label"])
            flags = parse_serve_command(command)
            engine = ENGINES[flags.engine]
            same_page = [r for r in rows if r["source"].split()[1] == page]
            model = (flags.model or "").split("/")[-1].lower()
            weights = next(r for r in same_page if r["model"].split("/")[-1].lower() == model)
            release = next(r for r in same_page if r["engine"] == engine)
            template = {
                **release,
                "model": weights["model"],
                "precision": weights["precision"],
            }
            n = int(block["completed"])
            concurrency = block.get("max_concurrency")
            sharegpt = not block["label"].startswith("# random")
            swept = f", {block['label'][1:].strip()}" if block["label"] else ""
            out.append(
                {
                    **template,
                    "source_ref": f"gpustack/gpustack@{GPUSTACK_COMMIT}:{page} (result block "
                    f"{index + 1} of the page{swept})",
                    "num_gpus": str(flags.gpus),
                    "tp": str(flags.tp),
                    "pp": str(flags.pp),
                    "data_parallel_size": str(flags.attention_dp) if flags.attention_dp > 1 else "",
                    "enable_expert_parallel": "true" if flags.ep_size > 1 else "",
                    "input_len": str(max(1, round(block["in_tokens"] / n))),
                    "output_len": str(max(1, round(block["out_tokens"] / n))),
                    "dataset": "sharegpt" if sharegpt else "random",
                    "entrypoint": "serve",
                    "load": "concurrency" if concurrency else "max_throughput",
                    "concurrency": str(int(concurrency)) if concurrency else "",
                    "request_rate": "",
                    "num_requests": str(n),
                    "max_num_seqs": str(flags.max_num_seqs or ""),
                    "max_num_batched_tokens": str(flags.max_num_batched_tokens or ""),
                    "max_model_len": str(flags.max_model_len or ""),
                    "gpu_memory_utilization": (
                        f"{flags.gpu_memory_utilization:g}" if flags.gpu_memory_utilization else ""
                    ),
                    "output_tok_per_s": f"{block['output_tps']:.2f}",
                    "total_tok_per_s": f"{block['total_tps']:.2f}",
                    "ttft_ms": f"{block['mean_ttft']:.2f}",
                    "ttft_stat": "mean",
                    "itl_ms": f"{block['mean_tpot']:.2f}",
                    "itl_stat": "mean_tpot",
                    "ttft_p99_ms": f"{block['p99_ttft']:.2f}",
                    "tpot_p99_ms": f"{block['p99_tpot']:.2f}",
                    "notes": f"serve: {command}",
                }
            )
    return out


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
        if row["ttft_ms"]:  # vLLM's Prometheus histograms, not the requests' medians
            row["ttft_stat"] = HISTOGRAM_TTFT
            row["itl_stat"] = HISTOGRAM_ITL
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
                "ttft_stat": HISTOGRAM_TTFT,
                "itl_ms": run["tpot_ms_p50"],
                "itl_stat": HISTOGRAM_ITL,
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
    write(DATA / "measured_tuning_gpustack.csv", with_p99_columns(header), gpustack_extra(gpustack))


if __name__ == "__main__":
    main()
