"""Own or rent in a real browser: the Plan page ranks owned servers and rented instances
together; the Cost page draws the cheapest commitment mix of a day and the break-even chart
(a screenshot of it in docs/screenshots/own_or_rent.png)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.harness import Dashboard, open_page, screenshot

pytestmark = pytest.mark.browser


def test_the_plan_page_ranks_owned_and_rented_together(page: Page, dashboard: Dashboard) -> None:
    open_page(page, dashboard.url)
    chart = page.locator(".st-key-chart_ranking")
    expect(chart.locator(".ytick text").first).to_be_visible()
    labels = chart.locator(".ytick text").all_text_contents()
    owned = [label for label in labels if "owned-" in label]
    rented = [label for label in labels if "owned-" not in label]
    assert owned and rented, labels
    assert page.locator('[data-testid="stException"]').count() == 0


def test_the_cost_page_shows_the_mix_and_the_break_even(
    page: Page, dashboard: Dashboard, screenshots_dir: Path
) -> None:
    open_page(page, dashboard.url, "cost")
    main = page.locator('[data-testid="stMain"]')
    expect(main.get_by_text("Own, commit or rent")).to_be_visible()
    mix = main.locator("[data-testid='stMetric']").filter(has_text="Cheapest mix, a month")
    expect(mix.locator("[data-testid='stMetricValue']")).to_contain_text("$")
    expect(page.locator(".st-key-chart_mix .gtitle")).to_contain_text("commit or own the base")
    break_even = page.locator(".st-key-chart_break_even")
    expect(break_even.locator(".gtitle")).to_contain_text("When owning pays back")
    # one bar a rented option, labelled in months (or "never")
    expect(break_even.locator(".bartext").first).to_be_visible()
    months = break_even.locator(".bartext").all_text_contents()
    assert months and all(m == "never" or m.endswith("mo") for m in months), months
    assert page.locator('[data-testid="stException"]').count() == 0, dashboard.log()[-3000:]
    screenshot(page, screenshots_dir / "own_or_rent.png")
