"""AppTest fixtures: the real app.py on the embedded catalog, with isolated user data.

Every page test shares one user data directory (a database, two benchmark runs) so the
DuckDB store is built once; tests that write user files get their own (``own_user_dir``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
import streamlit.testing.v1.app_test as app_test_module
from streamlit.runtime.pages_manager import PagesManager
from streamlit.testing.v1 import AppTest

from benchmarks_runner.metrics import compute_summary
from planner.run_files import MetricSample, RequestRecord, RunWriter
from planner.settings import get_settings
from tests.patience import PATIENT_S

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app.py"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def write_run(
    runs_dir: Path, run_id: str, *, ttft_s: float, gap_s: float, gpu: str, plan: bool = True
) -> None:
    """A completed run as ``benchmarks_runner`` writes it: 8 requests of 4 chunks each (with
    ``plan=False`` it names no plan: stored and listed, but no calibration point)."""
    writer = RunWriter(runs_dir, run_id=run_id)
    rows = []
    for i in range(8):
        start = 0.05 * i
        chunks = [start + ttft_s + k * gap_s for k in range(4)]
        rows.append(
            RequestRecord(
                request_id=f"{run_id}-{i}",
                request_index=i,
                start_s=start,
                first_chunk_s=chunks[0],
                first_content_s=chunks[0],
                end_s=chunks[-1],
                chunk_times_s=chunks,
                chunk_tokens=[1, 1, 1, 1],
                prompt_tokens=256,
                output_tokens=4,
                input_len_target=256,
                output_len_target=4,
                status="ok",
                http_status=200,
            )
        )
    writer.append_requests(rows)
    summary = compute_summary(rows, duration_s=max(r.end_s or 0 for r in rows), max_concurrency=4)
    writer.write_meta(
        status="completed",
        model=MODEL,
        simulated=True,
        endpoint={"base_url": "http://127.0.0.1:9", "api": "completions"},
        config={"concurrency": 4, "num_requests": 8, "input_len": 256, "output_len": 4},
        plan={"engine": "vllm", "model": MODEL, "gpu": gpu, "tp": 1, "pp": 1, "num_gpus": 1}
        if plan
        else None,
        summary=summary,
    )
    writer.close()


#: run directories of the shared user directory that ingestion must quarantine
BAD_LINE_RUN = "20261101T090000Z-badln0"
BAD_META_RUN = "20261101T090500Z-badrun"


def write_poisoned_runs(runs_dir: Path) -> None:
    """A run with one bad line (``"start_s": "abc"``) among good ones, and a run whose run.json
    is cut off: every page must keep working and the Benchmarks and Data pages list both.
    Older than the good runs and without a plan, so they change no default selection."""
    writer = RunWriter(runs_dir, run_id=BAD_LINE_RUN)
    good = [
        RequestRecord(request_id=f"ok-{i}", request_index=i, start_s=i, first_chunk_s=i + 0.1,
                      end_s=i + 0.5, status="ok")
        for i in range(3)
    ]  # fmt: skip
    writer.append_requests(good)
    writer.write_meta(status="completed", model=MODEL, started_at="2026-11-01T09:00:00Z")
    writer.close()
    with (writer.dir / "requests.jsonl").open("a", encoding="utf-8") as handle:
        bad = good[0].model_dump(mode="json") | {"request_id": "bad-3", "start_s": "abc"}
        handle.write(json.dumps(bad) + "\n")
    cut = RunWriter(runs_dir, run_id=BAD_META_RUN)
    cut.write_meta(status="completed", model=MODEL, started_at="2026-11-01T09:05:00Z")
    cut.close()
    (cut.dir / "run.json").write_text('{"run_id": "' + BAD_META_RUN + '", "status": "comp')


KV_RUN = "20261201T120000Z-c0ffee"


def write_kv_run(runs_dir: Path) -> None:
    """A run of 64 requests at concurrency 32 on a plan with gpu_memory_utilization 0.3 whose
    server preempted 40 times with its KV cache full and requests waiting."""
    writer = RunWriter(runs_dir, run_id=KV_RUN)
    rows = []
    for i in range(64):
        start = (i // 32) * 2.0 + 0.01 * (i % 32)
        chunks = [start + 0.3 + 0.012 * k for k in range(100)]
        rows.append(
            RequestRecord(
                request_id=f"kv-{i}", request_index=i, scheduled_s=start, start_s=start,
                first_chunk_s=chunks[0], first_content_s=chunks[0], end_s=chunks[-1],
                chunk_times_s=chunks, chunk_tokens=[1] * 100, prompt_tokens=700 + 10 * (i % 30),
                output_tokens=100, input_len_target=1000, output_len_target=100, status="ok",
                http_status=200,
            )
        )  # fmt: skip
    writer.append_requests(rows)
    times = [0.5 * k for k in range(9)]
    samples = []
    for name, values in (
        ("vllm:num_preemptions_total", [0, 5, 10, 15, 20, 25, 30, 35, 40]),
        ("vllm:kv_cache_usage_perc", [0.4, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5]),
        ("vllm:num_requests_waiting", [0, 12, 14, 15, 12, 10, 8, 4, 0]),
        ("vllm:num_requests_running", [20, 20, 18, 17, 20, 22, 24, 28, 10]),
    ):
        samples += [
            MetricSample(t_s=t, name=name, value=float(v))
            for t, v in zip(times, values, strict=True)
        ]
    writer.append_metric_samples(samples)
    writer.write_meta(
        status="completed",
        model=MODEL,
        simulated=True,
        endpoint={"base_url": "http://127.0.0.1:9", "api": "completions"},
        config={"load": "concurrency", "concurrency": 32, "num_requests": 64},
        plan={"engine": "vllm", "model": MODEL, "gpu": "H100-SXM", "tp": 1, "pp": 1,
              "num_gpus": 1, "gpu_memory_utilization": 0.3, "label": "H100-SXM TP1 PP1 bf16"},
        summary=compute_summary(rows, duration_s=4.0, max_concurrency=32),
    )  # fmt: skip
    writer.close()


@pytest.fixture(scope="session")
def pages_user_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    user_dir = tmp_path_factory.mktemp("pages-user")
    write_run(user_dir / "runs", "20261129T100000Z-aaaaaa", ttft_s=0.08, gap_s=0.01, gpu="L4")
    write_run(user_dir / "runs", "20261129T110000Z-bbbbbb", ttft_s=0.30, gap_s=0.04, gpu="L40S")
    write_poisoned_runs(user_dir / "runs")
    return user_dir


@pytest.fixture(autouse=True)
def _isolated_user_dir(pages_user_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Overrides the suite-wide fixture: page tests share one read-mostly user directory."""
    monkeypatch.setenv("SERVEWISE_USER_DATA_DIR", str(pages_user_dir))
    get_settings.cache_clear()
    yield pages_user_dir
    get_settings.cache_clear()


@pytest.fixture
def own_user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh user directory for a test that writes catalog files."""
    monkeypatch.setenv("SERVEWISE_USER_DATA_DIR", str(tmp_path))
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


class _NavigationPagesManager(PagesManager):
    """AppTest resets Streamlit's legacy-multipage flag before every run, and a ``pages/``
    directory turns it on (see ``pages/common/navigation.py``). ``app.py`` recovers with a
    rerun, which would swallow a button click; the served app leaves the legacy mode once,
    so the tests start every run where the served app is: out of it."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        PagesManager.uses_pages_directory = False
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _navigation_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app_test_module, "PagesManager", _NavigationPagesManager)


@pytest.fixture
def app() -> Callable[..., AppTest]:
    """``app(page, **query)``: the dashboard run once on ``page`` with ``query`` in the URL."""

    def start(page: str | None = None, **query: str | list[str]) -> AppTest:
        at = AppTest.from_file(str(APP), default_timeout=PATIENT_S)
        at.query_params.update(query)
        if page is not None:
            # Page URL paths are the file names, so the page resolves before the first run.
            at.switch_page(page)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    return start


def no_exception(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def frame_with(at: AppTest, *columns: str) -> pd.DataFrame:
    """The first dataframe shown with all of ``columns`` (AppTest exposes no dataframe keys)."""
    for element in at.dataframe:
        frame = element.value
        if set(columns) <= set(frame.columns):
            return frame
    shown = [list(e.value.columns)[:6] for e in at.dataframe]
    raise AssertionError(f"no dataframe with columns {columns}; shown: {shown}")
