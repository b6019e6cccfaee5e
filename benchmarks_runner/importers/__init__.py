"""Import other benchmark tools' results into Servewise run files.

``python -m benchmarks_runner import --format vllm|guidellm|aiperf FILE [--plan ...]``.
Formats (one module each, checked against the files the released tools write):

- ``vllm``: ``vllm bench serve --save-result [--save-detailed]`` JSON
  (:mod:`~benchmarks_runner.importers.vllm`);
- ``guidellm``: GuideLLM's benchmarks JSON, one run per benchmark
  (:mod:`~benchmarks_runner.importers.guidellm`);
- ``aiperf``: an AIPerf artifact folder (or its ``profile_export.jsonl``), warm-up phases,
  and a sweep folder as one run per folder (:mod:`~benchmarks_runner.importers.aiperf`).

A file that does not match its tool's schema (a count that is not an integer, a negative
duration, counts that do not add up) is refused whole with one line naming the field: no
traceback, and no run written. With ``plan`` (the deployment and engine settings the tool
measured) an imported run is a calibration point like a native run, under the same checks
(:func:`planner.runs.calibration_problem`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from benchmarks_runner.errors import ImportFormatError
from benchmarks_runner.http_client import one_line
from benchmarks_runner.importers import aiperf, guidellm, vllm
from benchmarks_runner.importers.common import ImportedRun, write_run

#: format -> reader of a file (or folder) into runs
READERS: dict[str, Callable[[Path], list[ImportedRun]]] = {
    "vllm": vllm.read,
    "guidellm": guidellm.read,
    "aiperf": aiperf.read,
}
FORMATS = tuple(READERS)


def read_file(fmt: str, path: Path) -> list[ImportedRun]:
    """The runs ``path`` of format ``fmt`` holds, checked, not yet written."""
    path = Path(path)
    reader = READERS.get(fmt)
    if reader is None:
        raise ImportFormatError(f"format {fmt!r} is not registered; available: {FORMATS}")
    if not path.exists():
        raise ImportFormatError(f"{path} does not exist")
    if not (path.is_dir() or path.is_file()):  # a FIFO would block the first read
        raise ImportFormatError(f"{path}: not a regular file or a folder; not read")
    try:
        return reader(path)
    except ImportFormatError:
        raise
    except ValidationError as exc:  # a model checked outside the importer's own rules
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        more = (
            f" ({exc.error_count()} problems; the first is named)" if exc.error_count() > 1 else ""
        )
        shown = f"{where}={first.get('input')!r}: " if where else ""
        message = first["msg"].removeprefix("Value error, ")
        raise ImportFormatError(
            one_line(f"{path}: not a valid {fmt} file: {shown}{message}{more}", 500)
        ) from None
    except (ValueError, TypeError, KeyError, IndexError, ArithmeticError, RecursionError) as exc:
        # a schema hole: still one line, never a traceback
        raise ImportFormatError(
            one_line(f"{path}: not a valid {fmt} file: {type(exc).__name__}: {exc}", 500)
        ) from None


def import_file(
    fmt: str, path: Path, runs_dir: Path, *, plan: dict[str, Any] | None = None
) -> list[Path]:
    """Import ``path`` of format ``fmt`` (vllm, guidellm, aiperf); returns the run dirs.

    Every run of the file is read and checked before the first is written: a bad file writes
    nothing."""
    runs = read_file(fmt, path)
    return [write_run(runs_dir, run, plan) for run in runs]


__all__ = ["FORMATS", "READERS", "ImportedRun", "import_file", "read_file"]
