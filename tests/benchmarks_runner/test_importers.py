"""Importers of vllm bench serve, GuideLLM and AIPerf results (fixtures: see fixtures/README)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks_runner import import_file
from benchmarks_runner.errors import ImportFormatError
from tests.run_view import read_run

from .conftest import FIXTURES


def test_import_vllm_detailed(tmp_path: Path) -> None:
    (run_dir,) = import_file("vllm", FIXTURES / "vllm_result.json", tmp_path)
    data = read_run(run_dir)
    run, rows = data["run"], data["requests"]
    assert run["model"] == "meta-llama/Llama-3.1-8B-Instruct" and run["endpoint"]["api"] == "chat"
    assert run["started_at"] == "2026-11-29T12:00:00Z"
    assert [r["status"] for r in rows] == ["ok", "ok", "error", "ok"]
    assert "ServerDisconnectedError" in rows[2]["error"]
    assert rows[1]["start_s"] == pytest.approx(0.1)
    assert rows[3]["chunk_times_s"] == pytest.approx([0.39, 0.40, 0.43, 0.45, 0.47])
    s = run["summary"]
    # recomputed from the rows, and equal to the file's own aggregates
    assert s["completed"] == 3 and s["failed"] == 1 and s["duration"] == 0.5
    assert s["mean_ttft_ms"] == pytest.approx(50.0)
    assert s["p99_itl_ms"] == pytest.approx(data["result"]["p99_itl_ms"])


def test_import_guidellm(tmp_path: Path) -> None:
    (run_dir,) = import_file("guidellm", FIXTURES / "guidellm_benchmarks.json", tmp_path)
    data = read_run(run_dir)
    run, rows = data["run"], data["requests"]
    assert (
        run["model"] == "Qwen/Qwen3-0.6B" and run["endpoint"]["base_url"] == "http://localhost:8000"
    )
    assert run["config"]["imported_from"]["chunk_times_interpolated"] is True
    assert run["config"]["concurrency"] == 2
    statuses = {r["request_id"]: r["status"] for r in rows}
    assert statuses == {"g-1": "ok", "g-2": "ok", "g-3": "error", "g-4": "error"}
    g2 = next(r for r in rows if r["request_id"] == "g-2")
    assert g2["chunk_times_s"] == pytest.approx([0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.95])
    assert g2["output_tokens"] == 7 and g2["prompt_tokens"] == 130
    s = run["summary"]
    assert s["completed"] == 2 and s["failed"] == 2 and s["duration"] == 2.0
    assert s["mean_ttft_ms"] == pytest.approx((100.0 + 150.0) / 2)


def test_import_aiperf(tmp_path: Path) -> None:
    (run_dir,) = import_file("aiperf", FIXTURES / "aiperf", tmp_path)
    data = read_run(run_dir)
    run, rows = data["run"], data["requests"]
    assert run["model"] == "Qwen/Qwen3-0.6B"
    assert [r["status"] for r in rows] == ["ok", "error", "ok"]
    assert rows[1]["http_status"] == 499 and "RequestCancellationError" in rows[1]["error"]
    assert rows[0]["chunk_times_s"] == pytest.approx([0.1, 0.15, 0.2, 0.25, 0.3])
    assert rows[2]["start_s"] == pytest.approx(0.2) and rows[2]["end_s"] == pytest.approx(0.6)
    s = run["summary"]
    assert s["completed"] == 2 and s["median_itl_ms"] == pytest.approx(65.0)
    assert s["mean_tpot_ms"] == pytest.approx((200.0 / 4 + 320.0 / 8) / 2)


def test_import_rejects_wrong_format(tmp_path: Path) -> None:
    with pytest.raises(ImportFormatError, match="not a GuideLLM"):
        import_file("guidellm", FIXTURES / "vllm_result.json", tmp_path)
    with pytest.raises(ImportFormatError, match="not a vllm bench serve"):
        import_file("vllm", FIXTURES / "guidellm_benchmarks.json", tmp_path)
    with pytest.raises(ImportFormatError, match="not registered"):
        import_file("locust", FIXTURES / "vllm_result.json", tmp_path)
