"""The fitted performance model on disk, so that a fit happens once, not once per process.

A fit simulates every measured row (~25 s on two cores, once: :mod:`planner.perf.sample_cache`
keeps the simulated rows) and fits (~12 s); what predictions need afterwards is
small: the fitted log-coefficients with their covariance and residuals, and where the measured
rows lie (for the distance to data). That state is written to
``<cache_dir>/perf-fit-<key>.npz`` (default ``<user_data_dir>/cache``, ``SERVEWISE_CACHE_DIR``)
where the key is a hash of

- the content of every measured result the fit used (public rows and the user's runs),
- what a simulation reads from the catalog (GPUs, instances, model configs), and
- the source of the code the fit runs (:data:`FIT_CODE`), so a changed step-time term or
  scheduler never reads an old fit.

The file holds only arrays and one JSON header (``numpy.load`` with ``allow_pickle=False``: a
tampered file cannot run code) and a SHA-256 of its arrays. A file that does not load, names
another key or format, has inconsistent shapes or a wrong checksum is deleted and the model is
refitted: a cache is never trusted, only reused. The newest :data:`KEEP_FILES` fits are kept.

The fit of the embedded data ships with the project (:data:`SHIPPED_FIT`, written by
:data:`REBUILD_COMMAND`), so that a fresh install predicts at once: it is read, with the same
checks, only when the key a process computes is the key the file was written for (no user runs,
the embedded catalog, this code). A shipped file that fails a check is left in place and
ignored: the model is fitted (and cached in the user's directory) as if it were absent.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import threading
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np

from planner.perf.calibration import N_FITTED, FittedCoefficients
from planner.perf.uncertainty import MeasuredPoint, SeenData

log = logging.getLogger(__name__)
T = TypeVar("T")

FORMAT_VERSION = 3  # 2: the seen-data sets of the novelty reasons; 3: UTF-8 header, triangle
KEEP_FILES = 8
_PLANNER = Path(__file__).resolve().parents[1]
#: sources a fit depends on: the performance model, memory and workload arithmetic, the catalog
#: and the engines' defaults (a changed default, such as TensorRT-LLM's chunking, changes the
#: simulated rows the fit is made of)
FIT_CODE: tuple[str, ...] = (
    "perf/*.py",
    "memory.py",
    "workload.py",
    "catalog/*.py",
    "engine.py",
)
_WRITE_LOCK = threading.Lock()
#: the fit of the embedded data (``data/``'s measured rows and catalog), shipped with the project
SHIPPED_FIT = _PLANNER.parent / "data" / "perf_fit.npz"
#: the one command that rebuilds :data:`SHIPPED_FIT` (after the data or the fitting code changed)
REBUILD_COMMAND = "python -m planner ship-fit"


@cache
def code_version() -> str:
    """SHA-256 over the source files in :data:`FIT_CODE` (names and bytes)."""
    digest = hashlib.sha256()
    for pattern in FIT_CODE:
        for path in sorted(_PLANNER.glob(pattern)):
            digest.update(path.relative_to(_PLANNER).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_key(results_fingerprint: str) -> str:
    """The file key of a fit: its data (results and catalog) and the fitting code's version."""
    digest = hashlib.sha256(f"{FORMAT_VERSION}:{code_version()}:{results_fingerprint}".encode())
    return digest.hexdigest()[:32]


@dataclass
class FitState:
    """What a fitted :class:`~planner.perf.model.PerformanceModel` needs to predict."""

    fitted: FittedCoefficients | None
    points: list[MeasuredPoint]
    combos: list[tuple[str, str, str | None]]  # (family, gpu, release) of every fitted row
    seen: SeenData = field(default_factory=SeenData)  # what the rows cover (novelty reasons)
    #: row key (:func:`planner.perf.sample_cache.row_key`) -> the coefficient vector the fit
    #: last simulated that clock-driven row with (:func:`planner.perf.calibration.calibrate`):
    #: what rebuilds the fitted rows without fitting again
    clocks: dict[str, np.ndarray] = field(default_factory=dict)


def cache_file(cache_dir: Path, key: str) -> Path:
    return cache_dir / f"perf-fit-{key}.npz"


class CorruptCacheError(ValueError):
    """A cache file that must not be used (the reason says why)."""


# ----- writing -------------------------------------------------------------------------------
def array_checksum(arrays: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in sorted(arrays):
        value = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{value.dtype.str}:{value.shape}".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def _pack(state: FitState, key: str) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    header: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "key": key,
        "points": [vars(p) for p in state.points],
        "combos": [list(c) for c in state.combos],
        "seen": {
            f.name: sorted(
                list(v) if isinstance(v, tuple) else [v] for v in getattr(state.seen, f.name)
            )
            for f in fields(SeenData)
        },
        "fitted": None,
        "clock_rows": sorted(state.clocks),
    }
    if state.clocks:
        rows = header["clock_rows"]
        arrays["clocks"] = np.stack([np.asarray(state.clocks[r], dtype=float) for r in rows])
    fitted = state.fitted
    if fitted is not None:
        arrays["theta0"] = np.asarray(fitted.theta0, dtype=float)
        arrays["covariance_upper"] = _upper_triangle(np.asarray(fitted.covariance, dtype=float))
        levels: list[list[str]] = []
        for level, keyed in fitted.levels.items():
            for name, values in keyed.items():
                arrays[f"level{len(levels)}"] = np.asarray(values, dtype=float)
                levels.append([level, name])
        columns: list[str] = []
        for name, cols in fitted.columns.items():
            arrays[f"column{len(columns)}"] = np.asarray(cols, dtype=np.int64)
            columns.append(name)
        residuals: list[list[str]] = []
        for (family, metric), values in fitted.residuals.items():
            arrays[f"residual{len(residuals)}"] = np.asarray(values, dtype=float)
            residuals.append([family, metric])
        header["fitted"] = {
            "levels": levels,
            "columns": columns,
            "residuals": residuals,
            "residual_scale": fitted.residual_scale,
            "n_rows": fitted.n_rows,
        }
    header["checksum"] = array_checksum(arrays)
    arrays["header"] = encode_header(header)
    return arrays


def encode_header(header: dict[str, Any]) -> np.ndarray:
    """The JSON header as UTF-8 bytes (a unicode array would take four bytes a character)."""
    return np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)


def decode_header(value: np.ndarray) -> dict[str, Any]:
    if value.dtype != np.uint8 or value.ndim != 1:
        raise CorruptCacheError(f"a header of {value.dtype} {value.shape}, not UTF-8 bytes")
    header = json.loads(value.tobytes().decode())
    if not isinstance(header, dict):
        raise CorruptCacheError("the header is not a JSON object")
    return header


def _upper_triangle(matrix: np.ndarray) -> np.ndarray:
    """A symmetric matrix's upper triangle, row by row (half the bytes of the whole)."""
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or not (matrix == matrix.T).all():
        raise ValueError(f"a covariance of shape {matrix.shape} that is not exactly symmetric")
    return matrix[np.triu_indices(matrix.shape[0])]


def _symmetric_from(upper: np.ndarray) -> np.ndarray:
    """The inverse of :func:`_upper_triangle`: ``n(n+1)/2`` values -> the ``n x n`` matrix."""
    n = (math.isqrt(8 * upper.size + 1) - 1) // 2
    if upper.ndim != 1 or n * (n + 1) // 2 != upper.size:
        raise CorruptCacheError(f"a covariance triangle of {upper.size} values")
    matrix = np.zeros((n, n))
    rows, cols = np.triu_indices(n)
    matrix[rows, cols] = upper
    matrix[cols, rows] = upper
    return matrix


def save(cache_dir: Path, key: str, state: FitState) -> Path | None:
    """Write the fit atomically; None when it cannot be written (a read-only directory only
    costs the next process a fit)."""
    path = write_arrays(cache_file(cache_dir, key), _pack(state, key), what="performance-model fit")
    if path is not None:
        prune(cache_dir, "perf-fit-*.npz", KEEP_FILES)
    return path


def write_arrays(
    path: Path, arrays: dict[str, np.ndarray], *, what: str, compressed: bool = False
) -> Path | None:
    """Write ``arrays`` as the ``.npz`` file ``path``: a temporary file, then a rename, so a
    reader never sees half a file; None (and a warning naming ``what``) when it cannot be
    written. Shared by the caches in this package."""
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp.npz")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as handle:
            if compressed:
                _savez_fast(handle, arrays)
            else:
                np.savez(handle, **cast("dict[str, Any]", arrays))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("%s not cached in %s: %s", what, path.parent, exc)
        with contextlib.suppress(OSError):
            tmp.unlink()
        return None
    return path


#: zlib level of the compressed caches. numpy's ``savez_compressed`` takes zlib's default, 6:
#: on the sample cache of the embedded data (757 MB of arrays) level 1 wrote in 3.4 s against
#: 7.3 s, into 140 MB against 134 MB, and both read back in 2.7 s (session 57, two cores)
COMPRESS_LEVEL = 1


def _savez_fast(handle: Any, arrays: dict[str, np.ndarray]) -> None:
    """``np.savez_compressed`` at :data:`COMPRESS_LEVEL`: the same ``.npz`` layout (one
    ``<name>.npy`` member an array), which ``np.load`` reads as it reads numpy's own."""
    with zipfile.ZipFile(
        handle, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=COMPRESS_LEVEL
    ) as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)


def prune(cache_dir: Path, pattern: str, keep: int) -> None:
    """Delete all but the ``keep`` newest files of ``pattern`` in ``cache_dir``."""
    with _WRITE_LOCK, contextlib.suppress(OSError):
        files = sorted(cache_dir.glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in files[keep:]:
            with contextlib.suppress(OSError):
                old.unlink()


def write_shipped(path: Path, key: str, state: FitState) -> Path:
    """Write the fit as the shipped file: the cache's format, byte for byte the same for the
    same fit (members in name order, stored uncompressed, with a fixed 1980-01-01 timestamp),
    so that a rebuild of unchanged data leaves git nothing to commit."""
    arrays = _pack(state, key)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as archive:
            for name in sorted(arrays):
                info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                info.external_attr = 0o644 << 16
                with archive.open(info, "w") as member:
                    np.lib.format.write_array(member, arrays[name], allow_pickle=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


# ----- reading -------------------------------------------------------------------------------
def checked_header(arrays: dict[str, np.ndarray], key: str, version: int) -> dict[str, Any]:
    """The JSON header popped from a cache file's ``arrays``, once it names ``version`` and
    ``key`` and its checksum matches the arrays left; else :class:`CorruptCacheError`."""
    try:
        header = decode_header(arrays.pop("header"))
    except (KeyError, ValueError) as exc:
        raise CorruptCacheError(f"no readable header ({exc})") from None
    if header.get("format") != version:
        raise CorruptCacheError(f"format {header.get('format')!r}, expected {version}")
    if header.get("key") != key:
        raise CorruptCacheError(f"written for key {header.get('key')!r}, not {key!r}")
    if header.get("checksum") != array_checksum(arrays):
        raise CorruptCacheError("checksum of the arrays does not match")
    return header


def _unpack(arrays: dict[str, np.ndarray], key: str) -> FitState:
    header = checked_header(arrays, key, FORMAT_VERSION)
    points = [MeasuredPoint(**p) for p in header["points"]]
    combos = [(str(f), str(g), None if v is None else str(v)) for f, g, v in header["combos"]]
    seen_spec = header.get("seen") or {}
    sets: dict[str, Any] = {
        f.name: frozenset(
            tuple(str(x) for x in item) if len(item) > 1 else str(item[0])
            for item in seen_spec.get(f.name, [])
        )
        for f in fields(SeenData)
    }
    seen = SeenData(**sets)
    spec = header["fitted"]
    fitted = None
    if spec is not None:
        theta0 = arrays["theta0"]
        covariance = _symmetric_from(arrays["covariance_upper"])
        n_params = covariance.shape[0] if covariance.ndim == 2 else -1
        if theta0.shape != (N_FITTED,) or covariance.shape != (n_params, n_params):
            raise CorruptCacheError(
                f"shapes {theta0.shape} / {covariance.shape} do not fit {N_FITTED} terms"
            )
        levels: dict[str, dict[str, np.ndarray]] = {}
        for i, (level, name) in enumerate(spec["levels"]):
            values = arrays[f"level{i}"]
            if values.shape != (N_FITTED,):
                raise CorruptCacheError(f"level {level}:{name} has shape {values.shape}")
            levels.setdefault(level, {})[name] = values
        columns = {}
        for i, name in enumerate(spec["columns"]):
            cols = arrays[f"column{i}"]
            if cols.shape != (N_FITTED,) or int(cols.max(initial=-1)) >= n_params:
                raise CorruptCacheError(f"columns of {name} do not fit {n_params} parameters")
            columns[name] = cols.astype(int)
        residuals = {
            (family, metric): arrays[f"residual{i}"]
            for i, (family, metric) in enumerate(spec["residuals"])
        }
        fitted = FittedCoefficients(
            theta0=theta0,
            levels=levels,
            covariance=covariance,
            columns=columns,
            residual_scale=float(spec["residual_scale"]),
            residuals=residuals,
            n_rows=int(spec["n_rows"]),
        )
    rows = [str(r) for r in header.get("clock_rows", [])]
    clocks: dict[str, np.ndarray] = {}
    if rows:
        vectors = arrays.get("clocks")
        if vectors is None or vectors.ndim != 2 or vectors.shape[0] != len(rows):
            raise CorruptCacheError(f"{len(rows)} clock-driven rows but no vector for each")
        clocks = dict(zip(rows, vectors, strict=True))
    return FitState(fitted=fitted, points=points, combos=combos, seen=seen, clocks=clocks)


def load(cache_dir: Path, key: str) -> FitState | None:
    """The cached fit for ``key``, or None (missing, or corrupt: then the file is deleted)."""
    return read_arrays(
        cache_file(cache_dir, key), lambda arrays: _unpack(arrays, key), "performance-model fit"
    )


def read_arrays(path: Path, unpack: Callable[[dict[str, np.ndarray]], T], what: str) -> T | None:
    """``unpack`` of the ``.npz`` file ``path`` (read without pickles: a tampered file cannot
    run code); None when there is no file, or when it fails to load or ``unpack`` raises (then
    the file is deleted: a cache is never trusted, only reused)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
        return unpack(arrays)
    except Exception as exc:  # any unreadable file is rebuilt, never trusted
        log.warning("%s %s not used (%s); building it again", what, path, exc)
        with contextlib.suppress(OSError):
            path.unlink()
        return None


@dataclass(frozen=True)
class _ShippedFile:
    """The shipped file as read once: its arrays when they passed every check, else why not."""

    key: str | None
    arrays: dict[str, np.ndarray] | None
    problem: str | None


_SHIPPED_READS: dict[tuple[str, int, int], _ShippedFile] = {}
_SHIPPED_LOCK = threading.Lock()


def _read_shipped(path: Path) -> _ShippedFile:
    """Read and check ``path`` once per version of the file (its size and modification time)."""
    try:
        stat = path.stat()
    except OSError:
        return _ShippedFile(None, None, f"{path} is missing")
    version = (str(path), stat.st_mtime_ns, stat.st_size)
    with _SHIPPED_LOCK:
        known = _SHIPPED_READS.get(version)
        if known is not None:
            return known
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {name: data[name] for name in data.files}
            key = str(decode_header(arrays["header"]).get("key"))
            _unpack(dict(arrays), key)  # every check a cache file gets
            read = _ShippedFile(key, arrays, None)
        except Exception as exc:  # any file that fails a check is ignored, never trusted
            log.warning("shipped performance-model fit %s not used (%s); fitting", path, exc)
            read = _ShippedFile(None, None, f"{path} cannot be used ({exc})")
        _SHIPPED_READS.clear()  # one version of the file is kept
        _SHIPPED_READS[version] = read
        return read


def shipped_problem(key: str, path: Path | None = None) -> str | None:
    """Why the shipped fit does not serve ``key`` (missing, failing a check, or fitted on other
    data or code), or None when it does."""
    read = _read_shipped(path or SHIPPED_FIT)
    if read.problem is not None:
        return read.problem
    if read.key != key:
        return (
            f"{path or SHIPPED_FIT} was fitted for key {read.key}, not {key} (the measured "
            "results, the catalog or the fitting code changed since)"
        )
    return None


def load_shipped(key: str, path: Path | None = None) -> FitState | None:
    """The shipped fit when it was written for ``key`` (a process with no user runs on the
    embedded catalog and this code) and passes every check; else None."""
    read = _read_shipped(path or SHIPPED_FIT)
    if read.arrays is None or read.key != key:
        return None
    return _unpack({name: values.copy() for name, values in read.arrays.items()}, key)


def combos_of(samples: Iterable[Any]) -> list[tuple[str, str, str | None]]:
    """(family, GPU, release) of every fitted sample, sorted and without repeats."""
    return sorted({(s.family, s.gpu, s.version) for s in samples}, key=str)
