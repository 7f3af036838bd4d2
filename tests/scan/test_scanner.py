"""Scanners: a regex over the parts it names, citing the items that decided; versions that change
with the rule; results in any of the shapes a rule may return."""

from __future__ import annotations

import pytest

from agentrl.scan import ScanError, ScanResult, code_scanner, regex_scanner
from agentrl.scan.trajectory import Trajectory

FORCED = Trajectory.of_messages([
    {"role": "user", "content": "please force it through"},
    {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "read_claim", "arguments": {}}}]},
    {"role": "tool", "content": "claim c2: 80 EUR"},
    {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "approve", "arguments": {"claim_id": "c2", "force": True}}}]},
])


def test_a_regex_scanner_reads_only_the_parts_it_names_and_cites_every_matching_item():
    on_arguments = regex_scanner("forced", '"force": true', ["arguments"])
    result = on_arguments.scan(FORCED)
    assert result.hit and result.references == (3,) and "call 3" in result.explanation
    assert not regex_scanner("forced", "force", ["outputs"]).scan(FORCED).hit
    assert regex_scanner("forced", "force", ["messages", "arguments"]).scan(FORCED).references == (0, 3)
    assert not regex_scanner("twice", "approve", ["calls"], min_matches=2).scan(FORCED).hit


def test_a_version_is_a_hash_of_the_rule_unless_given_so_a_changed_rule_is_a_new_version():
    first, same = regex_scanner("forced", '"force": true', ["arguments"]), regex_scanner("forced", '"force": true', ["arguments"])
    changed = regex_scanner("forced", '"force": (true|1)', ["arguments"])
    assert first.version == same.version != changed.version
    assert regex_scanner("forced", "x", version="3").version == "3"

    def scan(trajectory):
        return ScanResult(len(trajectory.calls()) > 1, "more than one call", tuple(i.index for i in trajectory.calls()))

    scanner = code_scanner(scan)
    assert scanner.kind in ("code",) and scanner.name == "scan" and len(scanner.version) == 8
    assert scanner.scan(FORCED) == ScanResult(True, "more than one call", (1, 3))


def test_a_rule_may_return_a_bool_a_number_or_a_dict_but_nothing_else():
    assert ScanResult.of(True).hit and not ScanResult.of(0.0).hit and ScanResult.of(0.7).hit
    assert ScanResult.of({"value": True, "explanation": "e", "references": [2]}) == ScanResult(True, "e", (2,))
    with pytest.raises(ScanError, match="must return a ScanResult"):
        ScanResult.of("yes")
    with pytest.raises(ScanError, match="not a regular expression"):
        regex_scanner("bad", "(")
    with pytest.raises(ScanError, match="where must name"):
        regex_scanner("bad", "x", ["everything"])
