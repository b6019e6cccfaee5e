"""The Diagnose page's plumbing: which runs there are, their diagnoses (cached), the hand-over
of a fix's plan to the Verify page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import streamlit as st

from planner.diagnosis import Diagnosis, diagnose, evidence_from_run
from planner.perf.model import PerformanceModel
from planner.run_files import list_runs, read_run_dir, run_signature

#: session key under which the Diagnose page hands a plan to the Verify page
HANDED_PLAN = "diagnosis_plan_for_verify"


def run_choices(runs_dir: Path) -> dict[str, str]:
    """Run id (its directory's name) -> "run id: model (status, where it came from)", newest
    first. The selectbox keeps the label in the URL, so a link names the run."""
    out: dict[str, str] = {}
    for path in reversed(list_runs(runs_dir)):
        try:
            meta = json.loads((path / "run.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        config = meta.get("config") or {}
        tool = (config.get("imported_from") or {}).get("tool") or "Servewise"
        extra = ", simulated" if meta.get("simulated") else ""
        out[path.name] = (
            f"{path.name}: {meta.get('model') or '?'} ({meta.get('status')}, {tool}{extra})"
        )
    return out


@st.cache_resource(show_spinner=False, max_entries=32)
def _diagnosis(
    run_dir: str,
    signature: str | None,
    plan_json: str,
    model_key: str,
    _model: PerformanceModel | None,
) -> Diagnosis:
    del signature, model_key  # cache keys: the run's files and the fitted model
    run = read_run_dir(Path(run_dir))
    plan = json.loads(plan_json)
    if plan:
        run.meta["plan"] = plan
    return diagnose(evidence_from_run(run), model=_model)


def diagnosis_of_run(
    run_dir: Path, plan: dict[str, Any] | None, model: PerformanceModel | None, model_key: str
) -> Diagnosis:
    """The run's diagnosis (``plan`` in place of the run's own when given), recomputed when the
    run's files, the plan or the model change."""
    return _diagnosis(
        str(run_dir),
        run_signature(run_dir),
        json.dumps(plan or {}, sort_keys=True),
        model_key,
        model,
    )


def hand_to_verify(plan: dict[str, Any]) -> None:
    """Give the Verify page ``plan`` (it offers it as "From the diagnosis") and open it."""
    st.session_state[HANDED_PLAN] = plan
    # the sidebar's widgets write the scenario back into the URL themselves (they are bound to
    # it); only the Verify page's choice of plan source is set here
    st.switch_page("pages/verify.py", query_params={"vf_source": "Diagnosis"})
