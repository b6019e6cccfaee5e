"""The domain packages stay free of the UI: planner/ and benchmarks_runner/ import no streamlit,
and planner/ imports neither plotly nor an HTTP client."""

from __future__ import annotations

import json
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imported_modules(package: str) -> set[str]:
    sys.path.insert(0, str(ROOT))
    names = [package] + [
        m.name
        for m in pkgutil.walk_packages([str(ROOT / package)], prefix=f"{package}.")
        if not m.name.endswith("__main__")
    ]
    code = (
        "import importlib, json, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return {m.split(".")[0] for m in json.loads(out.stdout)}


def test_planner_imports_no_ui_and_no_network() -> None:
    modules = _imported_modules("planner")
    assert not modules & {"streamlit", "plotly", "httpx", "aiohttp", "requests"}


def test_benchmarks_runner_imports_no_streamlit() -> None:
    modules = _imported_modules("benchmarks_runner")
    assert "streamlit" not in modules and "vllm" not in modules


def test_the_dead_names_of_issue_14_stay_gone() -> None:
    """Names nothing used, each a second definition of something that lives elsewhere now
    (plan keys: planner.plan.Plan; link classes and engine families: planner.engine;
    PredictionLike: planner.perf.scenario.Prediction; the GPU colour map: gpu_color)."""
    dead = ("PLAN_KEYS", "KNOB_KEYS", "LINK_CLASSES", "KNOWN_FAMILIES", "PredictionLike",
            "gpu_color_map", "EngineSettings", "PlanSpec", "LOAD_MODES", "LoadPattern")  # fmt: skip
    root = Path(__file__).resolve().parents[1]
    sources = [
        p for d in ("planner", "benchmarks_runner", "pages") for p in (root / d).rglob("*.py")
    ]
    found = [
        f"{path.relative_to(root)}: {name}"
        for path in sources
        for name in dead
        if re.search(rf"\b{name}\b", path.read_text(encoding="utf-8"))
    ]
    assert not found
