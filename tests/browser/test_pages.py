"""Every page in a real browser: loads without an exception element; a screenshot of each."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.harness import Dashboard, open_page, screenshot, wait_idle

pytestmark = pytest.mark.browser

#: (URL path, screenshot name, the page's title)
PAGES = [
    ("", "plan", "Plan"),
    ("gpu_economics", "gpu_economics", "GPU economics"),
    ("kv_cache", "kv_cache", "KV cache"),
    ("cost", "cost", "Cost"),
    ("benchmarks", "benchmarks", "Benchmarks"),
    ("data", "data", "Data"),
]


@pytest.mark.parametrize(("path", "name", "title"), PAGES, ids=[p[1] for p in PAGES])
def test_page_loads_without_an_exception(
    page: Page, dashboard: Dashboard, screenshots_dir: Path, path: str, name: str, title: str
) -> None:
    open_page(page, dashboard.url, path)
    expect(page.locator("h1").first).to_have_text(title)
    assert page.locator('[data-testid="stException"]').count() == 0, dashboard.log()[-3000:]
    # The scenario sidebar is there on every page (drawn by app.py, not by the page).
    expect(
        page.locator('[data-testid="stSidebar"]').get_by_text("Scenario", exact=True)
    ).to_be_visible()
    screenshot(page, screenshots_dir / f"{name}.png")


def test_a_shared_link_reproduces_the_scenario(page: Page, dashboard: Dashboard) -> None:
    open_page(page, dashboard.url, "kv_cache?tpot_ms=80&pricing=spot&kv_dtype=fp8")
    sidebar = page.locator('[data-testid="stSidebar"]')
    tpot = sidebar.locator('[data-testid="stNumberInput"]').filter(has_text="TPOT")
    expect(tpot.locator("input")).to_have_value("80")
    pricing = sidebar.locator('[data-testid="stSelectbox"]').filter(has_text="Pricing")
    expect(pricing.locator("input")).to_have_value("spot")
    expect(page.locator('[data-testid="stButtonGroup"]').filter(has_text="fp8")).to_be_visible()
    assert page.locator('[data-testid="stException"]').count() == 0
    # Switching pages keeps the scenario (the sidebar's part of the URL).
    page.get_by_role("link", name="Cost").click()
    page.wait_for_url("**/cost*")
    wait_idle(page)
    assert "tpot_ms=80" in page.url and "pricing=spot" in page.url
    assert page.locator('[data-testid="stException"]').count() == 0


def test_the_plan_pages_own_address_opens_it(page: Page, dashboard: Dashboard) -> None:
    """``/plan`` (the file's name, as a user guesses it from /cost or /kv_cache) is the Plan
    page with the link's scenario, not "Page not found"."""
    open_page(page, dashboard.url, "plan?tpot_ms=80")
    expect(page.locator("h1").first).to_have_text("Plan")
    assert page.get_by_text("Page not found").count() == 0
    sidebar = page.locator('[data-testid="stSidebar"]')
    tpot = sidebar.locator('[data-testid="stNumberInput"]').filter(has_text="TPOT")
    expect(tpot.locator("input")).to_have_value("80")
    assert page.locator('[data-testid="stException"]').count() == 0, dashboard.log()[-3000:]
