"""``python -m planner ship-fit``: fit the performance model on the embedded data and write
``data/perf_fit.npz``, the fit a fresh install reads instead of fitting.

    python -m planner ship-fit            # rebuild it (one fit: ~15 s on two idle cores)
    python -m planner ship-fit --check    # exit 1, saying why, when it is stale

Rebuild it after any change to the embedded measured results, the catalog's GPUs, instances or
model configs, or the fitting code (:data:`planner.perf.fit_cache.FIT_CODE`): a stale file is
ignored (a fresh install then fits first, ~16 s) and ``tests/planner/perf/test_shipped_fit.py``
fails naming this command. The fit is deterministic and the file is written without
timestamps, so a rebuild of unchanged inputs writes the same bytes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from planner.catalog import Catalog, load_catalog
from planner.perf import fit_cache


def embedded_fit_key(catalog: Catalog) -> str:
    """The fit cache's key of the embedded catalog with no user runs: what a fresh install
    (an empty ``SERVEWISE_USER_DATA_DIR``) computes, and what the shipped file must name."""
    from planner.perf.model import results_fingerprint

    return fit_cache.cache_key(results_fingerprint(catalog, catalog.measured))


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ship-fit",
        help="fit the performance model on the embedded data into data/perf_fit.npz",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="only say whether the shipped fit matches the embedded data and code (exit 1 if not)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=fit_cache.SHIPPED_FIT,
        help=f"where to write it (default {fit_cache.SHIPPED_FIT.name} in the embedded data)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    catalog = load_catalog()  # the embedded data only, never a user's catalog files
    key = embedded_fit_key(catalog)
    if args.check:
        problem = fit_cache.shipped_problem(key, args.output)
        if problem is not None:
            print(f"stale: {problem}; rebuild with {fit_cache.REBUILD_COMMAND}", file=sys.stderr)
            return 1
        print(f"{args.output} matches the embedded data and code (key {key})")
        return 0
    from planner.perf.model import PerformanceModel

    started, cpu = time.perf_counter(), time.process_time()
    model = PerformanceModel(catalog).fit(catalog.measured)
    fit_cache.write_shipped(args.output, key, model.fit_state())
    fitted = model.fitted.n_rows if model.fitted is not None else 0
    print(
        f"Wrote {args.output} ({args.output.stat().st_size / 1e3:,.0f} kB): fitted on {fitted} "
        f"of {len(catalog.measured)} measured rows in {time.perf_counter() - started:.1f} s "
        f"({time.process_time() - cpu:.1f} s CPU), key {key}"
    )
    return 0
