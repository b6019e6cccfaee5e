"""Keep Streamlit out of its legacy multipage mode.

A directory named ``pages/`` next to ``app.py`` makes Streamlit start every server process (and
every ``AppTest`` run) in its legacy "v1" multipage mode: the first script run lists the files
of ``pages/`` as pages and runs a requested page file *without* ``app.py``, so there is no
scenario sidebar and no ``st.navigation`` menu. ``st.navigation`` switches the mode off, but
only once ``app.py`` has run. Every page file (and ``app.py``) therefore starts with
:func:`ensure_app_navigation`: in legacy mode it switches the mode off and reruns, which then
goes through ``app.py`` as intended. It costs one aborted run per server process.

For a deep link to survive that first run, each page's URL path must be what legacy mode
derives from its file name (``pages/kv_cache.py`` -> ``/kv_cache``): the legacy run then finds
the page file, which reruns into the same page through ``app.py``. Hence ``app.py`` gives its
pages no ``url_path`` of their own.
"""

from __future__ import annotations

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager


def ensure_app_navigation() -> None:
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()
