"""The Plan page in a real browser: moving an input changes the top recommendation's numbers."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.harness import Dashboard, open_page, top_cost, wait_idle

pytestmark = pytest.mark.browser


def test_moving_the_utilisation_changes_the_top_recommendation(
    page: Page, dashboard: Dashboard
) -> None:
    open_page(page, dashboard.url)
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
    expect(page.locator(".st-key-top_recommendation")).not_to_contain_text(at_60, timeout=30_000)
    wait_idle(page)
    at_30 = top_cost(page)
    assert at_30 != at_60
    assert float(at_30.strip("$").replace(",", "")) > float(at_60.strip("$").replace(",", ""))
    assert "util=30" in page.url and "util_manual=true" in page.url
    assert page.locator('[data-testid="stException"]').count() == 0
