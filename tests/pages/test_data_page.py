"""Data page: catalog tables with sources and dates; user CSVs and config.json imports."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date
from pathlib import Path

from streamlit.testing.v1 import AppTest

from tests.pages.conftest import frame_with, no_exception

PAGE = "pages/data.py"

GOOD_PRICE_CSV = (
    b"provider,instance,region,pricing,usd_per_hour,source,as_of\n"
    b"aws,g6e.12xlarge,us-east-1,on_demand,7.5,negotiated rate (test),2026-11-01\n"
)


def _tab_labels(at: AppTest) -> list[str]:
    return [tab.label for tab in at.tabs]


def test_default_shows_every_catalog_table_with_sources(app: Callable[..., AppTest]) -> None:
    at = app(PAGE)
    labels = _tab_labels(at)
    assert any(label.startswith("GPUs (") for label in labels)
    assert any(label.startswith("Prices (") for label in labels)
    gpus = frame_with(at, "gpu_id", "memory_gb")
    assert {"gpu_id", "source", "as_of"} <= set(gpus.columns)
    assert "L40S" in set(gpus["gpu_id"])
    assert gpus["source"].str.len().min() > 0


def test_a_csv_with_wrong_columns_says_so_and_the_page_keeps_working(
    app: Callable[..., AppTest], own_user_dir: Path
) -> None:
    at = app(PAGE)
    at.selectbox(key="data_table").set_value("prices").run()
    at.file_uploader(key="csv_upload").upload("mine.csv", b"gpu,price\nL4,1\n", "text/csv")
    at.run()
    no_exception(at)
    notices = " ".join(e.value for e in at.warning)
    assert "mine.csv" in notices and "missing" in notices and not at.error
    assert frame_with(at, "gpu_id", "memory_gb").shape[0] > 10  # the rest of the page is there


def test_a_valid_price_csv_overrides_the_embedded_price(
    app: Callable[..., AppTest], own_user_dir: Path
) -> None:
    at = app(PAGE)
    at.selectbox(key="data_table").set_value("prices").run()
    at.file_uploader(key="csv_upload").upload("rates.csv", GOOD_PRICE_CSV, "text/csv")
    at.run()
    assert any("1 replaced" in s.value for s in at.success)
    at.button(key="save_csv").click().run()
    no_exception(at)
    saved = (own_user_dir / "catalog" / "prices.csv").read_text()
    assert "negotiated rate (test)" in saved
    prices = frame_with(at, "instance", "region", "usd_per_hour")
    row = prices[
        (prices["instance"] == "g6e.12xlarge")
        & (prices["region"] == "us-east-1")
        & (prices["pricing"] == "on_demand")
    ]
    assert row["usd_per_hour"].tolist() == [7.5]


def test_an_unparseable_config_json_is_refused_with_a_message(
    app: Callable[..., AppTest], own_user_dir: Path
) -> None:
    at = app(PAGE)
    at.file_uploader(key="config_upload").upload("config.json", b"{not json", "application/json")
    at.run()
    no_exception(at)
    assert any("config.json" in e.value and "JSON" in e.value for e in at.warning)
    assert not at.error
    assert not (own_user_dir / "catalog" / "models").exists()


def test_a_config_json_is_imported_into_the_catalog(
    app: Callable[..., AppTest], own_user_dir: Path
) -> None:
    config = {
        "model_type": "llama",
        "hidden_size": 2048,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 8192,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
    }
    at = app(PAGE)
    at.text_input(key="config_hf_id").input("acme/tiny-llama")
    at.file_uploader(key="config_upload").upload(
        "config.json", json.dumps(config).encode(), "application/json"
    )
    at.run()
    assert any("acme/tiny-llama" in s.value and "16 layers" in s.value for s in at.success)
    at.button(key="save_model").click().run()
    no_exception(at)
    assert (own_user_dir / "catalog" / "models" / "acme__tiny-llama.json").exists()
    models = frame_with(at, "hf_id", "kv_bytes_per_token_bf16")
    assert "acme/tiny-llama" in set(models["hf_id"])


SKYPILOT_AWS = Path(__file__).resolve().parents[1] / "planner" / "fixtures" / "skypilot" / "aws"


def _price(at: AppTest, instance: str, region: str, pricing: str = "on_demand") -> dict:
    prices = frame_with(at, "instance", "region", "usd_per_hour", "age_days")
    row = prices[
        (prices["instance"] == instance)
        & (prices["region"] == region)
        & (prices["pricing"] == pricing)
    ]
    assert len(row) == 1
    return row.iloc[0].to_dict()


def test_prices_show_their_age_and_a_stale_badge_past_the_setting(
    app: Callable[..., AppTest],
) -> None:
    at = app(PAGE)
    row = _price(at, "g6e.12xlarge", "us-east-1")
    assert row["age_days"] >= 0 and "stale" in row
    # embedded prices are dated 2026-11-29 or later: a 1-day threshold marks them stale
    at.number_input(key="stale_days").set_value(1).run()
    no_exception(at)
    assert any("prices older than 1 days" in m.value for m in at.markdown)


def test_a_skypilot_upload_refreshes_prices_with_their_date_and_can_be_undone(
    app: Callable[..., AppTest], own_user_dir: Path
) -> None:
    at = app(PAGE)
    at.file_uploader(key="skypilot_upload").upload(
        "vms.csv", (SKYPILOT_AWS / "vms.csv").read_bytes(), "text/csv"
    )
    at.selectbox(key="skypilot_cloud").set_value("aws")
    at.date_input(key="skypilot_as_of").set_value(date(2026, 11, 30)).run()
    no_exception(at)
    assert any("moved by more than 5%" in i.value for i in at.info)
    changes = frame_with(at, "change", "old_usd_per_hour", "new_usd_per_hour")
    moved = changes[(changes["instance"] == "g6e.12xlarge") & (changes["region"] == "us-east-1")]
    assert set(moved["change"]) == {"moved"}
    assert _price(at, "g6e.12xlarge", "us-east-1")["usd_per_hour"] == 10.49264  # not yet
    at.button(key="apply_refresh").click().run()
    no_exception(at)
    row = _price(at, "g6e.12xlarge", "us-east-1")
    assert (row["usd_per_hour"], row["as_of"]) == (9.44338, "2026-11-30")
    history = frame_with(at, "superseded_on", "refresh_id")
    assert 10.49264 in set(history["usd_per_hour"])
    assert (own_user_dir / "catalog" / "prices.csv").exists()
    at.button(key="undo_refresh").click().run()
    no_exception(at)
    assert _price(at, "g6e.12xlarge", "us-east-1")["usd_per_hour"] == 10.49264


def test_an_owned_server_row_is_saved_as_the_users_and_survives_a_restart(
    app: Callable[..., AppTest], own_user_dir: Path
) -> None:
    embedded = (Path(__file__).resolve().parents[2] / "data" / "owned_costs.csv").read_text()
    header, first = embedded.splitlines()[:2]
    assert first.startswith("hgx-h100-8,")
    mine = first.replace(",317000,", ",250000,", 1)
    at = app(PAGE)
    owned = frame_with(at, "platform", "server_usd", "power_max_kw")
    assert set(owned["origin"]) == {"embedded"} and owned["source"].str.len().min() > 0
    at.selectbox(key="data_table").set_value("owned").run()
    bad = f"{header}\n{mine.replace(',1.58,', ',0.5,', 1)}\n".encode()
    at.file_uploader(key="csv_upload").upload("ours.csv", bad, "text/csv")
    at.run()
    assert "pue" in " ".join(e.value for e in at.warning)  # the same validation as prices
    at.file_uploader(key="csv_upload").upload(
        "ours.csv", f"{header}\n{mine}\n".encode(), "text/csv"
    )
    at.run()
    assert any("1 replaced" in s.value for s in at.success)
    at.button(key="save_csv").click().run()
    no_exception(at)
    assert (own_user_dir / "catalog" / "owned_costs.csv").exists()
    restarted = app(PAGE)  # a new session reads the user's file again
    owned = frame_with(restarted, "platform", "server_usd", "power_max_kw").set_index("platform")
    assert owned.loc["hgx-h100-8", "origin"] == "user"
    assert owned.loc["hgx-h100-8", "server_usd"] == 250_000
    prices = frame_with(restarted, "instance", "region", "usd_per_hour").set_index("instance")
    assert "your own" in prices.loc["owned-hgx-h100-8", "source"]
