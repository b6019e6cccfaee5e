"""Cached resources shared by every page and session.

- the catalog (``st.cache_resource``): reloaded only when a catalog file changes, embedded or
  the user's own (``<user_data_dir>/catalog``), so the Data page's additions show at once;
- the DuckDB store (``st.cache_resource``, one per database file; the dashboard process holds
  the file, see ``planner.store``), synced with the catalog whenever the catalog changes;
- the user's measured results and benchmark runs: run directories are ingested in the
  background (``planner.ingest``); a page waits at most ``SERVEWISE_INGEST_WAIT_S`` for them
  and shows what is in so far (``pages.common.runs_folder`` says what is still coming).

Downstream caches key on :attr:`CatalogRef.key` (a signature of the files), never on the
catalog object itself, so a change of one input recomputes only what depends on it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from pages.common.ui import md_text
from planner.catalog import EMBEDDED_DATA_DIR, Catalog, MeasuredResult, load_catalog
from planner.errors import PlannerError
from planner.ingest import IngestProgress
from planner.settings import Settings, get_settings
from planner.store import Store, open_store


@dataclass(frozen=True)
class CatalogRef:
    """The catalog and a key that changes whenever any of its files changes."""

    catalog: Catalog
    key: str
    user_dir: Path


def settings() -> Settings:
    return get_settings()


def user_catalog_dir() -> Path:
    return settings().user_data_dir / "catalog"


def _files_signature(*directories: Path) -> str:
    digest = hashlib.sha256()
    for directory in directories:
        digest.update(str(directory).encode())
        if not directory.is_dir():
            continue
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                stat = path.stat()
                digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


@st.cache_resource(show_spinner=False, max_entries=8)
def _load_catalog(user_dir: str | None, signature: str) -> Catalog:
    del signature  # part of the cache key only
    return load_catalog(user_dir=Path(user_dir) if user_dir else None)


def get_catalog() -> CatalogRef:
    """The catalog with the user's files layered on top.

    A broken user file must not take the dashboard down: the error is shown (it names the
    file, row and field) and the embedded catalog is used until the file is fixed.
    """
    user_dir = user_catalog_dir()
    signature = _files_signature(EMBEDDED_DATA_DIR, user_dir)
    try:
        catalog = _load_catalog(str(user_dir), signature)
    except PlannerError as exc:
        st.error(
            f"Your catalog files in {md_text(user_dir)} could not be read: {md_text(exc)}. "
            "Showing the embedded catalog only; fix or delete that file (the Data page lists "
            "your files)."
        )
        signature = _files_signature(EMBEDDED_DATA_DIR)
        catalog = _load_catalog(None, signature)
    return CatalogRef(catalog=catalog, key=signature, user_dir=user_dir)


@st.cache_resource(show_spinner=False)
def _open_store(db_path: str, runs_dir: str, _catalog: Catalog) -> Store:
    # run files are ingested in the background (runs_generation), never before a page draws;
    # synced with the catalog at hand (not one loaded again), later ones by _synced
    return open_store(Path(db_path), runs_dir=Path(runs_dir), ingest="no", catalog=_catalog)


@st.cache_resource(show_spinner=False, max_entries=8)
def _synced(db_path: str, catalog_key: str, _store: Store, _catalog: Catalog) -> bool:
    return _store.sync_catalog(_catalog)


def get_store(ref: CatalogRef) -> Store:
    """The store for the configured database file, in sync with ``ref``'s catalog."""
    cfg = settings()
    store = _open_store(str(cfg.database_file), str(cfg.runs_directory), ref.catalog)
    _synced(str(cfg.database_file), ref.key, store, ref.catalog)
    return store


#: per store, the ingestion pass a page has already waited for
_waited_for: dict[int, IngestProgress] = {}

#: What a page counts on a background pass ingesting per second it waits: below the 33-36
#: MB/s measured on an idle 2-core machine (10-17 MB/s under load), so a pass of a few new runs
#: is waited for and lands on the page, while a team's whole folder (200 runs, 67 MB) is not:
#: waiting a second for a pass that cannot end in it only delays the first page.
INGEST_WAIT_BYTES_PER_S = 15e6


def runs_generation(store: Store) -> int:
    """Ingest new or changed benchmark runs in the background (a pass unless one is in flight:
    a pass over an unchanged folder only compares file sizes and times), waiting at most the
    ``ingest_wait_s`` setting for them, once a pass (a page asks several times a run, and
    reruns while the pass goes on: none of those waits again) and only for a pass that can
    end within it (:data:`INGEST_WAIT_BYTES_PER_S`); returns a key that changes once new runs
    are in."""
    cfg = settings()
    progress = store.ingest_in_background(Path(cfg.runs_directory))
    if _waited_for.get(id(store)) is not progress:
        left = progress.bytes_total - progress.bytes_done
        if progress.running and left <= cfg.ingest_wait_s * INGEST_WAIT_BYTES_PER_S:
            store.ingest_job.wait(timeout=cfg.ingest_wait_s)
        _waited_for[id(store)] = progress
    return store.ingest_job.passes


def ingestion_progress(store: Store) -> IngestProgress | None:
    """The pass in flight or last finished (None before the first)."""
    return store.ingest_job.current


# A resource, not data: the list (of frozen results, never changed in place) is handed out
# as is; cache_data would unpickle ~750 results again on every rerun of every page.
@st.cache_resource(show_spinner=False, max_entries=16)
def _measured(
    db_path: str, catalog_key: str, generation: int, _store: Store
) -> list[MeasuredResult]:
    return _store.measured_results()


def measured_results(ref: CatalogRef, store: Store) -> list[MeasuredResult]:
    """Every measured result: public rows, the user's runs, the team's Parquet files."""
    generation = runs_generation(store)
    return _measured(str(settings().database_file), ref.key, generation, store)


def user_results_key(results: list[MeasuredResult]) -> str:
    """A short key of the user's own results (what a performance-model fit depends on)."""
    digest = hashlib.sha256()
    for result in results:
        if result.origin == "user":
            digest.update(result.model_dump_json().encode())
    return digest.hexdigest()[:16]
