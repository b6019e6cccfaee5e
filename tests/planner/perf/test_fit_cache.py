"""The fitted performance model on disk: reused by a new process, rebuilt when stale or corrupt.

These tests use their own cache directories (not the session-wide one of tests/conftest.py)
and a small catalog (the vLLM rows on L4 and L40S) so that each fit takes a second or two.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from planner.catalog import Catalog
from planner.perf import fit_cache
from planner.perf import model as model_module
from planner.perf.calibration import FitSample
from planner.perf.model import (
    PerformanceModel,
    fit_is_cached,
    get_performance_model,
    results_fingerprint,
)
from planner.perf.sample_cache import row_key
from planner.perf.scenario import Scenario
from tests.planner.perf import fit_files

ROOT = Path(__file__).resolve().parents[3]
SCENARIO = Scenario(
    engine="vllm",
    model="meta-llama/Llama-3.1-8B-Instruct",
    gpu="L40S",
    input_len=1024,
    output_len=256,
    concurrency=16,
    num_requests=64,
    instance="g6e.2xlarge",
)


@pytest.fixture(scope="module")
def small(catalog: Catalog) -> Catalog:
    rows = [m for m in catalog.measured if m.engine == "vllm" and m.gpu in ("L4", "L40S")]
    assert len(rows) >= 20
    return dataclasses.replace(catalog, measured=rows)


@pytest.fixture(autouse=True)
def _fresh_memory() -> Iterator[None]:
    """Every test starts as a new process would: nothing fitted in memory (what other tests
    fitted is put back afterwards)."""
    kept = dict(model_module._MODEL_CACHE)
    model_module._MODEL_CACHE.clear()
    yield
    model_module._MODEL_CACHE.clear()
    model_module._MODEL_CACHE.update(kept)


def _only_file(directory: Path) -> Path:
    files = list(directory.glob("perf-fit-*.npz"))
    assert len(files) == 1, files
    return files[0]


def test_a_second_load_reads_the_fit_and_predicts_exactly_the_same(
    small: Catalog, tmp_path: Path
) -> None:
    assert not fit_is_cached(small, cache_dir=tmp_path)
    fitted = get_performance_model(small, cache_dir=tmp_path)
    assert not fitted.from_cache
    _only_file(tmp_path)
    model_module._MODEL_CACHE.clear()
    assert fit_is_cached(small, cache_dir=tmp_path)
    loaded = get_performance_model(small, cache_dir=tmp_path)
    assert loaded.from_cache and loaded is not fitted
    assert loaded.coefficients == fitted.coefficients
    assert loaded.predict(SCENARIO) == fitted.predict(SCENARIO)
    # what only the simulated rows know is rebuilt when asked, and is the same
    assert len(loaded.samples) == len(fitted.samples)
    assert [e.reason for e in loaded.excluded] == [e.reason for e in fitted.excluded]
    assert loaded.predict(SCENARIO) == fitted.predict(SCENARIO)


def test_a_new_process_uses_the_cache_without_simulating(small: Catalog, tmp_path: Path) -> None:
    """The whole catalog's fit, cached by this process, is read by another one."""
    get_performance_model(small, cache_dir=tmp_path)
    code = (
        "import dataclasses, sys; from pathlib import Path;"
        "from planner.catalog import load_catalog;"
        "from planner.perf import model as m;"
        "c = load_catalog();"
        "rows = [r for r in c.measured if r.engine == 'vllm' and r.gpu in ('L4', 'L40S')];"
        "small = dataclasses.replace(c, measured=rows);"
        f"p = m.get_performance_model(small, cache_dir=Path({str(tmp_path)!r}));"
        "print(p.from_cache, len(m._SAMPLE_CACHE))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", "0"]  # no measured row simulated


def _same_rows(got: list[FitSample], want: list[FitSample]) -> None:
    """The same rows, simulated alike: every trace array and every fitted target equal."""
    assert [s.result for s in got] == [s.result for s in want]
    for a, b in zip(got, want, strict=True):
        for field in dataclasses.fields(a.trace):
            name = field.name
            assert np.array_equal(getattr(a.trace, name), getattr(b.trace, name)), name
        assert len(a.targets) == len(b.targets)
        for x, y in zip(a.targets, b.targets, strict=True):
            assert (x.metric, x.stat, x.log_measured) == (y.metric, y.stat, y.log_measured)
            assert np.array_equal(x.V, y.V) and np.array_equal(x.offset, y.offset)


def test_a_fit_read_from_disk_rebuilds_its_rows_without_fitting(
    small: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fit keeps the coefficient vector it re-simulated each clock-driven row with, so a
    process that reads it rebuilds the fitted rows (``planner validate``, the Benchmarks page)
    by simulating them, not by fitting again; the first such process writes the
    re-simulations, and the next one, or a fit of the same data, reads them."""
    fitted = get_performance_model(small, cache_dir=tmp_path)
    clocked = {row_key(s.result.model_dump_json()) for s in fitted.samples if s.time_driven}
    assert len(clocked) >= 5  # the small catalog's rate runs
    assert set(fitted.fit_state().clocks) == clocked
    assert not list(tmp_path.glob("sim-clocked-*.npz"))  # the fitting process keeps its rows

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("called")

    model_module._MODEL_CACHE.clear()
    with monkeypatch.context() as patch:
        patch.setattr(model_module, "calibrate", forbidden)
        loaded = get_performance_model(small, cache_dir=tmp_path)
        assert loaded.from_cache
        _same_rows(loaded.samples, fitted.samples)
        assert [e.reason for e in loaded.excluded] == [e.reason for e in fitted.excluded]
    assert len(list(tmp_path.glob("sim-clocked-*.npz"))) == 1
    # the next process, and a fit of the same data, simulate no row again
    model_module._MODEL_CACHE.clear()
    with monkeypatch.context() as patch:
        patch.setattr(model_module, "resimulate", forbidden)
        again = get_performance_model(small, cache_dir=tmp_path)
        _same_rows(again.samples, fitted.samples)
        refit = PerformanceModel(small, cache_dir=tmp_path).fit(small.measured)
        _same_rows(refit.samples, fitted.samples)
        assert refit.coefficients == fitted.coefficients
    # a fit that kept no vectors (an older file) is fitted again to rebuild its rows
    state = dataclasses.replace(fitted.fit_state(), clocks={})
    old = PerformanceModel.from_fit_state(small, state, small.measured, cache_dir=tmp_path)
    with monkeypatch.context() as patch:
        calls: list[int] = []
        real = model_module.calibrate

        def counted(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            return real(*args, **kwargs)

        patch.setattr(model_module, "calibrate", counted)
        _same_rows(old.samples, fitted.samples)
    assert calls == [1]


def test_the_key_follows_the_results_the_catalog_and_the_code(
    small: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = fit_cache.cache_key(results_fingerprint(small, small.measured))
    fewer = small.measured[:-1]
    assert fit_cache.cache_key(results_fingerprint(small, fewer)) != base
    faster = dict(small.gpus)
    faster["L4"] = faster["L4"].model_copy(update={"memory_bw_gbps": 400.0})
    other_catalog = dataclasses.replace(small, gpus=faster)
    assert fit_cache.cache_key(results_fingerprint(other_catalog, small.measured)) != base
    monkeypatch.setattr(fit_cache, "code_version", lambda: "a changed step-time term")
    assert fit_cache.cache_key(results_fingerprint(small, small.measured)) != base


def test_a_fit_of_other_code_is_not_read(
    small: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    get_performance_model(small, cache_dir=tmp_path)
    model_module._MODEL_CACHE.clear()
    monkeypatch.setattr(fit_cache, "code_version", lambda: "the simulator changed")
    again = get_performance_model(small, cache_dir=tmp_path)
    assert not again.from_cache
    assert len(list(tmp_path.glob("perf-fit-*.npz"))) == 2


@pytest.mark.parametrize(
    "corrupt",
    [
        fit_files.truncated,
        fit_files.garbage,
        fit_files.tampered_array,
        fit_files.other_key,
        fit_files.pickled_object,
    ],
)
def test_a_corrupt_or_foreign_cache_is_rebuilt_never_trusted(
    small: Catalog, tmp_path: Path, corrupt: object
) -> None:
    fitted = get_performance_model(small, cache_dir=tmp_path)
    expected = fitted.predict(SCENARIO)
    path = _only_file(tmp_path)
    corrupt(path)  # type: ignore[operator]
    model_module._MODEL_CACHE.clear()
    rebuilt = get_performance_model(small, cache_dir=tmp_path)
    assert not rebuilt.from_cache
    assert rebuilt.predict(SCENARIO) == expected
    # and the rebuilt fit replaced the bad file
    model_module._MODEL_CACHE.clear()
    assert zipfile.is_zipfile(_only_file(tmp_path))
    assert get_performance_model(small, cache_dir=tmp_path).from_cache


def test_the_cache_can_be_turned_off_and_a_read_only_directory_only_costs_a_fit(
    small: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    off = get_performance_model(small, cache_dir=tmp_path, disk_cache=False)
    assert not off.from_cache and not list(tmp_path.iterdir())
    blocked = tmp_path / "a-file-not-a-directory"
    blocked.write_text("")
    model_module._MODEL_CACHE.clear()
    model = get_performance_model(small, cache_dir=blocked / "cache")
    assert not model.from_cache and model.fitted is not None


def test_only_the_newest_fits_are_kept(
    small: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = get_performance_model(small, cache_dir=tmp_path).fit_state()
    for i in range(fit_cache.KEEP_FILES + 3):
        fit_cache.save(tmp_path, f"{i:032d}", state)
    assert len(list(tmp_path.glob("perf-fit-*.npz"))) == fit_cache.KEEP_FILES


def test_a_caller_that_must_not_wait_gets_the_fit_when_the_background_is_done(
    small: Catalog,
) -> None:
    from planner.perf.model import performance_model_nowait

    user = [m.model_copy(update={"origin": "user", "run_id": "r1"}) for m in small.measured[:1]]
    assert performance_model_nowait(small, user, wait_s=0.0) is None  # fitting meanwhile
    model = performance_model_nowait(small, user, wait_s=300.0)
    assert model is not None and model.fitted is not None
    assert performance_model_nowait(small, user) is model  # at hand from now on
