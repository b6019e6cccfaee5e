"""Damaged fit files, as a disk, an editor or another version leaves them: each function changes
the ``.npz`` fit at ``path`` in place (the cache's tests and the shipped fit's tests share them)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from planner.perf import fit_cache


@contextmanager
def _arrays(path: Path) -> Iterator[dict[str, Any]]:
    """The file's arrays, to change; written back (as ``np.savez`` does) when the block ends."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    yield arrays
    with path.open("wb") as handle:
        np.savez(handle, **arrays)


def truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def garbage(path: Path) -> None:
    path.write_bytes(b"not a zip file at all")


def tampered_array(path: Path) -> None:
    """theta0 changed, the header (and its checksum) not."""
    with _arrays(path) as arrays:
        arrays["theta0"] = arrays["theta0"] + 1.0


def other_key(path: Path) -> None:
    """A well-formed fit that names other data (checksum intact)."""
    with _arrays(path) as arrays:
        header = fit_cache.decode_header(arrays["header"])
        header["key"] = "0" * 32
        arrays["header"] = fit_cache.encode_header(header)


def pickled_object(path: Path) -> None:
    """An object array (loading it would need pickle): refused, never unpickled."""
    with _arrays(path) as arrays:
        arrays["theta0"] = np.array([object()] * 3, dtype=object)


def unicode_header(path: Path) -> None:
    """The header as the format before 3 wrote it (a unicode array)."""
    with _arrays(path) as arrays:
        arrays["header"] = np.array(json.dumps(fit_cache.decode_header(arrays["header"])))


Damage = Callable[[Path], None]
