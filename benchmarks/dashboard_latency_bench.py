"""Input change -> re-rendered Plan page, measured in a real browser.

    .venv/bin/python benchmarks/dashboard_latency_bench.py [--repeats 7]

Starts ``streamlit run app.py`` on 127.0.0.1 with an empty user data directory, opens the Plan
page of the default scenario in Debian's headless Chromium (Playwright), and times, from the
key press or click to the moment the page shows the new top recommendation and the script run
has finished:

- a step of the utilisation slider (re-ranks cached predictions: the common interaction);
- a change of pricing mode (on demand -> spot and back: new prices, same predictions);
- a change of the output length (a new workload: every layout is predicted again).

Prints the median and the spread of each, and the cold first load of the page.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import Page  # noqa: E402

from tests.browser.harness import (  # noqa: E402
    RENDERED_JS,
    chromium,
    open_page,
    run_dashboard,
    top_cost,
    wait_idle,
)

#: The page shows a new headline figure and no script run is in flight.
CHANGED_JS = """(old) => {
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app || app.dataset.testScriptState !== 'notRunning') return false;
  const metric = Array.from(document.querySelectorAll(
    '.st-key-top_recommendation [data-testid="stMetric"]'))
    .find(m => m.innerText.includes('$ per M output tokens'));
  const value = metric && metric.querySelector('[data-testid="stMetricValue"]');
  return !!value && value.innerText.trim() !== old;
}"""


def timed_change(page: Page, action: Callable[[], None], timeout_ms: float = 300_000) -> float:
    """Seconds from ``action`` to the re-rendered page with a different top figure."""
    old = top_cost(page)
    start = time.perf_counter()
    action()
    page.wait_for_function(CHANGED_JS, arg=old, timeout=timeout_ms, polling="raf")
    page.wait_for_function(RENDERED_JS, timeout=timeout_ms, polling="raf")
    elapsed = time.perf_counter() - start
    wait_idle(page)  # let the page settle before the next change
    return elapsed


def summary(name: str, samples: list[float]) -> str:
    median = statistics.median(samples)
    return (
        f"{name:<44} median {median:6.2f} s   min {min(samples):6.2f} s   "
        f"max {max(samples):6.2f} s   (n={len(samples)})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="changes timed per input")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="servewise-bench-") as user_dir,
        run_dashboard(Path(user_dir)) as dashboard,
        chromium() as context,
    ):
        page = context.new_page()
        start = time.perf_counter()
        open_page(page, dashboard.url, timeout_ms=600_000)
        cold = time.perf_counter() - start
        sidebar = page.locator('[data-testid="stSidebar"]')

        sidebar.get_by_text("Set the observed utilisation").click()
        wait_idle(page)
        slider = sidebar.get_by_role("slider")
        slider_samples = []
        for i in range(args.repeats):
            key = "ArrowLeft" if i % 2 == 0 else "ArrowRight"
            slider_samples.append(timed_change(page, lambda key=key: slider.press(key)))

        def pick_pricing(mode: str) -> Callable[[], None]:
            def act() -> None:
                sidebar.locator('[data-testid="stSelectbox"]').filter(has_text="Pricing").click()
                page.get_by_role("option", name=mode, exact=True).click()

            return act

        pricing_samples = [
            timed_change(page, pick_pricing("spot" if i % 2 == 0 else "on_demand"))
            for i in range(min(args.repeats, 4))
        ]

        output_mean = (
            sidebar.locator('[data-testid="stNumberInput"]').filter(has_text="Mean (tokens)").nth(1)
        )

        def set_output(tokens: int) -> Callable[[], None]:
            def act() -> None:
                field = output_mean.locator("input")
                field.fill(str(tokens))
                field.press("Enter")

            return act

        workload_samples = [timed_change(page, set_output(448))]

    print(f"Plan page, default scenario, {dashboard.url.split(':')[1][2:]} (headless Chromium)")
    print(f"{'cold first load (fit + search)':<44} {cold:6.2f} s")
    print(summary("utilisation slider step (re-rank)", slider_samples))
    print(summary("pricing on demand <-> spot (re-price)", pricing_samples))
    print(summary("output length 512 -> 448 (new search)", workload_samples))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
