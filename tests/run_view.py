"""Tests read run directories through the one reader, :func:`planner.run_files.read_run_dir`,
and look at them as the plain JSON the files hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.run_files import read_run_dir


def read_run(run_dir: Path) -> dict[str, Any]:
    """``{"run": run.json, "requests": [...], "server_metrics": [...], "result": ...,
    "problems": [...]}``, every record as the dict of its JSON line."""
    run = read_run_dir(run_dir)
    return {
        "run": run.meta,
        "requests": [r.model_dump() for r in run.requests],
        "server_metrics": [s.model_dump() for s in run.server_metrics],
        "result": run.result,
        "problems": [str(p) for p in run.problems],
    }
