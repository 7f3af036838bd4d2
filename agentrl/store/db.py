"""The DuckDB file: open it (creating it and applying `schemas/*.sql`), or say in one line why not.

Store -> **db**. DuckDB locks its file per process, so the dashboard holds the one read-write
connection for its lifetime; a CLI command that finds it held waits a few seconds, then says so
(`StoreLockedError`). The dashboard also holds a lock on the runs directory itself
(`hold_runs_dir`): a file lock dies with a deleted file, so without it a command run after
someone deleted `agentrl.duckdb` under a running dashboard would create a second database.

A file DuckDB cannot open (truncated, garbage, a block whose checksum fails) is named with the
command that recreates it from the runs' chunks and the decisions log (`StoreDamagedError`).
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import contextlib
import time
from pathlib import Path

import duckdb

from agentrl.paths import SCHEMAS_DIR
from agentrl.record.rundir import DB_FILENAME, utc_now


Con = duckdb.DuckDBPyConnection  # a connection or a cursor: every query takes one


class StoreError(RuntimeError):
    """The store cannot be used right now; the message says why and what to do, on one line."""


class StoreLockedError(StoreError):
    """Another process (usually the dashboard) holds the database."""


class StoreDamagedError(StoreError):
    """The database file is damaged; the message names it and the command that rebuilds it."""


# Words DuckDB uses when a file is not a database it can read (as opposed to a busy or absent one).
_DAMAGE_MARKERS = ("not a valid duckdb database", "corrupt", "checksum", "could not read enough bytes",
                   "database has been invalidated")


def rebuild_command(runs_dir: Path) -> str:
    return f"python -m agentrl rebuild --runs-dir {runs_dir}"


def damaged(path: Path, reason: object) -> StoreDamagedError:
    first = " ".join(str(reason).split())[:200]
    return StoreDamagedError(f"the store {path} is damaged ({first}); rebuild it from the runs' chunks and "
                             f"the decisions log: {rebuild_command(Path(path).parent)}")


def is_damage(error: BaseException) -> bool:
    """Whether a DuckDB error says the file itself is damaged (a full disk is not damage, even when
    DuckDB invalidated the database after a checkpoint it had no room for)."""
    text = str(error).lower()
    return (isinstance(error, duckdb.Error) and any(marker in text for marker in _DAMAGE_MARKERS)
            and not is_full_disk(error))


# How a write that found no room reads: errno 28 (ENOSPC) or 122 (EDQUOT), in DuckDB's words or Python's.
_FULL_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_FULL_DISK_MARKERS = tuple(os.strerror(e).lower() for e in _FULL_DISK_ERRNOS)


def is_full_disk(error: BaseException) -> bool:
    """Whether an error is a write that found the disk (or the user's quota) full."""
    if isinstance(error, OSError) and error.errno in _FULL_DISK_ERRNOS:
        return True
    text = str(error).lower()
    return any(marker in text for marker in _FULL_DISK_MARKERS)


def full_disk_first(message: str) -> str:
    """A refusal whose cause is a full disk says so first, whichever module wrote the message."""
    if is_full_disk(Exception(message)) and not message.startswith("the disk is full"):
        return f"the disk is full: {message}"
    return message


def is_invalidated(error: BaseException) -> bool:
    """Whether DuckDB gave up on the open database after a fatal error (a checkpoint on a full
    disk): every query fails until each connection to it is closed and the file opened again."""
    return isinstance(error, duckdb.Error) and "database has been invalidated" in str(error).lower()


def full_disk(path: Path) -> StoreFullError:
    return StoreFullError(f"the disk is full: the store {path} cannot be written (free some space on it); nothing was "
                          f"lost: the runs' chunks stay on disk and are ingested once there is room")


def database_file(con) -> Path | None:
    """The file a connection (or cursor) has open; None for an in-memory database."""
    for _, name, file in con.execute("PRAGMA database_list").fetchall():
        if name not in ("system", "temp") and file:
            return Path(file)
    return None


def file_identity(con) -> tuple[Path, tuple[int, int]] | None:
    """The connection's database file and its (device, inode), to notice it being replaced."""
    file = database_file(con)
    try:
        stat = os.stat(file) if file is not None else None
    except OSError:
        return None
    return None if stat is None else (file, (stat.st_dev, stat.st_ino))


def apply_schema(con: duckdb.DuckDBPyConnection) -> None:
    for ddl in sorted(SCHEMAS_DIR.glob("*.sql")):
        con.execute(ddl.read_text())
    migrate(con)


def migrate(con: duckdb.DuckDBPyConnection) -> None:
    """Fill what a store made by an older agentrl lacks, once each (`store_migrations` remembers):
    `step_components`, `step_tallies`, the trajectories' behaviours with `step_behaviours`,
    `run_behaviours` and `behaviour_actions`, from the stored trajectories, and the behaviours'
    numbers in `step_behaviours`. A new store has nothing to fill."""
    from agentrl.store.queries.ledger import MIGRATIONS, backfill, migration_applied

    for name in MIGRATIONS:
        if migration_applied(con, name):
            continue
        with transaction(con) as cur:
            backfill(cur, name, utc_now())


class StoreWriteError(StoreError):
    """The store could not be written (an I/O error); the chunks wait on disk."""


class StoreFullError(StoreWriteError):
    """The disk holding the store is full; nothing is lost, the chunks wait on disk."""


# DuckDB errors that a chunk's own values cause (its rows are refused, the store is fine).
CHUNK_FAULTS = (duckdb.ConversionException, duckdb.ConstraintException, duckdb.InvalidInputException,
                 duckdb.TypeMismatchException, duckdb.BinderException, duckdb.OutOfRangeException)


def chunk_fault(error: duckdb.Error) -> bool:
    """Whether DuckDB refused a chunk's rows for their values (the store itself is fine)."""
    return isinstance(error, CHUNK_FAULTS) and not is_damage(error)


def store_error(runs_dir: Path, error: duckdb.Error) -> StoreError:
    """A DuckDB error of writing the store as one StoreError line (damaged, or cannot be written)."""
    path = Path(runs_dir) / DB_FILENAME
    if is_full_disk(error):
        return full_disk(path)
    if is_damage(error):
        return damaged(path, error)
    reason = " ".join(str(error).split())[:300]
    return StoreWriteError(f"the store {path} cannot be written ({reason}); nothing was lost: the runs' chunks "
                           f"stay on disk and are ingested once it can")


# --- the runs-directory lock --------------------------------------------------------------------

_held: dict[str, int] = {}  # runs dir (real path) -> the fd whose flock this process holds
_held_lock = threading.Lock()


def _key(runs_dir: Path) -> str:
    return os.path.realpath(runs_dir)


def hold_runs_dir(runs_dir: Path) -> None:
    """Take the runs directory for this process (the dashboard, for its lifetime); StoreLockedError
    if another process holds it. Where the file system has no flock, DuckDB's own lock is all."""
    key = _key(runs_dir)
    with _held_lock:
        if key in _held:
            return
        fd = os.open(key, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise _held_elsewhere(runs_dir) from None
        except OSError:
            os.close(fd)
            return
        _held[key] = fd


def release_runs_dir(runs_dir: Path) -> None:
    with _held_lock:
        fd = _held.pop(_key(runs_dir), None)
    if fd is not None:
        os.close(fd)  # closing the descriptor drops the flock


def runs_dir_held_elsewhere(runs_dir: Path) -> bool:
    """True when another process holds the runs directory (a probe: nothing is kept)."""
    key = _key(runs_dir)
    with _held_lock:
        if key in _held:
            return False
    try:
        fd = os.open(key, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # also drops the probe's shared lock
    return False


def _held_elsewhere(runs_dir: Path) -> StoreLockedError:
    path = Path(runs_dir) / DB_FILENAME
    return StoreLockedError(f"{path} is held by another process (is the dashboard running? it ingests runs itself)")


# --- connecting ---------------------------------------------------------------------------------


def connect(runs_dir: Path, wait_s: float = 5.0, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open `<runs_dir>/agentrl.duckdb` (creating it and applying the DDL, unless `read_only`).

    Retries for `wait_s` while another process holds it (a run ingesting at its exit holds it for
    well under a second), then raises StoreLockedError; a damaged file raises StoreDamagedError.
    `read_only` needs no write access to the runs directory and applies no DDL.
    """
    path = Path(runs_dir) / DB_FILENAME
    if os.path.lexists(path) and not path.is_file():
        raise not_a_store(path)
    created = not path.exists()  # a file this call makes and cannot finish is removed again
    deadline = time.monotonic() + wait_s
    while True:
        if runs_dir_held_elsewhere(runs_dir):
            error: Exception = _held_elsewhere(runs_dir)
        else:
            try:
                con = duckdb.connect(str(path), read_only=read_only)
                break
            except duckdb.Error as caught:
                if "lock" not in str(caught).lower() or is_full_disk(caught):
                    raise _opening_error(path, caught, created) from None
                error = _held_elsewhere(runs_dir)
        if time.monotonic() >= deadline:
            raise error from None
        time.sleep(0.1)
    if not read_only:
        try:
            apply_schema(con)
        except duckdb.Error as caught:
            con.close()
            raise _opening_error(path, caught, created) from None
    return con


class StoreNotAFileError(StoreError):
    """Something other than a DuckDB file (a directory) has the store's name."""


def not_a_store(path: Path) -> StoreNotAFileError:
    kind = "a directory" if path.is_dir() else "not a regular file"
    return StoreNotAFileError(f"{path} is {kind}, not the store; move it elsewhere, then "
                              f"`python -m agentrl ingest --runs-dir {path.parent}` creates the store from the runs' chunks")


def _opening_error(path: Path, error: duckdb.Error, created: bool) -> StoreError:
    """Why the store could not be opened, as one StoreError line. A file this call created and
    could not finish (a full disk) is removed: a 0-byte store would read as damaged later."""
    if created and is_full_disk(error):
        for leftover in (path, path.with_name(f"{path.name}.wal")):
            with contextlib.suppress(OSError):
                leftover.unlink()
    if is_full_disk(error):
        return full_disk(path)
    if is_damage(error):
        return damaged(path, error)
    reason = " ".join(str(error).split())[:300]
    return StoreError(f"the store {path} cannot be opened ({reason})")


@contextlib.contextmanager
def transaction(con: Con):
    """A cursor of `con` inside one transaction: committed at the end, rolled back on any error."""
    cur = con.cursor()
    try:
        cur.execute("BEGIN TRANSACTION")
        yield cur
        cur.execute("COMMIT")
    except BaseException:
        cur.execute("ROLLBACK")
        raise
    finally:
        cur.close()
