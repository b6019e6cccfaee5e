"""CSV exports a person opens in a spreadsheet: text that would run as a formula is shown as
text, numbers stay numbers (``planner.csv_export``, which every export goes through)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pandas as pd
import pytest

from pages.common.export import csv_text
from planner.catalog import Catalog
from planner.csv_export import FORMULA_STARTS, safe_cell, write_rows_csv
from planner.perf.model import PerformanceModel
from planner.recommend import Demand, RecommendRequest, SearchSpace, perf_predictor, recommend
from planner.recommend_export import write_csv

HOSTILE = [
    '=HYPERLINK("http://e.test","log in")',
    "+1+cmd|' /C calc'!A0",
    "-2+3",
    "@SUM(1+1)",
    "\t=1+1",
    "\r=1+1",
]


def rows_of(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


@pytest.mark.parametrize("value", HOSTILE)
def test_a_cell_a_spreadsheet_would_run_is_text(value: str) -> None:
    assert safe_cell(value) == "'" + value


@pytest.mark.parametrize("value", ["-3.5", "+2", "-1e-3", "plain", "", "a=b", 7, -7.25, None])
def test_numbers_and_plain_text_are_written_as_they_are(value: object) -> None:
    assert safe_cell(value) == value


def test_a_page_table_export_keeps_negative_numbers_and_neutralises_user_strings() -> None:
    """What every page's "(CSV)" download writes (the Benchmarks page's "Runs" among them):
    user strings in cells and in column names (a run label is a column there)."""
    frame = pd.DataFrame(
        {
            "served_model": HOSTILE,
            "ttft_delta_ms": [-12.5, -1.0, 0.0, 3.25, -7.0, 1e9],
            "=run label": ["a"] * len(HOSTILE),
        }
    )
    rows = rows_of(csv_text(frame))
    assert rows[0] == ["served_model", "ttft_delta_ms", "'=run label"]
    assert [r[1] for r in rows[1:]] == ["-12.5", "-1.0", "0.0", "3.25", "-7.0", "1000000000.0"]
    for row in rows:
        for cell in row:
            assert not cell.startswith(FORMULA_STARTS) or float(cell) == float(cell), cell


def test_a_rows_file_is_neutralised_too(tmp_path: Path) -> None:
    path = write_rows_csv(tmp_path / "o.csv", ["name", "delta"], [{"name": "@x", "delta": "-4"}])
    with path.open(encoding="utf-8", newline="") as handle:
        assert list(csv.reader(handle)) == [["name", "delta"], ["'@x", "-4"]]


def test_recommend_csv_neutralises_an_instance_name_from_a_price_refresh(
    catalog: Catalog, tmp_path: Path
) -> None:
    """``planner recommend --csv``: an instance name is a string from elsewhere (a price
    refresh reads it from a SkyPilot file), so one that starts with = is written as text."""
    request = RecommendRequest(
        model="meta-llama/Llama-3.1-8B-Instruct",
        input_len=1024,
        output_len=128,
        demand=Demand(concurrency=4),
        search=SearchSpace(instances=("g6e.xlarge",), precisions=("bf16",)),
    )
    result = recommend(catalog, request, perf_predictor(catalog, request, _model(catalog)))
    assert result.ranked
    hostile = "=cmd|' /C calc'!A0"
    poisoned = result.model_copy(
        update={"ranked": [r.model_copy(update={"instance": hostile}) for r in result.ranked]}
    )
    frame = pd.read_csv(write_csv(poisoned, tmp_path / "plan.csv"))
    assert set(frame["instance"]) == {"'" + hostile}
    assert (frame["usd_per_hour"] > 0).all()  # numbers are still numbers


def _model(catalog: Catalog) -> PerformanceModel:
    from planner.perf.model import get_performance_model

    return get_performance_model(catalog)
