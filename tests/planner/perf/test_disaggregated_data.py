"""data/measured_disaggregated.csv: every public disaggregated / wide-EP row loads with its
source and date and is predicted, as ``planner predict --scenarios`` predicts it, without an
error; the file stays out of the step-time model's fit (its rows fit the disaggregated pools'
step scale, tests/planner/perf/test_disaggregated_validation.py)."""

from __future__ import annotations

import csv
import math
from datetime import date
from pathlib import Path

import pytest

from planner.catalog import Catalog
from planner.catalog.loader import load_disaggregated_results
from planner.commands.predict import predict_rows
from planner.errors import CatalogError
from planner.perf.disaggregated import DisaggregatedPrediction, layout_from_row
from planner.perf.model import PerformanceModel

ROWS = load_disaggregated_results()


def _label(row: dict[str, str]) -> str:
    return f"{row['gpu']}-{row['tested_phase']}-{row['model'].split('/')[-1]}"


def test_the_file_has_rows_from_several_sources() -> None:
    assert len(ROWS) >= 15
    assert len({row["source"] for row in ROWS}) >= 3
    # a stated decode batch is a whole number of sequences a rank
    for row in ROWS:
        if row.get("decode_batch_per_rank"):
            assert row["tested_phase"] == "decode"
            assert float(row["decode_batch_per_rank"]).is_integer()


@pytest.mark.parametrize("row", ROWS, ids=[_label(r) for r in ROWS])
def test_row_has_its_source_date_and_figure_and_predicts(
    row: dict[str, str], model: PerformanceModel
) -> None:
    assert row["source"].startswith("https://")
    assert "@" in row["source_ref"] and ":" in row["source_ref"]  # repo@commit:path
    assert date(2024, 1, 1) <= date.fromisoformat(row["date"]) <= date(2026, 12, 31)
    figure = (
        "output_tok_per_s_per_gpu"
        if row["tested_phase"] == "decode"
        else ("input_tok_per_s_per_gpu")
    )
    assert float(row[figure]) > 0
    layout = layout_from_row(row)
    assert layout is not None, "a disaggregated row states both pools"
    [result] = predict_rows(model, [row])
    assert isinstance(result, DisaggregatedPrediction), result
    assert result.gpus == layout.gpus
    assert math.isfinite(result.prediction.output_tok_per_s)
    assert result.prediction.output_tok_per_s > 0
    assert result.prediction.tpot_ms_mean > 0


def test_the_rows_are_not_fitted(catalog: Catalog) -> None:
    sources = {row["source"] for row in ROWS}
    assert not [m for m in catalog.measured if m.source in sources]


def test_a_row_without_its_date_is_refused_naming_the_column(tmp_path: Path) -> None:
    path = tmp_path / "measured_disaggregated.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(ROWS[0]))
        writer.writeheader()
        writer.writerow(ROWS[0])
        writer.writerow({**ROWS[1], "date": ""})
    with pytest.raises(CatalogError, match=r"row 3, field 'date'"):
        load_disaggregated_results(path)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(ROWS[0]))
        writer.writeheader()
        writer.writerow({**ROWS[0], "tested_phase": "both pools"})
    with pytest.raises(CatalogError, match="tested_phase"):
        load_disaggregated_results(path)
