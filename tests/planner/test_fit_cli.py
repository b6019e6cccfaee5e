"""``python -m planner fit``: every layout as JSON, errors as one line and exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from planner.catalog import Catalog
from planner.cli import main
from tests.planner.test_architecture import LLAMA_3_8B
from tests.planner.test_layouts import build_catalog

ROOT = Path(__file__).resolve().parents[2]
LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"
REQUIRED = {
    "tp",
    "pp",
    "dp",
    "feasible",
    "reason",
    "weights_bytes_per_gpu",
    "kv_bytes_per_token",
    "kv_capacity_tokens",
    "max_concurrent_sequences",
    "kv_occupancy",
}


@pytest.fixture()
def small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Catalog:
    catalog = build_catalog(tmp_path / "catalog")
    monkeypatch.setattr("planner.commands.fit.load_catalog", lambda **_: catalog)
    return catalog


def fit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = main(["fit", *args])
    out, err = capsys.readouterr()
    parsed = json.loads(out) if code == 0 and "--json" in args else out
    return code, parsed, err


def test_json_lists_every_layout_with_memory_and_occupancy(
    small: Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    code, rows, _ = fit(
        capsys,
        "--model",
        LLAMA_70B,
        "--instance",
        "g6e.12xlarge",
        "--input-len",
        "2048",
        "--output-len",
        "512",
        "--concurrency",
        "16",
        "--json",
    )
    assert code == 0
    assert {(r["tp"], r["pp"]) for r in rows} == {(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (4, 1)}
    for row in rows:
        assert set(row) >= REQUIRED
        assert row["tp"] * row["pp"] * row["dp"] == 4
        assert row["feasible"] == (row["reason"] is None)
    tp4 = next(r for r in rows if (r["tp"], r["pp"]) == (4, 1))
    assert tp4["feasible"]
    assert tp4["kv_bytes_per_token"] == 327_680  # whole model, all layers
    assert tp4["max_model_len"] == 2560  # the workload's longest request
    assert tp4["weights_bytes_per_gpu"] / 2**30 == pytest.approx(32.89, abs=0.02)
    assert tp4["max_concurrent_sequences"] == tp4["kv_capacity_tokens"] // 2560
    occupancy = tp4["kv_occupancy"]
    assert occupancy["concurrency"] == 16 and 0 < occupancy["expected"] <= occupancy["p99"] <= 1
    assert occupancy["p_wait_or_preempt"] == 0.0
    assert occupancy["per_gpu_breakdown"]["weights_bytes"] == tp4["weights_bytes_per_gpu"]
    tp1 = next(r for r in rows if (r["tp"], r["pp"]) == (1, 1))
    assert tp1["reason"] == "weights 141.1 GB > 1 x 47.8 GB x 0.90 usable"
    assert tp1["kv_occupancy"] is None and tp1["max_concurrent_sequences"] is None


def test_one_shape_kv_dtype_and_table(small: Catalog, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--model", LLAMA_70B, "--instance", "g6e.12xlarge", "--max-model-len", "4096"]
    code, rows, _ = fit(capsys, *base, "--tp", "8", "--json")
    assert code == 0 and len(rows) == 1
    assert rows[0]["feasible"] is False and "needs 8 GPUs" in rows[0]["reason"]
    code, rows, _ = fit(capsys, *base, "--tp", "4", "--kv-dtype", "fp8", "--json")
    assert rows[0]["kv_bytes_per_token"] == 163_840
    code, table, _ = fit(capsys, *base)
    assert code == 0
    assert table.splitlines()[0].startswith("tp  pp  dp  fits")
    assert "weights 141.1 GB > 1 x 47.8 GB x 0.90 usable" in table


def test_workload_from_a_trace_and_a_config_path(
    small: Catalog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "timestamp,input_tokens,output_tokens\n0,1000,100\n1,3000,200\n2,500,50\n",
        encoding="utf-8",
    )
    config = tmp_path / "my-model.json"
    config.write_text(json.dumps(LLAMA_3_8B), encoding="utf-8")
    code, rows, _ = fit(
        capsys,
        "--model",
        str(config),
        "--instance",
        "g6e.xlarge",
        "--workload",
        str(trace),
        "--concurrency",
        "4",
        "--json",
    )
    assert code == 0 and len(rows) == 1
    (row,) = rows
    assert row["feasible"] and row["max_model_len"] == 3200
    assert row["kv_occupancy"]["expected_demand_tokens"] > 4 * 500


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "nobody/nothing", "--instance", "g6e.12xlarge"], "model='nobody/nothing'"),
        (["--model", LLAMA_70B, "--instance", "g9.huge"], "instance='g9.huge'"),
        (
            [
                "--model",
                LLAMA_70B,
                "--instance",
                "g6e.12xlarge",
                "--input-len",
                "-5",
                "--output-len",
                "10",
            ],
            "--input-len=-5 is not allowed: a whole number from 1 to 134,217,728",
        ),
        (
            ["--model", LLAMA_70B, "--instance", "g6e.12xlarge", "--input-len", "100"],
            "--output-len=None is not allowed",
        ),
        (
            ["--model", LLAMA_70B, "--instance", "g6e.12xlarge", "--gpu-memory-utilization", "1.5"],
            "--gpu-memory-utilization=1.5 is not allowed: a finite number > 0 and <= 1",
        ),
        (
            ["--model", LLAMA_70B, "--instance", "g6e.12xlarge", "--tp", "3"],
            "TP=3 x PP=1 = 3 GPUs a replica does not divide the 4 GPUs of 1 x g6e.12xlarge",
        ),
    ],
)
def test_errors_are_one_line_with_exit_code_2(
    small: Catalog, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code = main(["fit", *args])
    out, err = capsys.readouterr()
    if "--tp" in args:  # a shape that cannot run is a ruled-out row, not an error
        assert code == 0 and message in out
        return
    assert code == 2
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_module_entry_point_on_the_embedded_catalog(catalog: Catalog) -> None:
    if "g6e.12xlarge" not in catalog.instances:
        pytest.skip("data/instances.csv does not list g6e.12xlarge yet")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "planner",
            "fit",
            "--model",
            LLAMA_70B,
            "--instance",
            "g6e.12xlarge",
            "--input-len",
            "2048",
            "--output-len",
            "512",
            "--concurrency",
            "32",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    feasible = {(r["tp"], r["pp"]) for r in rows if r["feasible"]}
    assert (4, 1) in feasible and (1, 1) not in feasible and (2, 1) not in feasible
    tp4 = next(r for r in rows if (r["tp"], r["pp"]) == (4, 1))
    assert abs(tp4["kv_capacity_tokens"] - 71_300) / 71_300 < 0.10
    assert set(tp4) >= REQUIRED
