"""The run-file contract: one writer, one reader, one rule for torn and bad lines, stable keys."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from planner.errors import RunFilesError
from planner.run_files import (
    REQUESTS_JSONL,
    MetricSample,
    RequestRecord,
    RunWriter,
    new_run_id,
    read_run_dir,
)


def _record(i: int, **changes: object) -> RequestRecord:
    values: dict[str, object] = {
        "request_id": f"r{i}",
        "request_index": i,
        "start_s": 0.1 * i,
        "first_chunk_s": 0.1 * i + 0.05,
        "first_content_s": 0.1 * i + 0.05,
        "end_s": 0.1 * i + 0.5,
        "chunk_times_s": [0.1 * i + 0.05, 0.1 * i + 0.5],
        "chunk_tokens": [1, 1],
        "prompt_tokens": 64,
        "output_tokens": 2,
        "input_len_target": 64,
        "output_len_target": 2,
        "status": "ok",
        "http_status": 200,
    }
    values.update(changes)
    return RequestRecord.model_validate(values)


def _written_run(tmp_path: Path) -> RunWriter:
    writer = RunWriter(tmp_path)
    writer.write_meta(model="m", summary={"x": float("nan")})
    writer.append_requests([_record(0), _record(1, scheduled_s=0.05)])
    writer.append_metric_samples([MetricSample(t_s=0.1, name="n", value=1.0)])
    writer.close()
    return writer


def test_what_is_written_reads_back_exactly(tmp_path: Path) -> None:
    writer = _written_run(tmp_path)
    run = read_run_dir(writer.dir)
    assert run.requests == [_record(0), _record(1, scheduled_s=0.05)]
    assert run.server_metrics == [MetricSample(t_s=0.1, name="n", value=1.0)]
    assert run.meta["summary"] == {"x": None} and run.meta["status"] == "running"
    assert run.problems == [] and not list(writer.dir.glob("*.tmp"))
    assert len(writer.run_id.split("-")[1]) == 6 and new_run_id().count("-") == 1


def test_every_line_has_every_key_in_one_order(tmp_path: Path) -> None:
    """Stable keys, so DuckDB's read_json (and any reader) sees one schema."""
    writer = _written_run(tmp_path)
    lines = (writer.dir / REQUESTS_JSONL).read_text().splitlines()
    keys = [list(json.loads(line)) for line in lines]
    assert keys[0] == keys[1] == list(RequestRecord.model_fields)
    path = (writer.dir / REQUESTS_JSONL).as_posix()
    rows = duckdb.sql(
        f"SELECT request_id, scheduled_s, chunk_times_s FROM read_json('{path}') ORDER BY 1"
    ).fetchall()
    assert rows == [("r0", None, [0.05, 0.5]), ("r1", 0.05, [0.15000000000000002, 0.6])]


def test_a_torn_last_line_is_skipped_and_everything_before_it_kept(tmp_path: Path) -> None:
    writer = _written_run(tmp_path)
    with (writer.dir / REQUESTS_JSONL).open("a") as fh:
        fh.write('{"request_id": "r2", "tor')  # the writer was killed mid-line
    run = read_run_dir(writer.dir)
    assert [r.request_id for r in run.requests] == ["r0", "r1"]
    assert [p.kind for p in run.problems] == ["torn"]
    assert "requests.jsonl line 3" in str(run.problems[0])


def test_a_bad_line_is_named_and_the_lines_after_it_are_kept(tmp_path: Path) -> None:
    writer = _written_run(tmp_path)
    good = _record(3).model_dump(mode="json")
    lines = [
        json.dumps(good | {"request_id": "bad-type", "start_s": "abc"}),
        "not json at all",
        json.dumps(good | {"request_id": "bad-string-number", "output_tokens": "ten"}),
        json.dumps(good | {"request_id": "ok-missing-first", "first_chunk_s": None}),
        json.dumps(good),
    ]
    with (writer.dir / REQUESTS_JSONL).open("a") as fh:
        fh.write("\n".join(lines) + "\n")
    run = read_run_dir(writer.dir)
    assert [r.request_id for r in run.requests] == ["r0", "r1", "r3"]
    named = [(p.line, p.field, p.value) for p in run.problems]
    assert named[0] == (3, "start_s", "abc")
    assert named[1][0] == 4 and run.problems[1].kind == "invalid"  # invalid JSON mid-file
    assert named[2] == (5, "output_tokens", "ten")
    assert named[3][0] == 6 and "first output chunk" in run.problems[3].reason


def test_a_run_without_a_readable_run_json_says_so(tmp_path: Path) -> None:
    with pytest.raises(RunFilesError, match=r"no run\.json"):
        read_run_dir(tmp_path / "nope")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.json").write_text("[1, 2")
    with pytest.raises(RunFilesError, match="not readable JSON"):
        read_run_dir(tmp_path / "broken")


def test_records_refuse_what_no_request_can_be() -> None:
    with pytest.raises(ValueError, match="before start_s"):
        _record(1, end_s=0.0)
    with pytest.raises(ValueError, match="finite"):
        _record(1, start_s=float("nan"))
