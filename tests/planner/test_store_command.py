"""``python -m planner store check``: lists what ingestion quarantined, exit 1 when anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import main
from tests.planner.test_ingest import write_completed_run


def test_a_clean_runs_folder_checks_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    write_completed_run(runs, "20261201T100000Z-clean0")
    assert main(["store", "check", "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "1 runs stored" in out and "nothing quarantined" in out


def test_a_poisoned_runs_folder_names_file_line_field_and_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    write_completed_run(runs, "20261201T100000Z-clean0")
    bad = write_completed_run(runs, "20261201T100001Z-poison")
    lines = (bad / "requests.jsonl").read_text().splitlines()
    record = json.loads(lines[3]) | {"start_s": "abc"}
    lines[3] = json.dumps(record)
    (bad / "requests.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["store", "check", "--runs-dir", str(runs)]) == 1
    out = capsys.readouterr().out
    assert "1 problems in 1 run directories" in out
    assert "20261201T100001Z-poison/requests.jsonl line 4, start_s=abc" in out
    assert main(["store", "check", "--runs-dir", str(runs), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["runs"] == 2 and report["ingested_now"] == 0  # nothing new the second time
    (problem,) = report["problems"]
    assert (problem["file"], problem["line"], problem["field"]) == ("requests.jsonl", 4, "start_s")
