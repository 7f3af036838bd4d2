"""Paths the scan tests share (the example task and its scanners)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TASK_SPEC = f"{ROOT / 'examples' / 'expense_claims' / 'task.py'}:TASK"
SCANNERS_JSON = ROOT / "examples" / "expense_claims" / "scanners.json"
