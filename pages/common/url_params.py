"""Widgets whose values live in the URL, and a visible notice when a link's value is refused.

Streamlit seeds a widget drawn with ``bind="query-params"`` from the URL on the first run of a
session, and silently drops a value it cannot use (``in_mean=-5``, ``model=nope``, ``util=500``,
``ttft_ms=nan``) or clamps it. :func:`bound` draws such a widget and, when the link held a value
for it that is not the value now shown, puts a warning under the widget naming the parameter,
the value in the link, what is allowed and the value used instead. The notice stays while the
widget keeps the value used instead (the user has not changed it since).

``app.py`` calls :func:`remember_url` first in every run: the query string as the browser sent
it, before any widget corrected it.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import streamlit as st

from planner.credentials import has_user_info, strip_user_info

URL_AS_SENT = "_url_as_sent"
URL_NOTICES = "_url_notices"
_NUMBER_WIDGETS = ("number_input", "slider")
_CHOICE_WIDGETS = ("selectbox", "segmented_control", "radio", "pills")
_LIST_WIDGETS = ("multiselect",)
_FLAG_WIDGETS = ("toggle", "checkbox")


@dataclass(frozen=True)
class UrlNotice:
    """A value of the link that a widget did not take."""

    param: str
    sent: str
    allowed: str
    used: Any
    used_label: str

    def message(self) -> str:
        shown = self.used_label or "nothing"
        return (
            f"URL parameter {self.param}={self.sent} is not allowed ({self.allowed}): "
            f"using {shown} instead."
        )


def remember_url() -> None:
    """Keep the query string as sent, before any bound widget corrects it (call first)."""
    st.session_state[URL_AS_SENT] = {
        key: list(st.query_params.get_all(key)) for key in st.query_params
    }


def bound(widget: Callable[..., Any], *args: Any, key: str, **kwargs: Any) -> Any:
    """``widget(*args, key=key, bind="query-params", **kwargs)``, with a notice under it when
    the link's value for ``key`` was refused (see the module docstring)."""
    value = widget(*args, key=key, bind="query-params", **kwargs)
    sent = (st.session_state.get(URL_AS_SENT) or {}).pop(key, None)
    notices: dict[str, UrlNotice] = st.session_state.setdefault(URL_NOTICES, {})
    if sent is not None and not _same(widget, sent, value, kwargs):
        allowed = _allowed(widget, args, kwargs)
        notices[key] = UrlNotice(key, _shown(sent), allowed, value, _label(value, kwargs))
    notice = notices.get(key)
    if notice is not None:
        if notice.used != value:  # changed since: the notice has done its job
            del notices[key]
        else:
            container = getattr(widget, "__self__", st)
            container.warning(notice.message(), icon=":material/link_off:")
    return value


def url_field(container: Any, label: str, *, key: str, placeholder: str = "") -> str:
    """A text field for an endpoint URL, kept in the page's URL (``key``) unless it holds
    credentials (``user:password@``): a page link never carries them. A link's value is used
    without its user info."""
    sent = (st.session_state.get(URL_AS_SENT) or {}).pop(key, None)
    if sent and key not in st.session_state:
        st.session_state[key] = strip_user_info(sent[-1]).strip()
    value = str(container.text_input(label, key=key, placeholder=placeholder) or "")
    if value.strip() and not has_user_info(value):
        if st.query_params.get(key) != value.strip():
            st.query_params[key] = value.strip()
    elif key in st.query_params:
        del st.query_params[key]
    if has_user_info(value):
        container.caption("It holds user:password@: kept out of this page's link and of the run.")
    return value


def _label(value: Any, kwargs: dict[str, Any]) -> str:
    """The value as the widget shows it (its ``format_func``), as the link would hold it."""
    fmt = kwargs.get("format_func", str)
    if isinstance(value, list | tuple):
        return ", ".join(str(fmt(v)) for v in value)
    return "" if value is None else str(fmt(value))


def _name(widget: Callable[..., Any]) -> str:
    return getattr(widget, "__name__", "")


def _shown(sent: Sequence[str]) -> str:
    return ",".join(sent) if len(sent) != 1 else sent[0]


def _same(widget: Callable[..., Any], sent: list[str], value: Any, kwargs: dict[str, Any]) -> bool:
    """Whether the widget shows what the link said."""
    name = _name(widget)
    if name in _LIST_WIDGETS or isinstance(value, list | tuple):
        fmt = kwargs.get("format_func", str)
        return sorted(sent) == sorted(str(fmt(v)) for v in value or [])
    text = sent[-1] if sent else ""
    if name in _FLAG_WIDGETS or isinstance(value, bool):
        return text.strip().lower() == str(bool(value)).lower()
    if name in _NUMBER_WIDGETS or isinstance(value, int | float):
        try:
            number = float(text)
        except ValueError:
            return False
        return math.isfinite(number) and value is not None and number == float(value)
    fmt = kwargs.get("format_func", str)
    return value is not None and text == str(fmt(value))


def _allowed(widget: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """What the widget accepts, from its own arguments."""
    try:
        params = inspect.signature(widget).bind_partial(*args, **kwargs).arguments
    except TypeError:
        params = dict(kwargs)
    name = _name(widget)
    if name in _NUMBER_WIDGETS:
        low, high = params.get("min_value"), params.get("max_value")
        whole = all(isinstance(v, int) for v in (low, high) if v is not None)
        kind = "a whole number" if whole else "a number"
        if low is not None and high is not None:
            return f"{kind} from {low:,} to {high:,}"
        if low is not None:
            return f"{kind} >= {low:,}"
        return kind
    if name in _FLAG_WIDGETS:
        return "true or false"
    options = params.get("options")
    if name in _CHOICE_WIDGETS + _LIST_WIDGETS and options is not None:
        fmt = kwargs.get("format_func", str)
        labels = [str(fmt(o)) for o in options]
        head = ", ".join(labels[:8]) + (f" and {len(labels) - 8} more" if len(labels) > 8 else "")
        return ("any of " if name in _LIST_WIDGETS else "one of ") + head
    return "a value this field accepts"
