"""The Plan page in a real browser: moving an input changes the top recommendation's numbers."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.harness import (
    PATIENT_MS,
    Dashboard,
    open_page,
    top_cost,
    wait_idle,
    wait_refitted,
)

pytestmark = pytest.mark.browser


def test_moving_the_utilisation_changes_the_top_recommendation(
    page: Page, dashboard: Dashboard
) -> None:
    open_page(page, dashboard.url)
    # the dashboard's two runs refit the model in the background: compare figures of one fit
    wait_refitted(page)
    before = top_cost(page)
    assert before.startswith("$")
    sidebar = page.locator('[data-testid="stSidebar"]')
    sidebar.get_by_text("Set the observed utilisation").click()
    wait_idle(page)
    at_60 = top_cost(page)
    slider = sidebar.locator(".st-key-util").get_by_role("slider")
    slider.focus()
    for _ in range(6):  # 60% -> 30% in steps of 5
        slider.press("ArrowLeft")
    expect(page.locator(".st-key-top_recommendation")).not_to_contain_text(
        at_60, timeout=PATIENT_MS
    )
    wait_idle(page)
    at_30 = top_cost(page)
    assert at_30 != at_60
    assert float(at_30.strip("$").replace(",", "")) > float(at_60.strip("$").replace(",", ""))
    assert "util=30" in page.url and "util_manual=true" in page.url
    assert page.locator('[data-testid="stException"]').count() == 0


def test_a_closed_section_is_drawn_when_opened(page: Page, dashboard: Dashboard) -> None:
    """The rejected candidates and the trade-offs are sent only once their section is opened
    (the click reruns the page): closed, the browser has neither the table nor the chart."""
    open_page(page, dashboard.url)
    main = page.locator('[data-testid="stMain"]')
    rejected = main.locator('[data-testid="stExpander"]').filter(has_text="Every rejected")
    expect(rejected).to_be_visible()
    assert rejected.locator('[data-testid="stDataFrame"]').count() == 0
    rejected.locator("summary").click()
    expect(rejected.locator('[data-testid="stDataFrame"]')).to_be_visible(timeout=PATIENT_MS)
    trade_offs = main.locator('[data-testid="stExpander"]').filter(has_text="Trade-offs")
    assert trade_offs.locator('[data-testid="stPlotlyChart"]').count() == 0
    trade_offs.locator("summary").click()
    expect(trade_offs.locator('[data-testid="stPlotlyChart"]')).to_be_visible(timeout=PATIENT_MS)
    wait_idle(page)
    assert page.locator('[data-testid="stException"]').count() == 0
