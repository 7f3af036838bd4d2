"""Where the project's own files are: the repository root, `schemas/` and the packaged assets.

Every module that reads a file shipped with agentrl (DDL, JSON Schemas, presets, the tiny model)
asks here, so moving a folder is a one-line change. `pip install -e .` keeps these paths valid.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PROJECT_ROOT = PACKAGE_DIR.parent
SCHEMAS_DIR = PROJECT_ROOT / "schemas"
ASSETS_DIR = PACKAGE_DIR / "assets"
PRESETS_DIR = PACKAGE_DIR / "config" / "presets"
