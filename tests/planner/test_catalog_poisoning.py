"""Numbers and names a catalog cannot hold, from a price refresh, an upload or a hand-edited
file: refused naming the file, the row and the field, and the catalog stays plannable.

Each case is one the reliability issue found (a SkyPilot price of inf or 1e308, an upload of
inf, 1e-300 or a NUL in a region, an AcceleratorCount of inf, nan or 1,000,000, two rows of
one price with different figures) or a fresh one of the same class.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from planner.catalog import EMBEDDED_DATA_DIR, Catalog, load_catalog
from planner.catalog.skypilot import read_skypilot_vms
from planner.catalog.user_files import (
    parse_model_config,
    save_staged,
    stage_table_upload,
    template_csv,
)
from planner.cli import main
from planner.errors import CatalogError

FIXTURES = Path(__file__).parent / "fixtures" / "skypilot"
#: the row of the AWS fixture the cases poison (its line 3), and the cell values it holds
AWS_ROW = "g6e.12xlarge,L40S,4.0,48.0,384.0"
AWS_PRICE = "9.44338"


def aws_file(tmp_path: Path, old: str, new: str) -> Path:
    """The AWS fixture with ``old`` replaced by ``new`` once (in the g6e.12xlarge row)."""
    text = (FIXTURES / "aws" / "vms.csv").read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "aws" / "vms.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        (AWS_PRICE, "inf", "Price"),
        (AWS_PRICE, "1e308", "Price"),
        (AWS_PRICE, "nan", "Price"),
        ("3.600000", "-inf", "SpotPrice"),
        (AWS_ROW, "g6e.12xlarge,L40S,inf,48.0,384.0", "AcceleratorCount"),
        (AWS_ROW, "g6e.12xlarge,L40S,nan,48.0,384.0", "AcceleratorCount"),
        (AWS_ROW, "g6e.12xlarge,L40S,1000000,48.0,384.0", "AcceleratorCount"),
        (",us-east-1,use1-az1", ",us-east\x00-1,use1-az1", "Region"),
    ],
)
def test_a_poisoned_skypilot_row_is_refused_by_file_row_and_field(
    tmp_path: Path, catalog: Catalog, old: str, new: str, field: str
) -> None:
    path = aws_file(tmp_path, old, new)
    with pytest.raises(CatalogError) as caught:
        read_skypilot_vms(path, "aws", catalog)
    message = str(caught.value)
    assert "vms.csv" in message and re.search(r"row \d+", message), message
    assert f"field '{field}'" in message, message


def test_the_refresh_command_refuses_a_poisoned_file_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], _isolated_user_dir: Path
) -> None:
    source = tmp_path / "skypilot"
    shutil.copytree(FIXTURES, source)
    aws_file(source, AWS_PRICE, "1e308")
    code = main(["catalog", "refresh", "--skypilot-catalog", str(source), "--provider", "aws"])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err
    assert "vms.csv, row 3, field 'Price'" in err and "1e308" in err, err
    assert not (_isolated_user_dir / "catalog" / "prices.csv").exists()


@pytest.mark.parametrize(
    ("threshold", "needle"),
    [("nan", "--threshold-pct=nan"), ("inf", "--threshold-pct=inf"), ("-1", "--threshold-pct=-1")],
)
def test_a_refresh_threshold_that_hides_moves_is_refused(
    capsys: pytest.CaptureFixture[str], threshold: str, needle: str
) -> None:
    args = ["catalog", "refresh", "--skypilot-catalog", str(FIXTURES), "--provider", "aws"]
    assert main([*args, "--threshold-pct", threshold, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert needle in err and "a finite number from 0 to 10,000" in err, err


def test_an_unknown_refresh_region_is_refused_with_the_known_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["catalog", "refresh", "--skypilot-catalog", str(FIXTURES), "--provider", "aws"]
    assert main([*args, "--region", "us-east-9", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "region" in err and "us-east-9" in err and "us-east-1" in err, err
    assert main([*args, "--region", "us-east-1", "--dry-run"]) == 0


PRICE_HEADER = template_csv("prices")
PRICE_ROW = "aws,g6e.xlarge,{region},on_demand,{usd},me,2026-11-30,\n"


@pytest.mark.parametrize(
    ("region", "usd", "field"),
    [
        ("us-east-1", "inf", "usd_per_hour"),
        ("us-east-1", "1e308", "usd_per_hour"),
        ("us-east-1", "1e-300", "usd_per_hour"),
        ("us-east-1", "nan", "usd_per_hour"),
        ("us-\x00east-1", "1.5", "region"),
    ],
)
def test_a_poisoned_price_upload_is_refused_and_the_catalog_still_plans(
    tmp_path: Path, catalog: Catalog, region: str, usd: str, field: str
) -> None:
    body = PRICE_HEADER + PRICE_ROW.format(region="us-east-1", usd="1.9")
    body += PRICE_ROW.format(region=region, usd=usd)
    with pytest.raises(CatalogError) as caught:
        stage_table_upload(tmp_path, "prices", body.encode(), "prices.csv", catalog)
    message = str(caught.value)
    assert "prices.csv, row 3" in message and f"field '{field}'" in message, message
    assert not (tmp_path / "prices.csv").exists()
    assert load_catalog(user_dir=tmp_path).price("g6e.xlarge", "us-east-1").usd_per_hour > 0.001


def test_duplicate_price_rows_that_disagree_are_refused_naming_both(
    tmp_path: Path, catalog: Catalog
) -> None:
    body = PRICE_HEADER + PRICE_ROW.format(region="us-east-1", usd="1.9")
    body += PRICE_ROW.format(region="us-west-2", usd="2.0")
    body += PRICE_ROW.format(region="us-east-1", usd="0.19")
    with pytest.raises(CatalogError) as caught:
        stage_table_upload(tmp_path, "prices", body.encode(), "prices.csv", catalog)
    message = str(caught.value)
    assert "row 4" in message and "row 2" in message and "usd_per_hour" in message, message
    assert "1.9" in message and "0.19" in message
    # the same row twice is one row
    same = PRICE_HEADER + PRICE_ROW.format(region="us-east-1", usd="1.9") * 2
    staged = stage_table_upload(tmp_path, "prices", same.encode(), "prices.csv", catalog)
    save_staged(tmp_path, staged)
    assert load_catalog(user_dir=tmp_path).price("g6e.xlarge", "us-east-1").usd_per_hour == 1.9


INSTANCE_ROW = "aws,g9.huge,L40S,{gpus},8,64,pcie,,25,me,2026-11-30,\n"


@pytest.mark.parametrize("gpus", ["inf", "nan", "1000000", "0"])
def test_an_instance_with_an_impossible_gpu_count_is_refused(
    tmp_path: Path, catalog: Catalog, gpus: str
) -> None:
    body = template_csv("instances") + INSTANCE_ROW.format(gpus=gpus)
    with pytest.raises(CatalogError, match=r"instances\.csv, row 2, field 'gpus'"):
        stage_table_upload(tmp_path, "instances", body.encode(), "instances.csv", catalog)


def test_a_hand_edited_price_of_inf_names_the_file_row_and_field(tmp_path: Path) -> None:
    """A prices.csv written before these checks (or by hand) is refused on load naming the
    row: the dashboard then plans on the embedded catalog and shows this message."""
    (tmp_path / "prices.csv").write_text(
        PRICE_HEADER + PRICE_ROW.format(region="us-east-1", usd="inf"), encoding="utf-8"
    )
    with pytest.raises(CatalogError, match=r"prices\.csv, row 2, field 'usd_per_hour'"):
        load_catalog(user_dir=tmp_path)


LLAMA_CONFIG = json.loads(
    (EMBEDDED_DATA_DIR / "models" / "meta-llama__Llama-3.1-8B-Instruct.json").read_text()
)


def config_bytes(**fields: object) -> bytes:
    body = {k: v for k, v in LLAMA_CONFIG.items() if k != "_servewise"} | fields
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("name", "data", "needles"),
    [
        ("conf\x00ig.json", config_bytes(), ("file name", "control characters")),
        ("deep.json", b"[" * 200_000 + b"]" * 200_000, ("nested too deep",)),
        ("deep2.json", b'{"a":' * 200_000 + b"1" + b"}" * 200_000, ("nested too deep",)),
        (
            "gqa.json",
            config_bytes(num_attention_heads=32, num_key_value_heads=5),
            ("num_key_value_heads", "must divide num_attention_heads (32)"),
        ),
        (
            "split.json",
            {**json.loads(config_bytes()), "head_dim": None},
            ("num_attention_heads",),
        ),
    ],
)
def test_a_config_upload_that_cannot_be_a_model_is_refused_by_name(
    name: str, data: bytes | dict[str, object], needles: tuple[str, ...]
) -> None:
    if isinstance(data, dict):  # no head_dim, and a hidden size the heads do not split
        data = json.dumps(
            {k: v for k, v in data.items() if k != "head_dim"} | {"hidden_size": 4100}
        ).encode()
    with pytest.raises(CatalogError) as caught:
        parse_model_config(data, name)
    for needle in needles:
        assert needle in str(caught.value), caught.value


def test_every_embedded_model_passes_the_head_checks(catalog: Catalog) -> None:
    assert len(catalog.models) > 10  # the checks refuse none of the published configs
