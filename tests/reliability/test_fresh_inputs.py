"""Bad inputs of the issue's classes that it did not list, found by probing (each failed before):
a request header with a line break, a request body with an infinite number, a CSV whose header
names a column twice, a price dated in the future, a run id no page or table can show; a scrape
path that sends the scrape to another host, TLS files that are missing, special or no PEM, a
seed, a prefix group count or a length spread past what anything holds, a label with terminal
escapes; an endpoint that answers HTML, a whole JSON completion or an endless line. Each is
refused naming the field and the value, the rest kept."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks_runner.cli import main as runner_main
from planner.catalog import load_catalog
from planner.catalog.user_files import stage_table_upload
from planner.errors import CatalogError
from planner.ingest import ingest
from planner.run_files import RUN_JSON, read_run_dir
from planner.store import Store
from tests.patience import PATIENT_S
from tests.planner.test_ingest import write_completed_run
from tests.reliability.conftest import FaultServer, no_traceback, run_cli, runner_args

RUN = [
    "run", "--base-url", "http://127.0.0.1:9", "--model", "m", "--input-len", "8",
    "--output-len", "4", "--num-requests", "4", "--concurrency", "2", "--no-progress",
]  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--header", "X-Team=a\r\nX-Injected: 1"], "--header.X-Team="),
        (["--header", "X-Team=a\x00b"], "--header.X-Team="),
        (["--extra-body", '{"max_tokens": 1e400}'], "--extra-body.max_tokens=inf"),
        (["--extra-body", '{"a": [1, {"b": NaN}]}'], "--extra-body.a.1.b=nan"),
        (["--percentiles", "50,nan"], "--percentiles.1=nan"),
        # user info in the scrape path: the scrape, Authorization header and all, would go to
        # evil.test (base URL + path); a query or .. would scrape another page
        (["--metrics-path", "@evil.test/metrics"], "--metrics-path='@evil.test/metrics': "),
        (["--metrics-path", "/metrics?x=1"], "--metrics-path='/metrics?x=1': "),
        (["--metrics-path", "/a/../../metrics"], "--metrics-path='/a/../../metrics': "),
        # TLS files: an ssl error naming no option, after the run's files were written
        (["--ca-file", "/dev/zero"], "--ca-file='/dev/zero': not a regular file"),
        (["--ca-file", "/nonexistent/ca.pem"], "--ca-file='/nonexistent/ca.pem': no such file"),
        (["--client-cert", "/dev/null"], "--client-cert='/dev/null': not a regular file"),
        (["--ca-file", __file__], f"--ca-file={__file__!r}: cannot be loaded"),
        # past what a store's BIGINT holds, or what any request has; a spread that overflowed
        (["--seed", str(2**70)], f"--seed={2**70}: allowed >= 0 and <= {2**63 - 1}"),
        (["--prefix-groups", "100000000000"], "--prefix-groups=100000000000 is not allowed"),
        (["--input-dist", "lognormal", "--input-spread", "1e308"], "--input-spread=1e+308: "),
        (["--label", "ok\x1b[31mred"], "--label='ok\\x1b[31mred': "),
        (["--label", "x" * 201], "--label='xxx"),
    ],
)
def test_a_request_header_or_body_the_endpoint_would_misread_is_refused_by_its_option(
    flags: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the endpoint (port 9) is never reached: the configuration is refused first
    code = runner_main([*RUN, "--runs-dir", str(tmp_path / "runs"), *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith(f"error: {named}"), err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


PRICES = b"provider,instance,region,pricing,usd_per_hour,source,as_of\n"
ROW = b"aws,g6e.12xlarge,us-east-1,on_demand,7.5,negotiated rate (test),2026-11-01\n"


@pytest.mark.parametrize(
    ("body", "where"),
    [
        (
            b"provider,instance,region,pricing,usd_per_hour,usd_per_hour,source,as_of\n"
            b"aws,g6e.12xlarge,us-east-1,on_demand,7.5,0.5,x,2026-11-01\n",
            "prices.csv, row 1, field 'usd_per_hour': column given twice in the header",
        ),
        (
            PRICES + ROW.replace(b"2026-11-01", b"9999-12-31"),
            "prices.csv, row 2, field 'as_of': Value error, a date not after today",
        ),
    ],
)
def test_a_csv_that_would_be_misread_is_refused_naming_row_and_field(
    body: bytes, where: str, tmp_path: Path
) -> None:
    with pytest.raises(CatalogError) as refused:
        stage_table_upload(tmp_path, "prices", body, "prices.csv", load_catalog())
    assert str(refused.value).startswith(where), str(refused.value)
    assert not (tmp_path / "prices.csv").exists()
    staged = stage_table_upload(tmp_path, "prices", PRICES + ROW, "prices.csv", load_catalog())
    assert staged.replaced == 1  # the same row, well formed, is taken


@pytest.mark.parametrize("run_id", ["x" * 100_000, "run\x1b[31m-red", "a\nb"])
def test_a_run_id_no_page_can_show_skips_that_run_alone(run_id: str, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    good = write_completed_run(runs, "20261202T040000Z-good")
    bad = write_completed_run(runs, "20261202T040001Z-bad")
    meta = json.loads((bad / RUN_JSON).read_text())
    meta["run_id"] = run_id
    (bad / RUN_JSON).write_text(json.dumps(meta))
    store = Store(tmp_path / "store.duckdb")
    progress = ingest(store, runs)
    assert progress.error is None
    assert store.runs()["run_id"].tolist() == [good.name]
    problems = store.run_problems()
    (problem,) = problems.to_dict(orient="records")
    assert problem["field"] == "run_id" and "at most 200 characters" in problem["reason"]
    assert problem["run_dir"] == str(bad)
    store.close()


#: fault: what the run's error names (the answer was no event stream, or an endless line)
STREAM_FAULTS = {
    "html": "HTTP 200 with Content-Type text/html, not an event stream",
    "json": "HTTP 200 with Content-Type application/json, not an event stream",
    "huge-line": "malformed SSE chunk: an event of more than 16,000,000 bytes, unended",
}


@pytest.mark.parametrize("fault", list(STREAM_FAULTS))
def test_an_answer_that_is_no_event_stream_is_named_with_every_row_kept(
    fault: str, fault_server: Callable[..., FaultServer], tmp_path: Path
) -> None:
    """A proxy's login page or a server that does not stream was 'an empty stream'."""
    server = fault_server(fault, "--line-mb", "20")
    runs = tmp_path / "runs"
    # a read timeout of one patience: only the answer's shape may end a request
    args = runner_args(server.base_url, runs, "--read-timeout-s", str(PATIENT_S), requests=4)
    proc = run_cli("benchmarks_runner", *args, timeout_s=4 * PATIENT_S)
    no_traceback(proc)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    (run_dir,) = [p for p in runs.iterdir() if (p / RUN_JSON).is_file()]
    run = read_run_dir(run_dir)
    assert len(run.requests) == 4 and not run.problems
    assert {r.error for r in run.requests} == {
        next(r.error for r in run.requests if STREAM_FAULTS[fault] in (r.error or ""))
    }
    assert STREAM_FAULTS[fault] in str(run.meta["error"])


RECOMMEND = [
    "recommend", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--input-len", "512",
    "--output-len", "128", "--concurrency", "8", "--gpu", "L4",
]  # fmt: skip


@pytest.mark.parametrize("target", ["fifo", "/dev/full", "folder"])
@pytest.mark.parametrize("option", ["--csv", "--html", "--out"])
def test_an_output_file_that_cannot_be_written_whole_is_refused_before_the_search(
    target: str, option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A FIFO blocked the write forever once the search was over; /dev/full failed it with
    'file: No space left on device', naming neither option nor file."""
    import os

    from planner.cli import main as planner_main

    path = {"fifo": tmp_path / "out.csv", "folder": tmp_path}.get(target, Path(target))
    if target == "fifo":
        os.mkfifo(path)
    argv = (
        ["predict", "--scenarios", str(tmp_path / "none.csv"), "--out", str(path)]
        if option == "--out"
        else [*RECOMMEND, option, str(path)]
    )
    assert planner_main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {option}={path} is not allowed: a regular file to write"), line
