"""Importers against the files the released tools wrote (fixtures/real-tools: vLLM 0.33's
``vllm bench serve``, GuideLLM 0.8.1, AIPerf 0.13, with what each printed in its log).

Every field a tool wrote that Servewise has a place for round-trips; the tool's printed figures
are reproduced; what a tool did not measure is absent; a file that does not match its tool's
schema is refused with one line naming the field, and writes no run."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks_runner.errors import ImportFormatError
from benchmarks_runner.importers import import_file, read_file
from benchmarks_runner.metrics import compute_summary
from planner.run_files import RequestRecord, read_run_dir
from tests.run_view import read_run

from .conftest import REAL

VLLM = REAL / "vllm-bench-0.33"
GUIDELLM = REAL / "guidellm-0.8.1"
AIPERF = REAL / "aiperf-0.13"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
DETAILED = ("vllm-sim-c8-r1", "vllm-mockchat-c16-r1", "vllm-reason", "vllm-chunk4err-c8-r1",
            "vllm-rate")  # fmt: skip


def _printed(log: Path) -> dict[str, float]:
    """``Label:   value`` lines of vllm bench serve's console summary."""
    out = {}
    for line in log.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9 ()/.%-]+):\s+(-?[0-9.]+)\s*$", line)
        if match:
            out[match.group(1).strip()] = float(match.group(2))
    return out


# ----- vllm bench serve ---------------------------------------------------------------------------
VLLM_PRINTED = {
    "Successful requests": "completed",
    "Failed requests": "failed",
    "Benchmark duration (s)": "duration",
    "Total input tokens": "total_input_tokens",
    "Total generated tokens": "total_output_tokens",
    "Request throughput (req/s)": "request_throughput",
    "Output token throughput (tok/s)": "output_throughput",
    "Peak output token throughput (tok/s)": "max_output_tokens_per_s",
    "Peak concurrent requests": "max_concurrent_requests",
    "Total token throughput (tok/s)": "total_token_throughput",
    "Mean TTFT (ms)": "mean_ttft_ms",
    "Median TTFT (ms)": "median_ttft_ms",
    "P99 TTFT (ms)": "p99_ttft_ms",
    "Mean TPOT (ms)": "mean_tpot_ms",
    "Median TPOT (ms)": "median_tpot_ms",
    "P99 TPOT (ms)": "p99_tpot_ms",
    "Mean ITL (ms)": "mean_itl_ms",
    "Median ITL (ms)": "median_itl_ms",
    "P99 ITL (ms)": "p99_itl_ms",
    "Mean E2EL (ms)": "mean_e2el_ms",
    "P99 E2EL (ms)": "p99_e2el_ms",
}


@pytest.mark.parametrize("name", [*DETAILED, "vllm-plain"])
def test_a_vllm_result_imports_with_vllms_own_figures(name: str, tmp_path: Path) -> None:
    source = json.loads((VLLM / f"{name}.json").read_text())
    (run_dir,) = import_file("vllm", VLLM / f"{name}.json", tmp_path)
    run = read_run(run_dir)["run"]
    summary = run["summary"]
    for key, value in source.items():
        if not isinstance(value, list):
            assert summary[key] == value, key  # every aggregate of the file, as it is
    printed = _printed(VLLM / f"{name}.log")
    for label, key in VLLM_PRINTED.items():
        if label in printed:
            assert round(summary[key], 2) == pytest.approx(printed[label], abs=0.006), label
    assert run["model"] == MODEL and run["status"] == "completed"
    assert run["endpoint"]["api"] == ("chat" if "chat" in source["backend"] else "completions")
    assert run["config"]["concurrency"] == source["max_concurrency"]
    # vLLM writes `date` at the end: the run started `duration` before it
    ended = datetime.strptime(source["date"], "%Y%m%d-%H%M%S")
    started = datetime.fromisoformat(run["started_at"].removesuffix("Z"))
    assert (ended - started).total_seconds() == pytest.approx(source["duration"], abs=0.001)


@pytest.mark.parametrize("name", DETAILED)
def test_vllm_requests_round_trip_and_give_back_vllms_aggregates(name: str, tmp_path: Path) -> None:
    """Each request's TTFT, ITL gaps, latency and lengths as vLLM stored them; vLLM's own
    aggregates computed again from them with Servewise's definitions (metric parity)."""
    source = json.loads((VLLM / f"{name}.json").read_text())
    (run_dir,) = import_file("vllm", VLLM / f"{name}.json", tmp_path)
    records = read_run_dir(run_dir).requests
    assert len(records) == source["completed"] + source["failed"]
    assert sum(r.ok for r in records) == source["completed"]
    for i, record in enumerate(records):
        assert record.prompt_tokens == source["input_lens"][i]
        if not record.ok:
            assert record.error and source["errors"][i].strip().endswith(record.error)
            continue
        assert record.first_chunk_s is not None and record.end_s is not None
        assert record.first_chunk_s - record.start_s == pytest.approx(source["ttfts"][i])
        assert np.diff(record.chunk_times_s or []) == pytest.approx(source["itls"][i])
        assert record.end_s - record.start_s == pytest.approx(source["latencies"][i])
        assert record.output_tokens == source["output_lens"][i]
    again = compute_summary(records, source["duration"], percentiles=[99])
    for key in ("completed", "failed", "total_input_tokens", "total_output_tokens",
                "output_throughput", "max_output_tokens_per_s", "max_concurrent_requests",
                "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
                "mean_itl_ms", "median_itl_ms", "p99_itl_ms"):  # fmt: skip
        assert again[key] == pytest.approx(source[key], rel=1e-9), key


def test_vllms_chat_and_reasoning_files_time_what_it_counts(tmp_path: Path) -> None:
    (chat,) = import_file("vllm", VLLM / "vllm-mockchat-c16-r1.json", tmp_path)
    records = read_run_dir(chat).requests
    assert {len(r.chunk_times_s or []) for r in records} == {128}  # no role chunk among them
    (reason,) = import_file("vllm", VLLM / "vllm-reason.json", tmp_path)
    summary = read_run(reason)["run"]["summary"]
    # against a server that streamed `reasoning_content`, which vLLM 0.33 no longer reads
    assert summary["median_ttft_ms"] == pytest.approx(342.79, abs=0.01)
    assert summary["median_tpot_ms"] == pytest.approx(7.48, abs=0.01)


def test_a_vllm_result_without_details_has_a_summary_and_no_requests(tmp_path: Path) -> None:
    (run_dir,) = import_file("vllm", VLLM / "vllm-plain.json", tmp_path)
    data = read_run(run_dir)
    assert data["requests"] == [] and data["run"]["summary"]["completed"] == 40
    assert data["run"]["config"]["imported_from"]["detailed"] is False


# ----- GuideLLM ---------------------------------------------------------------------------------
def test_guidellm_imports_model_target_api_and_load_from_its_config(tmp_path: Path) -> None:
    (run_dir,) = import_file("guidellm", GUIDELLM / "guidellm-sim-c8-r1.json", tmp_path)
    run = read_run(run_dir)["run"]
    assert run["model"] == MODEL
    assert run["endpoint"] == {"base_url": "http://127.0.0.1:18732", "api": "completions",
                               "server_version": None, "server_flags": None}  # fmt: skip
    assert run["config"]["load"] == "concurrency" and run["config"]["concurrency"] == 8
    assert (run["config"]["input_len"], run["config"]["output_len"]) == (511, 128)
    assert run["started_at"].startswith("2026-12-01T06:05:39")


def test_guidellm_reproduces_what_it_printed_and_claims_no_itl(tmp_path: Path) -> None:
    (run_dir,) = import_file("guidellm", GUIDELLM / "guidellm-sim-c8-r1.json", tmp_path)
    data = read_run(run_dir)
    summary = data["run"]["summary"]
    # the Run Summary and Server Throughput tables of guidellm-sim-c8-r1.log
    assert (summary["completed"], summary["failed"], summary["duration"]) == (
        200, 0, pytest.approx(30.05, abs=0.01))  # fmt: skip
    assert (summary["total_input_tokens"], summary["total_output_tokens"]) == (102200, 25600)
    assert round(summary["output_throughput"], 1) == 851.9
    assert round(summary["request_throughput"], 1) == 6.7
    assert round(summary["mean_ttft_ms"], 1) == 38.2 and round(summary["median_ttft_ms"], 1) == 31.5
    # GuideLLM's "ITL" (a request's mean gap) is vLLM's TPOT: 9.0 as it printed
    assert round(summary["mean_tpot_ms"], 1) == 9.0 and round(summary["median_tpot_ms"], 1) == 9.0
    # no per-chunk times: no ITL, no peak output rate, nothing interpolated under their names
    assert not any("_itl_ms" in k for k in summary) and "max_output_tokens_per_s" not in summary
    assert all(r["chunk_times_s"] is None for r in data["requests"])
    ours = summary["tool_metrics"]["metrics"]  # GuideLLM's own figures, under its own names
    assert summary["tool_metrics"]["tool"] == "GuideLLM"
    assert round(ours["time_to_first_token_ms"]["p95"], 1) == 73.8
    assert round(ours["inter_token_latency_ms"]["mean"], 1) == 9.0
    tpot = ours["time_per_output_token_ms"]  # counts the first token: not vLLM's TPOT
    assert (round(tpot["mean"], 1), round(tpot["median"], 1), round(tpot["p95"], 1)) == (
        9.3, 9.2, 9.5)  # fmt: skip


def test_guidellm_requests_round_trip(tmp_path: Path) -> None:
    source = json.loads((GUIDELLM / "guidellm-sim-c8-r1.json").read_text())
    bench = source["benchmarks"][0]
    (run_dir,) = import_file("guidellm", GUIDELLM / "guidellm-sim-c8-r1.json", tmp_path)
    by_id = {r.request_id: r for r in read_run_dir(run_dir).requests}
    t0 = bench["scheduler_metrics"]["measure_start_time"]
    for request in bench["requests"]["successful"]:
        t = request["info"]["timings"]
        record = by_id[request["request_id"]]
        assert record.start_s + t0 == pytest.approx(t["request_start"], abs=1e-6)
        assert record.first_chunk_s is not None and record.end_s is not None
        assert record.first_chunk_s + t0 == pytest.approx(t["first_token_iteration"], abs=1e-6)
        assert record.end_s + t0 == pytest.approx(t["last_token_iteration"], abs=1e-6)
        assert (record.first_chunk_s - record.start_s) * 1e3 == pytest.approx(
            request["time_to_first_token_ms"], abs=1e-3
        )
        assert (record.prompt_tokens, record.output_tokens) == (511, 128)


def test_a_guidellm_file_of_several_benchmarks_is_several_runs(tmp_path: Path) -> None:
    runs = [read_run(d)["run"] for d in import_file("guidellm", GUIDELLM / "guidellm-multi.json",
                                                    tmp_path)]  # fmt: skip
    assert [r["config"]["concurrency"] for r in runs] == [4, 8]
    # guidellm-multi.log: TTFT median 30.9 at concurrent@4 and 48.8 at concurrent@8
    assert [round(r["summary"]["median_ttft_ms"], 1) for r in runs] == [31.0, 48.8]
    assert len({r["run_id"] for r in runs}) == 2


def test_guidellm_errored_requests_keep_their_reason(tmp_path: Path) -> None:
    (run_dir,) = import_file("guidellm", GUIDELLM / "guidellm-chunk4err-c8-r1.json", tmp_path)
    data = read_run(run_dir)
    failed = [r for r in data["requests"] if r["status"] == "error"]
    assert len(failed) == 6 and all("500" in r["error"] for r in failed)
    summary = data["run"]["summary"]
    assert (summary["completed"], summary["failed"]) == (94, 6)
    assert round(summary["output_throughput"], 1) == 765.5  # as GuideLLM printed


# ----- AIPerf -------------------------------------------------------------------------------------
def test_aiperf_imports_model_url_and_concurrency(tmp_path: Path) -> None:
    (run_dir,) = import_file("aiperf", AIPERF / "aiperf-sim-c8-r1", tmp_path)
    run = read_run(run_dir)["run"]
    assert run["model"] == MODEL and run["endpoint"]["base_url"] == "http://127.0.0.1:18732"
    assert run["endpoint"]["api"] == "completions"
    assert run["config"]["load"] == "concurrency" and run["config"]["concurrency"] == 8


def test_aiperf_reproduces_what_it_printed(tmp_path: Path) -> None:
    (run_dir,) = import_file("aiperf", AIPERF / "aiperf-sim-c8-r1", tmp_path)
    summary = read_run(run_dir)["run"]["summary"]
    # profile_export_console.txt
    assert summary["completed"] == 200 and summary["total_output_tokens"] == 25600
    assert round(summary["output_throughput"], 2) == 854.57
    assert round(summary["request_throughput"], 2) == 6.68
    ttft = (summary["mean_ttft_ms"], summary["median_ttft_ms"], summary["p90_ttft_ms"],
            summary["p99_ttft_ms"])  # fmt: skip
    assert [round(v, 2) for v in ttft] == [37.85, 30.84, 50.40, 135.80]
    # AIPerf's "Inter Token Latency" is vLLM's TPOT; its inter-chunk gaps are vLLM's ITL
    assert round(summary["mean_tpot_ms"], 2) == 9.03 and round(summary["p99_tpot_ms"], 2) == 9.06
    tool = summary["tool_metrics"]["metrics"]
    assert summary["p99_itl_ms"] == pytest.approx(tool["inter_chunk_latency"]["p99"], rel=1e-9)
    assert summary["mean_e2el_ms"] == pytest.approx(tool["request_latency"]["avg"], rel=1e-9)


def test_aiperf_requests_round_trip(tmp_path: Path) -> None:
    lines = (AIPERF / "aiperf-sim-c8-r1" / "profile_export.jsonl").read_text().splitlines()
    source = {r["metadata"]["x_request_id"]: r for r in map(json.loads, lines)}
    (run_dir,) = import_file("aiperf", AIPERF / "aiperf-sim-c8-r1", tmp_path)
    records = read_run_dir(run_dir).requests
    t0 = min(r["metadata"]["request_start_ns"] for r in source.values())
    for record in records:
        raw = source[record.request_id]
        md, metrics = raw["metadata"], raw["metrics"]
        assert record.start_s == (md["request_start_ns"] - t0) / 1e9
        assert record.scheduled_s == (md["credit_issued_ns"] - t0) / 1e9
        assert record.first_chunk_s is not None
        ttft_ms = (record.first_chunk_s - record.start_s) * 1e3
        assert ttft_ms == pytest.approx(metrics["time_to_first_token"]["value"])
        gaps_ms = np.diff(record.chunk_times_s or []) * 1e3
        assert gaps_ms == pytest.approx(metrics["inter_chunk_latency"]["value"])
        assert record.output_tokens == metrics["output_token_count"]["value"]
        assert record.prompt_tokens == metrics["input_sequence_length"]["value"]


def test_aiperf_warmup_is_kept_out_of_the_summary(tmp_path: Path) -> None:
    (run_dir,) = import_file("aiperf", AIPERF / "aiperf-warm", tmp_path)
    data = read_run(run_dir)
    assert sum(r["warmup"] for r in data["requests"]) == 8 and len(data["requests"]) == 48
    summary = data["run"]["summary"]
    phase = json.loads((AIPERF / "aiperf-warm/phases/profiling/profile_export_aiperf.json")
                       .read_text())  # fmt: skip
    assert summary["completed"] == 40
    assert summary["output_throughput"] == pytest.approx(phase["output_token_throughput"]["avg"])
    assert summary["mean_ttft_ms"] == pytest.approx(phase["time_to_first_token"]["avg"])


def test_an_aiperf_sweep_folder_is_one_run_a_concurrency(tmp_path: Path) -> None:
    runs = [read_run(d)["run"] for d in import_file("aiperf", AIPERF / "aiperf-sweep", tmp_path)]
    assert [r["config"]["concurrency"] for r in runs] == [4, 8]
    for run, level in zip(runs, (4, 8), strict=True):
        own = json.loads((AIPERF / f"aiperf-sweep/concurrency_{level}/profile_export_aiperf.json")
                         .read_text())  # fmt: skip
        assert run["summary"]["median_ttft_ms"] == pytest.approx(own["time_to_first_token"]["p50"])


def test_aiperf_errors_keep_their_status_and_message(tmp_path: Path) -> None:
    (run_dir,) = import_file("aiperf", AIPERF / "aiperf-chunk4err-c8-r1", tmp_path)
    data = read_run(run_dir)
    failed = [r for r in data["requests"] if r["status"] == "error"]
    assert len(failed) == 8 and {r["http_status"] for r in failed} == {500}
    assert all("Internal Server Error" in r["error"] for r in failed)
    assert round(data["run"]["summary"]["output_throughput"], 2) == 752.43  # as AIPerf printed


# ----- files that do not match their tool's schema ------------------------------------------
def _tampered(tmp_path: Path, source: Path, change: Any) -> Path:
    data = json.loads(source.read_text())
    change(data)
    out = tmp_path / source.name
    out.write_text(json.dumps(data))
    return out


def _vllm(data: dict[str, Any], **changes: Any) -> None:
    data.update(changes)


GARBAGE = [
    ("vllm", lambda d: _vllm(d, completed="ten"), r"completed='ten': Input should be a valid int"),
    ("vllm", lambda d: _vllm(d, duration=-1), r"duration=-1: Input should be greater than"),
    ("vllm", lambda d: _vllm(d, completed=190, failed=10),
     r"completed=190: but 200 requests have no error"),
    ("vllm", lambda d: d["ttfts"].pop(), r"ttfts: 199 entries where completed \+ failed = 200"),
    ("vllm", lambda d: _vllm(d, total_output_tokens=5), r"total_output_tokens=5: output_lens"),
    ("vllm", lambda d: _vllm(d, median_ttft_ms="fast"), r"median_ttft_ms='fast'"),
    ("vllm", lambda d: d["itls"][3].__setitem__(0, -0.5), r"itls\.3\.0=-0\.5"),
    ("guidellm", lambda d: d["benchmarks"][0].__setitem__("duration", -1.0),
     r"benchmarks\.0\.duration=-1\.0"),
    ("guidellm", lambda d: d["benchmarks"][0]["requests"]["successful"].pop(),
     r"requests\.successful: 199 listed where scheduler_metrics\.requests_made\.successful = 200"),
    ("guidellm", lambda d: d["benchmarks"][0]["requests"]["successful"][5]["info"]["timings"]
     .__setitem__("last_token_iteration", 1.0), r"last_token_iteration=1\.0: before"),
    ("guidellm", lambda d: d["benchmarks"][0]["requests"]["successful"][0]["output_metrics"]
     .__setitem__("total_tokens", "many"), r"total_tokens='many'"),
]  # fmt: skip


@pytest.mark.parametrize(("fmt", "change", "message"), GARBAGE)
def test_a_file_that_breaks_its_schema_is_refused_naming_the_field(
    tmp_path: Path, fmt: str, change: Any, message: str
) -> None:
    source = VLLM / "vllm-sim-c8-r1.json" if fmt == "vllm" else GUIDELLM / "guidellm-sim-c8-r1.json"
    bad = _tampered(tmp_path, source, change)
    runs = tmp_path / "runs"
    with pytest.raises(ImportFormatError, match=message):
        import_file(fmt, bad, runs)
    assert not runs.exists() or not any(runs.iterdir())  # no run written


def _aiperf_copy(tmp_path: Path, change_line: Any = None, change_summary: Any = None) -> Path:
    folder = tmp_path / "aiperf"
    folder.mkdir()
    lines = (AIPERF / "aiperf-sim-c8-r1/profile_export.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    if change_line is not None:
        change_line(records[7])
    (folder / "profile_export.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    summary = json.loads((AIPERF / "aiperf-sim-c8-r1/profile_export_aiperf.json").read_text())
    if change_summary is not None:
        change_summary(summary)
    (folder / "profile_export_aiperf.json").write_text(json.dumps(summary))
    return folder


@pytest.mark.parametrize(
    ("change_line", "change_summary", "message"),
    [
        (lambda r: r["metadata"].__setitem__("request_end_ns", 5), None,
         r"line 8.*request_end_ns=5: before request_start_ns"),
        (lambda r: r["metadata"].__setitem__("request_start_ns", "soon"), None,
         r"line 8\.metadata\.request_start_ns='soon'"),
        (lambda r: r["metrics"]["time_to_first_token"].__setitem__("value", -3), None,
         r"line 8\.metrics\.time_to_first_token\.value"),
        (None, lambda s: s["request_count"].__setitem__("avg", 150.0),
         r"request_count \+ error_request_count = 150, but profile_export.jsonl holds 200"),
        (None, lambda s: s["benchmark_duration"].__setitem__("avg", "long"),
         r"benchmark_duration\.avg='long'"),
    ],
)  # fmt: skip
def test_an_aiperf_folder_that_breaks_its_schema_is_refused(
    tmp_path: Path, change_line: Any, change_summary: Any, message: str
) -> None:
    folder = _aiperf_copy(tmp_path, change_line, change_summary)
    with pytest.raises(ImportFormatError, match=message):
        read_file("aiperf", folder)


def test_import_rejects_the_wrong_format(tmp_path: Path) -> None:
    with pytest.raises(ImportFormatError, match="not a GuideLLM"):
        import_file("guidellm", VLLM / "vllm-sim-c8-r1.json", tmp_path)
    with pytest.raises(ImportFormatError, match="not a vllm bench serve"):
        import_file("vllm", GUIDELLM / "guidellm-sim-c8-r1.json", tmp_path)
    with pytest.raises(ImportFormatError, match=r"no AIPerf profile_export\.jsonl"):
        import_file("aiperf", tmp_path, tmp_path)
    with pytest.raises(ImportFormatError, match="not registered"):
        import_file("locust", VLLM / "vllm-sim-c8-r1.json", tmp_path)


def test_records_are_typed_run_file_records(tmp_path: Path) -> None:
    for fmt, path in (("vllm", VLLM / "vllm-rate.json"),
                      ("guidellm", GUIDELLM / "guidellm-sim-c8-r1.json"),
                      ("aiperf", AIPERF / "aiperf-warm")):  # fmt: skip
        (run,) = read_file(fmt, path)
        assert run.records and all(isinstance(r, RequestRecord) for r in run.records)
