"""The Plan page's Deploy section: pick a target, read its files, download them as a zip.

Thin: the files come from :mod:`planner.deploy` (for the plan's engine); this draws them.
"""

from __future__ import annotations

import streamlit as st

from pages.common.ui import md_text, planner_errors
from pages.common.url_params import bound
from planner.catalog import Catalog
from planner.deploy import engine_serving, render, spec_from_plan, targets_of, zip_bytes
from planner.deploy.launch import engine_image, engine_release
from planner.plan import Plan

TARGET_LABELS = {
    "k8s": "Kubernetes",
    "skypilot": "SkyPilot",
    "docker": "docker run",
    "pd": "Prefill/decode commands",
    "dynamo": "NVIDIA Dynamo",
    "llm-d": "llm-d (Helm)",
}
LANGUAGES = {".yaml": "yaml", ".yml": "yaml", ".sh": "bash", ".md": "markdown"}


def deploy_section(plan: Plan, catalog: Catalog) -> None:
    st.subheader("Deploy")
    spec = None
    with planner_errors("No deployment files for this plan"):
        spec = spec_from_plan(plan, catalog)
    if spec is None:
        return
    targets = list(targets_of(spec))
    # a key of each kind: the two kinds offer different targets, a link keeps each one's choice
    key = "deploy_pools_target" if plan.disaggregated else "deploy_target"
    target = bound(
        st.segmented_control,
        "Target",
        targets,
        format_func=TARGET_LABELS.__getitem__,
        default=targets[0] if plan.disaggregated else "k8s",
        key=key,
    )
    target = target or targets[0 if plan.disaggregated else targets.index("k8s")]
    files = None
    with planner_errors("No deployment files for this plan"):
        files = render(spec, target)
    if files is None or spec is None:
        return
    engine = engine_serving(spec.family)
    cold = spec.cold_start()
    cols = st.columns([1, 1, 1, 2])
    cols[0].metric(
        "Engine", f"{engine.display_name} {engine_release(spec)}", help=engine_image(spec)
    )
    cols[1].metric(
        "Cold start (first)",
        f"{cold.first_start_s / 60:,.1f} min",
        help=cold.describe(),
    )
    cols[2].metric("Restart (weights on disk)", f"{cold.load_s / 60:,.1f} min")
    scaling = (
        f"{spec.min_replicas} to {spec.replicas}"
        if spec.min_replicas < spec.replicas
        else f"{spec.replicas}"
    )
    signal = (
        f"scaling on `{engine.queue_metric}`"
        if engine.queue_metric
        else "scaling on CPU (no queue gauge: see the README)"
    )
    cols[3].caption(
        f"{scaling} replica{'s' if spec.replicas > 1 else ''} of {spec.plan.gpus_per_replica} x "
        f"{md_text(spec.plan.gpu)} on {spec.instances} x {md_text(spec.instance)} at the peak; "
        f"{signal}. "
        f"{cold.describe()}"
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
