"""CSV written for a person to open: a spreadsheet must not run a cell as a formula.

Excel, LibreOffice and Google Sheets read a cell that starts with ``=``, ``+``, ``-`` or ``@``
as a formula, and a leading tab or carriage return can hide such a start (OWASP, "CSV
Injection", https://owasp.org/www-community/attacks/CSV_Injection, read 2026-12). Instance
names from a price refresh, served model names, run labels and error texts are strings from
elsewhere, so every CSV export goes through :func:`frame_csv_text` or :func:`write_rows_csv`:
a text cell with such a start gets a leading ``'`` (the spreadsheets' own mark for "text",
shown by none of them), the rest is written as it is. A number stays a number: numeric
columns are not touched, and a text cell that reads as a finite number (``-3.5``, ``+2``, a
value read from a CSV) is one a spreadsheet takes as that number, not as a formula.

Catalog files (``prices.csv`` and the others the planner reads back) are data, not exports:
they are written as they are, and their loader validates them.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

#: what makes a spreadsheet read a cell as a formula (or hides such a start)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: Any) -> Any:
    """``value``, with a leading ``'`` when it is text a spreadsheet would run as a formula."""
    if not isinstance(value, str) or not value.startswith(FORMULA_STARTS):
        return value
    if _reads_as_number(value):
        return value
    return "'" + value


def _reads_as_number(text: str) -> bool:
    try:
        number = float(text)
    except ValueError:
        return False
    return math.isfinite(number) and text == text.strip()


def safe_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy whose text columns hold :func:`safe_cell` values (numeric columns as they are)."""
    out = frame.copy()
    for column in out.columns:
        if not pd.api.types.is_numeric_dtype(out[column]):
            out[column] = out[column].map(safe_cell)
    out.columns = [safe_cell(str(c)) for c in out.columns]
    return out


def frame_csv_text(frame: pd.DataFrame) -> str:
    """``frame`` as CSV text (no index), safe to open in a spreadsheet. Rows end in CRLF (as
    RFC 4180 and Excel have them): the csv module then quotes a cell holding a lone CR too,
    which with LF endings it writes bare, breaking the row."""
    return safe_frame(frame).to_csv(index=False, lineterminator="\r\n")


def write_frame_csv(frame: pd.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(frame_csv_text(frame), encoding="utf-8")
    return path


def write_rows_csv(path: Path, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> Path:
    """``rows`` (dicts keyed by ``columns``) as a CSV file, safe to open in a spreadsheet."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[safe_cell(c) for c in columns])
    writer.writeheader()
    for row in rows:
        writer.writerow({safe_cell(k): safe_cell(row.get(k, "")) for k in columns})
    path.write_text(buffer.getvalue(), encoding="utf-8", newline="")
    return path
