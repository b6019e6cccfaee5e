"""A real dashboard in a real browser: ``streamlit run app.py`` on 127.0.0.1 driven by Debian's
headless Chromium through Playwright. Used by the browser tests and by
``benchmarks/dashboard_latency_bench.py``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from playwright.sync_api import BrowserContext, Page, sync_playwright

from tests.patience import PATIENT_MS, PATIENT_S

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1500, "height": 1000}
#: The app is idle (no script run in flight).
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
#: Every visible plotly chart drawn and every visible dataframe's canvas painted (those in a
#: collapsed expander never are).
RENDERED_JS = """() => {
  const shown = sel => Array.from(document.querySelectorAll(sel)).filter(e => e.checkVisibility());
  return shown('[data-testid="stPlotlyChart"]').every(c => c.querySelector('.main-svg'))
      && shown('[data-testid="stDataFrame"]').every(f => f.querySelector('canvas'));
}"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Dashboard:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.contextmanager
def run_dashboard(user_data_dir: Path, *, timeout_s: float = PATIENT_S) -> Iterator[Dashboard]:
    """Start the dashboard (``python -m pages.common.server``: ``streamlit run app.py``) on a
    free port; wait for /_stcore/health; stop it after."""
    port = free_port()
    env = dict(os.environ, SERVEWISE_USER_DATA_DIR=str(user_data_dir), PYTHONUNBUFFERED="1")
    log_path = user_data_dir / "streamlit.log"
    user_data_dir.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pages.common.server",  # streamlit run app.py, as scripts/run.sh starts it
                "--server.address",
                "127.0.0.1",
                "--server.port",
                str(port),
                "--server.headless",
                "true",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    dashboard = Dashboard(url=url, process=process, log_path=log_path)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"streamlit exited with {process.returncode}:\n{dashboard.log()}"
                )
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"no /_stcore/health after {timeout_s:.0f} s:\n{dashboard.log()}"
                )
            time.sleep(0.2)
        yield dashboard
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


@contextlib.contextmanager
def chromium() -> Iterator[BrowserContext]:
    """Debian's Chromium, headless, with a fresh profile directory."""
    with (
        tempfile.TemporaryDirectory(prefix="servewise-chromium-") as profile,
        sync_playwright() as playwright,
    ):
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport=VIEWPORT,
        )
        try:
            yield context
        finally:
            context.close()


#: No script run, spinner or skeleton for ``ms`` milliseconds in a row (a page's first load
#: can go idle for an instant between two runs).
STABLE_IDLE_JS = """(ms) => {
  const app = document.querySelector('[data-testid="stApp"]');
  const busy = !app || app.dataset.testScriptState !== 'notRunning'
    || document.querySelector('[data-testid="stSpinner"], [data-testid="stSkeleton"]');
  if (busy) { window.__swIdleSince = null; return false; }
  window.__swIdleSince = window.__swIdleSince || performance.now();
  return performance.now() - window.__swIdleSince >= ms;
}"""


def wait_idle(page: Page, timeout_ms: float = PATIENT_MS, stable_ms: int = 600) -> None:
    """The script run finished (and stayed finished) and every chart and table is drawn."""
    page.wait_for_function(STABLE_IDLE_JS, arg=stable_ms, timeout=timeout_ms, polling=100)
    page.wait_for_function(RENDERED_JS, timeout=timeout_ms)


def open_page(page: Page, base_url: str, path: str = "", timeout_ms: float = PATIENT_MS) -> None:
    """Open ``path`` and wait until its script run is over and everything is drawn; prints
    (shown with a failing test's output) how long the load, the app's first element and the
    run took."""
    start = time.monotonic()
    page.goto(f"{base_url}/{path}", wait_until="domcontentloaded")
    loaded = time.monotonic()
    # The app element appears with the first script run; then wait for it to finish.
    page.wait_for_selector('[data-testid="stApp"]', timeout=timeout_ms)
    app = time.monotonic()
    page.wait_for_timeout(300)
    wait_idle(page, timeout_ms)
    print(
        f"open_page /{path[:60]}: loaded {loaded - start:.1f} s, app {app - start:.1f} s, "
        f"drawn {time.monotonic() - start:.1f} s (load average {os.getloadavg()[0]:.1f})"
    )


def top_cost(page: Page) -> str:
    """The Plan page's headline figure: the best configuration's $ per M output tokens."""
    metric = page.locator(".st-key-top_recommendation [data-testid='stMetric']").filter(
        has_text="$ per M output tokens"
    )
    return metric.locator("[data-testid='stMetricValue']").inner_text().strip()


def screenshot(page: Page, path: Path) -> None:
    """The whole page (the app scrolls inside its main block, so grow the viewport to fit)."""
    height = page.evaluate(
        "() => { const m = document.querySelector('[data-testid=\"stMain\"]');"
        " return m ? m.scrollHeight : document.body.scrollHeight; }"
    )
    page.set_viewport_size({"width": VIEWPORT["width"], "height": int(min(max(height, 900), 6000))})
    page.wait_for_timeout(400)  # plotly redraws at the new size
    page.wait_for_function(RENDERED_JS, timeout=PATIENT_MS)
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size(VIEWPORT)
