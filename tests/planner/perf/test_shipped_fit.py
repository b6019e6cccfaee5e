"""The fit of the embedded data that ships in ``data/perf_fit.npz``: current, used by a fresh
install without fitting, never trusted when it fails a check, and set aside by a user's runs.

Fits are counted in-process (:meth:`PerformanceModel.fit` wrapped), not timed. The tests of
tampering and of user runs ship a fit of a small catalog (the vLLM rows on L4 and L40S, a
second or two to fit) from a temporary file, never touching ``data/``.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from planner.catalog import Catalog
from planner.cli import main
from planner.commands.ship_fit import embedded_fit_key
from planner.perf import fit_cache
from planner.perf import model as model_module
from planner.perf.model import (
    PerformanceModel,
    fit_is_cached,
    get_performance_model,
    performance_model_nowait,
)
from planner.perf.scenario import Scenario
from tests.patience import PATIENT_S
from tests.planner.perf import fit_files

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


@pytest.fixture(autouse=True)
def _fresh_memory() -> Iterator[None]:
    """Every test starts as a new process would: nothing fitted or read in memory."""
    kept = dict(model_module._MODEL_CACHE)
    model_module._MODEL_CACHE.clear()
    yield
    model_module._MODEL_CACHE.clear()
    model_module._MODEL_CACHE.update(kept)


@pytest.fixture
def fits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of rows of every fit run in this process from now on (one entry a fit)."""
    counted: list[int] = []
    real_fit = PerformanceModel.fit

    def counting_fit(self: PerformanceModel, results: object, catalog: object = None) -> object:
        counted.append(len(results))  # type: ignore[arg-type]
        return real_fit(self, results, catalog)  # type: ignore[arg-type]

    monkeypatch.setattr(PerformanceModel, "fit", counting_fit)
    return counted


# ----- the shipped file is current ----------------------------------------------------------
def test_the_shipped_fit_matches_the_embedded_data_and_code(catalog: Catalog) -> None:
    problem = fit_cache.shipped_problem(embedded_fit_key(catalog))
    assert problem is None, (
        f"data/perf_fit.npz is stale: {problem}. Rebuild it with "
        f"`.venv/bin/{fit_cache.REBUILD_COMMAND}` and commit it."
    )


@pytest.mark.parametrize("change", ["code", "measured", "catalog"])
def test_a_change_to_the_code_the_rows_or_the_catalog_makes_it_stale(
    catalog: Catalog,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    change: str,
) -> None:
    """The check above fails, and ``ship-fit --check`` exits 1 naming the rebuild command, for
    each of the three things the file is keyed by."""
    assert main(["ship-fit", "--check"]) == 0
    if change == "code":
        monkeypatch.setattr(fit_cache, "code_version", lambda: "a changed step-time term")
        changed = catalog
    elif change == "measured":
        changed = dataclasses.replace(catalog, measured=catalog.measured[:-1])
    else:
        gpus = dict(catalog.gpus)
        gpus["L4"] = gpus["L4"].model_copy(update={"memory_bw_gbps": 400.0})
        changed = dataclasses.replace(catalog, gpus=gpus)
    assert fit_cache.shipped_problem(embedded_fit_key(changed)) is not None
    monkeypatch.setattr("planner.commands.ship_fit.load_catalog", lambda: changed)
    capsys.readouterr()
    assert main(["ship-fit", "--check"]) == 1
    assert f"rebuild with {fit_cache.REBUILD_COMMAND}" in capsys.readouterr().err


@pytest.mark.slow
# one whole fit (~35 s of CPU) beside the session's own: ~220 s at load average 12, so the
# suite's 300 s hang detector gets four patiences here
@pytest.mark.timeout(4 * PATIENT_S)
def test_the_shipped_fit_is_the_fit_of_the_embedded_data(catalog: Catalog, tmp_path: Path) -> None:
    """A rebuild (the one fit this file runs) writes what is shipped: the same header, the same
    arrays (to rounding, in case another machine's BLAS orders a sum differently), and a second
    write of the same fit the same bytes."""
    fitted = PerformanceModel(catalog).fit(catalog.measured)
    key = embedded_fit_key(catalog)
    rebuilt = fit_cache.write_shipped(tmp_path / "a.npz", key, fitted.fit_state())
    again = fit_cache.write_shipped(tmp_path / "b.npz", key, fitted.fit_state())
    assert rebuilt.read_bytes() == again.read_bytes()
    with np.load(rebuilt) as new, np.load(fit_cache.SHIPPED_FIT) as shipped:
        assert sorted(new.files) == sorted(shipped.files)
        new_header = fit_cache.decode_header(new["header"])
        shipped_header = fit_cache.decode_header(shipped["header"])
        for part in ("key", "points", "combos", "seen"):
            assert new_header[part] == shipped_header[part], part
        for name in new.files:
            if name != "header":
                np.testing.assert_allclose(new[name], shipped[name], rtol=1e-9, atol=1e-12)


# ----- a fresh install fits nothing ---------------------------------------------------------
def test_a_fresh_install_reads_the_shipped_fit_and_fits_nothing(
    catalog: Catalog, tmp_path: Path, fits: list[int]
) -> None:
    empty = tmp_path / "cache"
    assert fit_is_cached(catalog, cache_dir=empty)
    model = get_performance_model(catalog, cache_dir=empty)
    assert fits == []
    assert model.from_cache and model.fitted is not None
    assert model.fitted.n_rows == len(model.fit_state().points) > 700
    assert model.predict(SCENARIO).output_tok_per_s > 0
    assert fits == []
    assert not empty.exists()  # nothing to write: the shipped fit is not copied


def test_the_recommend_command_on_an_empty_user_directory_fits_nothing(
    fits: list[int], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The brief's command, in this process, on the empty user data directory every test gets,
    with the default cache directory (in it, so empty too; not the test session's cache)."""
    from planner.settings import get_settings

    monkeypatch.delenv("SERVEWISE_CACHE_DIR", raising=False)
    get_settings.cache_clear()
    settings = get_settings()
    assert settings.cache_directory == settings.user_data_dir / "cache"
    assert not settings.user_data_dir.exists() or not any(settings.user_data_dir.iterdir())
    args = ["recommend", "--model", "meta-llama/Llama-3.1-70B-Instruct", "--input-len", "2048",
            "--output-len", "512", "--rate", "2", "--provider", "aws", "--slo-ttft-p99-ms",
            "3000", "--slo-tpot-p99-ms", "100", "--top", "1"]  # fmt: skip
    assert main(args) == 0
    assert fits == []
    assert "1. " in capsys.readouterr().out


# ----- a small catalog's fit, shipped from a temporary file -------------------------------
@pytest.fixture(scope="module")
def small(catalog: Catalog) -> Catalog:
    rows = [m for m in catalog.measured if m.engine == "vllm" and m.gpu in ("L4", "L40S")]
    assert len(rows) >= 20
    return dataclasses.replace(catalog, measured=rows)


@pytest.fixture(scope="module")
def small_shipped(small: Catalog, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small catalog's fit written as a shipped file (fitted once for this module)."""
    fitted = PerformanceModel(small).fit(small.measured)
    path = tmp_path_factory.mktemp("shipped") / "perf_fit.npz"
    return fit_cache.write_shipped(path, embedded_fit_key(small), fitted.fit_state())


@pytest.fixture
def ship(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, small_shipped: Path) -> Path:
    """A copy of the small catalog's shipped fit, in the place of ``data/perf_fit.npz``."""
    path = tmp_path / "perf_fit.npz"
    shutil.copy(small_shipped, path)
    monkeypatch.setattr(fit_cache, "SHIPPED_FIT", path)
    return path


def test_the_shipped_fit_predicts_what_the_fit_predicted(
    small: Catalog, ship: Path, tmp_path: Path, fits: list[int]
) -> None:
    fitted = get_performance_model(small, cache_dir=tmp_path / "off", disk_cache=False)
    assert fits == [len(small.measured)] and not fitted.from_cache
    model_module._MODEL_CACHE.clear()
    shipped = get_performance_model(small, cache_dir=tmp_path / "cache")
    assert len(fits) == 1 and shipped.from_cache
    assert shipped.coefficients == fitted.coefficients
    assert shipped.predict(SCENARIO) == fitted.predict(SCENARIO)


@pytest.mark.parametrize(
    "tamper",
    [
        fit_files.tampered_array,
        fit_files.other_key,
        fit_files.truncated,
        fit_files.pickled_object,
        fit_files.unicode_header,
    ],
)
def test_a_tampered_or_foreign_shipped_fit_is_never_trusted(
    small: Catalog, ship: Path, tmp_path: Path, fits: list[int], tamper: Callable[[Path], None]
) -> None:
    tamper(ship)
    key = embedded_fit_key(small)
    assert fit_cache.load_shipped(key) is None
    assert fit_cache.shipped_problem(key) is not None
    assert not fit_is_cached(small, cache_dir=tmp_path / "cache")
    model = get_performance_model(small, cache_dir=tmp_path / "cache")
    assert fits == [len(small.measured)] and not model.from_cache
    assert ship.exists()  # left in place (it is the package's, not the cache's), only ignored
    # the fit went to the user's cache as before: the next process reads it
    model_module._MODEL_CACHE.clear()
    assert get_performance_model(small, cache_dir=tmp_path / "cache").from_cache
    assert len(fits) == 1


def test_user_runs_refit_and_meanwhile_the_shipped_fit_serves(
    small: Catalog, ship: Path, tmp_path: Path, fits: list[int]
) -> None:
    """What a page does with new runs: the refit on them starts in the background (a process
    of its own) while the model without them, shipped, serves at once; the refit has the
    runs."""
    cache = tmp_path / "cache"
    user = [
        m.model_copy(update={"origin": "user", "run_id": f"r{i}"})
        for i, m in enumerate(small.measured[:2])
    ]
    assert performance_model_nowait(small, user, wait_s=0.0, cache_dir=cache) is None
    shipped = get_performance_model(small, cache_dir=cache)
    assert shipped.from_cache and fits == []
    refit = performance_model_nowait(small, user, wait_s=300.0, cache_dir=cache)
    assert refit is not None and refit.fitted is not None
    assert refit.fitted.n_rows == shipped.fitted.n_rows + len(user)  # type: ignore[union-attr]
    assert fits == []  # the refit ran in its own process, not in this one
    # in this process, the same runs fit here when no background is asked for
    model_module._MODEL_CACHE.clear()
    here = get_performance_model(small, user, cache_dir=tmp_path / "other")
    assert fits == [len(small.measured) + len(user)] and not here.from_cache
