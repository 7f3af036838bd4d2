"""Where a scanner comes from: `PATH:NAME` (a Python file's or module's `NAME`, or a regex scanner
`NAME` of a `.json` file) or `builtin:NAME`; any mistake is one line (`ScanError`).

CLI / run config -> **loader** -> scanner. A Python `NAME` may be a `Scanner` (`regex_scanner(...)`,
`code_scanner(...)`), a function `scan(trajectory) -> ScanResult` (its version: its `version`
attribute, else a hash of its source), or a dict of a regex scanner. A `.json` file maps names to
regex scanners, each `{"pattern": ..., "where": [...], "version": ..., "explanation": ...,
"min_matches": ...}` (only `pattern` required; `where` defaults to every part), e.g.

    {"reset_unverified": {"pattern": "reset_password", "where": ["calls"]}}

`task` (the run's task, when known) lets `builtin:verify` read its `verify`, whose source then
joins the version.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentrl.scan.scanner import WHERE, ScanError, Scanner, code_scanner, regex_scanner, source_version

REGEX_KEYS = ("pattern", "where", "version", "explanation", "min_matches")


def split_spec(spec: str) -> tuple[str, str]:
    if not isinstance(spec, str) or ":" not in spec:
        raise ScanError(f"scanner {spec!r}: give PATH:NAME (a .py or .json file, or a module, and a name) or builtin:NAME")
    where, name = spec.rsplit(":", 1)
    if not where or not name:
        raise ScanError(f"scanner {spec!r}: give PATH:NAME (a .py or .json file, or a module, and a name) or builtin:NAME")
    return where, name


def from_definition(name: str, definition: Any, where: str) -> Scanner:
    """A regex scanner from its JSON definition."""
    if not isinstance(definition, Mapping) or not isinstance(definition.get("pattern"), str):
        raise ScanError(f"scanner {name!r} in {where}: a regex scanner is {{\"pattern\": \"...\"}} with optional "
                        f"{list(REGEX_KEYS[1:])}")
    unknown = sorted(set(definition) - set(REGEX_KEYS))
    if unknown:
        raise ScanError(f"scanner {name!r} in {where}: unknown key(s) {unknown}; use {list(REGEX_KEYS)}")
    parts = definition.get("where", list(WHERE))
    if isinstance(parts, str) or not isinstance(parts, list):
        raise ScanError(f"scanner {name!r} in {where}: where must be a list of {list(WHERE)}")
    min_matches = definition.get("min_matches", 1)
    if isinstance(min_matches, bool) or not isinstance(min_matches, int):
        raise ScanError(f"scanner {name!r} in {where}: min_matches must be a whole number")
    version = definition.get("version")
    return regex_scanner(name, definition["pattern"], parts, None if version is None else str(version),
                         definition.get("explanation"), min_matches)


def _python_object(where: str, name: str) -> Any:
    path = Path(where)
    if where.endswith(".py"):
        if not path.is_file():
            raise ScanError(f"scanner file {where!r} does not exist")
        module_name = "agentrl_scanner_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as error:  # the user's file: whatever it raises is said in one line
            sys.modules.pop(module_name, None)
            raise ScanError(f"scanner file {where!r} failed to load: {type(error).__name__}: {error}") from None
    else:
        try:
            module = importlib.import_module(where)
        except Exception as error:
            raise ScanError(f"scanner module {where!r} cannot be imported ({type(error).__name__}: {error}); "
                            "give a .py or .json file path or an importable module") from None
    if not hasattr(module, name):
        raise ScanError(f"{where} has no {name!r}")
    return getattr(module, name)


def load_scanner(spec: str, task: Any = None) -> Scanner:
    """The scanner `spec` names (`PATH:NAME`, `module:NAME`, `builtin:NAME`)."""
    from agentrl.scan.builtin import builtin

    where, name = split_spec(spec)
    if where == "builtin":
        scanner = builtin(name)
        if name == "verify" and task is not None:
            try:
                extra = inspect.getsource(task.verifier)
            except (OSError, TypeError):
                extra = repr(task.verifier)
            scanner = Scanner(scanner.name, source_version(scanner.source + extra), scanner.kind, scanner.scan_fn,
                              scanner.source, spec)
        return scanner
    if where.endswith(".json"):
        path = Path(where)
        if not path.is_file():
            raise ScanError(f"scanner file {where!r} does not exist")
        try:
            definitions = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ScanError(f"scanner file {where!r} is not readable JSON ({error})") from None
        if not isinstance(definitions, Mapping) or name not in definitions:
            raise ScanError(f"{where} defines no scanner {name!r}" + (
                f"; it has {sorted(definitions)}" if isinstance(definitions, Mapping) else "; it must map names to scanners"))
        scanner = from_definition(name, definitions[name], where)
    else:
        value = _python_object(where, name)
        if isinstance(value, Scanner):
            scanner = value
        elif isinstance(value, Mapping):
            scanner = from_definition(name, value, where)
        elif callable(value):
            scanner = code_scanner(value, name=name)
        else:
            raise ScanError(f"{where}:{name} is a {type(value).__name__}, not a scanner (a Scanner, a function "
                            "scan(trajectory) -> ScanResult, or a regex definition)")
    return Scanner(scanner.name, scanner.version, scanner.kind, scanner.scan_fn, scanner.source, spec)
