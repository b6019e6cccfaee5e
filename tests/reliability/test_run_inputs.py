"""What the runner, the importers and ingestion read, as a hostile or broken source writes it.

Each test reproduces a finding of a bad-input probe: numbers the store or the model cannot hold
(from an endpoint's usage, an imported file, a run file), special and huge files (a symlink to
``/dev/zero``, a FIFO, sparse files past the size limits, a huge ``/metrics`` page), importer
rules (a negative duration or queue time, a first token after the end, 200,000-deep JSON, one
line for many bad rows), endpoint URLs (link-local and metadata addresses, ``?`` and ``#``),
a signal while the runner probes a slow endpoint, and scrubbing megabytes of text. Real
processes, a real fault server on 127.0.0.1 and real DuckDB files throughout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks_runner.errors import EndpointUnreachable, ImportFormatError, ResponseTooLarge
from benchmarks_runner.http_client import (
    MAX_GET_BYTES,
    EndpointClient,
    MalformedChunk,
    StreamResult,
    _SseParser,
)
from benchmarks_runner.importers import read_file
from benchmarks_runner.importers.common import MAX_IMPORT_BYTES
from benchmarks_runner.server_metrics import MAX_SAMPLES_PER_SCRAPE, MetricsScraper
from planner import credentials
from planner.cli import main as planner_main
from planner.credentials import parse_endpoint_url, strip_user_info
from planner.errors import InvalidInputError
from planner.run_files import (
    MAX_LINES_FILE_BYTES,
    MAX_TOKENS,
    REQUESTS_JSONL,
    RUN_JSON,
    MetricSample,
    RequestRecord,
    read_run_dir,
)
from planner.runs import run_to_measured_result
from tests.patience import PATIENT_S
from tests.planner.test_ingest import write_completed_run
from tests.reliability.conftest import (
    FaultServer,
    no_traceback,
    run_cli,
    runner_args,
    start_cli,
)

FIXTURES = Path(__file__).resolve().parents[1] / "benchmarks_runner" / "fixtures" / "real-tools"
GUIDELLM = FIXTURES / "guidellm-0.8.1" / "guidellm-sim-c8-r1.json"
VLLM = FIXTURES / "vllm-bench-0.33" / "vllm-sim-c8-r1.json"
AIPERF = FIXTURES / "aiperf-0.13" / "aiperf-sim-c8-r1" / "profile_export.jsonl"


def _store_check(runs: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    """``planner store check --json`` (in this process: its own database per test)."""
    code = planner_main(["store", "check", "--runs-dir", str(runs), "--json"])
    return code, json.loads(capsys.readouterr().out)


def _replace_line(run_dir: Path, index: int, **fields: object) -> None:
    """Line ``index`` of the run's requests.jsonl with ``fields`` set (written as Python's
    JSON writer writes them: NaN as ``NaN``, big integers whole)."""
    path = run_dir / REQUESTS_JSONL
    lines = path.read_text().splitlines()
    lines[index] = json.dumps(json.loads(lines[index]) | fields)
    path.write_text("\n".join(lines) + "\n")


# ----- 1. numbers outside what the store or the model can hold ------------------------------
@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("3000000000", "usage.prompt_tokens=3000000000: outside 0..100,000,000 tokens"),
        ("NaN", "usage.prompt_tokens=nan: not a whole number"),
    ],
)
def test_an_endpoints_impossible_usage_fails_the_run_naming_it_with_every_row_kept(
    raw: str,
    shown: str,
    fault_server: Callable[..., FaultServer],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = fault_server("usage", "--usage-prompt-tokens", raw)
    runs = tmp_path / "runs"
    proc = run_cli("benchmarks_runner", *runner_args(server.base_url, runs, requests=8))
    no_traceback(proc)
    assert proc.returncode == 4, proc.stderr  # failed, not "completed"
    assert shown in proc.stderr and "no request was measured" not in proc.stderr
    (run_dir,) = runs.iterdir()
    run = read_run_dir(run_dir)
    assert run.meta["status"] == "failed" and shown in run.meta["error"]
    assert len(run.measured) == 8 and not run.problems  # every row kept, every row readable
    assert all(shown in (r.error or "") for r in run.measured)
    _, report = _store_check(runs, capsys)
    assert report["runs"] == 1 and not report["problems"] and report["error"] is None


@pytest.mark.parametrize(
    ("usage", "shown"),
    [
        ('{"prompt_tokens": 3000000000}', "usage.prompt_tokens=3000000000: outside 0..100,000,000"),
        ('{"prompt_tokens": -5}', "usage.prompt_tokens=-5: outside 0..100,000,000 tokens"),
        ('{"completion_tokens": NaN}', "usage.completion_tokens=nan: not a whole number"),
        ('{"completion_tokens": 2.5}', "usage.completion_tokens=2.5: not a whole number"),
        ('{"prompt_tokens": "abc"}', "usage.prompt_tokens='abc': not a number"),
        ('{"prompt_tokens": true}', "usage.prompt_tokens=True: not a number"),
        ("[1, 2]", "usage='[1, 2]': not an object"),
    ],
)
@pytest.mark.parametrize("with_output", [True, False])
def test_the_stream_parser_names_usage_that_is_no_token_count(
    usage: str, shown: str, with_output: bool
) -> None:
    """Usage on the chunk with the output (per-chunk usage) and on a chunk of its own."""
    result = StreamResult(request_id="r")
    parser = _SseParser(result, chat=False)
    choices = '[{"index": 0, "text": "x"}]' if with_output else "[]"
    with pytest.raises(MalformedChunk) as err:
        parser.event(f'data: {{"choices": {choices}, "usage": {usage}}}'.encode(), 1.0)
    assert str(err.value).startswith("the server's ") and shown in str(err.value)


def test_a_running_token_count_that_goes_down_is_named() -> None:
    result = StreamResult(request_id="r")
    parser = _SseParser(result, chat=False)
    event = (
        'data: {{"choices": [{{"index": 0, "text": "x"}}], "usage": {{"completion_tokens": {n}}}}}'
    )
    parser.event(event.format(n=5).encode(), 1.0)
    with pytest.raises(MalformedChunk, match="completion_tokens=3: down from 5"):
        parser.event(event.format(n=3).encode(), 2.0)


def test_a_run_file_beyond_the_stores_columns_is_quarantined_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """prompt_tokens of 3e9 (past INTEGER), NaN in run.json: the rest of the folder goes in.
    A planned input of 3e9 tokens is past a measured result's bounds: the run is stored, its
    requests with it, but it is no calibration point (before the bounds, the store refused
    the measured row and with it the whole run)."""
    runs = tmp_path / "runs"
    write_completed_run(runs, "20261201T100000Z-clean0")
    big = write_completed_run(runs, "20261201T100001Z-bigtok")
    _replace_line(big, 3, prompt_tokens=3_000_000_000)
    _replace_line(big, 5, chunk_tokens=[1, -4, 1], output_tokens=3)
    huge = write_completed_run(runs, "20261201T100002Z-hugein")  # past measured_results'
    meta = json.loads((huge / RUN_JSON).read_text())
    meta["config"]["input_len"] = 3_000_000_000
    (huge / RUN_JSON).write_text(json.dumps(meta))
    nan = write_completed_run(runs, "20261201T100003Z-nanrun")
    text = (nan / RUN_JSON).read_text().replace('"concurrency": 4', '"concurrency": NaN')
    (nan / RUN_JSON).write_text(text)
    write_completed_run(runs, "20261201T100004Z-clean1")
    code, report = _store_check(runs, capsys)
    assert code == 1 and report["error"] is None
    by_run = {Path(p["run_dir"]).name: p for p in report["problems"]}
    assert report["runs"] == 4  # the clean runs, the big one without its bad lines, hugein
    assert "20261201T100002Z-hugein" not in by_run
    assert run_to_measured_result(read_run_dir(huge)) is None  # stored, but no calibration point
    assert "NaN is not a JSON number" in by_run["20261201T100003Z-nanrun"]["reason"]
    lines = {(p["line"], p["field"]) for p in report["problems"] if "bigtok" in p["run_dir"]}
    assert lines == {(4, "prompt_tokens"), (6, "chunk_tokens.1")}
    # nothing new the second time, the quarantined run included
    _, again = _store_check(runs, capsys)
    assert again["ingested_now"] == 0 and again["runs"] == 4


def test_an_import_with_a_request_of_1e15_tokens_is_refused_naming_it(tmp_path: Path) -> None:
    data = json.loads(GUIDELLM.read_text())
    request = data["benchmarks"][0]["requests"]["successful"][7]
    request["output_metrics"]["text_tokens"] = 10**15
    request["output_metrics"].pop("total_tokens", None)
    path = tmp_path / "guidellm.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ImportFormatError) as err:
        read_file("guidellm", path)
    message = str(err.value)
    assert "\n" not in message and "1000000000000000" in message
    assert "text_tokens" in message or "output_tokens" in message


def test_the_bounds_are_the_records_and_every_reader_applies_them() -> None:
    """One place: the record refuses what the store's INTEGER columns cannot hold."""
    base = {"request_id": "a", "request_index": 0, "start_s": 0.0, "status": "error"}
    for name, value in [
        ("prompt_tokens", MAX_TOKENS + 1),
        ("output_tokens", -1),
        ("request_index", 2**31),
        ("start_s", 1e300),
        ("http_status", 70000),
        ("chunk_tokens", [1, -1]),
    ]:
        with pytest.raises(ValueError, match=name):
            RequestRecord.model_validate({**base, name: value})
    with pytest.raises(ValueError, match="t_s"):
        MetricSample(t_s=float("inf"), name="vllm:x", value=1.0)


# ----- 2. special and huge files ----------------------------------------------------------
def test_special_files_in_a_runs_folder_are_refused_and_nothing_hangs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    write_completed_run(runs, "20261201T100000Z-clean0")
    zero = write_completed_run(runs, "20261201T100001Z-devzer")
    (zero / REQUESTS_JSONL).unlink()
    (zero / REQUESTS_JSONL).symlink_to("/dev/zero")
    fifo = write_completed_run(runs, "20261201T100002Z-fifo00")
    (fifo / REQUESTS_JSONL).unlink()
    os.mkfifo(fifo / REQUESTS_JSONL)
    sparse = write_completed_run(runs, "20261201T100003Z-sparse")
    with (sparse / REQUESTS_JSONL).open("r+b") as handle:
        handle.truncate(MAX_LINES_FILE_BYTES + 1)  # sparse: no disk, no time
    fifo_meta = write_completed_run(runs, "20261201T100004Z-fifome")
    (fifo_meta / RUN_JSON).unlink()
    os.mkfifo(fifo_meta / RUN_JSON)  # nothing says what the run was: skipped whole
    code, report = _store_check(runs, capsys)
    assert code == 1 and report["error"] is None
    reasons = {Path(p["run_dir"]).name: p["reason"] for p in report["problems"]}
    assert "a character device, not a regular file" in reasons["20261201T100001Z-devzer"]
    assert "a FIFO (named pipe), not a regular file" in reasons["20261201T100002Z-fifo00"]
    assert f"more than the {MAX_LINES_FILE_BYTES:,} allowed" in reasons["20261201T100003Z-sparse"]
    assert "a FIFO (named pipe)" in reasons["20261201T100004Z-fifome"]
    assert report["runs"] == 4  # each of those runs' metadata and metrics are kept
    # the one reader and diagnose say the same, at once
    run = read_run_dir(fifo)
    assert not run.requests and "FIFO" in str(run.problems[0])
    proc = run_cli("benchmarks_runner", "diagnose", str(zero), "--no-predict", timeout_s=PATIENT_S)
    no_traceback(proc)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "sparse"])
@pytest.mark.parametrize("fmt", ["vllm", "guidellm", "aiperf"])
def test_an_import_of_a_special_or_huge_file_is_refused_at_once(
    kind: str, fmt: str, tmp_path: Path
) -> None:
    path = tmp_path / ("profile_export.jsonl" if fmt == "aiperf" else "result.json")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        with path.open("wb") as handle:
            handle.truncate(MAX_IMPORT_BYTES + 1)
    with pytest.raises(ImportFormatError) as err:
        read_file(fmt, path)
    expected = {
        "fifo": "not a regular file",
        "dev-zero": "not a regular file",
        "sparse": f"more than the {MAX_IMPORT_BYTES:,} allowed",
    }[kind]
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_a_plan_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "plan.json"
    os.mkfifo(fifo)
    args = ["import", "--format", "vllm", str(VLLM), "--plan", str(fifo), "--runs-dir",
            str(tmp_path / "runs")]  # fmt: skip
    proc = run_cli("benchmarks_runner", *args, timeout_s=PATIENT_S)
    no_traceback(proc)
    assert proc.returncode == 2 and "a FIFO (named pipe), not a regular file" in proc.stderr


def test_a_huge_metrics_page_is_not_read_and_a_long_one_is_cut(
    fault_server: Callable[..., FaultServer],
) -> None:
    """A page past MAX_GET_BYTES is refused unread; one of many samples keeps the first ones."""
    huge = fault_server("none", "--metrics-samples", str(MAX_GET_BYTES // 40 + 1000))
    long = fault_server("none", "--metrics-samples", "20000")

    async def scrape(base_url: str) -> tuple[MetricsScraper, list[list[MetricSample]]]:
        written: list[list[MetricSample]] = []
        async with EndpointClient(base_url) as client:
            scraper = MetricsScraper(client, "/metrics", lambda: 0.0, written.append)
            await scraper.scrape_once()
            with pytest.raises(ResponseTooLarge):
                await client.get("/metrics", max_bytes=1000)
        return scraper, written

    scraper, written = asyncio.run(scrape(huge.base_url))
    assert written == [] and scraper.stats.scrapes_failed == 1
    assert f"more than {MAX_GET_BYTES:,} bytes" in (scraper.stats.last_error or "")
    scraper, written = asyncio.run(scrape(long.base_url))
    assert [len(w) for w in written] == [MAX_SAMPLES_PER_SCRAPE]
    assert "20,000 wanted samples" in (scraper.stats.last_error or "")


# ----- 3. linear-time scrubbing -------------------------------------------------------------
def _unbounded_backtracking_repeats(pattern: re.Pattern[str]) -> list[str]:
    """Greedy or lazy repeats without an upper bound (what backtracks): possessive ones and
    bounded ones are fine."""
    import re._constants as c  # the standard library's own parser of patterns
    import re._parser as parser

    found: list[str] = []

    def walk(items: object) -> None:
        for op, arg in items:  # type: ignore[attr-defined]
            if op in (c.MAX_REPEAT, c.MIN_REPEAT) and arg[1] == c.MAXREPEAT:
                found.append(str(op))
            for sub in arg if isinstance(arg, tuple | list) else ():
                if isinstance(sub, parser.SubPattern):
                    walk(sub)
                elif isinstance(sub, list):
                    for branch in sub:
                        if isinstance(branch, parser.SubPattern):
                            walk(branch)

    walk(parser.parse(pattern.pattern, pattern.flags))
    return found


def test_scrubbing_is_linear_on_megabyte_inputs() -> None:
    """The construct first (no unbounded backtracking repeat; a URL's scheme starts only where
    a run of scheme characters starts), then the result on hostile megabytes. The time is
    printed by benchmarks/scrub_bench.py, not asserted."""
    patterns = [credentials._USER_INFO, *credentials._PATTERNS]
    assert {p.pattern: _unbounded_backtracking_repeats(p) for p in patterns} == {
        p.pattern: [] for p in patterns
    }
    assert credentials._USER_INFO.pattern.startswith("(?<![a-zA-Z0-9+.-])")
    secret = "http://user:pw@host/x"
    cases = {
        "letters": "a" * 1_000_000,
        "schemes": "a://" * 250_000,
        "after a scheme": "http://" + "a" * 1_000_000,
        "short keys": "sk-abc " * 150_000,
        "a header of spaces": "authorization" + " " * 1_000_000,
    }
    scrubber = credentials.Scrubber(["hunter2-secret"])
    for name, text in cases.items():
        assert scrubber.text(text + " " + secret) == text + " http://host/x", name
    assert strip_user_info("x" * 500_000 + secret) == "x" * 500_000 + "http://host/x"
    assert scrubber.text("Authorization: Bearer abcdefghijkl") == "Authorization: <redacted>"


# ----- 5. importers ------------------------------------------------------------------------
def _aiperf_lines() -> list[dict]:
    return [json.loads(line) for line in AIPERF.read_text().splitlines() if line.strip()]


def _write_aiperf(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_importers_refuse_negative_times_and_a_token_after_the_end(tmp_path: Path) -> None:
    vllm = json.loads(VLLM.read_text())
    cases: dict[str, tuple[str, Path, str]] = {}

    first_after_end = dict(vllm, ttfts=list(vllm["ttfts"]))
    first_after_end["ttfts"][3] = vllm["latencies"][3] + 1.0
    cases["vllm first token after the end"] = ("vllm", first_after_end, "request 3: first_chunk_s")
    negative_queue = dict(vllm, queue_times=list(vllm["queue_times"]))
    negative_queue["queue_times"][5] = -2.0
    cases["vllm negative queue time"] = ("vllm", negative_queue, "queue_times.5=-2.0")
    cases["vllm infinite p99"] = ("vllm", dict(vllm, p99_ttft_ms=float("inf")), "p99_ttft_ms=inf")
    cases["vllm negative duration"] = ("vllm", dict(vllm, duration=-29.7), "duration=-29.7")

    guidellm = json.loads(GUIDELLM.read_text())
    timings = guidellm["benchmarks"][0]["requests"]["successful"][2]["info"]["timings"]
    for key in ("first_token_iteration", "first_output_token_iteration", "last_token_iteration"):
        timings[key] = timings["request_end"] + 1.0
    cases["guidellm first token after the end"] = ("guidellm", guidellm, "after request_end")
    guidellm = json.loads(GUIDELLM.read_text())
    timings = guidellm["benchmarks"][0]["requests"]["successful"][4]["info"]["timings"]
    timings["scheduled_at"] = timings["request_start"] + 5.0
    cases["guidellm negative queue time"] = ("guidellm", guidellm, "a negative queue time")

    for name, (fmt, data, needle) in cases.items():
        path = tmp_path / f"{fmt}.json"
        path.write_text(json.dumps(data))
        with pytest.raises(ImportFormatError) as err:
            read_file(fmt, path)
        assert needle in str(err.value) and "\n" not in str(err.value), (name, str(err.value))

    lines = _aiperf_lines()
    lines[2]["metadata"]["request_end_ns"] = lines[2]["metadata"]["request_start_ns"] - 10**9
    lines[2]["error"] = {"code": 500, "type": "x", "message": "y"}
    with pytest.raises(ImportFormatError, match=r"line 3\b.*a negative duration"):
        read_file("aiperf", _write_aiperf(tmp_path / "neg.jsonl", lines))
    lines = _aiperf_lines()
    lines[4]["metadata"]["credit_issued_ns"] = lines[4]["metadata"]["request_start_ns"] + 10**9
    with pytest.raises(ImportFormatError, match="a negative queue time"):
        read_file("aiperf", _write_aiperf(tmp_path / "queue.jsonl", lines))


def test_an_import_with_many_bad_rows_says_so_in_one_line(tmp_path: Path) -> None:
    lines = _aiperf_lines()
    for line in lines:  # every request is issued a second after it started
        line["metadata"]["credit_issued_ns"] = line["metadata"]["request_start_ns"] + 10**9
    path = _write_aiperf(tmp_path / "all-bad.jsonl", lines)
    with pytest.raises(ImportFormatError) as err:
        read_file("aiperf", path)
    message = str(err.value)
    assert "\n" not in message and "validation errors" not in message
    assert f"({len(lines):,} of {len(lines):,} requests refused; the first is named)" in message
    assert re.search(r"line \d+: scheduled_s=1\.0: after start_s=0\.0 \(a negative queue", message)


def test_a_value_checked_outside_the_importers_rules_is_one_line_too(tmp_path: Path) -> None:
    """GuideLLM's backend from the report's spec (numbers where names belong): one line."""
    data = json.loads(GUIDELLM.read_text())
    data["benchmarks"][0]["config"].pop("backend", None)
    data["config"]["spec"]["backend"] = {"model": 123, "target": ["x"]}
    path = tmp_path / "guidellm.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ImportFormatError) as err:
        read_file("guidellm", path)
    message = str(err.value)
    assert "\n" not in message and "validation error" not in message
    assert "(2 problems; the first is named)" in message and "Input should be" in message


@pytest.mark.parametrize("fmt", ["vllm", "guidellm", "aiperf"])
def test_json_nested_200000_deep_is_a_clean_error(fmt: str, tmp_path: Path) -> None:
    path = tmp_path / ("profile_export.jsonl" if fmt == "aiperf" else "deep.json")
    path.write_text("[" * 200_000 + "]" * 200_000 + "\n")
    with pytest.raises(ImportFormatError, match="nested too deeply"):
        read_file(fmt, path)
    if fmt == "vllm":  # the command line says the same in one line
        proc = run_cli("benchmarks_runner", "import", "--format", fmt, str(path), "--runs-dir",
                       str(tmp_path / "runs"))  # fmt: skip
        no_traceback(proc)
        assert proc.returncode == 2 and "nested too deeply" in proc.stderr


def test_a_deep_run_json_is_quarantined_not_a_stopped_ingestion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    write_completed_run(runs, "20261201T100000Z-clean0")
    deep = write_completed_run(runs, "20261201T100001Z-deep00")
    (deep / RUN_JSON).write_text("[" * 200_000 + "]" * 200_000)
    code, report = _store_check(runs, capsys)
    assert code == 1 and report["error"] is None and report["runs"] == 1
    (problem,) = report["problems"]
    assert "nested too deeply" in problem["reason"]


# ----- 6. endpoint URLs ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://169.254.0.1:8000", "link-local"),
        ("http://[fe80::1]:8000", "link-local"),
        ("http://[fe80::1%25eth0]:8000", "link-local"),
        ("http://[::ffff:169.254.169.254]/", "link-local"),
        ("http://2852039166/", "link-local"),  # 169.254.169.254 as one number
        ("http://0xa9fea9fe/", "link-local"),
        ("http://metadata.google.internal/computeMetadata/v1", "metadata"),
        ("http://METADATA.google.internal./", "metadata"),
        ("http://[fd00:ec2::254]/", "metadata"),
        ("http://100.100.100.200/", "metadata"),
        ("http://host:8000/?x=1", "no ? or #"),
        ("http://host:8000/#frag", "no ? or #"),
        ("http://host:8000/v1?", "no ? or #"),
        ("http://host:8000/a/../admin", "no . or .."),
        ("http://host:8000/%2e%2e/admin", "no . or .."),
    ],
)
def test_internal_addresses_and_urls_that_redirect_requests_are_refused(
    url: str, needle: str
) -> None:
    with pytest.raises(InvalidInputError) as err:
        parse_endpoint_url(url, "--base-url")
    assert needle in str(err.value) and str(err.value).startswith("--base-url=")


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8000", "http://localhost:8000/", "http://[::1]:9/prefix", "http://10.1.2.3",
     "https://api.example.com/serving", "http://0.0.0.0:8000"],
)  # fmt: skip
def test_loopback_private_and_public_endpoints_still_parse(url: str) -> None:
    assert parse_endpoint_url(url).url == url


def test_the_runner_refuses_a_metadata_endpoint_before_any_request(tmp_path: Path) -> None:
    proc = run_cli("benchmarks_runner", *runner_args("http://169.254.169.254", tmp_path / "r"))
    no_traceback(proc)
    assert proc.returncode == 2 and "link-local" in proc.stderr.splitlines()[-1]
    assert not (tmp_path / "r").exists()


def test_a_name_that_resolves_to_a_metadata_address_is_not_connected_to(
    fault_server: Callable[..., FaultServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name is only known when a request resolves it. No test machine's DNS answers with
    169.254.169.254, so that answer is given in place of the system resolver's (a stand-in);
    a name that resolves to loopback (localhost, the real resolver) keeps working."""
    server = fault_server("none")
    port = server.base_url.rsplit(":", 1)[1]

    async def go() -> int:
        async with EndpointClient(f"http://localhost:{port}") as client:
            status, _, _ = await client.get("/v1/models")
        loop = asyncio.get_running_loop()

        async def metadata_answer(host: str, port: int, **_: object) -> list[tuple]:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", port))]

        monkeypatch.setattr(loop, "getaddrinfo", metadata_answer)
        async with EndpointClient("http://servewise-test.invalid:80") as client:
            with pytest.raises(
                EndpointUnreachable, match=r"resolves to 169\.254\.169\.254, a link"
            ):
                await client.get("/v1/models")
        return status

    assert asyncio.run(go()) == 200


# ----- 4. signals while the runner probes a slow endpoint -----------------------------------
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_while_probing_a_slow_endpoint_exits_at_once_with_its_code(
    sig: signal.Signals, code: int, fault_server: Callable[..., FaultServer], tmp_path: Path
) -> None:
    # the probe stalls past the patience: a run that ends within it was ended by the signal
    stall_s = 3 * PATIENT_S
    server = fault_server("slow-probe", "--stall-s", str(stall_s))
    runs = tmp_path / "runs"
    args = runner_args(server.base_url, runs, "--read-timeout-s", str(2 * stall_s))
    proc = start_cli("benchmarks_runner", *args)
    try:
        deadline = time.monotonic() + PATIENT_S
        while not list(runs.glob("*/run.json")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # the preflight, then the first probe, which waits (either is checking)
        os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=PATIENT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err
    assert proc.returncode == code, err
    last = err.strip().splitlines()[-1]
    assert last == f"error: cancelled by {sig.name}; rows collected so far are kept"
    (run_dir,) = runs.iterdir()
    meta = json.loads((run_dir / RUN_JSON).read_text())
    assert meta["status"] == "cancelled" and "before the first request" in meta["error"]


def _sigterm_once_open(proc: subprocess.Popen[str], path: Path) -> bool:
    """SIGTERM to ``proc`` as soon as it holds ``path`` open (True), or after the patience."""
    fds = Path(f"/proc/{proc.pid}/fd")
    deadline = time.monotonic() + PATIENT_S
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError):  # a descriptor closed while listed
            if any(os.readlink(fd) == str(path) for fd in fds.iterdir()):
                os.kill(proc.pid, signal.SIGTERM)
                return True
        time.sleep(0.001)
    os.kill(proc.pid, signal.SIGTERM)
    return False


def test_sigterm_while_a_trace_is_read_ends_the_run_cancelled_with_run_json_and_143(
    fault_server: Callable[..., FaultServer], tmp_path: Path
) -> None:
    # a trace of 600,000 requests takes seconds to read: the signal lands while it is read
    # (before: the default action, no run.json and no exit code of the runner's)
    trace = tmp_path / "trace.jsonl"
    line = '{{"timestamp": {t}, "input_length": 64, "output_length": 4, "hash_ids": [1, 2, 3]}}\n'
    with trace.open("w") as out:
        out.writelines(line.format(t=i) for i in range(600_000))
    server = fault_server("none")
    runs = tmp_path / "runs"
    proc = start_cli(
        "benchmarks_runner", "run", "--base-url", server.base_url, "--model", "fault-model",
        "--trace", str(trace), "--trace-format", "mooncake", "--runs-dir", str(runs),
        "--no-progress",
    )  # fmt: skip
    try:
        caught_reading = _sigterm_once_open(proc, trace.resolve())
        out, err = proc.communicate(timeout=PATIENT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert caught_reading, "the trace was never seen open: the signal missed the phase"
    assert "Traceback" not in err
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == (
        "error: cancelled by SIGTERM; rows collected so far are kept"
    )
    (run_dir,) = runs.iterdir()
    meta = json.loads((run_dir / RUN_JSON).read_text())
    assert meta["status"] == "cancelled"
    assert meta["error"] == (
        "cancelled by SIGTERM before the first request (while reading the trace); nothing measured"
    )
    assert meta["model"] == "fault-model" and meta["endpoint"]["base_url"] == server.base_url
    assert read_run_dir(run_dir).requests == []


def test_a_signal_during_the_imports_still_ends_a_run_with_run_json_and_its_code(
    tmp_path: Path,
) -> None:
    # the runner's modules take a second or more to import: a signal then is kept for the run.
    # Sent at once, it lands during the imports (or, on a fast machine, just after: the same
    # outcome is required either way)
    runs = tmp_path / "runs"
    proc = start_cli(
        "benchmarks_runner", "run", "--base-url", "http://127.0.0.1:9", "--model", "m",
        "--input-len", "8", "--output-len", "4", "--num-requests", "4", "--runs-dir", str(runs),
        "--no-progress",
    )  # fmt: skip
    try:
        # the interpreter starts before __main__ can take the signal over: wait for pydantic's
        # compiled core, which the command's imports load after __main__ has, then signal
        deadline = time.monotonic() + PATIENT_S
        maps = Path(f"/proc/{proc.pid}/maps")
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(OSError):
                if "_pydantic_core" in maps.read_text():
                    break
            time.sleep(0.001)
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=PATIENT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err
    assert proc.returncode == 143, err
    (run_dir,) = runs.iterdir()
    meta = json.loads((run_dir / RUN_JSON).read_text())
    assert meta["status"] == "cancelled" and "before the first request" in meta["error"]
