"""Simulated measured rows on disk, so that a refit simulates only the rows it has not seen.

A fit first simulates every measured row (:func:`planner.perf.calibration.build_sample`, ~25 s
for the embedded ~1,200 rows on two cores), then fits the coefficients (~12 s). A row's first
simulation does not depend on any fit (a clock-driven row is simulated with the prior
coefficients, and :func:`planner.perf.calibration.calibrate` re-simulates it with the fit), only
on the row, on what the catalog holds for it and on the code. So after a verification run adds
one row, the refit needs one new simulation, not 1,200; the same holds for every process that
fits the same data (the dashboard's background refit, ``planner validate``, the tests).

The traces are kept in ``<cache_dir>/sim-rows-<key>.npz`` (the fit cache's directory, see
:mod:`planner.perf.fit_cache`), where the key hashes this file's format, the fitting code's
version (:func:`planner.perf.fit_cache.code_version`) and the catalog's fingerprint; a row is
found by a hash of its full content. As with the fit cache, the file holds only arrays and a
JSON header (``numpy.load`` with ``allow_pickle=False``), with a SHA-256 of the arrays; a file
that fails a check is deleted and its rows are simulated again. The rows' arrays are stored
concatenated, field by field, with each row's length, compressed at zlib level 1 (~140 MB for the
embedded rows, ~3.5 s to write, ~3 s to read: :data:`planner.perf.fit_cache.COMPRESS_LEVEL`).

When many rows are missing (a new install's first refit, the first fit after an upgrade),
processes fitting at once share the work: the missing rows are dealt into :data:`PARTS` parts,
each simulated by the process that claims it first (``sim-claim-<key>-<part>``, created
exclusively) and written as an added file of its own, which the others read instead of
simulating it too (:func:`claim`, :func:`load_part`; a claim whose process is gone, or older
than :data:`CLAIM_STALE_S`, is taken over).

The clock-driven rows a fit simulated again with its coefficients (its second round) depend on
that fit: they are kept in a file of the fit's own, ``sim-clocked-<fit key>.npz`` (the fit
cache's key), named by their row and the coefficient vector (:func:`clocked_row_key`), the
:data:`KEEP_CLOCKED` newest such files (~65 MB each for the embedded rows). The first process
that reads the fit from disk and needs its fitted rows (``planner validate``, the Benchmarks
page) writes it; the next one rebuilds them from it in seconds, and a fit of the same data
skips their simulations. The clock-driven rows simulated with the roofline coefficients
(``planner validate``'s baseline) are kept the same way, in ``sim-roofline-<key>.npz``.

Rows simulated after the file exists (a verification run's, a team's new runs) go into a small
file of their own beside it, ``sim-rows-<key>+<rows>.npz``, so that adding one row writes one
row's arrays, not the whole file again (which took ~10 s of each refit after a verification
run on two cores, 2026-12-05); the parts of a cold simulation are such files too, and a key
may have them and no main file yet. After :data:`MAX_ADDED` such files, the next addition
writes them all into the main file. That bound counts the parts: with 8, a new install's first
refit after its parts were simulated rewrote every row into the main file (that refit took
40.4 s, 28.4 s without the rewrite: session 57, two cores).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from planner.perf.fit_cache import (
    CorruptCacheError,
    array_checksum,
    checked_header,
    code_version,
    encode_header,
    prune,
    read_arrays,
    write_arrays,
)
from planner.perf.simulator import SimTrace
from planner.perf.step_time import N_FEATURES

FORMAT_VERSION = 1
#: the newest files kept (one per catalog and code version a process fitted with)
KEEP_FILES = 2
#: at most this many rows in one file (the embedded rows and a team's runs are ~1,300)
MAX_ROWS = 20_000
#: the parts the missing rows are dealt into when at least COOPERATE_MIN rows are missing
PARTS = 8
#: at most this many files of added rows (parts included) beside a key's main file
MAX_ADDED = PARTS + 8
COOPERATE_MIN = 64
#: a claim older than this is taken over (its process died, or runs on another machine)
CLAIM_STALE_S = 600.0
#: the newest files of fits' re-simulated rows kept
KEEP_CLOCKED = 2

#: a row's arrays of one entry per request (or group of identical requests)
_RAGGED: tuple[str, ...] = (
    "count",
    "input_len",
    "output_len",
    "arrival",
    "arrival_time",
    "first",
    "finish",
    "gap_terms",
    "gap_weight",
)
#: a row's arrays of one entry per step term
_PER_TERM: tuple[str, ...] = ("end", "running_integral", "kv_integral")
#: a row's numbers
_SCALARS: tuple[str, ...] = (
    "kv_max",
    "preemptions",
    "kv_capacity_tokens",
    "steps",
    "time_driven",
    "start_time",
)
#: what a fit's simulation leaves empty (``timeline=False``): a trace with a timeline is not kept
_TIMELINE: tuple[str, ...] = (
    "timeline_terms",
    "timeline_kv",
    "timeline_running",
    "timeline_waiting",
)
_TERM_ARRAYS = frozenset({"arrival", "first", "finish", "gap_terms"})  # (n, N_FEATURES)


def stored_fields() -> set[str]:
    """Every :class:`~planner.perf.simulator.SimTrace` field this file stores or leaves out
    on purpose (a new field must be added here, or cached traces would lose it: the test
    suite checks that every field is named)."""
    return {*_RAGGED, *_PER_TERM, *_SCALARS, *_TIMELINE, "notes"}


def cache_key(catalog_fingerprint: str) -> str:
    text = f"{FORMAT_VERSION}:{code_version()}:{catalog_fingerprint}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def row_key(result_content: str) -> str:
    """The name of a measured row in the file: a hash of its full content (JSON)."""
    return hashlib.sha256(result_content.encode()).hexdigest()[:32]


def clocked_row_key(row: str, c: np.ndarray) -> str:
    """The name of a clock-driven row simulated again with the coefficient vector ``c`` (the
    fit's second round, :func:`planner.perf.calibration.calibrate`): its row key and the
    vector's bytes."""
    vector = np.ascontiguousarray(c, dtype=float).tobytes()
    return hashlib.sha256(row.encode() + b":" + vector).hexdigest()[:32]


def cache_file(cache_dir: Path, key: str) -> Path:
    return cache_dir / f"sim-rows-{key}.npz"


def clocked_file(cache_dir: Path, fit_key: str, kind: str = "clocked") -> Path:
    return cache_dir / f"sim-{kind}-{fit_key}.npz"


def added_files(cache_dir: Path, key: str) -> list[Path]:
    """The files of rows added beside ``key``'s main file, oldest first."""
    files: list[tuple[float, Path]] = []
    for path in cache_dir.glob(f"sim-rows-{key}+*.npz"):
        with contextlib.suppress(OSError):
            files.append((path.stat().st_mtime, path))
    return [path for _, path in sorted(files)]


def cacheable(trace: SimTrace) -> bool:
    return all(getattr(trace, name).size == 0 for name in _TIMELINE)


# ----- writing -------------------------------------------------------------------------------
def _pack(traces: Mapping[str, SimTrace], key: str) -> dict[str, np.ndarray]:
    names = sorted(traces)
    rows = [traces[name] for name in names]
    arrays: dict[str, np.ndarray] = {}
    for name in _RAGGED:
        parts = [np.asarray(getattr(t, name)) for t in rows]
        arrays[f"{name}.lengths"] = np.array([len(p) for p in parts], dtype=np.int64)
        if name in _TERM_ARRAYS:
            arrays[name] = np.concatenate(parts) if parts else np.zeros((0, N_FEATURES))
        else:
            arrays[name] = np.concatenate(parts) if parts else np.zeros(0)
    for name in _PER_TERM:
        arrays[name] = (
            np.stack([np.asarray(getattr(t, name), dtype=float) for t in rows])
            if rows
            else np.zeros((0, N_FEATURES))
        )
    header: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "key": key,
        "rows": names,
        "scalars": [[_scalar(getattr(t, name)) for name in _SCALARS] for t in rows],
        "notes": [list(t.notes) for t in rows],
        "checksum": array_checksum(arrays),
    }
    arrays["header"] = encode_header(header)
    return arrays


def _scalar(value: Any) -> float | int | bool:
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    return float(value)


def save(
    cache_dir: Path,
    key: str,
    traces: Mapping[str, SimTrace],
    added: Mapping[str, SimTrace] | None = None,
) -> Path | None:
    """Write ``traces`` (row key -> trace) as the file for ``key``, atomically; None when it
    cannot be written (a read-only directory only costs the next fit its simulations).

    ``added``: those of ``traces`` that are not on disk yet. Where ``key``'s main file or a
    file of added rows exists (the parts of a cold simulation) and fewer than
    :data:`MAX_ADDED` files of added rows lie beside it, only these are written, into a file
    of their own; otherwise ``traces`` replace the main file and the added files it now holds
    are deleted."""
    main = cache_file(cache_dir, key)
    beside = added_files(cache_dir, key)
    if added is not None and (beside or main.exists()) and len(beside) < MAX_ADDED:
        kept = {name: t for name, t in added.items() if cacheable(t)}
        if not kept:
            return None
        return write_arrays(
            part_file(cache_dir, key, part_name(sorted(kept))),
            _pack(kept, key),
            what="simulated rows",
            compressed=True,
        )
    kept = {name: t for name, t in traces.items() if cacheable(t)}
    if len(kept) > MAX_ROWS:
        kept = dict(list(kept.items())[-MAX_ROWS:])
    path = write_arrays(main, _pack(kept, key), what="simulated rows", compressed=True)
    if path is not None:
        for old in beside:  # their rows are in the main file now
            with contextlib.suppress(OSError):
                old.unlink()
        _prune_keys(cache_dir)
    return path


def save_clocked(
    cache_dir: Path, fit_key: str, traces: Mapping[str, SimTrace], kind: str = "clocked"
) -> Path | None:
    """Write the rows a fit simulated again (clocked row key -> trace) as its file; ``kind``
    ``roofline``: the rows simulated with the roofline coefficients (``planner validate``'s
    baseline, which depends on no fit: ``fit_key`` is then this module's :func:`cache_key`)."""
    kept = {name: t for name, t in traces.items() if cacheable(t)}
    path = write_arrays(
        clocked_file(cache_dir, fit_key, kind),
        _pack(kept, fit_key),
        what="re-simulated rows",
        compressed=True,
    )
    if path is not None:
        prune(cache_dir, f"sim-{kind}-*.npz", KEEP_CLOCKED)
    return path


# ----- simulating a cold cache in parts, with other processes ----------------------------------
def part_name(rows: Sequence[str]) -> str:
    """The name of a file of added rows, or of a part of the missing rows (a hash of their row
    keys)."""
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]


def part_file(cache_dir: Path, key: str, name: str) -> Path:
    """A file of rows beside ``key``'s main file: added rows, or a part (see :func:`save`)."""
    return cache_dir / f"sim-rows-{key}+{name}.npz"


def _claim_file(cache_dir: Path, key: str, name: str) -> Path:
    return cache_dir / f"sim-claim-{key}-{name}"


def claim(cache_dir: Path, key: str, name: str) -> bool | None:
    """Claim the part ``name`` for this process: True when claimed, False when another live
    process holds it, None when the directory takes no claim (read-only: simulate it alone)."""
    path = _claim_file(cache_dir, key, name)
    for _ in range(2):
        try:
            handle = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if not _stale(path):
                return False
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        except OSError:
            return None
        with os.fdopen(handle, "w") as out:
            out.write(str(os.getpid()))
        return True
    return False


def _stale(path: Path) -> bool:
    try:
        pid = int(path.read_text() or "0")
        age = time.time() - path.stat().st_mtime
    except (OSError, ValueError):
        return False  # being written, or just released
    if age > CLAIM_STALE_S:
        return True
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def release(cache_dir: Path, key: str, name: str) -> None:
    with contextlib.suppress(OSError):
        _claim_file(cache_dir, key, name).unlink()


def save_part(cache_dir: Path, key: str, name: str, traces: Mapping[str, SimTrace]) -> Path | None:
    """Write a claimed part's rows (those that simulated; none is a part all the same)."""
    kept = {row: t for row, t in traces.items() if cacheable(t)}
    return write_arrays(
        part_file(cache_dir, key, name), _pack(kept, key), what="simulated rows", compressed=True
    )


def load_part(cache_dir: Path, key: str, name: str) -> dict[str, SimTrace] | None:
    """A part's rows once its file is written; None before (or when it failed its check)."""
    return read_arrays(part_file(cache_dir, key, name), lambda a: _unpack(a, key), "simulated rows")


def _prune_keys(cache_dir: Path) -> None:
    """Keep the files of the :data:`KEEP_FILES` keys written last (a key's main file and the
    files of rows added or simulated in parts beside it; a key may have parts and no main file
    yet), and delete the rest, with the dead claims of the keys deleted."""
    written: dict[str, float] = {}
    files: list[tuple[str, Path]] = []
    for path in cache_dir.glob("sim-rows-*.npz"):
        key = path.name[len("sim-rows-") : -len(".npz")].split("+", 1)[0]
        with contextlib.suppress(OSError):
            written[key] = max(written.get(key, 0.0), path.stat().st_mtime)
            files.append((key, path))
    kept = set(sorted(written, key=written.__getitem__, reverse=True)[:KEEP_FILES])
    for key, path in files:
        if key not in kept:
            with contextlib.suppress(OSError):
                path.unlink()
    for path in cache_dir.glob("sim-claim-*"):
        if path.name[len("sim-claim-") :].split("-", 1)[0] not in kept and _stale(path):
            with contextlib.suppress(OSError):
                path.unlink()


# ----- reading -------------------------------------------------------------------------------
def _unpack(arrays: dict[str, np.ndarray], key: str) -> dict[str, SimTrace]:
    header = checked_header(arrays, key, FORMAT_VERSION)
    names = [str(n) for n in header["rows"]]
    scalars, notes = header["scalars"], header["notes"]
    n = len(names)
    if len(scalars) != n or len(notes) != n:
        raise CorruptCacheError(f"{n} rows but {len(scalars)} scalars and {len(notes)} notes")
    split: dict[str, list[np.ndarray]] = {}
    for name in _RAGGED:
        values, lengths = arrays[name], arrays[f"{name}.lengths"]
        if lengths.shape != (n,) or int(lengths.sum()) != len(values) or (lengths < 0).any():
            raise CorruptCacheError(f"{name}: lengths do not add up to {len(values)} entries")
        if name in _TERM_ARRAYS and (values.ndim != 2 or values.shape[1] != N_FEATURES):
            raise CorruptCacheError(f"{name} has shape {values.shape}, not (n, {N_FEATURES})")
        split[name] = np.split(values, np.cumsum(lengths)[:-1]) if n else []
    for name in _PER_TERM:
        if arrays[name].shape != (n, N_FEATURES):
            raise CorruptCacheError(f"{name} has shape {arrays[name].shape}")
    out: dict[str, SimTrace] = {}
    for i, row in enumerate(names):
        if len(scalars[i]) != len(_SCALARS):
            raise CorruptCacheError(f"row {row} has {len(scalars[i])} numbers")
        numbers = dict(zip(_SCALARS, scalars[i], strict=True))
        out[row] = SimTrace(
            **{name: split[name][i] for name in _RAGGED},
            **{name: arrays[name][i] for name in _PER_TERM},
            kv_max=float(numbers["kv_max"]),
            preemptions=int(numbers["preemptions"]),
            kv_capacity_tokens=int(numbers["kv_capacity_tokens"]),
            steps=int(numbers["steps"]),
            time_driven=bool(numbers["time_driven"]),
            start_time=float(numbers["start_time"]),
            notes=[str(note) for note in notes[i]],
        )
    return out


def load(cache_dir: Path, key: str) -> dict[str, SimTrace]:
    """The rows stored for ``key`` (row key -> trace), from its main file and the files of
    rows added beside it; a file that fails a check is deleted and gives none."""
    rows = read_arrays(cache_file(cache_dir, key), lambda a: _unpack(a, key), "simulated rows")
    out = dict(rows or {})
    for path in added_files(cache_dir, key):
        out.update(read_arrays(path, lambda a: _unpack(a, key), "simulated rows") or {})
    return out


def load_clocked(cache_dir: Path, fit_key: str, kind: str = "clocked") -> dict[str, SimTrace]:
    """The rows the fit ``fit_key`` simulated again (clocked row key -> trace), if kept."""
    rows = read_arrays(
        clocked_file(cache_dir, fit_key, kind),
        lambda a: _unpack(a, fit_key),
        "re-simulated rows",
    )
    return dict(rows or {})
