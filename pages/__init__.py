"""The dashboard's pages (one file a page, run by ``st.navigation`` in ``app.py``).

``pages.common`` holds page plumbing (cached resources, the scenario and its URL binding,
exports); ``pages.charts`` holds pure functions returning plotly figures, testable without a
browser. Neither does domain work: that lives in ``planner``.
"""
