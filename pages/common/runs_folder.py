"""The runs folder on a page: what the background ingestion is doing, and what it left out.

- :func:`ingestion_notice`: while run files are being ingested in the background, a line that
  says how far it is (redrawn every second); when the pass ends, the page is redrawn with
  everything in;
- :func:`quarantine_section`: every run directory or line that ingestion skipped, with its
  file, line, field, value and reason (``python -m planner store check`` prints the same);
- :func:`refit_notice`: while the performance model refits on new runs in the background,
  a line saying the figures use the fit before them; the page is redrawn when it is done.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pages.common.resources import CatalogRef, ingestion_progress
from pages.common.ui import md_text
from planner.store import Store

_WATCHING = "runs_folder_watching"


def _watch(store: Store) -> None:
    progress = ingestion_progress(store)
    if progress is None:
        return
    if progress.running:
        st.session_state[_WATCHING] = True
        st.info(
            f"{md_text(progress.describe())}. The figures here use the runs ingested so far and "
            "update when it is done.",
            icon=":material/hourglass_top:",
        )
        st.progress(progress.fraction)
        return
    if st.session_state.pop(_WATCHING, False):
        st.rerun(scope="app")  # the pass ended: redraw with everything in
    if progress.error:
        st.warning(f"Run files: {md_text(progress.describe())}", icon=":material/warning:")


def ingestion_notice(store: Store) -> None:
    """Progress of the background ingestion (nothing once it is done)."""
    progress = ingestion_progress(store)
    if progress is not None and (progress.running or progress.error):
        st.fragment(_watch, run_every=1.0)(store)


def quarantine_frame(store: Store) -> pd.DataFrame:
    """The quarantine as a table: one row per run directory or line left out."""
    frame = store.run_problems()
    if frame.empty:
        return pd.DataFrame(columns=["run", "file", "line", "field", "value", "reason"])
    shown = frame.assign(run=frame.run_dir.map(lambda d: str(d).rstrip("/").rsplit("/", 1)[-1]))
    return shown[["run", "file", "line", "field", "value", "reason", "run_dir"]]


def quarantine_section(store: Store) -> pd.DataFrame:
    """A section listing what ingestion left out; returns the table (for exports)."""
    st.header("Quarantined run files")
    frame = quarantine_frame(store)
    if frame.empty:
        st.caption("Every run directory in the runs folder was read whole: nothing is quarantined.")
        return frame
    runs = frame.run_dir.nunique()
    st.warning(
        f"{len(frame):,} problems in {runs:,} run directories: those runs or lines are left "
        "out, everything else is used. Fix or remove the files; they are read again when they "
        "change (`python -m planner store check` lists the same).",
        icon=":material/report:",
    )
    st.dataframe(
        frame,
        hide_index=True,
        key="table_quarantine",
        column_config={
            "line": st.column_config.NumberColumn("line", format="%d"),
            "reason": st.column_config.TextColumn("reason", width="large"),
            "run_dir": st.column_config.TextColumn("run directory", width="medium"),
        },
    )
    return frame


_REFITTING = "runs_folder_refitting"


def _watch_refit(ref: CatalogRef, store: Store) -> None:
    from pages.common.planning import refit_pending

    pending = refit_pending(ref, store)
    if pending:
        st.session_state[_REFITTING] = True
        st.info(
            f"The performance model is refitting on {pending:,} new measured runs in the "
            "background: the figures here use the fit before them and update when it is done.",
            icon=":material/model_training:",
        )
    elif st.session_state.pop(_REFITTING, False):
        st.rerun(scope="app")  # the refit is done: redraw with it


def refit_notice(ref: CatalogRef, store: Store) -> None:
    """The notice while a refit runs in the background (nothing otherwise)."""
    from pages.common.planning import refit_pending

    if refit_pending(ref, store):
        st.fragment(_watch_refit, run_every=2.0)(ref, store)
