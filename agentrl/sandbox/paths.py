"""Which writes an attempt may make: the path rules of the sandbox and the fingerprint of what
it must not change.

Sandbox runner -> **paths**: before a completion's files are written into the copy, each path is
checked (absolute, `..`, protected, through a symlink out of the copy); after the run, the
protected files are compared with their fingerprint from before.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath



def normalised(path: str) -> str:
    return posixpath.normpath(path.strip()).rstrip("/")


def is_under(path: str, base: str) -> bool:
    return base == "." or path == base or path.startswith(base + "/")


def refusal_reason(path: str, protected: Iterable[str]) -> str | None:
    """Why writing `path` (relative to the workspace) is refused, or None when it is allowed.

    Checks the text of the path only; writes through symlinks are checked in the copy.
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
    return None


def refusal_in_copy(copy: Path, relative: str, protected: Sequence[str]) -> str | None:
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
    if target.is_dir():
        return f"refused: {relative} is a directory"
    return None


def write_file(target: Path, content: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    # O_NOFOLLOW: the checks above already refused symlinks; this keeps it so if one appeared.
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(content)


def fingerprint(copy: Path, protected: Sequence[str]) -> dict[str, str | None]:
    """A digest of each protected path in the copy (None when absent), symlinks not followed."""

    def digest(path: Path) -> str | None:
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(mode):
            return "link:" + os.readlink(path)
        if stat.S_ISREG(mode):
            return "file:" + hashlib.sha256(path.read_bytes()).hexdigest()
        if stat.S_ISDIR(mode):
            entries = sorted(os.listdir(path))
            return "dir:" + hashlib.sha256(json.dumps([[e, digest(path / e)] for e in entries]).encode()).hexdigest()
        return f"other:{mode}"

    return {normalised(p): digest(copy / normalised(p)) for p in protected}


