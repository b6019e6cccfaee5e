"""What is derived once from a frozen object, kept by the object's identity.

A search asks the same frozen objects (a trace's length distributions, a model's
architecture) for the same derived figures for every candidate. Hashing such an object to key a
cache costs about as much as the figure (a trace holds thousands of lengths), so the memo is
keyed by identity instead: a weak reference to the object, and the memo dropped with it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: id(object) -> (a weak reference to it, its memo)
_MEMOS: dict[int, tuple[weakref.ref[Any], dict[Any, Any]]] = {}


def _memo_of(owner: object) -> dict[Any, Any]:
    """The memo of ``owner`` (frozen: nothing it derives may change), empty at first."""
    held = _MEMOS.get(id(owner))
    if held is not None and held[0]() is owner:
        return held[1]
    memo: dict[Any, Any] = {}
    key = id(owner)
    # the callback runs as the object is freed, before its id can name another object
    _MEMOS[key] = (weakref.ref(owner, lambda _ref: _MEMOS.pop(key, None)), memo)
    return memo


def memoised(owner: object, key: object, compute: Callable[[], T]) -> T:
    """``compute()`` once for ``owner`` and ``key``, from its memo afterwards."""
    memo = _memo_of(owner)
    if key not in memo:
        memo[key] = compute()
    return memo[key]
