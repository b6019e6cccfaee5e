"""Small page helpers: user strings shown as text, planner errors as messages (never as
tracebacks)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import pandas as pd
import streamlit as st
from pydantic import ValidationError

from planner.errors import CatalogError, InvalidInputError, PlannerError

#: what Markdown, GitHub's autolinks and Streamlit's own directives (``:red[...]``,
#: ``:material/x:``, ``$math$``) turn into a link, markup or HTML; each is shown as itself after
#: a backslash. Characters that only matter at the start of a line (``#``, ``-``, ``1.``) need
#: none: line breaks become spaces. An underscore inside a word (``num_hidden_layers``) is no
#: emphasis in CommonMark, so names keep reading as they are typed.
_MARKUP = re.compile(r"([\\`*\[\]<>~$|])")
_AUTOLINK = re.compile(r"(?i)(?<=www)(\.)|(://|@|:(?=[a-z_]+[/\[:]))")


def md_text(value: object) -> str:
    """``value`` for a Markdown element (``st.markdown``, ``st.caption``, ``st.warning``,
    ...) shown as the text it is: a served model name ``[Session expired](http://...)`` or a
    file name ``**x**`` from a user, a run or an endpoint is no link, no bold, no HTML, no
    directive. Pages pass user strings (and messages that quote them) through it."""
    text = " ".join(str(value).replace("\r", " ").split("\n"))
    text = _MARKUP.sub(r"\\\1", text)
    return _AUTOLINK.sub(lambda m: "\\" + (m.group(1) or m.group(2)), text)


def validation_message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or exc.title
    return f"{where}={first.get('input')!r} is not allowed: {first['msg']}"


@contextmanager
def planner_errors(what: str) -> Iterator[None]:
    """Run a block; a planner error becomes a message and the page goes on: a warning when
    the input is at fault (a value out of range, a malformed file), an error otherwise.

    Code after the block must cope with what the block did not get to assign. ``what`` may
    quote a user's string (an upload's name): it is shown as text too.
    """
    what = md_text(what)
    try:
        yield
    except (InvalidInputError, CatalogError) as exc:  # what the user gave: a notice
        st.warning(f"{what}: {md_text(exc)}")
    except PlannerError as exc:
        st.error(f"{what}: {md_text(exc)}")
    except ValidationError as exc:
        st.warning(f"{what}: {md_text(validation_message(exc))}")


def show_fractions(frame: pd.DataFrame, key: str, plain: tuple[str, ...]) -> None:
    """A table whose columns are fractions shown as percentages, but for the ``plain`` ones
    (labels and counts)."""
    percent = st.column_config.NumberColumn(format="percent")
    st.dataframe(
        frame,
        hide_index=True,
        key=key,
        column_config={c: percent for c in frame.columns if c not in plain},
    )
