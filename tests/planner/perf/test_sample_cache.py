"""Simulated measured rows on disk: a refit simulates only the rows no fit simulated before.

Each test uses its own cache directory and a few dozen rows of the embedded catalog (clock-driven
rows among them), and starts with nothing simulated in this process's memory, as a new process.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from planner.catalog import Catalog, MeasuredResult
from planner.perf import calibration, sample_cache
from planner.perf import model as model_module
from planner.perf.calibration import FitSample
from planner.perf.model import (
    Excluded,
    PerformanceModel,
    catalog_fingerprint,
    simulate_measured,
)
from planner.perf.simulator import SimTrace, needs_clock


@pytest.fixture(scope="module")
def rows(catalog: Catalog) -> list[MeasuredResult]:
    closed = [m for m in catalog.measured if m.engine == "vllm" and m.gpu == "L40S"][:20]
    clocked = [m for m in catalog.measured if m.request_rate is not None][:3]
    assert len(closed) == 20 and len(clocked) == 3
    return closed + clocked


@pytest.fixture(autouse=True)
def _nothing_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_module, "_SAMPLE_CACHE", OrderedDict())


@pytest.fixture
def simulations(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The models of the rows :func:`planner.perf.calibration.build_sample` simulates."""
    done: list[str] = []
    real = calibration.simulate

    def counting(dep, *args, **kwargs):  # type: ignore[no-untyped-def]
        done.append(dep.scenario.model)
        return real(dep, *args, **kwargs)

    monkeypatch.setattr(calibration, "simulate", counting)
    yield done


@dataclass
class Disk:
    """A cache directory, the rows and what this process simulated (see ``simulations``)."""

    catalog: Catalog
    rows: list[MeasuredResult]
    directory: Path
    simulations: list[str]
    patch: pytest.MonkeyPatch

    def new_process(self) -> None:
        """Start over as a new process would: nothing simulated in memory, nothing counted."""
        self.patch.setattr(model_module, "_SAMPLE_CACHE", OrderedDict())
        self.simulations.clear()

    def simulate(
        self, rows: list[MeasuredResult] | None = None
    ) -> tuple[list[FitSample], list[Excluded]]:
        return simulate_measured(self.rows if rows is None else rows, self.catalog, self.directory)


@pytest.fixture
def disk(
    catalog: Catalog,
    rows: list[MeasuredResult],
    tmp_path: Path,
    simulations: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Disk:
    return Disk(catalog, rows, tmp_path, simulations, monkeypatch)


def _same(a: SimTrace, b: SimTrace) -> None:
    for f in dataclasses.fields(SimTrace):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=f.name)
            assert x.dtype == y.dtype, f.name
        else:
            assert x == y, f.name


def test_a_second_fit_reads_every_row_from_disk_and_fits_the_same(disk: Disk) -> None:
    catalog, rows = disk.catalog, disk.rows
    first = PerformanceModel(catalog, cache_dir=disk.directory).fit(rows)
    # the fitted rows that follow the clock: a rate's and the served closed loops' (their
    # replacements' turnaround), as their traces say and as the deployment says
    clocked = sum(s.time_driven for s in first.samples)
    assert clocked == sum(needs_clock(s.dep) for s in first.samples)
    assert 0 < clocked <= len(first.samples)
    assert len(disk.simulations) == len(rows) + clocked  # calibrate's round re-simulates clocked
    assert len(list(disk.directory.glob("sim-rows-*.npz"))) == 1

    disk.new_process()
    second = PerformanceModel(catalog, cache_dir=disk.directory).fit(rows)
    # only the clock-driven rows are simulated again: calibrate's second round, with the fit
    assert len(disk.simulations) == clocked
    assert first.fitted is not None and second.fitted is not None
    np.testing.assert_array_equal(first.fitted.theta0, second.fitted.theta0)
    np.testing.assert_array_equal(first.fitted.covariance, second.fitted.covariance)

    disk.new_process()
    fresh, _ = simulate_measured(rows, catalog)  # no disk
    disk.new_process()
    cached, _ = disk.simulate()
    assert len(fresh) == len(cached) > 15
    for a, b in zip(fresh, cached, strict=True):
        _same(a.trace, b.trace)


def test_an_added_row_is_the_only_one_simulated_and_written(disk: Disk) -> None:
    disk.simulate(disk.rows[:-1])
    (main,) = disk.directory.glob("sim-rows-*.npz")
    before = main.read_bytes()
    disk.new_process()
    disk.simulate()
    assert disk.simulations == [disk.rows[-1].model]
    # the new row went into a file of its own; the main file was not written again
    assert main.read_bytes() == before
    key = main.stem.removeprefix("sim-rows-")
    (added,) = sample_cache.added_files(disk.directory, key)
    assert len(sample_cache.load(disk.directory, key)) == len(disk.rows)
    with np.load(added, allow_pickle=False) as data:
        assert data["end"].shape[0] == 1
    # the two files hold both: a third process simulates nothing
    disk.new_process()
    samples, excluded = disk.simulate()
    assert disk.simulations == [] and len(samples) + len(excluded) == len(disk.rows)


def test_added_rows_are_merged_into_the_main_file_past_the_limit(
    disk: Disk, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sample_cache, "MAX_ADDED", 2)
    disk.simulate(disk.rows[:3])
    (main,) = disk.directory.glob("sim-rows-*.npz")
    key = main.stem.removeprefix("sim-rows-")
    for n in (4, 5):
        disk.new_process()
        disk.simulate(disk.rows[:n])
    assert len(sample_cache.added_files(disk.directory, key)) == 2
    disk.new_process()
    disk.simulate(disk.rows[:6])  # the third addition: everything into the main file
    assert sample_cache.added_files(disk.directory, key) == []
    assert len(sample_cache.load(disk.directory, key)) == 6
    disk.new_process()
    disk.simulate(disk.rows[:6])
    assert disk.simulations == []


def test_a_changed_row_is_simulated_again(disk: Disk) -> None:
    disk.simulate()
    changed = [*disk.rows[:-1], disk.rows[-1].model_copy(update={"max_num_seqs": 7})]
    disk.new_process()
    disk.simulate(changed)
    assert disk.simulations == [disk.rows[-1].model]


def test_another_catalog_does_not_read_the_rows(
    catalog: Catalog, rows: list[MeasuredResult], tmp_path: Path
) -> None:
    simulate_measured(rows, catalog, tmp_path)
    gpus = dict(catalog.gpus)
    gpus["L40S"] = gpus["L40S"].model_copy(
        update={"memory_bw_gbps": gpus["L40S"].memory_bw_gbps * 2}
    )
    other = dataclasses.replace(catalog, gpus=gpus)
    assert catalog_fingerprint(other) != catalog_fingerprint(catalog)
    key = sample_cache.cache_key(catalog_fingerprint(other))
    assert sample_cache.load(tmp_path, key) == {}


@pytest.mark.parametrize("damage", ["checksum", "truncated"])
def test_a_damaged_file_is_deleted_and_the_rows_simulated(disk: Disk, damage: str) -> None:
    five = disk.rows[:5]
    disk.simulate(five)
    (path,) = disk.directory.glob("sim-rows-*.npz")
    key = path.stem.removeprefix("sim-rows-")
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:200])
    else:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
        arrays["first"] = arrays["first"] * 2  # a changed number under the old checksum
        with path.open("wb") as handle:
            np.savez_compressed(handle, **arrays)
    assert sample_cache.load(disk.directory, key) == {}
    assert not path.exists()

    disk.new_process()
    disk.simulate(five)  # written again
    disk.new_process()
    disk.simulate(five)
    assert disk.simulations == []


def test_a_trace_with_a_timeline_is_not_kept(
    catalog: Catalog, rows: list[MeasuredResult], tmp_path: Path
) -> None:
    samples, _ = simulate_measured(rows[:2], catalog)
    with_timeline = dataclasses.replace(samples[1].trace, timeline_kv=np.ones(3))
    assert not sample_cache.cacheable(with_timeline)
    sample_cache.save(tmp_path, "k", {"a": samples[0].trace, "b": with_timeline})
    assert list(sample_cache.load(tmp_path, "k")) == ["a"]


def test_every_trace_field_is_stored_or_left_out_on_purpose() -> None:
    names = {f.name for f in dataclasses.fields(SimTrace)}
    assert names <= sample_cache.stored_fields()


def test_an_unwritable_directory_costs_only_the_cache(
    catalog: Catalog, rows: list[MeasuredResult], tmp_path: Path
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    samples, _ = simulate_measured(rows[:3], catalog, blocked)
    assert len(samples) == 3


def test_processes_fitting_at_once_simulate_each_part_once(
    disk: Disk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold cache's missing rows are dealt into parts; a process simulates the parts it
    claims first and reads the others' parts instead of simulating them too. Here another
    live process (this test's parent stands for it) holds two of four parts, which this test
    writes while the simulation waits for them, and a dead process's claim on a third is
    taken over."""
    monkeypatch.setattr(sample_cache, "COOPERATE_MIN", 8)
    monkeypatch.setattr(sample_cache, "PARTS", 4)
    catalog, rows, directory = disk.catalog, disk.rows, disk.directory
    reference, left_out = simulate_measured(rows, catalog)  # no disk: the same rows, alone
    traces = {s.result.model_dump_json(): s.trace for s in reference}
    traces.update({e.result.model_dump_json(): e.sample.trace for e in left_out if e.sample})
    assert len(traces) == len(rows)
    disk.new_process()

    key = sample_cache.cache_key(catalog_fingerprint(catalog))
    contents = [r.model_dump_json() for r in rows]
    parts = [contents[k::4] for k in range(4)]
    names = [sample_cache.part_name([sample_cache.row_key(c) for c in p]) for p in parts]
    claims = [directory / f"sim-claim-{key}-{name}" for name in names]
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    claims[1].write_text(str(os.getppid()))
    claims[2].write_text(gone.stdout.strip())
    claims[3].write_text(str(os.getppid()))

    done: list[tuple[list[FitSample], list[Excluded]]] = []
    worker = threading.Thread(target=lambda: done.append(disk.simulate()), daemon=True)
    worker.start()
    mine = [sample_cache.part_file(directory, key, names[k]) for k in (0, 2)]
    deadline = time.monotonic() + 600
    while not all(p.exists() for p in mine) and worker.is_alive():
        assert time.monotonic() < deadline, "parts 0 and 2 were never written"
        time.sleep(0.05)
    assert worker.is_alive() and not done  # waiting for the parts the other process holds
    assert sorted(disk.simulations) == sorted(r.model for r in [*rows[0::4], *rows[2::4]])
    for k in (1, 3):
        ours = {sample_cache.row_key(c): traces[c] for c in parts[k]}
        sample_cache.save_part(directory, key, names[k], ours)
        claims[k].unlink()
    worker.join(timeout=600)
    assert done and len(disk.simulations) == len(rows[0::4]) + len(rows[2::4])
    samples, excluded = done[0]
    assert [s.result for s in samples] == [s.result for s in reference]
    assert [e.reason for e in excluded] == [e.reason for e in left_out]
    for a, b in zip(samples, reference, strict=True):
        _same(a.trace, b.trace)
    assert not list(directory.glob("sim-claim-*"))
    # the four parts are the cache: a new process simulates nothing
    disk.new_process()
    again, _ = disk.simulate()
    assert disk.simulations == [] and len(again) == len(reference)


def test_a_row_added_after_a_simulation_in_parts_is_written_alone(
    disk: Disk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold simulation in parts leaves its parts and no main file; the next process's one
    new row (a verification run's refit) goes into a file of its own beside them, not every
    row into a main file."""
    monkeypatch.setattr(sample_cache, "COOPERATE_MIN", 8)
    monkeypatch.setattr(sample_cache, "PARTS", 4)
    monkeypatch.setattr(sample_cache, "MAX_ADDED", 6)
    rows, directory = disk.rows, disk.directory
    disk.simulate(rows[:-1])
    key = sample_cache.cache_key(catalog_fingerprint(disk.catalog))
    parts = sample_cache.added_files(directory, key)
    assert len(parts) == 4 and not sample_cache.cache_file(directory, key).exists()
    written = {p: p.read_bytes() for p in parts}
    disk.new_process()
    disk.simulate()
    assert disk.simulations == [rows[-1].model]
    assert not sample_cache.cache_file(directory, key).exists()
    now = sample_cache.added_files(directory, key)
    assert len(now) == 5 and all(p.read_bytes() == b for p, b in written.items())
    (added,) = set(now) - set(parts)
    with np.load(added, allow_pickle=False) as data:
        assert data["end"].shape[0] == 1
    # two more additions pass MAX_ADDED (parts counted): everything goes into the main file
    for extra in ({"max_num_seqs": 7}, {"max_num_seqs": 9}):
        disk.new_process()
        disk.simulate([*rows, rows[-1].model_copy(update=extra)])
    assert sample_cache.cache_file(directory, key).exists()
    assert sample_cache.added_files(directory, key) == []
    assert len(sample_cache.load(directory, key)) == len(rows) + 2


def test_the_roofline_baseline_is_simulated_once(disk: Disk) -> None:
    """``planner validate``'s baseline simulates the clock-driven rows with the roofline
    coefficients once; the next process reads them, and predicts the same."""
    from planner.perf.validation import roofline_predictions

    model = PerformanceModel(disk.catalog, cache_dir=disk.directory).fit(disk.rows)
    clocked = sum(s.time_driven for s in model.samples)
    assert clocked > 0
    disk.simulations.clear()
    first = model.roofline_predictions()
    assert len(disk.simulations) == clocked
    assert first == roofline_predictions(model.samples)  # simulating them here
    assert len(list(disk.directory.glob("sim-roofline-*.npz"))) == 1
    disk.new_process()
    assert model.roofline_predictions() == first
    assert disk.simulations == []
