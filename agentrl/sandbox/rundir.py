"""The run's directory: a throw-away copy of the workspace, the run's HOME and TMPDIR, the harness
files beside them, and the hand-over of the copy to the sandbox user.

Sandbox runner -> **rundir**. `<temp_root>/run-XXXX/` holds `workspace/` (the copy the attempt's
files are written into), `home/`, `tmp/` and `harness/` (the harness, the suite helper and an
empty pytest configuration, read-only, outside the workspace). The runner removes it when the
run ends.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from agentrl.sandbox import boundary, harness, suite
from agentrl.sandbox.paths import is_under, normalised, refusal_reason
from agentrl.sandbox.users import Slot


def default_temp_root() -> Path:
    """Where runs make their copies unless told otherwise: `<tmp>/agentrl-sandbox`."""
    return Path(tempfile.gettempdir()) / "agentrl-sandbox"


def ignore_specials(directory: str, names: list[str]) -> set[str]:
    # Byte code is never copied (none may lie beside a protected test; the run writes none);
    # FIFOs, sockets and devices would block or mislead copy2.
    ignored = set()
    for name in names:
        if name == "__pycache__" or name.endswith((".pyc", ".pyo")):
            ignored.add(name)
            continue
        mode = os.lstat(os.path.join(directory, name)).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            ignored.add(name)
    return ignored


def hand_over(copy: Path, home: Path, tmp: Path, slot: Slot, protected: Sequence[str]) -> None:
    """Give the copy to the sandbox user, except the protected paths: those stay root's and
    read-only, so the run cannot change the tests it is judged by; and the directories that hold
    them (the copy's root among them) stay root's too, writable by the sandbox user's group but
    sticky, so it can add and remove its own files there, never rename or remove a protected one
    and put a copy of its own in its place."""
    guarded = [normalised(p) for p in protected]
    holders = {copy} | {copy / PurePosixPath(g).parent for g in guarded if "/" in g}
    holders |= {parent for h in list(holders) for parent in h.parents if copy in parent.parents}
    for directory, dirnames, filenames in os.walk(copy):
        for path in [Path(directory) / name for name in dirnames + filenames]:
            if any(is_under(path.relative_to(copy).as_posix(), g) for g in guarded):
                mode = path.lstat().st_mode
                if not stat.S_ISLNK(mode):
                    os.chmod(path, stat.S_IMODE(mode) | (0o555 if stat.S_ISDIR(mode) else 0o444))
            elif path not in holders:
                os.chown(path, slot.uid, slot.gid, follow_symlinks=False)
    for private in (home, tmp):
        os.chown(private, slot.uid, slot.gid)
        os.chmod(private, 0o700)
    for holder in holders:
        if holder.is_dir() and not holder.is_symlink():
            os.chown(holder, 0, slot.gid, follow_symlinks=False)
            os.chmod(holder, stat.S_IMODE(holder.lstat().st_mode) | stat.S_ISVTX | 0o770)


def load_answer_keys(answer_keys: Mapping[str, str] | str | Path | None) -> dict[str, str]:
    """Answer keys by name: as given, or every `*.py` of a directory by stem."""
    if answer_keys is None:
        return {}
    if isinstance(answer_keys, Mapping):
        return dict(answer_keys)
    directory = Path(answer_keys)
    if not directory.is_dir():
        raise ValueError(f"answer_keys {directory} is not a directory")
    return {path.stem: path.read_text(encoding="utf-8") for path in sorted(directory.glob("*.py"))}


def place_harness(run_dir: Path) -> Path:
    """The harness, the suite helper and an empty pytest configuration, in a directory of the run
    outside the workspace that the run may read but not change."""
    directory = run_dir / "harness"
    directory.mkdir()
    shutil.copyfile(harness.__file__, directory / "harness.py")
    shutil.copyfile(suite.__file__, directory / "agentrl_suite.py")
    boundary.ship(directory)  # agentrl_boundary.py and its parts
    (directory / "pytest.ini").write_text("[pytest]\n")
    for path in directory.iterdir():
        path.chmod(0o444)
    directory.chmod(0o555)
    return directory


def memfd(name: str, content: bytes = b"") -> int:
    fd = os.memfd_create(name)  # close-on-exec here; passed on by pass_fds alone
    os.write(fd, content)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def load_held_out(held_out: Mapping[str, str] | str | Path | None) -> dict[str, str]:
    """Held-out tests by relative path: as given, or every file under a directory."""
    if held_out is None:
        return {}
    if isinstance(held_out, Mapping):
        files = {normalised(k): v for k, v in held_out.items()}
    else:
        directory = Path(held_out)
        if not directory.is_dir():
            raise ValueError(f"held_out {directory} is not a directory")
        files = {p.relative_to(directory).as_posix(): p.read_text(encoding="utf-8") for p in sorted(directory.rglob("*"))
                 if p.is_file() and "__pycache__" not in p.parts}
    for path in files:
        problem = refusal_reason(path, [])
        if problem and problem.startswith(("refused: invalid", "refused: absolute", "refused: path leaves")):
            raise ValueError(f"held-out test path {path!r}: {problem[len('refused: '):]}")
    return files
