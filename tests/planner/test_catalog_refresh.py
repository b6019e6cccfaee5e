"""Price refresh from SkyPilot catalog files: read, report, write to the user catalog, undo."""

from __future__ import annotations

import hashlib
import os
import shutil
from datetime import date
from pathlib import Path

import pytest

from planner.catalog import EMBEDDED_DATA_DIR, Catalog, load_catalog
from planner.catalog.refresh import (
    apply_refresh,
    list_refreshes,
    plan_refresh,
    plan_refresh_from_uploads,
    undo_refresh,
)
from planner.catalog.schema import Price
from planner.catalog.skypilot import find_vms_files, read_skypilot_vms
from planner.cli import main
from planner.errors import CatalogError, InvalidInputError
from planner.settings import get_settings

FIXTURES = Path(__file__).parent / "fixtures" / "skypilot"
SNAPSHOT = date(2026, 11, 30)


def _offers(catalog: Catalog, *providers: str) -> list:
    return [
        read_skypilot_vms(path, provider, catalog)
        for path, provider in find_vms_files(FIXTURES, providers)
    ]


def _digest(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def test_reads_skypilot_layouts_by_column_name(catalog: Catalog) -> None:
    aws, gcp, lam = (_offers(catalog, p)[0] for p in ("aws", "gcp", "lambda"))
    by_key = {(o.instance, o.region): o for o in aws.offers}
    # lowest price over the region's zones; the Local Zone (use1-atl2-az1, $5.00) is left out
    g6e = by_key[("g6e.12xlarge", "us-east-1")]
    assert (g6e.on_demand_usd, g6e.spot_usd, g6e.gpus, g6e.gpu_id) == (9.44338, 3.5, 4, "L40S")
    assert "g6f.large" in aws.skipped["a fraction of a GPU (L4 x 0.125)"]
    assert "g4dn.xlarge" in aws.skipped["accelerator 'T4' is not a GPU of the catalog"]
    assert not any(o.instance == "m5.large" for o in aws.offers)  # no GPU at all
    # GCP: host row + the accelerator row of the same zone = the embedded whole-VM price
    a2 = next(o for o in gcp.offers if o.instance == "a2-highgpu-1g")
    embedded = catalog.price("a2-highgpu-1g", "us-central1")
    assert a2.composed and a2.on_demand_usd == pytest.approx(embedded.usd_per_hour)
    assert a2.spot_usd == pytest.approx(0.36975 + 1.4341)  # cheapest zone's host + GPU
    # Lambda has no AvailabilityZone column; its A10 row keeps the catalog's A10G instance
    (a10,) = lam.offers
    assert (a10.instance, a10.gpu_id, a10.on_demand_usd, a10.spot_usd) == (
        "gpu_1x_a10",
        "A10G",
        1.49,
        None,
    )


def test_the_plan_reports_new_moved_confirmed_and_vanished_prices(catalog: Catalog) -> None:
    plan = plan_refresh(catalog, _offers(catalog, "aws"), SNAPSHOT)
    moved = {(c.instance, c.region, c.pricing): c for c in plan.moved}
    change = moved[("g6e.12xlarge", "us-east-1", "on_demand")]
    assert (change.old_usd, change.new_usd) == (10.49264, 9.44338)
    assert change.change_pct == pytest.approx(-10.0, abs=0.01)
    assert [(c.instance, c.region) for c in plan.small_moves] == [("g6e.12xlarge", "us-east-2")]
    assert ("g6e.xlarge", "us-east-1", "on_demand") in {
        (c.instance, c.region, c.pricing) for c in plan.confirmed
    }
    assert {(c.instance, c.region, c.pricing) for c in plan.new_prices} == {
        ("g6e.xlarge", "us-west-1", "on_demand"),
        ("g6e.xlarge", "us-west-1", "spot"),
        ("gr6.4xlarge", "us-east-1", "on_demand"),
        ("gr6.4xlarge", "us-east-1", "spot"),
    }
    (gr6,) = plan.new_instances
    assert (gr6.instance, gr6.gpu_id, gr6.gpus, gr6.gpu_link, gr6.as_of) == (
        "gr6.4xlarge",
        "L4",
        1,
        "none",
        SNAPSHOT,
    )
    removed = {(p.instance, p.region, p.pricing) for p in plan.removed}
    assert ("g6.xlarge", "us-east-1", "on_demand") in removed  # not in the file at all
    assert ("g6e.12xlarge", "eu-central-1", "on_demand") not in removed  # region not in file
    assert not any(catalog.instances[p.instance].provider != "aws" for p in plan.removed)
    # SkyPilot's files carry on-demand and spot prices only: the shipped 1-/3-year prices of
    # g6e in us-east-1 (a region the file covers) are not reported as vanished
    assert catalog.prices_for("g6e.12xlarge", region="us-east-1", pricing="reserved_1y")
    assert {p.pricing for p in plan.removed} <= {"on_demand", "spot"}
    # a higher threshold turns the -10% move into a small one
    lenient = plan_refresh(catalog, _offers(catalog, "aws"), SNAPSHOT, threshold_pct=20)
    assert not lenient.moved and len(lenient.small_moves) == len(plan.small_moves) + 2
    with pytest.raises(InvalidInputError, match="threshold_pct"):
        plan_refresh(catalog, [], SNAPSHOT, threshold_pct=-1)


def test_apply_writes_the_user_catalog_keeps_history_and_undo_restores(tmp_path: Path) -> None:
    embedded_before = _digest(EMBEDDED_DATA_DIR)
    user_dir = tmp_path / "catalog"
    user_dir.mkdir()
    negotiated = (
        "provider,instance,region,pricing,usd_per_hour,source,as_of\n"
        "aws,g6e.xlarge,us-east-1,on_demand,1.5,our negotiated rate,2026-10-01\n"
    )
    (user_dir / "prices.csv").write_text(negotiated, encoding="utf-8")
    catalog = load_catalog(user_dir=user_dir)
    own = [p for p in catalog.prices if p.source == "our negotiated rate"]
    plan = plan_refresh(catalog, _offers(catalog, "aws", "gcp"), SNAPSHOT, user_prices=own)
    assert [(p.instance, p.usd_per_hour) for p in plan.kept_user_prices] == [("g6e.xlarge", 1.5)]

    record = apply_refresh(user_dir, plan, catalog)
    refreshed = load_catalog(user_dir=user_dir)
    price = refreshed.price("g6e.12xlarge", "us-east-1")
    assert (price.usd_per_hour, price.as_of) == (9.44338, SNAPSHOT)
    assert price.source.startswith("SkyPilot catalog aws/vms.csv")
    assert refreshed.price("g6e.xlarge", "us-east-1").usd_per_hour == 1.5  # hand-set, kept
    assert refreshed.instance("gr6.4xlarge").gpu_id == "L4"
    history = refreshed.price_history_for("g6e.12xlarge", "us-east-1", "on_demand")
    assert [(p.usd_per_hour, p.as_of) for p in history] == [
        (10.49264, date(2026, 11, 29)),
        (9.44338, SNAPSHOT),
    ]
    assert {p.refresh_id for p in refreshed.price_history} == {record.refresh_id}
    assert _digest(EMBEDDED_DATA_DIR) == embedded_before  # data/ is never written
    assert [r.refresh_id for r in list_refreshes(user_dir)] == [record.refresh_id]

    undone = undo_refresh(user_dir)
    assert undone.refresh_id == record.refresh_id
    assert (user_dir / "prices.csv").read_text(encoding="utf-8") == negotiated
    assert not (user_dir / "instances.csv").exists()
    assert not (user_dir / "price_history.csv").exists()
    back = load_catalog(user_dir=user_dir)
    assert back.price("g6e.12xlarge", "us-east-1").usd_per_hour == 10.49264
    assert "gr6.4xlarge" not in back.instances and not back.price_history
    with pytest.raises(InvalidInputError, match="an applied refresh; none"):
        undo_refresh(user_dir)


def test_only_the_newest_refresh_can_be_undone(tmp_path: Path, catalog: Catalog) -> None:
    user_dir = tmp_path / "catalog"
    gcp = plan_refresh(catalog, _offers(catalog, "gcp"), SNAPSHOT)
    first = apply_refresh(user_dir, gcp, catalog)
    after_first = load_catalog(user_dir=user_dir)
    later = date(2026, 12, 1)
    second = apply_refresh(
        user_dir, plan_refresh(after_first, _offers(after_first, "lambda"), later), after_first
    )
    assert first.refresh_id != second.refresh_id
    with pytest.raises(InvalidInputError, match="undo that one first"):
        undo_refresh(user_dir, first.refresh_id)
    assert undo_refresh(user_dir).refresh_id == second.refresh_id
    assert undo_refresh(user_dir, first.refresh_id).refresh_id == first.refresh_id


def test_bad_files_name_the_file_row_and_column(tmp_path: Path, catalog: Catalog) -> None:
    missing = tmp_path / "aws" / "vms.csv"
    missing.parent.mkdir()
    missing.write_text("InstanceType,Price,Region\ng6e.xlarge,1.8,us-east-1\n", encoding="utf-8")
    with pytest.raises(CatalogError, match=r"field 'AcceleratorName': required column"):
        read_skypilot_vms(missing, "aws", catalog)
    bad = tmp_path / "gcp" / "vms.csv"
    bad.parent.mkdir()
    text = (FIXTURES / "aws" / "vms.csv").read_text(encoding="utf-8").replace("9.44338", "n/a", 1)
    bad.write_text(text, encoding="utf-8")
    with pytest.raises(CatalogError, match=r"vms\.csv, row 3, field 'Price': not a number"):
        read_skypilot_vms(bad, "aws", catalog)
    with pytest.raises(CatalogError, match="cannot tell which cloud"):
        find_vms_files(FIXTURES / "aws" / "vms.csv", ["aws", "gcp"])
    with pytest.raises(CatalogError, match="holds no SkyPilot"):
        find_vms_files(tmp_path, ["oci"])


def test_a_snapshot_over_the_size_setting_is_refused_by_its_own_name(
    tmp_path: Path, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVEWISE_MAX_PRICE_SNAPSHOT_MB", "0.001")  # 1,000 bytes
    get_settings.cache_clear()
    data = (FIXTURES / "aws" / "vms.csv").read_bytes()
    assert len(data) > 1000
    limit = r"vms\.csv: size.*at most 0\.001 MB \(the setting SERVEWISE_MAX_PRICE_SNAPSHOT_MB"
    with pytest.raises(InvalidInputError, match=limit):
        read_skypilot_vms(FIXTURES / "aws" / "vms.csv", "aws", catalog)
    with pytest.raises(InvalidInputError, match=r"my-aws-vms\.csv: size='0\.0\d+ MB'"):
        plan_refresh_from_uploads(tmp_path, [("my-aws-vms.csv", data, "aws")], catalog, SNAPSHOT)
    monkeypatch.delenv("SERVEWISE_MAX_PRICE_SNAPSHOT_MB")
    get_settings.cache_clear()
    assert plan_refresh_from_uploads(tmp_path, [("my-aws-vms.csv", data, "aws")], catalog, SNAPSHOT)


def test_refresh_command_reports_writes_and_undoes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], _isolated_user_dir: Path
) -> None:
    source = tmp_path / "skypilot"
    shutil.copytree(FIXTURES, source)
    stamp = 1796083200  # 2026-12-01 00:00 UTC: the file's date becomes the prices' as_of
    for path in source.rglob("vms.csv"):
        os.utime(path, (stamp, stamp))
    args = ["catalog", "refresh", "--skypilot-catalog", str(source), "--provider", "aws"]
    assert main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "Snapshot of 2026-12-01 (aws)" in out
    moved = "g6e.12xlarge us-east-1 on_demand: $10.4926 (as of 2026-11-29) -> $9.4434 (-10.0%)"
    assert moved in out
    assert "Dry run: nothing written." in out
    user_catalog = _isolated_user_dir / "catalog"
    assert not (user_catalog / "prices.csv").exists()
    assert main(args) == 0
    assert "Undo: python -m planner catalog refresh --undo" in capsys.readouterr().out
    price = load_catalog(user_dir=user_catalog).price("g6e.12xlarge", "us-east-1")
    assert (price.usd_per_hour, price.as_of) == (9.44338, date(2026, 12, 1))
    assert main(["catalog", "history", "--json"]) == 0
    assert '"usd_per_hour": 10.49264' in capsys.readouterr().out
    assert main(["catalog", "refresh", "--list"]) == 0
    assert "snapshot 2026-12-01" in capsys.readouterr().out
    assert main(["catalog", "refresh", "--undo"]) == 0
    assert load_catalog(user_dir=user_catalog).price("g6e.12xlarge", "us-east-1").usd_per_hour == (
        10.49264
    )
    assert main(["catalog", "refresh", "--skypilot-catalog", str(tmp_path / "none")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_a_price_is_stale_past_the_threshold() -> None:
    price = Price(
        provider="aws",
        instance="g6e.xlarge",
        region="us-east-1",
        pricing="on_demand",
        usd_per_hour=1.861,
        source="test",
        as_of=date(2026, 9, 1),
    )
    assert price.age_days(date(2026, 12, 1)) == 91
    assert price.is_stale(date(2026, 12, 1), 90) and not price.is_stale(date(2026, 11, 30), 90)
    assert price.age_days(date(2026, 8, 1)) == 0
