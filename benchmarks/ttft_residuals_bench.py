"""Where held-out TTFT goes wrong: predicted / measured by engine, band, source, prompt length,
entrypoint and the statistic a row reports (a benchmark to read, issue 26 item 1).

    .venv/bin/python benchmarks/ttft_residuals_bench.py [--from ROWS.jsonl] [--rows OUT.jsonl]

The rows are the leave-one-source-out held-out rows of
``benchmarks/latency_errors_bench.py`` (``--from`` reads a file it or this script wrote). For
each group it prints the rows, the median absolute percentage error, the median and the 10th /
90th percentiles of predicted / measured TTFT, and the median *difference* predicted - measured
in ms: a fixed path the model lacks shows as a constant negative difference at low load (the
ratio then depends on the prompt), a scheduling or queueing error as a ratio that grows with
the load. The last tables split 1-4 and 17+ in flight by prompt length to tell the two apart.

What it showed on main (2026-12-02, 1,017 fitted rows, 461 with TTFT): at 1-4 in flight
predicted/measured 0.40, about 40 ms short whatever the prompt (a fixed path: the
``request_path`` term of planner.perf.step_time followed); max-throughput rows 1.45 and rate
rows 1.01, where TTFT follows the throughput error (gpustack's MoE rows 2-4x slow in tok/s are
2-4x long in TTFT); closed loops at 17-64 and beyond 0.41 and 0.20, of which Tandemn's vLLM
sweeps (117 rows, p50 TTFT) are 0.38 and fall with concurrency while their tok/s is within 15%,
and dstack's early-2025 DeepSeek rows 0.21 with tok/s 2x over (release speed, not scheduling);
NVIDIA's TensorRT-LLM rows (Triton's C++ server) 1.03, with no path beyond the prefill.

The queued-run tables take the speed error out of the runs that queue (max-throughput bursts,
rates): such a run lasts ``N O / tok/s`` and its mean TTFT is a share of that, so TTFT moves
with the inverse of the tok/s error; ``(pred / meas) x (tok/s pred / meas)`` is what the
queue's shape (admission cap, token budget, prefill-vs-decode priority, length mix) gets
wrong. On main (2026-12-02, /work/briefs/s34 rows): max-throughput TTFT 48% median APE, ratio
1.26, tok/s ratio 0.71, with the speed taken out 0.96 and 10.6% (vLLM 1.47 -> 0.91 / 10.3%,
SGLang 1.25 -> 0.98 / 11.9%): the burst's over-long TTFT is the held-out step cost of
fine-grained MoE prefill (the routed-expert GEMM coefficient fitted on the other sources is
2-3x GPUStack's), not the queue. vLLM's TPOT there likewise (1.67 -> 0.98, 10.1%); SGLang's
keeps 0.83 / 32% (its prefill-first stalls). dstack's vLLM 0.6 rate rows are the reverse: tok/s
and TPOT right (1.05, 1.00) and TTFT 1.86x, a queue the model admits too slowly.

The last listing is one line per closed-loop or rate row of a release from 2025-07 on
(validate's "ditto, release 2025-07+" slice). On main of 2026-12-02 (session 34) it showed the
closed loops at 5+ in flight to be the SGLang cookbook's B200 rows (DeepSeek-R1-0528 and
Qwen3-235B, TP 8, uniform lengths, 5 x the concurrency requests) and one GPUStack vLLM row; the
c=16 rows' shortfall (0.43-0.79) is the c=1 rows' (DeepSeek 0.51-0.62 at 610 prompt tokens but
1.01 at 4,194: measured TTFT hardly grows with the prompt, 126-153 -> 166 ms, predicted 78 ->
168), i.e. a small prefill's latency the step model prices too low, not a queueing or
first-wave term: the simulated first wave (all 16 at t=0, one 8,000-token batch) and the later
single-prompt batches are what SGLang 0.5.6 schedules.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.latency_errors_bench import band, held_out_rows_from_command_line
from planner.perf.releases import release_date
from planner.perf.validation import CURRENT_SINCE, SWEPT_LOADS


def prompt_band(row: dict[str, Any]) -> str:
    """Prompt length class: the prefill's share of a low-load TTFT grows with it."""
    tokens = int(row.get("input_len") or 0)
    for limit, name in ((256, "<= 256"), (1024, "257-1k"), (4096, "1k-4k")):
        if tokens <= limit:
            return f"prompt {name}"
    return "prompt > 4k"


def ttft_pairs(rows: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(predicted, measured) TTFT in ms of the rows that measure it."""
    out = []
    for r in rows:
        meas, pred = r["measured"].get("ttft"), r["predicted"].get("ttft", math.nan)
        if meas and math.isfinite(pred):
            out.append((float(pred), float(meas)))
    return out


def summary(rows: list[dict[str, Any]]) -> str | None:
    pairs = ttft_pairs(rows)
    if not pairs:
        return None
    ratios = sorted(p / m for p, m in pairs)
    ape = [abs(x - 1.0) for x in ratios]
    diff = statistics.median(p - m for p, m in pairs)
    single = [ratios[0]] * 9
    q = statistics.quantiles(ratios, n=10, method="inclusive") if len(ratios) > 1 else single
    return (
        f"{len(pairs):4d} {statistics.median(ape):7.1%} {statistics.median(ratios):6.2f} "
        f"{q[0]:6.2f} {q[-1]:6.2f} {diff:+10.0f}"
    )


def print_tables(rows: list[dict[str, Any]]) -> None:
    groupings: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("all", lambda r: "all"),
        ("engine", lambda r: str(r["engine"])),
        ("band", band),
        ("engine and band", lambda r: f"{r['engine']} {band(r)}"),
        ("entrypoint and engine", lambda r: f"{r.get('entrypoint')} {r['engine']}"),
        ("statistic", lambda r: str(r.get("ttft_stat"))),
        ("prompt length", prompt_band),
        ("source", lambda r: str(r.get("source"))[:44]),
        (
            "1-4 in flight by engine and prompt",
            lambda r: f"{r['engine']} {prompt_band(r)}" if band(r) == "1-4 in flight" else "",
        ),
        (
            "17+ in flight by engine and prompt",
            lambda r: (
                f"{r['engine']} {prompt_band(r)}"
                if band(r) in ("17-64 in flight", "> 64 in flight")
                else ""
            ),
        ),
    ]
    head = f"{'n':>4} {'APE':>7} {'ratio':>6} {'p10':>6} {'p90':>6} {'diff ms':>10}"
    for title, key in groupings:
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            name = key(row)
            if name:
                groups[name].append(row)
        print(f"\nTTFT by {title}")
        print(f"{'':46} {head}")
        for name in sorted(groups):
            line = summary(groups[name])
            if line:
                print(f"{name[:46]:46} {line}")


def speed_split(rows: list[dict[str, Any]], metric: str) -> str | None:
    """``metric``'s median ratio and APE, the output tok/s ratio, and the metric's ratio and APE
    once the run's speed error is taken out: ``(pred / meas) x (pred tok/s / meas tok/s)``.

    A run that sends every request at once (or faster than it serves them) lasts ``N O / tok/s``
    and its mean TTFT is a share of that (half, when the prompts queue for the whole run), so a
    step-cost error moves TTFT by the inverse of the tok/s ratio, and TPOT likewise; what is left
    after the product is the queue's shape (admission, budget, priority, the length mix)."""
    triples = []
    for r in rows:
        meas, pred = r["measured"], r["predicted"]
        value, speed = meas.get(metric), meas.get("output_tok_per_s")
        guess, guess_speed = pred.get(metric, math.nan), pred.get("output_tok_per_s", math.nan)
        if value and speed and math.isfinite(guess) and math.isfinite(guess_speed):
            triples.append((guess / value, guess_speed / speed))
    if not triples:
        return None
    ratio = statistics.median(a for a, _ in triples)
    ape = statistics.median(abs(a - 1.0) for a, _ in triples)
    speed_ratio = statistics.median(b for _, b in triples)
    shape = statistics.median(a * b for a, b in triples)
    shape_ape = statistics.median(abs(a * b - 1.0) for a, b in triples)
    return (
        f"{len(triples):4d} {ape:7.1%} {ratio:6.2f} {speed_ratio:7.2f} {shape:7.2f} "
        f"{shape_ape:7.1%}"
    )


def print_speed_split(rows: list[dict[str, Any]]) -> None:
    """TTFT and TPOT of runs that queue (max-throughput bursts and rates) with the speed error
    taken out, by engine and by source (:func:`speed_split`)."""
    queued = [r for r in rows if r["load"] in ("max_throughput", "rate")]
    head = f"{'n':>4} {'APE':>7} {'ratio':>6} {'tok/s':>7} {'x tok/s':>7} {'its APE':>7}"
    for metric in ("ttft", "tpot"):
        for title, key in (
            ("engine and load", lambda r: f"{r['engine']} {r['load']}"),
            ("source and load", lambda r: f"{str(r.get('source'))[:34]} {r['load']}"),
        ):
            groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for row in queued:
                groups[key(row)].append(row)
                groups[f"all {row['load']}"].append(row)
            print(f"\n{metric.upper()} of queued runs by {title}, speed error taken out")
            print(f"{'':46} {head}")
            for name in sorted(groups):
                line = speed_split(groups[name], metric)
                if line:
                    print(f"{name[:46]:46} {line}")


def swept_current_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The closed-loop and rate rows with a TTFT of engine releases from CURRENT_SINCE on (the
    shape of issue 26's independent checks: validate's "ditto, release 2025-07+" slice)."""
    out = []
    for r in rows:
        when = release_date(str(r["engine"]), r.get("engine_version"))
        current = when is not None and when >= CURRENT_SINCE
        if current and r["load"] in SWEPT_LOADS and r["measured"].get("ttft"):
            out.append(r)
    return out


def print_swept_rows(rows: list[dict[str, Any]]) -> None:
    """One line a row: engine, release, model, GPU, TP, lengths, load, requests, statistic,
    measured and predicted TTFT (and p99 where published), predicted / measured tok/s - 1."""
    print(f"\nClosed loops and rates of releases from {CURRENT_SINCE}, one row each")
    for r in sorted(swept_current_rows(rows), key=lambda r: (r["engine"], str(r["model"]))):
        m, p = r["measured"], r["predicted"]
        tps = m.get("output_tok_per_s")
        tps_err = f"{p['output_tok_per_s'] / tps - 1:+4.0%}" if tps else "    -"
        load = f"c={r['concurrency']:g}" if r["load"] == "concurrency" else "rate"
        p99 = (
            f" p99 {m['ttft_p99']:7.0f}/{p.get('ttft_p99', math.nan):7.0f}"
            if m.get("ttft_p99")
            else ""
        )
        print(
            f"{r['engine']:6} {r.get('engine_version') or '-':12} {str(r['model'])[-28:]:28} "
            f"{r['gpu'][:9]:9} TP{r['tp']} {r['input_len']:5}/{r['output_len']:<5} {load:6} "
            f"n={r.get('num_requests') or '-'} {r.get('ttft_stat')}: TTFT {m['ttft']:7.0f} / "
            f"{p['ttft']:7.0f} ms ({p['ttft'] / m['ttft']:.2f}) tok/s {tps_err}{p99}"
        )


def main() -> int:
    rows = held_out_rows_from_command_line(__doc__.split("\n")[0])
    print("held-out TTFT: rows, median |pred/meas - 1|, median pred/meas (p10, p90), ")
    print("median predicted - measured (ms)")
    print_tables(rows)
    print(
        "\nqueued runs: rows, median APE and pred/meas, median tok/s pred/meas, median of "
        "(pred/meas) x (tok/s pred/meas) and its APE"
    )
    print_speed_split(rows)
    print_swept_rows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
