"""Widgets whose values live in the URL, and a visible notice when a link's value is refused.

Streamlit seeds a widget drawn with ``bind="query-params"`` from the URL on the first run of a
session, and silently drops a value it cannot use (``in_mean=-5``, ``model=nope``, ``util=500``,
``ttft_ms=nan``) or clamps it. :func:`bound` draws such a widget and, when the link held a value
for it that is not the value now shown, puts a warning under the widget naming the parameter,
the value in the link, what is allowed and the value used instead. The notice stays while the
widget keeps the value used instead (the user has not changed it since).

Some values Streamlit does not drop but cannot use either: ``inf`` in a whole-number widget
raises while the widget seeds itself from the link, and an empty ``?kv_dtype=`` gives a select
with a default no value at all. So :func:`bound` first checks the link's value against what the
widget accepts (:func:`_fits`: a finite number, whole for a whole-number widget; one of the
options; true or false) and takes a value that does not fit out of the link before the widget
reads it: the widget starts from its default and the notice names what was refused. Every bound
widget gets this from its own arguments; a new one needs nothing more.

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
from streamlit.runtime.state import get_session_state

from pages.common.ui import md_text
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
        shown = md_text(self.used_label) if self.used_label else "nothing"
        # the link's value is anyone's text: shown as text, never as a link or markup
        return (
            f"URL parameter {self.param}={md_text(self.sent)} is not allowed "
            f"({md_text(self.allowed)}): using {shown} instead."
        )


def remember_url() -> None:
    """Keep the query string as sent, before any bound widget corrects it (call first)."""
    st.session_state[URL_AS_SENT] = {
        key: list(st.query_params.get_all(key)) for key in st.query_params
    }


def bound(widget: Callable[..., Any], *args: Any, key: str, **kwargs: Any) -> Any:
    """``widget(*args, key=key, bind="query-params", **kwargs)``, with a notice under it when
    the link's value for ``key`` was refused (see the module docstring)."""
    sent = (st.session_state.get(URL_AS_SENT) or {}).pop(key, None)
    if sent is not None and not _fits(widget, args, kwargs, sent):
        _drop_from_link(key)
    value = widget(*args, key=key, bind="query-params", **kwargs)
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


def _drop_from_link(key: str) -> None:
    """Take ``key`` out of the link before its widget seeds itself from it (Streamlit keeps the
    link as first sent apart from the one ``st.query_params`` edits, and seeds from that)."""
    with get_session_state().query_params() as params:
        params._initial_query_params.pop(key, None)
        params.remove_param(key)


def _fits(
    widget: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], sent: list[str]
) -> bool:
    """Whether the link's ``sent`` values are ones the widget can take: finite numbers (whole
    ones for a widget whose bounds and default are whole), options it offers, true or false.
    A finite number outside the widget's range fits: Streamlit clamps it, and the notice says
    so."""
    name = _name(widget)
    params = _arguments(widget, args, kwargs)
    if name in _NUMBER_WIDGETS:
        return bool(sent) and all(_number_fits(text, _whole(params)) for text in sent)
    if name in _FLAG_WIDGETS:
        return len(sent) == 1 and sent[0].strip().lower() in ("true", "false")
    options = params.get("options")
    if name in _CHOICE_WIDGETS + _LIST_WIDGETS and options is not None:
        fmt = kwargs.get("format_func", str)
        labels = {str(fmt(o)) for o in options}
        if name in _LIST_WIDGETS or params.get("selection_mode") == "multi":
            return all(text in labels for text in sent if text)
        return len(sent) == 1 and sent[0] in labels
    return True


def _number_fits(text: str, whole: bool) -> bool:
    try:
        number = float(text)
    except ValueError:
        return False
    return math.isfinite(number) and (not whole or number.is_integer())


def _whole(params: dict[str, Any]) -> bool:
    """A whole-number widget: Streamlit makes one of bounds, default and step all ints."""
    given = [params.get(k) for k in ("min_value", "max_value", "value", "step")]
    numbers = [v for v in given if isinstance(v, int | float) and not isinstance(v, bool)]
    return bool(numbers) and all(isinstance(v, int) for v in numbers)


def _arguments(
    widget: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    try:
        return dict(inspect.signature(widget).bind_partial(*args, **kwargs).arguments)
    except TypeError:
        return dict(kwargs)


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
    params = _arguments(widget, args, kwargs)
    name = _name(widget)
    if name in _NUMBER_WIDGETS:
        low, high = params.get("min_value"), params.get("max_value")
        kind = "a whole number" if _whole(params) else "a number"
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
