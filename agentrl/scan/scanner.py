"""A scanner: a named, versioned rule over one trajectory, and what it says (`ScanResult`).

A reviewer's rule (a regex, or a Python function) -> **scanner** -> results stored per trajectory
and version (`agentrl.scan.results`), scored against review decisions (`agentrl.scan.validate`),
enforced by a guarded run (`agentrl.scan.enforce`). A result's `value` is True/False (or a number;
anything above 0 is a hit), its `explanation` one line a reviewer reads, and its `references` the
items (`agentrl.scan.trajectory.Item.index`) that decided it. The version is the one the author
gives, else a hash of the rule's source: a changed rule is a new version, so its stored results
no longer count and are computed again.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.scan.trajectory import Trajectory

WHERE = ("messages", "calls", "arguments", "outputs")  # what a regex scanner may read
KINDS = ("regex", "code")


class ScanError(ValueError):
    """A scanner that cannot be loaded or run; the message says what to change, on one line."""


@dataclass(frozen=True)
class ScanResult:
    """What a scanner says about one trajectory."""

    value: bool | float
    explanation: str = ""
    references: tuple[int, ...] = ()  # the indexes of the items that decided it

    @property
    def hit(self) -> bool:
        return bool(self.value) if isinstance(self.value, bool) else float(self.value) > 0

    @classmethod
    def of(cls, value: Any) -> ScanResult:
        if isinstance(value, ScanResult):
            return value
        if isinstance(value, (bool, int, float)):
            return cls(value if isinstance(value, bool) else float(value))
        if isinstance(value, dict) and "value" in value:
            return cls(value["value"], str(value.get("explanation") or ""),
                       tuple(int(r) for r in value.get("references") or ()))
        raise ScanError(f"a scanner must return a ScanResult (or a bool or number), not {type(value).__name__}")


NO_HIT = ScanResult(False)


@dataclass(frozen=True)
class Scanner:
    """`scan(trajectory) -> ScanResult` with its name, version and kind; `source` is the rule's
    text (the pattern of a regex scanner, the function's code) the version hashes when none is given."""

    name: str
    version: str
    kind: str
    scan_fn: Callable[[Trajectory], Any] = field(repr=False, compare=False)
    source: str = field(default="", repr=False, compare=False)
    spec: str = ""  # how it was loaded ("PATH:NAME", "builtin:NAME")

    def scan(self, trajectory: Trajectory) -> ScanResult:
        return ScanResult.of(self.scan_fn(trajectory))

    @property
    def label(self) -> str:
        return f"{self.name} v{self.version}"


def source_version(source: str) -> str:
    """A version from a rule's source: the first 8 hex digits of its SHA-256."""
    return hashlib.sha256(source.encode()).hexdigest()[:8]


def regex_scanner(name: str, pattern: str, where: Sequence[str] = WHERE, version: str | None = None,
                  explanation: str | None = None, min_matches: int = 1) -> Scanner:
    """A hit when `pattern` (Python `re`, searched) matches at least `min_matches` items among the
    parts named in `where` (messages, calls as `name({"arg": value})`, arguments as JSON, outputs)."""
    where = tuple(where)
    unknown = sorted(set(where) - set(WHERE))
    if unknown or not where:
        raise ScanError(f"scanner {name!r}: where must name some of {list(WHERE)}, not {list(where)}")
    try:
        compiled = re.compile(pattern)
    except re.error as error:
        raise ScanError(f"scanner {name!r}: the pattern {pattern!r} is not a regular expression ({error})") from None
    if min_matches < 1:
        raise ScanError(f"scanner {name!r}: min_matches must be at least 1, not {min_matches}")

    def texts(trajectory: Trajectory):
        for item in trajectory.items:
            if item.part == "message" and "messages" in where:
                yield item, item.text
            elif item.part == "call" and "calls" in where:
                yield item, item.searchable()
            elif item.part == "call" and "arguments" in where:
                yield item, json.dumps(dict(item.arguments or {}), sort_keys=True, default=str)
            elif item.part == "output" and "outputs" in where:
                yield item, item.text

    def scan(trajectory: Trajectory) -> ScanResult:
        found = [(item, m.group(0)) for item, text in texts(trajectory) if (m := compiled.search(text))]
        if len(found) < min_matches:
            return NO_HIT
        first = found[0]
        said = explanation or f"/{pattern}/ matched {first[1]!r:.80} in {first[0].role} {first[0].part} {first[0].index}"
        return ScanResult(True, said, tuple(item.index for item, _ in found))

    source = json.dumps({"pattern": pattern, "where": list(where), "min_matches": min_matches}, sort_keys=True)
    return Scanner(name, str(version) if version else source_version(source), "regex", scan, source)


def code_scanner(function: Callable[[Trajectory], Any], name: str | None = None, version: str | None = None) -> Scanner:
    """A Python function `scan(trajectory) -> ScanResult` as a scanner; its version is its
    `version` attribute, else a hash of its source code."""
    name = name or getattr(function, "scanner_name", None) or getattr(function, "__name__", "scanner")
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        source = repr(function)
    given = version or getattr(function, "version", None)
    return Scanner(str(name), str(given) if given else source_version(source), "code", function, source)
