"""Input change -> re-rendered Plan page, measured in a real browser.

    .venv/bin/python benchmarks/dashboard_latency_bench.py [--repeats 7]

Starts ``streamlit run app.py`` on 127.0.0.1 with a fresh user data directory (holding the
fitted model's cache, as any earlier run leaves it; ``--no-fit-cache``: without; ``--runs N``:
with N run directories to ingest), opens the Plan page of the default scenario in Debian's
headless Chromium (Playwright), and times, from the key press or click to the moment the page
shows the new top recommendation and the script run has finished:

- a step of the utilisation slider (re-ranks cached predictions: the common interaction);
- a change of pricing mode (on demand -> spot and back: new prices, same predictions);
- a change of the output length (a new workload: every candidate's capacity is searched);
- a change of the p99 TPOT SLO (a new search too).

Prints the median and the spread of each, of all changes together, and the time from the
server's start to the first top recommendation.
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


RUNNING_JS = """() => {
  const app = document.querySelector('[data-testid="stApp"]');
  return !!app && app.dataset.testScriptState === 'running';
}"""
IDLE_JS = """() => {
  const app = document.querySelector('[data-testid="stApp"]');
  return !!app && app.dataset.testScriptState === 'notRunning';
}"""


def timed_rerun(page: Page, action: Callable[[], None], timeout_ms: float = 300_000) -> float:
    """Seconds from ``action`` to the end of the script run it starts (for a change that need
    not move the top figure, such as a looser SLO)."""
    start = time.perf_counter()
    action()
    page.wait_for_function(RUNNING_JS, timeout=10_000, polling="raf")
    page.wait_for_function(IDLE_JS, timeout=timeout_ms, polling="raf")
    page.wait_for_function(RENDERED_JS, timeout=timeout_ms, polling="raf")
    elapsed = time.perf_counter() - start
    wait_idle(page)
    return elapsed


def summary(name: str, samples: list[float]) -> str:
    median = statistics.median(samples)
    return (
        f"{name:<44} median {median:6.2f} s   min {min(samples):6.2f} s   "
        f"max {max(samples):6.2f} s   (n={len(samples)})"
    )


def seed_fit_cache(user_dir: Path) -> None:
    """The fitted model on disk in the fresh user directory, as any earlier process (the command
    line, a previous dashboard) leaves it: a fresh server then reads the fit, not fits."""
    from planner.catalog import load_catalog
    from planner.perf import fit_cache
    from planner.perf.model import get_performance_model, results_fingerprint

    catalog = load_catalog()
    model = get_performance_model(catalog)
    key = fit_cache.cache_key(results_fingerprint(catalog, catalog.measured))
    fit_cache.save(user_dir / "cache", key, model.fit_state())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="changes timed per input")
    parser.add_argument(
        "--no-fit-cache", action="store_true", help="start without a cached fit (it fits first)"
    )
    parser.add_argument(
        "--runs", type=int, default=0, help="run directories in the fresh runs folder"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="servewise-bench-") as user_dir:
        if not args.no_fit_cache:
            seed_fit_cache(Path(user_dir))
        if args.runs:
            from benchmarks.ingest_bench import write_runs

            write_runs(Path(user_dir) / "runs", args.runs, 100, 256)
        with run_dashboard(Path(user_dir)) as dashboard, chromium() as context:
            page = context.new_page()
            start = time.perf_counter()
            open_page(page, dashboard.url, timeout_ms=600_000)
            cold = time.perf_counter() - start
            samples = time_changes(page, args.repeats)
    what = "cached fit" if not args.no_fit_cache else "no cached fit"
    runs = f", {args.runs} runs to ingest" if args.runs else ""
    print(f"Plan page, default scenario ({what}{runs}), headless Chromium")
    print(f"{'fresh server to the top recommendation':<44} {cold:6.2f} s")
    for name, values in samples.items():
        print(summary(name, values))
    every = [v for values in samples.values() for v in values]
    print(summary("every sidebar change", every))
    return 0


def time_changes(page: Page, repeats: int) -> dict[str, list[float]]:
    sidebar = page.locator('[data-testid="stSidebar"]')
    sidebar.get_by_text("Set the observed utilisation").click()
    wait_idle(page)
    slider = sidebar.get_by_role("slider", name="Observed utilisation (%)")
    samples: dict[str, list[float]] = {}
    samples["utilisation slider step (re-rank)"] = [
        timed_change(page, lambda key=key: slider.press(key))  # type: ignore[misc]
        for key in ["ArrowLeft" if i % 2 == 0 else "ArrowRight" for i in range(repeats)]
    ]

    def pick_pricing(mode: str) -> Callable[[], None]:
        def act() -> None:
            sidebar.locator('[data-testid="stSelectbox"]').filter(has_text="Pricing").click()
            page.get_by_role("option", name=mode, exact=True).click()

        return act

    samples["pricing on demand <-> spot (re-price)"] = [
        timed_change(page, pick_pricing("spot" if i % 2 == 0 else "on_demand"))
        for i in range(min(repeats, 4))
    ]

    def set_number(label: str, nth: int, value: int) -> Callable[[], None]:
        def act() -> None:
            field = sidebar.locator('[data-testid="stNumberInput"]').filter(has_text=label).nth(nth)
            box = field.locator("input")
            box.fill(str(value))
            box.press("Enter")

        return act

    # each a new workload: every candidate's capacity is searched again
    outputs = [448, 384, 320, 480, 416][: max(1, min(repeats, 5))]
    samples["output length change (new search)"] = [
        timed_change(page, set_number("Mean (tokens)", 1, tokens)) for tokens in outputs
    ]
    slos = [90, 80, 120, 70][: max(1, min(repeats, 4))]
    samples["p99 TPOT SLO change (new search)"] = [
        timed_rerun(page, set_number("TPOT", 0, tpot)) for tpot in slos
    ]
    return samples


if __name__ == "__main__":
    raise SystemExit(main())
