"""The direction of imports: the library never loads Streamlit, and a tabular run never pays for torch."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "agentrl"

LIBRARY = ["agentrl.engines.tabular.training", "agentrl.store.ingest", "agentrl.launcher", "agentrl.engines.tabular.engine",
           "agentrl.store.queries", "agentrl.cli", "agentrl.engines.registry", "agentrl.review.gate"]
CORE = ["agentrl.engines.tabular.policy", "agentrl.tasks.refund.gym", "agentrl.tasks.refund.tasksets",
        "agentrl.tasks.refund.rollout", "agentrl.engines.tabular.imitation", "agentrl.tasks.refund.scoring",
        "agentrl.engines.tabular.training", "agentrl.analysis.throughput", "agentrl.config"]


def loaded_after_import(modules: list[str], watch: list[str]) -> list[str]:
    """Import `modules` in a fresh interpreter; which of `watch` ended up in sys.modules."""
    code = (
        "import json, sys\n"
        f"for name in {modules!r}: __import__(name)\n"
        f"print(json.dumps([m for m in {watch!r} if m in sys.modules]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE.parent, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_library_loads_neither_streamlit_nor_torch():
    assert loaded_after_import(LIBRARY, ["streamlit", "torch"]) == []


def test_training_core_loads_no_ui_no_charts_no_torch():
    assert loaded_after_import(CORE, ["streamlit", "plotly", "torch", "duckdb"]) == []


def test_no_module_of_the_package_imports_streamlit():
    pattern = re.compile(r"^\s*(import|from)\s+streamlit\b", re.MULTILINE)
    offenders = [str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_only_the_charts_module_imports_plotly():
    pattern = re.compile(r"^\s*(import|from)\s+plotly\b", re.MULTILINE)
    importers = [p.name for p in PACKAGE.rglob("*.py") if pattern.search(p.read_text())]
    assert set(importers) <= {"charts.py"}
