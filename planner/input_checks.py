"""Checks every entry point shares (command line, pages, files): numbers that are finite and in
range, names the catalog knows. Each failure is an :class:`~planner.errors.InvalidInputError`
naming the field, the value and what is allowed (for a name: the known ones).

A request's length is at most :data:`MAX_REQUEST_TOKENS`, the longest context a model's
config.json may declare (:mod:`planner.catalog.limits`): no published model takes more than
10,485,760 tokens (Llama 4 Scout). This module imports nothing heavy: the command lines use it
before they know what they will load.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from planner.errors import InvalidInputError, UnknownEntityError

if TYPE_CHECKING:
    from planner.catalog.loader import Catalog

#: Tokens of one request (prompt or answer), at most: the context a model config may declare
#: (~12.8x Llama 4 Scout's 10,485,760; the max_position_embeddings limit of a config.json).
MAX_REQUEST_TOKENS = 134_217_728
#: A latency target longer than a day is no serving SLO (and infinity is no number).
MAX_SLO_MS = 86_400_000.0
#: Requests/s or requests in flight: a million is far beyond any cluster of the catalog.
MAX_LOAD = 1_000_000


def finite_number(
    field: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    integer: bool = False,
) -> float:
    """``value`` as a float when it is a finite number within the bounds, else the error.

    ``low_open``: the lower bound itself is not allowed (``> low`` instead of ``>= low``).
    """
    allowed = allowed_range(low=low, high=high, low_open=low_open, integer=integer)
    if isinstance(value, bool):
        raise InvalidInputError(field, value, allowed)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(field, value, allowed) from None
    if not math.isfinite(number) or (integer and number != int(number)):
        raise InvalidInputError(field, value, allowed)
    if low is not None and (number < low or (low_open and number == low)):
        raise InvalidInputError(field, value, allowed)
    if high is not None and number > high:
        raise InvalidInputError(field, value, allowed)
    return number


def allowed_range(
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    integer: bool = False,
) -> str:
    """``a whole number from 1 to 1,024``, ``a finite number > 0`` and the like."""
    kind = "a whole number" if integer else "a finite number"

    def fmt(x: float) -> str:
        return f"{x:,.0f}" if float(x).is_integer() and abs(x) >= 1000 else f"{x:g}"

    if low is not None and high is not None and not low_open:
        return f"{kind} from {fmt(low)} to {fmt(high)}"
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {fmt(low)}")
    if high is not None:
        parts.append(f"<= {fmt(high)}")
    return f"{kind} {' and '.join(parts)}".strip()


def known_names(field: str, values: Iterable[str] | None, known: Iterable[str]) -> None:
    """Every one of ``values`` must be in ``known`` (exactly); the error lists the known ones
    and, for a name that only differs in case, the spelling the catalog uses."""
    if not values:
        return
    known_set = set(known)
    lowered = {k.lower(): k for k in known_set}
    for value in values:
        if value in known_set:
            continue
        spelled = lowered.get(str(value).lower())
        if spelled is not None:
            raise InvalidInputError(field, value, f"{spelled!r} (names are case-sensitive)")
        raise UnknownEntityError(field, value, sorted(known_set))


def check_search_names(
    catalog: Catalog,
    *,
    providers: Iterable[str] | None = None,
    regions: Iterable[str] | None = None,
    gpus: Iterable[str] | None = None,
    instances: Iterable[str] | None = None,
    precisions: Iterable[str] | None = None,
) -> None:
    """Names a search is restricted to must be ones the catalog holds: a typo would otherwise
    filter out every candidate and leave "nothing meets the SLOs" with nothing to explain it."""
    from planner.catalog.schema import PRECISIONS

    known_names("providers", providers, {i.provider for i in catalog.instances.values()})
    known_names("regions", regions, {p.region for p in catalog.prices})
    known_names("gpus", gpus, catalog.gpus)
    known_names("instances", instances, catalog.instances)
    known_names("precisions", precisions, PRECISIONS)


def check_file_size(name: str, size_bytes: int, limit_mb: float, setting: str) -> None:
    """A file larger than ``limit_mb`` megabytes (10^6 bytes) is refused, naming the setting
    that raises the limit."""
    if size_bytes > limit_mb * 1e6:
        raise InvalidInputError(
            f"{name}: size",
            f"{size_bytes / 1e6:,.1f} MB" if size_bytes >= 1e6 else f"{size_bytes / 1e6:.3g} MB",
            f"at most {limit_mb:g} MB (the setting {setting} raises the limit)",
        )
