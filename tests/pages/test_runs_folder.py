"""The runs folder on the pages: the quarantine list (Benchmarks, Data) and the notice while run
files are ingested in the background.

The shared user directory of the page tests holds two bad run directories (see
``write_poisoned_runs``): every page test runs with them, so every page is shown to keep working
with a poisoned runs folder.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from planner.ingest import IngestJob
from planner.settings import get_settings
from tests.pages.conftest import BAD_LINE_RUN, BAD_META_RUN, frame_with, no_exception, write_run


@pytest.mark.parametrize("page", ["pages/benchmarks.py", "pages/data.py"])
def test_the_quarantine_lists_each_bad_run_with_file_line_and_field(
    app: Callable[..., AppTest], page: str
) -> None:
    at = app(page)
    table = frame_with(at, "run", "file", "line", "field", "reason")
    rows = {row.run: row for row in table.itertuples()}
    assert set(rows) == {BAD_LINE_RUN, BAD_META_RUN}
    bad_line = rows[BAD_LINE_RUN]
    assert (bad_line.file, int(bad_line.line), bad_line.field) == ("requests.jsonl", 4, "start_s")
    assert bad_line.value == "abc"
    assert rows[BAD_META_RUN].file == "run.json"
    assert "the whole run is skipped" in rows[BAD_META_RUN].reason
    assert any("2 problems in 2 run directories" in w.value for w in at.warning)


def counted_waits(job: IngestJob, monkeypatch: pytest.MonkeyPatch) -> list[float | None]:
    """The timeouts of every ``job.wait`` call from now on (the waits still happen)."""
    waits: list[float | None] = []
    real_wait = job.wait

    def counted(timeout: float | None = None) -> object:
        waits.append(timeout)
        return real_wait(timeout)

    monkeypatch.setattr(job, "wait", counted)
    return waits


def test_the_good_lines_of_a_run_with_a_bad_line_are_kept(app: Callable[..., AppTest]) -> None:
    at = app("pages/benchmarks.py")
    at.multiselect(key="bm_runs").set_value([BAD_LINE_RUN]).run()
    no_exception(at)
    side = frame_with(at, BAD_LINE_RUN)
    assert side.loc["status", BAD_LINE_RUN] == "completed"


def test_a_page_does_not_wait_for_a_large_runs_folder_and_says_what_is_coming(
    own_user_dir: Path, monkeypatch: pytest.MonkeyPatch, app: Callable[..., AppTest]
) -> None:
    for i in range(40):
        write_run(own_user_dir / "runs", f"20261130T1000{i:02d}Z-cccc{i:02d}", ttft_s=0.1,
                  gap_s=0.01, gpu="L4", plan=False)  # fmt: skip
    monkeypatch.setenv("SERVEWISE_INGEST_WAIT_S", "0")
    get_settings.cache_clear()
    at = app("pages/data.py")  # a page that draws the runs folder and predicts nothing
    notices = [i.value for i in at.info if "Ingesting run files in the background" in i.value]
    assert notices and "so far" in notices[0]
    from pages.common.resources import get_catalog, get_store

    store = get_store(get_catalog())
    store.ingest_job.wait(timeout=120)
    at.run()
    no_exception(at)
    assert not [i for i in at.info if "Ingesting run files" in i.value]
    assert len(store.runs()) == 40
    assert any("nothing is quarantined" in c.value for c in at.caption)


def test_a_page_waits_for_an_ingestion_pass_once_not_at_every_call(
    own_user_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page run asks for the runs several times (the model's fit, the notices) and reruns
    while a pass goes on: only the first ask waits (``SERVEWISE_INGEST_WAIT_S``). The pass is
    held in flight by holding the store's write lock, so nothing here depends on timing."""
    from pages.common.resources import runs_generation
    from planner.store import Store

    write_run(own_user_dir / "runs", "20261130T100000Z-cccccc", ttft_s=0.1, gap_s=0.01, gpu="L4")
    monkeypatch.setenv("SERVEWISE_INGEST_WAIT_S", "0.05")
    get_settings.cache_clear()
    store = Store(own_user_dir / "store.duckdb")
    job = store.ingest_job
    waits = counted_waits(job, monkeypatch)
    with store.write_lock():  # the pass cannot write: it stays in flight
        runs_generation(store)
        runs_generation(store)
        runs_generation(store)
        assert job.current is not None and job.current.running
    assert waits == [0.05]
    job.wait(timeout=60)  # the pass ends once the lock is free
    runs_generation(store)  # a new pass (nothing new to ingest): waited for afresh
    assert len(waits) >= 2
    store.close()


def test_a_page_does_not_wait_for_a_pass_that_cannot_end_within_the_wait(
    own_user_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass larger than what the wait could ingest (here: at 1 byte a second, any) is not
    waited for at all: the page draws at once and says what is coming. Held in flight by the
    store's write lock, as above, so nothing depends on timing."""
    from pages.common import resources
    from planner.store import Store

    write_run(own_user_dir / "runs", "20261130T100000Z-dddddd", ttft_s=0.1, gap_s=0.01, gpu="L4")
    monkeypatch.setenv("SERVEWISE_INGEST_WAIT_S", "60")
    monkeypatch.setattr(resources, "INGEST_WAIT_BYTES_PER_S", 1.0)
    get_settings.cache_clear()
    store = Store(own_user_dir / "store.duckdb")
    job = store.ingest_job
    waits = counted_waits(job, monkeypatch)
    with store.write_lock():
        resources.runs_generation(store)
        assert job.current is not None and job.current.running
        assert job.current.bytes_total > 60
    assert waits == []
    job.wait(timeout=60)
    assert len(store.runs()) == 1
    store.close()
