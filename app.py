"""Servewise dashboard: ``streamlit run app.py``.

The scenario (model, workload, load, SLOs, where and at what price) is drawn here, in the
sidebar, before the page runs: its widgets belong to this main script, so their values stay
bound to the URL across page switches and every page reads the same scenario.
"""

from __future__ import annotations

import streamlit as st

from pages.common.heap import first_page_of_process
from pages.common.navigation import ensure_app_navigation
from pages.common.resources import get_catalog
from pages.common.scenario import SCENARIO_KEY, scenario_sidebar
from pages.common.url_params import remember_url

ensure_app_navigation()
remember_url()  # the link as sent, before a widget corrects it
st.set_page_config(layout="wide", page_title="Servewise", page_icon=":material/bolt:")

# One flat menu along the top, in the order a planning meeting walks through it. URL paths
# are the file names (see pages/common/navigation.py for why they must be).
PAGES = [
    st.Page(
        "pages/plan.py", title="Plan", icon=":material/route:", default=True, url_path="plan_home"
    ),
    st.Page(
        "pages/gpu_economics.py",
        title="GPU economics",
        icon=":material/memory:",
    ),
    st.Page("pages/kv_cache.py", title="KV cache", icon=":material/stacks:"),
    st.Page("pages/cost.py", title="Cost", icon=":material/payments:"),
    st.Page("pages/benchmarks.py", title="Benchmarks", icon=":material/speed:"),
    st.Page("pages/verify.py", title="Verify", icon=":material/fact_check:"),
    st.Page("pages/diagnose.py", title="Diagnose", icon=":material/troubleshoot:"),
    st.Page("pages/data.py", title="Data", icon=":material/table:"),
    # The Plan page is served at the root (it is the default), so its file's own address, /plan,
    # would be "Page not found": the same file is also a hidden page there (st.switch_page
    # cannot redirect: it clears the link, whose scenario widgets hold). The default's own name
    # is not plan, so the two do not clash (Streamlit keys pages by that name).
    st.Page("pages/plan.py", title="Plan", url_path="plan", visibility="hidden"),
]

page = st.navigation(PAGES, position="top")
with first_page_of_process():  # see pages/common/heap.py
    st.session_state[SCENARIO_KEY] = scenario_sidebar(get_catalog().catalog)
    page.run()
