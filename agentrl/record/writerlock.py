"""One writer per run folder: the flock on `<run_dir>/.writer.lock` that a chunk writer or a compaction holds.

Launch -> run process -> chunks (**writerlock**: who may write them) -> store -> page. A
`ChunkWriter` (`agentrl.record.chunks`) claims the run folder's lock while open, so two
processes (or two writers in one) can never number commits alike; a compaction
(`agentrl.store.compact`) holds it while it rewrites a run's chunks, and `sweep_uncommitted`
removes nothing while anyone holds it. The kernel releases the lock when its holder dies, so a
killed run never blocks the next writer. Where flock is missing (not POSIX) there is no guard.
"""

from __future__ import annotations

import os
from pathlib import Path

WRITER_LOCK = ".writer.lock"  # in the run folder: held (flock) by the one process writing its chunks


class WriterBusyError(RuntimeError):
    """Another writer (a second process, or a second open writer in this one) holds the run folder."""


def _claim(run_dir: Path) -> int | None:
    """Take the run folder's writer lock, or say who holds it. The kernel drops the lock when its
    holder dies, so a killed run never blocks the next writer. None where flock is missing."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no guard
        return None
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / WRITER_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise WriterBusyError(f"run {run_dir.name} is already being written (by pid {holder}); one writer per run: "
                              "open it once (agentrl.init returns the run already open in this process)") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def claim_run(run_dir: Path) -> int | None:
    """Take a run folder's writer lock (WriterBusyError while a writer holds it): what a
    compaction holds, so no writer starts and no sweep runs while it rewrites the run's chunks."""
    return _claim(Path(run_dir))


def release_run(fd: int | None) -> None:
    _release(fd)


def _try_lock(run_dir: Path) -> int | None | bool:
    """The writer lock taken without waiting: its fd, None when there is none to take (no lock
    file, or no flock here: nobody can be writing through it), False while someone holds it."""
    try:
        import fcntl
    except ImportError:
        return None
    try:
        fd = os.open(run_dir / WRITER_LOCK, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    except OSError:
        os.close(fd)
        return None
    return fd


def _release(fd: int | None) -> None:
    if fd is None:
        return
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
