"""A config.json upload that cannot be a model (a NUL in the id that names its file, nesting
200,000 deep, head counts no transformer has) is a notice naming the problem on the page, never
an exception. (A NUL in the uploaded file's own name is refused by Streamlit's uploader before
any page code runs; ``planner.catalog.user_files.parse_model_config`` refuses it too.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.pages.conftest import own_user_dir  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
LLAMA = json.loads((ROOT / "data/models/meta-llama__Llama-3.1-8B-Instruct.json").read_text())
BODY = {k: v for k, v in LLAMA.items() if k != "_servewise"}

UPLOADS = {
    # the id typed next to the upload names the saved file
    "a NUL in its id": ("config.json", json.dumps(BODY).encode(), "org/mo\x00del", "control"),
    "200,000 deep": ("deep.json", b"[" * 200_000 + b"]" * 200_000, "", "nested too deep"),
    "KV heads that do not divide the heads": (
        "gqa.json",
        json.dumps(BODY | {"num_key_value_heads": 5}).encode(),
        "",
        "must divide num_attention_heads",
    ),
}


@pytest.mark.parametrize("case", list(UPLOADS))
def test_a_config_that_cannot_be_a_model_is_a_notice(
    app: Callable[..., AppTest],
    own_user_dir: Path,  # noqa: F811
    case: str,
) -> None:
    name, data, hf_id, needle = UPLOADS[case]
    at = app("pages/data.py")
    at.text_input(key="config_hf_id").set_value(hf_id)
    at.file_uploader(key="config_upload").upload(name, data, "application/json")
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.exception]
    shown = " ".join(w.value for w in at.warning)
    assert needle in shown, shown
    assert not [b for b in at.button if b.key == "save_model"]  # nothing to save
    # the sidebar's own upload (this session's model) says the same
    at.file_uploader(key="model_upload").upload(name, data, "application/json")
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.exception]
    if not hf_id:
        assert needle in " ".join(w.value for w in at.warning)
