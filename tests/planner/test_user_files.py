"""A user's catalog additions: staged, validated against the whole catalog, then written."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.catalog import Catalog, load_catalog
from planner.catalog.user_files import (
    parse_model_config,
    save_model_config,
    save_staged,
    stage_table_upload,
    template_csv,
)
from planner.errors import CatalogError

PRICE = (
    "provider,instance,region,pricing,usd_per_hour,source,as_of\n"
    "aws,g6e.12xlarge,us-east-1,on_demand,7.5,our negotiated rate,2026-11-01\n"
)


def test_a_price_upload_overrides_the_list_price_once_saved(
    tmp_path: Path, catalog: Catalog
) -> None:
    user_dir = tmp_path / "catalog"
    staged = stage_table_upload(user_dir, "prices", PRICE.encode(), "ours.csv", catalog)
    assert (staged.added, staged.replaced) == (0, 1)
    assert not (user_dir / "prices.csv").exists()  # nothing written before saving
    save_staged(user_dir, staged)
    reloaded = load_catalog(user_dir=user_dir)
    assert reloaded.price("g6e.12xlarge", "us-east-1").usd_per_hour == 7.5
    assert template_csv("prices").startswith("provider,instance,region,pricing,usd_per_hour")


def test_uploads_that_do_not_fit_name_the_file_row_and_field(
    tmp_path: Path, catalog: Catalog
) -> None:
    user_dir = tmp_path / "catalog"
    with pytest.raises(CatalogError, match=r"wrong\.csv, row 1, field 'source': required column"):
        stage_table_upload(user_dir, "prices", b"provider,instance\naws,x\n", "wrong.csv", catalog)
    unknown = PRICE.replace("g6e.12xlarge", "g9.huge")
    with pytest.raises(CatalogError, match=r"unknown\.csv: does not fit the catalog"):
        stage_table_upload(user_dir, "prices", unknown.encode(), "unknown.csv", catalog)
    with pytest.raises(CatalogError, match="empty"):
        stage_table_upload(user_dir, "prices", b"  ", "empty.csv", catalog)


def test_a_config_json_upload_becomes_a_user_model(tmp_path: Path) -> None:
    data = (
        b'{"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192,'
        b' "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,'
        b' "vocab_size": 128256}'
    )
    config, card = parse_model_config(data, "config.json", hf_id="acme/tiny")
    assert card.hf_id == "acme/tiny" and card.origin == "user"
    save_model_config(tmp_path / "catalog", config, card)
    assert load_catalog(user_dir=tmp_path / "catalog").model("ACME/tiny").origin == "user"
    with pytest.raises(CatalogError, match=r"config\.json, row 1: not valid JSON"):
        parse_model_config(b"{oops", "config.json")
