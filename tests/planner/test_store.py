"""The DuckDB store: real database files, migrations, catalog sync, run ingestion."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from planner.catalog import Catalog, MeasuredResult
from planner.store import MIGRATIONS, Store, open_store


def _table_snapshot(store: Store) -> dict[str, int]:
    tables = store.query("SELECT table_name FROM information_schema.tables ORDER BY 1")
    return {
        name: int(store.query(f"SELECT count(*) AS n FROM {name}")["n"][0])
        for name in tables["table_name"]
    }


def test_migrations_run_twice_leave_the_database_unchanged(
    tmp_path: Path, catalog: Catalog
) -> None:
    db = tmp_path / "sw.duckdb"
    store = Store(db)
    store.sync_catalog(catalog)
    before = _table_snapshot(store)
    assert store.migrate() == []
    assert store.schema_version() == MIGRATIONS[-1][0]
    store.close()
    reopened = Store(db)  # migrate() runs again on open
    assert _table_snapshot(reopened) == before
    assert reopened.sync_catalog(catalog) is False  # unchanged catalog: nothing reloaded
    reopened.close()


def test_catalog_is_loaded_on_first_start(tmp_path: Path, catalog: Catalog) -> None:
    store = Store(tmp_path / "sw.duckdb")
    assert store.sync_catalog(catalog) is True
    counts = _table_snapshot(store)
    assert counts["catalog_gpus"] == len(catalog.gpus)
    assert counts["catalog_prices"] == len(catalog.prices)
    assert counts["catalog_models"] == len(catalog.models)
    assert counts["measured_results"] == len(catalog.measured) == 1395
    assert len(store.measured_results()) == 1395

    # the columns added after the first schema come back as stored
    def layouts(rows: list[MeasuredResult]) -> list[tuple[object, ...]]:
        return sorted(
            (m.source_ref or "", m.model, m.gpu, m.input_len, m.output_len,
             m.data_parallel_size, bool(m.enable_expert_parallel), m.notes or "")
            for m in rows
            if m.data_parallel_size
        )  # fmt: skip

    stored = layouts(store.measured_results())
    assert stored and stored == layouts(list(catalog.measured))
    assert {row[5] for row in stored} == {2, 4, 8} and any(row[6] for row in stored)
    # and the KV cache dtype (schema 6): the rows that ran an FP8 cache keep saying so
    fp8 = sorted(m.source_ref or "" for m in store.measured_results() if m.kv_cache_dtype)
    # ROCm recipes 2, vLLM PR 43232, CloudRift GLM-4.6-FP8 and Kimi, MLPerf v4.1 and v5.0's 15,
    # the sglang docs' 6 MiniMax-M2.7 MI300X rows (fp8_e4m3)
    assert len(fp8) == 3 + 23 + 19 + 15 + 6
    assert fp8 == sorted(m.source_ref or "" for m in catalog.measured if m.kv_cache_dtype)

    # and the prompts a run repeated from an earlier one on its server (schema 8): the SGLang
    # cookbook's Qwen3-235B and GLM-4.6 summarization runs at concurrency 16 and 64, and
    # tt-inference-server's two concurrency-1 tables, whole or their first tokens
    def warm(rows: list[MeasuredResult]) -> list[tuple[str, int | None, int | None]]:
        return sorted((m.source_ref or "", m.warm_prompts, m.warm_prompt_tokens) for m in rows)

    stored_warm = warm(store.measured_results())
    assert stored_warm == warm(list(catalog.measured))
    assert sorted(w for _, w, _ in stored_warm if w is not None) == [2, 2, *[4] * 8, 10, 10, 80, 80]
    tokens = sorted(t for _, _, t in stored_warm if t)
    assert tokens == [128, 128, 1024, 1024, 2048, 2048, 3072, 3072]

    # and the runs without CUDA graphs (schema 9): dstack's nine TensorRT-LLM 0.17 serve rows
    eager = sorted(m.source_ref or "" for m in store.measured_results() if m.enforce_eager)
    assert len(eager) == 9 and all("dstackai/benchmarks" in ref for ref in eager)
    assert eager == sorted(m.source_ref or "" for m in catalog.measured if m.enforce_eager)


def write_run(
    runs_dir: Path,
    run_id: str,
    *,
    status: str = "completed",
    torn: bool = False,
    requests: int = 40,
    failed: int = 1,
) -> Path:
    """A run directory as benchmarks_runner writes it (format in benchmarks_runner/run_files.py)."""
    run_dir = runs_dir / run_id
    run_dir.mkdir(parents=True)
    meta = {
        "run_id": run_id,
        "status": status,
        "started_at": "2026-11-29T10:00:00Z",
        "finished_at": "2026-11-29T10:01:00Z",
        "endpoint": {"base_url": "http://127.0.0.1:8000", "api": "completions"},
        "model": "meta-llama/Llama-3.1-70B-Instruct",
        "simulated": True,
        "config": {"concurrency": 4, "num_requests": 3, "input_len": 2048, "output_len": 512},
        "plan": {
            "engine": "vllm",
            "model": "meta-llama/Llama-3.1-70B-Instruct",
            "precision": "bf16",
            "gpu": "L40S",
            "num_gpus": 4,
            "tp": 4,
            "pp": 1,
            "instance": "g6e.12xlarge",
            "nodes": 1,
        },
        "summary": {
            "output_throughput": 100.0,
            "total_token_throughput": 500.0,
            "median_ttft_ms": 900.0,
            "median_tpot_ms": 150.0,
        },
        "self_checks": [],
        "error": None,
    }
    (run_dir / "run.json").write_text(json.dumps(meta))
    lines = []
    for i in range(requests):
        lines.append(
            json.dumps(
                {
                    "request_id": f"r{i}",
                    "request_index": i,
                    "warmup": False,
                    "start_s": i * 0.1,
                    "first_chunk_s": i * 0.1 + 0.9,
                    "first_content_s": i * 0.1 + 0.9,
                    "end_s": i * 0.1 + 5.0,
                    "chunk_times_s": [0.9, 1.05, 1.2],
                    "chunk_tokens": [1, 2, 1],
                    "prompt_tokens": 2048,
                    "output_tokens": 512,
                    "input_len_target": 2048,
                    "output_len_target": 512,
                    "status": "error" if i < failed else "ok",
                    "http_status": 503 if i < failed else 200,
                    "error": "HTTP 503" if i < failed else None,
                }
            )
        )
    text = "\n".join(lines) + "\n"
    if torn:
        text += '{"request_id": "r3", "start_s'  # the writer died mid-line
    (run_dir / "requests.jsonl").write_text(text)
    (run_dir / "server_metrics.jsonl").write_text(
        json.dumps({"t_s": 1.0, "name": "vllm:kv_cache_usage_perc", "labels": {}, "value": 0.4})
        + "\n"
    )
    return run_dir


def test_runs_are_ingested_once_and_again_when_they_grow(tmp_path: Path, catalog: Catalog) -> None:
    runs = tmp_path / "runs"
    write_run(runs, "20261129T100000Z-aaaaaa", torn=True)
    store = Store(tmp_path / "sw.duckdb")
    store.sync_catalog(catalog)
    assert store.ingest_runs(runs) == ["20261129T100000Z-aaaaaa"]
    assert store.ingest_runs(runs) == []  # unchanged: nothing to do
    requests = store.run_requests("20261129T100000Z-aaaaaa")
    assert len(requests) == 40  # the torn last line is skipped, the rest kept
    failed = requests[requests.status == "error"]
    assert failed.error.tolist() == ["HTTP 503"]
    assert list(requests.chunk_tokens[0]) == [1, 2, 1]
    user = [m for m in store.measured_results() if m.origin == "user"]
    assert len(user) == 1 and user[0].simulated and user[0].gpu == "L40S"
    assert user[0].num_requests == 39  # only the successful, non-warm-up requests
    with (runs / "20261129T100000Z-aaaaaa" / "server_metrics.jsonl").open("a") as handle:
        handle.write(
            json.dumps({"t_s": 2.0, "name": "vllm:num_requests_running", "value": 3}) + "\n"
        )
    assert store.ingest_runs(runs) == ["20261129T100000Z-aaaaaa"]
    assert len(store.run_server_samples("20261129T100000Z-aaaaaa")) == 2
    assert len([m for m in store.measured_results() if m.origin == "user"]) == 1


def test_unfinished_run_is_stored_but_not_used_for_calibration(
    tmp_path: Path, catalog: Catalog
) -> None:
    runs = tmp_path / "runs"
    write_run(runs, "20261129T110000Z-bbbbbb", status="cancelled")
    (runs / "not-a-run").mkdir()  # no run.json: ignored
    store = Store(None)
    store.sync_catalog(catalog)
    assert store.ingest_runs(runs) == ["20261129T110000Z-bbbbbb"]
    assert store.runs().status.tolist() == ["cancelled"]
    assert [m for m in store.measured_results() if m.origin == "user"] == []


def test_parquet_directory_shares_measured_results(tmp_path: Path, catalog: Catalog) -> None:
    runs = tmp_path / "runs"
    write_run(runs, "20261129T120000Z-cccccc")
    first = Store(tmp_path / "a.duckdb")
    first.sync_catalog(catalog)
    first.ingest_runs(runs)
    team_dir = tmp_path / "team"
    first.export_parquet(team_dir)
    second = Store(tmp_path / "b.duckdb", parquet_dir=team_dir)
    second.sync_catalog(catalog)
    shared = [m for m in second.measured_results() if m.origin == "user"]
    assert [m.run_id for m in shared] == ["20261129T120000Z-cccccc"]


def test_store_is_safe_under_threads(tmp_path: Path, catalog: Catalog) -> None:
    store = Store(tmp_path / "sw.duckdb")
    store.sync_catalog(catalog)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                assert len(store.query("SELECT * FROM catalog_gpus")) == len(catalog.gpus)
                store.measured_results(include_user=False)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors


def test_second_process_falls_back_to_an_in_memory_store(tmp_path: Path, catalog: Catalog) -> None:
    db = tmp_path / "held.duckdb"
    holder = Store(db)
    holder.sync_catalog(catalog)
    runs = tmp_path / "runs"
    write_run(runs, "20261129T130000Z-dddddd")
    code = (
        "from pathlib import Path; from planner.store import open_store;"
        f"s = open_store(Path({str(db)!r}), runs_dir=Path({str(runs)!r}));"
        "print(s.path, len(s.measured_results()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["None", "1396"]  # in-memory, 1395 public + the run
    holder.close()
    store = open_store(db, runs_dir=runs)
    assert store.path == db
    assert len(store.measured_results()) == 1396


def test_a_run_with_many_failures_is_kept_but_not_calibrated_on(
    tmp_path: Path, catalog: Catalog
) -> None:
    runs = tmp_path / "runs"
    write_run(runs, "20261129T140000Z-eeeeee", requests=40, failed=10)
    store = Store(None)
    store.sync_catalog(catalog)
    assert store.ingest_runs(runs) == ["20261129T140000Z-eeeeee"]
    assert len(store.run_requests("20261129T140000Z-eeeeee")) == 40
    assert [m for m in store.measured_results() if m.origin == "user"] == []
