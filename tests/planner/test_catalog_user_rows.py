"""A user's hand-edited catalog files on load: measured rows out of bounds are left out alone
(naming file, row, field and value), a price given twice is noted or, when the two disagree,
refused naming both rows; ``planner catalog check`` says the same. Real files, the real loader
and the real command line (in process)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from planner.catalog import EMBEDDED_DATA_DIR, MeasuredResult, load_catalog
from planner.cli import main
from planner.errors import CatalogError

MEASURED_COLUMNS = list(MeasuredResult.model_fields)
GOOD_ROW = {
    "source": "our bench",
    "engine": "vllm",
    "engine_version": "0.11.0",
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "precision": "bf16",
    "gpu": "H100-SXM",
    "num_gpus": "1",
    "tp": "1",
    "pp": "1",
    "input_len": "1024",
    "output_len": "256",
    "load": "concurrency",
    "concurrency": "16",
    "output_tok_per_s": "2100.5",
    "ttft_ms": "80",
    "itl_ms": "11.5",
    "origin": "user",
}
#: (field, value, what the note must say is allowed): one class of bad number or text each
BAD_CELLS = [
    ("output_tok_per_s", "inf", "finite number"),
    ("ttft_ms", "nan", "finite number"),
    ("concurrency", "-4", "greater than 0"),
    ("input_len", "1000000000000", "less than or equal to 134217728"),
    ("itl_ms", "1e300", "less than or equal to 10000000000"),
    ("num_gpus", "100000", "less than or equal to 1024"),
    ("model", "llama\x1b[31m", "without control characters"),
    ("notes", "a\x00b", "without control characters"),
    ("num_requests", "1e20", "less than or equal to 2147483647"),
]


def _measured_csv(rows: list[dict[str, str]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=MEASURED_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(row)
    return out.getvalue()


def _user_dir(tmp_path: Path) -> Path:
    catalog_dir = tmp_path / "user" / "catalog"
    catalog_dir.mkdir(parents=True)
    return catalog_dir


def test_measured_rows_out_of_bounds_are_left_out_by_name_and_the_rest_kept(
    tmp_path: Path,
) -> None:
    user_dir = _user_dir(tmp_path)
    rows = [GOOD_ROW | {"source": "good first"}]
    rows += [GOOD_ROW | {field: value} for field, value, _ in BAD_CELLS]
    rows += [GOOD_ROW | {"source": "good last"}]
    (user_dir / "measured_results.csv").write_text(_measured_csv(rows), encoding="utf-8")
    embedded = len(load_catalog().measured)
    catalog = load_catalog(user_dir=user_dir)
    mine = [m for m in catalog.measured if m.source.startswith("good")]
    assert [m.source for m in mine] == ["good first", "good last"]
    assert len(catalog.measured) == embedded + 2
    assert len(catalog.load_notes) == len(BAD_CELLS)
    for row_no, (note, (field, value, allowed)) in enumerate(
        zip(catalog.load_notes, BAD_CELLS, strict=True), start=3
    ):
        text = str(note)
        assert text.startswith(f"measured_results.csv, row {row_no}, field '{field}': "), text
        assert allowed in text and "the row is left out" in text, text
        assert repr(value)[1:-1].split("\\")[0] in text, (value, text)


def test_catalog_check_lists_the_left_out_rows_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    user_dir = _user_dir(tmp_path)
    monkeypatch.setenv("SERVEWISE_USER_DATA_DIR", str(tmp_path / "user"))
    rows = [GOOD_ROW, GOOD_ROW | {"output_tok_per_s": "inf"}]
    (user_dir / "measured_results.csv").write_text(_measured_csv(rows), encoding="utf-8")
    assert main(["catalog", "check"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{user_dir / 'measured_results.csv'}: measured_results.csv, row 3")
    assert "'output_tok_per_s'" in out[0] and "'inf'" in out[0]
    assert out[-1].endswith("1 rows of your files left out, 0 other notes")
    (user_dir / "measured_results.csv").write_text(_measured_csv([GOOD_ROW]), encoding="utf-8")
    assert main(["catalog", "check"]) == 0


def _price_rows(tmp_path: Path, *usd: str) -> Path:
    """The user's prices.csv giving the first embedded price once per ``usd`` value."""
    embedded = (EMBEDDED_DATA_DIR / "prices.csv").read_text(encoding="utf-8").splitlines()
    header, first = embedded[0], embedded[1].split(",")
    user_dir = _user_dir(tmp_path)
    lines = [header]
    for value in usd:
        lines.append(",".join([*first[:4], value, *first[5:]]))
    (user_dir / "prices.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return user_dir


def test_a_price_given_twice_alike_is_noted_and_used_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    user_dir = _price_rows(tmp_path, "7.5", "7.5")
    catalog = load_catalog(user_dir=user_dir)
    (note,) = catalog.load_notes
    assert str(note).startswith("prices.csv, row 3, field 'usd_per_hour': ")
    assert "also row 2, at the same $7.5000/h" in str(note)
    key = ("g5.12xlarge", "eu-central-1", "on_demand")
    priced = [p for p in catalog.prices if (p.instance, p.region, p.pricing) == key]
    assert [p.usd_per_hour for p in priced] == [7.5]
    monkeypatch.setenv("SERVEWISE_USER_DATA_DIR", str(tmp_path / "user"))
    assert main(["catalog", "check"]) == 0  # noted, nothing left out
    assert "also row 2" in capsys.readouterr().out


def test_a_price_given_twice_with_two_figures_is_refused_naming_both_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    user_dir = _price_rows(tmp_path, "7.5", "1.25")
    with pytest.raises(CatalogError) as refused:
        load_catalog(user_dir=user_dir)
    text = str(refused.value)
    assert text.startswith("prices.csv, row 3, field 'usd_per_hour': ")
    assert "row 2 says $7.5000/h, row 3 $1.2500/h" in text
    monkeypatch.setenv("SERVEWISE_USER_DATA_DIR", str(tmp_path / "user"))
    assert main(["catalog", "check"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "row 2 says $7.5000/h, row 3 $1.2500/h" in err[0]
