"""pages.common.server: ``streamlit run app.py`` that imports the first page's modules while the
browser loads it. Every browser test starts the dashboard this way (tests/browser/harness.py);
here, what it preloads and when."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pages.common import server

ROOT = Path(__file__).resolve().parents[2]


def test_every_preloaded_module_exists_and_is_imported_once_the_runtime_started() -> None:
    """In a fresh interpreter (nothing imported yet), with a stand-in for Streamlit's runtime
    (its cache storage, which the pages' cached functions look up when defined)."""
    code = """
import json
from types import SimpleNamespace
from streamlit import runtime
from streamlit.runtime.caching.storage.dummy_cache_storage import MemoryCacheStorageManager
from streamlit.runtime.runtime import RuntimeState
from pages.common import server
runtime.exists = lambda: True
runtime.get_instance = lambda: SimpleNamespace(
    cache_storage_manager=MemoryCacheStorageManager(), state=RuntimeState.NO_SESSIONS_CONNECTED
)
print(json.dumps(server.import_first_page_modules(wait_s=1.0)))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == list(server.FIRST_PAGE_MODULES)
    assert "preloading" not in done.stderr, done.stderr


def test_without_a_started_runtime_nothing_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that never started: the imports give up instead of running outside it."""
    from streamlit import runtime
    from streamlit.runtime.runtime import RuntimeState

    monkeypatch.setattr(runtime, "exists", lambda: False)
    assert server.import_first_page_modules(wait_s=0.05) == []
    monkeypatch.setattr(runtime, "exists", lambda: True)
    starting = SimpleNamespace(state=RuntimeState.INITIAL)
    monkeypatch.setattr(runtime, "get_instance", lambda: starting)
    assert server.import_first_page_modules(wait_s=0.05) == []


def test_a_module_that_fails_is_left_to_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlit import runtime
    from streamlit.runtime.runtime import RuntimeState

    monkeypatch.setattr(runtime, "exists", lambda: True)
    started = SimpleNamespace(state=RuntimeState.NO_SESSIONS_CONNECTED)
    monkeypatch.setattr(runtime, "get_instance", lambda: started)
    monkeypatch.setattr(server, "FIRST_PAGE_MODULES", ("pages.common.no_such_module", "planner"))
    assert server.import_first_page_modules(wait_s=1.0) == ["planner"]


def test_the_server_runs_app_py_with_the_options_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line becomes ``streamlit run <repo>/app.py <options>`` (Streamlit's own
    command line parses them), and its exit status is returned."""
    from streamlit.web import cli

    seen: list[list[str]] = []

    def fake_main(prog_name: str) -> None:
        seen.append(list(sys.argv))
        raise SystemExit(3)

    monkeypatch.setattr(cli, "main", fake_main)
    monkeypatch.setattr(server, "import_first_page_modules", lambda: [])
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    assert server.main(["--server.port", "8600"]) == 3
    assert seen == [["streamlit", "run", str(server.APP), "--server.port", "8600"]]
    assert server.APP.name == "app.py" and server.APP.is_file()
