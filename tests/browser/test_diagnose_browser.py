"""The Diagnose page in a real browser: a run whose server preempted lights "Lots of
preemptions?", shows the KV finding with its chart, and "Verify this fix" opens the Verify page
on the fixed plan. Its own dashboard (a user directory with that run) keeps the shared one's
runs as the other browser tests expect them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.harness import (
    PATIENT_MS,
    Dashboard,
    open_page,
    run_dashboard,
    screenshot,
    wait_idle,
)
from tests.pages.conftest import KV_RUN, write_kv_run

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def kv_dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    user_dir = tmp_path_factory.mktemp("diagnose-user")
    write_kv_run(user_dir / "runs")
    with run_dashboard(user_dir) as running:
        yield running


def test_a_preempting_run_is_diagnosed_and_its_fix_goes_to_verify(
    page: Page, kv_dashboard: Dashboard, screenshots_dir: Path
) -> None:
    open_page(page, kv_dashboard.url, "diagnose", timeout_ms=PATIENT_MS)
    expect(page.locator("h1").first).to_have_text("Diagnose")
    assert page.locator('[data-testid="stException"]').count() == 0, kv_dashboard.log()[-3000:]
    main = page.locator('[data-testid="stMain"]')
    expect(main.get_by_text(KV_RUN).first).to_be_visible()
    triage = main.locator('[data-testid="stMarkdownContainer"]').filter(
        has_text="Lots of preemptions?"
    )
    expect(triage.first).to_contain_text("KV cache sized for the weights, not the traffic (found)")
    expander = main.locator('[data-testid="stExpander"]').filter(has_text="KV cache sized")
    expect(expander.first).to_be_visible()
    expect(expander.first.locator('[data-testid="stPlotlyChart"]').first).to_be_visible()
    expect(expander.first.get_by_text("vllm serve ... --").first).to_be_visible()
    screenshot(page, screenshots_dir / "diagnose.png")
    expander.first.get_by_role("button", name="Verify this fix").first.click()
    page.wait_for_url("**/verify*", timeout=PATIENT_MS)
    wait_idle(page, 240_000)
    expect(page.locator("h1").first).to_have_text("Verify")
    expect(main.get_by_text("From the diagnosis:").first).to_be_visible()
    assert page.locator('[data-testid="stException"]').count() == 0, kv_dashboard.log()[-3000:]
