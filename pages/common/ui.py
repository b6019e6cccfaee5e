"""Small page helpers: show planner errors as messages, never as tracebacks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st
from pydantic import ValidationError

from planner.errors import PlannerError


def validation_message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or exc.title
    return f"{where}={first.get('input')!r} is not allowed: {first['msg']}"


@contextmanager
def planner_errors(what: str) -> Iterator[None]:
    """Run a block; a planner error becomes an ``st.error`` and the page goes on.

    Code after the block must cope with what the block did not get to assign.
    """
    try:
        yield
    except PlannerError as exc:
        st.error(f"{what}: {exc}")
    except ValidationError as exc:
        st.error(f"{what}: {validation_message(exc)}")
