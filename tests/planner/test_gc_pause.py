"""planner.gc_pause: automatic collection off inside, back on after the last pause ends."""

from __future__ import annotations

import gc
import threading

from planner.gc_pause import gc_paused


def test_collection_resumes_after_the_outermost_pause() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer one is still on
    assert gc.isenabled()


def test_an_error_inside_still_resumes_collection() -> None:
    try:
        with gc_paused():
            raise ValueError("boom")
    except ValueError:
        pass
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_two_threads_pausing_at_once_resume_when_both_are_done() -> None:
    inside, release = threading.Barrier(2), threading.Event()

    def search() -> None:
        with gc_paused():
            inside.wait(timeout=60)
            release.wait(timeout=60)

    worker = threading.Thread(target=search)
    worker.start()
    with gc_paused():
        inside.wait(timeout=60)
    assert not gc.isenabled()  # the other thread's search still holds it
    release.set()
    worker.join(timeout=60)
    assert gc.isenabled()


def test_a_decorated_function_runs_paused() -> None:
    @gc_paused()
    def search() -> bool:
        return gc.isenabled()

    assert search() is False
    assert search() is False  # the decorator pauses again on every call
    assert gc.isenabled()
