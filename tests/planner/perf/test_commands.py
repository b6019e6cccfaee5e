"""``python -m planner predict`` and ``validate`` on real files."""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from planner.cli import main
from planner.perf.calibration import FitSample
from planner.perf.model import PerformanceModel
from tests.patience import PATIENT_S
from tests.planner.perf.test_model import assert_within_the_issue_limits

HEADER = (
    "scenario_id,engine,engine_version,model,precision,gpu,num_gpus,tp,pp,input_len,output_len,"
    "load,concurrency,request_rate,num_requests,instance,nodes,entrypoint,note\n"
)
ROWS = [
    "brief,vllm,0.10.0,deepseek-ai/deepseek-r1-distill-llama-70b,bf16,L40S,4,4,1,2048,512,"
    "offline_batch,30,,30,g6e.12xlarge,1,offline,the brief's case",
    "unknown,vllm,,acme/NotAModel,bf16,L40S,4,4,1,2048,512,concurrency,30,,30,,,,bad model",
    "tp3,vllm,,meta-llama/Llama-3.1-70B-Instruct,bf16,H100-SXM,3,3,1,2048,512,concurrency,8,"
    ",,,,,TP=3 for 64 heads",
    "negative,vllm,,meta-llama/Llama-3.1-8B-Instruct,bf16,H100-SXM,1,1,1,-20,512,concurrency,8,"
    ",,,,,negative length",
    "rate,tensorrt-llm,0.14.0,meta-llama/Llama-3.1-8B-Instruct,bf16,h100-sxm,1,1,1,467,256,rate,"
    ',8,500,,,,"passes, through"',
    "badgpu,vllm,,meta-llama/Llama-3.1-8B-Instruct,bf16,Z9000,1,1,1,467,256,concurrency,8,,,,,,",
]


def test_predict_writes_errors_for_bad_rows_and_predicts_the_rest(
    tmp_path: Path, model: PerformanceModel, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "in.csv"
    source.write_text(HEADER + "\n".join(ROWS) + "\n", encoding="utf-8")
    out = tmp_path / "out.csv"
    assert main(["predict", "--scenarios", str(source), "--out", str(out), "--public-only"]) == 0
    rows = {r["scenario_id"]: r for r in csv.DictReader(out.open(encoding="utf-8"))}
    assert list(rows) == ["brief", "unknown", "tp3", "negative", "rate", "badgpu"]
    brief = rows["brief"]
    assert brief["pred_error"] == ""
    assert float(brief["pred_total_tok_per_s"]) == pytest.approx(531.86, rel=0.2)
    assert float(brief["pred_output_tok_per_s_low"]) < float(brief["pred_output_tok_per_s"])
    assert float(brief["pred_output_tok_per_s"]) < float(brief["pred_output_tok_per_s_high"])
    assert brief["pred_far_from_data"] == "false"
    # TTFT and TPOT (mean, p50, p99) each with its 80% interval around the point
    for metric in ("ttft", "tpot"):
        for stat in ("mean", "p50", "p99"):
            point = float(brief[f"pred_{metric}_ms_{stat}"])
            low = float(brief[f"pred_{metric}_ms_{stat}_low"])
            high = float(brief[f"pred_{metric}_ms_{stat}_high"])
            assert 0 < low < point < high, (metric, stat)
    assert rows["unknown"]["pred_ttft_ms_p99_high"] == ""
    assert brief["note"] == "the brief's case"  # other columns pass through
    assert rows["rate"]["note"] == "passes, through"
    assert float(rows["rate"]["pred_ttft_ms_mean"]) > 0 and rows["rate"]["pred_error"] == ""
    # a rate states its share of the predicted saturation rate; an offline batch offers none
    assert 0 < float(rows["rate"]["pred_utilisation"]) < 1 and brief["pred_utilisation"] == ""
    assert "acme/NotAModel" in rows["unknown"]["pred_error"]
    assert "tp=3" in rows["tp3"]["pred_error"] and "attention heads" in rows["tp3"]["pred_error"]
    assert "input_len" in rows["negative"]["pred_error"]
    assert "Z9000" in rows["badgpu"]["pred_error"]
    for key in ("unknown", "tp3", "negative", "badgpu"):
        assert rows[key]["pred_output_tok_per_s"] == ""
    assert "predicted 2 of 6 scenarios" in capsys.readouterr().out


#: The brief's case as 30 requests started at once, written as an offline batch and as a closed
#: loop of 30 with 30 requests, under vllm serve (no entrypoint) and vLLM's offline class.
BRIEF = "vllm,0.10.0,deepseek-ai/deepseek-r1-distill-llama-70b,bf16,L40S,4,4,1,2048,512"
EQUIVALENT = {
    "serve_offline_batch": f"{BRIEF},offline_batch,30,,30,g6e.12xlarge,1,,",
    "serve_closed_loop": f"{BRIEF},concurrency,30,,30,g6e.12xlarge,1,,",
    "llm_offline_batch": f"{BRIEF},offline_batch,30,,30,g6e.12xlarge,1,offline,",
    "llm_closed_loop": f"{BRIEF},concurrency,30,,30,g6e.12xlarge,1,offline,",
}


def _predict(tmp_path: Path, names: list[str]) -> dict[str, float]:
    source, out = tmp_path / "in.csv", tmp_path / "out.csv"
    lines = [f"{name},{EQUIVALENT[name]}" for name in names]
    source.write_text(HEADER + "\n".join(lines) + "\n", encoding="utf-8")
    assert main(["predict", "--scenarios", str(source), "--out", str(out), "--public-only"]) == 0
    return {
        r["scenario_id"]: float(r["pred_total_tok_per_s"])
        for r in csv.DictReader(out.open(encoding="utf-8"))
    }


def test_equivalent_loads_predict_the_same_whatever_was_predicted_before(
    tmp_path: Path, model: PerformanceModel
) -> None:
    together = _predict(tmp_path, list(EQUIVALENT))
    # an offline batch of 30 is a closed loop of 30 with 30 requests: 30 requests at once
    assert together["serve_offline_batch"] == together["serve_closed_loop"]
    assert together["llm_offline_batch"] == together["llm_closed_loop"]
    # vLLM's offline class batches 8,192 tokens a step on an L40S, vllm serve 2,048
    assert together["llm_offline_batch"] > together["serve_offline_batch"]
    # a row's prediction does not depend on the rows before it
    for name in EQUIVALENT:
        assert _predict(tmp_path, [name]) == {name: together[name]}
    backwards = _predict(tmp_path, list(reversed(EQUIVALENT)))
    assert backwards == together


def test_predict_reports_a_missing_file_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["predict", "--scenarios", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "o.csv")]
    )
    assert code == 2
    assert "--scenarios" in capsys.readouterr().err


#: the GPUs the validate test holds out, each fitted on every row of the others: a PCIe Ada
#: GPU, the newest NVLink one and the most measured one (all ~17 GPU folds are the README's)
HELD_GPUS = ("L40S", "B200", "H100-SXM")


# a fit of every public row, then three fits without a GPU: about 1 min on a quiet machine,
# over 300 s at load 8 (a hang detector, tests/patience.py)
@pytest.mark.timeout(4 * PATIENT_S)
def test_validate_prints_errors_next_to_the_roofline(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from planner.commands import validate
    from planner.perf.validation import HeldOut

    # the command's own folds, kept (not replaced) to check their accuracy too: one
    # cross-validation for both. A GPU the fit never saw is issue #4's hard case
    folds: list[list[HeldOut]] = []
    rows_held: list[int] = []  # the command's own rows of those GPUs
    real = validate.cross_validate

    def kept(samples: Sequence[FitSample], scheme: str, **kwargs: Any) -> list[HeldOut]:
        everything = real(samples, scheme, **kwargs)
        rows_held.append(sum(1 for s in samples if s.gpu in HELD_GPUS))
        folds.append(everything[: rows_held[-1]])
        return everything

    monkeypatch.setattr(validate, "cross_validate", kept)
    export = tmp_path / "held_out.csv"
    args = ["--scheme", "gpu", "--folds", *HELD_GPUS, "--public-only", "--rows-csv", str(export)]
    code = main(["validate", *args])
    text = capsys.readouterr().out
    assert code == 0
    assert len(folds) == 1 and {h.fold for h in folds[0]} == set(HELD_GPUS)
    assert all(h.sample.gpu in HELD_GPUS for h in folds[0]) and len(folds[0]) == rows_held[0]
    assert_within_the_issue_limits(folds[0])
    assert "== leave-one-GPU-out ==" in text
    assert "roofline" in text and "vllm    L40S" in text and "PASS" in text
    assert "vllm    A100-80GB-SXM" not in text  # a GPU not held out is not scored
    assert "Excluded from the fit" in text and "with the 24 excluded rows" in text
    # latencies beside throughput: per engine and requests in flight, and the fold's line
    assert "== leave-one-GPU-out: latency by engine and requests in flight ==" in text
    assert "all     17-64     |" in text and "vllm    all       |" in text
    line = next(
        t for t in text.splitlines() if t.strip().startswith("leave-one-GPU-out") and "TTFT (n" in t
    )
    assert "median" in line and "mean" in line and "p90" in line and "80% coverage" in line
    # the p99s where published (issue 26 item 4), on the line under the fold's
    after = text.splitlines()[text.splitlines().index(line) + 1]
    assert "TTFT p99 (n " in after and "TPOT p99 (n " in after and "80% coverage" in after
    assert "TTFT p99 APE med/mean/p90, cover" in text
    # the slices shaped like the independent checks: closed loops and rates, current releases
    assert "closed loop or rate" in text and "ditto, release 2025-07+" in text
    assert "closed loops and rates of 2025-07+ releases" in text
    # every held-out row exported for a spreadsheet, with the figures the tables summarise
    assert f"{len(folds[0])} held-out rows written to {export}" in text
    with export.open(newline="") as f:
        exported = list(csv.DictReader(f))
    assert len(exported) == len(folds[0])
    for h, row in zip(folds[0], exported, strict=True):
        assert (row["scheme"], row["fold"], row["gpu"]) == ("gpu", h.fold, h.sample.gpu)
        assert row["model"] == h.sample.result.model and row["band"] == h.band
        for metric in ("output_tok_per_s", "ttft", "tpot_p99"):
            if metric not in h.measured:
                assert row[f"{metric}_measured"] == "" and row[f"{metric}_inside"] == ""
                continue
            measured = float(row[f"{metric}_measured"])
            predicted = float(row[f"{metric}_predicted"])
            assert measured == pytest.approx(h.measured[metric])
            assert predicted == pytest.approx(h.predicted[metric], rel=1e-4)  # 5 digits
            assert float(row[f"{metric}_ratio"]) == pytest.approx(predicted / measured, rel=1e-4)
            low, high = float(row[f"{metric}_low"]), float(row[f"{metric}_high"])
            assert low <= predicted <= high
            assert row[f"{metric}_inside"] == str(low <= measured <= high)
    inside = [r["output_tok_per_s_inside"] == "True" for r in exported if r["output_tok_per_s_low"]]
    check = next(t for t in text.splitlines() if t.strip().startswith("leave-one-GPU-out  "))
    printed = re.search(r"80% coverage\s+(\d+)%", check)
    assert printed is not None
    assert abs(100 * sum(inside) / len(inside) - int(printed.group(1))) <= 0.5


def test_named_folds_are_checked_against_the_scheme() -> None:
    import argparse
    from types import SimpleNamespace

    from planner.commands.validate import _named_folds
    from planner.errors import InvalidInputError

    rows: list[Any] = [SimpleNamespace(gpu=g) for g in ("L40S", "B200", "L40S")]
    args = argparse.Namespace(folds=["B200"], write_summary=False, calibrate_intervals=False)
    assert _named_folds(args, ["gpu"], rows) == {"B200"}
    assert _named_folds(argparse.Namespace(folds=None), ["gpu", "source"], rows) is None
    for folds, schemes, allowed in (
        (["Z80"], ["gpu"], "a gpu fold: B200, L40S"),
        (["B200"], ["gpu", "source"], "one --scheme"),
        (["B200"], ["class"], "one --scheme"),
    ):
        with pytest.raises(InvalidInputError) as err:
            _named_folds(argparse.Namespace(**{**vars(args), "folds": folds}), schemes, rows)
        assert err.value.field == "--folds" and allowed in err.value.allowed
    with pytest.raises(InvalidInputError, match="every fold"):
        _named_folds(argparse.Namespace(**{**vars(args), "write_summary": True}), ["gpu"], rows)


def test_random_folds_split_the_rows_into_five_disjoint_parts() -> None:
    from planner.perf.validation import folds

    rows: list[Any] = list(range(23))  # random folds read only how many rows there are
    plan = folds(rows, "random")
    assert [name for name, _ in plan] == [f"fold {i}" for i in range(1, 6)]
    held = [i for _, test in plan for i in test]
    assert sorted(held) == rows and {len(test) for _, test in plan} == {4, 5}
    assert folds(rows, "random") == plan and folds(rows, "random", seed=1) != plan


def test_the_newest_releases_fold_holds_out_the_last_half_year_of_releases() -> None:
    """What a user of a release newer than the data faces: every row of a release dated within
    RELEASE_FOLD_DAYS of the newest dated one is held out together; older and undated releases
    (Tandemn's unversioned ``vllm``, a series named without its minor such as ``1.x``) always
    train."""
    from types import SimpleNamespace

    from planner.perf.validation import RELEASE_FOLD_DAYS, _fold_keys, folds

    def row(family: str, version: str) -> Any:
        return SimpleNamespace(family=family, result=SimpleNamespace(engine_version=version))

    rows: list[Any] = [
        row("vllm", "0.19.0"),  # 2026-04-03, the newest
        row("vllm", "0.10.2"),  # 2025-07-25
        row("sglang", "0.5.9"),  # 2026-02-23
        row("sglang", "0.5.3"),  # 2025-09-15
        row("vllm", "vllm"),
        row("trtllm", "1.x"),
        row("vllm", "0.11.0"),  # 2025-10-04
    ]
    assert RELEASE_FOLD_DAYS == 183  # 2026-04-03 - 183 days = 2025-10-02
    assert folds(rows, "release") == [("released 2025-10-02 or later", [0, 2, 6])]
    # a row scored but not fitted joins the fold only when its release is as new
    assert _fold_keys(row("sglang", "0.5.4"), "release", 0, date(2025, 10, 2)) == (
        "released 2025-10-02 or later",
    )
    for old in (row("sglang", "0.5.2"), row("vllm", "vllm")):
        assert _fold_keys(old, "release", 0, date(2025, 10, 2)) == ()
    assert folds([row("vllm", "vllm")], "release") == []


def test_a_predict_row_with_a_dataset_is_the_workload_a_measured_row_describes() -> None:
    """``dataset`` sharegpt/uniform: lengths vary around the stated means, as when the same
    row is fitted (planner.perf.calibration.scenario_from_measured); a bad name is an error."""
    from planner.catalog import MeasuredResult
    from planner.errors import InvalidInputError
    from planner.perf.calibration import scenario_from_measured
    from planner.perf.scenario import Scenario

    row = {
        "engine": "vllm",
        "model": "Qwen/Qwen3-30B-A3B",
        "gpu": "H100-SXM",
        "num_gpus": "1",
        "input_len": "220",
        "output_len": "200",
        "load": "concurrency",
        "concurrency": "32",
        "num_requests": "500",
    }
    for dataset in ("sharegpt", "uniform"):
        scenario = Scenario.from_row({**row, "dataset": dataset})
        assert scenario.input_len is None and scenario.input_dist is not None
        assert scenario.mean_input_len == pytest.approx(220, rel=0.02)
        assert scenario.mean_output_len == pytest.approx(200, rel=0.02)
        measured = MeasuredResult(
            source="test",
            engine="vllm",
            model=row["model"],
            precision="bf16",
            gpu="H100-SXM",
            num_gpus=1,
            tp=1,
            pp=1,
            input_len=220,
            output_len=200,
            dataset=dataset,
            load="concurrency",
            concurrency=32,
            num_requests=500,
            output_tok_per_s=1000.0,
        )
        assert scenario_from_measured(measured).input_dist == scenario.input_dist
        assert scenario_from_measured(measured).output_dist == scenario.output_dist
    fixed = Scenario.from_row({**row, "dataset": "random"})
    assert (fixed.input_len, fixed.output_len, fixed.input_dist) == (220, 200, None)
    with pytest.raises(InvalidInputError) as bad:
        Scenario.from_row({**row, "dataset": "lmsys"})
    assert bad.value.field == "dataset" and "sharegpt" in bad.value.allowed


def test_a_predict_row_states_the_random_range_ratio_its_benchmark_ran_with() -> None:
    """``random_range_ratio`` r (vLLM bench's --random-range-ratio): lengths uniform on
    [L (1 - r), L (1 + r)] around the stated ones; blank or 0: fixed; anything else, or a
    ratio on another dataset, is an error naming the column."""
    from planner.errors import InvalidInputError
    from planner.perf.scenario import Scenario

    row = {
        "engine": "sglang",
        "model": "deepseek-ai/DeepSeek-R1-0528",
        "gpu": "B200",
        "tp": "8",
        "precision": "fp8",
        "input_len": "1024",
        "output_len": "1000",
        "load": "concurrency",
        "concurrency": "64",
    }
    spread = Scenario.from_row({**row, "random_range_ratio": "0.2"})
    assert spread.input_len is None and spread.input_dist is not None
    assert spread.output_dist is not None
    assert (spread.input_dist.low, spread.input_dist.high) == (819, 1229)
    assert (spread.output_dist.low, spread.output_dist.high) == (800, 1200)
    assert spread.mean_input_len == pytest.approx(1024, abs=1)
    for blank in ("", "0"):
        fixed = Scenario.from_row({**row, "dataset": "random", "random_range_ratio": blank})
        assert (fixed.input_len, fixed.output_len, fixed.input_dist) == (1024, 1000, None)
    for bad_ratio in ("1", "-0.1", "wide", "nan"):
        with pytest.raises(InvalidInputError) as bad:
            Scenario.from_row({**row, "random_range_ratio": bad_ratio})
        assert bad.value.field == "random_range_ratio" and "0" in bad.value.allowed
    with pytest.raises(InvalidInputError) as bad:
        Scenario.from_row({**row, "dataset": "sharegpt", "random_range_ratio": "0.2"})
    assert bad.value.field == "random_range_ratio" and "random dataset" in bad.value.allowed


def _measured_cells(**overrides: object) -> dict[str, object]:
    """A measured row's cells: Qwen3-30B-A3B on one H100 under vLLM, 320 requests of 500
    tokens out, with ``overrides``."""
    return {
        "source": "test",
        "engine": "vllm",
        "model": "Qwen/Qwen3-30B-A3B",
        "precision": "bf16",
        "gpu": "H100-SXM",
        "num_gpus": 1,
        "tp": 1,
        "pp": 1,
        "output_len": 500,
        "load": "concurrency",
        "num_requests": 320,
        "output_tok_per_s": 1000.0,
        **overrides,
    }


def test_a_measured_row_with_a_random_range_ratio_is_fitted_as_the_lengths_it_drew() -> None:
    """The same column on a measured row (a user's CSV, the store): the fit simulates the
    spread a predict row of the same cells gets; on another dataset it is refused."""
    from pydantic import ValidationError

    from planner.catalog import MeasuredResult
    from planner.perf.calibration import scenario_from_measured
    from planner.perf.scenario import Scenario

    cells = _measured_cells(input_len=1000, concurrency=32)
    measured = scenario_from_measured(MeasuredResult(**cells, random_range_ratio=0.5))
    predicted = Scenario.from_row(
        {k: str(v) for k, v in cells.items() if k in Scenario.model_fields}
        | {"random_range_ratio": "0.5"}
    )
    assert measured.input_dist is not None and measured.output_dist is not None
    assert (measured.input_dist.low, measured.input_dist.high) == (500, 1500)
    assert measured.input_dist == predicted.input_dist
    assert measured.output_dist == predicted.output_dist
    with pytest.raises(ValidationError, match="random dataset only"):
        MeasuredResult(**cells, dataset="sharegpt", random_range_ratio=0.5)
    with pytest.raises(ValidationError, match="random_range_ratio"):
        MeasuredResult(**cells, random_range_ratio=1.0)


def test_a_measured_row_that_repeated_an_earlier_runs_prompts_is_fitted_warm() -> None:
    """A row's warm_prompts reaches the scenario the fit simulates; a negative count is
    refused naming the field."""
    from pydantic import ValidationError

    from planner.catalog import MeasuredResult
    from planner.perf.calibration import scenario_from_measured

    cells = _measured_cells(engine="sglang", input_len=4000, concurrency=64)
    assert scenario_from_measured(MeasuredResult(**cells, warm_prompts=80)).warm_prompts == 80
    assert scenario_from_measured(MeasuredResult(**cells)).warm_prompts == 0
    with pytest.raises(ValidationError, match="warm_prompts"):
        MeasuredResult(**cells, warm_prompts=-1)
    # a vLLM row whose prompts began with an earlier run's shorter ones
    vllm = {**cells, "engine": "vllm"}
    warm = scenario_from_measured(MeasuredResult(**vllm, warm_prompts=4, warm_prompt_tokens=3072))
    assert (warm.warm_prompts, warm.warm_prompt_tokens) == (4, 3072)
    with pytest.raises(ValidationError, match="warm_prompt_tokens needs warm_prompts"):
        MeasuredResult(**vllm, warm_prompt_tokens=3072)


def test_predict_says_which_engine_release_it_used(tmp_path: Path, model: PerformanceModel) -> None:
    """A measured release is fitted on and said so; an unmeasured one is a reason the
    prediction is uncertain ("the release can move 2x"), and where it has a date the note says
    the releases' trend carried it there (a release after the table: as of the table's
    newest)."""
    source, out = tmp_path / "in.csv", tmp_path / "out.csv"
    rows = {
        "measured": "tensorrt-llm,0.17",
        # 0.9 is measured since the MLPerf v4.0 rows (TensorRT-LLM main of 2024-02); 0.8 is not
        "unmeasured": "tensorrt-llm,0.8.0",
        "none": "tensorrt-llm,",
        "dated": "tensorrt-llm,1.4.0",
        "later": "tensorrt-llm,1.9.0",
    }
    source.write_text(
        "scenario_id,engine,engine_version,model,precision,gpu,input_len,output_len,load,"
        "concurrency\n"
        + "".join(
            f"{name},{engine},meta-llama/Llama-3.1-8B-Instruct,fp8,H100-SXM,128,128,concurrency,8\n"
            for name, engine in rows.items()
        ),
        encoding="utf-8",
    )
    assert main(["predict", "--scenarios", str(source), "--out", str(out), "--public-only"]) == 0
    got = {r["scenario_id"]: r for r in csv.DictReader(out.open(encoding="utf-8"))}
    assert got["measured"]["pred_release"] == "fitted on measured TensorRT-LLM 0.17 results"
    assert got["unmeasured"]["pred_release"] == ""
    assert "TensorRT-LLM 0.8" in got["unmeasured"]["pred_uncertain_because"]
    assert "pooled" in got["none"]["pred_release"]
    assert got["dated"]["pred_release"] == (
        "no measured TensorRT-LLM 1.4 results: predicted at its release date (2026-10-13) on "
        "the trend of the measured releases"
    )
    assert "TensorRT-LLM 1.4" in got["dated"]["pred_uncertain_because"]
    later = got["later"]["pred_release"]
    assert "(2026-10-13, the release table's newest: a later release is taken as no older)" in later


def test_validate_refuses_a_rows_csv_it_cannot_write_before_fitting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for path in (tmp_path / "missing" / "rows.csv", tmp_path):
        code = main(["validate", "--scheme", "gpu", "--public-only", "--rows-csv", str(path)])
        err = capsys.readouterr().err
        assert code != 0
        assert "--rows-csv" in err and "a file path in an existing folder" in err


def test_validate_refuses_fewer_than_one_job_before_fitting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for jobs in ("0", "-2"):
        code = main(["validate", "--scheme", "gpu", "--public-only", "--jobs", jobs])
        err = capsys.readouterr().err
        assert code != 0
        assert "--jobs" in err and jobs in err and "1 or more" in err
