"""Diagnose page (AppTest): a run with preemptions lights the triage, its finding shows the
evidence, the chart, the fix and its what-if, and "Verify this fix" opens the Verify page on
the fixed plan; a run without findings says so; exports."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from streamlit.testing.v1 import AppTest

from pages.charts.diagnosis import finding_figure, what_if_figure
from pages.common.export import ExportSection, report_html
from planner.catalog import Catalog
from planner.diagnosis import diagnose, evidence_from_run
from planner.perf.model import PerformanceModel
from planner.run_files import read_run_dir
from tests.pages.conftest import KV_RUN, MODEL, frame_with, no_exception, write_kv_run

PAGE = "pages/diagnose.py"


def test_a_run_with_preemptions_lights_the_kv_branch_and_hands_the_fix_to_verify(
    app: Callable[..., AppTest], own_user_dir: Path
) -> None:
    write_kv_run(own_user_dir / "runs")
    at = app(PAGE, model=MODEL)
    no_exception(at)
    assert at.selectbox(key="dg_run").value.endswith(KV_RUN)
    triage = [m.value for m in at.markdown if "**" in m.value and "→" in m.value]
    assert len(triage) == 8  # six branches of the triage, speculative decoding, the P:D pools
    lit = [line for line in triage if line.startswith(":red[")]
    assert len(lit) == 1 and "Lots of preemptions?" in lit[0], triage
    assert "KV cache sized for the weights, not the traffic (**found**)" in lit[0]
    (expander,) = [e for e in at.expander if "KV cache sized" in e.label]
    assert "high" in expander.label and "at stake" in expander.label
    evidence = frame_with(at, "evidence", "value")
    assert evidence.set_index("evidence").loc["preemptions during the run", "value"] == 40
    commands = [c.value for c in at.code]
    assert any(c.startswith("vllm serve ... --") for c in commands), commands
    assert any("Predicted, same deployment and load:" in c.value for c in at.caption)
    # the fix's plan goes to the Verify page
    buttons = [b for b in at.button if b.key and b.key.startswith("dg_verify_kv_sizing")]
    assert buttons
    buttons[0].click().run()
    no_exception(at)
    assert at.segmented_control(key="vf_source").value == "Diagnosis"
    assert any("From the diagnosis:" in c.value for c in at.caption)
    # the fixed plan: the run's deployment with the fix's setting changed
    shown = [c.value for c in at.caption if c.value.startswith(f"{MODEL} on ")]
    assert shown and "H100-SXM" in shown[0], shown


def test_a_run_without_server_metrics_says_what_it_cannot_judge(
    app: Callable[..., AppTest],
) -> None:
    # the shared runs: 8 requests each, no server metrics, fixed lengths
    at = app(PAGE, model=MODEL)
    no_exception(at)
    assert [h.value for h in at.header][:2] == ["Quick triage", "Findings, by the money they cost"]
    assert "Cannot judge from this run" in [h.value for h in at.header]
    kv = [m.value for m in at.markdown if m.value.startswith("**KV cache sized")]
    assert kv and "vllm:num_preemptions_total" in kv[0]


def test_the_charts_and_the_html_export_of_a_diagnosis_are_self_contained(
    catalog: Catalog, tmp_path: Path
) -> None:
    write_kv_run(tmp_path)
    d = diagnose(
        evidence_from_run(read_run_dir(tmp_path / KV_RUN)), model=PerformanceModel(catalog)
    )
    kv = d.finding("kv_sizing")
    fig = finding_figure(kv.chart)
    names = {t.name for t in fig.data}
    assert {"KV cache usage", "requests waiting", "preemptions (cumulative)"} <= names
    assert fig.layout.yaxis2.title.text == "requests / preemptions"
    assert kv.what_if is not None
    bars = what_if_figure(kv.what_if)
    assert bars.data[0].y[0] == "output tok/s" and bars.data[0].x[0] > 1
    html = report_html("Servewise: Diagnose", [ExportSection(kv.title, figures=[fig])])
    assert not re.search(r"<script[^>]+src=", html)  # plotly.js inlined, nothing fetched
    assert "KV cache usage" in html and "Plotly.newPlot" in html


def test_an_endpoint_that_does_not_answer_is_a_notice_not_a_traceback(
    app: Callable[..., AppTest],
) -> None:
    at = app(PAGE, model=MODEL, dg_source="Endpoint")
    assert at.button(key="dg_watch").disabled
    at.text_input(key="dg_url").set_value("http://127.0.0.1:9").run()
    at.number_input(key="dg_seconds").set_value(5).run()
    at.button(key="dg_watch").click().run()
    no_exception(at)
    # the URL is quoted as text (md_text: "://" after a backslash, no autolink)
    assert any("Cannot watch http://127.0.0.1:9" in w.value.replace("\\", "") for w in at.warning)
    assert not at.error


def test_a_deployment_given_by_hand_is_the_plan_the_diagnosis_reads(
    app: Callable[..., AppTest], own_user_dir: Path
) -> None:
    """The run names no plan (an imported result): the deployment typed in on the page is a
    typed plan with the engine's settings on that GPU, read by the diagnosis."""
    write_kv_run(own_user_dir / "runs")
    at = app(PAGE, model=MODEL, dg_give_plan="true", dg_gpu="L40S", dg_tp="2")
    no_exception(at)
    assert at.toggle(key="dg_give_plan").value is True
