"""Shared test fixtures: the embedded catalog, isolated settings, a scratch store."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from planner.catalog import Catalog, load_catalog


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="session")
def session_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache directory for the whole test session (every test, every subprocess it starts,
    every pytest-xdist worker: their temporary directories share a parent): the performance
    model is fitted once per session and each measured row simulated once, not once per
    process (both caches write atomically). Tests of the caches pass their own directory."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    directory = root / "servewise-cache"
    directory.mkdir(exist_ok=True)
    return directory


@pytest.fixture(scope="session", autouse=True)
def _session_environment(
    session_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Set before any session-wide fixture runs (a session fixture that fits the model must
    not read or write the developer's own cache): the session cache, a session user data
    directory (each test gets its own on top, below), and pages that draw once the run files
    are in (a test of the background notice sets the wait to 0)."""
    from planner.settings import get_settings

    patch = pytest.MonkeyPatch()
    patch.setenv("SERVEWISE_CACHE_DIR", str(session_cache_dir))
    patch.setenv("SERVEWISE_USER_DATA_DIR", str(tmp_path_factory.mktemp("servewise-session")))
    patch.setenv("SERVEWISE_INGEST_WAIT_S", "120")
    get_settings.cache_clear()
    yield
    patch.undo()
    get_settings.cache_clear()


@pytest.fixture(autouse=True)
def _isolated_user_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """Never let a test touch the developer's own database or run files."""
    from planner.settings import get_settings

    user_dir = tmp_path_factory.mktemp("servewise-user")
    monkeypatch.setenv("SERVEWISE_USER_DATA_DIR", str(user_dir))
    get_settings.cache_clear()
    yield user_dir
    get_settings.cache_clear()
