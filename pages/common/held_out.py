"""The public results held out by source, row by row (``data/held_out_rows.csv``, written by
``python -m planner validate --scheme source --calibrate-intervals``): each one predicted by a
fit that never saw its publisher, with its 80% interval. Read once per file version."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import streamlit as st

from planner.perf.validation import HELD_OUT_ROWS_FILE, read_held_out_rows

#: the file's metrics, their column in the predicted-against-measured chart and their label
HELD_OUT_METRICS: tuple[tuple[str, str, str], ...] = (
    ("output_tok_per_s", "output_tok_per_s", "output tok/s"),
    ("ttft", "ttft_ms", "TTFT"),
    ("tpot", "itl_ms", "TPOT"),
    ("ttft_p99", "ttft_p99_ms", "TTFT p99"),
    ("tpot_p99", "tpot_p99_ms", "TPOT p99"),
)
#: the columns of the row table, in order
TABLE_COLUMNS = (
    "fold", "model", "gpu", "num_gpus", "tp", "pp", "precision", "engine", "engine_version",
    "input_len", "output_len", "load", "concurrency", "request_rate", "in_flight",
)  # fmt: skip


@st.cache_data(show_spinner=False, max_entries=2)
def _held_out_frame(signature: tuple[float, int]) -> pd.DataFrame:
    frame = pd.DataFrame(read_held_out_rows())
    if frame.empty:
        return frame
    numeric = [
        c
        for c in frame.columns
        if c.endswith(("_measured", "_predicted", "_ratio", "_low", "_high"))
        or c in ("num_gpus", "tp", "pp", "input_len", "output_len", "concurrency")
        or c in ("request_rate", "in_flight")
    ]
    frame[numeric] = frame[numeric].apply(pd.to_numeric, errors="coerce")
    return frame


def held_out_frame() -> pd.DataFrame:
    """Every stored held-out row (empty when the file is missing or unreadable)."""
    try:
        stat = HELD_OUT_ROWS_FILE.stat()
    except OSError:
        return pd.DataFrame()
    return _held_out_frame((stat.st_mtime, stat.st_size))


def filter_held_out(frame: pd.DataFrame, chosen: Mapping[str, Sequence[str]]) -> pd.DataFrame:
    """The rows matching the page's filters (field -> chosen values; empty: all). The rows are
    public results, so an origin filter without 'public' leaves none."""
    if frame.empty:
        return frame
    for field, values in chosen.items():
        if not values:
            continue
        if field == "origin":
            if "public" not in values:
                return frame.iloc[0:0]
            continue
        if field in frame.columns:
            frame = frame[frame[field].isin(values)]
    return frame


def held_out_points(frame: pd.DataFrame) -> pd.DataFrame:
    """One point a (row, metric) it measures, in the columns of
    :func:`pages.charts.benchmarks.predicted_vs_measured_figure`."""
    parts = []
    if frame.empty:
        return pd.DataFrame(columns=["metric", "gpu", "label", "measured", "predicted"])
    label = (
        frame["model"]
        + " · "
        + frame["engine"]
        + " · "
        + frame["gpu"]
        + " x"
        + frame["num_gpus"].astype("Int64").astype(str)
        + " · "
        + frame["input_len"].astype("Int64").astype(str)
        + "/"
        + frame["output_len"].astype("Int64").astype(str)
        + " · "
        + frame["band"]
        + " in flight · held out: "
        + frame["fold"]
    )
    for key, column, _ in HELD_OUT_METRICS:
        measured = frame[f"{key}_measured"]
        rows = measured.notna() & frame[f"{key}_predicted"].notna()
        parts.append(
            pd.DataFrame(
                {
                    "metric": column,
                    "gpu": frame.loc[rows, "gpu"],
                    "label": label[rows],
                    "measured": measured[rows],
                    "predicted": frame.loc[rows, f"{key}_predicted"],
                    "low": frame.loc[rows, f"{key}_low"],
                    "high": frame.loc[rows, f"{key}_high"],
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def held_out_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per metric, over the rows given: how many measure it, the median and p90 absolute error,
    the median predicted / measured and the share inside the 80% interval."""
    out = []
    for key, _, label in HELD_OUT_METRICS:
        ratio = frame[f"{key}_ratio"].dropna() if not frame.empty else pd.Series(dtype=float)
        if ratio.empty:
            continue
        inside = frame.loc[frame[f"{key}_inside"].isin(["True", "False"]), f"{key}_inside"]
        error = (ratio - 1.0).abs()
        out.append(
            {
                "metric": label,
                "rows": len(ratio),
                "median error": float(error.median()),
                "p90 error": float(error.quantile(0.9)),
                "median predicted / measured": float(ratio.median()),
                "80% interval coverage": float((inside == "True").mean()) if len(inside) else None,
            }
        )
    return pd.DataFrame(out)


def held_out_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows with their scenario and, per metric, measured, predicted and inside."""
    if frame.empty:
        return frame
    columns = [c for c in TABLE_COLUMNS if c in frame.columns]
    for key, _, _ in HELD_OUT_METRICS:
        columns += [f"{key}_measured", f"{key}_predicted", f"{key}_inside"]
    return frame[columns]
