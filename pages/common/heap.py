"""The dashboard process's first page: built without the cyclic garbage collector, and what it
leaves behind (imports, the catalog, the fitted model, the store) frozen out of later
collections.

A full collection visits every object the process holds; with Streamlit, pandas, plotly,
DuckDB and the planner loaded that is over a million objects and 150-250 ms each time, which
a sidebar change pays whenever one falls into its script run (measured with a ``gc`` callback
in the server during ``benchmarks/dashboard_latency_bench.py``). What the first page loads
lives as long as the process, so it is moved to the collector's permanent generation
(``gc.freeze``) once that page is done: later collections visit only what was made after it.
Objects frozen are still freed by reference counting; only a reference cycle among them would
never be collected, and the first page makes none that matter (at most a few thousand objects,
once).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

from planner.gc_pause import gc_paused

_LOCK = threading.Lock()
_frozen = False


@contextlib.contextmanager
def first_page_of_process() -> Iterator[None]:
    """Around a script run: the process's first one with collection paused and its heap
    frozen afterwards (however the run ended); any later one as it is."""
    with _LOCK:
        first = not _frozen
    if not first:
        yield
        return
    try:
        with gc_paused():
            yield
    finally:
        _freeze_once()


def _freeze_once() -> None:
    global _frozen
    with _LOCK:
        if not _frozen:
            gc.freeze()
            _frozen = True
