"""Python's cyclic garbage collector held off while a search builds its objects.

CPython runs a collection each time some hundreds of container objects have been allocated
and not freed, and a full one, over every object the process holds, once enough of them have
survived. A search allocates hundreds of thousands of small objects (layouts, memory plans,
engine settings, predictions) and keeps many of them in its caches: the collections it
triggers find nothing to free (its objects are freed by reference counting) yet, in the
dashboard's process of a million objects, cost a fifth of a new search, a full collection
150-250 ms at a time. :func:`gc_paused` suspends automatic collection for such a stretch;
the collector resumes afterwards and sees what was allocated as one generation.

Nested and concurrent pauses (two sessions searching at once) are counted: collection
resumes when the last one ends, and only if it was enabled before the first.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_LOCK = threading.Lock()
_depth = 0
_resume = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Automatic garbage collection off for the ``with`` block (explicit ``gc.collect()``
    still runs)."""
    global _depth, _resume
    with _LOCK:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _LOCK:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
