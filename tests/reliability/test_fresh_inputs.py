"""Bad inputs of the issue's classes that it did not list, found by probing (each failed before):
a request header with a line break, a request body with an infinite number, a CSV whose header
names a column twice, a price dated in the future, a run id no page or table can show. Each is
refused naming the field and the value, the rest kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks_runner.cli import main as runner_main
from planner.catalog import load_catalog
from planner.catalog.user_files import stage_table_upload
from planner.errors import CatalogError
from planner.ingest import ingest
from planner.run_files import RUN_JSON
from planner.store import Store
from tests.planner.test_ingest import write_completed_run

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
