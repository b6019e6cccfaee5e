"""``python -m planner.perf.refit PAYLOAD``: fit the performance model into the disk cache.

Started by :func:`planner.perf.model.performance_model_nowait` so that a refit never holds the
caller's interpreter lock (a dashboard page keeps answering). ``PAYLOAD`` is a pickle file the
caller wrote itself, ``(catalog, user results, cache directory)``; it is read once and removed.
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m planner.perf.refit PAYLOAD", file=sys.stderr)
        return 2
    payload = Path(argv[0])
    try:
        with payload.open("rb") as handle:
            catalog, results, cache_dir = pickle.load(handle)  # written by our own caller
    finally:
        payload.unlink(missing_ok=True)
    # A refit is background work: at a lower priority the dashboard that started it keeps
    # the cores for its pages (a fresh store over a team's runs refits while the first page
    # is drawn).
    if hasattr(os, "nice"):
        os.nice(10)
    from planner.perf.model import get_performance_model

    get_performance_model(catalog, results, cache_dir=Path(cache_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
