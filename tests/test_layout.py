"""The house rules of the package layout (issue 9), as tests: a newcomer's map stays true.

- No `if kind ==` outside the engine registry: engines are asked, never named.
- (Pages importing no engine module and the 500-line limit: tests/test_imports.py.)
- No module of `agentrl/` is over 500 lines, and each opens with a docstring saying what it owns.
- Imports point down the flow: the record imports nothing of ours but itself and `paths`; the
  store never imports an engine; the library never imports Streamlit.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from helpers import REPO_ROOT

PACKAGE = REPO_ROOT / "agentrl"
PAGES = [REPO_ROOT / "app.py", *sorted((REPO_ROOT / "pages").glob("*.py")), *sorted((REPO_ROOT / "ui").glob("*.py"))]
MODULES = sorted(PACKAGE.rglob("*.py"))


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_no_kind_comparison_outside_the_engine_registry():
    pattern = re.compile(r"\bkind\s*==")
    offenders = [f"{p.relative_to(REPO_ROOT)}:{n}" for p in [*MODULES, *PAGES]
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if pattern.search(line) and p != PACKAGE / "engines" / "registry.py"]
    assert offenders == []


def test_every_module_opens_with_a_docstring():
    missing = [str(p.relative_to(REPO_ROOT)) for p in MODULES if ast.get_docstring(ast.parse(p.read_text())) is None]
    assert missing == []


def test_the_record_imports_nothing_of_ours_but_itself_and_leaf_modules():
    # `agentrl.paths` and `agentrl.scorers` (init() checks a scorer's name) import nothing of ours.
    for leaf in ("paths.py", "scorers.py"):
        assert not {m for m in imported_modules(PACKAGE / leaf) if m.startswith("agentrl")}, leaf
    offenders = {}
    for path in sorted((PACKAGE / "record").glob("*.py")):
        ours = {m for m in imported_modules(path) if m.startswith("agentrl")}
        bad = {m for m in ours if not m.startswith(("agentrl.record", "agentrl.paths", "agentrl.scorers"))}
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}


def test_the_store_never_imports_an_engine():
    offenders = {}
    for path in sorted((PACKAGE / "store").rglob("*.py")):
        bad = {m for m in imported_modules(path) if m.startswith("agentrl.engines")}
        if bad:
            offenders[str(path.relative_to(PACKAGE))] = sorted(bad)
    assert offenders == {}


def test_review_asks_the_task_contract_never_a_built_in_task():
    """The gate, fixtures, probes and transcripts reach every task (refund and coding included)
    through `agentrl.tasks.load_task` and the Task contract (issue 24, item 3)."""
    offenders = {}
    for path in sorted((PACKAGE / "review").rglob("*.py")):
        bad = {m for m in imported_modules(path) if m.startswith(("agentrl.tasks.refund", "agentrl.tasks.coding"))}
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}
