"""Plan page with disaggregated prefill/decode on (issue 25): the sidebar's control, set from
the URL, ranks pools only, and the headline names them; auto ranks both kinds and draws where
the split starts to pay."""

from __future__ import annotations

from collections.abc import Callable

from streamlit.testing.v1 import AppTest

from pages.charts.disaggregation import AGGREGATED, DISAGGREGATED
from tests.pages.conftest import frame_with, no_exception


def test_disaggregation_on_ranks_pools_and_auto_draws_where_they_pay(
    app: Callable[..., AppTest],
) -> None:
    at = app(
        model="deepseek-ai/DeepSeek-R1-0528",
        precision="fp8",
        load="rate",
        avg_rate="100",
        peak_rate="100",
        ttft_ms="2000",
        tpot_ms="30",
        providers="aws",
        disaggregation="on",
    )
    no_exception(at)
    assert at.selectbox(key="disaggregation").value == "on"
    ranking = frame_with(at, "rank", "label", "usd_per_million_output_tokens")
    assert len(ranking) >= 1
    assert ranking["label"].str.startswith("prefill ").all(), ranking["label"].tolist()
    assert (ranking["pred_tpot_ms_p99"] <= 30).all()
    assert (ranking["pred_ttft_ms_p99"] <= 2000).all()
    headline = [h.value for h in at.subheader if "disaggregated:" in h.value]
    assert headline and "decode" in headline[0]
    # the Deploy section deploys the best plan as its pools
    targets = at.button_group(key="deploy_pools_target")
    assert list(targets.options) == ["Prefill/decode commands", "NVIDIA Dynamo", "llm-d (Helm)"]
    assert any("--kv-transfer-config" in c.value and "--port 8200" in c.value for c in at.code)

    # auto ranks both kinds; the closed section sends nothing, opened it draws where the
    # split starts to pay (five loads, the searches' capacities reused)
    at.selectbox(key="disaggregation").set_value("auto").run()
    no_exception(at)
    labels = frame_with(at, "rank", "label", "usd_per_million_output_tokens")["label"]
    assert labels.str.startswith("prefill ").any() and not labels.str.startswith("prefill ").all()
    specs = [c.proto.spec for c in at.get("plotly_chart")]
    assert not any(DISAGGREGATED in spec for spec in specs)
    at.session_state["open_disaggregation"] = True
    at.run()
    no_exception(at)
    chart = next(c.proto.spec for c in at.get("plotly_chart") if DISAGGREGATED in c.proto.spec)
    assert AGGREGATED in chart and "against load" in chart
