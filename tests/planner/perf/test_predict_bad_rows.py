"""``planner predict --scenarios`` with rows no simulation should take: each bad row gets a
``pred_error`` naming its field, the other rows are predicted, nothing hangs; a CSV saved by
Excel ("CSV UTF-8", with a byte-order mark) keeps its first column; the output is safe to open
in a spreadsheet."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from planner.cli import main
from planner.perf.model import PerformanceModel
from planner.perf.scenario import MAX_SIMULATED_REQUESTS, Scenario

HEADER = "engine,model,precision,gpu,tp,input_len,output_len,load,concurrency,num_requests,note\n"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct,bf16,H100-SXM,1"
#: scenario -> (row after the engine column, the field its pred_error must name)
ROWS = {
    "good": (f"{LLAMA},1024,128,concurrency,8,64,-3.5", None),
    "sglang": (f'{LLAMA},1024,128,concurrency,8,64,=HYPERLINK("http://e.test")', None),
    "inf_concurrency": (f"{LLAMA},1024,128,concurrency,inf,64,", "concurrency"),
    "nan_concurrency": (f"{LLAMA},1024,128,concurrency,nan,64,", "concurrency"),
    "1e12_requests": (f"{LLAMA},1024,128,concurrency,8,1e12,", "num_requests"),
    "2e9_prompt": (f"{LLAMA},2e9,128,concurrency,8,64,", "input_len"),
    "past_context": (f"{LLAMA},300000,128,concurrency,8,64,", "input_len"),
    "huge_default_requests": (f"{LLAMA},1024,128,concurrency,900000,,", "concurrency"),
}


def test_bad_rows_get_pred_error_and_the_rest_is_predicted(
    tmp_path: Path, model: PerformanceModel, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [
        ("sglang" if name == "sglang" else "vllm") + "," + row for name, (row, _) in ROWS.items()
    ]
    source = tmp_path / "excel.csv"
    # Excel's "CSV UTF-8": a byte-order mark before the first column's name
    source.write_bytes(b"\xef\xbb\xbf" + (HEADER + "\n".join(lines) + "\n").encode())
    out = tmp_path / "out.csv"
    assert main(["predict", "--scenarios", str(source), "--out", str(out), "--public-only"]) == 0
    assert f"predicted 2 of {len(ROWS)} scenarios" in capsys.readouterr().out
    with out.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames and reader.fieldnames[0] == "engine"
        rows = dict(zip(ROWS, reader, strict=True))
    for name, (_, field) in ROWS.items():
        row = rows[name]
        if field is None:
            assert row["pred_error"] == "" and float(row["pred_output_tok_per_s"]) > 0, row
        else:
            assert row["pred_error"].startswith(f"{field}="), (name, row["pred_error"])
            assert row["pred_output_tok_per_s"] == ""
    # the first column was read: the SGLang row is predicted as SGLang, not as vLLM
    assert rows["sglang"]["engine"] == "sglang"
    assert rows["sglang"]["pred_output_tok_per_s"] != rows["good"]["pred_output_tok_per_s"]
    assert "131,072 tokens" in rows["past_context"]["pred_error"]
    # passed-through cells: a number stays a number, a formula is shown as text
    assert rows["good"]["note"] == "-3.5"
    assert rows["sglang"]["note"] == '\'=HYPERLINK("http://e.test")'


def test_a_scenario_bounds_what_it_would_simulate() -> None:
    base = {"model": "m", "gpu": "g", "input_len": 10, "output_len": 5}
    assert Scenario(**base, concurrency=8, num_requests=MAX_SIMULATED_REQUESTS)
    for bad in (
        {"concurrency": float("inf")},
        {"concurrency": 8, "num_requests": MAX_SIMULATED_REQUESTS + 1},
        {"concurrency": 2e6},
        {"load": "rate", "request_rate": float("nan")},
    ):
        with pytest.raises(ValueError):
            Scenario(**(base | bad))
