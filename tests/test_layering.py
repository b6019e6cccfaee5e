"""The domain packages stay free of the UI: planner/ and benchmarks_runner/ import no streamlit,
and planner/ imports neither plotly nor an HTTP client."""

from __future__ import annotations

import json
import pkgutil
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
