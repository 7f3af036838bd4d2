"""The DuckDB store: connect (applying `schemas/*.sql`), and ingest run chunks idempotently.

The dashboard process is the store's only writer: it holds one connection for its lifetime and
runs `Ingestor` in a background thread. Without a dashboard, `python -m agentrl ingest` (or a
run's own exit) does the same, if it can take DuckDB's file lock. Queries live in queries.py.

Ingest is idempotent: each chunk's rows and its `ingested_files` entry commit in one
transaction, so a crash between the two cannot happen and a file is never taken twice. Rows go
in through Arrow (`INSERT ... BY NAME SELECT * FROM <arrow table>`), never row by row.

Faults stay where they are: a damaged run file or chunk costs that run or chunk, named once
(`ingest_errors`); a store that cannot be written (damaged, full disk, deleted under us) raises
one `StoreError` line and blames no chunk. An Ingestor's first pass puts back decisions from the
decisions log that the store lacks, so ingesting into a new store loses no review.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from agentrl.record.chunks import CHUNKS_DIR, LEGACY_GLOB, list_commits, sweep_uncommitted
from agentrl.record.rows import CHUNK_TABLES, RECORD_SCHEMA_VERSION, conform
from agentrl.record.rundir import DB_FILENAME, TERMINAL_STATUSES, RunDir, list_run_dirs, utc_now
from agentrl.record.runfiles import RunFileError, read_meta, read_status
from agentrl.store import decisions
from agentrl.store.db import (  # noqa: F401 - the errors are re-exported for callers
    StoreDamagedError,
    StoreError,
    StoreLockedError,
    connect,
    damaged,
    database_file,
    is_damage,
    rebuild_command,
)

MAX_FILES_PER_TRANSACTION = 2000  # bounds one ingest tick's latency when a backlog builds up


@dataclass(frozen=True)
class _Unit:
    """What one ingest transaction entry takes: a commit (every table of one flush) or a legacy part file."""

    key: str  # the ledger's name for it: <run_id>/chunks/<n>.commit or <run_id>/<table>/part-N.parquet
    marker: Path  # the file whose size and mtime identify it (the commit marker)
    files: tuple[tuple[str, Path], ...]


@dataclass
class IngestReport:
    files: int = 0
    rows: int = 0
    runs_synced: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    seconds: float = 0.0
    decisions: int = 0  # decisions put back from the decisions log (a rebuilt or deleted store)


def _parse_ts(value) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


class Ingestor:
    """Copies new chunks and run status into the store; safe to call from one thread at a time.

    Keeps in memory which files it has taken (seeded from `ingested_files`) and which ended runs
    are fully drained, so a tick on an idle runs directory costs a few directory listings.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, runs_dir: Path, log: Callable[[str], None] | None = None):
        self.con = con
        self.runs_dir = Path(runs_dir)
        self.log = log or (lambda message: print(message, file=sys.stderr))
        self._lock = threading.Lock()
        try:
            self._taken: set[str] = set()
            self._taken_markers: dict[str, set[str]] = {}  # run id -> commit marker names taken (never read again)
            self._mark_taken(row[0] for row in con.execute("SELECT path FROM ingested_files").fetchall())
            self._bad: dict[str, tuple[int, int]] = {
                row[0]: (row[1], row[2]) for row in con.execute("SELECT path, size, mtime_ns FROM ingest_errors").fetchall()
            }
        except duckdb.Error as error:  # a damaged store found on its first read
            raise _store_error(self.runs_dir, error) from None
        self._drained: set[str] = set()
        self._run_signatures: dict[str, tuple] = {}
        self._db_file = _identity(con)  # the file this connection has open, to notice it being deleted
        self._replayed = False

    def ingest(self) -> IngestReport:
        with self._lock:
            started = time.perf_counter()
            report = IngestReport()
            self._check_same_file()
            try:
                self._ingest(report)
            except duckdb.Error as error:
                # The store's fault (a damaged file, a full disk), never a chunk's: one StoreError
                # line, and the chunks stay on disk for the next tick.
                raise _store_error(self.runs_dir, error) from None
            report.seconds = time.perf_counter() - started
            return report

    def _ingest(self, report: IngestReport) -> None:
        if not self._replayed:  # once per Ingestor: a rebuilt or deleted store gets its decisions back
            report.decisions = decisions.replay(self.con)
            self._replayed = True
        for run in list_run_dirs(self.runs_dir):
            if run.run_id in self._drained:
                continue
            try:
                meta, status = read_meta(run), read_status(run) or {}
            except RunFileError as error:  # this run only; the others carry on
                self._bad_run_file(run, error, report)
                continue
            self._run_file_fixed(run)
            ended = status.get("status") in TERMINAL_STATUSES
            readable = self._sync_run(run, meta, status, report)
            new_units = self._new_units(run) if readable else []
            if new_units:
                self._ingest_units(new_units, report)
            # A run writes its terminal status only after its last flush, so the scan after it
            # has ended finds everything it will ever write; what a flush cut short by a kill
            # left (files no commit names) can go now that no writer runs.
            if ended:
                sweep_uncommitted(run.root)
                if not new_units:
                    self._drained.add(run.run_id)

    def _bad_run_file(self, run: RunDir, error: RunFileError, report: IngestReport) -> None:
        """Name a damaged run.json or status.json once (again only when the file changes)."""
        path = error.path
        key = f"{run.run_id}/{path.name}"
        try:
            stat = path.stat()
            signature = (stat.st_size, stat.st_mtime_ns)
        except OSError:
            signature = (None, None)
        if self._bad.get(key) != signature:
            self._record_bad(key, path, error.detail, report)

    def _run_file_fixed(self, run: RunDir) -> None:
        """A run file named as damaged was rewritten and reads again: its error no longer stands."""
        for path in (run.meta_path, run.status_path):
            key = f"{run.run_id}/{path.name}"
            if key not in self._bad:
                continue
            try:
                stat = path.stat()
            except OSError:
                continue
            if self._bad[key] != (stat.st_size, stat.st_mtime_ns):
                del self._bad[key]
                self.con.execute("DELETE FROM ingest_errors WHERE path = ?", [key])

    def _sync_run(self, run: RunDir, meta: dict | None, status: dict, report: IngestReport) -> bool:
        """Copy the run's record into `runs`; False when its record format cannot be read."""
        if meta is None:
            return False
        version = meta.get("record_schema_version", 1)
        if not isinstance(version, int) or not 1 <= version <= RECORD_SCHEMA_VERSION:
            marker = run.meta_path
            key = f"{run.run_id}/run.json"
            if key not in self._bad:
                self._record_bad(key, marker, f"run {run.run_id} was written with record schema {version!r}; this "
                                 f"agentrl reads schemas 1 to {RECORD_SCHEMA_VERSION}: upgrade agentrl to read it", report)
            return False
        signature = tuple(sorted((k, str(v)) for k, v in status.items()))
        if self._run_signatures.get(run.run_id) == signature:
            return True
        config = meta.get("config") or {}
        self.con.execute(
            """
            INSERT OR REPLACE INTO runs
                (run_id, name, kind, scorer, status, config, created_at, started_at, ended_at,
                 error, pid, total_steps, run_dir, record_schema_version)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """,
            [
                run.run_id,
                meta.get("name", run.run_id),
                meta.get("kind", config.get("kind", "tabular")),
                meta.get("scorer", config.get("scorer", "")),
                status.get("status", "queued"),
                json.dumps(config),
                _parse_ts(meta.get("created_at")) or utc_now(),
                _parse_ts(status.get("started_at")),
                _parse_ts(status.get("ended_at")),
                status.get("error"),
                status.get("pid"),
                meta.get("total_steps"),
                str(run.root),
                version,
            ],
        )
        self._run_signatures[run.run_id] = signature
        report.runs_synced += 1
        return True

    def _new_units(self, run: RunDir) -> list[_Unit]:
        """What the run has committed that the store has not taken: its commits, and the part
        files of a record-schema-1 run."""
        found = []
        for commit in list_commits(run.root, skip=self._taken_markers.get(run.run_id, ())):
            found.append(_Unit(f"{run.run_id}/{CHUNKS_DIR}/{commit.name}", commit.marker, tuple(commit.files.items())))
        for table in CHUNK_TABLES:
            for path in sorted((run.root / table).glob(LEGACY_GLOB)):
                found.append(_Unit(f"{run.run_id}/{table}/{path.name}", path, ((table, path),)))
        fresh = []
        for unit in found:
            if unit.key in self._taken:
                continue
            if unit.key in self._bad:
                try:
                    stat = unit.marker.stat()
                except OSError:
                    continue
                if self._bad[unit.key] == (stat.st_size, stat.st_mtime_ns):
                    continue  # still the same broken file
            fresh.append(unit)
        return fresh

    def _read(self, unit: _Unit, report: IngestReport) -> list[tuple[str, pa.Table]] | None:
        """Every table file of a unit, cast to its schema; None (and the unit named) if any fails."""
        try:
            if not unit.files:
                raise ValueError("the commit names no table file")
            tables = []
            for table, path in unit.files:
                with pq.ParquetFile(path) as parquet:  # one file: half the cost of read_table's dataset machinery
                    data = parquet.read()
                try:
                    # As the current schema: a column added since the chunk was written is null.
                    tables.append((table, conform(table, data)))
                except ValueError as error:
                    raise ValueError(f"{path.name}: {error}") from None
            return tables
        except Exception as error:  # any unreadable chunk is skipped, named, and remembered
            self._record_bad(unit.key, unit.marker, f"{type(error).__name__}: {error}", report)
            return None

    def _record_bad(self, key: str, path: Path, reason: str, report: IngestReport) -> None:
        try:
            stat = path.stat()
            size, mtime = stat.st_size, stat.st_mtime_ns
        except OSError:
            size, mtime = None, None
        self._bad[key] = (size, mtime)
        self.con.execute(
            "INSERT OR REPLACE INTO ingest_errors (path, size, mtime_ns, error, seen_at) VALUES (?, ?, ?, ?, ?)",
            [key, size, mtime, reason, utc_now()],
        )
        report.skipped.append((str(path), reason))
        self.log(f"ingest: skipped {path}: {reason}")

    def _check_same_file(self) -> None:
        """The file this connection writes must still be the store's file: deleted or replaced
        under a running dashboard, writing on would fill a database nobody will ever open."""
        if self._db_file is None:
            return
        path, identity = self._db_file
        try:
            stat = os.stat(path)
            current = (stat.st_dev, stat.st_ino)
        except OSError:
            current = None
        if current != identity:
            raise StoreReplacedError(
                f"the store {path} was deleted or replaced while this process had it open; nothing is lost "
                f"(runs' chunks and the decisions log are on disk): stop this dashboard, then "
                f"{rebuild_command(path.parent)} (or just restart the dashboard)")

    def _ingest_units(self, units: list[_Unit], report: IngestReport) -> None:
        for start in range(0, len(units), MAX_FILES_PER_TRANSACTION):
            batch = units[start : start + MAX_FILES_PER_TRANSACTION]
            loaded = [(unit, tables) for unit in batch if (tables := self._read(unit, report)) is not None]
            if not loaded:
                continue
            try:
                self._commit(loaded)
            except duckdb.Error as error:
                if not _chunks_fault(error):
                    raise _store_error(self.runs_dir, error) from None
                # One bad unit must not hold back the rest: retry them one by one.
                for item in loaded:
                    try:
                        self._commit([item])
                    except duckdb.Error as error:
                        if self._already_taken(item[0].key):
                            continue  # another Ingestor on this database took it first
                        if not _chunks_fault(error):
                            raise _store_error(self.runs_dir, error) from None
                        self._record_bad(item[0].key, item[0].marker, f"insert failed: {error}", report)
                        continue
                    report.files += 1
                    report.rows += sum(t.num_rows for _, t in item[1])
                continue
            report.files += len(loaded)
            report.rows += sum(t.num_rows for _, tables in loaded for _, t in tables)

    def _already_taken(self, key: str) -> bool:
        if self.con.execute("SELECT count(*) FROM ingested_files WHERE path = ?", [key]).fetchone()[0]:
            self._mark_taken([key])
            return True
        return False

    def _mark_taken(self, keys) -> None:
        for key in keys:
            self._taken.add(key)
            run_id, _, rest = key.partition("/")
            folder, _, name = rest.rpartition("/")
            if folder == CHUNKS_DIR:
                self._taken_markers.setdefault(run_id, set()).add(name)

    def _commit(self, loaded: list[tuple[_Unit, list[tuple[str, pa.Table]]]]) -> None:
        by_table: dict[str, list[pa.Table]] = {}
        for _, tables in loaded:
            for table, data in tables:
                by_table.setdefault(table, []).append(data)
        now = utc_now()
        ledger = pa.table(
            {
                "path": [unit.key for unit, _ in loaded],
                "table_name": [",".join(table for table, _ in tables) for _, tables in loaded],
                "run_id": [unit.key.split("/", 1)[0] for unit, _ in loaded],
                "rows": pa.array([sum(t.num_rows for _, t in tables) for _, tables in loaded], type=pa.int64()),
                "ingested_at": pa.array([now] * len(loaded), type=pa.timestamp("us")),
            }
        )
        cur = self.con.cursor()
        try:
            cur.execute("BEGIN TRANSACTION")
            for table, parts in by_table.items():
                chunk = pa.concat_tables(parts)
                cur.register("chunk_rows", chunk)
                # Table names come from CHUNK_TABLES, never from input.
                cur.execute(f"INSERT INTO {table} BY NAME SELECT * FROM chunk_rows")
                cur.unregister("chunk_rows")
            cur.register("ledger_rows", ledger)
            cur.execute("INSERT INTO ingested_files BY NAME SELECT * FROM ledger_rows")
            cur.unregister("ledger_rows")
            cur.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(duckdb.Error):  # a failed commit may have ended the transaction already
                cur.execute("ROLLBACK")
            raise
        finally:
            cur.close()
        self._mark_taken(unit.key for unit, _ in loaded)


class StoreReplacedError(StoreError):
    """The database file was deleted or replaced under an open connection."""


class StoreWriteError(StoreError):
    """The store could not be written (a full disk, an I/O error); the chunks wait on disk."""


# DuckDB errors that a chunk's own values cause (its rows are refused, the store is fine).
_CHUNK_FAULTS = (duckdb.ConversionException, duckdb.ConstraintException, duckdb.InvalidInputException,
                 duckdb.TypeMismatchException, duckdb.BinderException, duckdb.OutOfRangeException)


def _chunks_fault(error: duckdb.Error) -> bool:
    return isinstance(error, _CHUNK_FAULTS) and not is_damage(error)


def _store_error(runs_dir: Path, error: duckdb.Error) -> StoreError:
    path = Path(runs_dir) / DB_FILENAME
    if is_damage(error):
        return damaged(path, error)
    reason = " ".join(str(error).split())[:300]
    return StoreWriteError(f"the store {path} cannot be written ({reason}); nothing was lost: the runs' chunks "
                           f"stay on disk and are ingested once it can")


def _identity(con) -> tuple[Path, tuple[int, int]] | None:
    """The connection's database file and its (device, inode), to notice it being replaced."""
    file = database_file(con)
    try:
        stat = os.stat(file) if file is not None else None
    except OSError:
        return None
    return None if stat is None else (file, (stat.st_dev, stat.st_ino))


def ingest_once(runs_dir: Path, wait_s: float = 5.0) -> IngestReport:
    """Open the store, ingest everything pending, close. Raises StoreLockedError if held."""
    con = connect(runs_dir, wait_s=wait_s)
    try:
        return Ingestor(con, runs_dir).ingest()
    finally:
        con.close()


class BackgroundIngest:
    """The dashboard's ingest loop: `tick()` every `interval` seconds in a daemon thread, and at
    once when `wake()` (polled every `poll` seconds in between) says something new was committed.

    `tick` is given by the caller (it reconciles run liveness, then ingests), so this class
    only owns the thread and remembers the last error for the UI to show. `wake` is cheap by
    contract, such as `agentrl.store.watch.CommitWatch(runs_dir).changed`.
    """

    def __init__(self, tick: Callable[[], object], interval: float = 0.5, wake: Callable[[], bool] | None = None,
                 poll: float = 0.02):
        self.tick = tick
        self.interval = interval
        self.wake = wake
        self.poll = poll
        self.last_error: str | None = None
        self.last_tick_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="agentrl-ingest", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
                self.last_error = None
            except Exception as error:  # keep the loop alive; the UI shows the message
                # A StoreError is already one line saying what to do; anything else keeps its type.
                self.last_error = str(error) if isinstance(error, StoreError) else f"{type(error).__name__}: {error}"
                print(f"agentrl ingest loop: {self.last_error}", file=sys.stderr)
            self.last_tick_at = time.time()
            self._wait()

    def _wait(self) -> None:
        """Until the next regular tick, or sooner when `wake` says so."""
        if self.wake is None:
            self._stop.wait(self.interval)
            return
        deadline = time.monotonic() + self.interval
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or self._stop.wait(min(self.poll, left)):
                return
            try:
                if self.wake():
                    return
            except Exception as error:  # a failing watch must not stop ingest: fall back to the clock
                print(f"agentrl ingest wake-up: {type(error).__name__}: {error}", file=sys.stderr)
                self.wake = None
                self._stop.wait(max(0.0, deadline - time.monotonic()))
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
