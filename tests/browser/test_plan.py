"""The Plan page in a real browser: moving an input changes the top recommendation's numbers."""

from __future__ import annotations

import contextlib
import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.harness import (
    PATIENT_MS,
    Dashboard,
    open_page,
    top_cost,
    wait_idle,
)

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
    slider = sidebar.locator(".st-key-util").get_by_role("slider")
    slider.focus()

    def address_util() -> int:
        found = re.search(r"[?&]util=(\d+)", page.url)
        return int(found.group(1)) if found else 60  # the default is left out of the address

    def moved(current: str, util: int) -> str:
        # 60% <-> 30% in steps of 5, one press at a time: each press reruns the page, and a
        # press sent while it reruns can be lost on a loaded machine (two of six were, the
        # address stuck at util=40), so the value in the address is read before every press
        # and the press repeated (towards the target, should a slow one land late) until the
        # address shows the target
        for _ in range(30):
            now = address_util()
            if now == util:
                break
            address = page.url
            slider.focus()
            slider.press("ArrowLeft" if now > util else "ArrowRight")
            with contextlib.suppress(AssertionError):
                expect(page).not_to_have_url(address, timeout=20_000)
        # the top figure changes at the first press, so wait for the last one's value in the
        # address before reading (a loaded machine lags); the default, 60%, is left out of it
        if util == 60:
            expect(page).not_to_have_url(re.compile(r"[?&]util=\d"), timeout=PATIENT_MS)
        else:
            expect(page).to_have_url(re.compile(rf"[?&]util={util}(&|$)"), timeout=PATIENT_MS)
        expect(page.locator(".st-key-top_recommendation")).not_to_contain_text(
            current, timeout=PATIENT_MS
        )
        wait_idle(page)
        return top_cost(page)

    # The dashboard's two runs refit the model in the background, and the page redraws with
    # the new fit when it lands, which can be between any two reads (at 60% $3.14, then at
    # 30% $2.62 of the new fit on a loaded machine). So 30% is compared with the 60% read
    # before and after it, and the pair is taken again until both 60% reads agree: one fit.
    at_60 = top_cost(page)
    for _ in range(3):
        at_30 = moved(at_60, 30)
        assert "util=30" in page.url and "util_manual=true" in page.url
        again_60 = moved(at_30, 60)
        if again_60 == at_60:
            break
        at_60 = again_60
    assert again_60 == at_60, "the 60% figure kept changing: more than one refit landed"
    assert float(at_30.strip("$").replace(",", "")) > float(at_60.strip("$").replace(",", ""))
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
