"""The dashboard's server: ``python -m pages.common.server [streamlit run options]``.

It is ``streamlit run app.py`` (the same options, the same server) that also imports, while
the browser loads the page, the modules a first script run needs (:data:`FIRST_PAGE_MODULES`).
Streamlit runs ``app.py`` only once a browser has connected, so a fresh server otherwise sits
idle while the browser fetches and compiles the front end (about a second here), then spends
as long importing pandas, DuckDB, plotly and the planner before the page can search. The
imports start once Streamlit's runtime has started (the server answers; its caches then
attach to the runtime as in a script run) and change nothing a page computes; a script run
that starts meanwhile waits for the module it needs, as Python's import lock makes any
thread do. Measured on a 2-core machine: a page opened 3 s after the server answers draws
its plan ~1.4 s sooner; one opened at once, no sooner (the browser's loading and these
imports then share the two cores).
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
import time
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app.py"

#: What app.py and the Plan page (the default page) import, and the chart modules its first
#: run loads after the headline; the other pages share most of them.
FIRST_PAGE_MODULES = (
    "pages.common.heap",
    "pages.common.navigation",
    "pages.common.url_params",
    "pages.common.resources",
    "pages.common.scenario",
    "pages.common.planning",
    "pages.common.runs_folder",
    "pages.common.tables",
    "pages.common.ui",
    "pages.common.deploy",
    "pages.common.export",
    "planner.recommend",
    "planner.recommend_export",
    "pages.charts.plan",
    "pages.charts.workload",
)

#: how long the imports wait for Streamlit's runtime to exist before giving up (a server that
#: failed to start)
RUNTIME_WAIT_S = 60.0

log = logging.getLogger(__name__)


def import_first_page_modules(wait_s: float = RUNTIME_WAIT_S) -> list[str]:
    """Once Streamlit's runtime has started, import :data:`FIRST_PAGE_MODULES`; returns those
    imported. A module that fails to import is left to the page, which shows its error."""
    from streamlit import runtime
    from streamlit.runtime.runtime import RuntimeState

    deadline = time.monotonic() + wait_s
    while not runtime.exists() or runtime.get_instance().state == RuntimeState.INITIAL:
        if time.monotonic() > deadline:
            return []
        time.sleep(0.02)
    done = []
    for name in FIRST_PAGE_MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the page imports it again and reports what went wrong
            log.warning("preloading %s failed: %s", name, exc)
            continue
        done.append(name)
    return done


def main(argv: list[str]) -> int:
    """``streamlit run app.py *argv`` with the first page's modules imported meanwhile."""
    from streamlit.web import cli

    threading.Thread(
        target=import_first_page_modules, name="servewise-preload", daemon=True
    ).start()
    sys.argv = ["streamlit", "run", str(APP), *argv]
    try:
        cli.main(prog_name="streamlit")
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
