"""Input change -> re-rendered Plan page, measured in a real browser, for three scenarios.

    .venv/bin/python benchmarks/dashboard_latency_bench.py [--scenario plan|brief|trace]
        [--repeats 5] [--start cached|fresh|unfitted ...] [--first-page-only]
        [--cold-repeats N] [--runs N] [--open-after SECONDS]

Each scenario starts the dashboard as ``scripts/run.sh`` does (``python -m
pages.common.server``: ``streamlit run app.py``) on 127.0.0.1 with a new user data directory,
as ``--start`` says (more than one: side by side, alternating, ``--cold-repeats`` times each):

- ``cached`` (the default): the fitted model in the user's cache, as any earlier run leaves it;
- ``fresh``: a fresh install: an empty user data directory and no cache directory (the fit
  shipped in ``data/perf_fit.npz`` serves; nothing else is prepared);
- ``unfitted``: no fit anywhere (``SERVEWISE_FIT_CACHE=0``: the page fits first, what a fresh
  install cost before the fit shipped; ``--no-fit-cache`` is the same);

``--runs N``: with N run directories to ingest, and then only the first page and the time
until it settles are timed; ``--first-page-only``: no sidebar changes. It opens the Plan page
in Debian's headless
Chromium (Playwright) over every provider, and times (the browser is started before the
server, as a user's is open already: its own start takes about a second of both cores here
and is not the dashboard's):

- **fresh server to the top recommendation**: from spawning the server to the page showing
  the best configuration with its charts drawn (and, apart, the server's own start to its
  health check, and the page's load on that started server); the page is opened as soon as
  the server answers, or (``--open-after SECONDS``) that long after, as a user who starts the
  server and then opens the link: then timed from opening the page;
- from the key press or click to the end of the script run it starts (the server's
  ``script_finished`` message), the page drawn:
  a step of the utilisation slider (re-ranks cached predictions), pricing on demand <-> spot
  and one region picked and dropped (new prices, same predictions), a change of the output
  length (a new workload: every candidate's capacity is searched), of the p99 TPOT SLO (a new
  search), of the peak load (rate mode: the same capacities, more replicas; concurrency mode: a
  new ceiling), and of an engine setting (``gpu_memory_utilization``: new layouts).

Scenarios (the sidebar through the URL, as a link reproduces it):

- ``plan``: the Plan page's default (Llama-3.1-70B, 2,048 in / 512 out, 16 requests in flight
  on average and 32 at peak, p99 TTFT 3 s and TPOT 100 ms, bf16 and fp8);
- ``brief``: the brief's scenario in rate mode (the same, at 2 req/s);
- ``trace``: a Mooncake-format trace (2,000 requests, lognormal lengths, the one
  ``benchmarks/recommend_bench.py`` writes) uploaded on the page, at 1 req/s average and 2 at
  peak (its lengths come from the trace: no output-length change); the page first plans on
  the sidebar's distributions (a file cannot travel in a link), then the time from the upload
  to the trace's own headline is timed apart.

Prints the median and the spread of each change, of all changes of a scenario together, the
server's CPU seconds for each (read from ``/proc``: what the change costs the server, which is
its time on an idle machine less the browser's drawing), and the machine's load average before
and after (the machine is shared: medians of repeats).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import Locator, Page  # noqa: E402

from tests.browser.harness import (  # noqa: E402
    RENDERED_JS,
    Dashboard,
    chromium,
    run_dashboard,
    wait_idle,
)

#: The page shows the top recommendation's headline figure and no script run is in flight.
SHOWN_JS = """() => {
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app || app.dataset.testScriptState !== 'notRunning') return false;
  const metric = Array.from(document.querySelectorAll(
    '.st-key-top_recommendation [data-testid="stMetric"]'))
    .find(m => m.innerText.includes('$ per M output tokens'));
  const value = metric && metric.querySelector('[data-testid="stMetricValue"]');
  return !!value && value.innerText.trim().startsWith('$');
}"""
#: The top recommendation's headline figure is on the page (a script run may still go on).
DRAWN_JS = SHOWN_JS.replace(
    "if (!app || app.dataset.testScriptState !== 'notRunning') return false;", ""
)
#: The same for an uploaded trace: the page's own caption (not the sidebar's) names it, and the
#: headline is the trace's, not the one from before the upload (a run marks what it has not
#: drawn again yet ``data-stale``).
TRACE_DRAWN_JS = """() => {
  const said = Array.from(document.querySelectorAll(
    '[data-testid="stMain"] [data-testid="stCaptionContainer"]'))
    .some(c => c.innerText.includes('trace.jsonl'));
  if (!said) return false;
  const metric = Array.from(document.querySelectorAll(
    '.st-key-top_recommendation [data-testid="stMetric"]'))
    .find(m => m.innerText.includes('$ per M output tokens'));
  const value = metric && metric.querySelector('[data-testid="stMetricValue"]');
  const box = value && value.closest('[data-testid="stElementContainer"]');
  return !!value && value.innerText.trim().startsWith('$') && !!box
    && box.dataset.stale !== 'true';
}"""
IDLE_JS = """() => {
  const app = document.querySelector('[data-testid="stApp"]');
  return !!app && app.dataset.testScriptState === 'notRunning';
}"""

SCENARIOS: dict[str, str] = {
    "plan": "",
    "brief": "?load=rate&avg_rate=2&peak_rate=2",
    "trace": "?load=rate&avg_rate=1&peak_rate=2&source=trace&trace_format=mooncake",
}


def server_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) the server process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ScriptRuns:
    """Script runs the server says it finished (its ``script_finished`` messages over the
    page's websocket). A rerun that starts and ends while the browser is busy (compiling a
    chart library it has just fetched) never shows as running in the page, so the page's own
    state cannot tell that it happened; the server's message always can."""

    def __init__(self, page: Page) -> None:
        self.finished = 0
        page.on("websocket", lambda ws: ws.on("framereceived", self._frame))

    def _frame(self, payload: str | bytes) -> None:
        if isinstance(payload, bytes) and _is_script_finished(payload):
            self.finished += 1

    def wait_past(self, page: Page, count: int, timeout_ms: float) -> None:
        """Until more than ``count`` runs have finished (Playwright delivers the websocket's
        frames while the page waits)."""
        deadline = time.perf_counter() + timeout_ms / 1000
        while self.finished <= count:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"no script run finished within {timeout_ms / 1000:.0f} s")
            page.wait_for_timeout(5)


def _is_script_finished(payload: bytes) -> bool:
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    try:
        return ForwardMsg.FromString(payload).WhichOneof("type") == "script_finished"
    except Exception:  # not one of Streamlit's messages
        return False


def timed_rerun(
    page: Page,
    runs: ScriptRuns,
    pid: int,
    action: Callable[[], None],
    timeout_ms: float = 300_000,
) -> tuple[float, float]:
    """Seconds from ``action`` to the end of the script run it starts, the page drawn; and the
    server's CPU seconds over it (what the change costs the server: on a loaded machine the
    wall time is mostly waiting for a core)."""
    cpu = server_cpu_s(pid)
    before = runs.finished
    start = time.perf_counter()
    action()
    runs.wait_past(page, before, timeout_ms)
    page.wait_for_function(IDLE_JS, timeout=timeout_ms, polling="raf")
    page.wait_for_function(RENDERED_JS, timeout=timeout_ms, polling="raf")
    elapsed = time.perf_counter() - start
    cpu = server_cpu_s(pid) - cpu
    wait_idle(page)  # let the page settle before the next change
    return elapsed, cpu


def summary(name: str, samples: list[float], cpu: list[float]) -> str:
    median = statistics.median(samples)
    return (
        f"  {name:<42} median {median:5.2f} s  min {min(samples):5.2f}  max {max(samples):5.2f}"
        f"  (n={len(samples)});  server CPU median {statistics.median(cpu):5.2f} s"
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


def write_trace(path: Path) -> Path:
    from benchmarks.recommend_bench import write_trace as write

    return write(path)


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min, 2 cores)"


def measure(
    name: str,
    user_dir: Path,
    trace: Path | None,
    repeats: int,
    *,
    runs: int = 0,
    open_after: float = 0.0,
) -> tuple[dict[str, float], Samples]:
    """Start a server, open the scenario's Plan page (the cold-start timings), then time the
    sidebar changes on it."""
    timings: dict[str, float] = {}
    # the browser is open before the server starts, as a user's is: its own start (about a
    # second of both cores here) is not the dashboard's
    with chromium() as context:
        page = context.new_page()
        runs_seen = ScriptRuns(page)
        page.goto("about:blank")
        spawned = time.perf_counter()
        with run_dashboard(user_dir, timeout_s=120) as dashboard:
            timings["server start to /_stcore/health"] = time.perf_counter() - spawned
            if open_after:
                time.sleep(open_after)
                spawned = None  # the page is timed from opening it
            return _first_page_and_changes(
                name, page, runs_seen, dashboard, trace, repeats, runs, timings, spawned
            )


def _first_page_and_changes(
    name: str,
    page: Page,
    runs_seen: ScriptRuns,
    dashboard: Dashboard,
    trace: Path | None,
    repeats: int,
    runs: int,
    timings: dict[str, float],
    spawned: float | None,
) -> tuple[dict[str, float], Samples]:
    """The scenario's first page on the started server, then the timed sidebar changes
    (``spawned`` None: the page was opened a while after the server answered)."""
    opened = time.perf_counter()
    page.goto(f"{dashboard.url}/{SCENARIOS[name]}", wait_until="domcontentloaded")
    page.wait_for_function(DRAWN_JS, timeout=600_000, polling="raf")
    if spawned is None:
        timings["page opened later, to the top recommendation drawn"] = time.perf_counter() - opened
    else:
        timings["fresh server to the top recommendation drawn"] = time.perf_counter() - spawned
    if trace is not None:
        # the trace scenario's page first plans on the sidebar's distributions (no file can
        # travel in a link); then the trace is uploaded and planned on
        page.wait_for_function(SHOWN_JS, timeout=600_000, polling="raf")
        wait_idle(page)
        uploaded = time.perf_counter()
        sidebar = page.locator('[data-testid="stSidebar"]')
        uploader = sidebar.get_by_role("region", name="Trace file").get_by_test_id(
            "stFileUploaderDropzoneInput"
        )
        uploader.set_input_files(str(trace))
        page.wait_for_function(TRACE_DRAWN_JS, timeout=600_000, polling="raf")
        timings["trace uploaded to its top recommendation drawn"] = time.perf_counter() - uploaded
    page.wait_for_function(SHOWN_JS, timeout=600_000, polling="raf")
    page.wait_for_function(RENDERED_JS, timeout=600_000, polling="raf")
    now = time.perf_counter()
    timings["page load to the top recommendation, run over"] = now - opened
    if spawned is not None:
        timings["fresh server to the top recommendation, run over"] = now - spawned
    timings["  the server's CPU seconds until then"] = server_cpu_s(dashboard.process.pid)
    if runs:
        # the page reruns while the runs are ingested and the model refits on them in its
        # own process: how long until it settles; no changes are timed meanwhile
        wait_idle(page, timeout_ms=900_000, stable_ms=3_000)
        timings["until the page settles (runs in, refit done)"] = time.perf_counter() - spawned
        return timings, {}
    wait_idle(page)
    if not repeats:
        return timings, {}
    return timings, time_changes(page, runs_seen, dashboard.process.pid, name, repeats)


Samples = dict[str, tuple[list[float], list[float]]]


def time_changes(page: Page, runs_seen: ScriptRuns, pid: int, name: str, repeats: int) -> Samples:
    """(wall seconds, server CPU seconds) of each change, by change."""
    sidebar = page.locator('[data-testid="stSidebar"]')
    samples: Samples = {}

    def record(label: str, actions: list[Callable[[], None]]) -> None:
        timed = [timed_rerun(page, runs_seen, pid, action) for action in actions]
        samples[label] = ([wall for wall, _ in timed], [cpu for _, cpu in timed])

    def number(label: str, nth: int = 0) -> Locator:
        field = sidebar.locator('[data-testid="stNumberInput"]').filter(has_text=label).nth(nth)
        return field.locator("input")

    def set_number(label: str, value: float, nth: int = 0) -> Callable[[], None]:
        def act() -> None:
            box = number(label, nth)
            box.fill(f"{value:g}")
            box.press("Enter")

        return act

    sidebar.get_by_text("Set the observed utilisation").click()
    wait_idle(page)
    slider = sidebar.get_by_role("slider", name="Observed utilisation (%)")
    keys = ["ArrowLeft" if i % 2 == 0 else "ArrowRight" for i in range(repeats)]
    record(
        "utilisation slider step (re-rank)",
        [lambda key=key: slider.press(key) for key in keys],  # type: ignore[misc]
    )

    def pick_pricing(mode: str) -> Callable[[], None]:
        def act() -> None:
            sidebar.locator('[data-testid="stSelectbox"]').filter(has_text="Pricing").click()
            page.get_by_role("option", name=mode, exact=True).click()

        return act

    record(
        "pricing on demand <-> spot (re-price)",
        [pick_pricing("spot" if i % 2 == 0 else "on_demand") for i in range(min(repeats, 4))],
    )
    regions = sidebar.locator('[data-testid="stMultiSelect"]').filter(has_text="Regions")

    def add_region() -> None:
        regions.locator("input").fill("us-east-1")
        page.keyboard.press("Enter")
        page.keyboard.press("Escape")

    def drop_region() -> None:
        regions.locator("input").click()
        page.keyboard.press("Backspace")
        page.keyboard.press("Escape")

    record(
        "a region picked / dropped (re-price)",
        [add_region if i % 2 == 0 else drop_region for i in range(min(repeats, 4))],
    )
    if name != "trace":
        outputs = [448, 384, 320, 480, 416][: max(1, min(repeats, 5))]
        record(
            "output length change (new search)",
            [set_number("Mean (tokens)", tokens, nth=1) for tokens in outputs],
        )
    slos = [90, 80, 120, 70, 110][: max(1, min(repeats, 5))]
    record("p99 TPOT SLO change (new search)", [set_number("TPOT", tpot) for tpot in slos])
    peak = float(number("Peak (").input_value())
    peaks = [peak * f for f in (1.5, 0.75, 1.25, 2.0, 1.0)][: max(1, min(repeats, 5))]
    record("peak load change", [set_number("Peak (", round(value, 1)) for value in peaks])
    memory = sidebar.get_by_role("slider", name="gpu_memory_utilization")
    record(
        "engine: gpu_memory_utilization step",
        [lambda key=key: memory.press(key) for key in keys[: min(repeats, 4)]],  # type: ignore[misc]
    )
    return samples


#: how each ``--start`` prepares the user data directory and the server's environment
STARTS = {
    "cached": "cached fit in the user's directory",
    "fresh": "fresh install: empty user directory, the shipped fit",
    "unfitted": "no fit anywhere: SERVEWISE_FIT_CACHE=0, it fits first",
}


def start_server_env(start: str, user_dir: Path) -> dict[str, str]:
    """Prepare ``user_dir`` for ``start`` and return the environment the server runs in."""
    env = dict(os.environ)
    env.pop("SERVEWISE_CACHE_DIR", None)  # the default: <user data dir>/cache
    env.pop("SERVEWISE_FIT_CACHE", None)
    if start == "cached":
        seed_fit_cache(user_dir)
    elif start == "unfitted":
        env["SERVEWISE_FIT_CACHE"] = "0"
    return env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", choices=list(SCENARIOS))
    parser.add_argument("--repeats", type=int, default=5, help="changes timed per input")
    parser.add_argument(
        "--start",
        action="append",
        choices=list(STARTS),
        help="what the server starts from (repeat for side by side; default: cached)",
    )
    parser.add_argument(
        "--no-fit-cache", action="store_true", help="the same as --start unfitted (it fits first)"
    )
    parser.add_argument(
        "--first-page-only", action="store_true", help="time the first page, no sidebar changes"
    )
    parser.add_argument(
        "--cold-repeats", type=int, default=1, help="servers started per --start (alternating)"
    )
    parser.add_argument(
        "--runs", type=int, default=0, help="run directories in the fresh runs folder"
    )
    parser.add_argument(
        "--open-after",
        type=float,
        default=0.0,
        help="open the page this many seconds after the server answers (default: at once)",
    )
    args = parser.parse_args()
    starts = args.start or (["unfitted"] if args.no_fit_cache else ["cached"])
    print(load_average(), flush=True)
    for name in args.scenario or list(SCENARIOS):
        first_pages: dict[str, list[tuple[float, float, str]]] = {start: [] for start in starts}
        for _ in range(max(1, args.cold_repeats)):
            for start in starts:
                timings = run_once(name, start, args)
                first = next(v for k, v in timings.items() if "top recommendation drawn" in k)
                cpu = timings["  the server's CPU seconds until then"]
                first_pages[start].append((first, cpu, load_average()))
        if args.cold_repeats > 1 or len(starts) > 1:
            print(f"\n== {name}: first page, side by side (each server in turn)")
            for start, rows in first_pages.items():
                walls = [wall for wall, _, _ in rows]
                cpus = [cpu for _, cpu, _ in rows]
                print(
                    f"  {STARTS[start]:<54} median {statistics.median(walls):6.2f} s wall "
                    f"(min {min(walls):.2f}, max {max(walls):.2f}, n={len(walls)}), server CPU "
                    f"median {statistics.median(cpus):5.2f} s"
                )
                for wall, cpu, load in rows:
                    print(f"      {wall:6.2f} s wall, {cpu:5.2f} s CPU; {load}")
    return 0


def run_once(name: str, start: str, args: argparse.Namespace) -> dict[str, float]:
    """One server from ``start``: its first page (and the changes, unless first page only)."""
    with tempfile.TemporaryDirectory(prefix="servewise-bench-") as tmp:
        user_dir = Path(tmp) / "user"  # created by the server's harness, empty
        user_dir.mkdir()
        env = start_server_env(start, user_dir)
        if args.runs:
            from benchmarks.ingest_bench import write_runs

            write_runs(user_dir / "runs", args.runs, 100, 256)
        trace = write_trace(Path(tmp) / "trace.jsonl") if name == "trace" else None
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(env)
        try:
            timings, samples = measure(
                name,
                user_dir,
                trace,
                0 if args.first_page_only else args.repeats,
                runs=args.runs,
                open_after=args.open_after,
            )
        finally:
            os.environ.clear()
            os.environ.update(saved)
    runs = f", {args.runs} runs to ingest" if args.runs else ""
    later = f", opened {args.open_after:g} s after it answered" if args.open_after else ""
    print(
        f"\n== {name}: Plan page, every provider ({STARTS[start]}{runs}{later}), headless Chromium"
    )
    for label, value in timings.items():
        print(f"  {label:<46} {value:6.2f} s")
    for label, (walls, cpus) in samples.items():
        print(summary(label, walls, cpus))
    every = [v for walls, _ in samples.values() for v in walls]
    every_cpu = [v for _, cpus in samples.values() for v in cpus]
    if every:
        print(summary("every sidebar change", every, every_cpu))
    print(f"  {load_average()}", flush=True)
    return timings


if __name__ == "__main__":
    raise SystemExit(main())
