"""Plan page: filters that hold no instance together are named in the sentence the command
line prints (``planner.recommend.empty_search_reason``), not left as an empty table."""

from __future__ import annotations

from collections.abc import Callable

from streamlit.testing.v1 import AppTest

from planner.catalog import load_catalog
from planner.recommend import SearchSpace, empty_search_reason
from tests.pages.conftest import no_exception


def test_filters_that_cannot_both_hold_are_named_on_the_plan_page(
    app: Callable[..., AppTest],
) -> None:
    # Lambda lists on-demand prices only: Lambda and spot cannot both hold
    sentence = empty_search_reason(
        load_catalog(), SearchSpace(providers=("lambda",), pricing="spot")
    )
    assert sentence is not None and "providers lambda" in sentence
    at = app("pages/plan.py", providers=["lambda"], pricing="spot")
    no_exception(at)
    (error,) = [e.value for e in at.error if e.value.startswith("No plan:")]
    assert error.replace("\\", "") == f"No plan: {sentence}. Widen one of them in the sidebar."
    assert "spot prices" in error and "providers lambda" in error
    # the sentence alone: no empty ranking table, chart or section of rejected candidates
    assert not at.dataframe
    assert not at.get("plotly_chart")
    assert "Ranking" not in [h.value for h in at.subheader]
    assert not [e for e in at.expander if e.label.startswith(("Every rejected", "Trade-offs"))]
    # the same filters one at a time rank plans, drawn with their table and charts
    at = app("pages/plan.py", providers=["lambda"])
    assert not [e.value for e in at.error if e.value.startswith("No plan:")]
    assert [t.value for t in at.dataframe if "launch_command" in t.value.columns]
    assert len(at.get("plotly_chart")) >= 2
