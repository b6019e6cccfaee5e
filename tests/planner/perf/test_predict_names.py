"""``planner predict --scenarios`` rows that name the GPU, the model and the engine as people
write them are predicted exactly as rows with the catalog's ids: same figures, same intervals,
same reasons for uncertainty (the distance to the measured data sees the catalog's names)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from planner.cli import main
from planner.perf.model import PerformanceModel

HEADER = "engine,model,precision,gpu,tp,input_len,output_len,load,concurrency,num_requests\n"
TAIL = "fp8,{gpu},8,1024,1024,concurrency,16,80"
PAIRS = [
    # (as the catalog names it, as a write-up or nvidia-smi names it)
    ("sglang,deepseek-ai/DeepSeek-R1-0528," + TAIL.format(gpu="H200"),
     "SGLang,DeepSeek-R1-0528," + TAIL.format(gpu="NVIDIA H200")),
    ("tensorrt-llm,deepseek-ai/DeepSeek-R1-0528," + TAIL.format(gpu="B200"),
     "trt,deepseek-r1-0528," + TAIL.format(gpu="HGX B200")),
    ("sglang,deepseek-ai/DeepSeek-R1-0528," + TAIL.format(gpu="MI300X"),
     "sglang,deepseek-ai/DeepSeek-R1-0528," + TAIL.format(gpu="AMD Instinct MI300X")),
]  # fmt: skip


def test_written_names_predict_as_the_catalog_ids(
    tmp_path: Path, model: PerformanceModel, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [line for pair in PAIRS for line in pair] + [
        "vllm,deepseek-ai/DeepSeek-R1-0528," + TAIL.format(gpu="H100")  # SXM or PCIe?
    ]
    source = tmp_path / "written.csv"
    source.write_text(HEADER + "\n".join(rows) + "\n", encoding="utf-8")
    out = tmp_path / "out.csv"
    assert main(["predict", "--scenarios", str(source), "--out", str(out), "--public-only"]) == 0
    assert f"predicted {len(rows) - 1} of {len(rows)} scenarios" in capsys.readouterr().out
    with out.open(encoding="utf-8", newline="") as handle:
        got = list(csv.DictReader(handle))
    for i in range(len(PAIRS)):
        ours, written = got[2 * i], got[2 * i + 1]
        predicted = {k: v for k, v in ours.items() if k.startswith("pred_")}
        assert predicted["pred_error"] == "" and float(predicted["pred_output_tok_per_s"]) > 0
        assert {k: written[k] for k in predicted} == predicted, (ours["gpu"], written["gpu"])
        assert written["gpu"] != ours["gpu"]  # the row's own cells pass through as written
    assert "did you mean H100-SXM or H100-PCIe" in got[-1]["pred_error"]
