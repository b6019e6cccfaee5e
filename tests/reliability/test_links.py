"""Every URL-bound widget of every page, given a value it cannot take in a link: the page draws,
with a notice naming the parameter, instead of an exception.

The widgets are not listed here: each page is run once and the parameters Streamlit bound to
widgets in that run are read back, so a widget added later is tried too. A page's widgets that
show only in one of its modes are found by also running the page in that mode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from tests.pages.conftest import no_exception

#: page -> links that show its widgets (a mode's widgets show only in that mode). The sidebar's
#: widgets are the same on every page: they are tried on the Data page, each other page's own
#: widgets on that page.
PAGES: dict[str, list[dict[str, str]]] = {
    "data": [{}, {"load": "rate", "util_manual": "true"}],
    "plan": [{}],
    "gpu_economics": [{}],
    "kv_cache": [{}],
    "cost": [{}],
    "benchmarks": [{}],
    "verify": [{}, {"vf_source": "Custom", "vf_load": "rate"}],
    "diagnose": [{}, {"dg_source": "Endpoint"}, {"dg_give_plan": "true"}],
}
SIDEBAR_PAGE = "data"
#: the values a hand-edited or hostile link holds that no widget can take
BAD_VALUES = {
    "inf": "inf",
    "nan": "nan",
    "empty": "",
    "huge": "1e300",  # finite: a number widget without an upper bound would take it
    "garbage": "\x00<b>[x](http://e.test)",
}
#: values that differ from garbage only for a number widget (to a select they are garbage)
NUMBER_ONLY = ("inf", "nan", "huge")
NUMBER_TYPES = ("double_value", "double_array_value", "int_value", "int_array_value")
#: params whose widget takes any text or none (an empty multiselect is "all" or "none")
_ANY_TEXT = ("string_array_value",)


def bound_params(at: AppTest) -> dict[str, str]:
    """The query parameters Streamlit bound to a widget, with their value type
    (``double_value``, ``string_value``, ...): Streamlit's own registry, so a widget bound
    without ``pages.common.url_params.bound`` is found too."""
    registry = at._session_state._state.query_params._bindings_by_param
    return {key: binding.value_type for key, binding in registry.items()}


def drawn_keys(at: AppTest) -> set[str]:
    """The keys of the widgets the last run drew (the registry keeps bindings of earlier runs)."""
    keys: set[str] = set()
    stack: list[Any] = [at._tree]
    while stack:
        node = stack.pop()
        if isinstance(getattr(node, "key", None), str):
            keys.add(node.key)
        stack.extend(getattr(node, "children", {}).values())
    return keys


def notices(at: AppTest) -> str:
    return " ".join(w.value for w in at.warning)


_FOUND: dict[str, dict[str, str]] = {}


@pytest.fixture
def widgets_of(app: Callable[..., AppTest]) -> Callable[[str], dict[str, str]]:
    """``widgets_of(page)``: its bound parameters (the sidebar's and its own), from a run of
    each of its links; found once a session (a function fixture: the page fixtures it needs,
    the isolated user data among them, are per test)."""

    def find(page: str) -> dict[str, str]:
        if page not in _FOUND:
            found: dict[str, str] = {}
            for link in PAGES[page]:
                at = app(f"pages/{page}.py", **link)
                drawn = drawn_keys(at)
                found |= {k: t for k, t in bound_params(at).items() if k in drawn}
            _FOUND[page] = found
        return _FOUND[page]

    return find


@pytest.fixture
def own_widgets(
    widgets_of: Callable[[str], dict[str, str]],
) -> Callable[[str], dict[str, str]]:
    """``own_widgets(page)``: the page's own bound parameters (with the sidebar's on the page
    that tries them)."""

    def find(page: str) -> dict[str, str]:
        if page == SIDEBAR_PAGE:
            return widgets_of(page)
        sidebar = widgets_of(SIDEBAR_PAGE)
        return {k: t for k, t in widgets_of(page).items() if k not in sidebar}

    return find


def test_every_page_binds_widgets_to_the_link(
    widgets_of: Callable[[str], dict[str, str]],
) -> None:
    """The discovery finds the widgets the issue named (else the test below proves nothing)."""
    named = {
        "data": ["in_mean", "ttft_ms", "tpot_ms", "max_model_len", "kv_dtype", "model"],
        "gpu_economics": ["econ_metric"],
        "cost": ["cost_spares"],
        "kv_cache": ["kv_concurrency"],
        "verify": ["vf_c", "vf_rate", "vf_tp"],
        "diagnose": ["dg_tp", "dg_source"],
    }
    for page, keys in named.items():
        missing = [k for k in keys if k not in widgets_of(page)]
        assert not missing, (page, missing, sorted(widgets_of(page)))


@pytest.mark.parametrize("page", list(PAGES))
@pytest.mark.parametrize("kind", list(BAD_VALUES))
def test_a_link_no_widget_can_take_is_a_notice(
    app: Callable[..., AppTest], own_widgets: Callable[[str], dict[str, str]], page: str, kind: str
) -> None:
    bad = BAD_VALUES[kind]
    widgets = own_widgets(page)
    if kind in NUMBER_ONLY:
        widgets = {k: t for k, t in widgets.items() if t in NUMBER_TYPES}
    if not widgets:
        pytest.skip(f"no {'number ' if kind in NUMBER_ONLY else ''}widget of its own")
    for link in PAGES[page]:
        keys = {k: t for k, t in widgets.items() if k not in link}
        at = app(f"pages/{page}.py", **link, **dict.fromkeys(keys, bad))
        no_exception(at)
        assert not at.error, [e.value for e in at.error]
        drawn = drawn_keys(at)
        said = notices(at)
        for key, value_type in keys.items():
            if key not in drawn or (value_type in _ANY_TEXT and not bad):
                continue  # not drawn in this mode, or "" is a legal empty choice
            if key in at.session_state and str(at.session_state[key]) == bad:
                continue  # one of its options (the Diagnose page's "no instance" is "")
            assert f"URL parameter {key}=" in said, (page, key, bad, said[:2000])
