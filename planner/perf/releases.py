"""When an engine release came out: the release age of the fit's trend
(:func:`planner.perf.calibration.release_age`) and validation's slices by release date.

A release series (``major.minor``) is dated by the first file of that series uploaded to PyPI:
the JSON API's earliest ``upload_time`` over the series' versions, pre-releases included
(https://pypi.org/pypi/vllm/json, .../sglang/json, .../tensorrt-llm/json, retrieved
2026-12-02; the series after the shipped rows' newest, retrieved 2026-12-06). TensorRT-LLM's
0.x series start with a ``.dev`` nightly, so their date is the series' first nightly, weeks
before the tagged release; the slices it feeds are coarse (half-years), so the difference does
not move a row across one.

Every series up to the newest on PyPI at retrieval is listed, so that a current release is
dated (and takes the trend's age) rather than taken for an undated one; a release after the
tables takes their newest date (:func:`release_date`); a packaged variant or a version the
tables skip has no date and no dated slice counts it.
"""

from __future__ import annotations

import re
from datetime import date
from functools import cache

#: (engine family, "major.minor") -> first upload of the series to PyPI
RELEASE_DATES: dict[tuple[str, str], date] = {
    ("vllm", "0.6"): date(2024, 9, 5),
    ("vllm", "0.7"): date(2025, 1, 27),
    ("vllm", "0.8"): date(2025, 3, 18),
    ("vllm", "0.9"): date(2025, 5, 28),
    ("vllm", "0.10"): date(2025, 7, 25),
    ("vllm", "0.11"): date(2025, 10, 4),
    ("vllm", "0.12"): date(2025, 12, 3),
    ("vllm", "0.13"): date(2025, 12, 19),
    ("vllm", "0.14"): date(2026, 1, 20),
    ("vllm", "0.15"): date(2026, 1, 29),
    ("vllm", "0.16"): date(2026, 2, 26),
    # retrieved 2026-12-03 for session 39's rows: CloudRift's Kimi-K2.5 runs, vLLM PR 43232
    ("vllm", "0.17"): date(2026, 3, 7),
    ("vllm", "0.18"): date(2026, 3, 20),
    # retrieved 2026-12-04 for Scicom's llm-benchmaq runs (data/measured_benchmaq.csv)
    ("vllm", "0.19"): date(2026, 4, 3),
    ("vllm", "0.20"): date(2026, 4, 27),
    ("vllm", "0.21"): date(2026, 5, 15),
    ("vllm", "0.22"): date(2026, 5, 29),
    ("vllm", "0.23"): date(2026, 6, 13),
    ("vllm", "0.24"): date(2026, 6, 30),
    ("vllm", "0.25"): date(2026, 7, 11),
    ("vllm", "0.26"): date(2026, 7, 25),
    ("vllm", "0.27"): date(2026, 8, 10),
    ("vllm", "0.28"): date(2026, 8, 26),
    ("vllm", "0.29"): date(2026, 9, 9),
    ("vllm", "0.30"): date(2026, 9, 22),
    ("vllm", "0.31"): date(2026, 10, 5),
    ("vllm", "0.32"): date(2026, 10, 18),
    ("vllm", "0.33"): date(2026, 11, 2),
    ("vllm", "0.34"): date(2026, 11, 16),
    ("sglang", "0.4"): date(2024, 12, 3),
    ("sglang", "0.5"): date(2025, 8, 8),
    ("trtllm", "0.14"): date(2024, 9, 10),
    ("trtllm", "0.15"): date(2024, 10, 15),
    ("trtllm", "0.16"): date(2024, 11, 20),
    ("trtllm", "0.17"): date(2024, 12, 17),
    ("trtllm", "0.18"): date(2025, 2, 7),
    ("trtllm", "0.19"): date(2025, 3, 18),
    ("trtllm", "0.20"): date(2025, 4, 23),
    ("trtllm", "0.21"): date(2025, 6, 4),
    ("trtllm", "1.0"): date(2025, 6, 25),
    ("trtllm", "1.1"): date(2025, 8, 15),
    ("trtllm", "1.2"): date(2025, 9, 30),
    ("trtllm", "1.3"): date(2026, 1, 22),
    ("trtllm", "1.4"): date(2026, 10, 13),
}

#: SGLang's 0.4 and 0.5 series each ran for months (0.4.0 2024-12-03 to 0.4.10.post2
#: 2025-08-03; 0.5.0rc0 2025-08-08 to 0.5.23 2026-10-30), too long for one date: their patch
#: releases are dated one by one, (minor, patch) -> the first upload of the patch's versions,
#: pre- and post-releases included (same source; 0.5's retrieved 2026-12-06)
SGLANG_PATCH_DATES: dict[tuple[int, int], date] = {
    (4, 0): date(2024, 12, 3),
    (4, 1): date(2024, 12, 25),
    (4, 2): date(2025, 1, 27),
    (4, 3): date(2025, 2, 14),
    (4, 4): date(2025, 3, 13),
    (4, 5): date(2025, 4, 7),
    (4, 6): date(2025, 4, 27),
    (4, 7): date(2025, 6, 10),
    (4, 8): date(2025, 6, 24),
    (4, 9): date(2025, 7, 6),
    (4, 10): date(2025, 7, 31),
    (5, 0): date(2025, 8, 8),
    (5, 1): date(2025, 8, 23),
    (5, 2): date(2025, 9, 1),
    (5, 3): date(2025, 9, 15),
    (5, 4): date(2025, 10, 24),
    (5, 5): date(2025, 11, 6),
    (5, 6): date(2025, 12, 3),
    (5, 7): date(2026, 1, 1),
    (5, 8): date(2026, 1, 23),
    (5, 9): date(2026, 2, 23),
    (5, 10): date(2026, 3, 27),
    (5, 11): date(2026, 5, 5),
    (5, 12): date(2026, 5, 16),
    (5, 13): date(2026, 6, 11),
    (5, 14): date(2026, 6, 26),
    (5, 15): date(2026, 7, 10),
    (5, 16): date(2026, 7, 25),
    (5, 17): date(2026, 8, 8),
    (5, 18): date(2026, 8, 21),
    (5, 19): date(2026, 9, 4),
    (5, 20): date(2026, 9, 18),
    (5, 21): date(2026, 10, 1),
    (5, 22): date(2026, 10, 16),
    (5, 23): date(2026, 10, 30),
}

_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?")


def _numbers(family: str, version: str | None) -> tuple[int, ...] | None:
    """The version numbers the tables key ``version`` by: SGLang's patched series
    (0, minor, patch), every other release (major, minor); None without a leading
    ``major.minor``."""
    m = _VERSION.match(version or "")
    if m is None:
        return None
    major, minor, patch = int(m.group(1)), int(m.group(2)), m.group(3)
    patched = family == "sglang" and major == 0 and (minor, 0) in SGLANG_PATCH_DATES
    return (0, minor, int(patch)) if patched and patch is not None else (major, minor)


def _listed_date(family: str, numbers: tuple[int, ...]) -> date | None:
    if len(numbers) == 3:
        return SGLANG_PATCH_DATES.get((numbers[1], numbers[2]))
    return RELEASE_DATES.get((family, f"{numbers[0]}.{numbers[1]}"))


def listed(family: str, version: str | None) -> bool:
    """Whether the tables date ``version`` itself (not as a release after them)."""
    numbers = _numbers(family, version)
    return numbers is not None and _listed_date(family, numbers) is not None


@cache
def _newest(family: str) -> tuple[tuple[int, ...], date] | None:
    """The family's newest dated release in the tables, as (version numbers, date)."""
    dated: list[tuple[tuple[int, ...], date]] = [
        ((int(series.split(".")[0]), int(series.split(".")[1])), when)
        for (name, series), when in RELEASE_DATES.items()
        if name == family
    ]
    if family == "sglang":
        dated += [((0, minor, patch), when) for (minor, patch), when in SGLANG_PATCH_DATES.items()]
    return max(dated, key=lambda item: item[1]) if dated else None


def release_date(family: str, version: str | None) -> date | None:
    """The date of an engine release (``family`` vllm, sglang or trtllm; ``version`` as a
    measured row states it, e.g. ``0.4.10.post1`` or ``0.17.post1.dev (pytorch backend)``);
    None for a version without a leading ``major.minor`` or one the tables skip.

    A release after the family's newest in the tables (a user's release that came out after
    they were written) takes the newest one's date, the least it can be, so that the fit's
    release-age trend takes it for at least as new as the newest known release rather than for
    an undated one (no trend: a mid-2025 release)."""
    numbers = _numbers(family, version)
    if numbers is None:
        return None
    found = _listed_date(family, numbers)
    if found is not None:
        return found
    newest = _newest(family)
    if newest is None:
        return None
    # compared on the shorter depth: SGLang's (0, minor, patch) against a series' (major, minor)
    depth = min(len(numbers), len(newest[0]))
    return newest[1] if numbers[:depth] > newest[0][:depth] else None
