"""CSV and self-contained HTML export of what a page shows.

The HTML report is ``planner.report.render_report``: plotly.js inlined, every figure embedded
as its JSON spec, nothing fetched from a CDN. Both exports are generated only when the user
clicks (deferred download data), so they cost nothing on a rerun.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd
import streamlit as st

from planner.csv_export import frame_csv_text
from planner.report import ReportSection, render_report

if TYPE_CHECKING:  # the figures come built: plotly is imported by the charts
    import plotly.graph_objects as go


@dataclass
class ExportSection:
    """One section of a page's export: a heading, a note, a table, figures."""

    title: str
    text: str = ""
    table: pd.DataFrame | None = None
    figures: list[go.Figure] = field(default_factory=list)


def figure_spec(figure: go.Figure) -> dict[str, Any]:
    """A plain-JSON plotly spec (typed arrays as plotly.js's base64 ``bdata``)."""
    return json.loads(figure.to_json())


def report_html(title: str, sections: Sequence[ExportSection], *, subtitle: str = "") -> str:
    return render_report(
        title,
        [
            ReportSection(
                title=s.title,
                text=s.text,
                table=s.table,
                figures=[figure_spec(f) for f in s.figures],
            )
            for s in sections
        ],
        subtitle=subtitle,
    )


def csv_text(frame: pd.DataFrame) -> str:
    """The table as CSV, safe to open in a spreadsheet (``planner.csv_export``)."""
    return frame_csv_text(frame)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "export"


def export_menu(
    page: str,
    sections: Sequence[ExportSection],
    tables: dict[str, pd.DataFrame],
    *,
    subtitle: str = "",
) -> None:
    """An "Export" popover: one HTML report of the page, one CSV per table it shows.

    Nothing is rendered until the user clicks; a page draws the menu into a container it
    created under its title, once its figures exist.
    """
    with st.popover("Export", icon=":material/download:"):
        st.download_button(
            "HTML report (self-contained)",
            data=lambda: report_html(f"Servewise: {page}", sections, subtitle=subtitle),
            file_name=f"servewise-{_slug(page)}.html",
            mime="text/html",
            on_click="ignore",
            key=f"export_html_{_slug(page)}",
        )
        for name, frame in tables.items():
            st.download_button(
                f"{name} (CSV)",
                data=functools.partial(csv_text, frame),
                file_name=f"servewise-{_slug(page)}-{_slug(name)}.csv",
                mime="text/csv",
                on_click="ignore",
                key=f"export_csv_{_slug(page)}_{_slug(name)}",
                disabled=frame.empty,
            )
