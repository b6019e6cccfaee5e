"""Credentials never persist: a marker API key, a marker credential header and marker URL
credentials appear 0 times in any artefact, with servers that echo every request header back.

Artefacts grepped: every file of the user data directory (run files, the DuckDB file and its
WAL, uploads), what the command line printed (its log), the Python log records of the
dashboard, the runs CSV and HTML exports built by the Benchmarks page's own functions from the
store, and the Verify page's URL (query string).
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pages.common.export import ExportSection, csv_text, report_html
from pages.common.runs import runs_side_by_side
from planner.store import Store
from tests.patience import PATIENT_S
from tests.reliability.conftest import (
    MARKER_KEY,
    URL_PASSWORD,
    URL_USER,
    FaultServer,
    clean_env,
    no_traceback,
    run_cli,
    runner_args,
)

HEADER_SECRET = "hdr-MARKER-55e1c0ffee"
#: Every form a secret could take once written: as given, inside the basic-auth header, and
#: base64-encoded as that header sends it.
MARKERS = (
    MARKER_KEY,
    HEADER_SECRET,
    URL_PASSWORD,
    f"{URL_USER}:{URL_PASSWORD}",
    base64.b64encode(f"{URL_USER}:{URL_PASSWORD}".encode()).decode(),
)


def hits(blobs: Iterable[tuple[str, bytes]]) -> list[str]:
    """``where: marker`` for every marker found in any blob."""
    found = []
    for where, data in blobs:
        for marker in MARKERS:
            if marker.encode() in data:
                found.append(f"{where}: {marker}")
    return found


def files_under(root: Path) -> list[tuple[str, bytes]]:
    return [(str(p.relative_to(root)), p.read_bytes()) for p in root.rglob("*") if p.is_file()]


def exports(store: Store) -> list[tuple[str, bytes]]:
    """The Benchmarks page's runs CSV and HTML report, from the store as the page builds them."""
    runs = store.runs()
    table = runs_side_by_side(runs, [str(r) for r in runs["run_id"]]).reset_index()
    html = report_html("Servewise: Benchmarks", [ExportSection("Runs side by side", table=table)])
    return [("runs.csv", csv_text(table).encode()), ("report.html", html.encode())]


def store_blobs(user_dir: Path) -> list[tuple[str, bytes]]:
    """Ingest the runs into the DuckDB file; the file and its WAL while open, and after."""
    db = user_dir / "servewise.duckdb"
    store = Store(db)
    try:
        store.ingest_runs(user_dir / "runs")
        assert not store.runs().empty
        blobs = [(p.name, p.read_bytes()) for p in db.parent.glob("servewise.duckdb*")]
        blobs += exports(store)
    finally:
        store.close()
    return blobs + [(p.name, p.read_bytes()) for p in db.parent.glob("servewise.duckdb*")]


def test_the_command_line_writes_no_secret_anywhere(
    fault_server: Callable[..., FaultServer], tmp_path: Path
) -> None:
    user_dir = tmp_path / "user"
    env = clean_env(SERVEWISE_USER_DATA_DIR=str(user_dir), SW_MARKER_KEY=MARKER_KEY)
    logs: list[tuple[str, bytes]] = []

    def run(server: FaultServer, base_url: str, *extra: str) -> None:
        args = runner_args(base_url, user_dir / "runs", *extra, requests=12)
        proc = run_cli("benchmarks_runner", *args, env=env)
        no_traceback(proc)
        logs.append((f"{server.proc.args} stdout+stderr", (proc.stdout + proc.stderr).encode()))

    echo = fault_server("echo", "--every", "2")  # 500 with every header, /metrics echoes too
    run(
        echo,
        echo.base_url,
        "--api-key-env",
        "SW_MARKER_KEY",
        "--header",
        f"X-Api-Key={HEADER_SECRET}",
    )
    stream = fault_server("echo-stream", "--every", "3")  # an SSE error event with the headers
    with_user = stream.base_url.replace("://", f"://{URL_USER}:{URL_PASSWORD}@")
    run(stream, with_user)
    run(stream, with_user, "--api-key-env", "SW_MARKER_KEY")  # refused: one or the other

    runs = [p for p in (user_dir / "runs").iterdir() if (p / "run.json").is_file()]
    assert len(runs) == 2
    blobs = files_under(user_dir) + store_blobs(user_dir) + logs
    assert not hits(blobs), hits(blobs)
    # the echoing servers did see the credentials (the test would prove nothing otherwise)
    echoed = [r for d in runs for r in (d / "requests.jsonl").read_text().splitlines()]
    assert any("<redacted>" in line for line in echoed)


def _wait_for_run_end(
    at: AppTest, runs_dir: Path, count: int, timeout_s: float = PATIENT_S
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = [
            d
            for d in runs_dir.glob("*")
            if (d / "run.json").is_file() and '"running"' not in (d / "run.json").read_text()
        ]
        if len(done) >= count:
            at.run()
            return
        time.sleep(0.5)
        at.run()
    raise AssertionError(f"fewer than {count} runs ended in {timeout_s} s")


def test_the_verify_page_keeps_credentials_out_of_its_link_and_every_artefact(
    app: Callable[..., AppTest],
    fault_server: Callable[..., FaultServer],
    caplog: pytest.LogCaptureFixture,
    _isolated_user_dir: Path,
) -> None:
    caplog.set_level(logging.DEBUG)
    user_dir = _isolated_user_dir
    echo = fault_server("echo", "--every", "2")
    with_user = echo.base_url.replace("://", f"://{URL_USER}:{URL_PASSWORD}@")
    small = {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "vf_source": "Custom",
        "vf_gpu": "H100-SXM",
        "vf_in": "64",
        "vf_out": "4",
        "vf_c": "2",
        "vf_n": "8",
        "vf_endpoint": "URL",
    }
    # A shared link that carries credentials: they are dropped, the host is kept.
    at = app("pages/verify.py", **small, vf_url=with_user)
    assert at.text_input(key="vf_url").value == echo.base_url
    urls: list[tuple[str, bytes]] = [("link as loaded", str(at.query_params).encode())]

    # Typed in the field, with the API key: refused (only one can be the Authorization
    # header), and the link never holds them.
    at.text_input(key="vf_served").set_value("fault-model")
    at.text_input(key="vf_url").set_value(with_user)
    at.text_input(key="vf_key").set_value(MARKER_KEY).run()
    urls.append(("link with credentials typed", str(at.query_params).encode()))
    at.button(key="vf_run").click().run()
    assert any("The run cannot start" in w.value for w in at.warning) and not at.exception

    # The URL's credentials alone, then the API key alone: two runs against the echo server.
    at.text_input(key="vf_key").set_value("").run()
    at.button(key="vf_run").click().run()
    _wait_for_run_end(at, user_dir / "runs", 1)
    at.text_input(key="vf_url").set_value(echo.base_url)
    at.text_input(key="vf_key").set_value(MARKER_KEY).run()
    at.button(key="vf_run").click().run()
    _wait_for_run_end(at, user_dir / "runs", 2)
    assert not at.exception
    urls.append(("link after the runs", str(at.query_params).encode()))
    text = [str(e.value) for e in [*at.markdown, *at.caption, *at.warning, *at.error]]
    shown = [("page text", " ".join(text).encode())]
    logged = [("python log", caplog.text.encode())]

    blobs = files_under(user_dir) + store_blobs(user_dir) + urls + shown + logged
    assert not hits(blobs), hits(blobs)
    assert str(at.query_params).count("vf_url") <= 1
