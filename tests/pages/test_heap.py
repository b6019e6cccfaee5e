"""pages.common.heap: the process's first script run without automatic collection, its heap
frozen after it, and every later run untouched."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from pages.common import heap


@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(heap, "_frozen", False)
    yield
    gc.unfreeze()  # the test process's objects back under the collector


@pytest.mark.usefixtures("fresh_process")
def test_the_first_run_is_paused_and_frozen_after_and_later_runs_are_not() -> None:
    with heap.first_page_of_process():
        assert not gc.isenabled()
        assert not heap._frozen  # frozen only once the run is over
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0
    frozen = gc.get_freeze_count()
    with heap.first_page_of_process():
        assert gc.isenabled()  # a later run collects as usual
    assert gc.get_freeze_count() == frozen  # and freezes nothing more


@pytest.mark.usefixtures("fresh_process")
def test_a_first_run_that_ends_in_an_exception_still_resumes_and_freezes() -> None:
    # Streamlit ends a run it reruns or stops with an exception through the page
    with pytest.raises(RuntimeError), heap.first_page_of_process():
        raise RuntimeError("rerun")
    assert gc.isenabled()
    assert heap._frozen
