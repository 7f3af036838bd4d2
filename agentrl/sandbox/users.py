"""Sandbox users (root only): one uid per concurrent run, the slot lock that hands them out, and
the clean-up of whatever a sandbox user left behind (processes, files in world-writable dirs).

Sandbox runner -> **users**. Started as root, each run switches to uid SANDBOX_UID_BASE + slot, so
RLIMIT_NPROC counts that run alone and "every process of this uid" names exactly one run. The
slots are handed out through one lock directory per machine at a fixed path (`SLOT_LOCK_DIRS`),
never under TMPDIR: two trainers with different TMPDIRs would otherwise hand out the same uid,
and the clean-up after one run would kill the other's processes.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from agentrl.sandbox.stub import _STOP_GRACE_S

SANDBOX_UID_BASE = 1_990_000_000
"""First uid of the sandbox users (uid = gid = base + slot); chosen far above real accounts."""
SANDBOX_SLOTS = 64
"""Runs that may be in flight at once on this machine (all processes together), one uid each, so
RLIMIT_NPROC counts one run's processes and 'every process of this uid' names exactly one run."""
_WORLD_WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm")  # where a sandbox user can leave files
SLOT_LOCK_DIRS = ("/run/agentrl/sandbox-slots", "/var/lock/agentrl/sandbox-slots", "/tmp/agentrl-sandbox-slots")
"""Where the slot locks live, the first that can be made: fixed paths, whatever TMPDIR says, so
every trainer on the machine shares one set of locks."""
LEGACY_SLOT_LOCK_DIR = "/tmp/agentrl-sandbox-slots"
"""Where earlier versions locked the slots (under the default TMPDIR): a slot's lock there is taken
too, so a trainer of an earlier version on the same machine never gets the same uid."""
SLOT_WAIT_S = 600.0
"""How long a run waits for a free slot before the trainer fails (every slot taken that long
means another trainer holds them all, or runs hang)."""


class SlotsBusy(RuntimeError):
    """Every sandbox slot stayed taken until the deadline."""



@dataclass
class Slot:
    uid: int
    gid: int
    lock_fd: int
    legacy_fd: int | None = None


def slot_lock_dir() -> Path:
    """The machine's slot lock directory: the first of `SLOT_LOCK_DIRS` that is (or can be made)
    a directory of this user."""
    problems = []
    for candidate in SLOT_LOCK_DIRS:
        try:
            return own_directory(Path(candidate), 0o700)
        except (OSError, ValueError) as err:
            problems.append(f"{candidate}: {err}")
    raise RuntimeError("no sandbox slot lock directory can be made: " + "; ".join(problems))


def has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def own_directory(path: Path, mode: int) -> Path:
    """Create `path` if needed and make sure it is ours: in a world-writable /tmp another user
    could have made it first, and could then swap what we put in it."""
    path.mkdir(mode=mode, parents=True, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise ValueError(f"{path} is not a directory of this user (uid {os.geteuid()}); remove it or pass another temp_root")
    return path


def acquire_slot(wait_s: float = SLOT_WAIT_S, *, lock_dir: Path | None = None, slots: int = SANDBOX_SLOTS) -> Slot:
    """Claim a sandbox uid for one run; the flock makes the claim hold across processes too.
    Raises SlotsBusy, with one line saying so, when every slot stayed taken for `wait_s` seconds.
    `lock_dir` and `slots` are for tests (default: the machine's directory, every slot)."""
    default = lock_dir is None
    lock_dir = slot_lock_dir() if lock_dir is None else own_directory(lock_dir, 0o700)
    legacy_dir = default and str(lock_dir) != LEGACY_SLOT_LOCK_DIR and _legacy_dir_usable()
    deadline = time.monotonic() + wait_s
    while True:
        for slot in range(slots):
            uid = SANDBOX_UID_BASE + slot
            if has_account(uid):
                continue
            fd = _try_lock(lock_dir / f"{slot}.lock")
            if fd is None:
                continue
            legacy = _try_lock(Path(LEGACY_SLOT_LOCK_DIR) / f"{slot}.lock") if legacy_dir else None
            if legacy_dir and legacy is None:
                os.close(fd)
                continue
            # A run of a crashed process may have left processes under this uid: end them. An
            # unreaped zombie would count against RLIMIT_NPROC, so such a slot is skipped.
            if kill_processes(lambda p, uid=uid: uid in uids(p)):
                release_slot(Slot(uid, uid, fd, legacy))
                continue
            return Slot(uid=uid, gid=uid, lock_fd=fd, legacy_fd=legacy)
        if time.monotonic() > deadline:
            raise SlotsBusy(f"every one of the {slots} sandbox slots ({lock_dir}) stayed taken for {wait_s:g}s: "
                            "another trainer on this machine holds them, or its runs hang; wait for it or stop it")
        time.sleep(0.05)


def release_slot(slot: Slot) -> None:
    os.close(slot.lock_fd)  # closing the descriptor drops the flock
    if slot.legacy_fd is not None:
        os.close(slot.legacy_fd)


def _try_lock(path: Path) -> int | None:
    """An exclusive flock on `path` (made if needed), or None when another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _legacy_dir_usable() -> bool:
    """Whether the earlier versions' lock directory is there and this user's (never made here)."""
    try:
        info = os.lstat(LEGACY_SLOT_LOCK_DIR)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()


def uids(process) -> tuple[int, ...]:
    import psutil

    try:
        return tuple(process.uids())
    except psutil.Error:  # gone, or unreadable
        return ()


def kill_processes(selected) -> int:
    """SIGKILL every process `selected(process)` picks, until none is left alive; returns how many
    zombies of them remain (dead, waiting for a parent that does not reap them)."""
    import psutil  # lazily: the launcher runs this file under `-S`, without site-packages

    deadline = time.monotonic() + _STOP_GRACE_S
    while True:
        alive, zombies = [], 0
        for process in psutil.process_iter():
            if process.pid == os.getpid() or not selected(process):
                continue
            try:
                if process.status() == psutil.STATUS_ZOMBIE:
                    zombies += 1
                    continue
                process.kill()
                alive.append(process)
            except psutil.Error:
                continue
        if not alive or time.monotonic() > deadline:
            return zombies
        psutil.wait_procs(alive, timeout=0.2)


def remove_strays(uid: int) -> None:
    """Remove what the sandbox user left in the world-writable directories (a dedicated uid owns
    nothing else there)."""
    for directory in {*_WORLD_WRITABLE_DIRS, tempfile.gettempdir()}:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    remove_tree(Path(entry.path))
                else:
                    os.unlink(entry.path)
            except OSError:
                continue


def sandbox_processes(temp_root: Path | None = None) -> list:
    """Processes sandboxes left behind; empty after every `run_tests` returns (for tests and
    diagnostics). Without `temp_root`: every process of a sandbox uid, zombies included. With it:
    those whose HOME lies under `temp_root` (runs made there, with or without a uid of their
    own), and any zombie of a sandbox uid (nothing should leave one, whoever ran it)."""
    import psutil

    sandbox_uids = range(SANDBOX_UID_BASE, SANDBOX_UID_BASE + SANDBOX_SLOTS)
    prefix = str(Path(temp_root).resolve()) + os.sep if temp_root is not None else None
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            of_sandbox_uid = any(uid in sandbox_uids for uid in uids(process))
            if prefix is None or (of_sandbox_uid and process.status() == psutil.STATUS_ZOMBIE):
                if of_sandbox_uid:
                    found.append(process)
            elif process.environ().get("HOME", "").startswith(prefix):
                found.append(process)
        except psutil.Error:
            continue
    return found


def remove_tree(path: Path) -> None:
    """Remove `path` whatever the run did to it (read-only directories, already deleted)."""

    def make_writable_and_retry(function, failed_path, _exc_info):
        try:
            os.chmod(os.path.dirname(failed_path), 0o700)
            if os.path.isdir(failed_path) and not os.path.islink(failed_path):
                os.chmod(failed_path, 0o700)
            function(failed_path)
        except FileNotFoundError:
            pass

    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, onerror=make_writable_and_retry)


def home_of(process) -> str | None:
    """HOME of one of our own processes (the marker of a run without a user of its own)."""
    import psutil

    try:
        return process.environ().get("HOME") if process.uids().real == os.getuid() else None
    except psutil.Error:
        return None


def count_own_tasks() -> int:
    """Processes and threads of this real uid: RLIMIT_NPROC counts threads too."""
    import psutil

    uid = os.getuid()
    count = 0
    for process in psutil.process_iter():
        try:
            if process.uids().real == uid:
                count += process.num_threads()
        except psutil.Error:
            continue
    return count
