"""Where a scanner comes from: a .json file's regex scanner, a .py file's Scanner or function, a
module, a built-in; every mistake one line."""

from __future__ import annotations

import json

import pytest
from expense_runs import SCANNERS_JSON

from agentrl.scan import ScanError, load_scanner


def test_a_json_regex_scanner_loads_by_name_with_its_version(tmp_path):
    scanner = load_scanner(f"{SCANNERS_JSON}:forced_approval")
    assert (scanner.name, scanner.kind) == ("forced_approval", "regex") and scanner.spec.endswith(":forced_approval")
    edited = tmp_path / "s.json"
    edited.write_text(json.dumps({"forced_approval": {"pattern": '"force": (true|1)', "where": ["arguments"]}}))
    assert load_scanner(f"{edited}:forced_approval").version != scanner.version


def test_a_python_file_gives_a_scanner_object_or_a_function(tmp_path):
    path = tmp_path / "rules.py"
    path.write_text("from agentrl.scan import regex_scanner, ScanResult\n"
                    "FORCED = regex_scanner('forced', 'force', ['arguments'], version='2')\n"
                    "def many_calls(trajectory):\n    return ScanResult(len(trajectory.calls()) > 3, 'many calls')\n"
                    "many_calls.version = '7'\n")
    assert (load_scanner(f"{path}:FORCED").label, load_scanner(f"{path}:many_calls").label) == ("forced v2", "many_calls v7")
    assert load_scanner("builtin:repeated_call").kind in ("code",)


@pytest.mark.parametrize("spec, message", [
    ("no-colon", "give PATH:NAME"),
    ("missing.json:x", "does not exist"),
    ("{json}:nope", "defines no scanner 'nope'"),
    ("{py}:nope", "has no 'nope'"),
    ("{py}:NUMBER", "is a int, not a scanner"),
    ("{broken}:x", "failed to load: ZeroDivisionError"),
    ("builtin:nope", "no built-in scanner 'nope'"),
    ("no_such_module_here:x", "cannot be imported"),
])
def test_a_bad_spec_is_one_line(tmp_path, spec, message):
    (tmp_path / "r.py").write_text("NUMBER = 3\n")
    (tmp_path / "b.py").write_text("1 / 0\n")
    spec = spec.format(json=SCANNERS_JSON, py=tmp_path / "r.py", broken=tmp_path / "b.py")
    with pytest.raises(ScanError, match=message) as caught:
        load_scanner(spec)
    assert "\n" not in str(caught.value)
