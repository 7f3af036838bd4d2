"""The direction of imports: the library never loads Streamlit, and a tabular run never pays for torch."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "agentrl"

LIBRARY = ["agentrl.engines.tabular.training", "agentrl.store.ingest", "agentrl.launcher", "agentrl.engines.tabular.engine",
           "agentrl.store.queries", "agentrl.cli", "agentrl.engines.registry", "agentrl.review.gate",
           "agentrl.analysis.compare", "agentrl.analysis.live", "agentrl.analysis.hardware", "agentrl.analysis.runs",
           "agentrl.review.transcript", "agentrl.store.curation"]
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


def test_the_store_commands_start_without_pandas():
    # ingest, check and rebuild run at the end of every CLI run and in every store command; the
    # query package loads its pandas-returning modules only when a page asks for one.
    assert loaded_after_import(["agentrl.store.ingest", "agentrl.store.health", "agentrl.cli"], ["pandas"]) == []


def test_no_module_of_the_package_imports_streamlit():
    pattern = re.compile(r"^\s*(import|from)\s+streamlit\b", re.MULTILINE)
    offenders = [str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_only_the_charts_module_imports_plotly():
    pattern = re.compile(r"^\s*(import|from)\s+plotly\b", re.MULTILINE)
    importers = [p.name for p in PACKAGE.rglob("*.py") if pattern.search(p.read_text())]
    assert set(importers) <= {"charts.py"}


PAGES = [PACKAGE.parent / "app.py", *sorted((PACKAGE.parent / "pages").glob("*.py"))]


def test_no_page_imports_an_engine_module_or_runs_sql():
    """Pages are thin: they ask agentrl (the engine registry at most) and draw (issue 9, item 5)."""
    engine = re.compile(r"^\s*(import|from)\s+agentrl\.engines\.(?!registry\b)", re.MULTILINE)
    sql = re.compile(r"\.execute\(|\bSELECT\b|\bINSERT\b")
    assert [p.name for p in PAGES if engine.search(p.read_text())] == []
    assert [p.name for p in PAGES if sql.search(p.read_text())] == []


def test_no_module_is_over_500_lines():
    long = {str(p.relative_to(PACKAGE.parent)): n for p in [*PACKAGE.rglob("*.py"), *PAGES, *(PACKAGE.parent / "ui").glob("*.py")]
            if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}
