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
from tests.pages.conftest import KV_RUN, ROOT, no_exception, write_kv_run

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


# ----- every message class that quotes a user's string ------------------------------------
#: a link, bold and HTML: each would render if a message quoted it as Markdown
HOSTILE = ["[x](http://evil.test)", "**b**", "<script>alert(1)</script>"]
SHOWN_AS_MARKUP = re.compile(r"(?<!\\)\]\(|(?<!\\)://evil|(?<!\\)\*\*b|(?<!\\)<script")


def _messages(at: AppTest) -> list[str]:
    elements = [*at.markdown, *at.caption, *at.warning, *at.info, *at.error, *at.success]
    return [str(e.value) for e in elements] + [str(t.value) for t in at.toast]


def _quoting(at: AppTest, needle: str) -> list[str]:
    quoting = [m for m in _messages(at) if needle in m.replace("\\", "")]
    assert quoting, _messages(at)  # the page does say it
    for message in quoting:
        assert not SHOWN_AS_MARKUP.search(message), message
    return quoting


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_typed_base_url_that_is_refused_is_quoted_as_text(
    app: Callable[..., AppTest], own_user_dir: Path, hostile: str
) -> None:
    """The refusal quotes what was typed (Verify and Diagnose pages)."""
    typed = f"http://127.0.0.1:9/v1?{hostile}"
    at = app(
        "pages/verify.py",
        model="meta-llama/Llama-3.1-8B-Instruct",
        vf_source="Custom",
        vf_gpu="H100-SXM",
        vf_endpoint="URL",
    )
    at.text_input(key="vf_url").set_value(typed).run()
    no_exception(at)
    assert at.button(key="vf_run").disabled
    _quoting(at, hostile.replace("\\", ""))
    at = app("pages/diagnose.py", model="meta-llama/Llama-3.1-8B-Instruct", dg_source="Endpoint")
    at.text_input(key="dg_url").set_value(typed).run()
    no_exception(at)
    _quoting(at, hostile)


@pytest.mark.parametrize("hostile", HOSTILE)
def test_an_uploads_name_is_quoted_as_text(
    app: Callable[..., AppTest], own_user_dir: Path, hostile: str
) -> None:
    """A CSV upload's file name, in the refusal and in the success message (Data page)."""
    at = app("pages/data.py")
    at.selectbox(key="data_table").set_value("prices").run()
    at.file_uploader(key="csv_upload").upload(f"{hostile}.csv", b"gpu,price\nL4,1\n", "text/csv")
    at.run()
    no_exception(at)
    _quoting(at, f"{hostile}.csv")
    good = (
        b"provider,instance,region,pricing,usd_per_hour,source,as_of\n"
        b"aws,g6e.12xlarge,us-east-1,on_demand,7.5,negotiated rate (test),2026-11-01\n"
    )
    at.file_uploader(key="csv_upload").upload(f"{hostile}.csv", good, "text/csv")
    at.run()
    no_exception(at)
    assert any("is valid" in s.value for s in at.success)
    _quoting(at, f"{hostile}.csv")


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_hand_edited_catalog_files_strings_are_quoted_as_text(
    app: Callable[..., AppTest], own_user_dir: Path, hostile: str
) -> None:
    """What loading the user's catalog says: a measured row left out (the Data page's notes),
    and a price file that cannot be used (every page's error)."""
    catalog_dir = own_user_dir / "catalog"
    catalog_dir.mkdir()
    embedded = (ROOT / "data" / "measured_results.csv").read_text(encoding="utf-8").splitlines()
    header = embedded[0].split(",")
    row = dict.fromkeys(header, "")
    row |= {
        "source": "ours", "engine": "vllm", "model": "m", "precision": "bf16", "gpu": "L4",
        "num_gpus": "1", "tp": "1", "pp": "1", "input_len": "8", "output_len": "8",
        "load": "concurrency", "concurrency": hostile,
    }  # fmt: skip
    (catalog_dir / "measured_results.csv").write_text(
        ",".join(header) + "\n" + ",".join(f'"{row[c]}"' for c in header) + "\n",
        encoding="utf-8",
    )
    at = app("pages/data.py")
    (notes,) = [w.value for w in at.warning if "rows left out" in w.value]  # the Data page's
    assert "concurrency" in notes and not SHOWN_AS_MARKUP.search(notes), notes
    assert hostile in notes.replace("\\", "")
    (catalog_dir / "measured_results.csv").unlink()
    prices = (ROOT / "data" / "prices.csv").read_text(encoding="utf-8").splitlines()
    first = prices[1].split(",")
    rows = [",".join([*first[:2], hostile, first[3], usd, *first[5:]]) for usd in ("7.5", "1.5")]
    (catalog_dir / "prices.csv").write_text("\n".join([prices[0], *rows]) + "\n", "utf-8")
    at = app("pages/data.py")
    errors = [e.value for e in at.error if "could not be read" in e.value]
    assert errors, [e.value for e in at.error]
    for error in errors:  # once a call of the catalog: the sidebar's and the page's
        assert "disagree" in error and not SHOWN_AS_MARKUP.search(error), error
        assert hostile in error.replace("\\", "")
