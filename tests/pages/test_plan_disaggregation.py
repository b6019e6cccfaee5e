"""Plan page with disaggregated prefill/decode on (issue 25): the sidebar's control, set from
the URL, ranks pools only, and the headline names them."""

from __future__ import annotations

from collections.abc import Callable

from streamlit.testing.v1 import AppTest

from tests.pages.conftest import frame_with, no_exception


def test_disaggregation_on_ranks_prefill_and_decode_pools(app: Callable[..., AppTest]) -> None:
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
