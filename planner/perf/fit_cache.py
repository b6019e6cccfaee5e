"""The fitted performance model on disk, so that a fit happens once, not once per process.

A fit simulates every measured row (~10-15 s on two cores); what predictions need afterwards is
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
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import Any, cast

import numpy as np

from planner.perf.calibration import N_FITTED, FittedCoefficients
from planner.perf.uncertainty import MeasuredPoint, SeenData

log = logging.getLogger(__name__)

FORMAT_VERSION = 2  # 2: the seen-data sets of the novelty reasons
KEEP_FILES = 8
_PLANNER = Path(__file__).resolve().parents[1]
#: sources a fit depends on: the performance model, memory and workload arithmetic, the catalog
FIT_CODE: tuple[str, ...] = ("perf/*.py", "memory.py", "workload.py", "catalog/*.py")
_WRITE_LOCK = threading.Lock()


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


def cache_file(cache_dir: Path, key: str) -> Path:
    return cache_dir / f"perf-fit-{key}.npz"


# ----- writing -------------------------------------------------------------------------------
def _checksum(arrays: dict[str, np.ndarray]) -> str:
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
    }
    fitted = state.fitted
    if fitted is not None:
        arrays["theta0"] = np.asarray(fitted.theta0, dtype=float)
        arrays["covariance"] = np.asarray(fitted.covariance, dtype=float)
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
    header["checksum"] = _checksum(arrays)
    arrays["header"] = np.array(json.dumps(header))
    return arrays


def save(cache_dir: Path, key: str, state: FitState) -> Path | None:
    """Write the fit atomically (temporary file, then rename); None when it cannot be written
    (a read-only directory only costs the next process a fit)."""
    path = cache_file(cache_dir, key)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp.npz")
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as handle:
            np.savez(handle, **cast("dict[str, Any]", _pack(state, key)))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("performance-model fit not cached in %s: %s", cache_dir, exc)
        with contextlib.suppress(OSError):
            tmp.unlink()
        return None
    _prune(cache_dir)
    return path


def _prune(cache_dir: Path) -> None:
    with _WRITE_LOCK, contextlib.suppress(OSError):
        files = sorted(
            cache_dir.glob("perf-fit-*.npz"), key=lambda p: p.stat().st_mtime, reverse=True
        )
        for old in files[KEEP_FILES:]:
            with contextlib.suppress(OSError):
                old.unlink()


# ----- reading -------------------------------------------------------------------------------
class CorruptCacheError(ValueError):
    """A cache file that must not be used (the reason says why)."""


def _unpack(arrays: dict[str, np.ndarray], key: str) -> FitState:
    try:
        header = json.loads(str(arrays.pop("header")[()]))
    except (KeyError, ValueError) as exc:
        raise CorruptCacheError(f"no readable header ({exc})") from None
    if header.get("format") != FORMAT_VERSION:
        raise CorruptCacheError(f"format {header.get('format')!r}, expected {FORMAT_VERSION}")
    if header.get("key") != key:
        raise CorruptCacheError(f"written for key {header.get('key')!r}, not {key!r}")
    if header.get("checksum") != _checksum(arrays):
        raise CorruptCacheError("checksum of the arrays does not match")
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
        covariance = arrays["covariance"]
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
    return FitState(fitted=fitted, points=points, combos=combos, seen=seen)


def load(cache_dir: Path, key: str) -> FitState | None:
    """The cached fit for ``key``, or None (missing, or corrupt: then the file is deleted)."""
    path = cache_file(cache_dir, key)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
        return _unpack(arrays, key)
    except Exception as exc:  # any unreadable file is rebuilt, never trusted
        log.warning("performance-model cache %s not used (%s); refitting", path, exc)
        with contextlib.suppress(OSError):
            path.unlink()
        return None


def combos_of(samples: Iterable[Any]) -> list[tuple[str, str, str | None]]:
    """(family, GPU, release) of every fitted sample, sorted and without repeats."""
    return sorted({(s.family, s.gpu, s.version) for s in samples}, key=str)
