"""User strings (served model names, link values, file names) are shown as text on the pages:
a Markdown link, bold or HTML in them is never rendered (``pages.common.ui.md_text``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pages.common.ui import md_text
from tests.pages.conftest import KV_RUN, no_exception, write_kv_run

PHISH = "[Session expired: log in again](http://e.test/login)"
#: a Markdown link, an autolink, emphasis, HTML: what an unescaped string would render
RENDERED = re.compile(r"(?<!\\)\]\(|(?<!\\)://|(?<!\\)\*\*x|(?<!\\)<b>")


@pytest.mark.parametrize(
    "hostile",
    [PHISH, "**x** <b>y</b>", "see http://e.test or www.e.test", ":red[alarm] :material/home:"],
)
def test_md_text_leaves_nothing_a_markdown_renderer_would_turn_into_markup(hostile: str) -> None:
    shown = md_text(hostile + "\nnext line")
    assert not RENDERED.search(shown), shown
    assert "\n" not in shown and "www." not in shown and ":red[" not in shown
    # every character is still there, in order (only backslashes were added)
    assert shown.replace("\\", "") == (hostile + " next line").replace("\\", "")


def test_a_served_model_name_on_the_diagnose_page_is_text(
    app: Callable[..., AppTest], own_user_dir: Path
) -> None:
    write_kv_run(own_user_dir / "runs")
    meta_path = own_user_dir / "runs" / KV_RUN / "run.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta["plan"]["model"] = PHISH
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    at = app("pages/diagnose.py")
    no_exception(at)
    texts = [e.value for e in [*at.markdown, *at.caption, *at.warning, *at.info, *at.error]]
    quoting = [t for t in texts if "Session expired" in t]
    assert quoting, texts  # the page does show the name
    for text in quoting:
        assert not RENDERED.search(text), text


def test_a_links_value_in_the_notice_is_text(app: Callable[..., AppTest]) -> None:
    at = app("pages/data.py", model=PHISH)
    no_exception(at)
    (notice,) = [w.value for w in at.warning if "URL parameter model=" in w.value]
    assert "Session expired" in notice and not RENDERED.search(notice), notice
