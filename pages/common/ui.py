"""Small page helpers: show planner errors as messages, never as tracebacks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st
from pydantic import ValidationError

from planner.errors import CatalogError, InvalidInputError, PlannerError


def validation_message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or exc.title
    return f"{where}={first.get('input')!r} is not allowed: {first['msg']}"


@contextmanager
def planner_errors(what: str) -> Iterator[None]:
    """Run a block; a planner error becomes a message and the page goes on: a warning when
    the input is at fault (a value out of range, a malformed file), an error otherwise.

    Code after the block must cope with what the block did not get to assign.
    """
    try:
        yield
    except (InvalidInputError, CatalogError) as exc:  # what the user gave: a notice
        st.warning(f"{what}: {exc}")
    except PlannerError as exc:
        st.error(f"{what}: {exc}")
    except ValidationError as exc:
        st.warning(f"{what}: {validation_message(exc)}")
