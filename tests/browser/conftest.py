"""One dashboard server and one headless Chromium for every browser test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page

from tests.browser.harness import CHROMIUM, PATIENT_MS, Dashboard, chromium, run_dashboard
from tests.pages.conftest import write_run

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    browser_items = [item for item in items if "browser" in item.keywords]
    if not Path(CHROMIUM).exists():
        skip = pytest.mark.skip(reason=f"{CHROMIUM} is missing: apt-get install chromium")
        for item in browser_items:
            item.add_marker(skip)
    # A browser test waits on several pages in turn, each up to PATIENT_MS on a loaded machine:
    # the suite-wide 300 s hang detector would fire on a slow pass, not a hang.
    for item in browser_items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(4 * PATIENT_MS / 1000))


@pytest.fixture(scope="session")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    user_dir = tmp_path_factory.mktemp("browser-user")
    write_run(user_dir / "runs", "20261129T100000Z-aaaaaa", ttft_s=0.08, gap_s=0.01, gpu="L4")
    write_run(user_dir / "runs", "20261129T110000Z-bbbbbb", ttft_s=0.30, gap_s=0.04, gpu="L40S")
    with run_dashboard(user_dir) as running:
        yield running


@pytest.fixture(scope="module")
def browser_context() -> Iterator[BrowserContext]:
    # One browser a module, not a session: Playwright's sync API keeps an event loop running in
    # the worker's main thread while it is open, and a later test in the same xdist worker that
    # calls asyncio.run() would fail ("cannot be called from a running event loop")
    with chromium() as context:
        yield context


@pytest.fixture
def page(browser_context: BrowserContext) -> Iterator[Page]:
    page = browser_context.new_page()
    page.set_default_timeout(PATIENT_MS)
    yield page
    page.close()


@pytest.fixture(scope="session")
def screenshots_dir() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
