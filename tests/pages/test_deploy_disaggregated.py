"""The Plan page's Deploy section for a disaggregated plan (Streamlit AppTest): it offers the
pools' targets only (prefill/decode commands, NVIDIA Dynamo, llm-d), draws each file and a zip.

The plan is the hand-written vLLM one of tests/planner/deploy/test_disaggregated_deploy.py (2
prefill x TP4 and 1 decode TP8 on p5.48xlarge), drawn by the section itself: the search that
makes such plans is another module's, tested there.
"""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.patience import PATIENT_S


def _section() -> None:
    from pages.common.deploy import deploy_section
    from planner.catalog import load_catalog
    from tests.planner.deploy.test_disaggregated_deploy import _vllm_plan

    deploy_section(_vllm_plan(), load_catalog())


def test_a_disaggregated_plan_deploys_as_pools() -> None:
    at = AppTest.from_function(_section, default_timeout=PATIENT_S).run()
    assert not at.exception, at.exception
    group = at.button_group(key="deploy_pools_target")
    assert list(group.options) == ["Prefill/decode commands", "NVIDIA Dynamo", "llm-d (Helm)"]
    codes = [c.value for c in at.code]
    assert any("--kv-transfer-config" in c and "--port 8100" in c for c in codes)
    assert any("toy_proxy_server.py" in c for c in codes)
    group.set_value("dynamo").run()
    assert not at.exception, at.exception
    assert any("kind: DynamoGraphDeployment" in c.value for c in at.code)
    at.button_group(key="deploy_pools_target").set_value("llm-d").run()
    assert any("modelCommand: vllmServe" in c.value for c in at.code)
    assert [b.label for b in at.get("download_button")] == ["Download the llm-d (Helm) files (zip)"]
