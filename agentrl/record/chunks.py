"""The chunk protocol: how a run hands rows to the store without opening it.

A run buffers rows per table; a background thread flushes them about every second (sooner after
a step ends, and at close) as one **commit**:

```
<run_dir>/chunks/00000042.steps.parquet          one file per table with rows in this flush
<run_dir>/chunks/00000042.trajectories.parquet
<run_dir>/chunks/00000042.commit                 written last: {"tables": {"steps": 1, ...}}
```

Each file is written under a dot-prefixed temporary name, fsynced and renamed into place; the
commit marker is written the same way after every file of the flush is in place. Only a commit
marker makes a flush visible, and the store ingests a commit's files in one transaction. A run
given a chunks URL writes the same files there instead (`agentrl.record.locations`: a rename
where the filesystem has one, else one PUT per file, the marker last either way). With
`hold_steps` (a `Run` sets it) a flush takes a step's trajectories, action probabilities and
evaluations only once that step's `steps` row is buffered, so a timed flush that falls between
a step's first rows and its last cannot split it: a step's rows in every table become visible
together or not at all. A run killed mid-flush leaves table files without a marker, which
nothing reads (and `sweep_uncommitted` removes once no writer runs). A run killed with SIGKILL
loses at most its unflushed buffer: about a second of rows.

The caller never waits for the disk: `append` only buffers, and a full buffer wakes the flusher.
Behind a URL whose storage stops answering (a network cut, an endpoint restarting) the flusher
waits for storage instead of failing: it says so once (`on_storage`), keeps the commit it could
not finish and writes exactly that commit again, under the same number, until the storage
answers; so a commit the storage took before the answer was lost is rewritten identically, never
with other rows. `close()` waits up to `STORAGE_WAIT_S` for it before it gives up.
One writer per run folder: a `ChunkWriter` holds `<run_dir>/.writer.lock` (flock) while open, so two
processes (or two writers in one) can never number commits alike (`agentrl.record.writerlock`).
Only the store (`agentrl.store.ingest`) reads chunks back. Runs written before this layout (record
schema 1: `<run_dir>/<table>/part-NNNNN.parquet`) are still read by the store.

Commits are numbered without gaps (a writer starts at the highest complete commit + 1), which
lets the store look for the next number instead of listing the folder. A **compacted** commit
(`agentrl.store.compact`) holds every row of the commits it lists under `replaces` (ranges of
numbers); once its marker is visible those commits are superseded, and `list_commits` leaves
them out even if a compaction cut short left some of their files.
"""

from __future__ import annotations

import concurrent.futures.thread  # noqa: F401 - see _warm_up
import errno
import json
import os
import re
import threading
import time
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from agentrl.record.locations import RUN_FILES, ChunkFolder, LocalFolder, chunk_folder
from agentrl.record.rows import CHUNK_TABLES, to_arrow
from agentrl.record.writerlock import WRITER_LOCK, _claim, _release, _try_lock
from agentrl.record.writerlock import WriterBusyError, claim_run, release_run  # noqa: F401 - re-exported

FLUSH_INTERVAL_S = 1.0
SOON_INTERVAL_S = 0.05  # the shortest gap between two flushes a step's end can ask for
STORAGE_WAIT_S = 300.0  # how long close() waits for storage behind a URL that stopped answering
FLUSH_ROWS = 5000  # a buffer this large wakes the flusher at once, whatever the clock says
CHUNKS_DIR = "chunks"
COMMIT_SUFFIX = ".commit"
_COMMIT = re.compile(r"^(\d{8,})\.commit$")
LEGACY_GLOB = "part-*.parquet"  # record schema 1
STEP_TABLES = ("trajectories", "action_probs", "evals")  # rows that belong to a step and land with its row


def _step_of(row) -> int:
    step = row.get("step") if isinstance(row, dict) else getattr(row, "step", None)
    return step if isinstance(step, int) else 0


@dataclass(frozen=True)
class Commit:
    """One flush on disk: its number and the file of each table it holds (Paths in a local
    folder, URLs behind an fsspec one); a compacted commit also lists the numbers it replaces."""

    number: int
    marker: Path | str
    files: dict[str, Path | str]
    folder: ChunkFolder | None = None
    replaces: tuple[tuple[int, int], ...] = ()

    @property
    def name(self) -> str:
        return commit_number_name(self.number) + COMMIT_SUFFIX

    def file_name(self, table: str) -> str:
        return f"{commit_number_name(self.number)}.{table}.parquet"

    def read(self, table: str, columns: list[str] | None = None) -> pa.Table:
        """One table file of this commit, as written."""
        folder = self.folder or LocalFolder(Path(self.marker).parent)
        return folder.read_table(self.file_name(table), columns=columns)

    def supersedes(self, number: int) -> bool:
        return any(first <= number <= last for first, last in self.replaces)


def commit_number_name(number: int) -> str:
    return f"{number:08d}"


def marker_name(number: int) -> str:
    return commit_number_name(number) + COMMIT_SUFFIX


def commit_number(name: str) -> int | None:
    """The number of a commit marker's file name, or None for any other file."""
    match = _COMMIT.match(name)
    return int(match.group(1)) if match else None


def list_commits(run_dir: Path, after: int = -1, skip: Container[str] = (), folder: ChunkFolder | None = None) -> list[Commit]:
    """Complete commits of a run, in order; only those numbered above `after` when given, and
    none whose marker name is in `skip` (commits a reader already took: their markers are not read).
    Commits a visible compacted commit replaces are left out. `folder`: where the chunks are
    (default: where the run's run.json says, else `<run_dir>/chunks`)."""
    commits = scan_commits(folder if folder is not None else chunk_folder(run_dir), after, skip)
    return superseded_out(commits)


def scan_commits(folder: ChunkFolder, after: int = -1, skip: Container[str] = ()) -> list[Commit]:
    """Every complete commit of a chunk folder (one listing), superseded or not, in order."""
    found = []
    for name in folder.names():
        number = commit_number(name)
        if number is None or number <= after or name in skip:
            continue
        found.append(number)
    found.sort()
    return [read_commit(folder, number) for number in found]


def read_commit(folder: ChunkFolder, number: int) -> Commit:
    """The commit numbered `number` of a folder, its marker read (an unreadable marker names no file;
    the store reports it)."""
    name = marker_name(number)
    tables, replaces = {}, ()
    try:
        text = folder.read_text(name)
    except FileNotFoundError:
        text = None
    except OSError:
        if folder.remote:  # behind a URL: the network, not the marker; the reader tries again later
            raise ChunkFolderUnreachable(f"{folder.locate(name)} cannot be read now") from None
        text = None
    try:
        payload = json.loads(text) if text is not None else {}
        tables = payload.get("tables", {})
        replaces = _ranges(payload.get("replaces", ()))
        if not isinstance(tables, dict):
            raise ValueError("tables is not an object")
    except (ValueError, AttributeError, TypeError):
        tables, replaces = {}, ()
    prefix = commit_number_name(number)
    files = {table: folder.locate(f"{prefix}.{table}.parquet") for table in tables if table in CHUNK_TABLES}
    return Commit(number, folder.locate(name), files, folder, replaces)


class ChunkFolderUnreachable(OSError):
    """A chunk folder behind a URL could not be read just now (a network or permission error):
    nothing is wrong with the commit, and it is read again later."""


def _ranges(value) -> tuple[tuple[int, int], ...]:
    ranges = []
    for item in value or ():
        first, last = item  # ValueError/TypeError: a damaged marker
        if not (isinstance(first, int) and isinstance(last, int)) or first > last:
            raise ValueError(f"bad range {item!r}")
        ranges.append((first, last))
    return tuple(ranges)


def as_ranges(numbers) -> list[list[int]]:
    """Sorted numbers as [first, last] ranges of consecutive numbers (what `replaces` holds)."""
    ranges: list[list[int]] = []
    for number in sorted(numbers):
        if ranges and number == ranges[-1][1] + 1:
            ranges[-1][1] = number
        else:
            ranges.append([number, number])
    return ranges


def superseded_out(commits: list[Commit]) -> list[Commit]:
    """`commits` without those a later compacted commit among them replaces."""
    compacted = [c for c in commits if c.replaces]
    if not compacted:
        return commits
    return [c for c in commits if not any(k.number > c.number and k.supersedes(c.number) for k in compacted)]


def read_commit_files(marker: Path) -> dict[str, Path]:
    """The table files a local commit marker names (an unreadable marker names none; the store reports it)."""
    number = commit_number(Path(marker).name)
    if number is None:
        return {}
    return read_commit(LocalFolder(Path(marker).parent), number).files


def chunk_files(run_dir: Path, table: str) -> list[Path | str]:
    """Every committed file of one table, in commit order (and a record-schema-1 run's part files)."""
    files = [c.files[table] for c in list_commits(run_dir) if table in c.files]
    return files + sorted((Path(run_dir) / table).glob(LEGACY_GLOB))


def sweep_uncommitted(run_dir: Path, folder: ChunkFolder | None = None) -> list[Path | str]:
    """Remove temporary files and table files of flushes that never wrote their commit marker
    (a flush cut short by a kill). A file whose flush has a marker stays, even when the marker
    cannot be read: the store names that commit instead.

    Call it only when no writer is running on the run (its next flush may be half written); while
    a process holds the run's writer lock (a writer, or a compaction) it removes nothing.
    """
    folder = folder if folder is not None else chunk_folder(run_dir)
    guard = _try_lock(Path(run_dir))
    if guard is False:
        return []  # someone writes this run right now
    try:
        names = folder.names()
        committed = {match.group(1) for name in names if (match := _COMMIT.match(name))}
        removed = []
        for name in names:
            if name.split(".", 1)[0] in committed or name == WRITER_LOCK or name in RUN_FILES:
                continue
            if folder.remove(name):
                removed.append(folder.locate(name))
        return removed
    finally:
        _release(guard if isinstance(guard, int) else None)


def _write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)  # atomic: readers see the whole file or nothing


class ChunkWriter:
    """Buffers rows per table; a background thread writes them as commits.

    Thread-safe: the run's threads append while the flusher writes. `flush_soon()` asks for a
    flush within `SOON_INTERVAL_S` (a step ended); `flush()` writes now, in the calling thread;
    `close()` (or the context manager) stops the thread and writes what is left. `on_flush`
    runs in the flusher once an interval, after a flush (the run's hardware sample and status);
    `prepare` turns the buffered rows into what `to_arrow` takes (the run's checks of dict rows).
    """

    def __init__(self, run_dir: Path, interval: float = FLUSH_INTERVAL_S, on_flush: Callable[[], None] | None = None,
                 run_id: str | None = None, prepare: Callable[[dict[str, list]], dict[str, list]] | None = None,
                 hold_steps: bool = False, folder: ChunkFolder | None = None,
                 on_storage: Callable[[OSError | None], None] | None = None):
        self.run_dir = Path(run_dir)
        # Where the commits go: the run folder's chunks/ (plain os calls), or a chunks URL.
        self.folder = folder if folder is not None else chunk_folder(self.run_dir)
        self.run_id = run_id or self.run_dir.name
        self.interval = interval
        self.on_flush = on_flush
        self.prepare = prepare  # in the flush, before writing: the buffered rows as the tables take them
        self.on_storage = on_storage  # told once when storage behind a URL stops answering (the error), and None when it is back
        self.waiting_since: float | None = None  # monotonic time storage stopped answering, while it does not
        self._unsent: tuple[int, dict[str, list]] | None = None  # a commit the storage did not confirm
        # With hold_steps, rows of STEP_TABLES wait for their step's `steps` row (step 0, the
        # starting policy, has none and is never held); close() writes whatever is left.
        self.hold_steps = hold_steps
        self._done_step = 0  # the highest step whose `steps` row is buffered or written
        self._buffers: dict[str, list] = {table: [] for table in CHUNK_TABLES}
        self._lock = threading.Lock()  # guards the buffers
        self._flush_lock = threading.Lock()  # one flush at a time, so commits land in order
        self._last_flush = time.monotonic()
        self._last_tick = time.monotonic()
        self._next = max((c.number for c in list_commits(self.run_dir, folder=self.folder)), default=-1) + 1
        self._soon = threading.Event()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self.flush_latencies_s: list[float] = []  # wall time of each commit, for the benchmark
        self._lock_fd = _claim(self.run_dir)  # one writer per run folder, or commits would collide
        self._thread = threading.Thread(target=self._loop, name="chunk-flusher", daemon=True)
        self._thread.start()

    @property
    def error(self) -> BaseException | None:
        return self._error

    def append(self, table: str, rows: Sequence | object) -> None:
        """Buffer rows (records of `table`, or rows `prepare` makes into them). Never writes to disk."""
        if self._error is not None:
            raise FlushError(f"chunk flusher failed: {self._error}") from self._error
        rows = rows if isinstance(rows, (list, tuple)) else [rows]
        with self._lock:
            buffer = self._buffers[table]
            buffer.extend(rows)
            if table == "steps" and rows:  # under the same lock: the step and its rows become flushable at once
                self._done_step = max(self._done_step, max(_step_of(row) for row in rows))
            large = len(buffer) >= FLUSH_ROWS
        if large:
            self._soon.set()

    def flush_soon(self) -> None:
        """Ask the flusher to write within `SOON_INTERVAL_S` (returns at once)."""
        if not self._soon.is_set():  # setting it again would take its lock for nothing
            self._soon.set()

    def flush(self, final: bool = False) -> Path | str | None:
        """Write the buffered rows as one commit now (with `hold_steps`, rows of a step whose
        `steps` row is not buffered yet wait, unless `final`); returns its marker, or None when
        nothing was written."""
        with self._flush_lock:
            self._last_flush = time.monotonic()
            return self._flush(final)

    def _take(self, final: bool) -> dict[str, list]:
        """Take what this flush writes out of the buffers (the caller holds the lock)."""
        pending = {}
        for table, rows in self._buffers.items():
            if not rows:
                continue
            if self.hold_steps and not final and table in STEP_TABLES:
                ready = [row for row in rows if _step_of(row) <= self._done_step]
                if len(ready) < len(rows):
                    self._buffers[table] = [row for row in rows if _step_of(row) > self._done_step]
                    if ready:
                        pending[table] = ready
                    continue
            pending[table] = rows
            self._buffers[table] = []
        return pending

    def _flush(self, final: bool = False) -> Path | str | None:
        marker = None
        if self._unsent is not None:  # first the commit storage did not confirm: the same rows, the same number
            marker = self._write(*self._unsent)
        with self._lock:
            pending = self._take(final)
        if pending and self.prepare is not None:
            pending = self.prepare(pending)  # the run's row checks, off the caller's path
        if not pending:
            return marker
        return self._write(self._next, pending)

    def _write(self, number: int, pending: dict[str, list]) -> Path | str:
        started = time.perf_counter()
        prefix = commit_number_name(number)
        folder = self.folder
        try:
            if not self.run_dir.is_dir():  # removed under the run: never made again, half empty
                raise FileNotFoundError(errno.ENOENT, "the run folder was removed", str(self.run_dir))
            folder.makedirs()
            for table, rows in pending.items():
                self._put(f"{prefix}.{table}.parquet", to_arrow(table, rows, run_id=self.run_id))
            payload = json.dumps({"tables": {table: len(rows) for table, rows in pending.items()}})
            self._put(marker_name(number), payload)  # last: only now is the flush visible
            folder.sync()
            marker = folder.locate(marker_name(number))
        except OSError as error:
            if folder.remote and not getattr(folder, "local", False):
                # Storage behind a URL did not answer: it may have taken some files (even the
                # marker) before the answer was lost, so this commit is written again as it is.
                self._unsent = (number, pending)
                self._next = max(self._next, number + 1)
                self._storage(error)
            else:
                self._put_back(number, pending)
            raise
        except BaseException:
            self._put_back(number, pending)
            raise
        if self._unsent is not None and self._unsent[0] == number:
            self._unsent = None
        self._next = max(self._next, number + 1)
        self._storage(None)
        self.flush_latencies_s.append(time.perf_counter() - started)
        return marker

    def _put_back(self, number: int, pending: dict[str, list]) -> None:
        """Keep the rows for the next attempt (a full disk may have room again), ahead of newer ones."""
        with self._lock:
            for table, rows in pending.items():
                self._buffers[table][:0] = rows

    def storage_failed(self, error: OSError) -> None:
        """Storage behind the URL failed another call of the run (its status file): the run waits
        for it as for a commit, until the next commit goes through."""
        if self.folder.remote and not getattr(self.folder, "local", False):
            self._storage(error)

    def _storage(self, error: OSError | None) -> None:
        """Say once that storage stopped answering, and once that it is back."""
        if (error is not None) == (self.waiting_since is not None):
            return
        self.waiting_since = time.monotonic() if error is not None else None
        if self.on_storage is not None:
            try:
                self.on_storage(error)
            except Exception:  # noqa: BLE001 - saying so must not stop the flusher
                pass

    def _put(self, name: str, data: pa.Table | str) -> None:
        """One file of a commit, published atomically: in a local folder exactly as always
        (temporary name, fsync, rename), else through the chunk folder (a rename or one PUT)."""
        if isinstance(self.folder, LocalFolder):
            path = self.folder.path / name
            if isinstance(data, str):
                _write_atomic(path, lambda tmp: tmp.write_text(data))
            else:
                _write_atomic(path, lambda tmp: pq.write_table(data, tmp))
        elif isinstance(data, str):
            self.folder.write_text(name, data)
        else:
            self.folder.write_table(name, data)

    def _loop(self) -> None:
        _warm_up()
        while not self._stop.is_set():
            woken = self._soon.wait(self.interval)
            if self._stop.is_set():
                return
            if woken:
                # A step ended: flush soon, but never more often than SOON_INTERVAL_S.
                gap = SOON_INTERVAL_S - (time.monotonic() - self._last_flush)
                if gap > 0 and self._stop.wait(gap):
                    return
                self._soon.clear()
            try:
                try:
                    self.flush()
                except OSError:
                    if self.waiting_since is None:
                        raise
                    continue  # storage behind the URL does not answer: the same commit again next interval
                # The timed work (a hardware sample, the status) runs once an interval, even when
                # steps end faster than that and every flush is an early one; after the flush, so
                # a step's rows never wait for it (its sample goes out with the next flush).
                if self.on_flush is not None and time.monotonic() - self._last_tick >= self.interval:
                    self._last_tick = time.monotonic()
                    self.on_flush()
            except BaseException as error:  # surfaced to the run on its next append and at close
                self._error = error
                return

    def close(self) -> None:
        self._stop.set()
        self._soon.set()
        self._thread.join(timeout=30)
        try:
            deadline = time.monotonic() + STORAGE_WAIT_S
            while True:
                try:
                    self.flush(final=True)
                    break
                except OSError:
                    if self.waiting_since is None or time.monotonic() > deadline:
                        raise
                    time.sleep(1.0)
        finally:
            _release(self._lock_fd)
            self._lock_fd = None
        if self._error is not None:
            raise FlushError(f"chunk flusher failed: {self._error}") from self._error

    def __enter__(self) -> ChunkWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class FlushError(OSError):
    """The background flusher could not write a commit (a full disk, an I/O error), so rows
    logged since are not recorded. An OSError: the machine's fault, said in one line, not a traceback."""


def _warm_up() -> None:
    """pyarrow imports pandas on its first conversion (about a second on two busy cores): let the
    flusher pay that as it starts, not the first flush after a step. Whatever that import
    registers at interpreter exit is imported up front (`concurrent.futures.thread`, above), so a
    script that ends before the flusher's first write can still flush while Python shuts down."""
    try:
        pa.array([0.0])
    except Exception:  # the real flush will report whatever is wrong
        pass
