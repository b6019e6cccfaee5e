"""``python -m planner store check``: ingest the runs folder and list what was quarantined.

    python -m planner store check [--runs-dir DIR] [--json]

Ingests every new or changed run directory (:mod:`planner.ingest`), then prints each run or
line that was left out, with its run directory, file, line, field, value and reason, and the
runs marked ``interrupted``. Exit code 0 when nothing is quarantined, 1 when something is (so a
script or CI job can fail on it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.settings import get_settings

if TYPE_CHECKING:
    from planner.store import Store


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("store", help="the store: check the ingested runs folder")
    actions = parser.add_subparsers(dest="action", required=True)
    check = actions.add_parser(
        "check", help="ingest the runs folder and list quarantined runs and lines"
    )
    check.add_argument("--runs-dir", type=Path, help="runs folder (default: the settings')")
    check.add_argument("--json", action="store_true", help="print JSON")
    check.set_defaults(func=run_check)


def _location(row: dict[str, Any]) -> str:
    where = f"{Path(str(row['run_dir'])).name}/{row['file']}"
    if row.get("line") is not None:
        where += f" line {int(row['line'])}"
    if row.get("field") is not None:
        value = row.get("value")
        where += f", {row['field']}" + (f"={value}" if value is not None else "")
    return where


def run_check(args: argparse.Namespace) -> int:
    from planner.store import open_store

    settings = get_settings()
    runs_dir = args.runs_dir or settings.runs_directory
    store = open_store(runs_dir=runs_dir, ingest="no")
    try:
        return _check(store, runs_dir, as_json=bool(args.json))
    finally:
        store.close()  # the database file is free again when the command returns


def _check(store: Store, runs_dir: Path, *, as_json: bool) -> int:
    progress = store.ingest_job.start(runs_dir)
    store.ingest_job.wait()
    problems: list[dict[str, Any]] = [
        {str(k): v for k, v in row.items()} for row in store.run_problems().to_dict("records")
    ]
    runs = store.runs()
    interrupted = runs[runs.status == "interrupted"][["run_id", "error"]].to_dict(orient="records")
    if as_json:
        print(
            json.dumps(
                {
                    "runs_dir": str(runs_dir),
                    "database": None if store.path is None else str(store.path),
                    "runs": len(runs),
                    "ingested_now": len(progress.ingested),
                    "problems": problems,
                    "interrupted": interrupted,
                    "error": progress.error,
                },
                indent=2,
                default=str,
            )
        )
        return 1 if problems or progress.error else 0
    print(f"{runs_dir}: {len(runs)} runs stored. {progress.describe()}.")
    if store.path is None:  # open_store fell back: another process holds the database file
        print("note: the database is held by another process (the dashboard?): checked in memory")
    if progress.error:
        print(f"error: {progress.error}")
    for run in interrupted:
        print(f"interrupted: {run['run_id']}: {run['error']}")
    if not problems:
        print("nothing quarantined")
        return 1 if progress.error else 0
    dirs = {row["run_dir"] for row in problems}
    print(f"{len(problems)} problems in {len(dirs)} run directories (left out, the rest kept):")
    for row in problems:
        print(f"  {_location(row)}: {row['reason']}")
    return 1
