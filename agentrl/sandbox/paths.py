"""Which writes an attempt may make: the path rules of the sandbox and the fingerprint of what
it must not change.

Sandbox runner -> **paths**: before a completion's files are written into the copy, each path is
checked, in this order, and the first rule that refuses it gives the reason:

1. the text of the path: empty, absolute, or leaving the workspace by `..`;
2. protected: the tests (or anything under a protected directory);
3. refused everywhere, whatever the task allows, because each one changes how the tests run
   rather than what they test: test-runner configuration (`conftest.py`, `pytest.ini`,
   `pyproject.toml`, `setup.cfg`, `tox.ini`), site hooks (`*.pth`, `sitecustomize.py`,
   `usercustomize.py`), byte code (`*.pyc`, `__pycache__/`), and a top-level module that
   shadows the test runner (`pytest.py`, `unittest.py`, `agentrl_suite.py`, ...) or the
   standard library (`json.py`, `subprocess/__init__.py`, ...);
4. the task's allow-list (`writable`): glob patterns of what an attempt may create or change;
   `None` allows everything the rules above do not refuse, except a new module: without an
   allow-list only the modules that exist may change, so nothing new becomes importable by the
   test process (a root `test_*.py`, a package `org/`, a `yaml.py`).

Then, in the copy, a write through a symlink that leads out of the copy or onto a protected path
is refused; after the run, the protected files are compared with their fingerprint from before.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import posixpath
import stat
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

RUNNER_CONFIG_FILES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini"})
"""Files a test runner reads for its own configuration (pytest reads each of them; `addopts` or a
hook there can turn a run into collection only or rewrite every report to passed)."""

SITE_HOOK_FILES = frozenset({"sitecustomize.py", "usercustomize.py"})
"""Modules the interpreter imports at start-up when they are on the path."""

SITE_HOOK_MODULES = frozenset({"sitecustomize", "usercustomize"})
"""The same hooks as packages (`sitecustomize/__init__.py`)."""

RUNNER_MODULES = frozenset({"pytest", "_pytest", "py", "pluggy", "iniconfig", "unittest", "agentrl_suite", "agentrl"})
"""Top-level modules of the test runners and of the suite helper the sandbox provides."""

_MODULE_SUFFIXES = (".py", ".pyw", ".pyc", ".so", ".pyd")


def normalised(path: str) -> str:
    return posixpath.normpath(path.strip()).rstrip("/")


def is_under(path: str, base: str) -> bool:
    return base == "." or path == base or path.startswith(base + "/")


def shadowed_module(relative: str) -> str | None:
    """The top-level module a file at `relative` would provide when the workspace is on the import
    path (`json.py`, `json/__init__.py`, `json.cpython-311-x86_64-linux-gnu.so`), else None. A
    directory without `__init__` is a namespace package, which never shadows a real module."""
    parts = PurePosixPath(relative).parts
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2 and parts[1].split(".", 1)[0] == "__init__":
        name = parts[0] + "/__init__" + parts[1][len("__init__"):]
    else:
        return None
    if not name.endswith(_MODULE_SUFFIXES):
        return None
    return name.split("/", 1)[0].split(".", 1)[0] or None


def _matches(relative: str, patterns: Iterable[str]) -> bool:
    for pattern in patterns:
        pattern = normalised(pattern)
        if pattern.endswith("/**"):
            pattern = pattern[:-3]
        if fnmatch.fnmatchcase(relative, pattern) or is_under(relative, pattern):
            return True
    return False


def rule_refusal(relative: str, writable: Sequence[str] | None = None) -> str | None:
    """Why the rules that hold for every task (step 3 of the module's list) and the task's
    allow-list (step 4) refuse writing the normalised path `relative`, or None."""
    parts = PurePosixPath(relative).parts
    name = parts[-1]
    if name in RUNNER_CONFIG_FILES:
        return f"refused: test-runner configuration {relative}"
    if name in SITE_HOOK_FILES or name.endswith(".pth") or shadowed_module(relative) in SITE_HOOK_MODULES:
        return f"refused: site hook {relative}"
    if name.endswith(".pyc") or "__pycache__" in parts:
        return f"refused: byte code {relative}"
    module = shadowed_module(relative)
    if module in RUNNER_MODULES:
        return f"refused: {relative} shadows the test runner's module {module}"
    explicitly_allowed = writable is not None and any(normalised(p) == relative for p in writable)
    if module in sys.stdlib_module_names and not explicitly_allowed:
        return f"refused: {relative} shadows the standard-library module {module}"
    if writable is not None and not _matches(relative, writable):
        allowed = ", ".join(writable) if writable else "nothing"
        return f"refused: not writable: {relative} (this task allows {allowed})"
    return None


def refusal_reason(path: str, protected: Iterable[str], writable: Sequence[str] | None = None) -> str | None:
    """Why writing `path` (relative to the workspace) is refused, or None when it is allowed.

    `writable`: the task's allow-list of glob patterns (`"text.py"`, `"src/**"`); None allows
    whatever the rules for every task do not refuse. Checks the text of the path only; writes
    through symlinks are checked in the copy.

    >>> refusal_reason("conftest.py", ["tests"])
    'refused: test-runner configuration conftest.py'
    >>> refusal_reason("helpers.py", ["tests"], writable=["text.py"])
    'refused: not writable: helpers.py (this task allows text.py)'
    """
    if not path.strip() or "\x00" in path:
        return f"refused: invalid path {path!r}"
    if path.startswith(("/", "\\", "~")):
        return f"refused: absolute path {path}"
    if ".." in PurePosixPath(path.replace("\\", "/")).parts:
        return f"refused: path leaves the workspace (..): {path}"
    relative = normalised(path)
    if relative in ("", "."):
        return f"refused: invalid path {path!r}"
    for guarded in protected:
        if is_under(relative, normalised(guarded)):
            return f"refused: protected path {relative}"
    return rule_refusal(relative, writable)


def refusal_in_copy(copy: Path, relative: str, protected: Sequence[str], writable: Sequence[str] | None = None) -> str | None:
    """Why writing `relative` in the copy is refused once symlinks are followed, or None."""
    target = copy / relative
    if target.is_symlink():
        return f"refused: write through symlink {relative}"
    root = copy.resolve()
    try:
        parent = target.parent.resolve()  # follows any symlink on the way, as the write would
    except (OSError, RuntimeError):  # a symlink loop
        return f"refused: write through symlink {relative}"
    if parent != root and root not in parent.parents:
        return f"refused: write through symlink {relative}"
    real = (parent / target.name).relative_to(root).as_posix()
    for guarded in protected:
        if is_under(real, normalised(guarded)):
            return f"refused: protected path {real} (through a symlink)"
    if real != relative:
        reason = rule_refusal(real, writable)
        if reason:
            return f"{reason} (through a symlink)"
    if target.is_dir():
        return f"refused: {relative} is a directory"
    if writable is None and not target.exists() and is_module_file(real):
        return (f"refused: new module {real}: a task without a `writable` list lets an attempt change the files "
                "that exist, not add modules the tests could import")
    return None


def is_module_file(relative: str) -> bool:
    """Whether a file at `relative` could be imported (a module, a package's `__init__`, an
    extension)."""
    return PurePosixPath(relative).name.endswith(_MODULE_SUFFIXES)


def write_file(target: Path, content: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    # O_NOFOLLOW: the checks above already refused symlinks; this keeps it so if one appeared.
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(content)


def fingerprint(copy: Path, protected: Sequence[str]) -> dict[str, str | None]:
    """A digest of each protected path in the copy (None when absent), symlinks not followed: the
    content, and the inode, owner, mode and change time of every file and directory in it. A path
    moved away and a copy put back has another inode; a file changed and changed back, or a
    `.pyc` written beside a test and deleted after loading, has another change time (which no
    user can set back)."""

    def digest(path: Path) -> str | None:
        try:
            info = path.lstat()
        except FileNotFoundError:
            return None
        mode = info.st_mode
        identity = f"{info.st_ino}:{info.st_uid}:{info.st_gid}:{mode:o}:{info.st_ctime_ns}"
        if stat.S_ISLNK(mode):
            return f"link:{identity}:" + os.readlink(path)
        if stat.S_ISREG(mode):
            return f"file:{identity}:" + hashlib.sha256(path.read_bytes()).hexdigest()
        if stat.S_ISDIR(mode):
            entries = sorted(os.listdir(path))
            return f"dir:{identity}:" + hashlib.sha256(json.dumps([[e, digest(path / e)] for e in entries]).encode()).hexdigest()
        return f"other:{identity}"

    return {normalised(p): digest(copy / normalised(p)) for p in protected}


