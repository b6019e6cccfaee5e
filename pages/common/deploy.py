"""The Plan page's Deploy section: pick a target, read its files, download them as a zip.

Thin: the files come from :mod:`planner.deploy`; this draws them.
"""

from __future__ import annotations

import streamlit as st

from pages.common.planning import recommend_request
from pages.common.scenario import Scenario
from pages.common.ui import planner_errors
from pages.common.url_params import bound
from planner.catalog import Catalog
from planner.deploy import render, spec_from_recommendation, zip_bytes
from planner.recommend import Recommendation

TARGET_LABELS = {"k8s": "Kubernetes", "skypilot": "SkyPilot", "docker": "docker run"}
LANGUAGES = {".yaml": "yaml", ".sh": "bash", ".md": "markdown"}


def deploy_section(best: Recommendation, catalog: Catalog, scenario: Scenario) -> None:
    st.subheader("Deploy")
    target = bound(
        st.segmented_control,
        "Target",
        list(TARGET_LABELS),
        format_func=TARGET_LABELS.__getitem__,
        default="k8s",
        key="deploy_target",
    )
    target = target or "k8s"
    files = None
    spec = None
    with planner_errors("No deployment files for this plan"):
        fraction = scenario.load_avg / scenario.load_peak if scenario.load_peak else None
        spec = spec_from_recommendation(
            best, recommend_request(scenario), catalog, average_load_fraction=fraction
        )
        files = render(spec, target)
    if files is None or spec is None:
        return
    cold = spec.cold_start()
    cols = st.columns([1, 1, 2])
    cols[0].metric(
        "Cold start (first)",
        f"{cold.first_start_s / 60:,.1f} min",
        help=cold.describe(),
    )
    cols[1].metric("Restart (weights on disk)", f"{cold.load_s / 60:,.1f} min")
    scaling = (
        f"{spec.min_groups} to {spec.groups}" if spec.min_groups < spec.groups else f"{spec.groups}"
    )
    cols[2].caption(
        f"{scaling} replica group{'s' if spec.groups > 1 else ''} of {spec.nodes_per_group} x "
        f"{spec.instance}; scaling on `vllm:num_requests_waiting`. {cold.describe()}"
    )
    st.download_button(
        f"Download the {TARGET_LABELS[target]} files (zip)",
        data=zip_bytes(files, f"{spec.name}-{target}"),
        file_name=f"{spec.name}-{target}.zip",
        mime="application/zip",
        key="deploy_zip",
        on_click="ignore",
    )
    for tab, (name, text) in zip(st.tabs(list(files)), files.items(), strict=True):
        with tab:
            suffix = name[name.rfind(".") :]
            st.code(text, language=LANGUAGES.get(suffix, "text"), wrap_lines=True)
