"""When an engine release came out, for slicing validation by release age.

A release series (``major.minor``) is dated by the first file of that series uploaded to PyPI:
the JSON API's earliest ``upload_time`` over the series' versions, pre-releases included
(https://pypi.org/pypi/vllm/json, .../sglang/json, .../tensorrt-llm/json, retrieved
2026-12-02). TensorRT-LLM's 0.x series start with a ``.dev`` nightly, so their date is the
series' first nightly, weeks before the tagged release; the slices it feeds are coarse
(half-years), so the difference does not move a row across one.

Only series the shipped measured rows or the pinned launch commands use are listed; a version
outside the table (a user's newer release) has no date and no dated slice counts it.
"""

from __future__ import annotations

import re
from datetime import date

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
    # retrieved 2026-12-03 for session 39's rows: CloudRift's Kimi-K2.5 runs, vLLM PR 43232
    ("vllm", "0.17"): date(2026, 3, 7),
    # retrieved 2026-12-04 for Scicom's llm-benchmaq runs (data/measured_benchmaq.csv)
    ("vllm", "0.19"): date(2026, 4, 3),
    ("vllm", "0.22"): date(2026, 5, 29),
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
}

#: SGLang's 0.4 series ran for eight months (0.4.0 2024-12-03 to 0.4.10.post2 2025-08-03), too
#: long for one date: its patch releases are dated one by one (same source)
SGLANG_04_PATCH_DATES: dict[int, date] = {
    0: date(2024, 12, 3),
    1: date(2024, 12, 25),
    2: date(2025, 1, 27),
    3: date(2025, 2, 14),
    4: date(2025, 3, 13),
    5: date(2025, 4, 7),
    6: date(2025, 4, 27),
    7: date(2025, 6, 10),
    8: date(2025, 6, 24),
    9: date(2025, 7, 6),
    10: date(2025, 7, 31),
}

_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?")


def release_date(family: str, version: str | None) -> date | None:
    """The date of an engine release (``family`` vllm, sglang or trtllm; ``version`` as a
    measured row states it, e.g. ``0.4.10.post1`` or ``0.17.post1.dev (pytorch backend)``);
    None for a version without a leading ``major.minor`` or outside the table."""
    if not version:
        return None
    m = _VERSION.match(version)
    if m is None:
        return None
    major, minor, patch = m.group(1), m.group(2), m.group(3)
    if family == "sglang" and (major, minor) == ("0", "4") and patch is not None:
        return SGLANG_04_PATCH_DATES.get(int(patch))
    return RELEASE_DATES.get((family, f"{major}.{minor}"))
