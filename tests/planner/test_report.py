"""HTML reports are self-contained: plotly.js inlined, no external script or stylesheet."""

from __future__ import annotations

import re
import sys

import pandas as pd

from planner.report import ReportSection, render_report


def test_report_embeds_plotly_and_loads_nothing_from_outside() -> None:
    figure = {"data": [{"type": "bar", "x": ["L40S"], "y": [1.0]}], "layout": {"title": "t"}}
    table = pd.DataFrame({"gpu": ["L40S"], "usd_per_hour": [2.24208]})
    page = render_report(
        "Plan <Llama>", [ReportSection("Ranking", "Cheapest first.", table, [figure])]
    )
    assert "Plan &lt;Llama&gt;" in page
    assert "2.24208" in page and "Cheapest first." in page
    assert "Plotly.newPlot('chart-1'" in page
    assert len(page) > 1_000_000  # plotly.js itself is in the file
    assert not re.search(r"<script[^>]+src=", page)
    assert not re.search(r"<link[^>]+href=", page)
    assert "plotly" not in {m.split(".")[0] for m in sys.modules if m.startswith("planner")}
